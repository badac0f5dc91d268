"""A pasted text cut into its lines and into the runs of the programs that printed them (pure)."""

from __future__ import annotations

import re

from buildmgr import backends
from buildmgr.devices.captures.shapes import (
    BENCH_BUILD_LINE,
    BUILD_LINE,
    LINE_STARTS,
    LLAMA_LINE,
    RUN_HEADERS,
    SYSTEM_INFO_LINE,
    USING_LINE,
)


def split_lines(text: str) -> list[str]:
    """The text's lines, a log joined onto one line cut at each llama.cpp line, and a device line wrapped in two
    joined again."""
    lines = [piece for line in text.splitlines() for piece in LINE_STARTS.sub("\n", line).split("\n")]
    wraps = [(row.pattern, row.wrapped) for row in backends.log_devices() if row.wrapped]
    joined: list[str] = []
    for line in lines:
        previous = joined[-1] if joined else ""
        if any(
            re.search(pattern, previous)
            and not re.search(wrapped, previous)
            and re.search(wrapped, line)
            and not LLAMA_LINE.search(line)
            for pattern, wrapped in wraps
        ):
            joined[-1] = previous.rstrip() + " " + line.strip()
        else:
            joined.append(line)
    return joined


def find_runs(lines: list[str]) -> tuple[list[int], dict[int, int]]:
    """The run of a program each line belongs to, and each run's build number where its build line gives one.

    A program prints its backends' start-up lines, its build line, then its load log (before 2024-10 the build line
    came first and the start-up lines during the load). So a new run begins with a header that begins a device list,
    a build line or a `system_info` line already seen in this run, a device the load log names again for another
    card (the same line again is the same program loading again: a fit's dry run, a draft model), a backend's
    start-up header after this run's build line that followed its start-up lines, and any llama.cpp line after
    llama-bench's footer (two builds or hosts in one text). A table printed twice in one run (the memory breakdown)
    begins none."""
    headers = [re.compile(pattern) for pattern in (*RUN_HEADERS, *backends.run_headers())]
    starts = set(backends.start_headers())
    run, seen, runs, builds = 0, set[str](), list[int](), dict[int, int]()
    cards: dict[str, str] = {}  # this run's indexed names, each with the card its load log gave it
    started = ended = False  # this run's program printed its build line after its start-up lines; its footer
    for line in lines:
        begins = {header.pattern for header in headers if header.search(line)}
        # an indexed name is one card in a run (a hand-edited log may repeat a bare `RPC`): the same name for another
        # card begins a new run; the same card again does not (one llama-server loads a model several times: its
        # fit's dry runs, the model, a draft model)
        using = USING_LINE.search(line)
        card = f"{using['description']} {using['pci'] or ''}" if using and using["name"][-1:].isdigit() else None
        if using and card is not None and cards.get(using["name"], card) != card:
            begins.add("another card under a name")
        footer = BENCH_BUILD_LINE.search(line)
        build = footer or BUILD_LINE.search(line)
        if build:
            begins.add("build line")
        if SYSTEM_INFO_LINE.search(line):
            begins.add("system_info")
        renamed = "another card under a name" in begins
        if renamed or begins & seen or (started and begins & starts) or (ended and (begins or LLAMA_LINE.search(line))):
            run, seen, started, ended, cards = run + 1, set(), False, False, {}
        if using and card is not None:
            cards[using["name"]] = card
        if build:
            builds.setdefault(run, int(build["number"]))
            started = started or bool(seen & starts)
            ended = footer is not None
        seen |= begins
        runs.append(run)
    return runs, builds
