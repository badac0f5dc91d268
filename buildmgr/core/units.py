"""Sizes and their units, one table: binary units (KiB = 2^10 bytes) and decimal ones (KB = 10^3 bytes)."""

MIB = 1 << 20
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30, "TiB": 1 << 40, "KB": 10**3, "MB": 10**6, "GB": 10**9}
