"""The GPU code in a CUDA build: the SASS (`sm_*`) and PTX (`compute_*`) in `.nv_fatbin`, and what the GPUs here make
of it."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from buildmgr.backends.cuda import NAME
from buildmgr.backends.cuda.smi import visible_capabilities
from buildmgr.core.findings import Finding, Severity

_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_PTX, _FATBIN_ELF = 1, 2


def fatbin_archs(data: bytes) -> tuple[set[int], set[int]]:
    """(SASS archs, PTX archs) of every fat binary container in a `.nv_fatbin` section.

    Layout (as cuobjdump reads it): a 16-byte header (magic, version, header size, size of what follows), then
    entries of `kind u16, version u16, header_size u32, payload_size u64, …, arch u32 at +28`, each followed by its
    payload.
    """
    sass: set[int] = set()
    ptx: set[int] = set()
    offset = 0
    while offset + 16 <= len(data):
        magic, _, header_size, size = struct.unpack_from("<IHHQ", data, offset)
        if magic != _FATBIN_MAGIC:
            offset += 8  # containers are 8-byte aligned; padding between them is skipped
            continue
        entry, end = offset + header_size, min(offset + header_size + size, len(data))
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if entry_header == 0:
                break
            {_FATBIN_ELF: sass, _FATBIN_PTX: ptx}.get(kind, set()).add(arch)
            entry += entry_header + payload
        offset = max(end, offset + 16)
        offset += -offset % 8
    return sass, ptx


def fatbin_codes(data: bytes) -> set[str]:
    """`sm_*` (SASS) and `compute_*` (PTX) in a `.nv_fatbin` section."""
    sass, ptx = fatbin_archs(data)
    return {f"sm_{a}" for a in sass} | {f"compute_{a}" for a in ptx}


def code_order(code: str) -> tuple[bool, int]:
    """`sm_90` → (False, 90): SASS first, then PTX (`compute_90` → (True, 90)), each by capability."""
    kind, number = code.split("_", 1)
    return kind == "compute", int(number.rstrip("af"))


def kernel_findings(codes: Sequence[str], capabilities: list[str]) -> list[Finding]:
    """A finding per GPU capability that this build's code (`sm_*` SASS, `compute_*` PTX) has no machine code for.

    SASS for sm_XY runs on X.Y and newer minors of the same major; PTX for compute_XY is JIT-compiled by the driver
    on any GPU of at least X.Y; with neither, CUDA fails with "no kernel image is available".
    """
    parsed = [code_order(code) for code in codes]
    have_sass = [number for is_ptx, number in parsed if not is_ptx]
    have_ptx = [number for is_ptx, number in parsed if is_ptx]
    findings = []
    for capability in capabilities:
        major, minor = (int(part) for part in capability.split("."))
        number = major * 10 + minor
        if any(s // 10 == major and s <= number for s in have_sass):
            continue
        jit = [p for p in have_ptx if p <= number]
        built = ", ".join(codes) or "no CUDA code"
        if jit:
            findings.append(
                Finding(
                    Severity.WARNING,
                    NAME,
                    f"a GPU of compute capability {capability} has no sm_{number} code in this build ({built}); "
                    f"the driver will JIT-compile compute_{max(jit)} PTX at first use (a slow first start, cached in "
                    f"~/.nv/ComputeCache)",
                    f"build with --sm {number} for native code",
                )
            )
        else:
            findings.append(
                Finding(
                    Severity.ERROR,
                    NAME,
                    f"a GPU of compute capability {capability} can run nothing in this build ({built}): CUDA "
                    f"would fail with 'no kernel image is available'",
                    f"build with --sm {number}",
                )
            )
    return findings


def host_findings(codes: Sequence[str], environ: Mapping[str, str]) -> list[Finding]:
    """`kernel_findings` for the GPUs CUDA sees here."""
    return kernel_findings(codes, visible_capabilities(environ))
