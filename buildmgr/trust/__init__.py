"""Who is trusted: minisign signing, the keyring and its pins, one spelling per repository location."""
