"""The index a host judges a repository by: its signature checked over the bytes before a byte of them is parsed,
by a key that vouches for the repository here; not expired; not older than one this host took of the repository,
nor naming another (`seen`). `examine` is the same reading for `repo list`, which refuses nothing and says what
vouches for the rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from buildmgr.artifacts import index
from buildmgr.artifacts.deliver import seen
from buildmgr.artifacts.deliver.trust import not_vouching
from buildmgr.artifacts.repo import IndexFiles, Repo
from buildmgr.artifacts.repo.base import parse_index
from buildmgr.core.config import Dirs
from buildmgr.core.errors import RepositoryFault
from buildmgr.trust import keyring, signing

_OLD = "is not there (a registry published to before indexes were: 'buildmgr publish --to REPO --sign NAME' signs one)"


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
class SignedIndex:
    """index.json as served, and what its signature says of it (checked over the bytes, unparsed)."""

    files: IndexFiles
    signed_by: str | None  # the key that vouches for the repository here whose signature verified (None: no such)
    # what is said of it after "its index.json ": "is unsigned", "is signed by ID, which …", "does not match …"
    state: str
    changed: bool = False  # its signature does not match it: changed after it was signed


def _signed(repo: Repo, keys: Mapping[str, signing.PublicKey], trust: keyring.Trust) -> SignedIndex | None:
    """index.json and its signature by a key that vouches here (None: there is no index.json). A signature that does
    not match is a changed index, unless reading both again makes them agree (a publish came between the reads)."""
    files = repo.index_files()
    for again in (True, True, False):
        if files is None:
            return None
        if files.minisig is None:
            return SignedIndex(files, None, "is unsigned")
        try:
            key_id = signing.verify(files.data, files.minisig.decode("utf-8", "replace"), keys).key_id
            return SignedIndex(files, key_id, f"is signed by {key_id}")
        except signing.Untrusted:
            return SignedIndex(files, None, "is " + not_vouching([_signer(files.minisig)], trust, repo.identity))
        except signing.SignatureError:
            if not again:
                why = f"does not match its signature by {_signer(files.minisig)}: it was changed after it was signed"
                return SignedIndex(files, None, why, changed=True)
            files = repo.index_files()
    raise AssertionError("unreachable")


def _copies(repo: Repo, keys: Mapping[str, signing.PublicKey]) -> list[Listing]:
    """The last index each key that vouches here signed (`indexes/<KEYID>.json`, OCI `index-<KEYID>`), each whose
    signature holds: read where index.json is signed by none of them (a later signer, or an unsigned publish,
    signed it last)."""
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
    return found


def _instead(repo: Repo, state: str, found: list[Listing]) -> Listing:
    """The newest of the keys' own copies, with the note that says it was read instead of index.json."""
    chosen = max(found, key=lambda listing: listing.index.version)
    note = (
        f"{repo.text}: its {index.INDEX} {state}: reading {index.key_index(chosen.signed_by or '')} instead, the "
        f"last index key {chosen.signed_by} signed (version {chosen.index.version})"
    )
    return dataclasses.replace(chosen, note=note)


def read_index(repo: Repo, dirs: Dirs, allow_unsigned: bool) -> Listing:
    """The index to judge by: index.json where a key that vouches for the repository here signed it (a pinned
    repository: only its pinned keys), not expired, nor older than a version this host took of it (`seen`).
    Signed by no such key, --allow-unsigned reads it as it is (nothing vouches for it, and no version of it is
    remembered), as it takes an archive no such key signed; without it, the newest of the last indexes such keys
    signed is read instead (`_copies`), checked alike; none: refused."""
    trust = keyring.load(dirs)
    keys = trust.for_repo(repo.identity)
    newest = _signed(repo, keys, trust)
    if newest is not None and newest.signed_by is not None:
        return _fresh(repo, dirs, Listing(_parsed(repo, newest.files.data), newest.signed_by), keys)
    if newest is not None and newest.changed:
        raise RepositoryFault(f"{repo.text}: its {index.INDEX} {newest.state}; nothing was installed")
    if newest is None:  # a directory without index.json or a registry without the repository: a user error
        repo.require()
    state = newest.state if newest is not None else _OLD
    if allow_unsigned:
        # a registry published to before indexes were lists its tags, read as unsigned
        current = _parsed(repo, newest.files.data) if newest is not None else repo.listing()
        note = f"{repo.text}: its {index.INDEX} {state}: read as it is (--allow-unsigned), no version remembered"
        return Listing(current, None, note)
    found = _copies(repo, keys)
    if found:
        return _fresh(repo, dirs, _instead(repo, state, found), keys)
    raise RepositoryFault(
        f"{repo.text}: no index here is signed by a key trusted for it: its {index.INDEX} {state}; nothing was "
        "installed"
    )


def _fresh(repo: Repo, dirs: Dirs, listing: Listing, keys: Collection[str]) -> Listing:
    """A signed index, refused where it expired, is older than one this host took, or names another repository
    (`keys`: those that vouch for the repository here)."""
    why = _stale(repo, dirs, listing, keys)
    if why is not None:
        raise RepositoryFault(f"{repo.text}: {why}; nothing was installed")
    return listing


def _stale(repo: Repo, dirs: Dirs, listing: Listing, keys: Collection[str]) -> str | None:
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
    return seen.problem(repo, dirs, written, keys)


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
    state: str  # what is said of it, as `Signed.state`, with why it is not verified where it is not
    note: str | None = None  # a key's own copy listed instead of index.json, as `install --from` reads it


def examine(repo: Repo, dirs: Dirs) -> Examined:
    """The index as `install --from` would read it (index.json, else a key's own copy), and what vouches for it:
    nothing where `install --from` would refuse it (a signature by no key trusted here, an expired index, a
    rollback, another repository in a location's place)."""
    trust = keyring.load(dirs)
    keys = trust.for_repo(repo.identity)
    newest = _signed(repo, keys, trust)
    if newest is None:  # none: a directory without one says so; a registry published to before indexes lists its tags
        return Examined(repo.listing(), None, _OLD)
    read = _parsed(repo, newest.files.data)
    listing = Listing(read, newest.signed_by)
    if newest.signed_by is None and not newest.changed and (found := _copies(repo, keys)):
        listing = _instead(repo, newest.state, found)
    if listing.signed_by is None:
        return Examined(read, None, newest.state)
    why = _stale(repo, dirs, listing, keys)
    if why is not None:
        return Examined(listing.index, None, f"is signed by {listing.signed_by}, and this host would refuse it: {why}")
    return Examined(listing.index, listing.signed_by, f"is signed by {listing.signed_by}", listing.note)
