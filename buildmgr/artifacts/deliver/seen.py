"""What this host remembers of the repositories it took a signed index from (`<data>/repositories.json`): the highest
version per location and per repository name as its signer names it, and the name each location's index carried.
An older index is a rollback, wherever it is read; an index that names another repository than its location's did
is another repository served in its place. A name is its signer's word, so its versions are kept per signing key: a
key trusted for one repository cannot hold another back by claiming its name."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from buildmgr.artifacts import index
from buildmgr.artifacts.repo import Repo
from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.core.fsutil import atomic_write_text, locked
from buildmgr.core.jsonshape import ShapeError
from buildmgr.trust import repo_location as location


def load(dirs: Dirs) -> index.Seen:
    """The file as this buildmgr keys it: a location written by an earlier one in today's spelling (two spellings of
    one location as one, the higher version kept)."""
    path = dirs.seen_indexes
    try:
        text = path.read_text()
    except FileNotFoundError:
        return index.Seen(index.Seen.VERSION, {})
    try:
        found = index.Seen.from_text(text)
    except ShapeError as err:
        raise UserError(
            f"{path} is not buildmgr's ({err}): remove it (the index versions this host saw are forgotten then)"
        ) from None
    versions: dict[str, int] = {}
    for where, version in found.repositories.items():
        key = location.canonical(where)
        versions[key] = max(version, versions.get(key, 0))
    names = {location.canonical(where): name for where, name in found.names.items()}
    return index.Seen(index.Seen.VERSION, versions, names, dict(found.named))


def problem(repo: Repo, dirs: Dirs, taken: index.Index, vouching: Collection[str]) -> str | None:
    """Why this host refuses the index (None: it does not): it names another repository than the one this location's
    index named before (another repository signed by the same key, served in its place), or it is older than the
    highest version this host took of this location, or of its repository as any key that vouches for the location
    here (`vouching`) named it: a key trusted for another repository only holds no repository of this one back, and
    a rotated or second key's older index is still older."""
    seen = load(dirs)
    where = repo.identity
    before = seen.names.get(where)
    if before == FORGOTTEN and taken.repository is None:
        return (
            "its index names no repository, and this host took a named one from here before (forgotten since: a "
            "named one of any name is taken here, never one from before indexes named their repository, which could "
            "be an old one replayed)"
        )
    if before is not None and before != FORGOTTEN and taken.repository != before:
        said = f"repository {taken.repository}" if taken.repository else "no repository"
        return (
            f"its index names {said}, and the index this host took from here before named {before}: another "
            f"repository is being served in its place (if its publisher made it anew, 'buildmgr repo forget "
            f"{repo.text}' takes it as a first contact)"
        )
    named = [seen.named.get(f"{key}/{taken.repository}", 0) for key in vouching] if taken.repository else []
    floor = max([seen.repositories.get(where, 0), *named])
    if taken.version < floor:
        return (
            f"its index is version {taken.version}, older than version {floor} this host saw before: an old copy of "
            "the repository is being served (a rollback)"
        )
    return None


def remember(dirs: Dirs, repo: Repo, taken: index.Index, signed_by: str) -> None:
    """The version of a signed index this host takes (signed by `signed_by`), and the repository it names, kept under
    a lock (two installs at once keep the higher)."""
    path = dirs.seen_indexes
    with locked(path.with_name(path.name + ".lock")):
        seen = load(dirs)
        where, name = repo.identity, taken.repository
        key = f"{signed_by}/{name}" if name is not None else None  # its name as the key that signed it names it
        versions = seen.repositories | {where: max(taken.version, seen.repositories.get(where, 0))}
        names = seen.names | ({where: name} if name is not None else {})
        named = seen.named | ({key: max(taken.version, seen.named.get(key, 0))} if key is not None else {})
        _write(dirs, index.Seen(index.Seen.VERSION, versions, names, named))


FORGOTTEN = ""  # a location's name, forgotten (`forget`): the next named index names it again


@dataclass(frozen=True)
class Forgotten:
    identity: str
    version: int | None  # the version this host had taken from there (None: it had taken none)
    name: str | None  # the repository its index named


def forget(dirs: Dirs, repo: Repo) -> Forgotten:
    """This location as a first contact again: its version and the repository its index named are dropped (the
    repository's own highest version stays: an older index of it is still a rollback, wherever it is read)."""
    path, where = dirs.seen_indexes, repo.identity
    known = load(dirs)
    if where not in known.repositories and not known.names.get(where):
        return Forgotten(where, None, None)  # nothing to forget: nothing written, not even a lock
    with locked(path.with_name(path.name + ".lock")):
        seen = load(dirs)
        version, name = seen.repositories.get(where), seen.names.get(where)
        if version is not None or name is not None:
            versions = {k: v for k, v in seen.repositories.items() if k != where}
            # a name taken here before stays known as forgotten: an unnamed index (from before names) is still refused
            names = {k: v for k, v in seen.names.items() if k != where} | ({where: FORGOTTEN} if name else {})
            _write(dirs, index.Seen(index.Seen.VERSION, versions, names, seen.named))
    return Forgotten(where, version, name or None)


def _write(dirs: Dirs, seen: index.Seen) -> None:
    ordered = index.Seen(
        seen.schema,
        dict(sorted(seen.repositories.items())),
        dict(sorted(seen.names.items())),
        dict(sorted(seen.named.items())),
    )
    atomic_write_text(dirs.seen_indexes, ordered.to_text())
