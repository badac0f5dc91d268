"""An OCI repository's index, rebuilt without a lock: a registry has none, so each publish rebuilds the index from the
archives' tags, pushes it one version more, and reads the tags again until its index holds every archive and signer
tagged by then (the last to push sees all)."""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

from buildmgr.artifacts import index
from buildmgr.artifacts.repo import policy
from buildmgr.artifacts.repo.base import parse_index
from buildmgr.artifacts.repo.net import registry_said, unreachable
from buildmgr.artifacts.repo.oci_store import (
    INDEX_CONFIG_MEDIA_TYPE,
    INDEX_MEDIA_TYPE,
    OCI_INDEX_TAG,
    OCI_TAG,
    SIGNATURE_TAG,
    TITLE,
    Remote,
    cosigned,
    layer,
)
from buildmgr.core.errors import BuildmgrError, RepositoryFault
from buildmgr.core.jsonshape import ShapeError
from buildmgr.trust import signing

TRIES = 20  # rebuilds of an index that another publisher changed meanwhile, before giving up


def push_index(remote: Remote, key: signing.SecretKey | None, days: int, own: index.Entry | None) -> index.Index:
    """The index rebuilt from the archives' tags (an entry the last index holds is taken from it, ours from `own`,
    another from its manifest's config) and pushed, one version more. No lock: two publishers at once may each push
    an index without the other's archive, so each reads the tags again after its push and rebuilds until its index
    holds every archive and signer tagged by then; the last to push sees all."""
    for attempt in range(TRIES):
        try:
            written = _rebuild(remote, key, days, own)
        except (BuildmgrError, ShapeError):  # a fault said, an entry that is not buildmgr's: no race, no retry
            raise
        except Exception as err:  # pushes and reads of one tag at the same moment (the registry: 400, 500)
            if not registry_said(err) or unreachable(err) is not None or attempt == TRIES - 1:
                raise
            written = None
        if written is not None:
            return written
        time.sleep(random.uniform(0.02, 0.2))  # apart from the others, the next try
    raise RepositoryFault(f"{remote.text}: other publishers kept changing its index ({TRIES} tries); publish again")


def _rebuild(remote: Remote, key: signing.SecretKey | None, days: int, own: index.Entry | None) -> index.Index | None:
    """One try of `push_index`: the index it pushed, or None where a tag came that it does not hold."""
    tags = remote.tags()
    files = remote.index_files(None)
    last = parse_index(remote.text, files.data) if files is not None else index.EMPTY
    known = {e.sha256: e for e in last.artifacts} | ({own.sha256: own} if own is not None else {})
    entries = []
    for tag in (t for t in tags if t.startswith(OCI_TAG)):
        entry = known.get(tag[len(OCI_TAG) :]) or remote.tagged(tag)
        if entry is not None:
            entries.append(cosigned(entry, tags))
    listed = tuple(sorted(entries, key=lambda e: (e.name, e.sha256)))
    rebuilt = index.Index(index.SCHEMA, listed, last.version, repository=last.repository)
    signed_last = remote.index_files(key.public.id) if key is not None and last.repository is None else None
    written = policy.named(rebuilt, key, signed_last).next(policy.expiry(days) if key is not None else None)
    _push_files(remote, written, key)
    return written if _holds_every_tag(written, remote.tags()) else None


def _push_files(remote: Remote, written: index.Index, key: signing.SecretKey | None) -> None:
    """index.json and its .minisig, the layers of a manifest tagged `index` (and `index-<KEY ID>`): a host checks
    the signature over the bytes of that very layer."""
    data = written.to_text().encode()
    with tempfile.TemporaryDirectory(prefix="buildmgr-oci-") as scratch:
        path = Path(scratch) / index.INDEX
        path.write_bytes(data)
        files = [f"{path}:{INDEX_MEDIA_TYPE}"]
        if key is not None:
            signature = Path(scratch) / index.INDEX_SIGNATURE
            signature.write_text(key.sign(data, index.signature_comment(written)))
            files.append(layer(signature, index.MINISIG))
        config = Path(scratch) / "index-config.json"
        signer = key.public.id if key is not None else None
        config.write_text(json.dumps({"version": written.version, "signed_by": signer, "expires": written.expires}))
        for tag in ([f"{OCI_INDEX_TAG}-{signer}"] if signer is not None else []) + [OCI_INDEX_TAG]:
            remote.push(tag, files, f"{config}:{INDEX_CONFIG_MEDIA_TYPE}", {TITLE: index.INDEX})


def _holds_every_tag(written: index.Index, tags: list[str]) -> bool:
    """Whether the index lists every archive tagged, with every later signer its signature tags name."""
    signers = {e.sha256: set(e.signers) for e in written.artifacts}
    for tag in tags:
        if tag.startswith(OCI_TAG) and tag[len(OCI_TAG) :] not in signers:
            return False
        if (m := SIGNATURE_TAG.fullmatch(tag)) and m[2] in signers and m[1] not in signers[m[2]]:
            return False
    return True
