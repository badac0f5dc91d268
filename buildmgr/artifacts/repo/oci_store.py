"""An OCI registry's side of a repository, through the `oras` SDK: the tags, manifests, blobs and media types a
repository is made of (each archive its own manifest tagged `sha256-<digest>`, a later signer's files a manifest
tagged `signature-<KEY ID>-<digest>`, the index a manifest tagged `index`), read and pushed."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr.artifacts import index
from buildmgr.artifacts.repo.base import IndexFiles, capped
from buildmgr.artifacts.repo.net import Limits, guard, within
from buildmgr.core import jsonshape
from buildmgr.core.errors import RepositoryFault, UserError

if TYPE_CHECKING:
    from oras.provider import Registry

OCI_TAG = "sha256-"  # an archive's manifest is tagged sha256-<its digest>
# a later signer's signature files, a manifest of their own: signature-<KEY ID>-<the archive's digest> (a prefix that
# is not sha256-, which readers before it take for an archive's)
OCI_SIGNATURE_TAG = "signature-"
SIGNATURE_TAG = re.compile(r"signature-([0-9A-F]{16})-([0-9a-f]{64})")
ENTRY_MEDIA_TYPE = "application/vnd.buildmgr.entry.v1+json"  # the manifest's config: the archive's index entry
OCI_INDEX_TAG = "index"  # the index's manifest (the last one a key signed: index-<KEY ID>)
INDEX_MEDIA_TYPE = "application/vnd.buildmgr.index.v1+json"  # its layer index.json (.minisig: MEDIA_TYPES)
INDEX_CONFIG_MEDIA_TYPE = "application/vnd.buildmgr.index.config.v1+json"  # its config: version and signer, for people
SIGNATURE_MEDIA_TYPE = "application/vnd.buildmgr.signature.v1+json"  # a later signer's manifest's config
MEDIA_TYPES = {
    "": "application/vnd.buildmgr.archive.v1.tar+gzip",
    index.MINISIG: "application/vnd.buildmgr.minisig.v1",
    index.ATTESTATION: "application/vnd.dsse.envelope.v1+json",
}
TITLE = "org.opencontainers.image.title"


def client(insecure: bool, limits: Limits) -> Registry:
    """oras' registry client without its own retries (five, sleeping up to 83 s between them): a registry that is
    down is said at once, and `install` resumes the download when it is back; held to the network's limits and
    rules (`net.guard`: a timeout on every read, every redirect checked)."""
    try:
        from oras.provider import Registry
    except ImportError:
        raise UserError("oci:// repositories need the oras package: pip install oras") from None

    class Client(Registry):  # type: ignore[misc]
        do_request = Registry.do_request.__wrapped__

    made: Registry = Client(insecure=insecure)
    guard(made.session, limits)
    if insecure:  # plain http on this machine: no proxy the environment names may carry it off in the clear
        made.session.trust_env = False
    return made


def _raw_reader(response: Any) -> Callable[[int], bytes]:
    """requests' streamed body read as it arrives, up to n bytes (decoded where the server compressed it)."""

    def read(n: int) -> bytes:
        data: bytes = response.raw.read1(n, decode_content=True)
        return data

    return read


def _image_manifest(found: dict[str, Any]) -> bool:
    """Whether a manifest has the shape every reader here takes: a config and each layer with a digest, a layer's
    annotations an object of strings (what a registry returns is checked here once, not where it is read)."""
    config, layers = found.get("config"), found.get("layers", [])
    if not isinstance(config, dict) or not isinstance(config.get("digest"), str) or not isinstance(layers, list):
        return False
    for layer in layers:
        annotations = layer.get("annotations", {}) if isinstance(layer, dict) else None
        if not isinstance(layer, dict) or not isinstance(layer.get("digest"), str) or not isinstance(annotations, dict):
            return False
        if not all(isinstance(value, str) for value in annotations.values()):
            return False
    return True


def cosigned(entry: index.Entry, tags: list[str]) -> index.Entry:
    """The entry with the later signers its signature tags name (the first signer is in its own manifest)."""
    later = {m[1] for t in tags if (m := SIGNATURE_TAG.fullmatch(t)) and m[2] == entry.sha256}
    return dataclasses.replace(entry, also_signed_by=tuple(sorted(later - {entry.signed_by})))


@dataclass(frozen=True)
class Remote:
    """One repository of a registry (`registry` HOST[:PORT], `name` NAMESPACE/NAME), through one client."""

    client: Registry
    text: str  # as the user gave it, for messages
    registry: str
    name: str
    limits: Limits

    def url(self, kind: str, reference: str) -> str:
        return f"{self.client.prefix}://{self.registry}/v2/{self.name}/{kind}/{reference}"

    def container(self, tag: str | None = None) -> str:
        return f"{self.registry}/{self.name}" + (f":{tag}" if tag else "")

    def manifest(self, tag: str) -> dict[str, Any] | None:
        url = self.url("manifests", tag)
        accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
        with within(self.limits, url), self.client.do_request(url, "GET", headers=accept, stream=True) as response:
            if response.status_code == 404:
                return None
            response.raise_for_status()
            found = jsonshape.parse(capped(_raw_reader(response), url))
        if not isinstance(found, dict):
            raise RepositoryFault(f"{url}: not a manifest (a JSON object)")
        if not _image_manifest(found):
            raise RepositoryFault(
                f"{url}: reading its manifest failed (its config or layers are not an image manifest's)"
            )
        return found

    def blob(self, digest: str) -> bytes:
        url = self.url("blobs", digest)
        with within(self.limits, url), self.client.do_request(url, "GET", stream=True) as response:
            response.raise_for_status()
            return capped(_raw_reader(response), url)

    def tags(self) -> list[str]:
        url = self.url("tags", "list")
        with within(self.limits, url), self.client.do_request(url, "GET", stream=True) as response:
            if response.status_code == 404:  # the registry knows no repository of this name
                raise UserError(
                    f"{self.text}: {self.registry} has no repository {self.name} (nothing was published to it: check "
                    "the name)"
                )
            response.raise_for_status()
            found = jsonshape.parse(capped(_raw_reader(response), url))
        tags = found.get("tags") if isinstance(found, dict) else None
        return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []

    def entry_of(self, manifest: dict[str, Any]) -> index.Entry:
        entry: index.Entry = jsonshape.load(index.Entry, jsonshape.parse(self.blob(manifest["config"]["digest"])))
        entry.check()
        return entry

    def tagged(self, tag: str) -> index.Entry | None:
        """The entry an archive's tag holds (None: the tag is gone), which must be the digest the tag names."""
        manifest = self.manifest(tag)
        if manifest is None:
            return None
        entry = self.entry_of(manifest)
        if tag != f"{OCI_TAG}{entry.sha256}":
            raise RepositoryFault(f"{self.text}: the manifest tagged {tag} describes {entry.sha256[:12]}…")
        return entry

    def index_files(self, key_id: str | None) -> IndexFiles | None:
        manifest = self.manifest(OCI_INDEX_TAG if key_id is None else f"{OCI_INDEX_TAG}-{key_id}")
        if manifest is None:
            return None
        layers = {layer.get("annotations", {}).get(TITLE, ""): layer for layer in manifest.get("layers", [])}
        if index.INDEX not in layers:
            raise RepositoryFault(f"{self.text}: the manifest tagged {OCI_INDEX_TAG} holds no {index.INDEX}")
        signature = layers.get(index.INDEX_SIGNATURE)
        return IndexFiles(
            self.blob(layers[index.INDEX]["digest"]),
            self.blob(signature["digest"]) if signature is not None else None,
        )

    def layers(self, entry: index.Entry, tag: str | None = None) -> dict[str, dict[str, Any]]:
        """The manifest's layers by their title's suffix after the archive's name ("" the archive itself); `tag`:
        another manifest than the archive's (a later signer's)."""
        manifest = self.manifest(tag or f"{OCI_TAG}{entry.sha256}")
        if manifest is None:
            raise FileNotFoundError(entry.name)
        found = {}
        for layer in manifest.get("layers", []):
            title = layer.get("annotations", {}).get(TITLE, "")
            if title.startswith(entry.name):
                found[title[len(entry.name) :]] = layer
        return found

    def push(self, tag: str, files: list[str], config: str, annotations: dict[str, str]) -> None:
        """A manifest of `files` (each PATH:MEDIA_TYPE) and `config` tagged `tag`: its blobs first, the manifest
        last, which is what makes it seen."""
        self.client.push(
            target=self.container(tag),
            files=files,
            manifest_config=config,
            manifest_annotations=annotations,
            disable_path_validation=True,
            quiet=True,
        )


def layer(path: Path, suffix: str) -> str:
    """A file as `push` takes it: PATH:MEDIA_TYPE."""
    return f"{path}:{MEDIA_TYPES[suffix]}"
