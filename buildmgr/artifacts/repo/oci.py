"""A repository in an OCI registry (`oci://HOST[:PORT]/NAMESPACE/NAME`): read, downloaded from and published to
through the `oras` SDK; plain http only for a registry on this machine, as docker does."""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildmgr.artifacts import index
from buildmgr.artifacts.repo import oci_index, policy
from buildmgr.artifacts.repo.base import (
    IndexFiles,
    Larger,
    Other,
    Progress,
    Published,
    Repo,
    append,
    declared,
    http_total,
    parse_index,
)
from buildmgr.artifacts.repo.net import (
    NO_LIMITS_GIVEN,
    Limits,
    TooSlow,
    registry_said,
    transport_errors,
    unreachable,
    within,
)
from buildmgr.artifacts.repo.oci_store import (
    ENTRY_MEDIA_TYPE,
    OCI_SIGNATURE_TAG,
    OCI_TAG,
    SIGNATURE_MEDIA_TYPE,
    TITLE,
    Remote,
    client,
    cosigned,
    layer,
)
from buildmgr.artifacts.unpack import Artifact
from buildmgr.core import jsonshape
from buildmgr.core.errors import BuildmgrError, NetworkFault, RepositoryFault, UserError
from buildmgr.core.jsonshape import ShapeError
from buildmgr.trust import repo_location as location
from buildmgr.trust import signing

LEGACY_MAX = 1000  # archive tags of a registry published to before indexes were, read one by one at the most
# the OCI distribution spec's repository name: path components of lower-case letters and digits, . _ __ - between
_OCI_NAME = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")


@dataclass(frozen=True)
class OciRepo(Repo):
    text: str
    registry: str  # HOST[:PORT]
    name: str  # NAMESPACE/NAME
    limits: Limits = NO_LIMITS_GIVEN

    @classmethod
    def parse(cls, text: str, limits: Limits) -> OciRepo:
        parts = urllib.parse.urlsplit(text)
        name = parts.path.strip("/")
        if not parts.netloc or "/" not in name or parts.query or parts.fragment or ":" in name or "@" in name:
            raise UserError(f"{text}: an OCI repository is oci://HOST[:PORT]/NAMESPACE/NAME (no tag)")
        if not _OCI_NAME.fullmatch(name):
            lower = _OCI_NAME.fullmatch(name.lower())
            fix = (
                f"oci://{parts.netloc}/{name.lower()}" if lower else "lower-case letters, digits and . _ - between them"
            )
            raise UserError(f"{text}: an OCI repository name is lower case, of letters, digits and . _ -; use {fix}")
        location.url_identity(text)  # a user, a port that is no number, a host that is none: said before any request
        return cls(text, parts.netloc, name, limits)

    @property
    def insecure(self) -> bool:
        """Plain http for a registry on this machine only, as docker does; https everywhere else."""
        host = self.registry.split("]")[0] + "]" if self.registry.startswith("[") else self.registry.rsplit(":", 1)[0]
        return location.on_this_machine(host)

    @property
    def identity(self) -> str:
        return location.url_identity(self.text)

    def _remote(self) -> Remote:
        return Remote(client(self.insecure, self.limits), self.text, self.registry, self.name, self.limits)

    def _call(self, what: str, action: Callable[[Remote], Any]) -> Any:
        remote = self._remote()
        try:
            return action(remote)
        except BuildmgrError:
            raise
        except Exception as err:
            if not registry_said(err):
                raise
            if why := unreachable(err, self.limits.timeout_s):  # the words the http:// case says for the same fault
                raise NetworkFault(f"cannot reach {self.registry} ({self.text}): {why}") from None
            shown = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise RepositoryFault(f"{self.text}: {what} failed ({shown})") from None

    def require(self) -> None:
        """Its tag list (a 404: no repository of that name), never each tag's manifest (a registry could list a
        great many)."""
        self._call("reading its tags", lambda remote: remote.tags())

    def index_files(self, key_id: str | None = None) -> IndexFiles | None:
        found: IndexFiles | None = self._call("reading its index", lambda remote: remote.index_files(key_id))
        return found

    def listing(self) -> index.Index:
        """The index's manifest; where there is none (a repository published to before indexes were), the list of
        the archives' tags, each read from its manifest's config."""
        files = self.index_files()
        if files is not None:
            return parse_index(self.text, files.data)

        def read(remote: Remote) -> index.Index:
            entries = []
            tags = remote.tags()
            archives = [t for t in tags if t.startswith(OCI_TAG)]
            if len(archives) > LEGACY_MAX:  # each is a manifest and a config read: a registry could list a great many
                raise RepositoryFault(
                    f"{self.text}: no index, and {len(archives)} archive tags, more than the {LEGACY_MAX} read one by "
                    "one: its publisher signs an index with 'buildmgr publish --to REPO --sign NAME'"
                )
            for tag in archives:
                entry = remote.tagged(tag)
                if entry is not None:
                    entries.append(cosigned(entry, tags))
            return index.Index(index.SCHEMA, tuple(sorted(entries, key=lambda e: (e.name, e.sha256))))

        try:
            found: index.Index = self._call("reading its tags", read)
        except ShapeError as err:
            raise RepositoryFault(f"{self.text}: an archive's entry is not a buildmgr one ({err})") from None
        return found

    def signatures(self, entry: index.Entry, key_id: str | None = None) -> dict[str, bytes]:
        def read(remote: Remote) -> dict[str, bytes]:
            later = key_id is not None and key_id != entry.signed_by
            try:
                layers = remote.layers(entry, f"{OCI_SIGNATURE_TAG}{key_id}-{entry.sha256}" if later else None)
            except FileNotFoundError:
                if not later:
                    raise
                return {}  # install says: the index says it is signed by that key, and its signature is missing
            wanted = (index.MINISIG, index.ATTESTATION)
            return {s: remote.blob(layers[s]["digest"]) for s in wanted if s in layers}

        found: dict[str, bytes] = self._call(f"reading {entry.name}'s signatures", read)
        return found

    def _download(self, entry: index.Entry, part: Path, have: int, progress: Progress | None) -> None:
        remote = self._remote()
        said: tuple[type[Exception], ...] = (BuildmgrError, Larger, Other, TooSlow, *transport_errors())
        try:
            found = remote.layers(entry).get("")
            if not isinstance(found, dict) or found.get("digest") != f"sha256:{entry.sha256}":
                raise FileNotFoundError(entry.name)
            headers = {"Range": f"bytes={have}-"} if have else {}
            url = remote.url("blobs", f"sha256:{entry.sha256}")
            with within(self.limits, f"{url}'s headers"):
                response = remote.client.do_request(url, "GET", headers=headers, stream=True)
            with response:
                if response.status_code == 404:
                    raise FileNotFoundError(entry.name)
                response.raise_for_status()
                resumed = response.status_code == 206
                declared(entry.size, http_total(response.status_code, response.headers.get))
                response.raw.decode_content = False
                start = have if resumed else 0
                append(response.raw, part, "ab" if resumed else "wb", start, entry.size, progress, self.limits)
        except said:
            raise  # `Repo.fetch` says each, and keeps the intact bytes of a download cut short
        except Exception as err:  # oras' own (a 401 it cannot answer), a manifest of another shape
            if not registry_said(err):
                raise
            shown = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise RepositoryFault(f"{self.text}: downloading {entry.name} failed ({shown})") from None

    def publish(
        self, artifact: Artifact, key: signing.SecretKey | None, builder: str, days: int = index.EXPIRES_DAYS
    ) -> Published:
        """One manifest per archive, tagged by its digest: its blobs first, the manifest last (what makes it seen);
        then the index."""

        def push(remote: Remote) -> Published:
            tag = f"{OCI_TAG}{artifact.sha256}"
            manifest = remote.manifest(tag)
            known = remote.entry_of(manifest) if manifest is not None else None
            if known is not None:
                known = cosigned(known, remote.tags())
            if policy.is_known(known, artifact, key):
                assert known is not None
                return Published(known, True)
            data = policy.read_checked(artifact)
            if policy.cosigns(self.text, known, artifact, key):
                assert known is not None and key is not None
                _push_signature(remote, artifact, data, key, builder)
                also = tuple(sorted({*known.also_signed_by, key.public.id}))
                again = dataclasses.replace(known, also_signed_by=also)
                return Published(again, True, key.public.id, oci_index.push_index(remote, key, days, again))
            entry = policy.entry_of(artifact, len(data), key, known)
            with tempfile.TemporaryDirectory(prefix="buildmgr-oci-") as scratch:
                # the checked bytes are pushed from a copy of our own: the file at artifact.path may change meanwhile
                archive = Path(scratch) / artifact.path.name
                archive.write_bytes(data)
                files = [layer(archive, "")]
                signed_files = policy.statement_files(artifact, data, key, builder) if key is not None else {}
                for suffix, signed in signed_files.items():
                    path = Path(scratch) / f"{artifact.path.name}{suffix}"
                    path.write_bytes(signed)
                    files.append(layer(path, suffix))
                config = Path(scratch) / "entry.json"
                config.write_text(json.dumps(jsonshape.dump(entry), sort_keys=True))
                annotations = {TITLE: artifact.path.name, "org.opencontainers.image.created": entry.published}
                remote.push(tag, files, f"{config}:{ENTRY_MEDIA_TYPE}", annotations)
            written = oci_index.push_index(remote, key, days, entry)
            return Published(entry, known is not None, key.public.id if key is not None else None, written)

        found: Published = self._call(f"pushing {artifact.path.name}", push)
        return found

    def sign_index(self, key: signing.SecretKey, days: int = index.EXPIRES_DAYS) -> index.Index:
        found: index.Index = self._call(
            "signing its index", lambda remote: oci_index.push_index(remote, key, days, None)
        )
        return found


def _push_signature(remote: Remote, artifact: Artifact, data: bytes, key: signing.SecretKey, builder: str) -> None:
    """A later signer's .minisig and attestation, a manifest of their own tagged by its key and the archive's digest:
    the archive's manifest, and so the first signer's files, are not pushed again, and two signers at once never
    write the same tag."""
    with tempfile.TemporaryDirectory(prefix="buildmgr-oci-") as scratch:
        files = []
        for suffix, signed in policy.statement_files(artifact, data, key, builder).items():
            path = Path(scratch) / f"{artifact.path.name}{suffix}"
            path.write_bytes(signed)
            files.append(layer(path, suffix))
        config = Path(scratch) / "signature.json"
        config.write_text(json.dumps({"name": artifact.path.name, "sha256": artifact.sha256, "key": key.public.id}))
        tag = f"{OCI_SIGNATURE_TAG}{key.public.id}-{artifact.sha256}"
        remote.push(tag, files, f"{config}:{SIGNATURE_MEDIA_TYPE}", {TITLE: artifact.path.name})
