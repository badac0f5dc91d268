"""`--gfx`: AMD GPU targets resolved here (this host's GPUs when none is named), each checked against what ROCm's clang
compiles and what rocBLAS has kernels for; for a CI runner; and given back from a receipt's defines."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from buildmgr.backend_spec import Host
from buildmgr.backends.hip import gfx_key
from buildmgr.backends.hip.device_code import visible_targets
from buildmgr.backends.hip.preflight import Rocm, find_rocm, rocblas_targets
from buildmgr.core import proc
from buildmgr.core.errors import UserError
from buildmgr.core.memo import Memo

_GFX = re.compile(r"^gfx[0-9a-f]{3,4}$")


def parse_gfx(text: str) -> tuple[str, str]:
    """`--gfx gfx1100,gfx1151` → (GPU_TARGETS value, label for the build id)."""
    targets = []
    for item in (part.strip().lower() for part in text.split(",")):
        if not _GFX.match(item):
            raise UserError(
                f"--gfx {item!r} is not an AMD GPU target; use names like gfx1100 or gfx1151 "
                "(rocminfo | grep gfx lists this host's)"
            )
        targets.append(item)
    unique = sorted(set(targets))
    return ";".join(unique), "_".join(unique)


def clang_targets(clang: Path, environ: Mapping[str, str]) -> set[str]:
    """The gfx targets ROCm's clang can compile; a clang that cannot say is an error, not a skipped check."""
    ran = proc.run([str(clang), "--target=amdgcn-amd-amdhsa", "--print-supported-cpus"], timeout=60, env=dict(environ))
    known = set(re.findall(r"^\s*(gfx[0-9a-f]{3,4})\s*$", ran.output, flags=re.MULTILINE)) if ran.ok else set()
    if not known:
        said = ran.failure() if not ran.ok else (ran.output.strip().splitlines() or ["no gfx target listed"])[-1]
        raise UserError(f"cannot ask ROCm's clang ({clang}) which targets it compiles: {said}")
    return known


def check_gfx(targets: Sequence[str], rocm: Rocm, environ: Mapping[str, str]) -> None:
    """Refuse, before anything is configured, a target this ROCm cannot compile or has no rocBLAS kernels for."""
    clang = rocm.clang
    known = clang_targets(clang, environ) if clang.is_file() else set()
    kernels = rocblas_targets(rocm)
    for gfx in targets:
        if known and gfx not in known:
            raise UserError(
                f"--gfx {gfx}: ROCm's clang ({clang}) cannot compile it; it knows "
                f"{', '.join(sorted(known, key=gfx_key))}"
            )
        if kernels and gfx not in kernels:
            raise UserError(
                f"--gfx {gfx}: this ROCm's rocBLAS has no kernels for it ({rocm.rocblas_kernels}), so llama.cpp's "
                f"matrix products would fail there; it has {', '.join(sorted(kernels, key=gfx_key))}"
            )


def resolve_gfx(text: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """`--gfx`, or this host's GPUs as rocminfo lists them."""
    if text is None:
        found = visible_targets(environ)
        if not found:
            raise UserError("no AMD GPU found to build for (rocminfo); name the targets, e.g. --gfx gfx1100,gfx1151")
        text = ",".join(found)
    return parse_gfx(text)


def resolve_arch(text: str | None, host: Host, memo: Memo) -> tuple[str, str]:
    """`--gfx` → GPU_TARGETS; without it, this host's GPUs (asked every time). Each target is checked against what
    the ROCm found here can compile and has rocBLAS kernels for."""
    value, label = resolve_gfx(text, host.environ)
    rocm = find_rocm(host.environ)
    if rocm.hipconfig is not None:
        check_gfx(value.split(";"), rocm, host.environ)
    return value, label


def ci_label(text: str) -> str:
    return parse_gfx(text)[1]


def gfx_from_defines(defines: Mapping[str, str]) -> str | None:
    value = defines.get("GPU_TARGETS")
    return ",".join(value.split(";")) if value else None
