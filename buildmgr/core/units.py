"""Sizes and their units, one table: binary units (KiB = 2^10 bytes) and decimal ones (KB = 10^3 bytes), as
llama.cpp, ggml, Ollama and a user spell them."""

from __future__ import annotations

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
MB_PER_MIB = MIB / 10**6  # 1.048576: a MiB/s figure in decimal MB/s

# each unit as printed, in bytes
UNITS = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": TIB, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
# a bare letter is binary, as ggml's scheduler prints `512K` and a user writes `--memory CUDA0=24G`
LETTERS = {"K": KIB, "M": MIB, "G": GIB, "T": TIB}
_ANY_CASE = {unit.lower(): size for unit, size in (UNITS | LETTERS).items()}


def unit_bytes(unit: str, any_case: bool = False) -> int | None:
    """The bytes of one `unit` (`GiB`, `MB`, `G`); with `any_case`, as a user may type it (`gib`, `g`); None where it
    is no unit."""
    if any_case:
        return _ANY_CASE.get(unit.lower())
    return UNITS.get(unit, LETTERS.get(unit))
