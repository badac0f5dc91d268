"""The tune stage: the cards here and the model's shape read, llama.cpp's own fit asked for its seed, the space
pruned (the placement check, llama.cpp's estimate of the memory each device needs against what it may hold, where
each op runs), then raced in rounds of llama-bench processes (bench's own runs, judged as bench judges them), the
winner proven by llama-server, and every row, the table and the plan written under `<data>/tune/`."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.bench import bandwidth, energy, rows
from buildmgr.bench import config as bench_config
from buildmgr.bench.aggregate import rows_of
from buildmgr.bench.judge import Validity
from buildmgr.bench.prepare import Planned, model_context, plan
from buildmgr.bench.process import Run, run_once, test_key
from buildmgr.bench.runner import open_host, writable, write_samples
from buildmgr.bench.stats import geomean, ratio
from buildmgr.core.errors import UserError
from buildmgr.core.hostfacts import usable_cpus
from buildmgr.placement.cover import Covered
from buildmgr.tune import measure, oracle, race, serve, space
from buildmgr.tune.config import TuneRequest
from buildmgr.tune.inputs import bench_request_of, cards, config_of, fit_tool, margins, shape
from buildmgr.tune.prune import prune
from buildmgr.tune.result import RaceEntry, RaceState, Tuned, decide, sampler_load, side_by_side, unmeasured_against_fit
from buildmgr.tune.tuning import Tuning

if TYPE_CHECKING:
    from buildmgr.core.config import Dirs


# --- the race ----------------------------------------------------------------------------------------------------


def leader_share(
    live: Mapping[str, tuple[RaceEntry, Planned, Covered]],
    runs: Mapping[str, list[Run]],
    standings: Sequence[race.Standing],
    bench_request: bench_config.BenchRequest,
    environ: Mapping[str, str],
    host: rows.HostRow,
    test: tuple[int, int, int],
) -> float | None:
    """The leader's share of its decode's bandwidth limit so far (None for prefill, or where it is unknown)."""
    if not standings or test[1] == 0:
        return None
    label = race.best(standings).label
    _, p, covered = live[label]
    made = rows_of(p, runs[label], bench_request, environ, [], host, covered)
    row = next((r for r in made if test_key(r.fields) == test), None)
    return row.meta.limit_percent if row is not None and row.meta is not None else None


def race_all(
    tuning: Tuning,
    live: Mapping[str, tuple[RaceEntry, Planned, Covered]],
    incumbent: RaceEntry,
    bench_request: bench_config.BenchRequest,
    first_round: int,
    carry: bool = False,
) -> tuple[int, bool]:
    """Rounds of one llama-bench process per candidate still in, until one is left, the most processes ran, the
    leader reached its bandwidth limit, or the next round would pass the budget; every run kept in `runs`, by
    candidate. The rounds are numbered on from `first_round` (a stage follows another); the last one is returned, and
    whether the budget ended the race. With `carry`, an incumbent that holds two or more processes as an earlier
    stage's incumbent runs once more, in the first round; where that process reads as they predict it stands on all of
    them and runs no more (only its variations run), and where not (the host moved) it races every round on its fresh
    processes alone."""
    request, environ, sources, host = tuning.request, tuning.environ, tuning.sources, tuning.host
    say, notes, runs = tuning.say, tuning.notes, tuning.runs
    tests = bench_request.workload.tests()
    test = tests[0 if request.objective is space.Objective.PP else 1]
    unit = request.objective.unit
    for label, (entry, _, _) in live.items():
        runs.setdefault(label, [])
        entry.stage_units = ()
    held = incumbent.held_units if carry and len(incumbent.held_units) >= 2 else ()
    standing = bool(held)
    if standing:
        incumbent.stage_units = held
    in_race = dict(live)
    for label, (entry, p, _) in list(in_race.items()) if request.warmup else []:  # round 0, kept apart
        run = run_once(p, bench_request, environ, sources, 0, bandwidth=bandwidth.per_device(p.roles, host))
        runs[label].append(run)
        if run.failure:
            entry.state, entry.reason = RaceState.FAILED, run.failure
            del in_race[label]
        say(f"  warm-up: {label}: {entry.reason or f'{run.ran.seconds:.1f} s (kept apart)'}")
    rounds = first_round - 1
    while in_race and rounds - first_round + 1 < request.max_runs:
        rounds += 1
        round_started = time.monotonic()
        ran = 0
        for label, (entry, p, _) in list(in_race.items()):
            if standing and entry is incumbent and rounds > first_round:
                continue
            ran += 1
            run = run_once(p, bench_request, environ, sources, rounds, bandwidth=bandwidth.per_device(p.roles, host))
            runs[label].append(run)
            judged = run.judgements.get(tests.index(test) + 1)
            figure = measure.units(run, p, test, request.objective)
            value = figure.value
            if figure.too_short and not run.failure:  # the workload's fault, not the candidate's: failing it would
                # leave the slow ones to win
                raise UserError(f"{label}: {figure.why}; raise -n (now {request.n_gen}) or -r")
            if run.failure or value is None:
                entry.state, entry.reason = RaceState.FAILED, run.failure or figure.why
            elif judged is not None and judged.validity is Validity.FALLBACK:
                entry.state, entry.reason = RaceState.FAILED, "fell back: " + "; ".join(judged.evidence)
            else:
                entry.by_round[rounds] = value
                entry.stage_units += (value,)
                if entry is incumbent:
                    entry.held_units += (value,)
                entry.state = RaceState.FINALIST
                source = f"; {figure.basis}" if figure.basis else ""  # energy: which reading it stands on
                say(f"  round {rounds}: {label}: {race.speed(value)} {unit} ({run.ran.seconds:.1f} s{source})")
                continue
            del in_race[label]
            say(f"  round {rounds}: {label}: {entry.reason}")
        # its one process beside its variations
        if standing and rounds == first_round and (fresh := incumbent.by_round.get(rounds)) is not None:
            name, before = incumbent.candidate.label, f"{race.speed(geomean(held))} {unit} over {len(held)}"
            if race.holds(held, fresh):
                say(
                    f"  {name}: {race.speed(fresh)} {unit} reads as its processes as the incumbent ({before}): it "
                    "stands on them and runs no more"
                )
            else:
                standing = False
                incumbent.stage_units = incumbent.held_units = (fresh,)
                notes.append(
                    f"the host moved: {name} read {race.speed(fresh)} {unit} in round {rounds}, outside what its "
                    f"processes as the incumbent predict ({before}); it raced again beside its variations"
                )
                say(f"note: {notes[-1]}")
        standings = [race.Standing(label, e.stage_units, e is incumbent) for label, (e, _, _) in in_race.items()]
        for out in [] if request.grid else race.after_round(standings, rounds - first_round + 1, unit):
            entry = in_race.pop(out.label)[0]
            entry.state, entry.reason, entry.versus_best = RaceState.RACED_OUT, out.reason, out.ratio
        elapsed = time.monotonic() - tuning.started
        lead = (
            f", ahead: {race.best(standings).label} {race.speed(race.best(standings).value)} {unit}"
            if standings
            else ""
        )
        say(f"round {rounds}: {len(in_race)} in the race{lead} · {elapsed:.0f} s of a {request.budget_s:.0f} s budget")
        if len(in_race) <= 1 and not request.grid:
            break
        # the limit bounds speed; energy has none to stop at
        tg = request.objective is space.Objective.TG
        share = leader_share(live, runs, standings, bench_request, environ, host, test) if tg else None
        if rounds > first_round and not request.grid and race.at_limit(share):
            notes.append(
                f"{race.best(standings).label} decodes at {share:.1f} % of its bandwidth limit: nothing here can be "
                f"much faster, so the race stopped after round {rounds}"
            )
            say(f"note: {notes[-1]}")
            break
        per = (time.monotonic() - round_started) / max(ran, 1)
        to_run = len(in_race) - (standing and incumbent.candidate.label in in_race)
        if rounds - first_round + 1 < request.max_runs and elapsed + per * to_run > request.budget_s:
            notes.append(f"the budget ended the race after round {rounds}")
            say(f"note: {notes[-1]}")
            return rounds, True
    return rounds, False


def energy_readable() -> None:
    """Before anything runs: an energy objective needs a counter (a GPU library's, or the CPU's RAPL)."""
    sources = backends.open_engines()
    for source in sources:
        source.close()
    if not sources and not energy.rapl_files():
        raise UserError(
            "--objective j_per_token needs an energy counter, and none is readable here: no GPU library reports "
            f"energy and {energy.rapl_unreadable()}; tune for tg or pp instead"
        )


def tune(
    dirs: Dirs,
    request: TuneRequest,
    environ: Mapping[str, str],
    say: Callable[[str], None],
) -> Tuned:
    from buildmgr import store
    from buildmgr.core.fsutil import atomic_write_text
    from buildmgr.placement.run import here_for

    started = time.monotonic()
    build = store.find(dirs, request.build)
    if request.objective is space.Objective.J_PER_TOKEN:
        energy_readable()
    bench = build.installed_tool("llama-bench")
    tool = fit_tool(build)
    trained = model_context(request.model)
    ctx = request.context(trained)
    here, _ = here_for(dirs, build, environ)
    found_cards, capacity = cards(here, request.memory_mib)
    model_shape, vocab = shape(request.model)
    writable(dirs.tune)
    notes: list[str] = []
    if request.memory_mib:
        notes.append("emulated: " + ", ".join(f"{n} may hold {m} MiB" for n, m in request.memory_mib.items()))
    cpus = usable_cpus()
    default = oracle.default_threads(bench, environ)
    threads = oracle.thread_levels(default, cpus) if default is not None else ()
    if default is None:
        notes.append("llama-bench --help states no default thread count: -t is not varied")
    try:
        free = oracle.free_now(tool, request.model, ctx, environ) if request.memory_mib else {}
        _, seed_words = oracle.seed(tool, request.model, ctx, margins(here, capacity, free), environ)
        seed_need = oracle.need(tool, request.model, ctx, seed_words, environ)
    except oracle.FitFailed as err:
        raise UserError(f"llama.cpp's own fit found no placement of this model at -c {ctx}: {err}") from None
    short = oracle.short(seed_need, capacity, space.FIT_MARGIN_MIB)
    if short:  # llama.cpp fits the cards, not the host: what it leaves there must fit too
        raise UserError(
            f"even llama.cpp's own fit does not fit at -c {ctx}: {short[0]}; allow more memory or serve a smaller --ctx"
        )
    say(f"llama.cpp's own fit at -c {ctx}: {shlex.join(seed_words) or '(its defaults)'}")
    shaped = space.Space(found_cards, model_shape, request.objective, threads)
    bench_request = bench_request_of(request)
    workload = bench_request.workload
    test = workload.tests()[0 if request.objective is space.Objective.PP else 1]
    entries: dict[str, RaceEntry] = {}
    raced: dict[str, tuple[RaceEntry, Planned, Covered]] = {}
    runs: dict[str, list[Run]] = {}
    candidates = space.grid(shaped, seed_words) if request.grid else space.placements(shaped, seed_words)
    winner: RaceEntry | None = None
    rounds = stage = 0
    out_of_time = False
    sources = backends.open_engines()
    try:
        host, host_notes = open_host(dirs, bench_request, sources, say, notes)
        tuning = Tuning(request, environ, say, started, tool, ctx, capacity, sources, host, notes, runs)
        while candidates:
            stage += 1
            fresh = [RaceEntry(c) for c in candidates if c.label not in entries]
            entries |= {e.candidate.label: e for e in fresh}
            what = "the placements" if winner is None else f"one factor on {winner.candidate.label}"
            say(
                f"stage {stage}, {what}: {len(fresh)} new; pruning by the check, llama.cpp's memory estimate, coverage …"
            )
            stage_request = dataclasses.replace(bench_request, configs=tuple(config_of(e, build.id) for e in fresh))
            planned = plan(dirs, stage_request, environ)
            live = prune(tuning, fresh, planned, stage_request)
            for entry in fresh:
                if entry.reason:
                    say(f"  not run: {entry.candidate.label}: {entry.reason}")
            if winner is not None:  # the incumbent races again beside its variations, in the same conditions
                live = {winner.candidate.label: raced[winner.candidate.label]} | live
            raced |= live
            if not live and winner is None:
                first = fresh[0]
                raise UserError(
                    f"none of the {len(fresh)} candidates is left to run; {first.candidate.label}: {first.reason}"
                    + (" (the others: see above)" if len(fresh) > 1 else "")
                )
            found = winner
            if len(live) > 1 or winner is None:  # a later stage whose variations were all pruned has no race
                incumbent = next(iter(live.values()))[0]
                first_round = rounds + 1
                rounds, out_of_time = race_all(tuning, live, incumbent, stage_request, first_round, carry=True)
                found = decide([e for e, _, _ in live.values()], request.objective.value, incumbent)
            if found is not None and winner is not None and found is not winner:
                winner.state, winner.reason = RaceState.RACED_OUT, f"beaten by {found.candidate.label} in stage {stage}"
            winner = found or winner
            pending = space.factors(shaped, winner.candidate.cpu) if winner is not None else []
            if request.grid or winner is None or out_of_time or stage > len(pending):
                break
            candidates = space.varied(winner.candidate, pending[stage - 1])
        seed = next(iter(entries.values()))
        # where no last stage runs (the grid, the budget ended): the rounds the two ran side by side
        versus = side_by_side(seed, winner) if winner is not None and winner is not seed else None
        if winner is not None and winner is not seed and seed.candidate.label in raced and not request.grid:
            # the last stage: the winner against llama.cpp's fit, side by side, in processes of their own (the rounds
            # that chose the winner favour it: it was the best of several), so that the change is seen to be faster
            if out_of_time:
                notes.append(f"{winner.candidate.label} was not raced against llama.cpp's fit again: the budget ended")
            else:
                stage += 1
                say(f"stage {stage}: {winner.candidate.label} against llama.cpp's fit, side by side …")
                live = {label: raced[label] for label in (seed.candidate.label, winner.candidate.label)}
                seed.state = RaceState.FINALIST
                rounds, out_of_time = race_all(tuning, live, seed, bench_request, rounds + 1)
                winner = decide([seed, winner], request.objective.value, seed) or winner
                versus = ratio(seed.stage_units, winner.stage_units) if winner is not seed else None
        if winner is not None and (unmeasured := unmeasured_against_fit(seed, winner)):
            notes.append(unmeasured)
            say(f"note: {unmeasured}")
    finally:
        for source in sources:
            source.close()
    made = [
        row
        for label, (entry, p, covered) in raced.items()
        if runs.get(label)
        for row in rows_of(p, runs[label], bench_request, environ, host_notes, host, covered)
    ]
    if loaded := sampler_load(
        [(r.config, r.meta.observer_share) for r in made if r.meta and test_key(r.fields) == test]
    ):
        notes.append(loaded)
        say(f"note: {loaded}")
    winner_row = None
    commands: dict[str, str] = {}
    served = None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    rows_path = dirs.tune / f"{stamp}-{os.getpid()}.jsonl"
    plan_path = rows_path.with_suffix(".json")
    if winner is not None:
        winner_row = next((r for r in made if r.config == winner.candidate.label and test == test_key(r.fields)), None)
        for tool_name in ("llama-server", "llama-cli"):
            commands[tool_name] = winner.command(build.tool(tool_name), request.model, ctx)
        if request.serve and not vocab:
            notes.append(
                "not served: the model's vocabulary is bare ids (tokenizer none), which llama-server cannot take"
            )
            say(f"note: {notes[-1]}")
        elif request.serve:
            rows_path.parent.mkdir(parents=True, exist_ok=True)
            prompt = [3 + i % max(vocab - 3, 1) for i in range(request.depth or request.n_prompt)]
            say(f"proving the winner: llama-server at -c {ctx}, one request of {len(prompt)} tokens …")
            served = serve.serve(
                build.installed_tool("llama-server"),
                request.model,
                winner.candidate.words,
                ctx,
                prompt,
                request.n_gen,
                environ,
                rows_path.with_suffix(".server.log"),
            )
    executed = [(p, run) for label, (_, p, _) in raced.items() for run in runs.get(label, [])]
    samples_path = write_samples(rows_path, sorted(executed, key=lambda done: done[1].started))
    tuned = Tuned(
        request,
        build.id,
        ctx,
        tuple(entries.values()),
        tuple(notes),
        rounds,
        time.monotonic() - started,
        sum(r.ran.seconds for done in runs.values() for r in done),
        capacity,
        winner,
        rows_path,
        samples_path,
        plan_path,
        commands,
        winner_row,
        served,
        versus,
    )
    atomic_write_text(rows_path, "".join(json.dumps(r.to_json()) + "\n" for r in made))
    atomic_write_text(plan_path, json.dumps(tuned.to_json(), indent=2) + "\n")
    return tuned
