"""How commands show results to people: rich consoles (imported late: `--json` paths never pay for rich), findings,
the devices table and the placement report. No decisions here; only presentation of typed results."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from buildmgr.core.findings import Severity

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from buildmgr.core.device_records import Device
    from buildmgr.core.findings import Check
    from buildmgr.devices.inventory_file import BuildEntry, InventoryCard
    from buildmgr.placement.cover import Covered
    from buildmgr.placement.run import CheckReport

STYLES = {Severity.ERROR: "red", Severity.WARNING: "yellow"}


# Piped or redirected output is saved and grepped: never cut or folded to a terminal's width (rich's default is 80).
_UNBOUNDED = 100_000
PIPED_PAD = 40  # piped, a column is aligned up to this width


def _width(stream: TextIO) -> int | None:
    return None if stream.isatty() or os.environ.get("COLUMNS") else _UNBOUNDED


@functools.cache
def out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))


@functools.cache
def err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))


def inert(text: str) -> str:
    """Text a terminal shows and never obeys: a control character (an escape sequence a server put in a message)
    or an undecodable byte shown escaped; newlines kept."""
    return "".join(ch if ch.isprintable() or ch == "\n" else repr(ch)[1:-1] for ch in text)


def warn(message: str) -> None:
    err().print(inert(message), markup=False, style="yellow")


def result(message: str, style: str | None = None) -> None:
    """A plain line of a command's result, on stdout, never read as markup."""
    out().print(inert(message), markup=False, style=style)


def say(message: str, style: str | None = None) -> None:
    """A plain line on stderr, never read as markup."""
    err().print(inert(message), markup=False, style=style)


def table(*columns: str) -> Table:
    """In a terminal, a long cell folds onto the next lines rather than being cut with an ellipsis."""
    from rich.table import Column, Table

    return Table(*(Column(header, overflow="fold") for header in columns), box=None)


def show(grid: Table, console: Console | None = None) -> None:
    """A table. Piped, each row on one line, its columns aligned up to PIPED_PAD characters (a longer cell goes past
    its column rather than pad every other row to it) and no padding after the last; in a terminal too narrow for its widest values, each row as a block, one `column: value`
    line each, so that no value is ever split; else aligned."""
    from rich.text import Text

    console = console or out()
    headers = [str(column.header) for column in grid.columns]
    rows = list(zip(*([Text.from_markup(str(c)).plain for c in column.cells] for column in grid.columns), strict=True))
    widest = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    if console.width >= _UNBOUNDED:
        pad = [min(w, PIPED_PAD) for w in widest]  # a longer cell goes past its column rather than pad all the others
        for row in [headers, *rows]:
            console.file.write("  ".join(c.ljust(p) for c, p in zip(row, pad, strict=True)).rstrip() + "\n")
        return
    if sum(widest) + 2 * len(widest) <= console.width:
        console.print(grid)
        return
    for row in rows:
        console.print(row[0], markup=False)
        for header, cell in zip(headers[1:], row[1:], strict=True):
            if cell:
                console.print(f"    {header}: {cell}", markup=False)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def checks(labelled: Sequence[tuple[str, Check]]) -> None:
    """Preflight checks piped, one line each (yes/no, the check, what was found, the fix); in a terminal, a table
    where it fits; where it would not (an 80-column terminal, a long path or fix), each check on a line of its own
    with what was found and the fix folded under it, never cut."""
    cells = [(label, check.found, "" if check.ok else check.fix) for label, check in labelled]
    widest = [max((len(row[i]) for row in cells), default=0) for i in range(3)]
    console = out()
    if console.width >= _UNBOUNDED:  # piped: saved and grepped, a check is one line
        for (label, found, fix), (_, check) in zip(cells, labelled, strict=True):
            said = f"{'yes' if check.ok else 'no'} {label}: {found}" + (f" (fix: {fix})" if fix else "")
            console.print(inert(said), markup=False)
        return
    if sum(widest) + len("check") + 3 * 2 + len("ok") <= console.width:
        grid = table("check", "ok", "found", "fix")
        for (label, found, fix), (_, check) in zip(cells, labelled, strict=True):
            grid.add_row(label, "[green]yes[/]" if check.ok else "[red]no[/]", escape(found), escape(fix))
        show(grid, console)
        return
    for (label, found, fix), (_, check) in zip(cells, labelled, strict=True):
        console.print(("[green]yes[/] " if check.ok else "[red]no[/]  ") + escape(label))
        console.print(f"     found: {escape(found)}")
        if fix:
            console.print(f"     fix: {escape(fix)}")


def placement(report: CheckReport, outcome_on_stdout: bool = True) -> None:
    """The check's findings, coverage and verify run: on stdout, where they are the command's result (`check`); on
    stderr before a tool's own output (`run --check`)."""
    from buildmgr.core.findings import errors
    from buildmgr.placement.syntax import describe

    line = result if outcome_on_stdout else say
    for note in report.notes:
        line(note.line(), STYLES.get(note.severity, "dim"))
    for number, test in enumerate(report.tests, 1):
        if len(report.tests) > 1:
            line(f"test {number}: {describe(test.placement)}")
        if test.weights is not None:
            held = ", ".join(f"{name} {_size(size)}" for name, size in test.weights.items() if size)
            line(f"weights per device: {held or 'none'}")
        for found in test.findings:
            line(found.line(), STYLES.get(found.severity, "dim"))
        if test.coverage is not None:
            coverage(test.coverage, line)
        if test.outcome is not None:
            outcome = test.outcome
            line(
                f"verify: {outcome.result}"
                + (f" ({outcome.failure})" if outcome.failure else "")
                + f"; {test.agreement}"
            )
            if outcome.result in ("unknown", "crashed"):
                for said in outcome.tail:
                    line(f"  {said}")
        if test.findings or errors(report.notes):
            continue
        if test.coverage is not None and test.coverage.coverage is not None and test.coverage.coverage.partial:
            line("placement runs, with ops of its devices' layers on the CPU (coverage above)", "yellow")
        else:
            line("placement ok", "green")


def coverage(covered: Covered, line: Callable[..., None]) -> None:
    """Where each op ran, per graph: op × device node counts, splits, bytes copied per token, ops off their layers'
    device with the cause."""
    found = covered.coverage
    if found is None:
        line(f"coverage: not taken ({covered.failure})", "yellow")
        return
    line("coverage: layers " + ", ".join(f"{device} {count}" for device, count in found.layers.items()))
    for graph in found.graphs:
        ops = "; ".join(
            f"{op} " + " ".join(f"{device}×{count}" for device, count in devices.items())
            for op, devices in sorted(graph.ops.items())
        )
        copied = (
            "under 1 KiB"  # the scheduler prints each input in whole KiB
            if graph.splits > 1 and not graph.copied_bytes
            else _bytes(graph.copied_per_token)
        )
        line(
            f"  {graph.phase} ({graph.tokens} tokens): {graph.splits} split(s), {copied} copied between devices per token"
        )
        line(f"    ops: {ops}")
        for off in graph.off:
            layers = ",".join(map(str, off.layers))
            line(f"    {off.op} ×{off.count} on {off.device}, not {off.home} (layers {layers}): {off.cause}", "yellow")
    if found.partial is None:
        line("  every op of the device-placed layers ran on their device", "green")
    if found.flash_attn_auto is False:
        from buildmgr.placement.coverage import FA_AUTO_OFF  # here alone: every command shows through this module

        line(f"  {FA_AUTO_OFF}", "yellow")


def _size(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def _bytes(size: float) -> str:
    return _size(round(size)) if size >= 2**20 else f"{size / 2**10:.1f} KiB"


def devices_table(
    cards: Iterable[InventoryCard],
    builds: Mapping[str, BuildEntry],
    notes: Iterable[str],
    empty: str | None = None,
    free_mib: Mapping[str, int | None] | None = None,
) -> None:
    """One row per physical card; a column per build with the names it has there (* the one llama.cpp uses without
    -dev), or 'built ≠ present' where the build has the card's backend but not the card. `free_mib` (per name): what
    a text said was free, shown where it gave no total."""
    rows = list(cards)
    grid = table("physical device", "role", "PCI", "memory", *builds)
    for card in rows:
        memory = max((m for m in card.memory_total_mib.values() if m is not None), default=None)
        free = max((f for n in card.members or () if (f := (free_mib or {}).get(n)) is not None), default=None)
        row = [
            escape(card.description),
            card.role,
            card.pci_bus_id or "—",
            f"{memory} MiB" if memory is not None else f"{free} MiB free" if free is not None else "?",
        ]
        for build_id, entry in builds.items():
            names = [
                name + ("*" if name in card.default.get(build_id, "").split(",") else "")
                for name in card.names.get(build_id, ())
            ]
            built = set(card.memory_total_mib) & set(entry.backends)
            row.append(", ".join(names) if names else "[yellow]built ≠ present[/]" if built else "—")
        if not builds:
            row[0] = f"{escape(card.description)} [dim]({', '.join(card.members or ())})[/]"
        grid.add_row(*row)
    if rows:
        show(grid)
        if builds:
            out().print("[dim]* the name llama.cpp uses for that card when no -dev is given[/]")
    else:
        out().print(
            empty
            or "no devices besides the CPU" + (" in any build" if builds else " (no builds yet: run 'buildmgr build')")
        )
    for note in notes:
        out().print(f"• {escape(note)}")


def device_names(devices: Iterable[Device]) -> str:
    return ", ".join(d.name for d in devices) or "(none besides the CPU)"


class Download:
    """A download's progress: a bar in a terminal; elsewhere (CI logs, pipes) a line at each quarter, so a long one
    is seen to move without filling the log."""

    def __init__(self) -> None:
        self._bar: object | None = None
        self._task: object | None = None
        self._quarter = -1

    def __enter__(self) -> Download:
        if err().is_terminal:
            from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

            bar = Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn(), console=err())
            bar.start()
            self._bar = bar
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            from rich.progress import Progress

            assert isinstance(self._bar, Progress)
            self._bar.stop()

    def update(self, done: int, total: int) -> None:
        if self._bar is not None:
            from rich.progress import Progress, TaskID

            assert isinstance(self._bar, Progress)
            if self._task is None:
                self._task = self._bar.add_task("download", total=total)
            assert isinstance(self._task, int)
            self._bar.update(TaskID(self._task), completed=done, total=total)
            return
        quarter = done * 4 // total if total else 4
        if quarter != self._quarter:
            self._quarter = quarter
            say(f"  downloaded {done / 1e6:.1f} of {total / 1e6:.1f} MB")
