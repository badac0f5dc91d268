"""The receipt, `buildmgr-receipt.json`: everything about one build, typed and checked in one place.

Every reader gets a `Receipt` from `from_json`, which checks each field (spec: "Receipt"), so a receipt of the
wrong shape is one clear error wherever it is read, and no command reads a receipt by key. The id, version,
commit and fingerprint name directories, so they must be safe names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from buildmgr.core import jsonshape
from buildmgr.core.crashes import Crash
from buildmgr.core.jsonshape import OMIT_IF_EMPTY, OMIT_IF_NONE, ShapeError

FILE_NAME = "buildmgr-receipt.json"
SCHEMA = 2  # 2: runtime.device_code per backend (schema 1 named each backend's code in its own field)

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,200}")


def safe_id(text: str) -> bool:
    """A build id that can become a folder's and a lock's name: no separator, no glob, no leading dot."""
    return _SAFE_NAME.fullmatch(text) is not None


_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_FINGERPRINT = re.compile(r"[0-9a-f]{8,64}")


@dataclass(frozen=True)
class ToolRun:
    """One command of the smoke run and what it proved (not a preflight `backends.Check`: this one ran the build)."""

    command: list[str]
    returncode: int
    seconds: float
    passed: bool
    detail: str
    crash: Crash | None = field(default=None, metadata=OMIT_IF_NONE)  # what a post-mortem found of a crash


@dataclass(frozen=True)
class FixRecord:
    """A known runtime fault left out of a build: its name, what it left out, the crash that taught it (seen here by
    an earlier proof), and the defines or targets that leave it out."""

    fault: str
    fixed: str
    crash: str
    defines: dict[str, str]
    left_out: tuple[str, ...] = ()

    def line(self) -> str:
        changed = ", ".join(f"{k}={v}" for k, v in self.defines.items()) or "left out: " + ", ".join(self.left_out)
        return f"{self.fixed} ({self.crash}); {changed}"


@dataclass(frozen=True)
class SmokeResult:
    passed: bool
    checks: tuple[ToolRun, ...] = field(default=())
    devices: tuple[str, ...] = ()  # devices the model ran on, besides the CPU
    # the version of the kernels model the proof ran (proof_models.KERNELS_VERSION); None: before it, an F32 model only
    kernels: int | None = field(default=None, metadata=OMIT_IF_NONE)

    def to_json(self) -> dict[str, Any]:
        dumped: dict[str, Any] = jsonshape.dump(self)
        return dumped

    @property
    def failures(self) -> list[ToolRun]:
        return [c for c in self.checks if not c.passed]


@dataclass(frozen=True)
class RecipeRecord:
    name: str
    description: str
    backends: tuple[str, ...]
    targets: tuple[str, ...]
    tools: tuple[str, ...]
    defines: dict[str, str]
    resolved_defines: dict[str, str]  # every -D passed
    arch: str  # the GPU arch label, "" without one

    def define(self, key: str) -> str | None:
        return self.resolved_defines.get(key)


@dataclass(frozen=True)
class SourceRecord:
    origin: str
    path: str
    commit: str | None
    build_number: int
    llama_version: str
    fingerprint: str
    state: str | None = None  # absent in receipts before 2026-11-30
    commit_time: int | None = None
    # a dirty git checkout: how many paths differ from the commit (changed or untracked), and a digest of them
    changes: int | None = field(default=None, metadata=OMIT_IF_NONE)
    changes_sha256: str | None = field(default=None, metadata=OMIT_IF_NONE)

    @property
    def short_commit(self) -> str:
        return self.commit[:7] if self.commit else "unknown"


@dataclass(frozen=True)
class HostRecord:
    hostname: str
    system: str
    os: str
    machine: str
    cpus: int | None


@dataclass(frozen=True)
class RuntimeNeeds:
    """What the prefix's ELF files need from a host (runtime.scan_prefix)."""

    elf_files: int
    glibc: str | None
    glibc_file: str | None
    libstdcxx: str | None
    libstdcxx_file: str | None
    needed: dict[str, tuple[str, ...]]  # library → the files that need it
    device_code: dict[str, tuple[str, ...]] = field(default_factory=dict)  # backend → its GPU code objects


@dataclass(frozen=True)
class InstalledFrom:
    artifact: str
    sha256: str
    installed: str
    smoke: SmokeResult  # the run on this host
    warnings: tuple[str, ...]
    log: str
    # the key that vouched for the archive (`install --from`); absent where none did (install-artifact, unsigned)
    signed_by: str | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class ToolchainRef:
    """A toolchain added with `buildmgr toolchain add` that a build was made with: part of the build's identity."""

    id: str  # cuda-13.0
    name: str  # cuda
    version: str  # 13.0
    packages: dict[str, str]  # what went into it: package → version


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str | None  # as pip or apt checked it (None: the source gave no hash)
    url: str


@dataclass(frozen=True)
class ToolchainReceipt(jsonshape.Record):
    """<data>/toolchains/ID/buildmgr-toolchain.json: what `toolchain add` put into a toolchain, and every file's hash."""

    VERSION = 1

    schema: int
    id: str
    name: str
    version: str
    backend: str
    requested: str  # as the user asked: cuda==13.0
    source: str  # the pip requirement, or the apt release and packages
    packages: tuple[Package, ...]
    buildmgr: str
    added: str
    seconds: float
    size: int  # bytes on disk
    files: dict[str, str]  # sha256 hex, or link:<target>

    @classmethod
    def from_json(cls, data: object) -> ToolchainReceipt:
        receipt = super().from_json(data)
        if not _SAFE_NAME.fullmatch(receipt.id):
            raise ShapeError(f"id: {receipt.id[:60]!r} is not a safe id")
        return receipt

    def ref(self) -> ToolchainRef:
        return ToolchainRef(self.id, self.name, self.version, {p.name: p.version for p in self.packages})


@dataclass(frozen=True)
class Receipt(jsonshape.Record):
    VERSION = SCHEMA
    OLDEST = 1

    schema: int
    id: str
    buildmgr: str
    recipe: RecipeRecord
    host_defines: dict[str, str]
    backend_versions: dict[str, str]
    source: SourceRecord
    toolchain: dict[str, dict[str, str | None]]
    host: HostRecord
    jobs: int
    started: str
    finished: str
    seconds: float
    phases: dict[str, float]
    ccache: dict[str, int] | None
    smoke: SmokeResult
    log: str
    files: dict[str, str]  # every installed file: sha256 hex, or link:<target>
    shader_cache: dict[str, int] | None = None
    runtime: RuntimeNeeds | None = field(default=None, metadata=OMIT_IF_NONE)  # absent before 2026-11-30
    installed_from: InstalledFrom | None = field(default=None, metadata=OMIT_IF_NONE)
    # added with `buildmgr toolchain add`; absent where there are none
    toolchains: tuple[ToolchainRef, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    # known runtime faults left out of it; absent where there are none
    fixes: tuple[FixRecord, ...] = field(default=(), metadata=OMIT_IF_EMPTY)

    @classmethod
    def from_json(cls, data: object) -> Receipt:
        """Checked: raises ShapeError naming the first wrong field."""
        if isinstance(data, dict) and type(data.get("schema")) is int and data["schema"] == 1:
            data = _from_schema_1(data)
        receipt = super().from_json(data)
        for where, value, pattern in (
            ("id", receipt.id, _SAFE_NAME),
            ("source.llama_version", receipt.source.llama_version, _SAFE_NAME),
            ("source.commit", receipt.source.commit or "0000000", _COMMIT),
            ("source.fingerprint", receipt.source.fingerprint, _FINGERPRINT),
        ):
            if not pattern.fullmatch(value):
                raise ShapeError(f"{where}: {value[:60]!r} is not a safe {where.rsplit('.', 1)[-1]}")
        return receipt

    @property
    def backends(self) -> tuple[str, ...]:
        return self.recipe.backends


def _from_schema_1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 receipt as schema 2: its GPU code, which each backend kept in a field of its own, per backend."""
    runtime = data.get("runtime")
    if not isinstance(runtime, dict):
        return data | {"schema": SCHEMA}
    from buildmgr.backends import runtime_of_schema_1

    return data | {"schema": SCHEMA, "runtime": runtime_of_schema_1(runtime)}
