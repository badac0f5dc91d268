"""`install --from`, in order: the candidates judged against this host before any download, then the best fetched,
verified, installed and proven; the next fitting one is tried where this one cannot run here."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildmgr import backends, store
from buildmgr.artifacts import compat, index, select
from buildmgr.artifacts.deliver.fetching import discard_held, fetch_held, held, installed_before, verify, vouched
from buildmgr.artifacts.deliver.trust import untrusted, vouched_line
from buildmgr.artifacts.install import Installed, install
from buildmgr.artifacts.repo import Progress, Repo
from buildmgr.artifacts.unpack import BadArchive
from buildmgr.core import hostfacts
from buildmgr.core.config import Dirs
from buildmgr.core.errors import BuildFailed, NetworkFault, RepositoryFault
from buildmgr.trust import keyring

if TYPE_CHECKING:
    from buildmgr.core.progress import Reporter


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
    cpu_flags = hostfacts.read().cpu_flags
    trust = keyring.load(dirs)
    judged = []
    for entry in entries:
        judge = select.judge(
            entry,
            compat.summary_findings(entry.summary, environ, machine, dirs, targets, cpu_flags),
            targets,
            untrusted(entry, trust, repo.identity, allow_unsigned),
        )
        if judge.fits:
            key_id, line = vouched_line(entry, trust, repo.identity)
            judge = dataclasses.replace(judge, reasons=(*judge.reasons, line), vouched_by=key_id)
        judged.append(judge)
    return select.rank(judged)


class Outcome(enum.Enum):
    INSTALLED = "installed"
    ALREADY = "already installed"
    CANNOT_RUN = "cannot run here"  # its smoke run failed, or it sees no device it was picked for: the next is tried
    FAULT = "repository fault"  # the repository did not deliver what its index says: the install ends here


@dataclass(frozen=True)
class Attempt:
    candidate: select.Candidate
    kind: Outcome
    outcome: str  # what happened, in words: "installed", "already installed", or why not
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
    """Try the fitting candidates best first until one installs and sees what it was picked for. Only a candidate
    this host cannot run (its smoke run fails here, or it sees no device of the backend it was picked for) is
    passed over for the next: where the repository does not deliver the chosen one (a download that fails, bytes,
    a signature or a receipt that do not match, an unsafe archive) the install ends there, with that attempt last
    (kind FAULT), so that whoever controls the network cannot pick an older build by failing the newer one. The
    installed receipt keeps which key vouched."""
    attempts: list[Attempt] = []
    trusted = keyring.load(dirs).for_repo(repo.identity)
    for candidate in (c for c in ranked if c.fits):
        entry = candidate.entry
        signed_by: str | None = None
        # known without a download (nothing written, not even a lock); else under the download folder's lock through
        # the install, where a second install of it waits, then finds it installed
        before = installed_before(repo, dirs, entry)
        ours = before is None  # the download folder is this install's to clean: it holds its lock
        with held(dirs, entry) if ours else contextlib.nullcontext():
            try:
                before = before or installed_before(repo, dirs, entry)
                if before is not None:
                    done, signed_by = before, verify(repo, entry, None, trusted, allow_unsigned)
                else:
                    got = fetch_held(repo, entry, dirs, progress)
                    signed_by = verify(repo, entry, got.blake2b, trusted, allow_unsigned)
                    done = install(
                        dirs, got.archive, entry.sha256, entry.summary.id, vouched(repo, candidate), reporter, environ,
                        signed_by,
                    )  # fmt: skip
                    discard_held(dirs, entry)  # installed (or already, as the same build): the receipt keeps its sha256
            except BuildFailed as err:  # the smoke run failed here: the next candidate may run
                if ours:
                    discard_held(dirs, entry)
                attempts.append(
                    Attempt(candidate, Outcome.CANNOT_RUN, f"its smoke run failed here ({err})", None, signed_by)
                )
                continue
            except NetworkFault as err:  # what came intact is kept: the next try resumes it, or verifies it again
                attempts.append(Attempt(candidate, Outcome.FAULT, str(err), None, signed_by))
                return attempts
            except RepositoryFault as err:
                if ours:
                    discard_held(dirs, entry)  # bytes that failed verification are never kept
                attempts.append(Attempt(candidate, Outcome.FAULT, str(err), None, signed_by))
                return attempts
            except BadArchive as err:  # the repository's archive, not the user's file
                if ours:
                    discard_held(dirs, entry)
                fault = f"{err} (from {repo.text}; its download was deleted)"
                attempts.append(Attempt(candidate, Outcome.FAULT, fault, None, signed_by))
                return attempts
        seen = probe(done)
        missing = [b for b in candidate.proves if not any(backend == b for _, backend in seen)]
        devices = tuple(name for name, _ in seen)
        if missing:
            if not done.already:
                store.remove(dirs, done.build)
            fate = "it was installed before, so it stays" if done.already else "removed again"
            said = f"installed, but it sees no {', '.join(missing)} device here: {fate}"
            attempts.append(Attempt(candidate, Outcome.CANNOT_RUN, said, None, signed_by, devices))
            continue
        kind = Outcome.ALREADY if done.already else Outcome.INSTALLED
        attempts.append(Attempt(candidate, kind, kind.value, done, signed_by, devices))
        return attempts
    return attempts
