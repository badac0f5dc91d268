"""What `bench` is asked to measure, read once: each CONFIG (a build and the placement flags as a user types them for
llama-cli), from the command line or a TOML file, and the workload every CONFIG runs. Pure: nothing here runs."""

from __future__ import annotations

import dataclasses
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from buildmgr.core.errors import UserError
from buildmgr.core.fsutil import read_user_text
from buildmgr.placement.check import bench_words, cpu_overrides
from buildmgr.placement.syntax import BY_FLAG, Placement, parse_common

DEFAULT_DEPTHS = (0, 4096)
# Three processes per CONFIG: the process is the unit of repetition (samples inside one are not independent), and
# three is the fewest that give a ratio's interval finite width with a t-quantile under 5.
DEFAULT_RUNS = 3
# Six timed repetitions per process: the first is kept apart (it still pays warm-up inside the process: pp512 on an
# H200 read half of steady state, issue #31), the other five are llama-bench's own default of -r 5.
DEFAULT_REPETITIONS = 6
# One warm-up process per CONFIG before the timed ones (hyperfine's --warmup): a first process pays what later ones
# do not (Vulkan0 compiled its pipelines, 20.8 s against 3.6 s, issue #48); its t/s are kept apart, never pooled.
DEFAULT_WARMUP = 1
# llama-bench options that are not placement but change what is measured: passed through, one value per CONFIG.
PASSED_THROUGH = {
    flag: canonical
    for canonical, spellings in {
        "-t": ("-t", "--threads"),
        "-b": ("-b", "--batch-size"),
        "-ub": ("-ub", "--ubatch-size"),
        "-ctk": ("-ctk", "--cache-type-k"),
        "-ctv": ("-ctv", "--cache-type-v"),
        "-nkvo": ("-nkvo", "--no-kv-offload"),
        "-nopo": ("-nopo", "--no-op-offload"),
        "--no-host": ("--no-host",),
        "-lm": ("-lm", "--load-mode"),
        "--repack": ("--repack",),  # 0: the extra buffer types off (repack, AMX)
    }.items()
    for flag in spellings
}
EXAMPLE = "'cuda0=cuda+vulkan -dev CUDA0' (LABEL=BUILD FLAGS…; LABEL= is optional, -m MODEL may be one of the FLAGS)"


@dataclass(frozen=True)
class Workload:
    """What every CONFIG runs: prefill of n_prompt and decode of n_gen at each depth, and (pg) both in one context."""

    n_prompt: int = 512
    n_gen: int = 128
    depths: tuple[int, ...] = DEFAULT_DEPTHS
    pg: bool = True
    runs: int = DEFAULT_RUNS  # llama-bench processes per CONFIG, interleaved with the other CONFIGs'
    repetitions: int = DEFAULT_REPETITIONS  # llama-bench's -r in each: the first timed one kept apart
    warmup: int = DEFAULT_WARMUP  # untimed processes per CONFIG before the first timed one (round 0)

    def tests(self) -> list[tuple[int, int, int]]:
        """(n_prompt, n_gen, n_depth) of each test, in llama-bench's order: per depth, pp, then tg, then pp+tg."""
        shapes = [(self.n_prompt, 0), (0, self.n_gen)] + ([(self.n_prompt, self.n_gen)] if self.pg else [])
        return [(p, n, d) for d in self.depths for p, n in shapes if p or n]

    def args(self) -> list[str]:
        words = ["-p", str(self.n_prompt), "-n", str(self.n_gen), "-d", ",".join(map(str, self.depths))]
        words += ["-r", str(self.repetitions)]
        return words + (["-pg", f"{self.n_prompt},{self.n_gen}"] if self.pg else [])


DEFAULT_WORKLOAD = Workload()


@dataclass(frozen=True)
class BenchConfig:
    label: str
    build: str  # as the user named it: a build id or a recipe (store.find resolves it)
    placement: Placement
    extra: tuple[str, ...] = ()  # PASSED_THROUGH options, canonical spelling, with their values

    def model(self, default: Path | None) -> Path:
        """The CONFIG's own -m, else the call's."""
        if self.placement.model:
            return Path(self.placement.model)
        if default is None:
            raise UserError(f"CONFIG {self.label!r} has no model: give bench -m MODEL.gguf, or -m in the CONFIG")
        return default

    @property
    def cpu_overrides(self) -> bool:
        """Weights the placement keeps on the CPU by override (-ot …=CPU, --cpu-moe, -ncmoe)."""
        return any(target.upper() == "CPU" for _, target in cpu_overrides(self.placement))

    def bench_args(self) -> list[str]:
        """The placement and the passed-through options in llama-bench's syntax (--cpu-moe, which llama-bench lacks,
        as the override llama.cpp makes of it)."""
        return bench_words(self.placement) + list(self.extra)

    def flags(self) -> str:
        return shlex.join(self.bench_args())


def parse_config(text: str) -> BenchConfig:
    """`[LABEL=]BUILD [FLAGS…]`: the placement flags llama-cli takes (-dev CUDA0,Vulkan1 -sm layer -ot …, and -m for
    a model of its own) and the llama-bench options in PASSED_THROUGH; anything else is refused, so a typo never
    runs as the default."""
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise UserError(f"CONFIG {text!r}: {err}; e.g. {EXAMPLE}") from None
    if not words:
        raise UserError(f"an empty CONFIG; e.g. {EXAMPLE}")
    head, *rest = words
    label, eq, build = head.partition("=")
    if not eq:
        label, build = text.strip(), head
    if not build or not label or build.startswith("-"):
        raise UserError(f"CONFIG {text!r} must start with a build; e.g. {EXAMPLE}")
    return from_words(label, build, rest, text)


def from_words(label: str, build: str, words: list[str], text: str) -> BenchConfig:
    placement_words: list[str] = []
    extra: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        name = word.replace("_", "-") if word.startswith("--") else word
        head, eq, value = name.partition("=")
        if eq and (head in BY_FLAG or head in PASSED_THROUGH):
            raise UserError(f"CONFIG {text!r}: llama.cpp takes no '=' form; write {head} {value}")
        option = BY_FLAG.get(name)
        if option is None and name not in PASSED_THROUGH:
            raise UserError(
                f"CONFIG {text!r}: {word} is not a placement flag or one of {', '.join(sorted(set(PASSED_THROUGH.values())))}"
            )
        takes_value = option is None or option.takes_value
        if takes_value and index + 1 >= len(words):
            raise UserError(f"CONFIG {text!r}: {word} needs a value")
        value = words[index + 1] if takes_value else ""
        if option is None:
            if "," in value:
                raise UserError(f"CONFIG {text!r}: {word} {value}: one value per CONFIG (write one CONFIG per value)")
            extra += [PASSED_THROUGH[name], value]
        else:
            placement_words += [word, value] if takes_value else [word]
        index += 2 if takes_value else 1
    placement, findings = parse_common(placement_words, {})
    if findings:
        raise UserError(f"CONFIG {text!r}: {findings[0].message}; {findings[0].fix}")
    return BenchConfig(label, build, placement, tuple(extra))


def read_toml(path: Path) -> list[BenchConfig]:
    """`[[config]]` tables, each `build = "…"`, optional `label = "…"` and `flags = "-dev CUDA0 …"` (or a list)."""
    try:
        data = tomllib.loads(read_user_text(path))
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path} is not valid TOML: {err}") from None
    tables = data.get("config")
    if not isinstance(tables, list) or not tables:
        raise UserError(f'{path}: no [[config]] tables; each needs build = "…" and may have label and flags')
    configs = []
    for number, table in enumerate(tables, 1):
        build, flags = table.get("build"), table.get("flags", [])
        if not isinstance(build, str) or not build:
            raise UserError(f'{path}: [[config]] number {number} has no build = "…"')
        if not isinstance(flags, (str, list)) or (
            isinstance(flags, list) and not all(isinstance(f, str) for f in flags)
        ):
            raise UserError(f"{path}: [[config]] number {number}: flags must be a string or a list of strings")
        words = shlex.split(flags) if isinstance(flags, str) else list(flags)
        label = table.get("label") or " ".join([build, *words])
        configs.append(from_words(str(label), build, words, f"{path}: config {number}"))
    return configs


def unique_labels(configs: list[BenchConfig]) -> None:
    seen: set[str] = set()
    for config in configs:
        if config.label in seen:
            raise UserError(f"two CONFIGs are labelled {config.label!r}: give one a LABEL= of its own")
        seen.add(config.label)


def parse_depths(text: str) -> tuple[int, ...]:
    try:
        depths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--depth {text!r}: whole numbers separated by commas, e.g. --depth 0,4096") from None
    if any(d < 0 for d in depths) or len(set(depths)) != len(depths):
        raise UserError(f"--depth {text!r}: distinct depths of 0 or more, e.g. --depth 0,4096")
    return tuple(sorted(depths))


def fit_depths(
    depths: tuple[int, ...], asked: bool, workload: Workload, n_ctx: int | None
) -> tuple[tuple[int, ...], list[str]]:
    """The depths that fit the model's context with the test on top; the default ones that do not are dropped with a
    note, and asked ones are refused."""
    if n_ctx is None:
        return depths, ["the model states no context length: depths are not checked against it"]
    need = workload.n_prompt + workload.n_gen
    beyond = [d for d in depths if d + need > n_ctx]
    if beyond and asked:
        raise UserError(
            f"--depth {beyond[0]}: with -p {workload.n_prompt} -n {workload.n_gen} on top it passes the model's "
            f"context of {n_ctx}; use depths up to {max(n_ctx - need, 0)}"
        )
    kept = tuple(d for d in depths if d + need <= n_ctx)
    if not kept:
        fits = f"-p {min(workload.n_prompt, n_ctx // 2)} -n {min(workload.n_gen, n_ctx // 4)}"
        raise UserError(
            f"-p {workload.n_prompt} -n {workload.n_gen} do not fit the model's context of {n_ctx}; try {fits} "
            "(with --depth 0)"
        )
    notes = [f"depth {d} left out: the model's context is {n_ctx}" for d in beyond]
    return kept, notes


@dataclass(frozen=True)
class BenchRequest:
    """A bench call resolved: its CONFIGs, the workload and how to run it (the defaults here are the only ones)."""

    model: Path | None  # the call's -m; a CONFIG's own -m wins
    configs: tuple[BenchConfig, ...]
    workload: Workload
    interval: float = 0.1  # seconds between engine samples
    timeout: float = 1800.0  # seconds one run may take
    allow_busy: bool = False
    allow_pinned: bool = False
    remeasure: bool = False  # the CPU's bandwidth measured again, not taken from what is kept
    # the cards' energy counters read alone around their updates (sampling.CounterClock), so a stretch's energy is
    # timed by them: only where energy decides (tune by energy), for each read costs the CPU llama.cpp may compute on
    # (an H100: a third of a core at 100 reads a second, docs/real-runs.md 2026-12-06)
    timed_energy: bool = False
    network_timeout: float = 30.0  # seconds a server a CONFIG's --rpc names may take to take a connection


DEFAULT_REQUEST = BenchRequest(None, (), DEFAULT_WORKLOAD)


@dataclass(frozen=True)
class Asked:
    """What the command line asked, as given (None: the default), before any file is read."""

    configs: tuple[str, ...] = ()
    config_file: Path | None = None
    model: Path | None = None
    depth: str | None = None
    n_prompt: int | None = None
    n_gen: int | None = None
    pg: bool = True
    runs: int | None = None
    repetitions: int | None = None
    warmup: int | None = None
    interval: float | None = None
    timeout: float | None = None
    allow_busy: bool = False
    allow_pinned: bool = False
    remeasure: bool = False


def _at_least(value: float, flag: str, minimum: float, why: str = "") -> None:
    if value < minimum:
        raise UserError(f"{flag} {value:g}: at least {minimum:g}{why}")


def resolve(
    asked: Asked,
    configs: list[BenchConfig],
    context_of: Callable[[Path], int | None],
    before_models: Callable[[], None] = lambda: None,
) -> tuple[BenchRequest, list[str]]:
    """The request, and notes on what was adjusted (depths that do not fit the smallest trained context of the
    models, which `context_of` reads from a model's header). `configs` are the CONFIGs of the command line and of
    its file, read; `before_models` runs once the command line is checked, before any model is read (the plot's
    destination is checked there)."""
    if not configs:
        raise UserError(f"name at least one CONFIG, e.g. {EXAMPLE}, or --config-file FILE.toml")
    unique_labels(configs)
    defaults = DEFAULT_REQUEST
    n_prompt = asked.n_prompt if asked.n_prompt is not None else defaults.workload.n_prompt
    n_gen = asked.n_gen if asked.n_gen is not None else defaults.workload.n_gen
    runs = asked.runs if asked.runs is not None else defaults.workload.runs
    repetitions = asked.repetitions if asked.repetitions is not None else defaults.workload.repetitions
    warmup = asked.warmup if asked.warmup is not None else defaults.workload.warmup
    interval = asked.interval if asked.interval is not None else defaults.interval
    timeout = asked.timeout if asked.timeout is not None else defaults.timeout
    for value, flag, minimum in ((runs, "--runs", 1), (n_prompt, "-p", 1), (n_gen, "-n", 1)):
        _at_least(value, flag, minimum)
    _at_least(repetitions, "-r", 2, " (the first timed repetition of each process is kept apart from steady state)")
    _at_least(warmup, "--warmup", 0)
    _at_least(interval, "--interval", 0.01)
    _at_least(timeout, "--timeout", 1)
    depths = parse_depths(asked.depth) if asked.depth is not None else defaults.workload.depths
    before_models()
    contexts = [context_of(model) for model in dict.fromkeys(c.model(asked.model) for c in configs)]
    n_ctx = min((c for c in contexts if c is not None), default=None)
    workload = Workload(n_prompt, n_gen, pg=asked.pg, runs=runs, repetitions=repetitions, warmup=warmup)
    depths, notes = fit_depths(depths, asked.depth is not None, workload, n_ctx)
    workload = dataclasses.replace(workload, depths=depths)
    request = BenchRequest(
        asked.model, tuple(configs), workload, interval, timeout, asked.allow_busy, asked.allow_pinned, asked.remeasure
    )
    return request, notes
