"""The shapes every backend shares: the host a backend looks at, what its preflight found, the records of its arch
option, vendor-tool capture, GPU code, log lines, name tables and toolchains, and `Backend`, the one record that holds
them all for one backend. Below the backend packages, which import only this; `backends/__init__` is the registry.

Records that every backend package makes when it is imported (its `Backend` and what it holds) are NamedTuples, not
dataclasses: a no-op build imports every backend package, and a frozen dataclass costs about 0.7 ms to create there
against 0.1 ms (docs/benchmarks.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from buildmgr.core.crashes import Crash
from buildmgr.core.device_records import Role
from buildmgr.core.engines import EngineSource
from buildmgr.core.findings import Check, Finding, Signature
from buildmgr.core.memo import Memo
from buildmgr.tools.kit_spec import Kit

if TYPE_CHECKING:
    from buildmgr.core.device_records import Captures, Device
    from buildmgr.tools.toolchain import Toolchain


# Devices that are not a card: the CPU itself (logs and rpc-server list it), BLAS does the CPU's matrix work, and RPC is
# another host. Each has a fixed role
# (whatever ggml reports), is never one physical card with another backend's device, and is not benched.
NOT_A_CARD = {"CPU": Role.CPU, "BLAS": Role.ACCEL, "RPC": Role.REMOTE}


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...] = ()
    host_defines: dict[str, str] = field(default_factory=dict)  # paths on this host: not identity
    versions: dict[str, str] = field(default_factory=dict)  # versions that change the binaries: identity

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {
            "checks": [asdict(c) for c in self.checks],
            "host_defines": self.host_defines,
            "versions": self.versions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        return cls(tuple(Check(**c) for c in data["checks"]), dict(data["host_defines"]), dict(data["versions"]))


@dataclass(frozen=True)
class Host:
    """What a backend may look at. Read once, so checks are pure over it in tests."""

    environ: dict[str, str]
    system: str
    machine: str
    toolchain: Toolchain


class Located(Protocol):
    """What a backend found of its toolkit here. `inputs` are the files behind answers that cost a program run, so
    that those answers are remembered exactly while these files stay (empty: nothing is remembered)."""

    @property
    def inputs(self) -> tuple[str, ...]: ...


class Nothing:
    """The `Located` of a backend with no toolkit of its own to find."""

    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArchOption:
    """A backend's GPU-architecture option (`--sm` for CUDA, `--gfx` for HIP): how `build` resolves it on this host,
    how the CI matrix resolves it without one, and how a receipt's defines give it back."""

    flag: str
    define: str  # the CMake define its value resolves to
    owns: tuple[str, ...]  # -D keys this option sets, refused from the user
    language: str  # how an error names the backend
    example: str
    help: str  # of `build`
    matrix_help: str  # of `matrix`, where it is repeated per variant
    resolve: Callable[[str | None, Host, Memo], tuple[str, str]]  # value (or None) → (define value, label)
    ci_label: Callable[[str], str]  # value → label, for a runner without GPUs; UserError if it cannot be built
    ci_missing: str  # why a matrix entry of this backend without the option is left out
    from_defines: Callable[[Mapping[str, str]], str | None]  # the option's value that resolves to these defines

    @property
    def dest(self) -> str:
        return option_dest(self.flag)


def option_dest(flag: str) -> str:
    """Where argparse keeps a long option's value: `--nvidia-smi` → `nvidia_smi`."""
    return flag.lstrip("-").replace("-", "_")


class Capture(NamedTuple):
    """A vendor tool's view of this host's GPUs, beside ggml's: UUIDs, PCI ids and device types ggml does not give,
    and why a build of the backend sees no device. Run here by the inventory; read from a file by
    `devices --parse OPTION FILE`."""

    command: tuple[str, ...]
    option: str  # of `devices --parse`
    help: str
    parse: Callable[[str], list[Any]]
    match: Callable[[list[Device], list[Any], list[str]], list[Device]]  # devices enriched, notes appended
    host_json: Callable[[list[Any] | None], dict[str, Any]]  # what the inventory's `host` says of it (None: not run)
    wanted: Callable[[Sequence[tuple[tuple[str, ...], tuple[Device, ...]]]], bool]  # (backends, devices) per build

    @property
    def dest(self) -> str:
        return option_dest(self.option)


class DeviceCode(NamedTuple):
    """The GPU code a backend's binaries carry, read from one ELF section, and what a host's GPUs make of it."""

    section: str
    read: Callable[[bytes], set[str]]
    order: Callable[[str], Any]  # sort key of the codes
    key: str  # its name in `package --json` and in messages
    findings: Callable[[Sequence[str], Mapping[str, str]], list[Finding]]  # codes, environ → per visible GPU
    schema_1: tuple[str, ...] = ()  # the receipt fields (schema 1) that held these codes
    # the GPUs here as this code must serve them (CUDA's compute capabilities, HIP's gfx targets), read once; and
    # what those make of the codes: `findings` in two steps, so that `install --from` reads the host once for all
    targets: Callable[[Mapping[str, str]], list[str]] = lambda environ: []
    fits: Callable[[Sequence[str], list[str]], list[Finding]] = lambda codes, targets: []
    pattern: str = r"[A-Za-z0-9_.:+-]+"  # what one code is (a regular expression): an index that says else is refused


class LogDevice(NamedTuple):
    """One device as a backend's own start-up line prints it, searched anywhere in a line of pasted text (behind any
    log prefix). Groups: `index`, `description`, and where printed `total`/`free` (MiB), `total_mb` (10^6 bytes) or `total_m`
    (whole 10^6 bytes, cut down),
    `pci`, `backend`, `detail` (more of the device's name, such as ROCm's gfx target, which the name tables read too),
    and `driver` (the user-space driver the line names beside the description, not part of it)."""

    shape: str  # the shape's name, in notes: "ggml_vulkan lines"
    pattern: str
    backend: str  # the device name's prefix when neither the line nor its `after` header says another
    after: str | None = None  # a header line whose `backend` group names the devices below it (ROCm, MUSA …)
    role: tuple[str, str, Role, str] | None = None  # (group, value, role, reason): the role the line itself tells
    # (group, value, reason): a value that says the device is no integrated one; with no name table that says it is
    # a CPU rasterizer (llvmpipe …), it is then a discrete card (Vulkan's uma: 0)
    separate: tuple[str, str, str] | None = None
    wrapped: str | None = None  # what the rest of a line wrapped in two holds, when the first part lacks it
    # lines after it that tell more of the same device (until its next device line): groups `total` (MiB),
    # `total_mb` (10^6 bytes) or `total_mib` (decimal MiB), as Metal prints them, and the `role` group
    more: tuple[str, ...] = ()
    header: str | None = None  # the line that begins its device list: seen twice, a text holds two runs
    # the backend's start-up header, printed once when a program starts it: since backends register at start (2024-10),
    # before the program's build line, so one after a build line that followed it is another program's
    starts: str | None = None
    # (first, since): the builds of a form whose `driver` group began later: a run whose build line gives a number
    # from `first` up to before `since` printed none, and that last parenthesis is the name's. A number below `first`
    # is no count of llama.cpp's commits (a shallow clone's 1, a tarball's 0) and tells nothing.
    driver_since: tuple[int, int] | None = None
    # the pinned source's format strings this row (with its header and `more` lines) reads, as
    # devices/captures/shapes.py's SOURCE_FORMATS spells them: a test fails when the pin prints a device line no reader covers
    formats: tuple[str, ...] = ()


class NameRole(NamedTuple):
    """A device family known from its name alone: only roles a name proves (integrated or a CPU); a discrete card is
    never claimed from a name."""

    pattern: str  # searched in the description, case-sensitive
    role: Role  # IGPU or CPU: what a name can prove
    reason: str  # said in the notes: "Intel UHD Graphics is integrated"
    source: str  # where that fact is written down


class Layered(NamedTuple):
    """A driver that runs on another card and names it (Dozen: Vulkan on Direct3D 12): two names of one card."""

    pattern: str  # on the description; group `card` is the card's own name
    reason: str
    source: str


class Virtual(NamedTuple):
    """Devices a backend emulates on fewer physical ones (ggml-cuda's GGML_CUDA_DEVICES): several names, one card."""

    description: str  # on the description; group `physical`: which of the backend's physical devices it runs on
    device_id: str | None  # the suffix ggml's device id gains (a `-vN` after the card's PCI id); None: no id
    reason: str
    source: str


class Names(NamedTuple):
    """Every spelling of one backend, so that no other module spells it: `ROCm` devices, the `hip` recipe, `HIP`
    in messages, `GGML_HIP` to build it, the `ggml-hip` target that proves it is in a build."""

    device: str  # the prefix of its device names as llama.cpp prints them (CUDA0, ROCm0), and its id in recipes
    recipe: str  # the recipe that builds it
    title: str  # how messages and docs name it
    define: str  # the CMake switch that builds it ("" always built)
    target: str  # the CMake target that proves it is in a build (with GGML_CPU_ALL_VARIANTS: ggml-cpu-haswell …)


class Ci(NamedTuple):
    """What the artifacts workflow needs to build a backend on a GPU-less runner."""

    setup: str = ""  # the word of its provisioning in a matrix entry's `setup` ("" none)
    apt: tuple[str, ...] = ()  # Debian/Ubuntu packages that provisioning installs
    apt_options: tuple[str, ...] = ()  # options of its `apt-get update`
    runner: tuple[str, str] | None = None  # (ubuntu release, container) it needs on a Linux runner; None: any


def _nothing(host: Host) -> Nothing:
    return Nothing()


def _no_checks(host: Host, found: Any, deep: bool) -> Report:
    return Report()


def _no_device(environ: Mapping[str, str], captures: Captures) -> str | None:
    return "no device found"


class ShaderCache(NamedTuple):
    """A content-addressed cache of a backend's shader compiler's outputs, run by CMake in its place."""

    define: str  # the host define naming the shader compiler it wraps (Vulkan_GLSLC_EXECUTABLE)
    launcher: Callable[[Path, str, Path], Path]  # (build tree, the real compiler, the cache) → the program CMake runs
    environ: Callable[[Path], dict[str, str]]  # a statslog path → the variables that make it log hit/miss/direct there
    counts: Callable[[str], dict[str, int]]  # that log's text → hit, miss and direct
    prune: Callable[[Path, float, bool], list[Path]]  # (the cache, now, dry) → the entries no build used for a month


class Fix(NamedTuple):
    """How a build is made without a known runtime fault: defines that win over the recipe's, and targets left out."""

    defines: Mapping[str, str] = MappingProxyType({})
    left_out: tuple[str, ...] = ()  # e.g. a CPU variant of a GGML_BACKEND_DL build
    # the defines without which it is no fix: a user's own -D of one keeps the fault in; of another, the user's wins
    essential: tuple[str, ...] = ()


class RuntimeFault(NamedTuple):
    """A way a built llama.cpp is known to crash at run time, told from what a post-mortem found (`Crash`), with its
    cause and upstream references, what a user can do with the build as it is, and how a build leaves it out."""

    name: str
    matches: Callable[[Crash], bool]
    cause: str  # what fails, and the upstream references
    workaround: str  # with the build as it is
    # (resolved defines, this CPU's flags) → how a build of those defines leaves the fault out; None: it cannot
    fix: Callable[[Mapping[str, str], frozenset[str]], Fix | None]
    fixed: str  # what the fix leaves out, said beside every build it is applied to

    def explain(self) -> str:
        return f"{self.cause}; with this build: {self.workaround}"


CMAKE_FALSE = frozenset({"0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND"})


class RemovedKernels(NamedTuple):
    """A build define that leaves a backend without the kernels of some ops: the scheduler then runs those ops on the
    CPU, and llama.cpp says nothing. `asked` is the placement flag and value that ask for the ops anyway."""

    define: str
    value: str  # the define's value (CMake's spelling, upper case) that removes them
    ops: tuple[str, ...]
    device_prefix: str  # the backend's device names begin so (CUDA0, ROCm0)
    flag: tuple[str, str]  # (Placement field, value) that makes llama.cpp use the ops
    spelled: str  # that flag as a user writes it
    what: str  # what the build lacks

    @property
    def message(self) -> str:
        """The cause, with its two ways out."""
        return f"{self.what}: rebuild without -D {self.define}={self.value}, or run without {self.spelled}"

    @property
    def note(self) -> str:
        """Said beside a build or recipe of these defines."""
        return (
            f"{self.what} ({self.define}={self.value}): with {self.spelled} its {', '.join(self.ops)} runs on the CPU"
        )

    def removes(self, defines: Mapping[str, str]) -> bool:
        given = defines.get(self.define, "").upper()
        return given in CMAKE_FALSE if self.value == "OFF" else given == self.value


class ServerStarted(NamedTuple):
    """What a remote backend's server prints before it listens (its device list read by the device-list reader)."""

    protocol: str
    endpoint: str
    cache: str | None
    transport: str
    devices_text: str


class RemoteServer(NamedTuple):
    """A backend whose devices are other hosts', through a server program its builds carry (RPC's)."""

    program: str
    default_port: int
    header: str  # installed under the prefix: the protocol version the build speaks
    command: Callable[[str, str, int, tuple[str, ...], bool, int | None], list[str]]  # (server, bind, port …) → argv
    protocol: Callable[[str], str | None]  # the header's text → major.minor.patch
    started: Callable[[list[str]], ServerStarted | None]  # its output so far → the block, once whole
    failure: Callable[[list[str]], str | None]  # its output → why it will not serve
    client_lines: tuple[str, str]  # what it prints as a client connects, and as the client leaves
    client_flag: str  # how a llama.cpp tool names the servers: --rpc HOST:PORT,…
    add_server: str  # the function of its ggml registry that adds a server's devices, as the tools call it
    refused: Callable[[str], str | None]  # a client's output → why the server refused it (another protocol …)
    claims_every_op: bool = False  # its client says the remote device runs any op, whatever the server's card can


class Backend(NamedTuple):
    """Everything about one backend as data: `backends/<name>/__init__.py` declares one as `BACKEND`, and the
    functions it names are in that package's modules, imported when first called (see `lazy`): a no-op build reads
    every backend's record and runs none of them."""

    names: Names
    order: int  # where it comes among the others: CUDA's arch option before HIP's (their labels join into the build id)
    min_cmake: str = "3.14"
    gib_per_job: float = 2.0  # memory one compile job of this backend takes
    enumeration_env: tuple[str, ...] = ()  # variables that hide, reorder or rename its devices
    runtime_libraries: Mapping[str, str] = MappingProxyType({})  # soname stem → where it comes from
    systems: tuple[str, ...] = ("linux",)  # where the artifacts workflow can build it
    ci: Ci | None = Ci()  # None: the artifacts workflow has no step that installs its toolkit
    driver_library: str = ""  # the library a device of it needs at run time, which every tool loads ("" none)
    needs_own_build: bool = False  # shares ggml-cuda's sources or compilers: one per build unless GGML_BACKEND_DL
    built: bool = True  # False: only seen in pasted logs (OpenCL): no recipe, check or matrix names it
    locate: Callable[[Host], Located] = _nothing  # where its toolkit is; `inputs` are what the preflight memo watches
    inspect: Callable[[Host, Any, bool], Report] = _no_checks  # (host, what locate found, deep) → its checks
    why_absent: Callable[[Mapping[str, str], Captures], str | None] = _no_device  # None: no device expected
    check_defines: Callable[[Mapping[str, str], str], None] | None = None  # (defines, machine): UserError if wrong
    languages: tuple[str, ...] = ()  # CMake languages it adds (each gets ccache as its launcher)
    shader_cache: ShaderCache | None = None  # the cache its shader compiler runs behind
    arch: ArchOption | None = None  # its GPU-architecture option
    capture: Capture | None = None  # its vendor tool
    device_code: DeviceCode | None = None  # the GPU code its binaries carry
    build_failures: tuple[Signature, ...] = ()  # how its known build failures show in a log, and their fixes
    runtime_faults: tuple[RuntimeFault, ...] = ()  # how a build of it is known to crash, and how a build avoids it
    removed_kernels: tuple[RemovedKernels, ...] = ()  # defines that leave ops without this backend's kernels
    splits: Mapping[str, str | None] = MappingProxyType({})  # -sm mode → the rule it fails by; None: ran
    engines: Callable[[], EngineSource | None] | None = None  # opens its cards' engine readings (None: not here)
    engines_source: str = ""  # what those readings come from, in messages: NVML
    pinning_guard: tuple[str, str] | None = None  # (variable, value) that keeps it from page-locking host memory
    log_devices: tuple[LogDevice, ...] = ()  # how its start-up lines print its devices
    log_empty: tuple[str, ...] = ()  # lines by which it says it found no device
    name_roles: tuple[NameRole, ...] = ()  # device families of its vendor that are known from their names
    layered: tuple[Layered, ...] = ()  # its drivers that run on another card
    virtual: tuple[Virtual, ...] = ()  # how the devices it emulates on one card are named
    other_names: tuple[str, ...] = ()  # other prefixes its devices' names have (Metal's MTL0, ggml-cuda's MUSA0)
    # what a program that drives llama.cpp calls its library where that is not its device prefix in any case
    # (Ollama's `library=oneapi` for its SYCL runner; its `cuda`, `ROCm` … are the prefix already)
    library_names: tuple[str, ...] = ()
    remote: RemoteServer | None = None  # its devices are other hosts', through this server
    kits: tuple[Kit, ...] = ()  # toolchains `buildmgr toolchain add` assembles for it
    # the instruction-set defines of a build that lists its CPU's features (GGML_NATIVE=OFF), and the /proc/cpuinfo
    # flags a CPU must have for each: what an artifact of them needs of a host
    cpu_features: Mapping[str, tuple[str, ...]] = MappingProxyType({})

    @property
    def name(self) -> str:
        return self.names.device


def lazy(module: str, name: str) -> Callable[..., Any]:
    """`module.name` (a function, or `Class.method`), imported when first called: how a backend's record names the
    functions of its effect modules without importing them (a test resolves every one)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return resolve_lazy(module, name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = name
    call.__module__ = module
    call.lazy_target = (module, name)  # type: ignore[attr-defined]
    return call


def resolve_lazy(module: str, name: str) -> Callable[..., Any]:
    import importlib

    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    function: Callable[..., Any] = found
    return function
