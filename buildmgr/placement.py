"""Stage 10: the placement flags of a llama.cpp command line, read as llama.cpp reads them and checked against
the devices a build really has here. Parsing and checking are pure; the verify run sits in `verify`.

Every rule below was observed on real runs (docs/real-runs.md) and carries the llama.cpp commit it was seen at;
a build of another commit gets the finding with that caveat, and `--verify` says when a run contradicts a rule.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from buildmgr import proc
from buildmgr.errors import UserError
from buildmgr.probe import Device

SPLIT_MODES = ("none", "layer", "row", "tensor")
PIN = "0c1e570"  # the llama.cpp commit the rules below were observed at
VERIFY_TIMEOUT_S = 120


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
    Option("model", ("-m", "--model"), "LLAMA_ARG_MODEL"),
)
_BY_FLAG = {flag: option for option in OPTIONS for flag in option.flags}


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
    model: str | None = None
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
            "model": self.model,
        }


@dataclass(frozen=True)
class Finding:
    severity: str  # error: llama.cpp will certainly fail; warning: risky; note: worth knowing
    flag: str
    message: str
    fix: str = ""
    rule: str = ""

    def line(self) -> str:
        return f"{self.severity}: {self.flag}: {self.message}" + (f"; {self.fix}" if self.fix else "")

    def to_json(self) -> dict[str, str]:
        return {
            "severity": self.severity,
            "flag": self.flag,
            "message": self.message,
            "fix": self.fix,
            "rule": self.rule,
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


def _overrides(text: str, flag: str, separator: str = ",") -> tuple[tuple[str, str], ...]:
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


def _apply(values: dict, key: str, value: str, flag: str) -> None:
    if key == "devices":
        values[key] = () if value == "none" else tuple(value.split(","))
    elif key == "split_mode":
        if value not in SPLIT_MODES:
            raise UserError(f"{flag} {value!r}: one of {', '.join(SPLIT_MODES)}")
        values[key] = value
    elif key in ("main_gpu", "n_cpu_moe"):
        values[key] = _int(value, flag)
    elif key == "tensor_split":
        values[key] = _number_list(value, flag, ",/")
    elif key == "overrides":
        values[key] = values.get(key, ()) + _overrides(value, flag)  # env and command line both apply
    elif key == "cpu_moe":
        values[key] = True
    else:
        values[key] = value


def parse_common(args: list[str], environ: dict[str, str]) -> tuple[Placement, list[Finding]]:
    """The placement of llama-cli/-server/-completion ARGS: environment first, then the command line over it."""
    values: dict = {}
    spelled: dict[str, str] = {}
    findings: list[Finding] = []
    for option in OPTIONS:
        if option.env in environ and (option.takes_value or environ[option.env].lower() in ("1", "true", "on", "yes")):
            _apply(values, option.key, environ[option.env], option.env)
            spelled[option.key] = option.env
    index = 0
    while index < len(args):
        arg = args[index]
        name = arg.replace("_", "-") if arg.startswith("--") else arg
        head, eq, inline = name.partition("=")
        option = _BY_FLAG.get(name) or (_BY_FLAG.get(head) if eq else None)
        index += 1
        if option is None:
            continue
        if eq and name not in _BY_FLAG:
            findings.append(
                Finding(
                    "error",
                    arg,
                    "llama.cpp takes no '=' form (it stops with 'invalid argument')",
                    f"write {head} {inline}",
                    "no-equals-form",
                )
            )
            value = inline
        elif not option.takes_value:
            value = "1"
        elif index < len(args):
            value, index = args[index], index + 1
        else:
            raise UserError(f"{arg} needs a value")
        _apply(values, option.key, value, arg)
        spelled[option.key] = arg
    return Placement(**values, spelled=spelled), findings


def parse_bench(args: list[str]) -> tuple[list[Placement], list[Finding]]:
    """llama-bench's own syntax: ',' separates tests, '/' joins devices (and -ts entries) within one test."""
    lists: dict[str, list] = {}
    findings = []
    index = 0
    while index < len(args):
        arg, index = args[index], index + 1
        option = _BY_FLAG.get(arg)
        if option is None or option.key in ("cpu_moe", "n_cpu_moe") or index >= len(args):
            continue
        value, index = args[index], index + 1
        combos = value.split(",")
        if option.key == "devices":
            lists["devices"] = [() if c == "none" else tuple(c.split("/")) for c in combos]
            if len(combos) > 1 and all("/" not in c and c != "none" for c in combos):
                findings.append(
                    Finding(
                        "note",
                        f"{arg} {value}",
                        f"llama-bench runs each of {', '.join(combos)} as its own test",
                        f"to use them together write {arg} {'/'.join(combos)}",
                        "bench-comma",
                    )
                )
        elif option.key == "split_mode":
            lists["split_mode"] = [_apply_one("split_mode", c, arg) for c in combos]
        elif option.key == "main_gpu":
            lists["main_gpu"] = [_int(c, arg) for c in combos]
        elif option.key == "tensor_split":
            lists["tensor_split"] = [_number_list(c, arg, ";/") for c in combos]
        elif option.key == "overrides":
            lists["overrides"] = [_overrides(c, arg, ";") if c else () for c in combos]
        elif option.key == "gpu_layers":
            lists["gpu_layers"] = combos
        elif option.key == "model":
            lists["model"] = combos
    keys = list(lists)
    placements = [Placement(**dict(zip(keys, combo))) for combo in itertools.product(*(lists[k] for k in keys))]
    return placements or [Placement()], findings


def _apply_one(key: str, value: str, flag: str):
    values: dict = {}
    _apply(values, key, value, flag)
    return values[key]


def parse(tool: str, args: list[str], environ: dict[str, str]) -> tuple[list[Placement], list[Finding]]:
    if Path(tool).name == "llama-bench":
        return parse_bench(args)
    placement, findings = parse_common(args, environ)
    return [placement], findings


# --- checking ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    """A failure of llama.cpp seen on a real run: how to recognise it, and where it was seen."""

    id: str
    signature: str  # a regular expression over the tool's output
    what: str
    observed: str


KNOWN_FAILURES = (
    Known("invalid-device", r"invalid device: \S+", "llama.cpp stops: invalid device", f"{PIN}, 2×H200"),
    Known(
        "override-outside-devices",
        r"pre-allocated tensor .* in a buffer \(\S+\) that cannot run the operation",
        "abort (ggml-backend.cpp: pre-allocated tensor in a buffer that cannot run the operation)",
        f"{PIN}, 2×H200",
    ),
    Known(
        "unknown-buffer-type",
        r"unknown buffer type|unrecognized buffer type",
        "llama.cpp stops: unknown buffer type",
        f"{PIN}, 2×H200",
    ),
    Known(
        "row-split-unsupported",
        r"does not support split buffers",
        "model load fails: the device does not support split buffers",
        f"{PIN}, 2×H200 (CUDA, Vulkan)",
    ),
    Known(
        "tensor-split-unsupported",
        r"unsupported mul_mat split states",
        "abort (ggml-backend-meta.cpp: unsupported mul_mat split states)",
        f"{PIN}, 2×H200 (any CUDA device; Vulkan-only sets ran)",
    ),
    Known(
        "main-gpu-out-of-range",
        r"invalid value for main_gpu",
        "model load fails: invalid value for main_gpu",
        f"{PIN}, 2×H200",
    ),
    Known("load-failed", r"failed to load model", "model load failed", PIN),
)
_KNOWN = {k.id: k for k in KNOWN_FAILURES}
ROW_SPLIT_UNSUPPORTED = {"CUDA", "Vulkan"}  # no split buffer type at the pin
TENSOR_SPLIT_ABORTS = {"CUDA"}  # any CUDA device in a -sm tensor set aborted at the pin


@dataclass(frozen=True)
class Here:
    """What the check needs to know about the build on this host, under the current environment."""

    devices: tuple[Device, ...]  # registry order, CPU-type devices left out
    default: dict[str, str]  # name → llama.cpp's default verdict (identity.default_selection)
    commit: str
    moved: dict[str, str] = field(default_factory=dict)  # name → the card it meant at the last stored probe
    free_mib: dict[str, int | None] = field(default_factory=dict)
    host_free_mib: int | None = None


def _at_pin(commit: str) -> bool:
    return bool(commit) and commit.startswith(PIN)


def _error(flag: str, rule: str, message: str, fix: str, commit: str) -> Finding:
    known = _KNOWN[rule]
    caveat = (
        "" if _at_pin(commit) else f" (seen at {PIN}; this build is {commit[:7] or 'of an unknown commit'}: --verify)"
    )
    return Finding("error", flag, f"{message} → {known.what}{caveat}", fix, rule)


def model_devices(placement: Placement, here: Here) -> tuple[list[str], list[Finding]]:
    """The devices the model gets, as llama_prepare_model_devices picks them; with the findings on -dev and -mg."""
    names = {d.name.lower(): d.name for d in here.devices}
    findings = []
    if placement.devices is None:
        if placement.split_mode == "tensor":
            chosen = [d.name for d in here.devices if d.type != "accel"]
        else:
            chosen = [n for n, verdict in here.default.items() if verdict.startswith("used")]
    else:
        chosen = []
        for name in placement.devices:
            real = names.get(name.lower())
            if real is None:
                findings.append(
                    _error(
                        f"{placement.flag('devices')} {name}",
                        "invalid-device",
                        f"{name} is not a device of this build here",
                        "valid names here: " + (", ".join(d.name for d in here.devices) or "none (use -dev none)"),
                        here.commit,
                    )
                )
            else:
                chosen.append(real)
    if placement.split_mode == "none" and chosen:
        if not 0 <= placement.main_gpu < len(chosen):
            findings.append(
                _error(
                    f"{placement.flag('main_gpu')} {placement.main_gpu}",
                    "main-gpu-out-of-range",
                    f"with -sm none the main GPU indexes the model's {len(chosen)} device(s): {', '.join(chosen)}",
                    f"use -mg 0…{len(chosen) - 1}",
                    here.commit,
                )
            )
            return [], findings
        chosen = [chosen[placement.main_gpu]]
    elif placement.main_gpu and not 0 <= placement.main_gpu < max(len(chosen), 1):
        findings.append(
            Finding(
                "warning",
                f"{placement.flag('main_gpu')} {placement.main_gpu}",
                f"out of range for {len(chosen)} device(s); llama.cpp checks it only with -sm none",
            )
        )
    return chosen, findings


def check(placement: Placement, here: Here) -> list[Finding]:
    by_name = {d.name: d for d in here.devices}
    by_lower = {d.name.lower(): d for d in here.devices}
    chosen, findings = model_devices(placement, here)
    given = [by_lower[n.lower()] for n in (placement.devices or ()) if n.lower() in by_lower]
    for name, before in here.moved.items():
        if name in {d.name for d in given}:
            findings.append(
                Finding(
                    "warning",
                    f"{placement.flag('devices')} {name}",
                    f"{name} is {by_name[name].physical_id} under the current environment, but was {before} at the last "
                    "stored probe",
                    "check that this is the card you mean ('buildmgr devices --refresh')",
                )
            )
    seen: dict[str, str] = {}
    for device in given:
        if seen.get(device.physical_id) == device.name:
            findings.append(
                Finding("warning", f"{placement.flag('devices')} {device.name}", "listed twice", "name it once")
            )
        elif device.physical_id in seen:
            findings.append(
                Finding(
                    "warning",
                    f"{placement.flag('devices')} {seen[device.physical_id]},{device.name}",
                    f"one physical card under two names ({device.physical_id}): its memory is counted twice and the two "
                    "halves compete for it",
                    f"keep one of {seen[device.physical_id]} and {device.name}",
                    "one-card-twice",
                )
            )
        else:
            seen[device.physical_id] = device.name
    findings += _check_overrides(placement, here, chosen)
    findings += _check_split(placement, here, chosen, by_name)
    return findings


def _check_overrides(placement: Placement, here: Here, chosen: list[str]) -> list[Finding]:
    findings = []
    buffer_types = [d.name for d in here.devices] + ["CPU"]
    for pattern, target in placement.overrides:
        flag = f"{placement.flag('overrides')} {pattern}={target}"
        if target not in buffer_types:
            findings.append(
                _error(
                    flag,
                    "unknown-buffer-type",
                    f"{target} is not a buffer type here",
                    f"valid: {', '.join(buffer_types)}",
                    here.commit,
                )
            )
        elif target != "CPU" and target not in chosen:
            why = (
                f"with -sm none only the main device ({chosen[0]}) holds the model"
                if placement.split_mode == "none" and chosen
                else f"{target} is not one of the model's devices ({', '.join(chosen) or 'none'})"
            )
            fix = f"override onto {' or '.join([*chosen[:1], 'CPU'])}" + (
                "" if placement.split_mode != "none" else f", or use -sm layer with {target} in -dev"
            )
            findings.append(_error(flag, "override-outside-devices", why, fix, here.commit))
    return findings


def _check_split(placement: Placement, here: Here, chosen: list[str], by_name: dict[str, Device]) -> list[Finding]:
    findings = []
    backends = {by_name[n].backend for n in chosen if n in by_name}
    flag = f"{placement.flag('split_mode')} {placement.split_mode}"
    if placement.split_mode == "row" and backends & ROW_SPLIT_UNSUPPORTED:
        findings.append(
            _error(
                flag,
                "row-split-unsupported",
                f"{'/'.join(sorted(backends & ROW_SPLIT_UNSUPPORTED))} has no row split here",
                "use -sm layer",
                here.commit,
            )
        )
    if placement.split_mode == "tensor":
        if backends & TENSOR_SPLIT_ABORTS:
            findings.append(
                _error(
                    flag,
                    "tensor-split-unsupported",
                    f"a CUDA device is in the tensor-parallel set ({', '.join(chosen)})",
                    "use -sm layer, or -sm tensor over Vulkan devices only",
                    here.commit,
                )
            )
        elif not backends <= {"Vulkan"}:
            findings.append(
                Finding(
                    "warning",
                    flag,
                    f"-sm tensor over {'/'.join(sorted(backends))} was never observed; only Vulkan-only sets ran",
                    "--verify",
                )
            )
    if placement.split_mode == "layer" and len(backends) > 1 and not _at_pin(here.commit):
        findings.append(
            Finding(
                "note",
                flag,
                f"-sm layer across {' and '.join(sorted(backends))} ran at {PIN}; older llama.cpp failed on it, and this "
                f"build is {here.commit[:7] or 'of an unknown commit'}",
                "--verify",
                "cross-backend-layer",
            )
        )
    if placement.tensor_split and chosen and len(placement.tensor_split) != len(chosen):
        extra = len(placement.tensor_split) > len(chosen)
        findings.append(
            Finding(
                "warning",
                f"{placement.flag('tensor_split')} {','.join(f'{v:g}' for v in placement.tensor_split)}",
                f"{len(placement.tensor_split)} entries for {len(chosen)} device(s): "
                + ("the extra ones are ignored" if extra else "devices without an entry get no layers"),
                f"give one entry per device ({', '.join(chosen)})",
            )
        )
    return findings


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


# --- memory from the model's header ------------------------------------------------------------------------------


# common/common.h at the pin: --cpu-moe and -ncmoe N keep these expert tensors on the CPU.
FFN_EXPS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def _cpu_overrides(placement: Placement) -> tuple[tuple[str, str], ...]:
    """-ot as given, then what --cpu-moe / -ncmoe N add (llama.cpp appends them the same way)."""
    extra = [(FFN_EXPS, "CPU")] if placement.cpu_moe else []
    extra += [(rf"blk\.{i}{FFN_EXPS}", "CPU") for i in range(placement.n_cpu_moe or 0)]
    return placement.overrides + tuple(extra)


def weights_per_device(placement: Placement, model: Path, here: Here, chosen: list[str]) -> dict[str, int]:
    """Bytes of weights each device would hold: the last -ngl layers (all by default) split over the devices by -ts
    (else by free memory), the others on the CPU, and -ot / --cpu-moe / -ncmoe matches moved."""
    try:
        from gguf import GGUFReader

        tensors = [(t.name, int(t.n_bytes)) for t in GGUFReader(str(model)).tensors]
    except (OSError, ValueError, KeyError) as err:
        raise UserError(f"{model} is not a GGUF model ({err})") from None
    layers = sorted({int(m.group(1)) for name, _ in tensors if (m := re.match(r"blk\.(\d+)\.", name))})
    offloaded = layers
    if placement.gpu_layers is not None and placement.gpu_layers.isdigit():
        offloaded = layers[len(layers) - min(int(placement.gpu_layers), len(layers)) :]
    shares = list(placement.tensor_split[: len(chosen)]) or [float(here.free_mib.get(n) or 1) for n in chosen]
    shares += [0.0] * (len(chosen) - len(shares))
    total_share = sum(shares) or 1.0
    bounds = list(itertools.accumulate(s / total_share * len(offloaded) for s in shares))
    owner = {
        layer: next((chosen[i] for i, bound in enumerate(bounds) if position < round(bound)), chosen[-1])
        for position, layer in enumerate(offloaded)
        if chosen
    }
    overrides = _cpu_overrides(placement)
    placed: dict[str, int] = {}
    for name, size in tensors:
        layer = re.match(r"blk\.(\d+)\.", name)
        where = next((t for pattern, t in overrides if re.search(pattern, name)), None) or (
            owner.get(int(layer.group(1)), "CPU")
            if layer
            else chosen[-1]
            if chosen and name.startswith("output") and len(offloaded) == len(layers)
            else "CPU"
        )
        placed[where] = placed.get(where, 0) + size
    return placed


def memory_findings(placed: dict[str, int], here: Here) -> list[Finding]:
    findings = []
    by_name = {d.name: d for d in here.devices}
    for name, size in placed.items():
        device = by_name.get(name)
        igpu = device is not None and device.type == "igpu"
        free = here.host_free_mib if name == "CPU" or igpu else here.free_mib.get(name)
        if free is not None and size / (1 << 20) > free:
            findings.append(
                Finding(
                    "warning",
                    name,
                    f"about {size / (1 << 20):.0f} MiB of weights against {free} MiB free"
                    + (" (an iGPU's memory is the host's)" if igpu else ""),
                    "offload fewer layers (-ngl), move tensors to the CPU (-ot …=CPU), or spread over more devices",
                )
            )
    return findings


# --- the verify run ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    result: str  # ran | known | unknown
    exit_code: int | None
    failure: str = ""  # the Known id
    tail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"result": self.result, "exit_code": self.exit_code, "failure": self.failure, "tail": list(self.tail)}


def describe(placement: Placement) -> str:
    """The placement in llama-cli's own syntax."""
    words = ["-dev", ",".join(placement.devices) or "none"] if placement.devices is not None else []
    words += ["-sm", placement.split_mode, "-mg", str(placement.main_gpu)]
    if placement.tensor_split:
        words += ["-ts", ",".join(f"{v:g}" for v in placement.tensor_split)]
    if placement.overrides:
        words += ["-ot", ",".join(f"{p}={t}" for p, t in placement.overrides)]
    return " ".join(words)


def bench_args(placement: Placement) -> list[str]:
    """The same placement in llama-bench's syntax ('/' joins devices and -ts entries; ';' joins overrides)."""
    args = []
    if placement.devices is not None:
        args += ["-dev", "/".join(placement.devices) or "none"]
    args += ["-sm", placement.split_mode, "-mg", str(placement.main_gpu)]
    if placement.tensor_split:
        args += ["-ts", "/".join(f"{v:g}" for v in placement.tensor_split)]
    if placement.overrides:
        args += ["-ot", ";".join(f"{p}={t}" for p, t in placement.overrides)]
    if placement.gpu_layers is not None and placement.gpu_layers.lstrip("-").isdigit():
        args += ["-ngl", placement.gpu_layers]
    return args


def classify(code: int | None, output: str) -> Outcome:
    tail = tuple(output.strip().splitlines()[-6:])
    if code == 0:
        return Outcome("ran", code)
    for known in KNOWN_FAILURES:
        if re.search(known.signature, output):
            return Outcome("known", code, known.id, tail)
    return Outcome("unknown", code, "", tail)


def verify(bench: Path, model: Path, placement: Placement, environ: dict[str, str], user_model: bool) -> Outcome:
    """Run llama-bench with the placement in a child, with a timeout; tiny runs (-p 1 -n 1 on a user's model)."""
    size = ["-p", "1", "-n", "1"] if user_model else ["-p", "16", "-n", "4"]
    command = [str(bench), "-m", str(model), *size, "-r", "1", "-v", *bench_args(placement)]
    ran = proc.run(command, env=environ, timeout=VERIFY_TIMEOUT_S)
    if ran.timed_out:
        return Outcome("unknown", None, "", (ran.stderr,))
    return classify(ran.returncode, ran.output)


def agreement(findings: list[Finding], outcome: Outcome) -> str:
    """Did the run do what the rules predicted?"""
    predicted = [f for f in findings if f.severity == "error"]
    if not predicted:
        return (
            "as predicted: ran"
            if outcome.result == "ran"
            else f"not predicted: it failed ({outcome.failure or 'unknown failure'})"
        )
    if outcome.result == "ran":
        return "contradicted: " + ", ".join(sorted({f.rule for f in predicted})) + " predicted a failure, but it ran"
    if outcome.failure in {f.rule for f in predicted}:
        return f"as predicted: {outcome.failure}"
    return f"failed as predicted, but as {outcome.failure or 'an unknown failure'} (predicted {', '.join(sorted({f.rule for f in predicted}))})"


def suggest(devices: list[Device], default: dict[str, str], prefer: str) -> tuple[list[str], list[int]]:
    """One name per physical card (llama.cpp's own choice of name first), discrete cards first; -ts by free memory."""
    roles = {"dgpu": ("gpu",), "igpu": ("igpu",), "all": ("gpu", "igpu", "unknown")}[prefer]
    ranked = sorted(devices, key=lambda d: (not default.get(d.name, "").startswith("used"), devices.index(d)))
    chosen: dict[str, Device] = {}
    for device in ranked:
        if device.type in roles and device.physical_id not in chosen:
            chosen[device.physical_id] = device
    picked = sorted(chosen.values(), key=lambda d: (roles.index(d.type), devices.index(d)))
    free = [d.memory_free_mib or 0 for d in picked]
    unit = min((f for f in free if f), default=1)
    return [d.name for d in picked], [max(1, round(f / unit)) for f in free]


# --- the whole check of one command line: the edge that reads the inventory and runs the verify -------------------


def run_check(dirs, build, command: list[str], model: Path | None, run_verify: bool, environ: dict[str, str]) -> dict:
    """Parse TOOL ARGS… (TOOL checked by the caller), check every placement against the build's devices here, and
    with `run_verify` run it."""
    from buildmgr import inventory
    from buildmgr.config import ensure_writable
    from buildmgr.options import available_gib
    from buildmgr.smoke import tiny_model

    placements, findings = parse(command[0], command[1:], environ)
    user_model = model or next((Path(p.model) for p in placements if p.model), None)
    if user_model is not None and not user_model.is_file():
        raise UserError(f"model {user_model} does not exist")
    devices, default, moved, fresh = inventory.placement_view(dirs, build, environ)
    here = Here(
        tuple(devices),
        default,
        build.receipt.source.commit or "",
        moved,
        {d.name: d.memory_free_mib for d in devices},
        int(available_gib() * 1024),
    )
    tests = []
    for candidate in placements:
        found = check(candidate, here)
        if user_model is not None:
            chosen, _ = model_devices(candidate, here)
            found += memory_findings(weights_per_device(candidate, user_model, here, chosen), here)
        test = {
            "placement": candidate.to_json(),
            "flags": describe(candidate),
            "findings": [f.to_json() for f in found],
        }
        if run_verify:
            ensure_writable(dirs.cache, "set XDG_CACHE_HOME to a writable directory")
            model_file = user_model or tiny_model(dirs.cache)
            outcome = verify(build.tool("llama-bench"), model_file, candidate, environ, user_model is not None)
            test["verify"] = outcome.to_json() | {"agreement": agreement(found, outcome)}
        tests.append(test)
    errors = any(f["severity"] == "error" for t in tests for f in t["findings"])
    failed = any(t["verify"]["result"] != "ran" for t in tests if "verify" in t)
    command_line_errors = has_errors(findings)  # a verify run in llama-bench's syntax cannot show these
    return {
        "build": build.id,
        "tool": command[0],
        "probed_afresh": fresh,
        "notes": [f.to_json() for f in findings],
        "tests": tests,
        "exit_code": 1 if command_line_errors or (failed if run_verify else errors) else 0,
    }
