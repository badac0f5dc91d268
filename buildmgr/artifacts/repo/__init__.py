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

from pathlib import Path

from buildmgr.artifacts.repo.base import IndexFiles, Progress, Published, Repo
from buildmgr.artifacts.repo.directory import DirRepo
from buildmgr.artifacts.repo.net import NO_LIMITS_GIVEN, PLAIN_HTTP, Limits, plain_http_refused
from buildmgr.artifacts.repo.oci import OciRepo
from buildmgr.artifacts.repo.web import HttpRepo
from buildmgr.core.errors import UserError
from buildmgr.trust import repo_location as location
from buildmgr.trust.repo_location import Kind

__all__ = ["IndexFiles", "Limits", "Progress", "Published", "Repo", "open_repo"]


def open_repo(text: str, limits: Limits = NO_LIMITS_GIVEN) -> Repo:
    """A directory, `file://`, `http(s)://` (read-only) or `oci://HOST[:PORT]/NAMESPACE/NAME`; `limits`: how long a
    server may take."""
    kind = location.kind_of(text)
    if kind is Kind.HTTP:
        if plain_http_refused(text):
            # anyone on the way could serve an old index, or drop entries, and read what a host asks for
            raise UserError(f"{text}: {PLAIN_HTTP}: use https://")
        return HttpRepo(text, location.url_identity(text), limits)
    if kind is Kind.OCI:
        return OciRepo.parse(text, limits)
    return DirRepo(text, Path(location.directory_identity(text)))
