"""Proof, right after configure, that every requested backend is really in the build.

A mistyped or unsupported option is ignored by CMake with only a warning, and the build quietly
falls back to CPU; these checks turn that into a failed build before anything is compiled.
"""

from __future__ import annotations

from buildmgr import backends
from buildmgr.tools.cmake import Reply


def ignored_options(reply: Reply, requested: dict[str, str]) -> list[str]:
    """GGML_*/LLAMA_* options we passed that the project never declared: typos, or options this source lacks.

    CMake's own "not used by the project" warning never fires for llama.cpp (its CMake code reads
    every variable), but an undeclared -D stays UNINITIALIZED in the cache.
    """
    return sorted(
        name
        for name in requested
        if name.startswith(("GGML_", "LLAMA_")) and reply.cache_types.get(name) == "UNINITIALIZED"
    )


def missing_targets(reply: Reply, wanted: tuple[str, ...]) -> list[str]:
    """A recipe's targets this llama.cpp does not have (a tool renamed, as rpc-server became ggml-rpc-server), each
    with the name nearest it: said before compiling, where ninja would stop at the first with "unknown target"."""
    import difflib

    names = sorted(t.name for t in reply.configuration.targets)
    problems = []
    for target in wanted:
        if target not in names:
            close = difflib.get_close_matches(target, names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"the recipe's target {target} is not a target of this llama.cpp{hint}")
    return problems


def backend_problems(reply: Reply, wanted: tuple[str, ...]) -> list[str]:
    """What is missing from the configured project for each wanted backend (empty: all there)."""
    target_names = {t.name for t in reply.configuration.targets}
    available = set(filter(None, reply.cache.get("GGML_AVAILABLE_BACKENDS", "").split(";")))
    problems = []
    for name in wanted:
        target = backends.target(name)
        present = sorted(t for t in target_names if t == target or t.startswith(target + "-"))
        if not present:
            problems.append(f"no {target} target: the {name} backend was dropped by configure")
        elif available and not set(present) & available:
            problems.append(f"{target} is not in GGML_AVAILABLE_BACKENDS ({', '.join(sorted(available))})")
    return problems


def backend_targets(reply: Reply, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """The ggml backend library targets of the wanted backends (CPU variants included).

    In a GGML_BACKEND_DL build nothing links them, so they must be built and installed by name.
    """
    names = sorted(t.name for t in reply.configuration.targets)
    found = []
    for backend in wanted:
        target = backends.target(backend)
        found += [
            n for n in names if n == target or (n.startswith(target + "-") and not n.endswith(("-feats", "-impl")))
        ]
    return tuple(dict.fromkeys(found))
