"""Primitives and records every stage shares: errors, JSON shapes, files, processes, settings, progress, this host's facts, device and crash records."""
