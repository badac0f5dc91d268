"""Calm, timed output: one line per phase, a bar fed by Ninja's [N/M] lines, folding in CI."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape

_STATUS = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)")


def parse_ninja_status(line: str) -> tuple[int, int, str] | None:
    match = _STATUS.match(line)
    return (int(match.group(1)), int(match.group(2)), match.group(3)) if match else None


@dataclass
class NinjaCounter:
    """Progress of the outer Ninja only.

    ExternalProjects (e.g. a backend's shader generator) run a nested Ninja whose [n/m] lines
    are interleaved with ours; they have a smaller total, so lines below the largest total
    seen are ignored and the count never goes back.
    """

    done: int = 0
    total: int = 0

    def feed(self, line: str) -> bool:
        status = parse_ninja_status(line)
        if status is None:
            return False
        done, total, _ = status
        if total < self.total:
            return False
        self.total = total
        self.done = max(self.done, done)
        return True


@dataclass
class Reporter:
    console: Console = field(default_factory=lambda: Console(stderr=True, highlight=False, soft_wrap=True))
    in_ci: bool = False
    github: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def for_environment(cls, environ: Mapping[str, str]) -> Reporter:
        """Calm output in CI, and folded groups under GitHub Actions."""
        return cls(in_ci=bool(environ.get("CI")), github=environ.get("GITHUB_ACTIONS") == "true")

    def say(self, message: str) -> None:
        self.console.print(message)

    def warn(self, message: str) -> None:
        self.console.print(message, markup=False, style="yellow")

    @property
    def interactive(self) -> bool:
        return self.console.is_terminal and not self.in_ci

    @contextlib.contextmanager
    def phase(self, name: str, detail: str = "", spinner: bool = True) -> Iterator[None]:
        """A timed step; in a terminal a spinner shows it is alive (the build phase has its own bar)."""
        if self.github:
            print(f"::group::{name} {detail}".rstrip(), file=sys.stderr, flush=True)  # stdout stays for --json
        self.console.print(f"[bold]▸ {name}[/] {escape(detail)}".rstrip())
        start = time.monotonic()
        alive = self.console.status(f"{name} …") if spinner and self.interactive else contextlib.nullcontext()
        try:
            with alive:
                yield
        except BaseException:
            self.timings[name] = round(time.monotonic() - start, 3)
            self.console.print(f"  [red]✗[/] {name} {self.timings[name]:.1f} s")
            raise
        finally:
            if self.github:
                print("::endgroup::", file=sys.stderr, flush=True)
        self.timings[name] = round(time.monotonic() - start, 3)
        self.console.print(f"  [green]✓[/] {name} {self.timings[name]:.1f} s")

    @contextlib.contextmanager
    def ninja_bar(self) -> Iterator[Callable[[str], None]]:
        """Yields `feed(line)`: every line of the build's output goes through it."""
        # here: only a build has a bar, and rich.progress is a tenth of an install's start-up
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        counter = NinjaCounter()
        interactive = self.interactive
        progress = Progress(
            TextColumn("  build"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=not interactive,
        )
        task = progress.add_task("build", total=None)
        reported_tenth = -1

        def feed(line: str) -> None:
            nonlocal reported_tenth
            if not counter.feed(line):
                return
            progress.update(task, completed=counter.done, total=counter.total)
            tenth = counter.done * 10 // counter.total
            if not interactive and tenth > reported_tenth:
                # Plain logs get a line per tenth, not one per compile.
                reported_tenth = tenth
                self.console.print(f"  build {counter.done}/{counter.total}")

        with progress:
            yield feed
