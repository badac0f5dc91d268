"""Answers that cost a program run or a hash, kept while the files behind them stay (path and `stamp`): the
toolchain's versions, a backend's preflight and an added toolchain's hashes, so that a no-op build starts no program
and `doctor` neither compiles nvcc's probe nor hashes a CUDA toolkit again."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SETTLE_NS = 2_000_000_000  # a file changed this recently may change again without its stamp showing it


def stamp(stat: os.stat_result) -> list[int]:
    """What moves whenever a file's bytes may have: size and mtime, and ctime and inode, which no tool puts back
    (`touch -r`, `cp -p` and tar restore an mtime; a rename over the file brings another inode)."""
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def settled(stats: Iterable[os.stat_result], now_ns: int) -> bool:
    """No file changed in the last SETTLE_NS before now: a second write within one tick of the file system's clock
    leaves the stamp of the first, so an answer read that soon is not kept (git's "racily clean" files)."""
    return all(stat.st_ctime_ns < now_ns - SETTLE_NS for stat in stats)


def stamps(paths: tuple[str, ...]) -> list[list[Any]]:
    """Path, where it leads and `stamp` of each file: while these stay, so does what running or reading them said."""
    found: list[list[Any]] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            found.append([path, None])
            continue
        found.append([path, os.path.realpath(path), *stamp(stat)])
    return found


@dataclass
class Memo:
    """Facts that cost a program run (nvcc --version, --list-gpu-arch, a compile probe) or a hash (an added
    toolchain's files), kept while the files behind them stay: a no-op build of a GPU recipe starts no program, and
    `doctor` compiles no probe and hashes no toolchain that it already did. `fresh` may still refuse a kept answer."""

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
        fresh: Callable[[T], bool] = lambda _: True,
    ) -> T:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        if digest in self.entries:
            try:
                kept = decode(self.entries[digest])
            except (KeyError, TypeError, ValueError):
                pass  # written by another buildmgr version: compute again
            else:
                if fresh(kept):
                    return kept
        value = compute()
        if keep(value):
            self.entries[digest] = encode(value)
            self.changed = True
        return value

    def save(self, path: Path) -> None:
        from buildmgr.core.fsutil import atomic_write_text

        if self.changed:
            kept = dict(list(self.entries.items())[-self.LIMIT :])
            atomic_write_text(path, json.dumps(kept))
