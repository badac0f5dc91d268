"""Text that llama.cpp's tools print, read into device records: `--list-devices` (and rpc-server's device list), any
log people paste (each backend's start-up lines, the load log, test-backend-ops), and the records of ggml's device API.
Pure; the backend modules hold their own lines' shapes and their families' names, and read their vendor tools."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from buildmgr import backends
from buildmgr.devices import Device, Role, RoleBasis, normalize_pci, plain_description
from buildmgr.errors import UserError

HEADERS = ("Available devices:", "Devices:")  # llama tools' --list-devices; rpc-server's start-up
BLOCK = "device list"
_MEMORY = r"\s+\((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$"
_NAME = r"(?P<backend>[A-Za-z][A-Za-z_]*?)(?P<index>\d*):\s+(?P<description>\S.*?)"
# A device line right after its header's prefix; the memory group is optional (older or trimmed captures)
# and is the last parenthesised group, since descriptions hold their own parentheses.
_DEVICE = re.compile(r"^\s{1,4}" + _NAME + r"(?:" + _MEMORY + r"|\s*$)")
# Anywhere in a line behind some other log prefix, only with the memory group.
_PREFIXED_DEVICE = re.compile(r"\s{2}" + _NAME + _MEMORY)
# A device row quoted without its header (behind markdown's `> `, a comment marker, a sentence): a known backend's
# device name, then the description and the memory, at the end of the line.
ROWS = "device rows (no header)"
# common's device_info block (llama-server's log at the pin): "  - CUDA0   : NVIDIA GeForce RTX 3090 (24575 MiB, …)".
_DEVICE_INFO = re.compile(r"(?:^|\s)-\s+(?P<name>[A-Za-z][A-Za-z_]*\d*)\s+:\s+(?P<description>\S.*?)" + _MEMORY)
# llama.cpp's load log and ggml's registry (GGML_LOG_DEBUG): ggml's own description, the free memory, the device id.
# A name may hold parentheses (`Meta()`); a hand-edited line may lose the space before the description.
_USING = re.compile(
    r"using device (?P<name>\S+(?= \()|[^\s(]+(?=\())\s?\((?P<description>.*?)\)"
    r"(?: \((?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d|unknown id)\))? - (?P<free>\d+) MiB free"
)
_REGISTERED = re.compile(r"register_device: registered device (?P<name>\S+) \((?P<description>.*)\)\s*$")
# llama.cpp's own proof that two names are one card: "skipping device Vulkan0 (NAME) with id 0000:01:00.0 - already
# using device CUDA0 (NAME) with the same id".
_SKIPPED = re.compile(
    r"skipping device (?P<name>\S+) \((?P<description>.*?)\) with id (?P<pci>\S+) - already using device "
    r"(?P<other>\S+) \((?P<other_description>.*?)\) with the same id"
)
# test-backend-ops: "Backend 1/2: Vulkan0", then "  Device description: …" and "  Device memory: 4342 MB (2630 MB free)".
_OPS_BACKEND = re.compile(r"Backend \d+/\d+: (?P<name>\S+)\s*$")
_OPS_DESCRIPTION = re.compile(r"^\s+Device description: (?P<description>\S.*?)\s*$")
_OPS_MEMORY = re.compile(r"^\s+Device memory: (?P<total>\d+) MB \((?P<free>\d+) MB free\)")
# common/fit.cpp's memory breakdown at exit: "|   - CUDA0 (RTX 5090)   | 32606 = 30991 + ( 4205 = …) + -2590 |"
# (2025-09's first form: "  - CUDA0 (RTX 4090):  24080 = 9436 + (…) + 451", a CPU row with its total alone). Its
# description has the vendor's words stripped ("NVIDIA ", "GeForce ", "AMD ", "Radeon " …): the last choice.
BREAKDOWN = "memory breakdown"
_BREAKDOWN = re.compile(
    r"(?:^|\s)-\s+(?P<name>[^\s(|]+) \((?P<description>.*?)\)(?::|\s+\|)\s+(?P<total>\d+)"
    r"(?:\s*=\s*(?P<free>-?\d+)\s*\+\s*\(|\s+\d+\s*=\s*\d+\s*\+)"
)
# its fit step: "  - CUDA0 (NVIDIA RTX 2000 Ada Generation Laptop GPU): 42 layers, 5658 MiB used, 1968 MiB free":
# ggml's whole description; the memory is a projection, not the device's.
_FIT = re.compile(r"(?:^|\s)-\s+(?P<name>[^\s(|]+) \((?P<description>.*)\): +\d+ layers\b")
# src/llama.cpp's tensor-parallel Meta device: "- device 0: CUDA0 (NVIDIA H200)" for each device it spans.
_META = re.compile(r"- device \d+: (?P<name>[^\s(]+) \((?P<description>.*)\)\s*$")
# Every format string of the pinned source (llama.cpp's own; each backend's are in its `LogDevice.formats`) that
# prints a device's name, description or memory → the shape that reads it. tests/test_captures51.py lists them from
# the pinned tree and fails on one that neither this nor a backend covers. Spelled as in the source: macros as
# `{NAME}`, escapes as written.
SOURCE_FORMATS = {
    r"  %s: %s (%zu MiB, %zu MiB free)\n": BLOCK,  # --list-devices, rpc-server's and ggml-rpc's device lists
    r"  - %-8s: %s (%zu MiB, %zu MiB free)\n": BLOCK,  # common's device_info
    r"%s: using device %s (%s) (%s) - %zu MiB free\n": "load log (using device)",
    r"%s: skipping device %s (%s) with id %s - already using device %s (%s) with the same id\n": "load log (using device)",
    r"%s: registered device %s (%s)\n": "register_device lines",
    r"%s: - device %zu: %s (%s)\n": "load log (Meta device)",
    r"  Device description: %s\n": "test-backend-ops",
    r"  Device memory: %zu MB (%zu MB free)\n": "test-backend-ops",
    r"%s: | %s | %s   %s    %s   %s   %s   %s    %s |\n": BREAKDOWN,  # its header: names no device
    r"%s: | %s | %s = %s + (%s = %s + %s + %s) + %s |\n": BREAKDOWN,
    r"%s: | %s | %s   %s    %s = %s + %s + %s    %s |\n": BREAKDOWN,  # the host's rows: no device
    r"%s:   - %s: %2{PRIu32} layers, %6{PRId64} MiB used, %6{PRId64} MiB free\n": BREAKDOWN,
    r"%s:   - %s: %2{PRIu32} layers (%2{PRIu32} overflowing), %6{PRId64} MiB used, %6{PRId64} MiB free\n": BREAKDOWN,
}


def covered_formats() -> dict[str, str]:
    """Each device line's format string in the pinned source that a reader covers → that reader's shape."""
    return SOURCE_FORMATS | backends.log_formats()


# Where a log line of llama.cpp or ggml starts, whatever its prefix: a whole log pasted as one line is cut here.
_STARTS = re.compile(
    r"(?<=\s)(?=(?:ggml_\w+|llama_\w+|llm_load_\w+|load_backend|register_\w+|load_tensors|print_info|system_info"
    r"|common_\w+|main|build): )"
)
# A text with none of these (and no device line) is not a llama.cpp or ggml log.
_LLAMA_LINE = re.compile(
    r"(?<![\w.])(?:ggml_\w+|llama_\w+|llm_load_\w+|load_backend|register_backend|register_device|load_tensors"
    r"|print_info|system_info|device_info|common_\w+):|Available devices:|\b(?:version|build): \d+ \([0-9a-f]+\)"
)
# Where a record's description comes from, best first: ggml's own description over a start-up line's (which may
# trim it), Ollama's last; memory from whichever printed it.
_BLOCK, _OPS, _LOAD, _INIT, _TABLE, _OLLAMA = range(6)
# The lines that begin a program's device list (llama.cpp's own; each backend adds its init headers): one seen again
# begins a new run.
_RUN_HEADERS = (r"(?:^|\s)Available devices:\s*$", r"^\s*Devices:\s*$", r"(?:^|\s)device_info:\s*$")
# A program's build line, printed once: common's `build: N (COMMIT) with …` (the pin's `common_…: build N (COMMIT)`),
# 2024's `main: build = N (COMMIT)`, `--version`'s `version: N (COMMIT)`. N is the count of llama.cpp's commits.
_BUILD = re.compile(r"(?:(?<![\w-])(?:build|version): |\w: build (?:= )?)(?P<number>\d+) \([0-9a-f]{7,40}\)")
# llama-bench's footer `build: COMMIT (N)`, its last line: a llama.cpp line after it is another program's.
_BENCH_BUILD = re.compile(r"(?<![\w-])build: [0-9a-f]{7,40} \((?P<number>\d+)\)\s*$")
_SYSTEM_INFO = re.compile(r"(?<![\w.])system_info: n_threads")  # once per program, after its start-up lines
MIB = 1 << 20
# Ollama (which drives llama.cpp) logs devices with Go's slog, `key=value`, a value quoted where it holds a space. From
# its source (ollama/ollama: discover/types.go, server/sched.go, discover/gpu.go, discover/amd_linux.go): message →
# (the key of the device's total, the key of its free memory); a message that names its library has no `library=`.
# `available` is the device's free memory in "inference compute" (ml.DeviceInfo.FreeMemory), but that less Ollama's
# overhead and minimum in "gpu memory", whose `free` is the device's. `id` (or `gpu`) is Ollama's own id of the
# device within its library (a UUID, a vendor ordinal, a place in its probe's list), never ggml's index: only a
# `name` that is a device name of the library's backend (`CUDA0`, since Ollama reads ggml's devices) names it.
OLLAMA = "Ollama's device lines"
_OLLAMA_LINES = (
    ("inference compute", "total", "available"),
    ("gpu memory", None, "free"),
    (r"updating (?P<library>\w+) memory data", "now.total", "now.free"),
    (r"updating (?P<library>\w+) free memory", None, "now"),
)
_KEY_VALUE = re.compile(r'(?<!\S)(?P<key>[\w.]+)=(?P<value>"(?:[^"\\]|\\.)*"|\S*)')
# its CUDA probe's lines, keyed by the id its key=value lines give: "[%s] CUDA totalMem %lu mb" (gpu_info_nvcuda.c,
# bytes / 2^20) and the same in bytes without the unit (gpu_info_cudart.c)
_OLLAMA_PROBE = re.compile(
    r"\[(?P<id>[^\]\s]+)\] (?P<library>\w+) (?P<which>totalMem|freeMem) (?P<value>\d+)(?P<mib> mb)?\s*$"
)
# format.HumanBytes2's units ("%.1f GiB"), and decimal ones
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30, "TiB": 1 << 40, "KB": 10**3, "MB": 10**6, "GB": 10**9}


@dataclass(frozen=True)
class Parsed:
    """What a pasted text says about devices: each once, the shapes it was read from, and notes on the text."""

    devices: tuple[Device, ...]
    shapes: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass
class _Record:
    name: str
    backend: str
    index: int | None
    description: str = ""
    rank: int = _OLLAMA + 1
    total: int | None = None
    free: int | None = None
    rough: tuple[bool, bool] = (False, False)  # (total, free) came from a value rounded to 0.1 GiB: any other wins
    pci: str | None = None
    role: tuple[Role, str] | None = None  # (role, reason) a line of the text tells
    separate: str | None = None  # why a line says it is no integrated device (a discrete card, unless a CPU's name)
    detail: str = ""  # more of its name a line printed (ROCm's gfx target)
    listed: bool = False
    run: int = 0  # which run of a program in the text printed it
    driver: str | None = None  # the driver a start-up line names beside the description

    def add(
        self,
        rank: int,
        description: str | None = None,
        total: str | int | None = None,
        free: str | int | None = None,
        pci: str | None = None,
        rough: bool = False,
    ) -> None:
        if description and rank < self.rank:
            self.description, self.rank = description.strip(), rank
        total_rough, free_rough = self.rough
        if total is not None and (self.total is None or rank == _BLOCK or total_rough > rough):
            self.total, total_rough = int(total), rough
        if free is not None and (self.free is None or rank == _BLOCK or free_rough > rough):
            self.free, free_rough = int(free), rough
        self.rough = (total_rough, free_rough)
        self.pci = self.pci or normalize_pci(pci)
        self.listed = self.listed or rank == _BLOCK


@dataclass
class _Reading:
    runs: list[int]  # the run of each line
    builds: dict[int, int] = field(default_factory=dict)  # the build number each run's build line gives
    records: dict[tuple[int, str, str], _Record] = field(default_factory=dict)
    shapes: list[str] = field(default_factory=list)

    def record(
        self,
        line: int,
        name: str,
        backend: str | None = None,
        description: str = "",
        again: int = 0,
        ident: str | None = None,
    ) -> _Record:
        """The record of a device a line names, in that line's run (`again`: the how-manieth alike line of one list
        this is, where each line is a device of its own; `ident`: what tells a device without an index apart where its
        description cannot, such as Ollama's id)."""
        number = re.search(r"(\d+)$", name)
        backend = backend or (name[: number.start()] if number else name)
        run = self.runs[line]
        # Names without an index (GPUOpenCL, Metal) may stand for several devices: their description tells them apart.
        told = ident if ident is not None else plain_description(description) + (f"#{again}" if again else "")
        key = (run, name, "") if number else (run, name, told)
        if key not in self.records:
            self.records[key] = _Record(name, backend, int(number.group(1)) if number else None, run=run)
        return self.records[key]

    def saw(self, shape: str) -> None:
        if shape not in self.shapes:
            self.shapes.append(shape)


# ggml's device types that are roles as they are ("meta" and anything newer are not)
_GGML_ROLES = {role.value: role for role in (Role.GPU, Role.IGPU, Role.ACCEL, Role.CPU)}


def role_of(backend: str, ggml_type: str | None) -> Role:
    """The device's role from ggml's own type, except for a device that is not a card (CPU, BLAS, RPC)."""
    if backend in backends.NOT_A_CARD:
        return backends.NOT_A_CARD[backend]
    return _GGML_ROLES.get(ggml_type or "", Role.UNKNOWN)


def with_role(
    device: Device, told: tuple[Role, str] | None = None, detail: str = "", separate: str | None = None
) -> Device:
    """The device with a role where ggml's type leaves it unknown: a device that is not a card, what a line of the
    text told, else a family known from its name (and the detail a line printed with it, such as a gfx target), else
    a discrete card where a line says it is no integrated one (`separate`: Vulkan's uma: 0). A discrete card is never
    concluded from a name alone."""
    if device.backend in backends.NOT_A_CARD:
        return replace(device, type=backends.NOT_A_CARD[device.backend], role_basis=RoleBasis.BACKEND)
    if device.type != Role.UNKNOWN:
        return device
    if told is not None:
        return replace(device, type=told[0], role_basis=RoleBasis.LOG, role_reason=told[1])
    # the name as its line printed it, driver included: a driver's name tells a family too (llvmpipe's is `llvmpipe`)
    printed = f"{device.description} ({device.driver})" if device.driver else device.description
    family = backends.name_role(f"{printed} {detail}".strip())
    if family is None:
        if separate is not None:
            return replace(device, type=Role.GPU, role_basis=RoleBasis.LOG, role_reason=separate)
        return device
    return replace(device, type=family.role, role_basis=RoleBasis.NAME, role_reason=family.reason)


def _lines(text: str) -> list[str]:
    """The text's lines, a log joined onto one line cut at each llama.cpp line, and a device line wrapped in two
    joined again."""
    lines = [piece for line in text.splitlines() for piece in _STARTS.sub("\n", line).split("\n")]
    wraps = [(row.pattern, row.wrapped) for row in backends.log_devices() if row.wrapped]
    joined: list[str] = []
    for line in lines:
        previous = joined[-1] if joined else ""
        if any(
            re.search(pattern, previous)
            and not re.search(wrapped, previous)
            and re.search(wrapped, line)
            and not _LLAMA_LINE.search(line)
            for pattern, wrapped in wraps
        ):
            joined[-1] = previous.rstrip() + " " + line.strip()
        else:
            joined.append(line)
    return joined


def _runs(lines: list[str]) -> tuple[list[int], dict[int, int]]:
    """The run of a program each line belongs to, and each run's build number where its build line gives one.

    A program prints its backends' start-up lines, its build line, then its load log (before 2024-10 the build line
    came first and the start-up lines during the load). So a new run begins with a header that begins a device list,
    a build line or a `system_info` line already seen in this run, a device the load log names again for another
    card (the same line again is the same program loading again: a fit's dry run, a draft model), a backend's
    start-up header after this run's build line that followed its start-up lines, and any llama.cpp line after
    llama-bench's footer (two builds or hosts in one text). A table printed twice in one run (the memory breakdown)
    begins none."""
    headers = [re.compile(pattern) for pattern in (*_RUN_HEADERS, *backends.run_headers())]
    starts = set(backends.start_headers())
    run, seen, runs, builds = 0, set[str](), list[int](), dict[int, int]()
    cards: dict[str, str] = {}  # this run's indexed names, each with the card its load log gave it
    started = ended = False  # this run's program printed its build line after its start-up lines; its footer
    for line in lines:
        begins = {header.pattern for header in headers if header.search(line)}
        # an indexed name is one card in a run (a hand-edited log may repeat a bare `RPC`): the same name for another
        # card begins a new run; the same card again does not (one llama-server loads a model several times: its
        # fit's dry runs, the model, a draft model)
        using = _USING.search(line)
        card = f"{using['description']} {using['pci'] or ''}" if using and using["name"][-1:].isdigit() else None
        if using and card is not None and cards.get(using["name"], card) != card:
            begins.add("another card under a name")
        footer = _BENCH_BUILD.search(line)
        build = footer or _BUILD.search(line)
        if build:
            begins.add("build line")
        if _SYSTEM_INFO.search(line):
            begins.add("system_info")
        renamed = "another card under a name" in begins
        if (
            renamed
            or begins & seen
            or (started and begins & starts)
            or (ended and (begins or _LLAMA_LINE.search(line)))
        ):
            run, seen, started, ended, cards = run + 1, set(), False, False, {}
        if using and card is not None:
            cards[using["name"]] = card
        if build:
            builds.setdefault(run, int(build["number"]))
            started = started or bool(seen & starts)
            ended = footer is not None
        seen |= begins
        runs.append(run)
    return runs, builds


def _read_blocks(lines: list[str], reading: _Reading) -> None:
    found = next(((n, prefix) for n, line in enumerate(lines) if (prefix := _header_prefix(line)) is not None), None)
    if found is None:
        _read_rows(lines, reading)
    else:
        start, prefix = found
        for n, line in enumerate(lines[start + 1 :], start + 1):
            bare = line[len(prefix) :] if prefix.strip() and line.startswith(prefix) else line
            match = _DEVICE.match(bare) or _PREFIXED_DEVICE.search(line)
            if match and match["backend"] != "Device":  # a backend's init log: "  Device 0: …" lines
                name = match["backend"] + match["index"]
                reading.saw(BLOCK)
                reading.record(n, name, match["backend"], match["description"]).add(
                    _BLOCK, match["description"], match["total"], match["free"]
                )
    for n, line in enumerate(lines):
        match = _DEVICE_INFO.search(line)
        if match:
            reading.saw(BLOCK)
            reading.record(n, match["name"], None, match["description"]).add(
                _BLOCK, match["description"], match["total"], match["free"]
            )


def _read_rows(lines: list[str], reading: _Reading) -> None:
    """Device rows quoted without their header (in docs, chat, code comments): a row's own shape, with its memory
    and a known backend's name, is evidence enough."""
    names = "|".join(sorted(backends.device_prefixes(), key=len, reverse=True))
    row = re.compile(rf"(?<![\w-])(?P<backend>{names})(?P<index>\d*):\s+(?P<description>\S.*?)" + _MEMORY)
    for n, line in enumerate(lines):
        match = row.search(line)
        if match:
            reading.saw(ROWS)
            reading.record(n, match["backend"] + match["index"], match["backend"], match["description"]).add(
                _BLOCK, match["description"], match["total"], match["free"]
            )


def _total(groups: dict[str, str | None]) -> int | None:
    """The total MiB a line printed: in MiB, in 10^6 bytes (Metal's MB), in whole 10^6 bytes cut down (SYCL's table:
    rounded, the nearer MiB) or in decimal MiB."""
    mb, cut, mib, total = groups.get("total_mb"), groups.get("total_m"), groups.get("total_mib"), groups.get("total")
    if total is not None:
        return int(total)
    if cut is not None:
        return round(int(cut) * 1e6 / MIB)
    return int(float(mb) * 1e6) // MIB if mb else int(float(mib)) if mib else None


def _read_backend_lines(lines: list[str], reading: _Reading) -> None:
    for row in backends.log_devices():
        named = None  # the backend name its `after` header gave
        last: _Record | None = None  # the device its `more` lines tell of
        for n, line in enumerate(lines):
            header = re.search(row.after, line) if row.after else None
            if header:
                named = header["backend"] if re.fullmatch(r"[A-Za-z]+", header["backend"]) else None
            for match in re.finditer(row.pattern, line):
                groups = match.groupdict()
                backend = groups.get("backend") or named or row.backend
                description, driver = _named_driver(row, groups, reading.builds.get(reading.runs[n]))
                last = reading.record(n, f"{backend}{groups.get('index') or ''}", backend, description)
                last.add(_INIT, description, _total(groups), groups.get("free"), groups.get("pci"))
                last.detail = groups.get("detail") or last.detail
                last.driver = driver or last.driver
                _told(row, groups, last)
                reading.saw(row.shape)
            for pattern in row.more if last is not None else ():
                if more := re.search(pattern, line):
                    told = more.groupdict()
                    last.add(_INIT, total=_total(told))  # type: ignore[union-attr]  # `last` is set: see the loop
                    _told(row, told, last)  # type: ignore[arg-type]


def _named_driver(row: backends.LogDevice, groups: dict[str, str | None], build: int | None) -> tuple[str, str | None]:
    """(description, driver) of a start-up line: its last parenthesis is the name's where the run's build printed no
    driver there (a build number outside the form's range is no commit count and tells nothing)."""
    description, driver = groups["description"] or "", groups.get("driver")
    if driver is not None and row.driver_since and build is not None:
        first, since = row.driver_since
        if first <= build < since:
            return f"{description} ({driver})", None
    return description, driver


def _told(row: backends.LogDevice, groups: dict[str, str | None], record: _Record) -> None:
    """The role a device's line tells, where its role group has the value that tells it."""
    if row.role and groups.get(row.role[0]) == row.role[1]:
        record.role = (row.role[2], row.role[3])
    if row.separate and groups.get(row.separate[0]) == row.separate[1]:
        record.separate = row.separate[2]


def _read_load_log(lines: list[str], reading: _Reading) -> None:
    current: _Record | None = None
    # llama.cpp prints one `using device` line per device of a model: two alike lines of one list are two devices
    # (RPC servers whose endpoints a poster redacted alike)
    listed: dict[tuple[str, str], int] = {}
    for n, line in enumerate(lines):
        if match := _USING.search(line):
            reading.saw("load log (using device)")
            pci = match["pci"] if match["pci"] != "unknown id" else None
            alike = (match["name"], match["description"])
            listed[alike] = again = listed.get(alike, -1) + 1
            reading.record(n, match["name"], None, match["description"], again).add(
                _LOAD, match["description"], free=match["free"], pci=pci
            )
        else:
            listed = {}
        if match := _SKIPPED.search(line):
            reading.saw("load log (using device)")
            for name, description in (
                (match["name"], match["description"]),
                (match["other"], match["other_description"]),
            ):
                reading.record(n, name, None, description).add(_LOAD, description, pci=match["pci"])
        if match := _REGISTERED.search(line):
            reading.saw("register_device lines")
            reading.record(n, match["name"], None, match["description"]).add(_LOAD, match["description"])
        if match := _META.search(line):
            reading.saw("load log (Meta device)")
            reading.record(n, match["name"], None, match["description"]).add(_LOAD, match["description"])
        if match := _BREAKDOWN.search(line):
            reading.saw(BREAKDOWN)
            reading.record(n, match["name"], None, match["description"]).add(
                _TABLE, match["description"], match["total"], match["free"]
            )
        elif match := _FIT.search(line):
            reading.saw(BREAKDOWN)
            reading.record(n, match["name"], None, match["description"]).add(_LOAD, match["description"])
        if match := _OPS_BACKEND.search(line):
            reading.saw("test-backend-ops")
            current = reading.record(n, match["name"])
        elif current is not None and (match := _OPS_DESCRIPTION.search(line)):
            current.add(_OPS, match["description"])
        elif current is not None and (match := _OPS_MEMORY.search(line)):
            current.add(_OPS, total=match["total"], free=match["free"])


def _mib(value: str | None) -> int | None:
    """A key=value line's memory (`15.9 GiB`) in MiB; None where absent, or where it is an unsigned subtraction that
    wrapped (Ollama's `17179869183.8 GiB`: no device has 2^63 bytes)."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?) ?([KMGT]i?B|B)", value or "")
    if found is None or found[2] not in _UNITS:
        return None
    size = float(found[1]) * _UNITS[found[2]]
    return round(size / MIB) if size < 2**63 else None


def _unquoted(value: str) -> str:
    """A slog value as printed: Go's strconv.Quote where it holds a space or a quote."""
    if not value.startswith('"'):
        return value
    try:
        return str(json.loads(value))
    except ValueError:
        return value[1:-1]


def _read_ollama(lines: list[str], reading: _Reading) -> None:
    """Ollama's key=value device lines and its CUDA probe's lines. A device whose line names it as ggml does
    (`name=CUDA0`) is that device; one that only Ollama's id tells apart is named by its backend alone, as a device
    without an index is (`CUDA`). Its lines are joined by that id within a run (Ollama's DeviceID: id and library)."""
    known: dict[tuple[int, str, str], _Record] = {}

    def device(n: int, library: str, ident: str, name: str = "") -> _Record:
        backend = backends.library_backend(library) or library  # a library no backend has stays as printed
        key = (reading.runs[n], backend, ident)
        if key not in known:
            if name:
                known[key] = reading.record(n, name, backend)
            else:
                known[key] = reading.record(n, backend, backend, ident=f"ollama id {ident}")
        reading.saw(OLLAMA)
        return known[key]

    for n, line in enumerate(lines):
        if probe := _OLLAMA_PROBE.search(line):
            mib = int(probe["value"]) if probe["mib"] else int(probe["value"]) // MIB
            record = device(n, probe["library"], probe["id"])
            if probe["which"] == "totalMem":
                record.add(_OLLAMA, total=mib)
            else:
                record.add(_OLLAMA, free=mib)
            continue
        if "msg=" not in line:
            continue
        pairs = {m["key"]: _unquoted(m["value"]) for m in _KEY_VALUE.finditer(line)}
        said, total_key, free_key = next(
            ((said, t, f) for message, t, f in _OLLAMA_LINES if (said := re.fullmatch(message, pairs.get("msg", "")))),
            (None, None, ""),
        )
        library = pairs.get("library") or (said.groupdict().get("library") if said else None)
        ident = pairs.get("id") or pairs.get("gpu")
        if said is None or not library or not ident:
            continue
        name = pairs.get("name", "")
        backend = backends.library_backend(library) or library
        prefixes = sorted({*backends.device_prefixes(), backend}, key=len, reverse=True)
        ggml = name if re.fullmatch(rf"(?:{'|'.join(map(re.escape, prefixes))})\d*", name) else ""
        # `description` beside ggml's name; without it, `name` is the vendor library's name of the card
        description = pairs.get("description", "" if ggml else name)
        total, free = _mib(pairs.get(total_key or "")), _mib(pairs.get(free_key))
        if free is not None and total is not None and free > total:
            free = None  # more free than there is: a subtraction that wrapped
        device(n, library, ident, ggml).add(_OLLAMA, description, total, free, rough=True)


def _device(record: _Record) -> Device:
    device = Device(
        record.name,
        record.backend,
        record.index,
        record.description,
        record.total,
        record.free,
        pci_bus_id=record.pci,
        source="list-devices" if record.listed else "log",
        run=record.run,
        driver=record.driver,
    )
    return with_role(device, record.role, record.detail, record.separate)


def read_text(text: str) -> Parsed:
    """Any text a user pastes → its devices, each once, with the name llama.cpp gives it for -dev.

    Reads the device list of --list-devices, rpc-server and llama-server, each backend's start-up lines, the load log,
    and test-backend-ops, behind any log prefix, joined or wrapped. A llama.cpp log without devices is an empty list
    with a note; a text that is no llama.cpp or ggml log is a UserError.
    """
    lines = _lines(text)
    reading = _Reading(*_runs(lines))
    _read_blocks(lines, reading)
    _read_backend_lines(lines, reading)
    _read_load_log(lines, reading)
    _read_ollama(lines, reading)
    said = [
        match.group(0).strip()
        for line in lines
        for pattern in backends.log_empty()
        if (match := re.search(pattern, line))
    ]
    devices = tuple(_device(record) for record in reading.records.values())
    if not devices and not said and not any(_LLAMA_LINE.search(line) for line in lines):
        raise UserError(
            "no llama.cpp or ggml log lines in that text: paste the output of `llama-cli --list-devices`, or a "
            "llama.cpp log from its start (the lines that name the devices)"
        )
    said = list(dict.fromkeys(said))
    if devices:
        notes = [f"the log says: {line}" for line in said]
    elif said:
        notes = [f"no devices: the log says '{line}'" for line in said]
    else:
        seen = ", ".join(
            list(dict.fromkeys(m.group(0).rstrip(":") for ln in lines for m in _LLAMA_LINE.finditer(ln)))[:4]
        )
        notes = [f"no devices: the text holds llama.cpp log lines ({seen}) but none names a device"]
    return Parsed(devices, tuple(reading.shapes), tuple(notes))


def _header_prefix(line: str) -> str | None:
    """The log prefix in front of a device block's header ('' for a bare header), or None if not a header."""
    text = line.rstrip()
    if text.strip() in HEADERS:
        return ""
    main = HEADERS[0]
    if text.endswith(main) and text[: -len(main)][-1:] in (" ", "=", ":", '"'):
        return text[: -len(main)]
    return None


def parse_list_devices(text: str) -> list[Device]:
    """`llama-* --list-devices` (or rpc-server) output → devices; UserError if it has no device block.

    Noise is allowed anywhere: init logs before or after the block, prompt lines, log prefixes. The block decides
    which devices there are; the init lines only add what they tell (an iGPU's uma: 1).
    """
    lines = text.splitlines()
    if not any(_header_prefix(line) is not None for line in lines):
        raise UserError(f"no '{HEADERS[0]}' block found: is this the output of a llama.cpp tool's --list-devices?")
    reading = _Reading(*_runs(lines))
    _read_blocks(lines, reading)
    _read_backend_lines(lines, reading)
    return [_device(record) for record in reading.records.values() if record.listed]


def device_from_api(record: dict[str, Any]) -> Device:
    """One record of `ggml_api.read_devices` → a Device, memory in MiB as --list-devices prints it."""
    name, backend = str(record["name"]), str(record["backend"])
    number = re.search(r"(\d+)$", name)
    ggml_type = str(record["type"])
    device = Device(
        name,
        backend,
        int(number.group(1)) if number else None,
        str(record["description"] or ""),
        int(record["memory_total"]) // MIB,
        int(record["memory_free"]) // MIB,
        role_of(backend, ggml_type),
        pci_bus_id=normalize_pci(record.get("device_id")),
        ggml_type=ggml_type,
        device_id=record.get("device_id"),
        caps=dict(record.get("caps") or {}),
        source="ggml-api",
    )
    if device.type != Role.UNKNOWN and backend not in backends.NOT_A_CARD:
        return replace(device, role_basis=RoleBasis.GGML)
    return with_role(device)
