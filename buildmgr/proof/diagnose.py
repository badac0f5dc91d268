"""Known ways a llama.cpp build fails, matched against its log, each with the fix to print above the tail: each
backend's own (in its module), then the ones any build can hit."""

from __future__ import annotations

from buildmgr import backends
from buildmgr.core.findings import Signature

GENERAL = (
    Signature(
        "out-of-memory",
        r"(?i)Killed signal terminated program|fatal error: Killed|virtual memory exhausted|cannot allocate memory",
        "the compiler was killed, most likely out of memory: build again with fewer jobs, e.g. --jobs 1",
    ),
)


def signatures() -> tuple[Signature, ...]:
    return backends.build_failures() + GENERAL


def diagnose(text: str) -> list[str]:
    """Fixes for every known signature found in a log, in table order."""
    return [f"{s.name}: {s.fix}" for s in signatures() if s.found_in(text)]
