"""A crash of one of llama.cpp's tools, told as what it is: the signal, the device and weight types it ran, the function
it died in (gdb's innermost frame, where gdb could be run), the weight buffers it had loaded, and whether it ran without
the extra buffer types (repack, AMX). Pure: `postmortem` runs the programs that find these out."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

# gdb's innermost frame: "#0  0x00007f… in FUNCTION(types) [clone .constprop.0] () from /path/libggml-cpu.so.0", or
# with debug information "#0  FUNCTION (arg=…) at file.c:12"
_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(?P<frame>.+?)(?: from (?P<library>\S+))?(?: at \S+:\d+)?\s*$", re.M)
# what ggml's abort prints before it dies: "ggml/src/ggml.c:5515: GGML_ASSERT(ggml_can_mul_mat(k, q)) failed"
_ASSERT = re.compile(r"^(?P<message>\S+:\d+: (?:GGML_ASSERT\(.*\) failed|.*))$", re.M)
_TYPE = re.compile(r"^llama_model_loader: - type\s+(?P<kind>\w+):\s+\d+ tensors", re.M)
_BUFFER = re.compile(r"^load_tensors:\s+(?P<name>\S+) model buffer size\s*=", re.M)


def signal_name(returncode: int) -> str | None:
    """The signal that ended a process (Python's negative return code, or a shell's 128+N), None for an exit."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else 0
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal has a number, no name
        return f"signal {number}"


def short_function(name: str) -> str:
    """A C++ frame's name without its arguments, clones and anonymous namespaces, its template arguments cut to the
    first: `tinygemm_kernel_amx<block_q8_0, …>`."""
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"^(?:void|int|float|bool|auto)\s+", "", name)
    name = re.sub(r" \[clone [^\]]*\]", "", name)
    name = re.sub(r"^((?:[^(<]|<[^>]*>)*?)\s+\(", r"\1(", name)  # "f (a=1)" → "f(a=1)"
    depth, cut = 0, len(name)
    for i, char in enumerate(name):  # the argument list: the first '(' outside template brackets
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "(" and depth == 0 and i > 0:
            cut = i
            break
    name = name[:cut]
    return re.sub(r"<([^,<>]+(?:<[^<>]*>)?),[^>]*(?:>[^>]*)*>$", r"<\1, …>", name)


# frames of the C library and of ggml's abort, which every assertion ends in: the cause is the frame below them
_ABORTING = re.compile(r"^(?:__\w+|raise|abort|ggml_abort|ggml_print_backtrace\w*|\?\?)$")


def innermost_frame(gdb_output: str) -> tuple[str, str | None] | None:
    """(function, library file name) of gdb's innermost frame that is not the C library's or ggml's abort; None where
    gdb printed no backtrace."""
    for found in _FRAME.finditer(gdb_output):
        function, library = short_function(found["frame"].strip()), found["library"]
        if not _ABORTING.match(function) and not (library or "").rsplit("/", 1)[-1].startswith("libc.so"):
            return function, library.rsplit("/", 1)[-1] if library else None
    return None


def weight_buffers(verbose_output: str) -> tuple[str, ...]:
    """The buffer types a verbose (`-v`) run loaded weights into, in order: CPU_Mapped, CPU_REPACK, AMX, CUDA0 …"""
    return tuple(dict.fromkeys(m["name"] for m in _BUFFER.finditer(verbose_output)))


def assertion(output: str) -> str | None:
    """ggml's own words as it aborted (the GGML_ASSERT that failed), without the source path's folders."""
    found = next((m["message"] for m in _ASSERT.finditer(output) if "GGML_ASSERT(" in m["message"]), None)
    return found.rsplit("/", 1)[-1] if found else None


def weight_types(verbose_output: str) -> tuple[str, ...]:
    """The model's weight types as a verbose run's loader lists them, F32 (norms, biases) left out: Q8_0, Q4_K …"""
    kinds = (m["kind"].upper() for m in _TYPE.finditer(verbose_output))
    return tuple(dict.fromkeys(kind for kind in kinds if kind != "F32"))


@dataclass(frozen=True)
class Crash:
    """What ended a run of llama.cpp, found out by running it again in the ways that tell."""

    signal: str | None  # SIGSEGV, SIGILL …; None: it exited with an error code
    returncode: int
    device: str  # the device it ran on: "CPU" for `-dev none`, else the name
    kinds: tuple[str, ...] = ()  # the weight types that fail alone (the proof's models), or the model's own
    function: str | None = None  # gdb's innermost frame
    library: str | None = None
    buffers: tuple[str, ...] = ()  # where its weights were loaded (a verbose run's load log)
    without_extra: bool | None = None  # ran with the extra buffer types off (llama-bench --repack 0); None: not tried
    assertion: str | None = None  # ggml's GGML_ASSERT that failed, where it aborted
    backtrace: str = ""  # why there is no function, where there is none
    fault: str | None = None  # a known fault's name (backends' `runtime_faults`)
    explained: str = ""  # the known fault's cause, its upstream references and its fix

    def line(self) -> str:
        """One line: `SIGILL on CPU with Q8_0, Q4_0 in tinygemm_kernel_amx<block_q8_0, …> (libggml-cpu.so.0)`."""
        what = self.signal or f"exit {self.returncode}"
        kinds = f" with {', '.join(self.kinds)}" if self.kinds else ""
        where = f" in {self.function}" + (f" ({self.library})" if self.library else "") if self.function else ""
        said = f": {self.assertion}" if self.assertion else ""
        return f"{what} on {self.device}{kinds}{where}{said}"

    def findings(self) -> str:
        """What else the post-mortem found: the buffers, the run without extra buffer types, why no backtrace."""
        found = []
        if self.buffers:
            found.append(f"weights in {', '.join(self.buffers)}")
        if self.without_extra is not None:
            found.append(f"--repack 0 {'runs' if self.without_extra else 'fails too'}")
        if self.function is None and self.backtrace:
            found.append(f"no backtrace: {self.backtrace}")
        return "; ".join(found)

    def known(self) -> str | None:
        """The known fault, its cause and what to do; None where it matches none."""
        return f"{self.fault}: {self.explained}" if self.fault else None

    def notes(self) -> tuple[str, ...]:
        """What the post-mortem found, then the known fault: the lines said under the crash's own."""
        return tuple(note for note in (self.findings(), self.known()) if note)
