"""Archives read safely: every entry checked before anything is written (no absolute path, no '..', no device, no
link out of the tree), for the pinned sdist and for an artifact alike."""

from __future__ import annotations

import posixpath
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from buildmgr.core.errors import UserError

if TYPE_CHECKING:
    import tarfile


def unsafe_entry(member: tarfile.TarInfo, inside: PurePosixPath) -> str | None:
    name = PurePosixPath(member.name)
    if name.is_absolute():
        return "absolute path"
    if ".." in name.parts:
        return "'..' in path"
    if member.isdev() or member.isfifo():
        return "device or fifo"
    if member.issym():
        target = PurePosixPath(member.linkname)
        if target.is_absolute():
            return f"absolute link to {member.linkname!r}"
        resolved = PurePosixPath(posixpath.normpath(name.parent / target))
        if resolved.parts[:1] == ("..",) or not resolved.is_relative_to(inside):
            return f"link to {member.linkname!r} leaves the tree"
    if member.islnk():
        target = PurePosixPath(member.linkname)
        if target.is_absolute() or ".." in target.parts or not target.is_relative_to(inside):
            return f"hard link to {member.linkname!r} leaves the tree"
    return None


def safe_extract(archive: Path, subdir: str, dest: Path) -> None:
    """Extract only `<top>/<subdir>/` of a .tar.gz into dest, refusing any entry that could escape.

    Every entry is checked before anything is written; dest must not exist yet.
    """
    import tarfile  # here: a no-op build imports this module and extracts nothing

    try:
        tar = tarfile.open(archive, "r:*")
    except (OSError, tarfile.TarError) as err:
        raise UserError(f"{archive}: not a readable tar archive ({err})") from None
    with tar:
        members = tar.getmembers()
        for member in members:
            reason = unsafe_entry(member, PurePosixPath())
            if reason:
                raise UserError(f"{archive.name}: unsafe entry {member.name!r} ({reason}); refusing to extract")
        tops = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
        if len(tops) != 1:
            raise UserError(f"{archive.name}: expected one top-level directory, found {len(tops)}")
        inside = PurePosixPath(tops.pop(), subdir)
        wanted = []
        for member in members:
            name = PurePosixPath(member.name)
            if name == inside or not name.is_relative_to(inside):
                continue
            relative = name.relative_to(inside)
            if relative.parts[0] == ".git":  # a submodule's gitdir pointer into the sdist's own .git
                continue
            reason = unsafe_entry(member, inside)
            if reason:
                raise UserError(f"{archive.name}: unsafe entry {member.name!r} ({reason}); refusing to extract")
            member.name = str(relative)
            if member.islnk():
                member.linkname = str(PurePosixPath(member.linkname).relative_to(inside))
            wanted.append(member)
        if not wanted:
            raise UserError(f"{archive.name}: has no {subdir}/; is this the right package?")
        dest.mkdir(parents=True)
        tar.extractall(dest, members=wanted, filter="data")
