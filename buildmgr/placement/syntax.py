"""Reading and writing placement flags: llama-cli/-server/-completion's syntax (and their LLAMA_ARG_* twins) and
llama-bench's, each described once by a `Syntax`, so that what is read can be written back in either."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildmgr.core.errors import UserError
from buildmgr.core.findings import Finding, Severity
from buildmgr.placement import rules

SPLIT_MODES = ("none", "layer", "row", "tensor")


@dataclass(frozen=True)
class Syntax:
    """How one tool separates list entries in its placement flags."""

    devices: str  # joins the devices of one placement
    tensor_split: str  # separators read between -ts entries; the first is written
    overrides: str  # joins -ot entries
    tests: str = ""  # separates whole placements (llama-bench runs each as its own test); "" none


COMMON = Syntax(devices=",", tensor_split=",/", overrides=",")
BENCH = Syntax(devices="/", tensor_split="/;", overrides=";", tests=",")


@dataclass(frozen=True)
class Option:
    key: str
    flags: tuple[str, ...]
    env: str
    takes_value: bool = True


# common/arg.cpp at the pin: the placement options of llama-cli, llama-server, llama-completion …
OPTIONS = (
    Option("devices", ("-dev", "--device"), "LLAMA_ARG_DEVICE"),
    Option("split_mode", ("-sm", "--split-mode"), "LLAMA_ARG_SPLIT_MODE"),
    Option("main_gpu", ("-mg", "--main-gpu"), "LLAMA_ARG_MAIN_GPU"),
    Option("tensor_split", ("-ts", "--tensor-split"), "LLAMA_ARG_TENSOR_SPLIT"),
    Option("overrides", ("-ot", "--override-tensor"), "LLAMA_ARG_OVERRIDE_TENSOR"),
    Option("gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers"), "LLAMA_ARG_N_GPU_LAYERS"),
    Option("n_cpu_moe", ("-ncmoe", "--n-cpu-moe"), "LLAMA_ARG_N_CPU_MOE"),
    Option("cpu_moe", ("-cmoe", "--cpu-moe"), "LLAMA_ARG_CPU_MOE", takes_value=False),
    Option("flash_attn", ("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN"),
    Option("model", ("-m", "--model"), "LLAMA_ARG_MODEL"),
    Option("servers", ("--rpc",), "LLAMA_ARG_RPC"),  # other hosts' servers: their devices join as RPC0, RPC1 …
)
# common/arg.cpp at the pin (is_truthy, is_falsey, is_autoy): -fa's spellings, as llama.cpp resolves them
FLASH_ATTN = {"on": "on", "enabled": "on", "true": "on", "1": "on", "off": "off", "disabled": "off", "false": "off"}
FLASH_ATTN |= {"0": "off", "auto": "auto", "-1": "auto"}
BY_FLAG = {flag: option for option in OPTIONS for flag in option.flags}


@dataclass(frozen=True)
class Placement:
    """One placement, as llama.cpp resolves it; `devices` None means -dev was not given (llama.cpp chooses)."""

    devices: tuple[str, ...] | None = None
    split_mode: str = "layer"
    main_gpu: int = 0
    tensor_split: tuple[float, ...] = ()
    overrides: tuple[tuple[str, str], ...] = ()  # (tensor name pattern, buffer type)
    gpu_layers: str | None = None
    n_cpu_moe: int | None = None
    cpu_moe: bool = False
    flash_attn: str = "auto"  # on | off | auto: llama.cpp's default uses it where the layer's device can
    model: str | None = None
    servers: tuple[str, ...] = ()  # --rpc HOST:PORT,…: the servers whose devices the placement may name
    # -dev names read before any --rpc: llama.cpp looks a name up as it reads it, so a server's device is not one yet
    named_early: tuple[str, ...] = ()
    spelled: dict[str, str] = field(default_factory=dict)  # key → how the user wrote it, for messages

    def flag(self, key: str) -> str:
        return self.spelled.get(key, next(o.flags[0] for o in OPTIONS if o.key == key))

    def to_json(self) -> dict[str, object]:
        return {
            "devices": list(self.devices) if self.devices is not None else None,
            "split_mode": self.split_mode,
            "main_gpu": self.main_gpu,
            "tensor_split": list(self.tensor_split),
            "overrides": [list(o) for o in self.overrides],
            "gpu_layers": self.gpu_layers,
            "cpu_moe": self.cpu_moe,
            "n_cpu_moe": self.n_cpu_moe,
            "flash_attn": self.flash_attn,
            "model": self.model,
            "servers": list(self.servers),
        }


# --- reading the flags ------------------------------------------------------------------------------------------


def _number_list(text: str, flag: str, separators: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in re.split(f"[{separators}]+", text) if part)
    except ValueError:
        raise UserError(f"{flag} {text!r}: every entry must be a number, e.g. {flag} 3,1") from None


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UserError(f"{flag} {text!r} must be a whole number") from None


def _overrides(text: str, flag: str, separator: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in text.split(separator):
        pattern, sep, target = item.partition("=")
        if not sep:
            raise UserError(
                f"{flag} {item!r} needs PATTERN=BUFFER_TYPE (llama.cpp throws 'invalid value'), e.g. ffn=CPU"
            )
        try:
            re.compile(pattern)
        except re.error as err:
            raise UserError(
                f"{flag} pattern {pattern!r} is not a valid regular expression ({err}); llama.cpp would throw"
            ) from None
        pairs.append((pattern, target))
    return tuple(pairs)


def _apply(values: dict[str, Any], key: str, value: str, flag: str) -> None:
    if key == "devices":
        values[key] = () if value == "none" else tuple(value.split(COMMON.devices))
    elif key == "split_mode":
        if value not in SPLIT_MODES:
            raise UserError(f"{flag} {value!r}: one of {', '.join(SPLIT_MODES)}")
        values[key] = value
    elif key in ("main_gpu", "n_cpu_moe"):
        values[key] = _int(value, flag)
    elif key == "tensor_split":
        values[key] = _number_list(value, flag, COMMON.tensor_split)
    elif key == "overrides":
        values[key] = values.get(key, ()) + _overrides(value, flag, COMMON.overrides)  # env and command line both apply
    elif key == "cpu_moe":
        values[key] = True
    elif key == "servers":  # as given (llama.cpp strips nothing); each --rpc adds its servers after the others
        values[key] = values.get(key, ()) + tuple(value.split(","))
    elif key == "flash_attn":
        if value not in FLASH_ATTN:
            raise UserError(f"{flag} {value!r}: one of on, off, auto (llama.cpp fails on it)")
        values[key] = FLASH_ATTN[value]
    elif key == "gpu_layers":
        # common/arg.cpp at the pin: 'auto', 'all', else std::stoi (leading digits; anything else throws)
        if value not in ("auto", "all") and not re.match(r"\s*[+-]?\d", value):
            raise UserError(f"{flag} {value!r}: a number, 'auto' or 'all' (llama.cpp fails on it: stoi)")
        values[key] = value
    else:
        values[key] = value


def parse_common(args: list[str], environ: dict[str, str]) -> tuple[Placement, list[Finding]]:
    """The placement of llama-cli/-server/-completion ARGS: environment first, then the command line over it."""
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    findings: list[Finding] = []
    for option in OPTIONS:
        if option.env in environ and (option.takes_value or environ[option.env].lower() in ("1", "true", "on", "yes")):
            _apply(values, option.key, environ[option.env], option.env)
            spelled[option.key] = option.env
    # llama.cpp handles the variables in the order it defines the options (--rpc before -dev), then the command line
    early = list(values.get("devices", ())) if "servers" not in values else []
    index = 0
    while index < len(args):
        arg = args[index]
        name = arg.replace("_", "-") if arg.startswith("--") else arg
        head, eq, inline = name.partition("=")
        given = BY_FLAG.get(name) or (BY_FLAG.get(head) if eq else None)
        index += 1
        if given is None:
            continue
        option = given
        if eq and name not in BY_FLAG:
            findings.append(
                Finding(
                    Severity.ERROR,
                    arg,
                    "llama.cpp takes no '=' form (it stops with 'invalid argument')",
                    f"write {head} {inline}",
                    rules.NO_EQUALS_FORM,
                )
            )
            continue  # llama.cpp stops at it: its value places nothing (checked, it read as '--device=X X')
        if not option.takes_value:
            value = "1"
        elif index < len(args):
            value, index = args[index], index + 1
        else:
            raise UserError(f"{arg} needs a value")
        _apply(values, option.key, value, arg)
        spelled[option.key] = arg
        if option.key == "devices" and "servers" not in values:
            early += values["devices"]
    return Placement(**values, spelled=spelled, named_early=tuple(early) if "servers" in values else ()), findings


def parse_bench(args: list[str]) -> tuple[list[Placement], list[Finding]]:
    """llama-bench's own syntax: ',' separates tests, '/' joins devices (and -ts entries) within one test."""
    lists: dict[str, list[Any]] = {}
    findings = []
    servers: tuple[str, ...] = ()
    early: list[str] = []
    index = 0
    while index < len(args):
        arg, index = args[index], index + 1
        head, eq, inline = arg.partition("=")
        if eq and arg not in BY_FLAG and head in BY_FLAG:
            findings.append(
                Finding(
                    Severity.ERROR,
                    arg,
                    "llama-bench takes no '=' form (it stops with 'invalid parameter for argument')",
                    f"write {head} {inline}",
                    rules.NO_EQUALS_FORM,
                )
            )
            continue
        option = BY_FLAG.get("--rpc" if arg == "-rpc" else arg)
        if option is None or option.key in ("cpu_moe", "n_cpu_moe") or index >= len(args):
            continue
        value, index = args[index], index + 1
        if option.key == "servers":  # one list of servers for every test: its commas are not tests
            servers += _apply_one("servers", value, arg)
            continue
        combos = value.split(BENCH.tests)
        if option.key == "devices" and not servers:
            early += [name for combo in combos for name in combo.split(BENCH.devices) if name != "none"]
        if option.key == "devices":
            lists["devices"] = [() if c == "none" else tuple(c.split(BENCH.devices)) for c in combos]
            if len(combos) > 1 and all(BENCH.devices not in c and c != "none" for c in combos):
                findings.append(
                    Finding(
                        Severity.NOTE,
                        f"{arg} {value}",
                        f"llama-bench runs each of {', '.join(combos)} as its own test",
                        f"to use them together write {arg} {BENCH.devices.join(combos)}",
                        rules.BENCH_COMMA,
                    )
                )
        elif option.key == "split_mode":
            lists["split_mode"] = [_apply_one("split_mode", c, arg) for c in combos]
        elif option.key == "main_gpu":
            lists["main_gpu"] = [_int(c, arg) for c in combos]
        elif option.key == "tensor_split":
            lists["tensor_split"] = [_number_list(c, arg, BENCH.tensor_split) for c in combos]
        elif option.key == "overrides":
            lists["overrides"] = [_overrides(c, arg, BENCH.overrides) if c else () for c in combos]
        elif option.key == "gpu_layers":
            lists["gpu_layers"] = combos
        elif option.key == "flash_attn":
            lists["flash_attn"] = [_apply_one("flash_attn", c, arg) for c in combos]
        elif option.key == "model":
            lists["model"] = combos
    keys = list(lists)
    named_early = tuple(early) if servers else ()
    placements = [
        Placement(**dict(zip(keys, combo, strict=False)), servers=servers, named_early=named_early)
        for combo in itertools.product(*(lists[k] for k in keys))
    ]
    return placements or [Placement(servers=servers, named_early=named_early)], findings


def _apply_one(key: str, value: str, flag: str) -> Any:
    values: dict[str, Any] = {}
    _apply(values, key, value, flag)
    return values[key]


def parse(tool: str, args: list[str], environ: dict[str, str]) -> tuple[list[Placement], list[Finding]]:
    if Path(tool).name == "llama-bench":
        return parse_bench(args)
    placement, findings = parse_common(args, environ)
    return [placement], findings


# Options besides placement that shape the graph or move ops (llama-cli's spellings → llama-bench's): a coverage run
# of a command line takes them along. The switches take no value in llama-cli and 0/1 in llama-bench.
SHAPING = {"-ub": "-ub", "--ubatch-size": "-ub", "-b": "-b", "--batch-size": "-b", "-t": "-t", "--threads": "-t"}
SHAPING |= {"-ctk": "-ctk", "--cache-type-k": "-ctk", "-ctv": "-ctv", "--cache-type-v": "-ctv"}
SWITCHES = {"-nkvo": "-nkvo", "--no-kv-offload": "-nkvo", "-nopo": "-nopo", "--no-op-offload": "-nopo"}


def shaping_args(tool: str, args: list[str]) -> list[str]:
    """The SHAPING options and SWITCHES of ARGS in llama-bench's syntax (of a llama-bench list, its first value)."""
    bench = Path(tool).name == "llama-bench"
    words: list[str] = []
    index = 0
    while index < len(args):
        arg, index = args[index], index + 1
        name = arg.replace("_", "-") if arg.startswith("--") else arg
        if name in SWITCHES and not bench:
            words += [SWITCHES[name], "1"]
        elif (name in SHAPING or name in SWITCHES) and index < len(args):
            value, index = args[index], index + 1
            words += [SHAPING.get(name) or SWITCHES[name], value.split(BENCH.tests)[0] if bench else value]
    return words


# --- writing them ----------------------------------------------------------------------------------------------


def write(placement: Placement, syntax: Syntax, layers: bool = False) -> list[str]:
    """The placement as arguments in a tool's syntax (with `layers`, -ngl too where it is a number)."""
    # the servers first: llama.cpp adds their devices as it reads --rpc, and a -dev before it cannot name them
    words = ["--rpc", ",".join(placement.servers)] if placement.servers else []
    if placement.devices is not None:
        words += ["-dev", syntax.devices.join(placement.devices) or "none"]
    words += ["-sm", placement.split_mode, "-mg", str(placement.main_gpu)]
    if placement.tensor_split:
        words += ["-ts", syntax.tensor_split[0].join(f"{v:g}" for v in placement.tensor_split)]
    if placement.overrides:
        words += ["-ot", syntax.overrides.join(f"{p}={t}" for p, t in placement.overrides)]
    if layers and placement.gpu_layers is not None and placement.gpu_layers.lstrip("-").isdigit():
        words += ["-ngl", placement.gpu_layers]
    if placement.flash_attn != "auto":
        words += ["-fa", placement.flash_attn]
    return words


def describe(placement: Placement) -> str:
    """The placement in llama-cli's own syntax."""
    return " ".join(write(placement, COMMON))


def bench_args(placement: Placement) -> list[str]:
    """The same placement in llama-bench's syntax ('/' joins devices and -ts entries; ';' joins overrides)."""
    return write(placement, BENCH, layers=True)
