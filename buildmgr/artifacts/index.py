"""A binary repository's index, typed: each artifact's digest, where its files lie, who signed it, and its
`Summary` (what a host must know to say whether it fits, before anything is downloaded). The in-toto Statement a
signature attests is made here too. Pure."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from buildmgr import backends
from buildmgr.core import jsonshape
from buildmgr.core.jsonshape import OMIT_IF_EMPTY, OMIT_IF_NONE
from buildmgr.store.receipt import Receipt, RuntimeNeeds, ToolchainRef, safe_id

INDEX = "index.json"
INDEX_SIGNATURE = "index.json.minisig"  # beside it: `minisign -Vm index.json` checks it
# the last index each key signed, with its .minisig: read by a host that trusts that key where index.json is
# signed by another (a later signer, an unsigned publish)
INDEXES = "indexes"
SCHEMA = 1
EXPIRES_DAYS = 30  # a signed index is taken for this long (`publish --expires DAYS`), then refused until signed again
BLOBS = "blobs/sha256"  # <repo>/blobs/sha256/<hex>/<archive name>, its .sha256, .minisig and .intoto.json
MINISIG = ".minisig"
ATTESTATION = ".intoto.json"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
STATEMENT = "https://in-toto.io/Statement/v1"
BUILD_TYPE = "https://github.com/buildmgr/buildmgr/building/v1"
EXACT_TREES = ("pinned", "clean")  # a source exactly its commit; any other is attested with its commit as a base
_DIGEST = re.compile(r"[0-9a-f]{64}")
_KEY_ID = re.compile(r"[0-9A-F]{16}")  # as minisign prints a key id
_NAME = re.compile(r"llama-[A-Za-z0-9._+-]+\.tar\.gz")
MAX_SIZE = 1 << 40  # an archive larger than a TiB is no build of llama.cpp
_REPOSITORY = re.compile(r"[0-9a-f]{32}")  # a repository's name, as `publish` makes it
_VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,3}")  # a glibc or libstdc++ floor: 2.35, 3.4.30


@dataclass(frozen=True)
class ArchiveSummary:
    """An artifact as a host judges it: what it was built from and for, and what it needs at run time."""

    id: str
    recipe: str
    arch: str  # the GPU arch label ("" without one)
    backends: tuple[str, ...]
    build_number: int
    commit: str | None
    system: str
    machine: str
    finished: str
    runtime: RuntimeNeeds
    dl: bool  # GGML_BACKEND_DL: backend modules are loaded only if they can be
    native_cpu: bool  # GGML_NATIVE=ON: it may use CPU instructions of its build host only
    receipt_sha256: str
    toolchains: tuple[ToolchainRef, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    # the instruction-set defines a build of GGML_NATIVE=OFF lists as ON (a fix's list of its build host's features):
    # what it needs of a CPU (None: an index from before they were said)
    cpu_features: tuple[str, ...] | None = field(default=None, metadata=OMIT_IF_NONE)


def summary_of(receipt: Receipt, receipt_sha256: str) -> ArchiveSummary:
    assert receipt.runtime is not None, "an artifact's receipt has its runtime needs (checked when it was opened)"
    listed = receipt.recipe.define("GGML_NATIVE") != "ON"
    features = tuple(sorted(d for d in backends.cpu_features() if listed and receipt.recipe.define(d) == "ON"))
    return ArchiveSummary(
        receipt.id,
        receipt.recipe.name,
        receipt.recipe.arch,
        receipt.backends,
        receipt.source.build_number,
        receipt.source.commit,
        receipt.host.system,
        receipt.host.machine,
        receipt.finished,
        receipt.runtime,
        receipt.recipe.define("GGML_BACKEND_DL") == "ON",
        # native, or a fix's list of the build host's own CPU features (GGML_NATIVE=OFF in its defines)
        receipt.recipe.define("GGML_NATIVE") == "ON" or any("GGML_NATIVE" in fix.defines for fix in receipt.fixes),
        receipt_sha256,
        receipt.toolchains,
        features,
    )


def summary_as_indexed(receipt: Receipt, receipt_sha256: str, said: ArchiveSummary) -> ArchiveSummary:
    """The receipt's summary as the index that says `said` holds it, so that an archive an older buildmgr published
    still matches its entry: `cpu_features` left out where the index lacks it, and read only as far as the index
    lists it (a feature this buildmgr's table gained since is in the receipt's defines, unlisted then)."""
    found = summary_of(receipt, receipt_sha256)
    if said.cpu_features is None or set(said.cpu_features) <= set(found.cpu_features or ()):
        return dataclasses.replace(found, cpu_features=said.cpu_features)
    return found


@dataclass(frozen=True)
class Entry:
    """One archive in a repository: its files lie under `blobs/sha256/<sha256>/`, so two archives of one name
    (the same recipe built on two hosts) never collide."""

    name: str
    sha256: str
    size: int
    published: str
    summary: ArchiveSummary
    signed_by: str | None = field(default=None, metadata=OMIT_IF_NONE)  # the key id of its .minisig and attestation
    # keys that signed it after the first, each in files of its own (`signature_path`); absent where none did
    also_signed_by: tuple[str, ...] = field(default=(), metadata=OMIT_IF_EMPTY)

    @property
    def path(self) -> str:
        return f"{BLOBS}/{self.sha256}/{self.name}"

    @property
    def signers(self) -> tuple[str, ...]:
        return (self.signed_by, *self.also_signed_by) if self.signed_by is not None else ()

    def signature_path(self, key_id: str | None) -> str:
        """Where the signature files of a key lie, less their suffix: the first signer's are `<name>.minisig` and
        `<name>.intoto.json` (what `minisign -Vm <name>` looks for), each later one's `<name>.<KEY ID>.minisig` …"""
        return self.path if key_id is None or key_id == self.signed_by else f"{self.path}.{key_id}"

    def check(self) -> None:
        """Names and digests that become paths are checked: an index cannot point outside its repository."""
        if not 0 < self.size <= MAX_SIZE:  # it becomes a read's length, a progress bar's, a table's figure
            raise jsonshape.ShapeError(f"{self.name}: size {str(self.size)[:24]} is not an archive's (1 B to 1 TiB)")
        if not _DIGEST.fullmatch(self.sha256):
            raise jsonshape.ShapeError(f"{self.name}: sha256 {self.sha256!r} is not 64 hex digits")
        if not _NAME.fullmatch(self.name):
            raise jsonshape.ShapeError(f"artifact name {self.name!r} is not llama-….tar.gz")
        if not safe_id(self.summary.id):  # install locks and stages by it before the archive's receipt is read
            raise jsonshape.ShapeError(f"{self.name}: id {self.summary.id[:60]!r} is not a safe build id")
        for key_id in (*self.signers, *self.also_signed_by):  # a later signer's id names its files
            if not _KEY_ID.fullmatch(key_id):
                raise jsonshape.ShapeError(f"{self.name}: signer {key_id[:20]!r} is not a key id (16 hex digits)")
        # what is printed and parsed: no text a terminal would obey or an encoder refuse, no version or GPU code that
        # is none (an unsigned index, or repo list's, says whatever its server likes)
        for text in _texts(self):
            if not text.isprintable():
                raise jsonshape.ShapeError(f"{self.name}: {text[:40]!r} holds a character that is not printable")
        runtime = self.summary.runtime
        for floor in (runtime.glibc, runtime.libstdcxx):
            if floor is not None and not _VERSION.fullmatch(floor):
                raise jsonshape.ShapeError(f"{self.name}: {floor[:20]!r} is not a version")
        if unknown := backends.unknown_codes(runtime.device_code):
            raise jsonshape.ShapeError(f"{self.name}: {unknown[0][:20]!r} is not GPU code of its backend")


def _texts(value: object) -> Iterator[str]:
    """Every string in a record, its keys' too."""
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from _texts(getattr(value, item.name))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _texts(key)
            yield from _texts(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _texts(item)


def key_index(key_id: str) -> str:
    """Where the last index `key_id` signed lies, less its .minisig."""
    return f"{INDEXES}/{key_id}.json"


@dataclass(frozen=True)
class Index(jsonshape.Record):
    """What a repository holds. Signed, it is the whole file's bytes that are (index.json.minisig): every entry's
    name, digest, size, signers and summary, and `version` (one more at each write: a host refuses an index older
    than one it saw) and `expires` (a host refuses it after that, so an old copy cannot be served for ever)."""

    VERSION = SCHEMA

    schema: int
    artifacts: tuple[Entry, ...] = ()
    version: int = 0  # 0: written before indexes had versions
    expires: str | None = field(default=None, metadata=OMIT_IF_NONE)  # ISO 8601; None: unsigned
    # the repository's name, made at its first write and kept at every one: a host keys the versions it saw by it,
    # so an older index under another spelling of its URL is still older (None: written before indexes named it)
    repository: str | None = field(default=None, metadata=OMIT_IF_NONE)

    @classmethod
    def from_json(cls, data: object) -> Index:
        index = super().from_json(data)
        if index.repository is not None and not _REPOSITORY.fullmatch(index.repository):
            raise jsonshape.ShapeError(
                f"repository {index.repository[:40]!r} is not a repository's name (32 hex digits)"
            )
        for entry in index.artifacts:
            entry.check()
        return index

    def find(self, sha256: str) -> Entry | None:
        return next((e for e in self.artifacts if e.sha256 == sha256), None)

    def with_entry(self, entry: Entry) -> Index:
        """This index with `entry` in place of any entry of the same digest, sorted by name, then digest."""
        kept = [e for e in self.artifacts if e.sha256 != entry.sha256]
        return dataclasses.replace(self, artifacts=tuple(sorted([*kept, entry], key=lambda e: (e.name, e.sha256))))

    def next(self, expires: str | None) -> Index:
        """This index as the next write of it: one version more, and the expiry of its signature (None: unsigned)."""
        return dataclasses.replace(self, schema=SCHEMA, version=self.version + 1, expires=expires)


EMPTY = Index(SCHEMA, ())


def signature_comment(written: Index) -> str:
    """The trusted comment of index.json.minisig (minisign prints it): which version, valid until when."""
    return f"{INDEX} version:{written.version} expires:{written.expires}"


@dataclass(frozen=True)
class Seen(jsonshape.Record):
    """`<data>/repositories.json`: the highest version of a signed index this host took from each location (by its
    identity, as pins name it), the repository each location's index named, and the highest version taken of each
    repository by name (per signing key: a name is its signer's word), wherever it was read: an older one is a
    rollback, one that names another repository than its location's did is another repository served in its
    place."""

    VERSION = 1

    schema: int
    repositories: dict[str, int]
    names: dict[str, str] = field(default_factory=dict)  # a location's identity → the repository its index named
    # KEY ID/NAME, a repository's name as the key that signed its index names it → the highest version taken of it
    named: dict[str, int] = field(default_factory=dict)


def statement(name: str, sha256: str, receipt: Receipt, receipt_sha256: str, builder: str) -> dict[str, Any]:
    """An in-toto Statement about the archive: SLSA provenance v1, with the source and the receipt it came from."""
    source = receipt.source
    # the tree as it was built: a dirty checkout is not its commit, so it names the commit as its base only, with
    # how many paths differed (changed or untracked) and their digest
    tree = source.state or "unknown"
    annotations: dict[str, Any] = {"build_number": source.build_number, "tree": tree}
    if source.changes is not None:
        annotations |= {"changes": source.changes, "changes_sha256": source.changes_sha256}
    dependency: dict[str, Any] = {"uri": source.origin, "annotations": annotations}
    if source.commit and tree in EXACT_TREES:
        dependency["digest"] = {"gitCommit": source.commit}
    elif source.commit:
        annotations["base_commit"] = source.commit
    return {
        "_type": STATEMENT,
        "subject": [{"name": name, "digest": {"sha256": sha256}}],
        "predicateType": SLSA_PROVENANCE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"recipe": receipt.recipe.name, "arch": receipt.recipe.arch},
                "internalParameters": {"resolved_defines": receipt.recipe.resolved_defines},
                "resolvedDependencies": [dependency],
            },
            "runDetails": {
                "builder": {"id": builder, "version": {"buildmgr": receipt.buildmgr}},
                "metadata": {"invocationId": receipt.id, "startedOn": receipt.started, "finishedOn": receipt.finished},
                "byproducts": [{"name": "buildmgr-receipt.json", "digest": {"sha256": receipt_sha256}}],
            },
        },
    }


def artifact_comment(name: str, sha256: str, build_id: str) -> str:
    """The trusted comment of an archive's .minisig (minisign prints it): which file, which bytes, which build."""
    return f"file:{name} sha256:{sha256} build:{build_id}"


def provenance_mismatch(statement_: dict[str, Any], entry: Entry) -> str | None:
    """What in a Statement's predicate disagrees with the index's entry (None: nothing), over the fields a host relies
    on: SLSA provenance v1 of buildmgr's build type, the build id, the receipt's digest (which binds the receipt, and
    through it the source tree's state, to the signature) and the tree named as the receipt names it."""
    if statement_.get("predicateType") != SLSA_PROVENANCE:
        return f"its predicateType is {str(statement_.get('predicateType'))[:80]!r}, not {SLSA_PROVENANCE}"
    predicate = statement_.get("predicate")
    try:
        assert isinstance(predicate, dict)
        definition, run = predicate["buildDefinition"], predicate["runDetails"]
        build_type = definition["buildType"]
        [dependency] = definition["resolvedDependencies"]
        annotations = dependency["annotations"]
        invocation = run["metadata"]["invocationId"]
        receipts = [b["digest"]["sha256"] for b in run["byproducts"] if b.get("name") == "buildmgr-receipt.json"]
        commit = dependency.get("digest", {}).get("gitCommit", annotations.get("base_commit"))
        tree = annotations.get("tree")  # absent in statements before 2026-12-05
    except (AssertionError, KeyError, TypeError, ValueError, AttributeError):
        return "its predicate lacks the build definition, run details or source a host checks"
    summary = entry.summary
    exact = "digest" in dependency
    if build_type != BUILD_TYPE:
        return f"its buildType is {str(build_type)[:80]!r}, not {BUILD_TYPE}"
    if invocation != summary.id:
        return f"it attests build {str(invocation)[:40]!r}, and the index says {summary.id}"
    if receipts != [summary.receipt_sha256]:
        return "the receipt it attests is not the one the index describes"
    if commit != summary.commit or (tree is not None and exact != (tree in EXACT_TREES)):
        return "the source it attests is not the one the index describes"
    return None


def attested_digest(statement_: dict[str, Any], name: str) -> str | None:
    """The sha256 the Statement attests for the archive of this name (None: it says nothing of it)."""
    subjects = statement_.get("subject")
    if statement_.get("_type") != STATEMENT or not isinstance(subjects, list):
        return None
    for subject in subjects:
        if isinstance(subject, dict) and subject.get("name") == name and isinstance(subject.get("digest"), dict):
            digest = subject["digest"].get("sha256")
            return digest if isinstance(digest, str) else None
    return None
