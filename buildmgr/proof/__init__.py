"""Proof that a build works: the File API proof (every requested backend is linked), the smoke run of real weight types, and what a crash or host fault means."""
