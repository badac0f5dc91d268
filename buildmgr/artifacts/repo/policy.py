"""What publishing means, the same for a directory and a registry: the bytes read once and checked, the entry an
archive gets, when publishing again changes nothing, and when it adds a second signature beside the first."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from datetime import UTC, datetime, timedelta

from buildmgr.artifacts import index
from buildmgr.artifacts.repo.base import IndexFiles
from buildmgr.artifacts.unpack import Artifact
from buildmgr.core.errors import RepositoryFault, UserError
from buildmgr.core.jsonshape import ShapeError
from buildmgr.trust import signing


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def expiry(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat(timespec="seconds")


def named(current: index.Index, key: signing.SecretKey | None, own: IndexFiles | None) -> index.Index:
    """The index with its repository's name: the one it has; else the one the last index this key signed named
    (`own`, its signature checked: a publisher of a buildmgr from before names wrote index.json without it); else a
    new one, at its first write (a random 128-bit id: two repositories never share one, as two a publisher named
    could)."""
    if current.repository is not None:
        return current
    return dataclasses.replace(current, repository=_own_name(key, own) or secrets.token_hex(16))


def _own_name(key: signing.SecretKey | None, own: IndexFiles | None) -> str | None:
    if key is None or own is None or own.minisig is None:
        return None
    try:
        signing.verify(own.data, own.minisig.decode("utf-8", "replace"), {key.public.id: key.public})
        return index.Index.from_text(own.data).repository
    except (signing.SignatureError, ShapeError):
        return None


def read_checked(artifact: Artifact) -> bytes:
    """The archive's bytes, read once and checked against its digest: what is copied, pushed and signed is these
    bytes, never the file read again (a file swapped in between would get a signature naming the good digest)."""
    data = artifact.path.read_bytes()
    if hashlib.sha256(data).hexdigest() != artifact.sha256:
        raise RepositoryFault(f"{artifact.path.name} changed while it was being published; try again")
    return data


def statement_files(artifact: Artifact, data: bytes, key: signing.SecretKey, builder: str) -> dict[str, bytes]:
    """The .minisig of the archive's checked bytes (`read_checked`) and its DSSE attestation."""
    name, digest = artifact.path.name, artifact.sha256
    comment = index.artifact_comment(name, digest, artifact.receipt.id)
    statement = index.statement(name, digest, artifact.receipt, artifact.receipt_sha256, builder)
    return {
        index.MINISIG: key.sign(data, comment).encode(),
        index.ATTESTATION: (json.dumps(signing.envelope(statement, key), indent=2) + "\n").encode(),
    }


def entry_of(artifact: Artifact, size: int, key: signing.SecretKey | None, known: index.Entry | None) -> index.Entry:
    return index.Entry(
        artifact.path.name,
        artifact.sha256,
        size,
        now(),
        index.summary_of(artifact.receipt, artifact.receipt_sha256),
        key.public.id if key is not None else (known.signed_by if known is not None else None),
    )


def is_known(known: index.Entry | None, artifact: Artifact, key: signing.SecretKey | None) -> bool:
    """Publishing it again changes nothing: the same archive, and no new signature asked for."""
    return known is not None and known.name == artifact.path.name and (key is None or key.public.id in known.signers)


def cosigns(text: str, known: index.Entry | None, artifact: Artifact, key: signing.SecretKey | None) -> bool:
    """Another key signs an archive a first key signed: its signature goes beside the first's, which stays as it is
    (a host that trusts only the first key still installs it). A signed archive is published under its published
    name only: its signatures name that file, and an entry of another name would drop them."""
    if known is None or not known.signers:
        return False
    if known.name != artifact.path.name:
        raise UserError(
            f"{artifact.path.name} is {known.name} of {text} (sha256 {known.sha256[:12]}…), signed by "
            f"{', '.join(known.signers)}: publish it under that name"
        )
    return key is not None and key.public.id not in known.signers
