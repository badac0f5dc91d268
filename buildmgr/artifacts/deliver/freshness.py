"""The index a host judges a repository by: its signature checked over the bytes before a byte of them is parsed,
by a key that vouches for the repository here; not expired; not older than one this host took of the repository,
nor naming another (`seen`). `examine` is the same reading for `repo list`, which refuses nothing and says what
vouches for the rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from buildmgr import keyring, signing
from buildmgr.artifacts import index
from buildmgr.artifacts.deliver import seen
from buildmgr.artifacts.deliver.trust import not_vouching
from buildmgr.artifacts.repo import IndexFiles, Repo, RepoError
from buildmgr.artifacts.repo.base import parse_index
from buildmgr.config import Dirs

_OLD = "not signed (an index from before indexes were: 'buildmgr publish --to REPO --sign NAME' signs it)"


@dataclass(frozen=True)
class Listing:
    """The index a host judges a repository's artifacts by."""

    index: index.Index
    signed_by: str | None  # the key whose signature over it verified (None: read unsigned, with --allow-unsigned)
    note: str | None = None  # what to tell: an index read unsigned, or the last one a key signed read instead


def _parsed(repo: Repo, data: bytes, where: str = index.INDEX) -> index.Index:
    """Parsed once its signature was checked, or where nothing vouches for it anyway (--allow-unsigned, `repo list`)."""
    return parse_index(repo.text, data, where)


def _signer(minisig: bytes) -> str:
    try:
        return signing.signer_of(minisig.decode("utf-8", "replace"))
    except signing.SignatureError:
        return "no key (its .minisig is not one)"


@dataclass(frozen=True)
class Signed:
    """index.json as served, and what its signature says of it (checked over the bytes, unparsed)."""

    files: IndexFiles
    signed_by: str | None  # the key that vouches for the repository here whose signature verified (None: no such)
    state: str  # where none: why, as "unsigned", "signed by ID, which …", "does not match its signature by ID: …"
    changed: bool = False  # its signature does not match it: changed after it was signed


def _signed(repo: Repo, keys: Mapping[str, signing.PublicKey], trust: keyring.Trust) -> Signed | None:
    """index.json and its signature by a key that vouches here (None: there is no index.json). A signature that does
    not match is a changed index, unless reading both again makes them agree (a publish came between the reads)."""
    files = repo.index_files()
    for again in (True, True, False):
        if files is None:
            return None
        if files.minisig is None:
            return Signed(files, None, "unsigned")
        try:
            key_id = signing.verify(files.data, files.minisig.decode("utf-8", "replace"), keys).key_id
            return Signed(files, key_id, f"signed by {key_id}")
        except signing.Untrusted:
            return Signed(files, None, not_vouching([_signer(files.minisig)], trust, repo.identity))
        except signing.SignatureError:
            if not again:
                why = f"does not match its signature by {_signer(files.minisig)}: it was changed after it was signed"
                return Signed(files, None, why, changed=True)
            files = repo.index_files()
    raise AssertionError("unreachable")


def read_index(repo: Repo, dirs: Dirs, allow_unsigned: bool) -> Listing:
    """The index to judge by: index.json where a key that vouches for the repository here signed it (a pinned
    repository: only its pinned keys), not expired, nor older than a version this host took of it (`seen`).
    Signed by no such key, --allow-unsigned reads it as it is (nothing vouches for it, and no version of it is
    remembered), as it takes an archive no such key signed; without it, the newest of the last indexes such keys
    signed is read instead (a later signer, or an unsigned publish, signed index.json last), checked alike; none:
    refused."""
    trust = keyring.load(dirs)
    keys = trust.for_repo(repo.identity)
    newest = _signed(repo, keys, trust)
    if newest is not None and newest.signed_by is not None:
        return _fresh(repo, dirs, Listing(_parsed(repo, newest.files.data), newest.signed_by))
    if newest is not None and newest.changed:
        raise RepoError(f"{repo.text}: its {index.INDEX} {newest.state}; nothing was installed")
    if newest is None:  # a directory without index.json or a registry without the repository: a user error
        repo.require()
    state = newest.state if newest is not None else _OLD
    if allow_unsigned:
        # a registry published to before indexes were lists its tags, read as unsigned
        current = _parsed(repo, newest.files.data) if newest is not None else repo.listing()
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
        f"{repo.text}: no index here is signed by a key trusted for it: its {index.INDEX} is {state}; nothing was "
        "installed"
    )


def _fresh(repo: Repo, dirs: Dirs, listing: Listing) -> Listing:
    """A signed index, refused where it expired, is older than one this host took, or names another repository."""
    why = _stale(repo, dirs, listing)
    if why is not None:
        raise RepoError(f"{repo.text}: {why}; nothing was installed")
    return listing


def _stale(repo: Repo, dirs: Dirs, listing: Listing) -> str | None:
    """Why this host does not take a signed index (None: it does): no valid expiry, expired, or refused by what it
    remembers (`seen.problem`)."""
    written = listing.index
    assert listing.signed_by is not None, "only a signed index is judged so"
    try:
        expires = datetime.fromisoformat(written.expires or "")
    except ValueError:
        return f"its index, signed by {listing.signed_by}, has no valid expiry ({written.expires!r})"
    if datetime.now(UTC) >= (expires if expires.tzinfo is not None else expires.replace(tzinfo=UTC)):
        return (
            f"its index expired on {written.expires}: the repository is no longer kept up to date, or an old copy is "
            "being served; its publisher signs it again with 'buildmgr publish --to REPO --sign NAME'"
        )
    return seen.problem(repo, dirs, written, listing.signed_by)


def remember(dirs: Dirs, repo: Repo, listing: Listing) -> None:
    """The version of a signed index this host takes (`seen.remember`): an older one of its repository is refused
    from now on. An index read unsigned proves nothing, and is not remembered."""
    if listing.signed_by is not None:
        seen.remember(dirs, repo, listing.index, listing.signed_by)


@dataclass(frozen=True)
class Examined:
    """A repository's index as `repo list` shows it: parsed whatever vouches for it, and whether a key that vouches
    for the repository here signed it."""

    index: index.Index
    vouched_by: str | None  # that key (None: nothing listed is verified)
    state: str  # what its signature says, in the words of the refusals ("unsigned", "signed by ID, which …", …)


def examine(repo: Repo, dirs: Dirs) -> Examined:
    """The index, and what vouches for it: nothing where `install --from` would refuse it (a signature by no key
    trusted here, an expired index, a rollback, another repository in a location's place)."""
    trust = keyring.load(dirs)
    newest = _signed(repo, trust.for_repo(repo.identity), trust)
    if newest is None:  # none: a directory without one says so; a registry published to before indexes lists its tags
        return Examined(repo.listing(), None, _OLD)
    read = _parsed(repo, newest.files.data)
    if newest.signed_by is None:
        return Examined(read, None, newest.state)
    why = _stale(repo, dirs, Listing(read, newest.signed_by))
    if why is not None:
        return Examined(read, None, f"{newest.state}, and this host would refuse it: {why}")
    return Examined(read, newest.signed_by, newest.state)
