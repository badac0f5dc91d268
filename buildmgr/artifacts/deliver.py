"""`install --from`: read the repository's index, signed by a key that vouches for it here, not older than one this
host saw and not expired; judge every artifact it lists against this host before downloading any, then fetch the
best into the download cache (resumed where an earlier try stopped), check its digest, signature and provenance,
install it as install-artifact does, and prove the choice: the installed build must see a device of the backend it
was picked for, or it is removed again and the next candidate is tried. An archive installed here before is not
fetched again."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import backends, keyring, signing, store
from buildmgr.artifacts import compat, index, select
from buildmgr.artifacts.archive import Artifact
from buildmgr.artifacts.install import Installed, install
from buildmgr.artifacts.repo import IndexFiles, Progress, Repo, RepoError
from buildmgr.config import Dirs
from buildmgr.errors import BuildFailed, UserError
from buildmgr.findings import Finding
from buildmgr.fsutil import atomic_write_text, file_digests, locked, sha256_file
from buildmgr.jsonshape import ShapeError
from buildmgr.receipt import FILE_NAME as RECEIPT

if TYPE_CHECKING:
    from buildmgr.progress import Reporter


def downloads(dirs: Dirs) -> Path:
    return dirs.cache / "downloads"


def voucher(entry: index.Entry, keys: Mapping[str, signing.PublicKey]) -> str | None:
    """The first of the entry's signers whose key vouches for its repository here (`keyring.Trust.for_repo`)."""
    return next((key_id for key_id in entry.signers if key_id in keys), None)


def untrusted(entry: index.Entry, trust: keyring.Trust, repo: str, allow_unsigned: bool) -> str | None:
    """Why the index's word on its signatures keeps it out (checked again, on the bytes, after download)."""
    if allow_unsigned or voucher(entry, trust.for_repo(repo)) is not None:
        return None
    if not entry.signers:
        return "unsigned: --allow-unsigned installs it anyway"
    return _not_vouching(entry.signers, trust, repo)


def _not_vouching(signer_ids: Sequence[str], trust: keyring.Trust, repo: str) -> str:
    """Why none of the keys `signer_ids` vouches for `repo` here, as "signed by ID, which …"."""
    signers = ", ".join(signer_ids)
    if repo in trust.pins:
        return (
            f"signed by {signers}, and {repo} is pinned to {', '.join(trust.pins[repo])} "
            "('buildmgr key trust FILE --for REPO' adds a key)"
        )
    if scoped := [k for k in signer_ids if k in trust.keys]:
        return (
            f"signed by {signers}, which this host trusts only for {', '.join(trust.pinned_to(scoped[0]))} "
            "('buildmgr key trust FILE' trusts it for any repository)"
        )
    return f"signed by {signers}, which this host does not trust ('buildmgr key trust FILE')"


def _vouched(entry: index.Entry, trust: keyring.Trust, repo: str) -> tuple[str | None, str]:
    """(the key that vouches for it here, the table's line that says so)."""
    key_id = voucher(entry, trust.for_repo(repo))
    if key_id is None:
        return None, "vouched for by no key trusted here: installed as unsigned (--allow-unsigned)"
    where = f"{repo} is pinned to it" if repo in trust.pins else "trusted for any repository that is not pinned"
    return key_id, f"vouched for by key {key_id} ({where})"


# --- the index: signed by a key that vouches here, not older than one seen, not expired ------------------------------


@dataclass(frozen=True)
class Listing:
    """The index a host judges a repository's artifacts by."""

    index: index.Index
    signed_by: str | None  # the key whose signature over it verified (None: read unsigned, with --allow-unsigned)
    note: str | None = None  # what to tell: an index read unsigned, or the last one a key signed read instead


def _parsed(repo: Repo, data: bytes, where: str = index.INDEX) -> index.Index:
    """Read before its signature is checked: a name, digest or id that would become a path is refused as such."""
    try:
        return index.Index.from_text(data)
    except ShapeError as err:  # NewerSchema included
        raise RepoError(f"{repo.text}/{where} is not a buildmgr index this buildmgr reads ({err})") from None


def _signer(minisig: bytes) -> str:
    try:
        return signing.signer_of(minisig.decode("utf-8", "replace"))
    except signing.SignatureError:
        return "no key (its .minisig is not one)"


def _newest(repo: Repo, keys: Mapping[str, signing.PublicKey]) -> tuple[IndexFiles, index.Index, str | None] | None:
    """index.json, read, with the key of its signature where that key vouches here (None: unsigned, or by another
    key). A signature that does not match is a changed index, refused, unless reading both again makes them agree
    (a publish came between the two reads)."""
    files = repo.index_files()
    for again in (True, True, False):
        if files is None:
            return None
        read = _parsed(repo, files.data)
        if files.minisig is None:
            return files, read, None
        try:
            return files, read, signing.verify(files.data, files.minisig.decode("utf-8", "replace"), keys).key_id
        except signing.Untrusted:
            return files, read, None
        except signing.SignatureError:
            if not again:
                raise RepoError(
                    f"{repo.text}: its {index.INDEX} does not match its signature by {_signer(files.minisig)}: it was "
                    "changed after it was signed; nothing was installed"
                ) from None
            files = repo.index_files()
    raise AssertionError("unreachable")


def read_index(repo: Repo, dirs: Dirs, allow_unsigned: bool) -> Listing:
    """The index to judge by: index.json where a key that vouches for the repository here signed it (a pinned
    repository: only its pinned keys), not older than the version this host took from it before (`remember`), nor
    expired. Signed by no such key, --allow-unsigned reads it as it is (nothing vouches for it, and no version of
    it is remembered), as it takes an archive no such key signed; without it, the newest of the last indexes such
    keys signed is read instead (a later signer, or an unsigned publish, signed index.json last), checked alike;
    none: refused."""
    trust = keyring.load(dirs)
    keys = trust.for_repo(repo.identity)
    newest = _newest(repo, keys)
    if newest is not None and newest[2] is not None:
        return _fresh(repo, dirs, Listing(newest[1], newest[2]))
    # a repository published to before its index was signed (OCI: its tags) is read as unsigned
    current = newest[1] if newest is not None else repo.listing()
    if newest is None:
        state = "not signed (an index from before indexes were: 'buildmgr publish --to REPO --sign NAME' signs it)"
    elif newest[0].minisig is None:
        state = "unsigned"
    else:
        state = _not_vouching([_signer(newest[0].minisig)], trust, repo.identity)
    if allow_unsigned:
        note = f"{repo.text}: its {index.INDEX} is {state}: read as it is (--allow-unsigned), no version remembered"
        return Listing(current, None, note)
    found = []
    for key_id in sorted(keys):
        copy = repo.index_files(key_id)
        if copy is None or copy.minisig is None:
            continue
        try:
            signed = signing.verify(copy.data, copy.minisig.decode("utf-8", "replace"), keys)
        except signing.SignatureError:
            continue  # being rewritten, or changed: another key's may do
        found.append(Listing(_parsed(repo, copy.data, index.key_index(key_id)), signed.key_id))
    if found:
        chosen = max(found, key=lambda listing: listing.index.version)
        note = (
            f"{repo.text}: its {index.INDEX} is {state}: reading {index.key_index(chosen.signed_by or '')} instead, "
            f"the last index key {chosen.signed_by} signed (version {chosen.index.version})"
        )
        return _fresh(repo, dirs, dataclasses.replace(chosen, note=note))
    raise RepoError(
        f"{repo.text}: no index here is signed by a key trusted for it: its {index.INDEX} is {state}; "
        "--allow-unsigned reads it anyway; nothing was installed"
    )


def _seen(dirs: Dirs) -> dict[str, int]:
    path = dirs.seen_indexes
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        return index.Seen.from_text(text).repositories
    except ShapeError as err:
        raise UserError(
            f"{path} is not buildmgr's ({err}): remove it (the index versions this host saw are forgotten then)"
        ) from None


def _fresh(repo: Repo, dirs: Dirs, listing: Listing) -> Listing:
    """A signed index, refused where it expired or is older than one this host took from the repository."""
    written = listing.index
    try:
        expires = datetime.fromisoformat(written.expires or "")
    except ValueError:
        raise RepoError(
            f"{repo.text}: its index, signed by {listing.signed_by}, has no valid expiry ({written.expires!r}); "
            "nothing was installed"
        ) from None
    if datetime.now(UTC) >= (expires if expires.tzinfo is not None else expires.replace(tzinfo=UTC)):
        raise RepoError(
            f"{repo.text}: its index expired on {written.expires}: the repository is no longer kept up to date, or an "
            "old copy is being served; its publisher signs it again with 'buildmgr publish --to REPO --sign NAME'; "
            "nothing was installed"
        )
    seen = _seen(dirs).get(repo.identity, 0)
    if written.version < seen:
        raise RepoError(
            f"{repo.text}: its index is version {written.version}, older than version {seen} this host saw before: "
            "an old copy of the repository is being served (a rollback); nothing was installed"
        )
    return listing


def remember(dirs: Dirs, repo: Repo, listing: Listing) -> None:
    """The version of a signed index this host takes, kept under a lock (two installs at once keep the higher):
    an older one is refused from now on. An index read unsigned proves nothing, and is not remembered."""
    if listing.signed_by is None:
        return
    path = dirs.seen_indexes
    with locked(path.with_name(path.name + ".lock")):
        seen = _seen(dirs)
        if seen.get(repo.identity, 0) < listing.index.version:
            seen[repo.identity] = listing.index.version
            atomic_write_text(path, index.Seen(index.Seen.VERSION, dict(sorted(seen.items()))).to_text())


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
            key_id, line = _vouched(entry, trust, repo.identity)
            judge = dataclasses.replace(judge, reasons=(*judge.reasons, line), vouched_by=key_id)
        judged.append(judge)
    return select.rank(judged)


@dataclass(frozen=True)
class Fetched:
    archive: Path
    blake2b: bytes  # BLAKE2b-512 of it, read with its sha256: what its prehashed .minisig is over


def fetch(repo: Repo, entry: index.Entry, dirs: Dirs, progress: Progress | None = None) -> Fetched:
    """The archive in `<cache>/downloads/<sha256>/`, its digest checked (a wrong one is deleted, never kept)."""
    folder = downloads(dirs) / entry.sha256
    archive = folder / entry.name
    with locked(folder / ".lock"):
        sha256, blake2b = file_digests(archive, "sha256", "blake2b") if archive.is_file() else (None, None)
        if sha256 is None or blake2b is None or sha256.hexdigest() != entry.sha256:
            archive.unlink(missing_ok=True)
            repo.fetch(entry, archive, progress)
            sha256, blake2b = file_digests(archive, "sha256", "blake2b")
            if sha256.hexdigest() != entry.sha256:
                archive.unlink()
                raise RepoError(
                    f"{entry.name} from {repo.text} has sha256 {sha256.hexdigest()[:12]}…, and the index says "
                    f"{entry.sha256[:12]}…: it was changed after it was published; nothing was installed"
                )
        atomic_write_text(archive.with_name(archive.name + ".sha256"), f"{entry.sha256}  {entry.name}\n")
    return Fetched(archive, blake2b.digest())


def verify(
    repo: Repo,
    entry: index.Entry,
    blake2b: bytes | None,
    trusted: Mapping[str, signing.PublicKey],
    allow_unsigned: bool,
) -> str | None:
    """The archive's .minisig and attestation against the keys that vouch for its repository here (`trusted`): the
    key that signed it, or None where it is unsigned and --allow-unsigned takes it. Of several signers, the first
    of those keys is checked (else the first signer, whose files a host that trusts none of them checks, as it
    checks an entry the index calls unsigned). Its receipt is checked against the index once extracted
    (`vouched`). `blake2b` None: these bytes were installed here before and are not read again; the attestation,
    over their sha256, is checked, and the .minisig, over the bytes, is not."""
    signer = voucher(entry, trusted) or entry.signed_by
    found = repo.signatures(entry, signer)
    minisig, attestation = found.get(index.MINISIG), found.get(index.ATTESTATION)
    if minisig is None or attestation is None:
        if signer is not None:
            raise RepoError(f"{entry.name}: the index says it is signed by {signer}, and its signature is missing")
        if not allow_unsigned:
            raise RepoError(f"{entry.name}: its signature files are missing; nothing was installed")
        return None
    try:
        signed = (
            signing.verify(None, minisig.decode("utf-8", "replace"), trusted, blake2b) if blake2b is not None else None
        )
        key_id, statement = signing.open_envelope(json.loads(attestation), trusted)
    except signing.Untrusted as err:
        if allow_unsigned:
            return None
        raise RepoError(f"{entry.name}: {err}, though its index says it is signed by a trusted key") from None
    except (signing.SignatureError, ValueError) as err:
        raise RepoError(f"{entry.name}: {err}; nothing was installed") from None
    if signed is not None and key_id != signed.key_id:
        raise RepoError(f"{entry.name}: its .minisig is by {signed.key_id} and its attestation by {key_id}")
    if index.attested_digest(statement, entry.name) != entry.sha256:
        raise RepoError(f"{entry.name}: its attestation is about another archive; nothing was installed")
    # what is signed is checked, not only that it is signed: the .minisig's trusted comment and the provenance
    if signed is not None and signed.trusted_comment != index.artifact_comment(
        entry.name, entry.sha256, entry.summary.id
    ):
        raise RepoError(
            f"{entry.name}: its signature's trusted comment {signed.trusted_comment[:120]!r} is not about this archive "
            "and build; nothing was installed"
        )
    mismatch = index.provenance_mismatch(statement, entry)
    if mismatch is not None:
        raise RepoError(f"{entry.name}: its attestation does not hold: {mismatch}; nothing was installed")
    return key_id


def vouched(repo: Repo, candidate: select.Candidate) -> Callable[[Artifact], list[Finding]]:
    """What `install` asks of the extracted archive: its receipt must be the one the index described (so the host's
    findings the candidate was judged by, before any download, are this receipt's)."""

    def vouch(artifact: Artifact) -> list[Finding]:
        entry = candidate.entry
        found = index.summary_of(artifact.receipt, artifact.receipt_sha256)
        if found != entry.summary:
            raise RepoError(
                f"{entry.name}: its receipt is not what {repo.text}'s index says of it ({_differing(found, entry.summary)}); "
                "nothing was installed"
            )
        return list(candidate.findings)

    return vouch


def _differing(found: object, said: object, path: str = "") -> str:
    """The fields where the receipt and the index disagree (dotted into nested records), each with both values."""
    if not dataclasses.is_dataclass(found) or type(found) is not type(said):
        return f"{path or 'summary'}: the receipt says {found!r}, the index {said!r}"
    parts = [
        _differing(getattr(found, f.name), getattr(said, f.name), f"{path}.{f.name}" if path else f.name)
        for f in dataclasses.fields(found)
        if getattr(found, f.name) != getattr(said, f.name)
    ]
    return "; ".join(parts)


def installed_here(dirs: Dirs, entry: index.Entry) -> str | None:
    """Whether a candidate is installed here already, for its line in the table: "these bytes" (installed from this
    very archive), "same build" (its build id, built here or installed from other bytes), else None."""
    for build in store.installed(dirs):
        if build.id == entry.summary.id:
            origin = build.receipt.installed_from
            return "these bytes" if origin is not None and origin.sha256 == entry.sha256 else "same build"
    return None


def installed_before(repo: Repo, dirs: Dirs, entry: index.Entry) -> Installed | None:
    """The build these very bytes were installed as here (its receipt keeps the archive's sha256), or the build
    whose receipt is byte for byte the one the archive holds (built and packaged here: the receipt lists every
    file's sha256, so its files are the archive's): known without a download or an extraction, so a host that runs
    `install --from` again and again fetches only what is new. The index's summary, which the candidate was judged
    and ranked by, must still be that receipt's (an index read unsigned, with --allow-unsigned, may say anything)."""
    for build in store.installed(dirs):
        origin = build.receipt.installed_from
        these_bytes = origin is not None and origin.sha256 == entry.sha256
        if build.id == entry.summary.id and (these_bytes or _receipt_sha256(build) == entry.summary.receipt_sha256):
            found = index.summary_of(build.receipt, entry.summary.receipt_sha256)
            if found != entry.summary:
                raise RepoError(
                    f"{entry.name}: the build installed from it is not what {repo.text}'s index says of it "
                    f"({_differing(found, entry.summary)}); nothing was installed"
                )
            return Installed(build, True, origin.warnings if origin is not None and these_bytes else ())
    return None


def _receipt_sha256(build: store.Build) -> str | None:
    try:
        return sha256_file(build.prefix / RECEIPT)
    except OSError:
        return None


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


def discard(dirs: Dirs, entry: index.Entry) -> None:
    """The download of an archive a build was installed and proven from: not needed again (that build's receipt
    keeps its sha256, by which `install` knows it), and a host that installs every release would keep them all.
    Under the folder's lock, so a fetch of the same archive waits and then downloads it afresh."""
    folder = downloads(dirs) / entry.sha256
    with locked(folder / ".lock"):
        for name in (entry.name, f"{entry.name}.sha256"):
            (folder / name).unlink(missing_ok=True)
