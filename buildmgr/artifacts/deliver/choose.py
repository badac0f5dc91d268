"""`install --from`, in order: the candidates judged against this host before any download, then the best fetched,
verified, installed and proven; the next fitting one is tried where this one cannot run here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildmgr import backends, keyring, store
from buildmgr.artifacts import compat, index, select
from buildmgr.artifacts.deliver.fetching import discard, fetch, installed_before, verify, vouched
from buildmgr.artifacts.deliver.trust import untrusted, vouched_line
from buildmgr.artifacts.install import Installed, install
from buildmgr.artifacts.repo import Progress, Repo, RepoError
from buildmgr.config import Dirs
from buildmgr.errors import BuildFailed

if TYPE_CHECKING:
    from buildmgr.progress import Reporter


def candidates(
    repo: Repo,
    listing: index.Index,
    what: str | None,
    environ: Mapping[str, str],
    machine: str,
    dirs: Dirs,
    allow_unsigned: bool,
) -> list[select.Candidate]:
    """Every artifact of the index (`read_index`) that the request names, judged against this host (read once) and
    ranked; nothing downloaded. A fitting one says which key vouched for it."""
    entries = select.wanted(listing.artifacts, what)
    targets = backends.gpu_targets(environ)
    trust = keyring.load(dirs)
    judged = []
    for entry in entries:
        judge = select.judge(
            entry,
            compat.summary_findings(entry.summary, environ, machine, dirs, targets),
            targets,
            untrusted(entry, trust, repo.identity, allow_unsigned),
        )
        if judge.fits:
            key_id, line = vouched_line(entry, trust, repo.identity)
            judge = dataclasses.replace(judge, reasons=(*judge.reasons, line), vouched_by=key_id)
        judged.append(judge)
    return select.rank(judged)


@dataclass(frozen=True)
class Attempt:
    candidate: select.Candidate
    outcome: str  # "installed", "already installed", or why it was passed over after download
    installed: Installed | None = None
    signed_by: str | None = None
    devices: tuple[str, ...] = ()


def install_best(
    repo: Repo,
    ranked: list[select.Candidate],
    dirs: Dirs,
    environ: Mapping[str, str],
    reporter: Reporter,
    allow_unsigned: bool,
    probe: Callable[[Installed], list[tuple[str, str]]],  # the build's devices as (name, backend)
    progress: Progress | None = None,
) -> list[Attempt]:
    """Try the fitting candidates best first until one installs and sees what it was picked for. A candidate
    whose bytes, signature or receipt fail, or whose smoke run fails here, is passed over with why (an Attempt):
    one bad entry does not keep the next fitting one out. The installed receipt keeps which key vouched."""
    attempts: list[Attempt] = []
    trusted = keyring.load(dirs).for_repo(repo.identity)
    for candidate in (c for c in ranked if c.fits):
        entry = candidate.entry
        signed_by: str | None = None
        fetched = False
        try:
            before = installed_before(repo, dirs, entry)
            if before is not None:
                done, signed_by = before, verify(repo, entry, None, trusted, allow_unsigned)
            else:
                fetched = True
                got = fetch(repo, entry, dirs, progress)
                signed_by = verify(repo, entry, got.blake2b, trusted, allow_unsigned)
                done = install(
                    dirs,
                    got.archive,
                    entry.sha256,
                    entry.summary.id,
                    vouched(repo, candidate),
                    reporter,
                    environ,
                    signed_by,
                )
                discard(dirs, entry)  # installed (or already, as the same build): the receipt keeps its sha256
        except BuildFailed as err:  # the smoke run failed here: the next candidate may run
            if fetched:
                discard(dirs, entry)
            attempts.append(Attempt(candidate, f"its smoke run failed here ({err})", None, signed_by))
            continue
        except RepoError as err:  # this entry's bytes, signature or receipt: the next one may be sound
            if fetched:
                discard(dirs, entry)  # bytes that failed verification are never kept (a .part cut short is)
            attempts.append(Attempt(candidate, str(err), None, signed_by))
            continue
        seen = probe(done)
        missing = [b for b in candidate.proves if not any(backend == b for _, backend in seen)]
        if missing:
            if not done.already:
                store.remove(dirs, done.build)
            fate = "it was installed before, so it stays" if done.already else "removed again"
            attempts.append(
                Attempt(
                    candidate,
                    f"installed, but it sees no {', '.join(missing)} device here: {fate}",
                    None,
                    signed_by,
                    tuple(name for name, _ in seen),
                )
            )
            continue
        outcome = "already installed" if done.already else "installed"
        attempts.append(Attempt(candidate, outcome, done, signed_by, tuple(name for name, _ in seen)))
        return attempts
    return attempts
