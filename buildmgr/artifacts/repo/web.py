"""A directory repository read over http(s), as any static web server serves it: read-only, each redirect checked
before it is followed, and every read held to the network's limits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from buildmgr.artifacts import index
from buildmgr.artifacts.repo.base import Progress, Published, append, capped, declared, http_total
from buildmgr.artifacts.repo.directory import DirectoryLayout
from buildmgr.artifacts.repo.net import NO_LIMITS_GIVEN, Limits, opener, unreachable, within
from buildmgr.artifacts.unpack import Artifact
from buildmgr.core.errors import NetworkFault, UserError
from buildmgr.trust import signing


@dataclass(frozen=True)
class HttpRepo(DirectoryLayout):
    text: str
    url: str  # its identity: one spelling, ending in /
    limits: Limits = NO_LIMITS_GIVEN

    @property
    def identity(self) -> str:
        return self.url

    def publish(
        self, artifact: Artifact, key: signing.SecretKey | None, builder: str, days: int = index.EXPIRES_DAYS
    ) -> Published:
        raise UserError(f"{self.text}: an http(s) repository is read-only; publish to its directory")

    def sign_index(self, key: signing.SecretKey, days: int = index.EXPIRES_DAYS) -> index.Index:
        raise UserError(f"{self.text}: an http(s) repository is read-only; sign the index in its directory")

    def read(self, relative: str) -> bytes | None:
        import http.client  # here: a directory repository needs no HTTP client (10 ms of an install)
        import urllib.error

        where = self.url + relative
        try:
            with within(self.limits, where), opener(where).open(where, timeout=self.limits.timeout_s) as response:
                return capped(response.read1, where)
        except ValueError as err:  # urllib's own, of an answer that is no URL (a redirect to `http://[::1/x`)
            raise NetworkFault(f"{where}: its answer names no URL this reads ({err})") from None
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise NetworkFault(f"{where}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            why = unreachable(err, self.limits.timeout_s) or str(getattr(err, "reason", err))
            raise NetworkFault(f"cannot reach {where}: {why}") from None

    def _download(self, entry: index.Entry, part: Path, have: int, progress: Progress | None) -> None:
        import urllib.error
        import urllib.request

        headers = {"Range": f"bytes={have}-"} if have else {}
        request = urllib.request.Request(self.url + entry.path, headers=headers)
        try:
            with within(self.limits, f"{self.url + entry.path}'s headers"):
                response = opener(self.url).open(request, timeout=self.limits.timeout_s)
        except ValueError as err:  # urllib's own, of an answer that is no URL (a redirect to `http://[::1/x`)
            raise NetworkFault(f"{self.url + entry.path}: its answer names no URL this reads ({err})") from None
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise FileNotFoundError(entry.path) from None
            if err.code == 416 and have == entry.size:  # everything is here already
                return
            raise
        with response:  # a server that ignores Range sends it all again (200): start over
            resumed = response.status == 206
            declared(entry.size, http_total(response.status, response.headers.get))
            start = have if resumed else 0
            append(response, part, "ab" if resumed else "wb", start, entry.size, progress, self.limits)
