"""Answers that cost a program run, kept while the files behind them stay (path, size, mtime): the toolchain's
versions and a backend's preflight, so that a no-op build starts no program."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def stamps(paths: tuple[str, ...]) -> list[list[Any]]:
    """Path, size and mtime of each file: while these stay, so does what running or reading them said."""
    found: list[list[Any]] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            found.append([path, None])
            continue
        found.append([path, os.path.realpath(path), stat.st_size, stat.st_mtime_ns])
    return found


@dataclass
class Memo:
    """Preflight facts that cost a program run (nvcc --version, --list-gpu-arch, a compile probe), kept while the
    files behind them stay, so a no-op build of a GPU recipe starts no program. `doctor` never uses it."""

    entries: dict[str, Any] = field(default_factory=dict)
    changed: bool = False
    LIMIT = 64  # entries; the oldest go first

    @classmethod
    def load(cls, path: Path) -> Memo:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        return cls(data) if isinstance(data, dict) else cls()

    def recall(
        self,
        key: list[Any],
        compute: Callable[[], T],
        encode: Callable[[T], Any],
        decode: Callable[[Any], T],
        keep: Callable[[T], bool] = lambda _: True,
    ) -> T:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        if digest in self.entries:
            try:
                return decode(self.entries[digest])
            except (KeyError, TypeError, ValueError):
                pass  # written by another buildmgr version: compute again
        value = compute()
        if keep(value):
            self.entries[digest] = encode(value)
            self.changed = True
        return value

    def save(self, path: Path) -> None:
        from buildmgr.fsutil import atomic_write_text

        if self.changed:
            kept = dict(list(self.entries.items())[-self.LIMIT :])
            atomic_write_text(path, json.dumps(kept))
