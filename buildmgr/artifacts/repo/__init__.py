"""Binary repositories, three kinds behind one interface (`Repo`): a directory (a shared file system, or anything a
static web server serves) written under a lock; the same layout read over http(s); and an OCI registry through the
`oras` SDK, where each archive is its own manifest tagged `sha256-<digest>` (so two publishers at once never write the
same thing), and the index is a manifest of its own, tagged `index`, rebuilt from those tags at each publish. Every
write of an index is one version more, and signed (`--sign`) it carries an expiry and its .minisig, over the very
bytes a host reads; the last index each key signed is kept too (`indexes/ID.json`, tag `index-ID`). Nothing a reader
sees is ever half written: a blob is copied to a temporary name, checked and renamed, the index replaced atomically,
last; a registry makes a manifest visible only once its blobs are in.

`base` the interface and its bounds, `net` the network's rule and faults, `policy` what publishing means, then one
module per transport: `directory`, `web` (http(s), read-only), `oci` (with `oci_store`, the registry's tags,
manifests and blobs, and `oci_index`, its index rebuilt without a lock)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from buildmgr.artifacts.repo.base import IndexFiles, Progress, Published, Repo, RepoError
from buildmgr.artifacts.repo.directory import DirRepo
from buildmgr.artifacts.repo.net import on_this_machine
from buildmgr.artifacts.repo.oci import OciRepo
from buildmgr.artifacts.repo.web import HttpRepo
from buildmgr.errors import UserError

__all__ = ["IndexFiles", "Progress", "Published", "Repo", "RepoError", "open_repo"]


def open_repo(text: str) -> Repo:
    """A directory, `file://`, `http(s)://` (read-only) or `oci://HOST[:PORT]/NAMESPACE/NAME`."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme == "http" and not on_this_machine(parts.hostname or ""):
        # anyone on the way could serve an old index, or drop entries, and read what a host asks for
        raise UserError(
            f"{text}: plain http:// only for a repository on this machine (127.0.0.0/8, ::1, localhost): use https://"
        )
    if parts.scheme in ("http", "https"):
        return HttpRepo(text, text if text.endswith("/") else text + "/")
    if parts.scheme == "oci":
        return OciRepo.parse(text)
    if parts.scheme == "file":
        return DirRepo(text, Path(urllib.parse.unquote(parts.path)))
    if parts.scheme and len(parts.scheme) > 1:
        raise UserError(f"{text}: a repository is a directory, an http(s):// URL or oci://HOST/NAMESPACE/NAME")
    return DirRepo(text, Path(text))
