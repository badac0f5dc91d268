"""`--sm`: compute capabilities resolved here (nvcc's list, or this host's GPUs for none and `native`), for a CI
runner without GPUs, and given back from a receipt's defines."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from buildmgr.backend_spec import Host
from buildmgr.backends.cuda import CI_IMAGE_VERSION, LOWEST_BY_MAJOR
from buildmgr.backends.cuda.preflight import find_nvcc, locate, parse_nvcc_version
from buildmgr.backends.cuda.smi import visible_capabilities
from buildmgr.core import proc
from buildmgr.core.errors import UserError
from buildmgr.core.memo import Memo, stamps

_SM = re.compile(r"^(\d{1,2})\.?(\d)([af]?)$")


def parse_gpu_archs(text: str) -> tuple[int, ...]:
    """`nvcc --list-gpu-arch` output → the numeric capabilities it can target."""
    return tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", text)}))


def parse_sm(text: str, supported: tuple[int, ...], nvcc_version: str) -> tuple[str, str]:
    """`--sm 86,89` → (CMAKE_CUDA_ARCHITECTURES, label for the build id). Raises UserError before any compiling."""
    archs: list[tuple[int, str]] = []
    for item in (part.strip() for part in text.split(",")):
        match = _SM.match(item)
        if not match:
            raise UserError(f"--sm {item!r} is not a CUDA compute capability; use e.g. 86, 8.6, 90a or native")
        number = int(match.group(1) + match.group(2))
        if supported and number not in supported:
            raise UserError(
                f"--sm {item}: nvcc {nvcc_version} cannot build compute capability {number} "
                f"(it builds {supported[0]}–{supported[-1]}); CUDA 13 dropped everything below 75"
            )
        archs.append((number, f"{number}{match.group(3)}"))
    names = [name for _, name in sorted(set(archs))]
    value = ";".join([f"{n}-real" for n in names[:-1]] + names[-1:])
    return value, "sm" + "_".join(names)


def asks_the_gpus(text: str | None) -> bool:
    """No --sm, or --sm native: the answer depends on the GPUs present, not only on files."""
    return text is None or text.strip() == "native"


def resolve_sm(text: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """`--sm` (or its absence, or 'native') → concrete capabilities, so the build id says what was built.

    Upstream's own 'native' fails late on a host without a GPU ("compute_No CUDA devices found").
    """
    nvcc = find_nvcc(environ)
    if nvcc is None:
        raise UserError("--sm needs nvcc: install the CUDA toolkit and set CUDA_HOME")
    version = parse_nvcc_version(proc.run([nvcc, "--version"], timeout=60, env=dict(environ)).output) or "?"
    if text is None or asks_the_gpus(text):
        capabilities = visible_capabilities(environ)
        if not capabilities:
            raise UserError(
                "no NVIDIA GPU is visible here to build for natively (nvidia-smi found none); "
                "name the compute capability instead, e.g. --sm 86"
            )
        text = ",".join(capabilities)
    return parse_sm(text, supported_archs(nvcc, version if version != "?" else None, environ), version)


def supported_archs(nvcc: str, version: str | None, environ: Mapping[str, str]) -> tuple[int, ...]:
    ran = proc.run([nvcc, "--list-gpu-arch"], timeout=60, env=dict(environ))
    archs = parse_gpu_archs(ran.output) if ran.ok else ()
    if archs or version is None:
        return archs
    return archs_of_major(int(version.split(".")[0]))


def archs_of_major(major: int) -> tuple[int, ...]:
    """The capabilities a CUDA toolkit of this major version can build (from the lowest it keeps)."""
    lowest = LOWEST_BY_MAJOR.get(major, 0)
    return tuple(n for n in range(lowest, 130) if n % 10 in (0, 2, 3, 5, 6, 7, 9))


def resolve_arch(text: str | None, host: Host, memo: Memo) -> tuple[str, str]:
    """`--sm` → CMAKE_CUDA_ARCHITECTURES. A named --sm is remembered with nvcc's stamps; none or 'native' asks the
    GPUs every time."""
    ask = functools.partial(resolve_sm, text, host.environ)
    if asks_the_gpus(text):
        return ask()
    value, label = memo.recall(["--sm", text, stamps(locate(host).inputs)], ask, list, tuple)
    return str(value), str(label)


def ci_label(text: str) -> str:
    """`--sm` for the workflow's CUDA image, which has no GPU to build natively for."""
    if text.strip() == "native":
        raise UserError("--sm native means this host's GPUs, and a CI runner has none; name them, e.g. --sm 86")
    major = int(CI_IMAGE_VERSION.split(".")[0])
    return parse_sm(text, archs_of_major(major), CI_IMAGE_VERSION)[1]


def sm_from_defines(defines: Mapping[str, str]) -> str | None:
    """CMAKE_CUDA_ARCHITECTURES=86-real;89 → `--sm 86,89` (the inverse of parse_sm)."""
    value = defines.get("CMAKE_CUDA_ARCHITECTURES")
    return ",".join(a.removesuffix("-real") for a in value.split(";")) if value else None
