"""The index a host judges a repository by: signed by a key that vouches for the repository here, not older than
one this host took from it before, not expired; and the version it takes, remembered."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from buildmgr import keyring, signing
from buildmgr.artifacts import index
from buildmgr.artifacts.deliver.trust import not_vouching
from buildmgr.artifacts.repo import IndexFiles, Repo, RepoError
from buildmgr.config import Dirs
from buildmgr.errors import UserError
from buildmgr.fsutil import atomic_write_text, locked
from buildmgr.jsonshape import ShapeError


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
        state = not_vouching([_signer(newest[0].minisig)], trust, repo.identity)
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
