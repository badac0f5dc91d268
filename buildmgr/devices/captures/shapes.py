"""The shapes of the lines llama.cpp, ggml and Ollama print about devices, and the format strings of the pinned
source they read (pure)."""

from __future__ import annotations

import re

from buildmgr import backends

HEADERS = ("Available devices:", "Devices:")  # llama tools' --list-devices; rpc-server's start-up
BLOCK = "device list"
MEMORY = r"\s+\((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$"
_NAME = r"(?P<backend>[A-Za-z][A-Za-z_]*?)(?P<index>\d*):\s+(?P<description>\S.*?)"
# A device line right after its header's prefix; the memory group is optional (older or trimmed captures)
# and is the last parenthesised group, since descriptions hold their own parentheses.
DEVICE_LINE = re.compile(r"^\s{1,4}" + _NAME + r"(?:" + MEMORY + r"|\s*$)")
# Anywhere in a line behind some other log prefix, only with the memory group.
PREFIXED_DEVICE_LINE = re.compile(r"\s{2}" + _NAME + MEMORY)
# A device row quoted without its header (behind markdown's `> `, a comment marker, a sentence): a known backend's
# device name, then the description and the memory, at the end of the line.
ROWS = "device rows (no header)"
# common's device_info block (llama-server's log at the pin): "  - CUDA0   : NVIDIA GeForce RTX 3090 (24575 MiB, …)".
DEVICE_INFO_LINE = re.compile(r"(?:^|\s)-\s+(?P<name>[A-Za-z][A-Za-z_]*\d*)\s+:\s+(?P<description>\S.*?)" + MEMORY)
# llama.cpp's load log and ggml's registry (GGML_LOG_DEBUG): ggml's own description, the free memory, the device id.
# A name may hold parentheses (`Meta()`); a hand-edited line may lose the space before the description.
USING_LINE = re.compile(
    r"using device (?P<name>\S+(?= \()|[^\s(]+(?=\())\s?\((?P<description>.*?)\)"
    r"(?: \((?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d|unknown id)\))? - (?P<free>\d+) MiB free"
)
REGISTERED_LINE = re.compile(r"register_device: registered device (?P<name>\S+) \((?P<description>.*)\)\s*$")
# llama.cpp's own proof that two names are one card: "skipping device Vulkan0 (NAME) with id 0000:01:00.0 - already
# using device CUDA0 (NAME) with the same id".
SKIPPED_LINE = re.compile(
    r"skipping device (?P<name>\S+) \((?P<description>.*?)\) with id (?P<pci>\S+) - already using device "
    r"(?P<other>\S+) \((?P<other_description>.*?)\) with the same id"
)
# test-backend-ops: "Backend 1/2: Vulkan0", then "  Device description: …" and "  Device memory: 4342 MB (2630 MB free)".
OPS_BACKEND_LINE = re.compile(r"Backend \d+/\d+: (?P<name>\S+)\s*$")
OPS_DESCRIPTION_LINE = re.compile(r"^\s+Device description: (?P<description>\S.*?)\s*$")
OPS_MEMORY_LINE = re.compile(r"^\s+Device memory: (?P<total>\d+) MB \((?P<free>\d+) MB free\)")
# common/fit.cpp's memory breakdown at exit: "|   - CUDA0 (RTX 5090)   | 32606 = 30991 + ( 4205 = …) + -2590 |"
# (2025-09's first form: "  - CUDA0 (RTX 4090):  24080 = 9436 + (…) + 451", a CPU row with its total alone). Its
# description has the vendor's words stripped ("NVIDIA ", "GeForce ", "AMD ", "Radeon " …): the last choice.
BREAKDOWN = "memory breakdown"
BREAKDOWN_LINE = re.compile(
    r"(?:^|\s)-\s+(?P<name>[^\s(|]+) \((?P<description>.*?)\)(?::|\s+\|)\s+(?P<total>\d+)"
    r"(?:\s*=\s*(?P<free>-?\d+)\s*\+\s*\(|\s+\d+\s*=\s*\d+\s*\+)"
)
# its fit step: "  - CUDA0 (NVIDIA RTX 2000 Ada Generation Laptop GPU): 42 layers, 5658 MiB used, 1968 MiB free":
# ggml's whole description; the memory is a projection, not the device's.
FIT_LINE = re.compile(r"(?:^|\s)-\s+(?P<name>[^\s(|]+) \((?P<description>.*)\): +\d+ layers\b")
# src/llama.cpp's tensor-parallel Meta device: "- device 0: CUDA0 (NVIDIA H200)" for each device it spans.
META_LINE = re.compile(r"- device \d+: (?P<name>[^\s(]+) \((?P<description>.*)\)\s*$")
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
LINE_STARTS = re.compile(
    r"(?<=\s)(?=(?:ggml_\w+|llama_\w+|llm_load_\w+|load_backend|register_\w+|load_tensors|print_info|system_info"
    r"|common_\w+|main|build): )"
)
# A text with none of these (and no device line) is not a llama.cpp or ggml log.
LLAMA_LINE = re.compile(
    r"(?<![\w.])(?:ggml_\w+|llama_\w+|llm_load_\w+|load_backend|register_backend|register_device|load_tensors"
    r"|print_info|system_info|device_info|common_\w+):|Available devices:|\b(?:version|build): \d+ \([0-9a-f]+\)"
)
# Where a record's description comes from, best first: ggml's own description over a start-up line's (which may
# The lines that begin a program's device list (llama.cpp's own; each backend adds its init headers): one seen again
# begins a new run.
RUN_HEADERS = (r"(?:^|\s)Available devices:\s*$", r"^\s*Devices:\s*$", r"(?:^|\s)device_info:\s*$")
# A program's build line, printed once: common's `build: N (COMMIT) with …` (the pin's `common_…: build N (COMMIT)`),
# 2024's `main: build = N (COMMIT)`, `--version`'s `version: N (COMMIT)`. N is the count of llama.cpp's commits.
BUILD_LINE = re.compile(r"(?:(?<![\w-])(?:build|version): |\w: build (?:= )?)(?P<number>\d+) \([0-9a-f]{7,40}\)")
# llama-bench's footer `build: COMMIT (N)`, its last line: a llama.cpp line after it is another program's.
BENCH_BUILD_LINE = re.compile(r"(?<![\w-])build: [0-9a-f]{7,40} \((?P<number>\d+)\)\s*$")
SYSTEM_INFO_LINE = re.compile(r"(?<![\w.])system_info: n_threads")  # once per program, after its start-up lines
# Ollama (which drives llama.cpp) logs devices with Go's slog, `key=value`, a value quoted where it holds a space. From
# its source (ollama/ollama: discover/types.go, server/sched.go, discover/gpu.go, discover/amd_linux.go): message →
# (the key of the device's total, the key of its free memory); a message that names its library has no `library=`.
# `available` is the device's free memory in "inference compute" (ml.DeviceInfo.FreeMemory), but that less Ollama's
# overhead and minimum in "gpu memory", whose `free` is the device's. `id` (or `gpu`) is Ollama's own id of the
# device within its library (a UUID, a vendor ordinal, a place in its probe's list), never ggml's index: only a
# `name` that is a device name of the library's backend (`CUDA0`, since Ollama reads ggml's devices) names it.
OLLAMA = "Ollama's device lines"
OLLAMA_LINES = (
    ("inference compute", "total", "available"),
    ("gpu memory", None, "free"),
    (r"updating (?P<library>\w+) memory data", "now.total", "now.free"),
    (r"updating (?P<library>\w+) free memory", None, "now"),
)
KEY_VALUE = re.compile(r'(?<!\S)(?P<key>[\w.]+)=(?P<value>"(?:[^"\\]|\\.)*"|\S*)')
# its CUDA probe's lines, keyed by the id its key=value lines give: "[%s] CUDA totalMem %lu mb" (gpu_info_nvcuda.c,
# bytes / 2^20) and the same in bytes without the unit (gpu_info_cudart.c)
OLLAMA_PROBE_LINE = re.compile(
    r"\[(?P<id>[^\]\s]+)\] (?P<library>\w+) (?P<which>totalMem|freeMem) (?P<value>\d+)(?P<mib> mb)?\s*$"
)
# format.HumanBytes2's units ("%.1f GiB"), and decimal ones
