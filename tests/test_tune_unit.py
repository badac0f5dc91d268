"""tune's pure parts: the space of placements, the race's decisions, llama-fit-params's output read, the request."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildmgr.core.errors import UserError
from buildmgr.tune import config, oracle, race, space
from buildmgr.tune.space import Objective, Shape, Space, TuneCandidate, TuneCard

DENSE = Shape(layers=32, layer_mib=400.0, expert_mib=0.0, other_mib=500.0)  # 13.3 GB
MOE = Shape(layers=48, layer_mib=600.0, expert_mib=560.0, other_mib=600.0)  # 29.4 GB, experts 26.9 GB


def flags(found: list[TuneCandidate]) -> list[tuple[str, ...]]:
    return [c.words for c in found]


def devices_of(candidate: TuneCandidate) -> list[str]:
    words = list(candidate.words)
    return words[words.index("-dev") + 1].split(",") if "-dev" in words else []


def test_each_card_is_tried_under_each_of_its_names_but_never_two_names_of_one_card_together():
    h200 = TuneCard(("CUDA0", "Vulkan0"), 140_000)
    other = TuneCard(("CUDA1", "Vulkan1"), 140_000)
    found = space.placements(Space((h200, other), DENSE, Objective.TG), ("-ngl", "-1"))[1:]
    sets = {tuple(devices_of(c)) for c in found}
    assert sets == {
        ("CUDA0",), ("Vulkan0",), ("CUDA1",), ("Vulkan1",),
        ("CUDA0", "CUDA1"), ("CUDA0", "Vulkan1"), ("Vulkan0", "CUDA1"), ("Vulkan0", "Vulkan1"),
    }  # fmt: skip
    # over two cards every split mode (layer by default, row, tensor); alone, none to choose; equal cards need no -ts
    two = [c for c in found if len(devices_of(c)) == 2]
    modes = [dict(zip(c.words, c.words[1:], strict=False)).get("-sm", "layer") for c in two]
    assert sorted(modes) == sorted(["layer", "row", "tensor"] * 4)
    assert not any("-sm" in c.words for c in found if len(devices_of(c)) == 1)
    assert not any("-ts" in c.words for c in found)
    assert len({c.label for c in found}) == len(found)


def test_cards_of_unequal_memory_get_a_split_by_what_each_may_hold():
    found = space.placements(
        Space((TuneCard(("CUDA0",), 24_000), TuneCard(("CUDA1",), 12_000)), DENSE, Objective.TG), ()
    )
    assert any(("-ts", "24000,12000") == pair for c in found for pair in zip(c.words, c.words[1:], strict=False))


def test_a_moe_that_does_not_fit_keeps_the_fewest_layers_experts_on_the_cpu_that_would_fit_and_a_few_more():
    shaped = Space((TuneCard(("CUDA0",), 24 * 1024),), MOE, Objective.TG, threads=(8,))
    found = space.placements(shaped, ("-ngl", "-1"))
    kept = sorted({int(c.words[c.words.index("-ncmoe") + 1]) for c in found if "-ncmoe" in c.words})
    over = MOE.weights_mib - (24 * 1024 - space.FIT_MARGIN_MIB)
    least = -(-over // MOE.expert_mib)
    assert kept == list(range(int(least), int(least) + space.OFFLOAD_STEPS + 1))
    assert any("--cpu-moe" in c.words for c in found)
    # the CPU computes there, so its threads are a factor; all on the card, they are not
    [cmoe] = [c for c in found if "--cpu-moe" in c.words]
    assert cmoe.cpu and [level[0] for level in space.factors(shaped, cmoe.cpu)[-1]] == ["", "t8"]
    fits = Space((TuneCard(("CUDA0",), 140_000),), MOE, Objective.TG, threads=(8,))
    assert not any(w in c.words for c in space.placements(fits, ()) for w in ("-ncmoe", "--cpu-moe", "-ngl", "-t"))
    assert len(space.factors(fits, False)) == 1  # FlashAttention alone


def test_a_dense_model_that_does_not_fit_offloads_the_most_layers_that_would():
    found = space.placements(Space((TuneCard(("CUDA0",), 8 * 1024),), DENSE, Objective.TG), ())[1:]
    layers = sorted({int(c.words[c.words.index("-ngl") + 1]) for c in found})
    most = int((8 * 1024 - space.FIT_MARGIN_MIB - DENSE.other_mib) // DENSE.layer_mib)
    assert layers == list(range(most - space.OFFLOAD_STEPS, most + 1))


def test_prefill_tries_a_larger_micro_batch_and_decode_does_not():
    card = (TuneCard(("CUDA0",), 140_000),)
    flags = {w for f in space.factors(Space(card, DENSE, Objective.PP), False) for _, words in f for w in words}
    assert "-ub" in flags
    flags = {w for f in space.factors(Space(card, DENSE, Objective.TG), False) for _, words in f for w in words}
    assert "-ub" not in flags


def test_the_seed_comes_first_and_the_later_stages_vary_one_factor_of_the_winner_so_far():
    shaped = Space((), DENSE, Objective.PP, threads=(1,))
    found = space.placements(shaped, ("-ngl", "-1"))
    assert found[0] == TuneCandidate("fit", ("-ngl", "-1"), seed=True, cpu=True)
    assert [c.label for c in found] == ["fit", "cpu"]
    fa, ub, threads = space.factors(shaped, found[1].cpu)
    stage = space.varied(found[1], fa)
    assert [(c.label, c.words) for c in stage] == [("cpu", ()), ("cpu fa1", ("-fa", "1")), ("cpu fa0", ("-fa", "0"))]
    assert [c.label for c in space.varied(stage[2], ub)] == ["cpu fa0", "cpu fa0 ub2048"]
    # the grid is the whole product: every placement at every level of every factor, the seed once as itself
    grid = space.grid(shaped, ("-ngl", "-1"))
    assert len(grid) == 2 * len(fa) * len(ub) * len(threads) and sum(c.seed for c in grid) == 1
    assert {"fit fa0 ub2048 t1", "cpu", "cpu fa1 t1"} <= {c.label for c in grid}


def standing(label: str, *units: float, seed: bool = False) -> race.Standing:
    return race.Standing(label, tuple(units), incumbent=seed)


def test_one_process_each_leaves_no_one_by_an_interval_and_all_but_the_fastest_third_are_screened_out_but_the_seed():
    field = [standing("fit", 50, seed=True)] + [standing(f"c{i}", 100 - i) for i in range(8)]
    out = {o.label: o.reason for o in race.after_round(field, 1)}
    assert race.after_round(field[:4], 1) == []  # no more than the finalists: only an interval takes one out
    assert set(out) == {"c3", "c4", "c5", "c6", "c7"}  # the fastest third of nine stays, and the seed, the slowest
    assert all(reason.startswith("screened out in round 1") for reason in out.values())


def test_an_interval_that_excludes_a_candidate_takes_it_out_and_noise_keeps_it_in():
    field = [
        standing("fast", 100, 101, 99),
        standing("slow", 80, 81, 79),
        standing("noisy", 60, 140, 95),
    ]
    out = race.after_round(field, 3)
    assert [o.label for o in out] == ["slow"]
    assert out[0].ratio is not None and out[0].ratio.high is not None and out[0].ratio.high < 1
    assert out[0].reason.endswith(" over 3 processes")
    # a standing incumbent's ratio is over all its processes, not the stage's rounds (the cpu tune: "fit t1 … over 2")
    [out] = race.after_round([standing("fit", 100, 102, 98, 101, 99, seed=True), standing("fit t1", 66, 67)], 2)
    assert out.reason.endswith(" over 5 and 2 processes"), out.reason


def test_the_seed_wins_unless_an_interval_shows_something_faster():
    close = [standing("fit", 100, 102, 98, seed=True), standing("fa1", 101, 99, 104)]
    chosen, over = race.winner(close)
    assert chosen.label == "fit" and over is not None and over.low is not None and over.low <= 1
    clear = [standing("fit", 100, 102, 98, seed=True), standing("ub", 150, 151, 149)]
    chosen, over = race.winner(clear)
    assert chosen.label == "ub" and over is not None and over.low is not None and over.low > 1
    one = [standing("fit", 100, seed=True), standing("x", 200)]
    assert race.winner(one)[0].label == "fit"  # one process each: too few to recommend a change


@given(st.lists(st.floats(min_value=1, max_value=1e5), min_size=2, max_size=5), st.integers(1, 12))
def test_the_best_never_leaves_and_whoever_leaves_is_slower(values, others):
    field = [standing("best", *[v * 10 for v in values])] + [standing(f"c{i}", *values) for i in range(others)]
    out = race.after_round(field, len(values))
    assert "best" not in {o.label for o in out}


def test_llama_fit_params_output_is_read_and_what_does_not_fit_is_said_with_its_numbers():
    ctx, words = oracle.parse_seed('-c 4096 -ngl 48 -ot "blk\\.14\\.ffn_(up|down|gate)_(ch|)exps=CPU"\n')
    assert ctx == 4096 and words == ("-ngl", "48", "-ot", "blk\\.14\\.ffn_(up|down|gate)_(ch|)exps=CPU")
    needs = oracle.parse_need("CUDA0 17904 384 898 \nHost 58259 0 12 \n")
    assert needs["CUDA0"].total == 19186 and needs["Host"].model == 58259
    short = oracle.short(needs, {"CUDA0": 20000, "Host": 60000}, 1024)
    assert short == ["CUDA0 needs 19186 MiB (model 17904, context 384, compute 898) and a margin of 1024, of 20000 MiB"]
    assert oracle.short(needs, {"CUDA0": 21000, "Host": 58271}, 1024) == []  # the host keeps no margin
    with pytest.raises(oracle.FitFailed):
        oracle.parse_seed("failed to fit\n")
    with pytest.raises(oracle.FitFailed):
        oracle.parse_need("")


@pytest.mark.parametrize(
    ("text", "mib"), [("24GiB", 24 * 1024), ("24G", 24 * 1024), ("512MiB", 512), ("1.5g", 1536), ("24GB", 22888)]
)
def test_sizes_are_read_in_the_units_people_write(text, mib):
    assert config.parse_size(text, "--memory CUDA0=") == mib


@pytest.mark.parametrize(
    ("items", "fragment"),
    [(["CUDA0"], "write DEVICE=SIZE"), (["CUDA0=lots"], "a size such as"), (["A=1G", "A=2G"], "twice")],
)
def test_bad_memory_is_one_line_that_says_how(items, fragment):
    with pytest.raises(UserError, match=fragment):
        config.parse_memory(items)


def test_the_context_served_holds_the_depth_and_the_test_and_never_passes_the_model_s():
    request = config.TuneRequest("cpu", config.Path("m.gguf"), depth=4000, n_prompt=512, n_gen=64)
    assert request.context(8192) == 4608
    with pytest.raises(UserError, match="passes the model's context of 4096"):
        request.context(4096)


def test_a_leader_at_its_bandwidth_limit_ends_the_race_and_one_past_it_says_the_limit_is_wrong():
    assert race.at_limit(97.5) and race.at_limit(104.9)
    assert not race.at_limit(80.0) and not race.at_limit(162.9) and not race.at_limit(None)


def test_an_emulated_card_is_fitted_from_the_free_memory_llama_cpp_sees_now_not_a_stored_probe_s():
    """On an H100 (2026-12-05) the stored probe said 79996 MiB free and llama.cpp 80535 when it fitted: a margin from
    the probe let the fit fill 539 MiB more than `--memory CUDA0=1700MiB` holds, and tune refused its own seed."""
    log = (
        "0.00.296.653 I llama_prepare_model_devices: using device CUDA0 (NVIDIA H100 80GB HBM3) (0000:00:06.0) - "
        "80535 MiB free\n"
    )
    free = oracle.parse_free(log)
    assert free == {"CUDA0": 80535}
    from buildmgr.core.device_records import Device, Selection, State
    from buildmgr.placement.check import Here
    from buildmgr.tune.inputs import margins

    card = Device("CUDA0", "CUDA", 0, "NVIDIA H100 80GB HBM3", 81079, 79996)
    here = Here((card,), {"CUDA0": Selection(State.USED)}, "0c1e570", free_mib={"CUDA0": 79996})
    # what llama.cpp may then use: its free memory now less the margin is the emulated card less llama.cpp's own
    [margin] = margins(here, {"CUDA0": 1700}, free)
    assert 80535 - margin == 1700 - space.FIT_MARGIN_MIB


def test_a_candidate_measured_under_bench_s_pinning_guard_carries_it_beside_its_name_and_in_its_command():
    from pathlib import Path

    from buildmgr.tune.result import RaceEntry

    entry = RaceEntry(TuneCandidate("CUDA0 cmoe", ("-dev", "CUDA0", "--cpu-moe")), env={"GGML_CUDA_NO_PINNED": "1"})
    assert entry.name == "CUDA0 cmoe [GGML_CUDA_NO_PINNED=1]"
    assert entry.command(Path("/b/llama-server"), Path("m.gguf"), 4096) == (
        "GGML_CUDA_NO_PINNED=1 /b/llama-server -m m.gguf -c 4096 -dev CUDA0 --cpu-moe"
    )
    assert entry.to_json()["env_set"] == {"GGML_CUDA_NO_PINNED": "1"}


def test_threads_vary_around_llama_cpp_s_own_default_not_the_logical_cpu_count():
    # llama-bench's help at the pin prints its default, the CPU's math cores (physical ones), with this format
    help_text = (
        "  --prio <-1|0|1|2|3>     process/thread priority (default: 0)\n  -t, --threads <n>      (default: 8)\n"
    )
    assert oracle.parse_threads(help_text) == 8
    assert oracle.parse_threads("usage: llama-bench [options]") is None
    assert oracle.thread_levels(16, 16) == (8,)  # the H100 host: no SMT
    assert oracle.thread_levels(8, 16) == (4, 16)  # SMT: half the cores, and every hardware thread
    assert oracle.thread_levels(64, 8) == (4, 8)  # llama.cpp counts the host's cores, not this process's cpuset
    assert oracle.thread_levels(2, 2) == (1,)
    assert oracle.thread_levels(1, 1) == ()


def test_the_fit_s_answer_for_a_moe_keeps_each_override_one_word():
    # llama-fit-params on an H100 for a 10-layer MoE fitted to an emulated 6 GiB card (docs/real-runs.md)
    text = (Path(__file__).parent / "fixtures/h100/tune49/moe-fit.txt").read_text()
    ctx, words = oracle.parse_seed(text)
    assert ctx == 768 and words[:3] == ("-ngl", "11", "-ot")
    overrides = words[3].split(",")
    assert len(words) == 4 and len(overrides) == 6
    assert overrides[0] == r"blk\.5\.ffn_(gate|up|gate_up|down).*=CPU" and all(o.endswith("=CPU") for o in overrides)


def test_coverage_is_keyed_by_everything_but_the_thread_count():
    assert space.without_threads(("-dev", "CUDA0", "-ncmoe", "5", "-fa", "0", "-t", "8")) == (
        "-dev", "CUDA0", "-ncmoe", "5", "-fa", "0",
    )  # fmt: skip
    assert space.without_threads(("--threads", "4", "-ot", "exps=CPU")) == ("-ot", "exps=CPU")
    # a -t variation of a winner shares its coverage; a -fa one does not (FlashAttention moves ops)
    base = ("-ngl", "-1")
    [_, t1] = space.varied(TuneCandidate("fit", base, seed=True, cpu=True), [("", ()), ("t1", ("-t", "1"))])
    [_, fa1, _] = space.varied(
        TuneCandidate("fit", base, seed=True), space.factors(Space((), DENSE, Objective.TG), True)[0]
    )
    assert space.without_threads(t1.words) == base != space.without_threads(fa1.words)


def test_forcing_flash_attention_on_has_a_twin_at_auto_and_turning_it_off_has_none():
    """-fa 1 is one configuration with -fa auto wherever auto turns FlashAttention on (the KV cache is laid out for it
    before auto is resolved); -fa 0 is not, where auto turns it off: the cache keeps that layout and every token
    transposes V (llama-graph.cpp, "avoid this branch")."""
    base = ("-dev", "CUDA0", "-ncmoe", "5")
    assert space.auto_twin((*base, "-fa", "1", "-t", "8")) == base
    assert space.auto_twin((*base, "--flash-attn", "on")) == base
    assert space.auto_twin((*base, "-fa", "0")) is None and space.auto_twin(base) is None
    assert space.without(("-t", "4", "-fa", "1", "-ub", "2048"), "-fa", "-ub") == ("-t", "4")


def test_a_process_compared_side_by_side_is_one_of_the_same_round():
    from buildmgr.tune.result import RaceEntry, side_by_side

    fit = RaceEntry(TuneCandidate("fit", (), seed=True), by_round={1: 100.0, 2: 102.0, 3: 98.0})
    other = RaceEntry(TuneCandidate("Vulkan0", ("-dev", "Vulkan0")), by_round={1: 110.0, 2: 111.0, 3: 109.0, 5: 50.0})
    seen = side_by_side(fit, other)  # round 5 ran without fit: not compared
    assert seen is not None and seen.low is not None and seen.low > 1.0 and round(seen.value, 2) == 1.10
    assert (
        side_by_side(fit, RaceEntry(TuneCandidate("late", ()), by_round={3: 99.0, 4: 98.0})) is None
    )  # one shared round


@pytest.mark.parametrize("resolved", [True, False, None])
def test_forcing_flash_attention_on_is_not_run_only_where_its_twin_s_run_said_auto_turned_it_on(monkeypatch, resolved):
    from types import SimpleNamespace

    from buildmgr.placement import coverage
    from buildmgr.placement.cover import Covered
    from buildmgr.tune import prune
    from buildmgr.tune.result import RaceEntry
    from buildmgr.tune.tuning import Tuning

    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(prune.oracle, "need", lambda tool, model, ctx, words, environ: asked.append(words) or {})
    monkeypatch.setattr(prune, "cover", lambda p, request, environ, say: Covered(coverage.Coverage({}, ())))
    base = ("-dev", "Vulkan0")
    taken = {base: Covered(coverage.Coverage({"Vulkan0": 2}, (), flash_attn_auto=resolved))}
    fa1, fa0 = (
        RaceEntry(TuneCandidate("Vulkan0 fa1", (*base, "-fa", "1"))),
        RaceEntry(TuneCandidate("Vulkan0 fa0", (*base, "-fa", "0"))),
    )
    planned = [SimpleNamespace(blocked=None, env_set={})] * 2
    request = SimpleNamespace(model=Path("m.gguf"))
    tuning = Tuning(request, {}, print, 0.0, Path("fit"), 512, {}, [], None, covered=taken)  # type: ignore[arg-type]
    live = prune.prune(tuning, [fa1, fa0], planned, None)  # type: ignore[arg-type]
    if resolved:  # the same configuration as the incumbent: neither estimated nor run
        assert list(live) == ["Vulkan0 fa0"] and fa1.reason == prune.TWIN and (*base, "-fa", "1") not in asked
    else:  # auto turned it off, or was not resolved: forcing it on is a candidate of its own
        assert list(live) == ["Vulkan0 fa1", "Vulkan0 fa0"] and not fa1.reason


def test_a_served_answer_without_timings_says_so_instead_of_none():
    from buildmgr.tune.serve import Served

    full = Served(("llama-server",), "log", None, 1.0, 96, 27.0, 3555.0, 180.5, 32, first_ttft_ms=1771.0)
    bare = Served(("llama-server",), "log", None, 1.0, 0, None, None, None, 32)
    assert full.text() == (
        "llama-server answered 96 prompt tokens in 27 ms (first token; its first request took 1771 ms), "
        "decoded 32 at 180.5 t/s"
    )
    assert "None" not in bare.text() and bare.text().count("not reported") == 3


def test_a_winner_never_raced_against_llama_cpp_s_fit_says_so_and_why():
    """The H100's MoE (2026-12-06): the fit was left out before the race, and the plan said nothing of it."""
    from buildmgr.tune.result import RaceEntry, RaceState, unmeasured_against_fit

    left_out = RaceEntry(TuneCandidate("fit", (), seed=True), RaceState.PRUNED, "falls back: DIV ×1 on CPU")
    winner = RaceEntry(TuneCandidate("CUDA0 ncmoe3", ("-ncmoe", "3")), RaceState.WINNER)
    assert unmeasured_against_fit(left_out, winner) == (
        "llama.cpp's fit was not measured (falls back: DIV ×1 on CPU): the winner is not compared with it"
    )
    failed = RaceEntry(TuneCandidate("fit", (), seed=True), RaceState.FAILED, "exit 1")
    assert unmeasured_against_fit(failed, winner) is not None
    raced = RaceEntry(TuneCandidate("fit", (), seed=True), RaceState.RACED_OUT, "beaten by CUDA0 ncmoe3 in stage 1")
    assert unmeasured_against_fit(raced, winner) is None and unmeasured_against_fit(left_out, left_out) is None


def test_the_fit_that_wins_the_last_stage_after_leaving_an_earlier_one_carries_no_ratio_against_a_winner():
    """The H100's tune by energy (2026-12-06, tune49e): `fit fa0` put the fit out of stage 2 (0.98× [0.96, 1.00]),
    then lost the side-by-side stage; the fit won, its plan entry still 'versus_winner' 0.98, not within noise."""
    from buildmgr.tune.result import RaceEntry, RaceState, decide

    fit = RaceEntry(TuneCandidate("fit", (), seed=True), RaceState.FINALIST, stage_units=(1.80, 1.80, 1.77, 1.76))
    fa0 = RaceEntry(TuneCandidate("fit fa0", ("-fa", "0")), RaceState.FINALIST, stage_units=(1.86, 1.77, 1.83, 1.85))
    fit.versus_best = race.ratio((1.82, 1.80, 1.83, 1.79), (1.78, 1.77, 1.76, 1.79))  # from stage 2
    assert decide([fit, fa0], "j_per_token", fit) is fit
    assert fit.state is RaceState.WINNER and fit.to_json()["versus_winner"] is None
    assert fa0.to_json()["versus_winner"]["within_noise"]


def test_an_incumbent_stands_on_its_processes_as_the_incumbent_and_a_winner_chosen_by_a_race_runs_again(monkeypatch):
    """The H100's MoE (2026-12-06, tune49e): stage 2 ran the fit 4 more times beside `fit fa0`, though its 4 processes
    of stage 1, where it stayed whatever it read, favour nothing; a winner chosen from several does run again."""
    from types import SimpleNamespace

    from buildmgr.tune import runner
    from buildmgr.tune.measure import Figure
    from buildmgr.tune.result import RaceEntry, RaceState
    from buildmgr.tune.tuning import Tuning

    reads = {
        "fit": iter([30.0, 31.0, 30.5, 29.0, 30.0]),
        "slow": iter([20.0, 21.0]),
        "fit fa0": iter([30.5, 29.5, 31.0, 30.0]),
        "fast": iter([40.0, 41.0, 39.0, 40.0, 40.5, 39.5, 40.0, 40.0]),
        "fast t8": iter([30.0, 31.0, 30.5, 30.0]),
    }
    ran: list[tuple[str, int]] = []

    class Label(str):  # a candidate's plan, as far as the race reads it: its label, and no devices
        roles = ()

    def run_once(p, bench_request, environ, sources, round_, bandwidth=None):  # type: ignore[no-untyped-def]
        ran.append((p, round_))
        return SimpleNamespace(p=p, failure=None, ran=SimpleNamespace(seconds=1.0), judgements={})

    monkeypatch.setattr(runner, "run_once", run_once)
    monkeypatch.setattr(runner.bandwidth, "per_device", lambda roles, host: None)
    monkeypatch.setattr(runner, "leader_share", lambda *args: None)
    monkeypatch.setattr(runner.measure, "units", lambda run, p, test, objective: Figure(next(reads[run.p])))
    bench_request = SimpleNamespace(workload=SimpleNamespace(tests=lambda: [(128, 0, 0), (0, 16, 0)]))
    request = SimpleNamespace(objective=Objective.TG, warmup=0, max_runs=4, grid=False, budget_s=1e9, n_gen=16)
    entries = {label: RaceEntry(TuneCandidate(label, (), seed=label == "fit")) for label in reads}
    runs: dict[str, list[object]] = {}

    def stage(labels: list[str], first: int, carry: bool) -> int:
        live = {label: (entries[label], Label(label), None) for label in labels}
        tuning = Tuning(request, {}, print, 0.0, Path("fit"), 512, {}, [], None, runs=runs)  # type: ignore[arg-type]
        rounds, _ = runner.race_all(tuning, live, entries[labels[0]], bench_request, first, carry=carry)  # type: ignore[arg-type]
        return rounds

    last = stage(["fit", "slow"], 1, carry=True)  # stage 1: the fit is the incumbent
    assert entries["fit"].held_units == (30.0, 31.0) and entries["slow"].state is RaceState.RACED_OUT
    ran.clear()
    first = last + 1
    last = stage(["fit", "fit fa0"], first, carry=True)  # its processes stand: one more, then fa0 alone, to a tie
    assert ran == [("fit", first), *(("fit fa0", r) for r in range(first, last + 1))], ran
    assert entries["fit"].stage_units == (30.0, 31.0, 30.5) and entries["fit"].state is RaceState.FINALIST
    ran.clear()
    stage(["fit", "fast"], last + 1, carry=False)  # the last stage against the fit: side by side, both run
    assert {p for p, _ in ran} == {"fit", "fast"} and len(ran) == 4
    ran.clear()
    stage(["fast", "fast t8"], 99, carry=True)  # chosen by a race, not an incumbent yet: it runs beside its variation
    assert ran[:2] == [("fast", 99), ("fast t8", 99)], ran
    # the host moved: the incumbent's fresh process is outside what its earlier ones predict, so it races every round
    # on its fresh processes alone
    reads |= {"held": iter([30.0, 31.0, 15.0, 15.2, 14.9, 15.1]), "held ub": iter([15.1, 15.0, 14.8, 15.2])}
    entries |= {label: RaceEntry(TuneCandidate(label, ())) for label in ("held", "held ub")}
    entries["held"].held_units, entries["held"].state = (30.0, 31.0), RaceState.WINNER
    next(reads["held"]), next(reads["held"])
    ran.clear()
    last = stage(["held", "held ub"], 200, carry=True)
    assert [p for p, _ in ran] == ["held", "held ub"] * (last - 199), ran
    assert entries["held"].stage_units == (15.0, 15.2, 14.9, 15.1)[: last - 199]


def test_a_fresh_process_holds_where_its_earlier_ones_would_have_read_it_and_not_on_a_host_slowed_to_half():
    """The H100 (2026-12-06, tune49f): between two calls the host halved the fit's speed (60.7 to 31.1 t/s)."""
    fast = (57.5, 56.0, 72.4, 58.3)  # the fit's stage-1 processes in run 1
    assert race.holds(fast, 64.8) and race.holds(fast, 50.3)
    assert not race.holds(fast, 31.5) and not race.holds(fast, 120.0)
    assert not race.holds((30.0,), 30.0)  # one process predicts nothing
