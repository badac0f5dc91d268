"""An archive fetched into the download cache and checked: its digest, its signature and attestation against the
keys that vouch here, its receipt against the index; or known without a download, installed here before."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildmgr import store
from buildmgr.artifacts import index, select
from buildmgr.artifacts.deliver.trust import voucher
from buildmgr.artifacts.install import Installed
from buildmgr.artifacts.repo import Progress, Repo
from buildmgr.artifacts.unpack import Artifact
from buildmgr.core import jsonshape
from buildmgr.core.config import Dirs
from buildmgr.core.errors import RepositoryFault
from buildmgr.core.findings import Finding
from buildmgr.core.fsutil import atomic_write_text, file_digests, locked, sha256_file
from buildmgr.core.jsonshape import ShapeError
from buildmgr.store.receipt import FILE_NAME as RECEIPT
from buildmgr.trust import signing


def downloads(dirs: Dirs) -> Path:
    return dirs.cache / "downloads"


@dataclass(frozen=True)
class Fetched:
    archive: Path
    blake2b: bytes  # BLAKE2b-512 of it, read with its sha256: what its prehashed .minisig is over


def held(dirs: Dirs, entry: index.Entry) -> contextlib.AbstractContextManager[bool]:
    """The lock of an archive's download folder: held from its fetch through its install and the download's
    deletion, so a second install of the same archive waits, then finds it installed (`installed_before`)."""
    return locked(downloads(dirs) / entry.sha256 / ".lock")


def fetch_held(repo: Repo, entry: index.Entry, dirs: Dirs, progress: Progress | None = None) -> Fetched:
    """The archive in `<cache>/downloads/<sha256>/`, its digest checked (a wrong one is deleted, never kept); the
    caller holds the folder's lock (`held`)."""
    archive = downloads(dirs) / entry.sha256 / entry.name
    sha256, blake2b = file_digests(archive, "sha256", "blake2b") if archive.is_file() else (None, None)
    if sha256 is None or blake2b is None or sha256.hexdigest() != entry.sha256:
        archive.unlink(missing_ok=True)
        repo.fetch(entry, archive, progress)
        sha256, blake2b = file_digests(archive, "sha256", "blake2b")
        if sha256.hexdigest() != entry.sha256:
            archive.unlink()
            raise RepositoryFault(
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
            raise RepositoryFault(
                f"{entry.name}: the index says it is signed by {signer}, and its signature is missing"
            )
        if not allow_unsigned:
            raise RepositoryFault(f"{entry.name}: its signature files are missing; nothing was installed")
        return None
    try:
        signed = (
            signing.verify(None, minisig.decode("utf-8", "replace"), trusted, blake2b) if blake2b is not None else None
        )
        key_id, statement = signing.open_envelope(_envelope(entry, attestation), trusted)
    except signing.Untrusted as err:
        if allow_unsigned:
            return None
        raise RepositoryFault(f"{entry.name}: {err}, though its index says it is signed by a trusted key") from None
    except (signing.SignatureError, ValueError) as err:
        raise RepositoryFault(f"{entry.name}: {err}; nothing was installed") from None
    if signed is not None and key_id != signed.key_id:
        raise RepositoryFault(f"{entry.name}: its .minisig is by {signed.key_id} and its attestation by {key_id}")
    if index.attested_digest(statement, entry.name) != entry.sha256:
        raise RepositoryFault(f"{entry.name}: its attestation is about another archive; nothing was installed")
    # what is signed is checked, not only that it is signed: the .minisig's trusted comment and the provenance
    if signed is not None and signed.trusted_comment != index.artifact_comment(
        entry.name, entry.sha256, entry.summary.id
    ):
        raise RepositoryFault(
            f"{entry.name}: its signature's trusted comment {signed.trusted_comment[:120]!r} is not about this archive "
            "and build; nothing was installed"
        )
    mismatch = index.provenance_mismatch(statement, entry)
    if mismatch is not None:
        raise RepositoryFault(f"{entry.name}: its attestation does not hold: {mismatch}; nothing was installed")
    return key_id


def _envelope(entry: index.Entry, attestation: bytes) -> dict[str, Any]:
    try:
        found = jsonshape.parse(attestation)
    except ShapeError as err:
        raise RepositoryFault(f"{entry.name}: its attestation is {err}; nothing was installed") from None
    if not isinstance(found, dict):
        raise RepositoryFault(
            f"{entry.name}: its attestation is not a DSSE envelope (a JSON object); nothing was installed"
        )
    return found


def vouched(repo: Repo, candidate: select.Candidate) -> Callable[[Artifact], list[Finding]]:
    """What `install` asks of the extracted archive: its receipt must be the one the index described (so the host's
    findings the candidate was judged by, before any download, are this receipt's)."""

    def vouch(artifact: Artifact) -> list[Finding]:
        entry = candidate.entry
        found = index.summary_as_indexed(artifact.receipt, artifact.receipt_sha256, entry.summary)
        if found != entry.summary:
            raise RepositoryFault(
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
            found = index.summary_as_indexed(build.receipt, entry.summary.receipt_sha256, entry.summary)
            if found != entry.summary:
                raise RepositoryFault(
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


def discard_held(dirs: Dirs, entry: index.Entry) -> None:
    """The download of an archive a build was installed from (not needed again: that build's receipt keeps its
    sha256, by which `install` knows it, and a host that installs every release would keep them all), or that failed
    its checks; the caller holds the folder's lock (`held`)."""
    folder = downloads(dirs) / entry.sha256
    for name in (entry.name, f"{entry.name}.sha256"):
        (folder / name).unlink(missing_ok=True)
