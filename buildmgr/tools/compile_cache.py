"""ccache, local and shared: which remote storage a build may use, and what each build got from where.

The remote (ccache's own Redis or HTTP storage) is checked once before a build: a malformed or unreachable URL is
one warning and the build goes on with the local cache alone, because ccache would otherwise try it for every file.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from buildmgr.core import proc
from buildmgr.core.errors import BuildmgrError

# ccache's own defaults are 100 ms to connect and 10 s per operation; a dead server mid-build costs at most this.
REMOTE_ATTRIBUTES = "connect-timeout=100|operation-timeout=2000"
_DEFAULT_PORTS = {"redis": 6379, "http": 80}
_CONNECT_CHECK_S = 1.0


@dataclass(frozen=True)
class RemoteCache:
    url: str  # as the user wrote it
    host: str | None
    port: int | None

    @property
    def for_ccache(self) -> str:
        """The value of CCACHE_REMOTE_STORAGE: the URL with short timeouts."""
        return f"{self.url}|{REMOTE_ATTRIBUTES}"


def parse_remote(url: str) -> RemoteCache:
    """`redis://host[:port]`, `redis+unix:/path`, `http://host[:port]/path` or `file:/path`; ValueError says why not."""
    if "|" in url or any(c.isspace() for c in url):
        raise ValueError("it must be a plain URL (buildmgr adds ccache's attributes itself)")
    parts = urlsplit(url)
    if parts.scheme in ("redis", "http"):
        if not parts.hostname:
            raise ValueError(f"a {parts.scheme}:// URL needs a host")
        try:
            port = parts.port or _DEFAULT_PORTS[parts.scheme]
        except ValueError as err:
            raise ValueError(str(err)) from None
        return RemoteCache(url, parts.hostname, port)
    if parts.scheme in ("redis+unix", "file"):
        if not parts.path:
            raise ValueError(f"a {parts.scheme}: URL needs a path")
        return RemoteCache(url, None, None)
    raise ValueError("use redis://host[:port], redis+unix:/path, http://host[:port]/path or file:/path")


def without_remote(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment with none of its ccache settings (remote storage, a config file, remote-only …) and
    with remote storage switched off: `verify` must never read or write a remote, whose entries could be the
    artifact's own. An empty CCACHE_REMOTE_STORAGE also overrides a remote_storage line in the cache dir's config."""
    kept = {k: v for k, v in environ.items() if not k.startswith("CCACHE_") and k != "BUILDMGR_REMOTE_CACHE"}
    return kept | {"CCACHE_REMOTE_STORAGE": ""}


def usable_remote(url: str | None, warn: Callable[[str], None]) -> RemoteCache | None:
    """The remote this build will use, or None (with one warning when one was asked for and cannot be used)."""
    if not url:
        return None
    try:
        remote = parse_remote(url)
    except ValueError as err:
        warn(f"remote compile cache {url!r} is not usable ({err}); building with the local cache only")
        return None
    if remote.host is not None and remote.port is not None:
        try:
            socket.create_connection((remote.host, remote.port), timeout=_CONNECT_CHECK_S).close()
        except OSError as err:
            reason = err.strerror or type(err).__name__
            warn(f"remote compile cache {url} is unreachable ({reason}); building with the local cache only")
            return None
    return remote


def parse_statslog(text: str) -> dict[str, int]:
    """Per-build counts from ccache's stats log: one '# file' record per compilation, with its counters."""
    counts = {
        "hits": 0,
        "misses": 0,
        "uncacheable": 0,
        "local_hits": 0,
        "remote_hits": 0,
        "remote_misses": 0,
        "remote_errors": 0,
    }
    for record in text.split("# ")[1:]:
        fields = set(record.split("\n")[1:])
        if fields & {"direct_cache_hit", "preprocessed_cache_hit"}:
            counts["hits"] += 1
        elif "cache_miss" in fields:
            counts["misses"] += 1
        else:
            counts["uncacheable"] += 1
        counts["local_hits"] += "local_storage_hit" in fields
        counts["remote_hits"] += "remote_storage_hit" in fields
        counts["remote_misses"] += "remote_storage_miss" in fields
        counts["remote_errors"] += "remote_storage_error" in fields
    return counts


def summary(counts: dict[str, int] | None) -> str:
    """One line for a person: '702/706 compilations from the cache (99 %, 690 from the remote)'."""
    if counts is None:
        return "no compile cache"
    compiled = counts["hits"] + counts["misses"]
    if not compiled:
        return "nothing compiled"
    line = f"{counts['hits']}/{compiled} compilations from the cache ({100 * counts['hits'] // compiled} %"
    if counts.get("remote_hits") or counts.get("remote_misses") or counts.get("remote_errors"):
        line += f", {counts['remote_hits']} from the remote"
        if counts.get("remote_errors"):
            line += f", {counts['remote_errors']} remote errors"
    return line + ")"


def parse_print_stats(text: str) -> dict[str, int]:
    """`ccache --print-stats`: one 'name<TAB>value' line per counter."""
    stats = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            stats[name] = int(value)
    return stats


def hit_rate(counts: Mapping[str, int] | None) -> float | None:
    """Compilations served by the cache, of all it was asked for (None when it was asked for none)."""
    compiled = (counts or {}).get("hits", 0) + (counts or {}).get("misses", 0)
    return round((counts or {})["hits"] / compiled, 3) if compiled else None


def totals(ccache: str, cache_dir: str, environ: dict[str, str]) -> dict[str, int | float | None]:
    """The cache's totals, in the receipt's terms (hits, misses, local and remote), plus its size; BuildmgrError
    where ccache cannot give them (never a table of zeros)."""
    command = [ccache, "--print-stats"]
    ran = proc.run(command, env=environ | {"CCACHE_DIR": cache_dir})
    if not ran.ok:
        raise BuildmgrError(f"{ccache} --print-stats failed ({ran.failure()}); the compile cache's totals are unknown")
    stats = parse_print_stats(ran.stdout)
    hits = stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)
    return {
        "hits": hits,
        "misses": stats.get("cache_miss", 0),
        "hit_rate": hit_rate({"hits": hits, "misses": stats.get("cache_miss", 0)}),
        "local_hits": stats.get("local_storage_hit", 0),
        "remote_hits": stats.get("remote_storage_hit", 0),
        "remote_misses": stats.get("remote_storage_miss", 0),
        "remote_errors": stats.get("remote_storage_error", 0),
        "size_kib": stats.get("cache_size_kibibyte", 0),
        "files": stats.get("files_in_cache", 0),
    }
