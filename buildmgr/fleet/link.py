"""`buildmgr rpc ping`: what the link to a server costs, as llama.cpp's own RPC client crosses it (the build's ggml
in a child: a client that cannot reach its server aborts): round trips, and a tensor written to the server and read
back. Every sample kept; the medians and their spread shown."""

from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildmgr import backends
from buildmgr.core import proc
from buildmgr.core.errors import Unreachable
from buildmgr.devices.ggml_api import answer
from buildmgr.devices.probe import child_environ

if TYPE_CHECKING:
    from buildmgr.store import Build

PINGS = 200
ROUNDS = 5


@dataclass(frozen=True)
class Link:
    server: str
    build: str  # the client's
    bytes: int  # of each write and read
    round_trips_s: tuple[float, ...]
    upload_s: tuple[float, ...]
    download_s: tuple[float, ...]

    def rates(self, seconds: tuple[float, ...]) -> tuple[float, ...]:
        """GB/s of each sample."""
        return tuple(self.bytes / s / 1e9 for s in seconds if s > 0)

    def to_json(self) -> dict[str, Any]:
        def spread(values: tuple[float, ...]) -> dict[str, float]:
            ordered = sorted(values)
            return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1]}

        return {
            "server": self.server,
            "build": self.build,
            "bytes": self.bytes,
            "round_trip_ms": {k: round(v * 1e3, 4) for k, v in spread(self.round_trips_s).items()},
            "upload_gbs": {k: round(v, 3) for k, v in spread(self.rates(self.upload_s)).items()},
            "download_gbs": {k: round(v, 3) for k, v in spread(self.rates(self.download_s)).items()},
            "samples": {
                "round_trips_s": list(self.round_trips_s),
                "upload_s": list(self.upload_s),
                "download_s": list(self.download_s),
            },
        }


def measure(build: Build, server: str, size_mib: int, timeout: float) -> Link:
    """The link to `server` from `build`'s client; Unreachable with the client's own words where it fails."""
    registry, remote = backends.remote()
    command = [
        sys.executable, "-m", "buildmgr.devices.ggml_api", str(build.prefix / "lib"), "--link", registry,
        remote.add_server, server, str(size_mib << 20), str(ROUNDS), str(PINGS),
    ]  # fmt: skip
    ran = proc.run(command, timeout=timeout, env=child_environ(os.environ))
    said = answer(ran.stdout)
    if not ran.ok or said is None:
        why = remote.refused(ran.output) or ran.failure()
        raise Unreachable(f"{build.id} could not measure the link to {server}: {why}")
    found = json.loads(said)
    return Link(
        server,
        build.id,
        int(found["bytes"]),
        tuple(found["round_trips_s"]),
        tuple(found["upload_s"]),
        tuple(found["download_s"]),
    )
