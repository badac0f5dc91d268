"""`buildmgr bench`, its pure parts: CONFIGs, llama-bench's output, the judgement of which devices worked (on samples
recorded on an H200), the statistics, the rows and their comparison, and the samplers on recorded real readings.
The runs themselves are in test_vulkan_build.py (lavapipe) and docs/real-runs.md (H200)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_user_error, buildmgr, make_env
from hypothesis import given
from hypothesis import strategies as st

from buildmgr.backends import EngineReading
from buildmgr.backends.cuda import engines as cuda_engines
from buildmgr.backends.hip import engines as hip_engines
from buildmgr.bench import bandwidth, compare, energy, limit, logs, rows, stats, verdicts
from buildmgr.bench import config as cfg
from buildmgr.bench.judge import HOST as HOST_ROLE
from buildmgr.bench.judge import MIN_IDLE_SECONDS, Placed, Validity, Verdict, judge
from buildmgr.bench.sampling import COUNTER_INTERVAL, CounterReading, ProcessReading, Sample, read_process, services
from buildmgr.core import proc
from buildmgr.core.errors import UserError
from buildmgr.placement.check import FFN_EXPS

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "h200" / "bench"
H200_PCI = "0000:00:06.0"


# --- CONFIGs -----------------------------------------------------------------------------------------------------


def test_a_config_is_a_build_and_the_flags_a_user_types_for_llama_cli():
    config = cfg.parse_config("split=cuda+vulkan -dev CUDA0,Vulkan1 -sm layer -ts 3,1 -fa on")
    assert (config.label, config.build) == ("split", "cuda+vulkan")
    assert config.placement.devices == ("CUDA0", "Vulkan1")
    # written for llama-bench: '/' joins the devices and the -ts entries of one test
    assert config.bench_args() == ["-dev", "CUDA0/Vulkan1", "-sm", "layer", "-mg", "0", "-ts", "3/1", "-fa", "on"]
    assert cfg.parse_config("cpu").label == "cpu"
    assert cfg.parse_config("cuda -dev CUDA0").label == "cuda -dev CUDA0"


def test_cpu_moe_becomes_the_override_llama_cpp_makes_of_it_and_sets_no_pinned_memory():
    config = cfg.parse_config("moe=cuda -dev CUDA0 --cpu-moe")
    args = config.bench_args()
    assert args[args.index("-ot") + 1] == f"{FFN_EXPS}=CPU" and config.cpu_overrides
    assert cfg.parse_config("x=cuda -ncmoe 3").bench_args()[-2:] == ["-ncmoe", "3"]
    assert not cfg.parse_config("x=cuda -ot ffn=CUDA0").cpu_overrides


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "an empty CONFIG"),
        ("-dev CUDA0", "must start with a build"),
        ("cuda --bogus 1", "--bogus is not a placement flag"),
        ("cuda --device=CUDA0", "no '=' form; write --device CUDA0"),
        ("cuda -t 4,8", "one value per CONFIG"),
        ("cuda -fa on,off", "-fa 'on,off': one of on, off, auto"),
        ("cuda -dev", "-dev needs a value"),
        ("cuda -ts 3,x", "every entry must be a number"),
        ("cuda 'unclosed", "No closing quotation"),
    ],
)
def test_a_bad_config_is_one_line_that_says_what_is_wrong(text, fragment):
    with pytest.raises(UserError, match=None) as raised:
        cfg.parse_config(text)
    assert fragment in str(raised.value)


def test_configs_from_toml(tmp_path):
    path = tmp_path / "bench.toml"
    path.write_text(
        '[[config]]\nbuild = "cuda"\nlabel = "c0"\nflags = "-dev CUDA0"\n\n'
        '[[config]]\nbuild = "vulkan"\nflags = ["-dev", "Vulkan0", "-m", "/m/other.gguf"]\n'
    )
    first, second = cfg.read_toml(path)
    assert (first.label, first.placement.devices) == ("c0", ("CUDA0",))
    assert second.label == "vulkan -dev Vulkan0 -m /m/other.gguf"
    assert second.model(Path("/m/default.gguf")) == Path("/m/other.gguf")
    assert first.model(Path("/m/default.gguf")) == Path("/m/default.gguf")
    path.write_text("[[config]]\nlabel = 'no build'\n")
    with pytest.raises(UserError, match="has no build"):
        cfg.read_toml(path)
    with pytest.raises(UserError, match="labelled 'a'"):
        cfg.unique_labels([cfg.parse_config("a=cpu"), cfg.parse_config("a=cuda")])


def test_default_depths_are_clipped_to_the_model_and_asked_ones_refused():
    work = cfg.Workload(512, 128)
    assert cfg.fit_depths((0, 4096), False, work, 2048) == ((0,), ["depth 4096 left out: the model's context is 2048"])
    with pytest.raises(UserError, match="use depths up to 1408"):
        cfg.fit_depths((0, 4096), True, work, 2048)
    assert cfg.parse_depths("4096,0") == (0, 4096)
    for bad in ("a", "-1", "0,0"):
        with pytest.raises(UserError):
            cfg.parse_depths(bad)


def test_every_tg_figure_has_its_depth_and_pg_runs_in_one_context():
    work = cfg.Workload(512, 128, (0, 4096))
    assert work.tests() == [(512, 0, 0), (0, 128, 0), (512, 128, 0), (512, 0, 4096), (0, 128, 4096), (512, 128, 4096)]
    assert work.args() == ["-p", "512", "-n", "128", "-d", "0,4096", "-r", "6", "-pg", "512,128"]


# --- llama-bench's output ------------------------------------------------------------------------------------------


def test_the_verbose_log_of_a_real_run_gives_its_phases_and_buffers():
    """A real `llama-bench -p 32 -n 16 -d 0,64 -pg 32,16 -r 1 -o jsonl --progress -v` (the pinned cpu build)."""
    lines = (FIXTURES / "bench" / "llama-bench-v-cpu.txt").read_text().splitlines()
    events = [e for i, line in enumerate(lines) if (e := logs.event(line, float(i)))]
    assert [e.test for e in events if e.what == "starting"] == [1, 2, 3, 4, 5, 6]
    # six rows arrived after their tests' last lines
    arrivals = [max(e.at for e in events if e.test == t) + 0.5 for t in range(1, 7)]
    phases = logs.phases(events, arrivals, float(len(lines)))
    assert [(p.test, p.kind) for p in phases] == [
        (1, "prompt"), (2, "generation"), (3, "prompt"), (3, "generation"),
        (4, "prompt"), (5, "generation"), (6, "prompt"), (6, "generation"),
    ]  # fmt: skip
    assert all(p.start < p.end for p in phases)
    spans = logs.spans(events, arrivals, float(len(lines)))
    assert all(spans[p.test][0] <= p.start and p.end <= spans[p.test][1] for p in phases)
    load = logs.load_log(lines)
    assert load.buffers["CPU_Mapped"] == {"model": 0.44} and load.buffers["CPU"]["KV"] == 0.12
    assert load.offloaded is None and load.pinned_mib == 0


def test_gpu_load_lines_give_devices_layers_and_pinned_host_buffers():
    lines = [
        "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H200) (0000:00:06.0) - 142612 MiB free",
        "load_tensors: offloaded 13/13 layers to GPU",
        "load_tensors:        CUDA0 model buffer size =   123.35 MiB",
        "load_tensors:    CUDA_Host model buffer size =  1214.50 MiB",
        "llama_context:  CUDA_Host  output buffer size =     0.12 MiB",
        "sched_reserve:      CUDA0 compute buffer size =    64.50 MiB",
    ]
    load = logs.load_log(lines)
    assert load.used == ("CUDA0",) and load.offloaded == (13, 13)
    assert load.pinned_mib == pytest.approx(1214.62)


# --- which devices worked ------------------------------------------------------------------------------------------


def _recorded(config: str, samples_file: Path = H200 / "samples.jsonl.gz"):
    """An H200 run's samples of one CONFIG (default: bench/recorders/gpu-bench.sh, 2026-12-01), as the sampler made them."""
    with gzip.open(samples_file, "rt") as handle:
        runs = [json.loads(line) for line in handle]
    for run in runs:
        if run["config"] != config:
            continue
        samples = [
            Sample(
                s["t"],
                tuple(EngineReading(**(e | {"slowdowns": tuple(e["slowdowns"])})) for e in s["engines"]),
                ProcessReading(**s["process"]) if s["process"] else None,
                counters=tuple(CounterReading(*c[:3]) for c in s.get("counters", ())),  # written since 2026-12-06
            )
            for s in run["samples"]
        ]
        yield run["round"], [logs.Phase(**p) for p in run["phases"]], samples


def test_the_cpu_decode_of_ngl_0_is_a_fallback_in_the_recorded_h200_samples():
    """-dev CUDA0 -ngl 0: the GPU read 0 % through every long decode (without the load log's evidence too)."""
    for _, phases, samples in _recorded("moe-ngl0"):
        decode = [p for p in phases if p.kind == "generation"]
        verdict = judge(decode, samples, [Placed("CUDA0", H200_PCI)], 0.1)
        assert verdict.validity is Validity.FALLBACK
        assert any(e.startswith("CUDA0 idle during generation (at most 0 %") for e in verdict.evidence)


def test_the_all_gpu_runs_in_the_recorded_h200_samples_are_never_called_fallbacks():
    judged = 0
    for name in ("cuda0", "vulkan0", "moe-gpu"):
        for _, phases, samples in _recorded(name):
            for test in {p.test for p in phases}:
                mine = [p for p in phases if p.test == test]
                verdict = judge(mine, samples, [Placed(name, H200_PCI)], 0.1)
                # a phase NVML can sample was seen working; one shorter than its period may be left unproven
                short = all(p.end - p.start < MIN_IDLE_SECONDS for p in mine)
                allowed = {Validity.VALID, Validity.UNPROVEN} if short else {Validity.VALID}
                assert verdict.validity in allowed, (name, test, verdict)
                judged += 1
    assert judged == 3 * 4 * 6


def test_the_same_decode_with_experts_on_the_cpu_waits_rather_than_falls_back():
    for _, phases, samples in _recorded("moe-cpu-experts"):
        decode = [p for p in phases if p.kind == "generation"]
        waited = judge(decode, samples, [Placed("CUDA0", H200_PCI, waits=True)], 0.1)
        assert Verdict.WAITING in {w.verdict for w in waited.work} and waited.validity is not Validity.FALLBACK
        # the same readings without the overrides behind them: an idle card is the fallback it then is
        assert judge(decode, samples, [Placed("CUDA0", H200_PCI)], 0.1).validity is Validity.FALLBACK


def _gpu(at: float, busy: float, pci: str = H200_PCI) -> Sample:
    return Sample(at, (EngineReading(pci, busy, 1000, 1980, 300.0),), None)


def test_a_phase_shorter_than_a_sampling_period_is_judged_over_its_test_s_timed_phases_or_left_unproven():
    """Issue #48: a busy reading before the timed phase (the load, llama-bench's untimed warm-up) counted as work."""
    phases = [logs.Phase(1, "generation", 10.0, 10.1), logs.Phase(1, "generation", 10.5, 10.6)]
    quiet = [_gpu(t / 10, 0.0) for t in range(95, 110)]
    assert judge(phases[:1], quiet, [Placed("CUDA0", H200_PCI)], 0.1).validity is Validity.UNPROVEN
    before = sorted([*quiet, _gpu(9.85, 60.0)])
    found = judge(phases[:1], before, [Placed("CUDA0", H200_PCI)], 0.1)
    assert found.validity is Validity.UNPROVEN and found.work[0].verdict is Verdict.TOO_SHORT
    # a reading in another repetition's phase of the same test (up to one interval after it: NVML's share looks back)
    inside = sorted([*quiet, _gpu(10.62, 60.0)])
    found = judge(phases, inside, [Placed("CUDA0", H200_PCI)], 0.1)
    assert found.validity is Validity.VALID and {w.verdict for w in found.work} == {Verdict.WORKED_OVER_TEST}


def test_a_gpu_outside_the_placement_that_works_is_a_fallback_and_one_nothing_reads_is_unproven():
    phase = logs.Phase(1, "prompt", 0.0, 2.0)
    samples = [
        Sample(t / 10, (EngineReading(H200_PCI, 80.0, 1, 1, 1.0), EngineReading("0000:00:07.0", 0.0, 1, 1, 1.0)), None)
        for t in range(1, 22)
    ]
    found = judge([phase], samples, [Placed("CUDA1", "0000:00:07.0")], 0.1)
    assert found.validity is Validity.FALLBACK
    assert found.evidence == (
        "CUDA1 idle during prompt (at most 0 % over 11 readings)",
        "GPU 0000:00:06.0, outside the placement, busy 80 % during prompt",
    )
    assert judge([phase], samples, [Placed("Vulkan0", None)], 0.1).validity is Validity.UNPROVEN


def test_the_cpu_side_is_judged_by_the_process_s_cpu_time():
    phase = logs.Phase(1, "generation", 0.0, 1.0)
    busy = [Sample(t / 10, (), ProcessReading(t / 10 * 2, {})) for t in range(12)]
    idle = [Sample(t / 10, (), ProcessReading(0.01, {})) for t in range(12)]
    assert judge([phase], busy, [Placed("CPU", None, on_cpu=True)], 0.1).validity is Validity.VALID
    assert judge([phase], idle, [Placed("CPU", None, on_cpu=True)], 0.1).validity is Validity.FALLBACK


def test_no_layer_offloaded_is_a_fallback_from_the_load_log_alone():
    load = logs.LoadLog(offloaded=(0, 13))
    found = judge([], [], [Placed("CUDA0", H200_PCI)], 0.1, load)
    assert found.validity is Validity.FALLBACK and "offloaded 0/13 layers" in found.evidence[0]


# --- statistics ----------------------------------------------------------------------------------------------------


def test_a_difference_inside_the_noise_is_none_and_a_clear_one_has_its_interval():
    same = stats.ratio([100, 104, 98, 101, 99], [99, 103, 100, 102, 97])
    assert same.within_noise and "inside the noise" in stats.compared(same, "A", "B")
    better = stats.ratio([100, 101, 99, 100, 100], [116, 117, 115, 116, 116])
    assert not better.within_noise and 1.14 < better.low < better.value < better.high < 1.18
    assert stats.compared(better, "A", "B") == f"A wins by {better.text()} over B"
    assert stats.ratio([100], [120]).low is None  # one sample each: no interval, never a claim
    assert stats.ratio([100], [120]).within_noise


@given(
    st.lists(st.floats(1, 1e5), min_size=2, max_size=8),
    st.lists(st.floats(1, 1e5), min_size=2, max_size=8),
)
def test_the_ratio_of_b_to_a_is_the_inverse_of_a_to_b(a, b):
    forward, backward = stats.ratio(a, b), stats.ratio(b, a)
    assert math.isclose(forward.value * backward.value, 1, rel_tol=1e-9)
    assert math.isclose(forward.low * backward.high, 1, rel_tol=1e-9)
    assert forward.low <= forward.value <= forward.high


def test_summary_keeps_the_spread_and_counts_outliers():
    summary = stats.summarize([100, 101, 99, 100, 160])
    assert summary.median == 100 and summary.outliers == 1 and summary.noisy
    assert stats.t975(4) == 2.776 and stats.t975(35) == 2.042 and stats.t975(5000) == 1.96


# --- rows ------------------------------------------------------------------------------------------------------------


def test_merged_timing_is_what_llama_bench_computes():
    row = rows.merge_timing({"n_prompt": 512, "n_gen": 0}, [10_000_000, 12_000_000])
    assert row["samples_ts"] == [51200.0, 42666.7]  # six significant digits, as llama-bench prints them
    assert row["avg_ts"] == pytest.approx((51200 + 42666.666) / 2)
    assert row["avg_ns"] == 11_000_000 and row["stddev_ns"] == 1414213


def test_the_h200_rows_compare_by_devices_and_give_the_verdicts_of_the_run():
    found = rows.read_rows([H200 / "rows.jsonl"])
    table = [entry.to_json() for entry in compare.compare(found, "devices")]
    tg = {e["devices"]: e for e in table if e["test"].startswith("tg128 @ d4096 [") and "moe" not in e["test"]}
    # issue #48: --by devices named no CONFIG, so rows of two CONFIGs looked alike; the test now says whose it is
    assert {e["test"] for e in tg.values()} == {
        "tg128 @ d4096 [cuda0]",
        "tg128 @ d4096 [vulkan0]",
        "tg128 @ d4096 [cuda0+vulkan0]",
    }
    # the base is Vulkan0, the first valid in every test (CUDA0 has one unproven row): CUDA0 is 1/1.27 of it
    assert tg["devices=Vulkan0"]["vs_baseline"] is None and tg["devices=CUDA0"]["baseline"] == "devices=Vulkan0"
    assert tg["devices=CUDA0"]["vs_baseline"]["ratio"] == pytest.approx(1 / 1.27, abs=0.01)
    assert not tg["devices=CUDA0"]["vs_baseline"]["within_noise"]
    devices_of = {"cuda0": 1, "vulkan0": 1, "cuda0+vulkan0": 2, "moe-gpu": 1, "moe-cpu-experts": 1, "moe-ngl0": 1}
    lines = verdicts.verdicts(found, devices_of)
    # the run's own verdicts, with the one row that sampling could not prove (cuda0 tg128 @ d0, too short) now named,
    # and inside the noise "cannot tell" (issue #48: "no difference" claimed what an interval of [1.00, 1.64] cannot)
    recorded = json.loads((H200 / "bench-summary.json").read_text())["verdicts"]
    unproven = "cannot tell vulkan0 from cuda0 (unproven) (1.00× [0.91, 1.11]: inside the noise)"
    guarded = "moe-cpu-experts [GGML_CUDA_NO_PINNED=1]"  # the environment bench set is beside the name it was set for
    expected = [
        re.sub(r"no difference between (\S+) and (\S+) \(", r"cannot tell \1 from \2 (", line)
        .replace("from cuda0 (1.00×", "from cuda0 (unproven) (1.00×")
        .replace("moe-cpu-experts", guarded)
        for line in recorded
    ]
    assert [*expected, f"moe-cpu-experts ran with GGML_CUDA_NO_PINNED=1: {verdicts.PINNING_GUARD}"] == lines
    assert f"tg128 @ d0 [dense.gguf]: {unproven}" in lines
    assert (
        "tg128 @ d4096 [dense.gguf]: split cuda0+vulkan0 is not worth it: 0.58× [0.56, 0.60] of the best single device vulkan0"
        in lines
    )
    assert not any("moe-ngl0" in line for line in lines)  # a fallback never wins


def test_one_config_alone_gets_no_verdict_and_one_usable_among_several_is_named():
    """Issue #35: one CONFIG alone was told "only cpu gave a usable result", as if others had failed."""
    found = rows.read_rows([H200 / "rows.jsonl"])
    alone = [r for r in found if r.config == "moe-gpu"]
    assert alone and verdicts.verdicts(alone, {"moe-gpu": 1}) == []
    beside_a_fallback = [r for r in found if r.config in ("moe-gpu", "moe-ngl0")]
    lines = verdicts.verdicts(beside_a_fallback, {"moe-gpu": 1, "moe-ngl0": 1})
    assert lines and all(line.endswith("only moe-gpu gave a usable result") for line in lines)


def test_a_row_read_is_written_back_exactly_as_it_was():
    """Rows are typed inside (Row, Meta) and JSON only at the edge: a file's rows survive the round trip whole, key
    order included, and a buildmgr part of another shape is one line naming the field."""
    lines = (H200 / "rows.jsonl").read_text().splitlines()
    for line, row in zip(lines, rows.read_rows([H200 / "rows.jsonl"]), strict=True):
        assert json.dumps(row.to_json()) == json.dumps(json.loads(line))
        assert row.validity is rows.Validity(json.loads(line)["buildmgr"]["validity"])


def test_a_buildmgr_row_of_another_shape_is_refused_naming_the_field(tmp_path):
    row = json.loads((H200 / "rows.jsonl").read_text().splitlines()[0])
    row["buildmgr"]["validity"] = "splendid"
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(UserError, match=re.escape("buildmgr.validity: expected one of 'valid', 'invalid: fallback'")):
        rows.read_rows([tmp_path / "r.jsonl"])


def test_two_runs_of_one_config_compare_by_their_files(tmp_path):
    """`--by _file`: the rows of two files, equal in every other field, against each other."""
    row = {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 50.0, "samples_ts": [49.0, 51.0], "devices": "auto"}
    (tmp_path / "a.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps(row | {"samples_ts": [99.0, 101.0]}) + "\n")
    table = compare.compare(rows.read_rows([tmp_path / "a.jsonl", tmp_path / "b.jsonl"]), "_file")
    assert [(e.value, e.baseline) for e in table] == [
        (f"_file={tmp_path / 'a.jsonl'}", f"_file={tmp_path / 'a.jsonl'}"),
        (f"_file={tmp_path / 'b.jsonl'}", f"_file={tmp_path / 'a.jsonl'}"),
    ]
    assert table[1].vs_baseline is not None and table[1].vs_baseline.value == pytest.approx(2.0, rel=0.01)


def test_llama_bench_s_own_json_and_jsonl_are_read(tmp_path):
    row = {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 50.0, "samples_ts": [49.0, 51.0], "devices": "auto"}
    (tmp_path / "a.json").write_text(json.dumps([row, row | {"devices": "none", "samples_ts": [25.0, 25.5]}]))
    (tmp_path / "b.jsonl").write_text(json.dumps(row | {"n_depth": 512}) + "\n")
    found = rows.read_rows([tmp_path / "a.json", tmp_path / "b.jsonl"])
    table = compare.compare(found, "devices")
    assert [(e.test, e.value, e.summary_median) for e in table] == [
        ("tg128 @ d0", "devices=auto", 50.0),
        ("tg128 @ d0", "devices=none", 25.25),
        ("tg128 @ d512", "devices=auto", 50.0),
    ]
    import csv

    # issue #35: cells held text (`0.5 %`, `—`, `baseline`); a spreadsheet reads numbers, and nothing as empty
    cells = list(csv.DictReader(compare.render(table, "devices", "csv").splitlines()))
    assert len(cells) == 3 and cells[0]["test"] == "tg128 @ d0" and cells[1]["devices"] == "devices=none"
    assert float(cells[0]["median_ts"]) == 50.0 and float(cells[0]["cv"]) == pytest.approx(2**0.5 / 50, rel=0.01)
    assert cells[0]["baseline"] == cells[0]["devices"] and cells[0]["vs_baseline"] == cells[0]["within_noise"] == ""
    assert float(cells[1]["vs_baseline"]) == pytest.approx(0.505, abs=0.01) and cells[1]["ci95_low"] == ""
    assert cells[1]["within_noise"] in ("true", "false") and cells[2]["j_per_token"] == "" and cells[2]["rows"] == "1"
    (tmp_path / "c.txt").write_text("hello")
    with pytest.raises(UserError, match="neither JSON nor JSONL"):
        rows.read_rows([tmp_path / "c.txt"])
    with pytest.raises(UserError, match="--by 'colour'"):
        compare.compare(found, "colour")


# --- samplers on recorded readings --------------------------------------------------------------------------------


def test_nvml_readings_recorded_on_the_h200_idle_and_busy():
    idle = json.loads((H200 / "nvml-idle.json").read_text())
    busy = json.loads((H200 / "nvml-busy.json").read_text())
    first = cuda_engines.nvml_reading(idle["readings"][0][0])
    assert first == EngineReading(H200_PCI, 0.0, 615, 345, 84.504, ())  # reason 0x1 (idle) is no slowdown
    assert min(cuda_engines.nvml_reading(r[0]).busy_percent for r in busy["readings"]) >= 50
    assert busy["users"] == [[13062, "llama-bench"]]  # the process the busy check named
    capped = idle["readings"][0][0] | {"clocks_event_reasons": 0x4 | 0x40, "power_limit_mw": 400000}
    assert cuda_engines.nvml_reading(capped).slowdowns == ("power cap", "thermal (hardware)")
    assert cuda_engines.power_limit_note(capped) == "GPU 00000000:00:06.0: power limit 400 W is below its default 700 W"
    assert cuda_engines.power_limit_note(idle["readings"][0][0]) is None


def test_amdgpu_sysfs_files_in_the_kernel_s_format(tmp_path):
    """amdgpu's documented files (Documentation/gpu/amdgpu/thermal.rst, kfd's proc dir); no AMD GPU was lent."""
    device = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:03:00.0"
    (device / "hwmon" / "hwmon4").mkdir(parents=True)
    files = {
        "vendor": "0x1002\n",
        "uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:03:00.0\n",
        "gpu_busy_percent": "87\n",
        "mem_info_vram_used": str(5 << 30) + "\n",
        "pp_dpm_sclk": "0: 500Mhz \n1: 2124Mhz *\n",
        "hwmon/hwmon4/power1_average": "212000000\n",
        "hwmon/hwmon4/power1_cap": "200000000\n",
        "hwmon/hwmon4/power1_cap_default": "303000000\n",
    }
    for name, text in files.items():
        (device / name).write_text(text)
    drm = tmp_path / "sys" / "class" / "drm" / "card1"
    drm.mkdir(parents=True)
    (drm / "device").symlink_to(device)
    (tmp_path / "sys" / "class" / "kfd" / "kfd" / "proc" / str(os.getpid())).mkdir(parents=True)
    source = hip_engines.SysfsEngines.open(tmp_path / "sys")
    assert source.read() == [EngineReading("0000:03:00.0", 87.0, 5120, 2124, 212.0, ())]
    assert source.users() == [(os.getpid(), Path("/proc/self/comm").read_text().strip())]
    assert source.limits() == ["GPU 0000:03:00.0: power cap 200 W is below its default 303 W"]
    assert source.counters({"0000:03:00.0"}) == []  # this kernel has no energy1_input: nothing to read alone
    assert hip_engines.SysfsEngines.open(tmp_path / "nothing") is None
    (device / "hwmon" / "hwmon4" / "energy1_input").write_text("123456789\n")  # µJ, on kernels that have it
    counted = hip_engines.SysfsEngines.open(tmp_path / "sys")
    assert counted.counters({"0000:03:00.0"}) == [("0000:03:00.0", 123456.789)]
    assert counted.counters({"0000:04:00.0"}) == []  # not a card of the placement
    assert counted.read()[0].energy_mj == 123456.789  # the samples' own reading agrees


def test_the_process_reader_on_this_process_and_the_services_scan(tmp_path):
    reading = read_process(os.getpid())
    assert reading.cpu_seconds > 0 and reading.memory_kib["VmRSS"] > 0 and "RssAnon" in reading.memory_kib
    fake = tmp_path / "proc"
    for pid, comm, argv in (
        (10, "ollama", b"/usr/bin/ollama\0serve\0"),
        (11, "python3", b"python3\0-m\0vllm.entrypoints\0"),
        (12, "bash", b"bash\0"),
    ):
        (fake / str(pid)).mkdir(parents=True)
        (fake / str(pid) / "comm").write_text(comm + "\n")
        (fake / str(pid) / "cmdline").write_bytes(argv)
    assert services(fake) == [(10, "ollama"), (11, "python3")]


def test_watch_hands_over_each_line_with_when_it_came_and_kills_at_the_timeout():
    script = "import sys, time\nprint('a', flush=True)\ntime.sleep(0.3)\nprint('b', file=sys.stderr, flush=True)\n"
    seen = []
    ran = proc.watch([sys.executable, "-c", script], timeout=30, on_line=lambda s, line, at: seen.append((s, line, at)))
    assert ran.ok and [(s, line) for s, line, _ in seen] == [("stdout", "a"), ("stderr", "b")]
    assert seen[0][2] < seen[1][2]  # each line with when it came, in order (no duration asserted)
    slow = proc.watch([sys.executable, "-c", "import time; print('x', flush=True); time.sleep(30)"], timeout=0.5)
    assert slow.timed_out and slow.stdout == "x\n"


def test_watch_reads_a_flood_of_lines_in_few_wake_ups_and_loses_none():
    """llama-bench -v prints a line for every CUDA graph it replays, thousands a second where the CPU computes
    between them; a reader woken once a line takes a CPU from llama.cpp's threads each time (the lead for issue #48's
    cuda0-fa, read at 0.8 of the hand run). A thousand lines a millisecond apart: every one, in order, in a few
    hundred reads at most."""
    script = (
        "import os, time\n"
        "for i in range(1000):\n"
        "    os.write(2, b'line %d\\r\\n' % i if i % 2 else b'line %d\\n' % i)\n"
        "    time.sleep(0.001)\n"
    )
    seen: list[tuple[str, float]] = []
    ran = proc.watch([sys.executable, "-c", script], timeout=60, on_line=lambda s, line, at: seen.append((line, at)))
    assert ran.ok and [line for line, _ in seen] == [f"line {i}" for i in range(1000)]
    assert ran.stderr.splitlines() == [f"line {i}" for i in range(1000)]
    reads = len({at for _, at in seen})
    assert reads < 400, reads
    # line ends as text mode reads them, split between two writes or at the very end
    for parts, lines, text in (
        ([b"a\r", b"\nb\rc"], ["a", "b", "c"], "a\nb\nc"),
        ([b"a\nabc\r"], ["a", "abc"], "a\nabc\n"),
        ([b"a\n", b"\r"], ["a", ""], "a\n\n"),
    ):
        script = f"import os, time\nfor part in {parts!r}:\n    os.write(1, part)\n    time.sleep(0.05)\n"
        got: list[str] = []
        ran = proc.watch(
            [sys.executable, "-c", script], timeout=30, on_line=lambda s, line, at, into=got: into.append(line)
        )
        assert (got, ran.stdout) == (lines, text), parts


# --- the command line ------------------------------------------------------------------------------------------------


def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path):
    env = make_env(tmp_path)
    not_gguf = tmp_path / "model.txt"
    not_gguf.write_text("hello")
    assert_user_error(buildmgr(env, "bench", "cpu"), "has no model")
    assert_user_error(buildmgr(env, "bench", "-m", str(not_gguf), "cpu"), "is not a GGUF model")
    assert_user_error(buildmgr(env, "bench", "-m", str(tmp_path / "none.gguf"), "cpu"), "does not exist")
    assert_user_error(buildmgr(env, "bench", "-m", str(not_gguf)), "name at least one CONFIG")
    assert_user_error(buildmgr(env, "bench", "-m", str(not_gguf), "cpu --bogus 1"), "--bogus is not")
    assert_user_error(buildmgr(env, "bench", "--compare", str(not_gguf)), "neither JSON nor JSONL")
    assert_user_error(buildmgr(env, "bench", "--compare", str(H200 / "rows.jsonl"), "--by", "colour"), "--by 'colour'")
    assert_user_error(buildmgr(env, "bench", "-m", str(not_gguf), "-r", "1", "cpu"), "-r 1: at least 2")
    assert_user_error(buildmgr(env, "bench", "-m", str(not_gguf), "--runs", "0", "cpu"), "--runs 0: at least 1")
    assert_user_error(buildmgr(env, "bench", "-m", str(not_gguf), "--rank", "ts", "cpu"), "--rank: only with")
    assert not (tmp_path / "data").exists()


def test_compare_ranks_by_energy_per_token_as_well_as_throughput():
    found = rows.read_rows([H200_31 / "rows.jsonl"])
    as_read = [(e.test, e.value) for e in compare.compare(found, "config")]
    by_ts = [(e.test, e.value) for e in compare.compare(found, "config", rank="ts")]
    by_energy = {e.test: e for e in compare.compare(found, "config", rank="j_per_token") if e.value == "vk0"}
    assert as_read[:4] == [
        ("pp512 @ d0", "cuda0"),
        ("pp512 @ d0", "vk0"),
        ("tg128 @ d0", "cuda0"),
        ("tg128 @ d0", "vk0"),
    ]
    # on the H200 at d4096, Vulkan0 decoded faster (695 vs 515 t/s) and for less energy (0.57 vs 0.86 J/token);
    # at d0 CUDA0 decoded faster (780 vs 761) but Vulkan0 spent less (0.43 vs 0.49 J/token)
    assert by_ts.index(("tg128 @ d0", "cuda0")) < by_ts.index(("tg128 @ d0", "vk0"))
    ranked = [(e.test, e.value) for e in compare.compare(found, "config", rank="j_per_token")]
    assert ranked.index(("tg128 @ d0", "vk0")) < ranked.index(("tg128 @ d0", "cuda0"))
    assert by_energy["tg128 @ d4096"].j_per_token == pytest.approx(0.57044)
    assert by_energy["pp512 @ d0"].j_per_token is None  # no row of it could read its energy: ranked last, not zero


def test_a_plot_without_matplotlib_is_refused_before_anything_runs(tmp_path):
    blocker = tmp_path / "blocker"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = make_env(tmp_path, PYTHONPATH=os.pathsep.join([str(blocker), *sys.path]))
    result = buildmgr(env, "bench", "--compare", str(H200 / "rows.jsonl"), "--plot", str(tmp_path / "p.png"))
    assert_user_error(result, "pip install 'buildmgr[plot]'")
    assert not (tmp_path / "p.png").exists()


def test_compare_plots_the_h200_rows(tmp_path):
    result = buildmgr(
        make_env(tmp_path),
        "bench",
        "--compare",
        str(H200 / "rows.jsonl"),
        "--plot",
        str(tmp_path / "p.png"),
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {tmp_path / 'p.png'}" in result.stderr  # issue #35: it printed no plot line
    table = json.loads(result.stdout)
    assert {e["validity"] for e in table if e["config"] == "moe-ngl0"} == {"invalid: fallback"}


def test_each_row_is_compared_with_the_first_valid_config_on_its_own_model():
    """Issue #48: the baseline was the first CONFIG even when it fell back. cuda0 came first on the dense model but
    one of its rows is unproven (tg128 @ d0 too short to sample), so vulkan0, whose rows are all valid, is the base."""
    from buildmgr.bench.aggregate import with_baseline as _with_baseline

    found = _with_baseline(rows.read_rows([H200 / "rows.jsonl"]))
    baselines = {(r.meta.config, r.meta.baseline) for r in found}
    assert ("moe-ngl0", "moe-gpu") in baselines and ("cuda0", "vulkan0") in baselines
    assert all(r.meta.vs_baseline is None for r in found if r.meta.config in ("vulkan0", "moe-gpu"))
    fell_back = [r for r in found if r.config == "moe-ngl0"]
    reordered = _with_baseline(fell_back + [r for r in found if r.config != "moe-ngl0"])
    assert {r.meta.baseline for r in reordered if r.config == "moe-ngl0"} == {"moe-gpu"}  # first, but fell back
    with pytest.raises(UserError, match="--baseline 'devices=CUDA9' is no value of --by devices"):
        compare.compare(found, "devices", "devices=CUDA9")


def test_one_run_each_is_never_called_a_difference_or_none():
    one = stats.ratio([100.0], [250.0])
    assert stats.compared(one, "B", "A") == "B ahead of A by 2.50× in one run each: too few runs to tell"


def test_a_single_thread_on_a_loaded_host_is_not_an_idle_cpu_and_a_tick_is_not_a_rate():
    phase = logs.Phase(1, "prompt", 0.0, 1.0)
    one_thread_slowed = [Sample(t / 10, (), ProcessReading(t / 10 * 0.4, {})) for t in range(12)]
    assert judge([phase], one_thread_slowed, [Placed("CPU", None, on_cpu=True)], 0.1).validity is Validity.VALID
    short = logs.Phase(1, "prompt", 0.0, 0.03)
    no_tick_yet = [Sample(t / 100, (), ProcessReading(0.5, {})) for t in range(4)]
    assert judge([short], no_tick_yet, [Placed("CPU", None, on_cpu=True)], 0.01).validity is Validity.UNPROVEN


def test_a_gpu_whose_utilisation_nvml_cannot_read_is_not_readable_rather_than_too_short():
    phase = logs.Phase(1, "generation", 0.0, 3.0)
    no_util = [Sample(t / 10, (EngineReading(H200_PCI, None, 1000, 1980, 300.0),), None) for t in range(1, 32)]
    found = judge([phase], no_util, [Placed("CUDA0", H200_PCI)], 0.1)
    assert found.validity is Validity.UNPROVEN and found.evidence == ("CUDA0: not readable (generation)",)


def test_a_plot_of_one_depth_has_that_depth_as_its_only_tick():
    """Issue #35: a single-depth plot had an x-axis from -0.04 to 0.04; the axis marks only the depths measured."""
    from buildmgr.bench import plot

    found = rows.read_rows([H200 / "rows.jsonl"])
    for kept in ({0}, {0, 4096}):
        figure = plot.draw([r for r in found if (r.fields.get("n_depth") or 0) in kept])
        for axis in figure.axes:
            assert sorted(axis.get_xticks()) == sorted(kept)
            low, high = axis.get_xlim()
            assert low < min(kept) and max(kept) < high


def test_an_empty_depth_and_an_unwritable_plot_are_refused_before_anything(tmp_path):
    env = make_env(tmp_path)
    assert_user_error(buildmgr(env, "bench", "--depth", "", "-m", str(tmp_path / "m.gguf"), "cpu"), "--depth ''")
    not_a_dir = tmp_path / "notes.txt"
    not_a_dir.write_text("a file where a directory was meant")
    result = buildmgr(env, "bench", "--compare", str(H200 / "rows.jsonl"), "--plot", str(not_a_dir / "p.png"))
    assert_user_error(result, "notes.txt is not a directory")
    assert result.stdout == ""


def test_samples_ts_keep_the_precision_their_mean_needs_at_low_speeds():
    """At 1.7 t/s, two decimals moved the samples' mean 0.2 % off avg_ts (seen on a loaded CI machine)."""
    from buildmgr.bench.rows import merge_timing

    row = merge_timing({"n_prompt": 0, "n_gen": 32}, [18_074_000_000, 18_130_000_000])
    assert row["avg_ts"] == pytest.approx(sum(row["samples_ts"]) / 2, rel=1e-5)


# --- issue #31: steady state and the first repetition, shares, hosts, the limit and energy ------------------------

# llama-bench -r 5 by hand on the H200 (issue #31): CUDA0 pp512 @ d0, the first repetition half of steady state
CUDA0_PP512 = (27090.0, 53562.0, 53818.0, 54088.0, 54978.0)


def _row(config: str, runs: list[list[float]], first: list[float] | None = None, **fields: object) -> rows.Row:
    steady = [v for run in runs for v in run]
    base = {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "devices": config, "samples_ts": steady} | fields
    meta = rows.Meta(
        rows.SCHEMA, config, "", "b", None, {}, {}, {}, Validity.VALID, (), stats.summarize(steady).to_json(), False,
        first_ts=tuple(first or ()), runs_ts=tuple(tuple(r) for r in runs),
    )  # fmt: skip
    return rows.Row(base, meta)


def test_steady_state_decides_the_verdict_and_the_first_repetition_is_said_apart():
    """The 12-01 verdict 'vk0 wins by 1.77×' came from first repetitions alone; steady state says CUDA0 is faster."""
    from buildmgr.bench.aggregate import _first_apart

    assert cfg.Workload().args()[6:8] == ["-r", "6"]  # several repetitions per process, not -r 1
    cuda = _row("cuda0", [list(CUDA0_PP512[1:]), [53400.0, 53900.0, 54200.0, 54500.0]], [27090.0, 26500.0])
    vk = _row("vk0", [[47100.0, 47300.0, 46900.0, 47000.0], [46800.0, 47200.0, 47400.0, 47100.0]], [47000.0, 46900.0])
    [line] = verdicts.verdicts([cuda, vk], {"cuda0": 1, "vk0": 1})
    assert line.startswith("pp512 @ d0: cuda0 wins by 1.1")
    assert _first_apart(list(cuda.meta.first_ts), rows.samples(cuda)) == (
        "first repetition 0.50× of steady state: warm-up inside the process"
    )
    assert _first_apart(list(vk.meta.first_ts), rows.samples(vk)) is None


def test_the_process_is_the_unit_so_one_process_each_has_no_interval_however_tight_its_samples():
    a = _row("a", [[100.0, 100.2, 99.8, 100.1, 99.9]])
    b = _row("b", [[120.0, 120.1, 119.9, 120.2, 119.8]])
    [_, other] = compare.compare([a, b], "config")
    assert other.vs_baseline is not None and other.vs_baseline.low is None  # no tight interval from one process
    three = [
        _row("a", [[100.0, 100.1], [100.4, 100.5], [99.6, 99.7]]),
        _row("b", [[101, 101.1], [99, 99.1], [130, 130.1]]),
    ]
    [_, spread] = compare.compare(three, "config")
    assert spread.vs_baseline is not None and spread.vs_baseline.within_noise  # processes disagree: wide


def _load(offloaded: int, gpu_mib: float, cpu_mib: float) -> logs.LoadLog:
    return logs.load_log(
        [
            f"load_tensors: offloaded {offloaded}/17 layers to GPU",
            f"load_tensors:        CUDA0 model buffer size = {gpu_mib:8.2f} MiB",
            f"load_tensors:   CPU_Mapped model buffer size = {cpu_mib:8.2f} MiB",
        ]
    )


def test_partial_offload_is_judged_against_its_share_and_a_full_one_idle_is_a_fallback():
    """-dev CUDA0 -ngl 4 on the H200 decoded with CUDA0 at about 1 % in every reading (issue #31)."""
    decode = logs.Phase(1, "generation", 0.0, 6.0)
    quiet = [_gpu(t / 10, 1.0) for t in range(1, 62)]
    roles = [Placed("CUDA0", H200_PCI)]
    four = _load(4, 450.0, 1450.0)
    shares = {"CUDA0": 0.004, "CPU": 0.996}  # 4/17 of the weights at 4.9 TB/s beside the rest at ~60 GB/s
    found = judge([decode], quiet, roles, 0.1, four, expected=shares)
    assert found.validity is Validity.UNPROVEN
    assert found.evidence == (
        "CUDA0 holds 4/17 layers: idle readings during generation (at most 1 %) cannot show an expected 0.4 % of the time",
    )
    assert judge([decode], quiet, roles, 0.1, four).validity is Validity.UNPROVEN  # share unknown: not proven either
    # a share sampling can see, read idle, is a fallback; so is the whole model on a card that stayed idle
    assert judge([decode], quiet, roles, 0.1, four, expected={"CUDA0": 0.6}).validity is Validity.FALLBACK
    assert judge([decode], quiet, roles, 0.1, _load(17, 1800.0, 125.0)).validity is Validity.FALLBACK


def test_rows_of_two_hosts_are_never_pooled_and_compare_by_host():
    h200 = rows.HostRow("gpu-a", "Xeon", (rows.CardRow("NVIDIA H200", H200_PCI, "570.1", 4916.7, "NVML"),), 60.0, "m")
    rtx = rows.HostRow(
        "gpu-b", "Ryzen", (rows.CardRow("NVIDIA GeForce RTX 3090", "0000:01:00.0", "570.1", 936.2, "NVML"),), 40.0, "m"
    )
    import dataclasses

    a = _row("cuda0", [[600.0, 601.0], [602.0, 603.0]], n_gen=128, n_prompt=0)
    b = dataclasses.replace(a, meta=dataclasses.replace(a.meta, host=h200))
    c = _row("cuda0", [[150.0, 151.0], [152.0, 151.5]], n_gen=128, n_prompt=0)
    c = dataclasses.replace(c, meta=dataclasses.replace(c.meta, host=rtx))
    by_config = compare.compare([b, c], "config")
    assert [(e.value, e.n, e.vs_baseline) for e in by_config] == [("cuda0", 4, None), ("cuda0", 4, None)]
    by_host = compare.compare([b, c], rows.HOST)
    assert by_host[0].value.startswith("gpu-a (Xeon; NVIDIA H200 0000:00:06.0 570.1)")
    assert by_host[1].vs_baseline is not None and by_host[1].vs_baseline.value == pytest.approx(0.25, rel=0.01)


def test_the_bandwidth_limit_of_a_decode_from_what_each_device_holds_and_its_kv_cache():
    from buildmgr.bench import limit

    card = cuda_engines.card_facts({"bus_id": "00000000:00:06.0", "name": "NVIDIA H200", "driver": "570.1",
                                    "max_memory_clock_mhz": 3201, "memory_bus_width_bits": 6144})  # fmt: skip
    assert (card.pci_bus_id, card.peak_gbs) == (H200_PCI, 4916.7)
    lines = [
        "llama-bench: benchmark 2/2: starting",
        "load_tensors: offloaded 11/11 layers to GPU",
        "load_tensors:        CUDA0 model buffer size =  1000.00 MiB",
        "load_tensors:   CPU_Mapped model buffer size =   125.00 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =   200.00 MiB",
        "llama_kv_cache: size =  200.00 MiB (  4352 cells,  10 layers,  1/1 seqs), K (f16):  100.00 MiB, V (f16):  100.00 MiB",
    ]
    load = logs.load_log(lines)
    held = limit.holdings(load, ["CUDA0"])
    assert [(h.device, h.share) for h in held] == [("CUDA0", 0.8889), ("CPU", 0.1111)]
    embeddings = limit.ModelBytes((("token_embd.weight", 125 << 20, 32000), ("output.weight", 125 << 20, 32000)), 1.0)
    read = limit.read_per_token(held, load, 2, 4096, 128, embeddings)  # the CPU holds only the embeddings
    assert read == {"CUDA0": pytest.approx((1000 + 200 * 4160 / 4352) * 1.048576, abs=0.01), "CPU": 0.0}
    found = limit.decode_limit(read, {"CUDA0": (card.peak_gbs, card.peak_basis)}, median=2000.0)
    assert found.limit_ts == pytest.approx(4916.7 / (read["CUDA0"] / 1000), rel=1e-3)
    assert found.percent == pytest.approx(2000.0 / found.limit_ts * 100, abs=0.1)
    unknown = limit.decode_limit({"ROCm0": 900.0}, {"ROCm0": (None, "amdgpu's sysfs states no memory bus width")}, 1.0)
    assert (
        unknown.limit_ts is None
        and unknown.unknown == "no peak bandwidth for ROCm0: amdgpu's sysfs states no memory bus width"
    )


def test_energy_per_token_from_a_counter_and_unreadable_for_phases_too_short():

    def reading(at: float) -> Sample:  # 300 W: 30 J per 0.1 s
        return Sample(at, (EngineReading(H200_PCI, 90.0, 1000, 1980, 300.0, (), 1e6 + at * 300_000),), None)

    long_ = [logs.Phase(1, "generation", 0.0, 2.0)]
    [found] = energy.per_card(long_, [reading(t / 10) for t in range(21)], {"CUDA0": H200_PCI}, {"generation": 128})
    assert found.joules == pytest.approx(600.0) and found.j_per_token == pytest.approx(600 / 128, rel=1e-4)
    short = [logs.Phase(1, "generation", 0.0, 0.15)]
    [none] = energy.per_card(short, [reading(t / 10) for t in range(3)], {"CUDA0": H200_PCI}, {"generation": 128})
    assert none.joules is None and none.too_short and "its update period swamps" in (none.unknown or "")


def test_a_device_without_a_pci_id_is_not_read_through_the_cpu_s_counter():
    """A Vulkan or Metal device ggml gives no PCI id: no vendor library reads its energy. The CPU's RAPL counter is
    the CPU's alone; read for that device too it was counted twice, and the row's J/token looked whole."""
    from buildmgr.bench import limit

    def reading(at: float) -> Sample:  # the CPU packages at 50 W
        return Sample(at, (), None, 1e6 + at * 50_000)

    phases = [logs.Phase(1, "generation", 0.0, 2.0)]
    found = energy.per_card(
        phases, [reading(t / 10) for t in range(21)], {"Vulkan0": None, limit.CPU: None}, {"generation": 64}
    )
    by_device = {e.device: e for e in found}
    assert by_device[limit.CPU].joules == pytest.approx(100.0)
    assert by_device["Vulkan0"].joules is None and "no PCI id" in (by_device["Vulkan0"].unknown or "")


def test_the_cpu_bandwidth_is_measured_once_per_host_and_kept(tmp_path):
    first = bandwidth.cpu_bandwidth(tmp_path, "h", "cpu")
    assert first.gbs is not None and first.gbs > 0 and first.basis.startswith("measured here")
    kept = json.loads((tmp_path / bandwidth.FILE).read_text())
    [key] = kept
    kept[key]["gbs"] = 12345.0
    (tmp_path / bandwidth.FILE).write_text(json.dumps(kept))
    assert bandwidth.cpu_bandwidth(tmp_path, "h", "cpu").gbs == 12345.0  # read back, not measured again
    again = bandwidth.cpu_bandwidth(tmp_path, "h", "cpu", again=True)  # asked: measured again, and kept
    assert again.gbs != 12345.0 and json.loads((tmp_path / bandwidth.FILE).read_text())[key]["gbs"] == again.gbs
    # issue #48: one taken while other work kept the CPUs busy was kept, and every later limit took it
    busy = bandwidth.cpu_bandwidth(tmp_path / "other", "h", "cpu", busy=True)
    assert busy.basis.endswith("while the host was busy with other work: low, and not kept")
    assert not (tmp_path / "other" / bandwidth.FILE).exists()


H200_31 = FIXTURES / "h200" / "bench31"  # bench/recorders/gpu-bench-steady.sh, 2026-12-02 (issue #31)


def test_the_recorded_h200_partial_offload_is_unproven_by_its_share_and_ngl_0_a_fallback():
    """-dev CUDA0 -ngl 4 and -ngl 0 on the H200, replayed: the same near-idle CUDA0 readings are no evidence of a
    fallback when the card holds 4 of 17 layers, and they are when it holds none."""
    from buildmgr.bench import limit

    with gzip.open(H200_31 / "samples-partial.jsonl.gz", "rt") as handle:
        runs = [json.loads(line) for line in handle]
    recorded = {json.loads(line)["buildmgr"]["config"]: json.loads(line) for line in
                (H200_31 / "rows-partial.jsonl").read_text().splitlines() if json.loads(line)["n_gen"]}  # fmt: skip
    judged = {}
    for run in runs:
        row = recorded[run["config"]]["buildmgr"]
        samples = [
            Sample(
                s["t"], tuple(EngineReading(**(e | {"slowdowns": tuple(e["slowdowns"])})) for e in s["engines"]), None
            )
            for s in run["samples"]
        ]
        decode = [logs.Phase(**p) for p in run["phases"] if p["kind"] == "generation"]
        load = logs.LoadLog(offloaded=tuple(row["host_memory"]["load_log"]["layers_offloaded"]))
        read = {h["device"]: h["weights_mib"] for h in row["holds"]}
        host = row["host"]
        bandwidth = {"CUDA0": (host["cards"][0]["peak_gbs"], ""), "CPU": (host["cpu_gbs"], "")}
        shares = limit.time_shares(read, bandwidth)
        found = judge(decode, samples, [Placed("CUDA0", H200_PCI)], 0.1, load, expected=shares)
        judged.setdefault(run["config"], set()).add(found.validity)
        if run["config"] == "ngl4":
            assert found.evidence[0].startswith("CUDA0 holds 4/17 layers: idle readings during generation")
            assert (
                judge(decode, samples, [Placed("CUDA0", H200_PCI)], 0.1).validity is Validity.FALLBACK
            )  # the old rule
    assert judged["ngl4"] == {Validity.UNPROVEN} and judged["ngl0"] == {Validity.FALLBACK}
    assert Validity.FALLBACK not in judged["all"]  # all 17 layers on CUDA0: short decodes, never idle


def test_the_recorded_h200_rows_keep_steady_state_first_repetitions_limit_and_energy_apart():
    """What this code makes of the run's own numbers: the first-repetition note from its first and steady samples, and
    each decode's limit from the bytes and bandwidths it recorded (not the fields as the file states them)."""
    from buildmgr.bench.aggregate import _first_apart

    found = rows.read_rows([H200_31 / "rows.jsonl"])
    cuda_pp = next(r for r in found if r.config == "cuda0" and rows.test_name(r.fields) == "pp512 @ d0")
    assert _first_apart(list(cuda_pp.meta.first_ts), rows.samples(cuda_pp)) == (
        "first repetition 0.47× of steady state: warm-up inside the process"
    )
    hand = [json.loads(line) for line in (H200_31 / "CUDA0-r5.jsonl").read_text().splitlines()]
    assert hand[0]["samples_ts"][0] < 0.6 * min(hand[0]["samples_ts"][1:])  # llama-bench's own first repetition
    for row in found:
        if row.fields["n_gen"] and not row.fields["n_prompt"]:
            recorded = row.meta.limit
            bandwidth = {d: (g, "recorded") for d, g in recorded.bandwidth_gbs.items()}
            again = limit.decode_limit(recorded.read_mb, bandwidth, statistics.median(rows.samples(row)))
            assert again.limit_ts == pytest.approx(row.meta.limit_ts, rel=1e-3) and 0 < again.percent < 100


def test_virtual_devices_are_judged_by_their_card_s_engines():
    """GGML_CUDA_DEVICES=2 on one H200 (fixtures/h200/virtual34): NVML reads the card, 0000:00:06.0; the two devices
    are 0000:00:06.0-v0 and -v1. Both must be read through the card, never 'not readable'."""
    from buildmgr.bench.prepare import roles_for
    from buildmgr.devices.probe import api_devices

    records = (FIXTURES / "h200" / "virtual34" / "api-virtual.json").read_text()
    devices, _ = api_devices(proc.Ran(0, records, "", 1.0))
    assert devices is not None and [d.pci_bus_id for d in devices] == ["0000:00:06.0-v0", "0000:00:06.0-v1"]
    roles = roles_for(["CUDA0", "CUDA1"], {d.name: d for d in devices}, False)
    assert [r.pci_bus_id for r in roles] == [H200_PCI, H200_PCI]
    for _, phases, samples in _recorded("cuda0"):  # the card's real NVML samples of a run on it
        verdict = judge(phases, samples, roles, 0.1)
        assert {w.device for w in verdict.work} == {"CUDA0", "CUDA1"}
        assert {w.verdict for w in verdict.work} <= {
            Verdict.WORKED,
            Verdict.WORKED_OVER_TEST,
        }  # both read as the card
        break


SPLITS_33 = (
    FIXTURES / "h200" / "splits33"
)  # bench/recorders/gpu-splits.sh on one H200 with GGML_CUDA_DEVICES=2 (issue #33)


def test_two_names_of_one_card_count_its_energy_once():
    """The recorded split over CUDA0,CUDA1 (two virtual devices of one H200) and CUDA0,Vulkan0 (one card under two
    backends' names): NVML's counter is the card's, so it is one entry naming both devices. Read once per name, the
    row said 1.32 J/token against one device's 0.62 at the same decode speed."""
    from buildmgr.bench import limit

    def decode_rows(name: str) -> dict[str, dict]:
        with gzip.open(SPLITS_33 / name, "rt") as handle:
            recorded = [json.loads(line) for line in handle]
        return {r["buildmgr"]["config"]: r["buildmgr"] for r in recorded if r["n_gen"] and not r["n_prompt"]
                and r["n_depth"] == 0 and r["buildmgr"]["validity"] == "valid"}  # fmt: skip

    before, after = decode_rows("rows.jsonl.gz"), decode_rows("rows-fixed.jsonl.gz")  # the second: this code's run
    assert before["layer"]["j_per_token"] / before["one"]["j_per_token"] > 2  # as it was measured: counted twice
    assert after["layer"]["j_per_token"] / after["one"]["j_per_token"] < 1.1
    assert [e["device"] for e in after["cross"]["energy"]] == ["CUDA0+Vulkan0", "CPU"]
    for config, names in (("layer", ("CUDA0", "CUDA1")), ("cross", ("CUDA0", "Vulkan0"))):
        for _, phases, samples in _recorded(config, SPLITS_33 / "samples.jsonl.gz"):
            tg = [p for p in phases if p.kind == "generation" and p.test == 2]
            alone = energy.per_card(tg, samples, {"CUDA0": H200_PCI}, {"generation": 128})
            both = energy.per_card(tg, samples, dict.fromkeys(names, H200_PCI) | {limit.CPU: None}, {"generation": 128})
            cards = [e for e in both if e.device != limit.CPU]
            assert [e.device for e in cards] == ["+".join(names)]
            assert cards[0].joules == alone[0].joules and cards[0].j_per_token == alone[0].j_per_token


def test_compare_reads_utf16_and_bom_json_and_refuses_bytes_that_are_not_text(tmp_path):
    """Issue #35: what a PowerShell redirect writes (UTF-16 with a BOM) and a UTF-8 BOM are llama-bench's JSON as
    well; a binary file or one stray 0xFF byte is one line, exit 2, never a traceback."""
    env = make_env(tmp_path)
    real = FIXTURES / "h200" / "bench31" / "CUDA0-r5.jsonl"
    text = real.read_text()
    want = buildmgr(env, "bench", "--compare", str(real), "--format", "json")
    assert want.returncode == 0, want.stderr
    for name, data in (("utf16.jsonl", text.encode("utf-16")), ("bom.jsonl", b"\xef\xbb\xbf" + text.encode())):
        (tmp_path / name).write_bytes(data)
        got = buildmgr(env, "bench", "--compare", str(tmp_path / name), "--format", "json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == json.loads(want.stdout)
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "ff.jsonl").write_bytes(text.encode()[:200] + b"\xff" + text.encode()[200:])
    for name in ("binary.bin", "ff.jsonl"):
        assert_user_error(buildmgr(env, "bench", "--compare", str(tmp_path / name)), name, "not text")
    assert_user_error(buildmgr(env, "bench", "--compare", str(tmp_path)), "is a directory")
    assert_user_error(
        buildmgr(env, "bench", "-m", str(real), "--config-file", str(tmp_path / "binary.bin")), "binary.bin", "not text"
    )


def test_a_model_that_is_a_directory_is_named_as_one(tmp_path):
    """Issue #35: it said 'does not exist'."""
    assert_user_error(buildmgr(make_env(tmp_path), "bench", "-m", str(tmp_path), "cpu"), "is a directory")


def test_a_cpu_busy_with_other_work_makes_the_host_busy():
    """Issue #35: two identical runs a minute apart gave 11,100 and 4.2 t/s, unwarned. The real race: a busy loop on
    every core while bench looks at the host."""
    import subprocess
    import sys

    from buildmgr.bench.prepare import busy_host

    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)  # running, not starting
        found = busy_host([], 0.1)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert any(f.startswith("the CPUs are ") and "busy with other work" in f for f in found), found


def test_a_plot_into_a_folder_that_does_not_exist_is_refused_and_nothing_made(tmp_path):
    """Issue #35: `--plot /nonexist/dir/p.png` created /nonexist/dir."""
    target = tmp_path / "nonexist" / "dir" / "p.png"
    result = buildmgr(make_env(tmp_path), "bench", "--compare", str(H200 / "rows.jsonl"), "--plot", str(target))
    assert_user_error(result, "is not a directory")
    assert not (tmp_path / "nonexist").exists()


def test_one_statistic_ranks_and_compares_so_a_winner_never_wins_by_less_than_one():
    """Issue #48: the winner was the highest pooled median while its ratio used process means: 'A wins by 0.90×'. Here
    a's pooled median is higher (one fast process of many samples), b's processes are faster on the whole."""
    a = _row("a", [[130.0] * 9, [80.0, 80.0], [80.0, 80.0]])
    b = _row("b", [[110.0] * 2, [110.0] * 2, [111.0] * 2])
    assert statistics.median(rows.samples(a)) > statistics.median(rows.samples(b))
    [line] = verdicts.verdicts([a, b], {"a": 1, "b": 1})
    assert line.startswith("pp512 @ d0: ") and ("b wins by" in line or "cannot tell b from a" in line)


def test_a_split_inside_the_noise_cannot_be_told_and_one_run_each_is_only_too_few_runs():
    single = _row("single", [[100.0, 101.0], [99.0, 100.0], [98.0, 103.0]])
    noisy_split = _row("split", [[90.0, 91.0], [104.0, 105.0], [99.0, 97.0]])
    lines = verdicts.verdicts([single, noisy_split], {"single": 1, "split": 2})
    assert lines[-1].startswith("pp512 @ d0: split split cannot be told from the best single device single (")
    assert not any("not worth it" in line or "beats" in line for line in lines)
    one = verdicts.verdicts([_row("single", [[100.0]]), _row("split", [[60.0]])], {"single": 1, "split": 2})
    assert one[-1] == (
        "pp512 @ d0: split split against the best single device single: 0.60× in one run each: too few runs to tell"
    )
    assert not any("not worth it" in line for line in one)
    slower = _row("split", [[60.0, 61.0], [59.0, 60.0], [61.0, 60.0]])
    assert "split split is not worth it: 0.60×" in verdicts.verdicts([single, slower], {"single": 1, "split": 2})[-1]


def test_an_unproven_or_partial_winner_says_so_and_the_worst_state_is_one_definition():
    from buildmgr.bench.judge import worst

    fast = _row("fast", [[200.0, 201.0], [199.0, 200.0]])
    fast = dataclasses.replace(fast, meta=dataclasses.replace(fast.meta, validity=Validity.UNPROVEN))
    slow = _row("slow", [[100.0, 101.0], [99.0, 100.0]])
    [line] = verdicts.verdicts([fast, slow], {"fast": 1, "slow": 1})
    assert line.startswith("pp512 @ d0: fast (unproven) wins by 2.00×")
    assert worst([Validity.VALID, Validity.UNPROVEN, Validity.FALLBACK]) is Validity.FALLBACK
    assert worst([Validity.VALID, Validity.PARTIAL, Validity.UNPROVEN]) is Validity.PARTIAL
    assert worst([]) is None


def test_the_environment_bench_set_is_beside_the_config_in_the_table_and_what_allow_pinned_cost_is_said():
    """Issue #48: GGML_CUDA_NO_PINNED=1 appeared only in the JSON's env_set, while it cost 0.67× against a hand run."""
    from buildmgr.bench.aggregate import pinned_notes
    from buildmgr.bench.prepare import Planned

    found = rows.read_rows([H200 / "rows.jsonl"])
    table = compare.compare(found, "config")
    markdown = compare.render(table, "config", "md")
    assert "| moe-cpu-experts [GGML_CUDA_NO_PINNED=1] |" in markdown and "| moe-gpu [" not in markdown
    guarded = [e.to_json() for e in table if e.value == "moe-cpu-experts"]
    assert guarded and all(e["env_set"] == {"GGML_CUDA_NO_PINNED": "1"} for e in guarded)
    assert "GGML_CUDA_NO_PINNED=1" in compare.render(table, "config", "csv")
    experts = next(r for r in found if r.config == "moe-cpu-experts")
    pinned = dataclasses.replace(
        experts, meta=dataclasses.replace(experts.meta, host_memory={"load_log": {"pinned_host_mib": 812.4}})
    )
    config = cfg.parse_config("moe-cpu-experts=cuda -dev CUDA0 -ot exps=CPU")
    plan = Planned(config, None, Path("m.gguf"), (), {}, {}, (), {"GGML_CUDA_NO_PINNED": "1"})  # type: ignore[arg-type]
    assert pinned_notes([plan], [pinned], allowed=True) == [
        "--allow-pinned: moe-cpu-experts page-locked 812 MiB of host memory (not swappable while it ran)"
    ]
    assert pinned_notes([plan], [pinned], allowed=False) == []


def test_a_warm_up_process_runs_first_and_is_kept_apart_from_the_timed_ones():
    """Issue #48: Vulkan0's first process compiled its pipelines, and pp512 @ d0 pooled it: CV 42 %, no answer."""
    from buildmgr.bench.aggregate import _warm_apart

    assert cfg.Workload().warmup == 1
    steady = [47100.0, 47300.0, 46900.0, 47000.0]
    assert _warm_apart([20800.0, 21900.0, 22400.0], steady) == (
        "warm-up process 0.47× of steady state: a first process pays what later ones do not"
    )
    assert _warm_apart([47050.0, 47200.0], steady) is None
    configs = [cfg.parse_config("cpu")]
    request, _ = cfg.resolve(cfg.Asked(model=Path("m.gguf"), warmup=0), configs, lambda model: None)
    assert request.workload.warmup == 0
    with pytest.raises(UserError, match="--warmup -1: at least 0"):
        cfg.resolve(cfg.Asked(model=Path("m.gguf"), warmup=-1), configs, lambda model: None)


def test_energy_is_taken_over_the_repetitions_speed_is_and_a_cpu_that_ran_layers_must_be_read():
    """Issue #48: the first repetition was out of t/s but in J/token; an unreadable CPU counter dropped the CPU from
    the total, so CPU-override CONFIGs ranked cheaper."""
    from buildmgr.bench.aggregate import steady_phases

    reps = [logs.Phase(3, kind, t, t + 0.5) for t in (1.0, 2.0, 3.0) for kind in ("prompt", "generation")]
    kept = steady_phases(list(reversed(reps)))
    assert sorted(p.start for p in kept) == [2.0, 2.0, 3.0, 3.0]  # the first of each kind left out
    gpu = energy.Energy("CUDA0", "generation", "energy counter", 40.0, 1.0, None)
    cpu = energy.Energy("CPU", "generation", "RAPL", None, 0.0, None, unknown="RAPL is not readable")
    phases = [logs.Phase(2, "generation", 1.0, 2.0), logs.Phase(2, "generation", 3.0, 4.0)]
    assert energy.per_token([gpu, cpu], phases, {"generation": 100}, cpu_works=False) == pytest.approx(0.2)
    assert energy.per_token([gpu, cpu], phases, {"generation": 100}, cpu_works=True) is None


def _moe_model(path: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from gguf_model import write_model

    write_model(path, embd=128, ff=256, layers=4, vocab=1000, ctx=512, experts=8, used=2, dtype="f32")
    return path


def test_the_limit_reads_each_tensor_where_the_run_put_it_and_a_moe_reads_the_experts_it_uses(tmp_path):
    """Issue #48: every weight buffer counted as read per token: with mmap the CPU_Mapped buffer is the whole file,
    and a MoE reads n_used/n_expert of its expert tensors, not all of them."""
    from buildmgr.bench.prepare import model_bytes

    model = model_bytes(_moe_model(tmp_path / "moe.gguf"))
    assert model.expert_share == 2 / 8 and not model.tied
    sizes = {name: size for name, size, _ in model.tensors}
    assert {rows for name, _, rows in model.tensors if name == "token_embd.weight"} == {1000}  # the vocabulary
    lines = [f"load_tensors: layer {n:3d} assigned to device CUDA0, is_swa = 0" for n in range(5)]
    lines += [f"tensor {name} (1 MiB f32) buffer type overridden to CPU" for name in sizes if name.startswith("blk.3.")]
    lines += ["load_tensors:   CPU_Mapped model buffer size =   999.00 MiB"]  # mmap: the whole file, never all read
    load = logs.load_log(lines)
    read = limit.weights_read(model, load, ["CUDA0"])

    def per_token(names):
        return sum(sizes[n] * (model.expert_share if "_exps" in n else 1.0) for n in names) / 2**20

    gpu = [n for n in sizes if n.startswith(("blk.0.", "blk.1.", "blk.2.", "output"))]
    cpu = [n for n in sizes if n.startswith("blk.3.")]
    assert read["CUDA0"] == pytest.approx(per_token(gpu))
    assert read["CPU"] == pytest.approx(per_token(cpu) + sizes["token_embd.weight"] / 1000 / 2**20)
    experts = sum(sizes[n] for n in sizes if "_exps" in n) / 2**20
    assert read["CUDA0"] + read["CPU"] < sum(sizes.values()) / 2**20 - experts * 0.7  # 6 of 8 experts unread


def test_a_tied_head_reads_the_embeddings_whole_and_a_row_split_is_bounded_by_its_slowest_device():
    tied = limit.ModelBytes((("token_embd.weight", 100 << 20, 1000), ("blk.0.attn_q.weight", 10 << 20, 64)), 1.0)
    load = logs.load_log([f"load_tensors: layer {n:3d} assigned to device CUDA0, is_swa = 0" for n in range(2)])
    read = limit.weights_read(tied, load, ["CUDA0"])
    assert read == {"CUDA0": pytest.approx(110.0), "CPU": pytest.approx(0.1)}
    bandwidth = {"CUDA0": (1000.0, "test"), "CUDA1": (500.0, "test")}
    turns = limit.decode_limit({"CUDA0": 1000.0, "CUDA1": 1000.0}, bandwidth, 100.0)
    together = limit.decode_limit({"CUDA0": 1000.0, "CUDA1": 1000.0}, bandwidth, 100.0, parallel=True)
    # 1000 MB at 1000 GB/s and at 500 GB/s: 1 ms and 2 ms one after the other (a layer split), or 2 ms at once
    assert turns.limit_ts == pytest.approx(1000 / 3, abs=0.01) and together.limit_ts == pytest.approx(500.0)
    # the CPU's share comes before or after the GPUs' (it is no third device reading at once)
    with_cpu = {"CUDA0": 1000.0, "CUDA1": 1000.0, "CPU": 100.0}
    both = limit.decode_limit(with_cpu, bandwidth | {"CPU": (100.0, "test")}, 100.0, parallel=True)
    assert both.limit_ts == pytest.approx(1 / (0.001 + 0.002), abs=0.01)
    # a token-embedding row on a CPU of unknown bandwidth bounds nothing; a device of unknown bandwidth does
    row = limit.decode_limit({"CUDA0": 1000.0, "CPU": 0.01}, {"CUDA0": (1000.0, "test")}, 100.0)
    assert row.limit_ts == pytest.approx(1000.0) and row.read_mb["CPU"] == 0.01


def test_a_decode_shows_its_share_of_the_limit_and_a_process_far_from_the_others_is_named():
    """Issue #48: the distance to the limit was only in the raw rows; one process 500× slower produced
    `6.29× [0.00, 51571.07]` and was never named."""
    from buildmgr.bench.aggregate import outlier_process

    found = rows.read_rows([H200_31 / "rows.jsonl"])
    decode = [r for r in found if r.fields["n_gen"] and not r.fields["n_prompt"]]
    table = compare.compare(decode, "config")
    assert all(e.limit_percent is not None and 0 < e.limit_percent < 100 for e in table)
    markdown = compare.render(table, "config", "md")
    assert "| % of limit |" in markdown and f"| {table[0].limit_percent:.1f} % |" in markdown
    assert compare.render(table, "config", "csv").splitlines()[0].count("limit_percent") == 1
    lines = verdicts.verdicts(decode, {r.config: 1 for r in decode})
    shares = " and ".join(f"{e.limit_percent:.1f} %" for e in table[:2])
    assert any(f"at {shares} of their bandwidth limits" in line for line in lines), lines
    assert outlier_process([[150000.0, 151000.0], [262.0, 263.0], [149000.0, 150500.0]]) == (
        "process 2 of 3 ran at 262.5 t/s, 0.0018× the median of all (1.497e+05): it alone widens the interval "
        "(other load on the host? run again)"
    )
    assert outlier_process([[100.0], [104.0], [98.0]]) is None
    # one registry of columns: the JSON's keys are the CSV's columns, in order (the ratio's interval in two more)
    keys = list(json.loads(compare.render(table, "config", "json"))[0])
    header = compare.render(table, "config", "csv").splitlines()[0].split(",")
    assert [k for k in header if k not in ("ci95_low", "ci95_high", "within_noise")] == keys
    by_depth = compare.compare(decode, "depth")
    assert all("@ d" not in e.test and e.test.startswith("tg") for e in by_depth)  # depth is the axis, not the label


def test_the_plot_is_scaled_by_its_medians_shows_each_limit_line_once_and_names_fallbacks_only_when_there_are_any():
    """Issue #48: intervals from 10⁰ to 10⁸ flattened every line; two identical limit lines hid each other; every
    title repeated the fallback legend though nothing fell back."""
    from buildmgr.bench import plot

    found = [r for r in rows.read_rows([H200_31 / "rows.jsonl"]) if r.fields["n_gen"] and not r.fields["n_prompt"]]
    wide = dataclasses.replace(found[0], meta=dataclasses.replace(found[0].meta, runs_ts=((1.0, 1.1), (1e8, 1.1e8))))
    twin = dataclasses.replace(found[0], meta=dataclasses.replace(found[0].meta, config="twin"))
    figure = plot.draw([wide, twin, *found[1:]])
    [axis] = figure.axes
    medians = [statistics.median(rows.samples(r)) for r in found]
    low, high = axis.get_ylim()
    assert low >= min(medians) / 4 and high <= max(medians + [r.meta.limit_ts or 0 for r in found]) * 4
    limits = [line.get_label() for line in axis.get_lines() if line.get_label().endswith("bandwidth limit")]
    assert len(limits) == len(set(limits)) and any(" = " in label for label in limits)
    assert "fallback" not in axis.get_title()


def test_llama_bench_s_own_rows_left_unpaired_with_buildmgr_s_say_why():
    found = rows.read_rows([H200_31 / "rows.jsonl"])
    own = rows.read_rows([H200_31 / "CUDA0-r5.jsonl"])  # llama-bench -r 5 by hand on the same H200
    [note] = compare.unpaired([*found, *own], "config")
    assert note.startswith(f"{len(own)} row(s) of llama-bench's own were compared only among themselves")
    assert compare.unpaired(found, "config") == [] and compare.unpaired([*found, *own], "host") == []


def test_experts_of_every_naming_are_read_by_the_share_used_and_every_lookup_table_by_one_row():
    tensors = (
        ("blk.0.ffn_up_exps.weight", 800 << 20, 64),
        ("blk.0.ffn_gate_up_exps.weight", 800 << 20, 64),
        ("blk.0.ffn_down_chexps.weight", 800 << 20, 64),
        ("blk.0.ffn_up.3.weight", 100 << 20, 64),  # one tensor per expert, as older GGUFs name them
        ("blk.0.ffn_up_shexp.weight", 100 << 20, 64),  # the shared expert: every token reads it
        ("per_layer_token_embd.weight", 500 << 20, 1000),
        ("position_embd.weight", 40 << 20, 4096),
    )
    model = limit.ModelBytes(tensors, 0.25)
    load = logs.load_log(["load_tensors: layer   0 assigned to device CUDA0, is_swa = 0"])
    read = limit.weights_read(model, load, ["CUDA0"])
    assert read["CUDA0"] == pytest.approx((800 * 3 + 100) * 0.25 + 100)
    assert read["CPU"] == pytest.approx(500 / 1000 + 40 / 4096)


def test_the_cpu_side_is_judged_by_its_time_inside_the_timed_phases_only():
    """Issue #48 (item 6, the CPU's side): the window from the first timed phase to the last took in the depth fill
    between repetitions; a busy fill and idle phases read as work."""
    phases = [logs.Phase(1, "generation", 1.0, 1.05), logs.Phase(1, "generation", 3.0, 3.05)]
    busy_between = [(0.5, 0.0), (1.02, 0.0), (1.04, 0.0), (2.0, 1.9), (3.02, 1.9), (3.04, 1.9), (3.5, 1.9)]
    samples = [Sample(at, (), ProcessReading(cpu, {})) for at, cpu in busy_between]
    short = judge(phases, samples, [Placed(HOST_ROLE, None, on_cpu=True)], 0.01).work
    assert {w.verdict for w in short} == {Verdict.TOO_SHORT}  # 0.04 s inside the phases: too little to call
    long_idle = [logs.Phase(1, "generation", 1.0, 1.2), logs.Phase(1, "generation", 3.0, 3.2)]
    samples = [
        Sample(at, (), ProcessReading(cpu, {}))
        for at, cpu in ((1.01, 0), (1.19, 0), (2.0, 1.9), (3.01, 1.9), (3.19, 1.9))
    ]
    verdicts_seen = {w.verdict for w in judge(long_idle, samples, [Placed(HOST_ROLE, None, on_cpu=True)], 0.01).work}
    assert verdicts_seen == {Verdict.IDLE}  # idle inside both; the busy second between them is not theirs


def test_the_table_and_the_rows_share_one_baseline_and_rank_by_what_the_ratio_compares():
    """Issue #48: the rows' vs_baseline took the first CONFIG valid in every test, the table the first valid one in
    each test; and --rank ts ordered by pooled medians while the ratios compare geometric means over processes."""
    from buildmgr.bench.aggregate import with_baseline

    found = with_baseline(rows.read_rows([H200 / "rows.jsonl"]))
    table = compare.compare(found, "config")
    dense = {e.baseline for e in table if "dense" in str(e.test) or e.value in ("cuda0", "vulkan0", "cuda0+vulkan0")}
    assert dense == {r.meta.baseline for r in found if r.config in ("cuda0", "vulkan0", "cuda0+vulkan0")} == {"vulkan0"}
    a = _row("a", [[130.0] * 9, [80.0, 80.0], [80.0, 80.0]])  # the higher pooled median
    b = _row("b", [[110.0] * 2, [110.0] * 2, [111.0] * 2])  # the higher geometric mean over processes
    ranked = compare.compare([a, b], "config", rank="ts")
    assert [e.value for e in ranked] == ["b", "a"]


H100_48 = (
    FIXTURES / "h100" / "run48-49b"
)  # bench/recorders/gpu-session.sh honest jtune tune (then gpu-48-49.sh), 2026-12-05 (issue #48): the honest run at depth 0
H100_PCI = "0000:00:06.0"


def test_energy_spans_abutting_repetitions_and_never_takes_a_trailing_power_average_for_a_short_decode():
    """The H100's decodes of 64 tokens: NVML's power reading averages the last second on Ampere and newer, so for the
    dense model's 0.09 s repetitions "power readings × time" read about 170 W where the card's counter, over the three
    repetitions that follow one another, read about 350 W: cuda0's row said 0.23 J/token, half the truth. A card
    whose counter was read is measured by its counter (over abutting repetitions as one span), or not at all; power
    readings count only where no counter moved, and only those a full averaging window inside the phases."""

    def pooled(config: str, kind: str = "generation", model: str = "dense") -> tuple[energy.Energy, float]:
        phases, samples = [], []  # the timed processes' repetitions of one test, as bench pools them for its row
        for round_, recorded, readings in _recorded(config, H100_48 / f"samples-{model}.jsonl.gz"):
            if round_ == 0:  # the warm-up process, kept apart
                continue
            shift = 1000.0 * round_  # each process's clock starts at 0 in the file
            timed = [p for p in recorded if p.kind == kind][1:]  # its first repetition kept apart
            phases += [p._replace(start=p.start + shift, end=p.end + shift) for p in timed]
            samples += [s._replace(at=s.at + shift) for s in readings]
        [card, _] = energy.per_card(phases, samples, {"CUDA0": H100_PCI, limit.CPU: None}, {kind: 64})
        return card, sum(p.end - p.start for p in phases)

    short, _ = pooled("cuda0")  # 0.27 s a process: before, 0.23 J/token from the trailing average
    assert short.joules is None and short.basis == "energy counter"
    fa, fa_seconds = pooled("cuda0-fa")  # three 0.2 s repetitions a process, one window each
    assert fa.seconds > 1.2  # the readings inside span 0.42-0.54 s a process (before, one by one: 0.76 s in all)
    assert fa.joules is not None and 200 < fa.joules / fa_seconds < 400  # the counter's watts, not 160-175
    long, long_seconds = pooled("ngl8")  # 2 s repetitions: the counter covers them, at the power readings' 122-124 W
    assert long.basis == "energy counter" and long.joules is not None and 118 < long.joules / long_seconds < 128
    # three spans of 0.1-0.2 s, each off by up to one of the counter's 0.1 s steps: one process's read 651 W
    steps, _ = pooled("vk0")
    assert steps.joules is None and steps.too_short
    # 0.03 s prefills no reading falls inside: still a card with a counter, too short for it, never "no counter"
    prompt, _ = pooled("moe-gpu", "prompt", "moe")
    assert prompt.joules is None and prompt.basis == "energy counter" and prompt.too_short

    def power_only(at: float) -> Sample:  # a card with no counter: its reading averages the last second
        watts = 100.0 + 200.0 * min(max(at - 1.0, 0.0), 1.0)  # idle before 1.0 s, busy (300 W) from 2.0 s on
        return Sample(at, (EngineReading(H100_PCI, 90.0, 1000, 1980, watts, (), None),), None)

    busy = [logs.Phase(1, "generation", 1.0 + k, 2.0 + k) for k in range(3)]  # one span of 3 s, from 1.0 s
    [found] = energy.per_card(busy, [power_only(t / 10) for t in range(45)], {"CUDA0": H100_PCI}, {"generation": 100})
    assert found.basis == "power readings × time" and found.joules == pytest.approx(300.0 * 3)
    short = [logs.Phase(1, "generation", 1.0, 1.8)]
    [none] = energy.per_card(short, [power_only(t / 10) for t in range(25)], {"CUDA0": H100_PCI}, {"generation": 100})
    assert none.joules is None and none.basis == "power readings × time" and "averages" in (none.unknown or "")


def test_a_counter_that_moves_in_steps_is_timed_by_its_own_updates_read_between_the_samples():
    """tune by energy on the H100 (2026-12-06): its counter moves every 0.1 s and the samples came every 0.104 s, so
    a process's 0.6 s of decode counted 5 or 6 steps over the same time, and one placement read 1.77 or 2.04
    tokens/J. Read alone every 10 ms between the samples, the counter's own updates time the energy they count."""
    watts, step, gap = 450.0, 0.1, 0.104

    def counter(at: float, phase: float) -> float:  # mJ, as of its last update
        return watts * step * 1000 * math.floor((at - phase) / step)

    def reading(at: float, phase: float) -> EngineReading:
        return EngineReading(H100_PCI, 90.0, 1000, 1980, None, (), counter(at, phase))

    def run(phase: float, start: float, alone: bool) -> float:
        phases = [
            logs.Phase(1, "generation", start, start + 0.31),
            logs.Phase(1, "generation", start + 0.31, start + 0.62),
        ]
        samples, at = [], 0.0
        while at < 2.0:
            # read alone every 10 ms, through the samples too
            between = [k * COUNTER_INTERVAL for k in range(round(at / COUNTER_INTERVAL) + 1)] if alone else []
            counted = tuple(CounterReading(t, H100_PCI, counter(t, phase)) for t in between if at - gap < t <= at)
            samples.append(Sample(at, (reading(at, phase),), None, counters=counted))
            at += gap
        [card] = energy.per_card(phases, samples, {"CUDA0": H100_PCI}, {"generation": 100})
        assert card.joules is not None and card.basis == (energy.TIMED if alone else "energy counter")
        return card.joules / 0.62

    offsets = [(k * 0.0071, 0.5 + k * 0.0137) for k in range(30)]  # the counter's phase and the decode's start
    stepped = [run(phase, start, alone=False) for phase, start in offsets]
    assert max(stepped) / min(stepped) > 1.15  # a step in six, as the H100's processes read
    timed = [run(phase, start, alone=True) for phase, start in offsets]
    assert all(abs(w / watts - 1) < 0.05 for w in timed), timed


def test_the_samples_file_keeps_the_counters_read_alone_and_they_replay_to_the_same_energy():
    from types import SimpleNamespace

    from buildmgr.bench.runner import _samples_json

    started = 100.0
    counted = [CounterReading(started + k / 100, H100_PCI, 1000.0 * (k // 10)) for k in range(1, 200)]
    samples = [
        Sample(started + t / 10, (), None, counters=tuple(c for c in counted if t - 1 < (c.at - started) * 10 < t))
        for t in range(21)
    ]
    phase = logs.Phase(1, "generation", started + 0.25, started + 1.75)
    run = SimpleNamespace(round=1, started=started, spans={}, phases=[phase], samples=samples)
    record = json.loads(json.dumps(_samples_json(SimpleNamespace(config=SimpleNamespace(label="x")), run)))
    replayed = [
        Sample(s["t"], (), None, counters=tuple(CounterReading(*c[:3]) for c in s["counters"]))
        for s in record["samples"]
    ]
    shifted = phase._replace(start=0.25, end=1.75)
    [live] = energy.per_card([phase], samples, {"CUDA0": H100_PCI}, {"generation": 10})
    [again] = energy.per_card([shifted], replayed, {"CUDA0": H100_PCI}, {"generation": 10})
    assert live.joules is not None and live.joules == pytest.approx(again.joules) == pytest.approx(10 * 1.5)


def test_every_h100_row_that_strays_from_the_hand_runs_is_one_bench_calls_noisy_or_unproven():
    """Issue #48 on the H100: beside the median of three llama-bench processes by hand, the rows off by more than
    5 % are the ones whose own repetitions vary (the CV this code computes from them) or whose device work the
    engines could not see; a row that looks steady and proven is within 5 %."""
    with gzip.open(H100_48 / "hand.jsonl.gz", "rt") as handle:
        hand = [json.loads(line) for line in handle]
    strays = 0
    for name in ("dense", "moe"):
        with gzip.open(H100_48 / f"bench-{name}.json.gz", "rt") as handle:
            found = json.load(handle)
        for row in found["rows"]:
            meta, key = row["buildmgr"], (row["n_prompt"], row["n_gen"], row["n_depth"])
            processes = [
                statistics.median(h["row"]["samples_ts"][1:])
                for h in hand
                if h["config"] == meta["config"]
                and (h["row"]["n_prompt"], h["row"]["n_gen"], h["row"]["n_depth"]) == key
            ]
            assert len(processes) == 3
            ratio = stats.summarize(row["samples_ts"]).median / statistics.median(processes)
            if abs(ratio - 1) > 0.05:
                strays += 1
                assert stats.summarize(row["samples_ts"]).noisy or meta["validity"] == "unproven", meta["config"]
    assert strays == 4


def test_an_undecided_ratio_is_worded_once_wherever_it_is_told():
    """Issue #67: one state ("one run each", "inside the noise") was worded five ways, and tune's line against
    llama.cpp's fit called a ratio of one process each "inside the noise". One typed verdict, one table of words."""
    from types import SimpleNamespace

    from buildmgr.bench import compare
    from buildmgr.bench.stats import Ratio, RatioVerdict

    one, noise, apart = Ratio(1.2, None, None), Ratio(1.02, 0.9, 1.1), Ratio(1.3, 1.2, 1.4)
    assert [RatioVerdict.of(r) for r in (None, one, noise, apart)] == [
        RatioVerdict.NO_SAMPLES,
        RatioVerdict.ONE_RUN,
        RatioVerdict.NOISE,
        RatioVerdict.APART,
    ]
    assert len({v.said for v in RatioVerdict}) == len(RatioVerdict)
    for found, verdict in ((one, RatioVerdict.ONE_RUN), (noise, RatioVerdict.NOISE)):
        assert verdict.said in stats.compared(found, "A", "B")
        cell = compare._ratio_cell(SimpleNamespace(vs_baseline=found, value=2.0, baseline=1.0))
        assert cell.endswith(f"({verdict.said})"), cell
    assert compare._ratio_cell(SimpleNamespace(vs_baseline=apart, value=2.0, baseline=1.0)) == "1.30× [1.20, 1.40]"
