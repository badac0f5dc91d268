"""Coverage read from llama.cpp's scheduler lines (GGML_SCHED_DEBUG=2 with -v): the lines are written here exactly as
ggml-backend.cpp's printf formats them at the pin (widths and truncation included), so the reading is tested on what
it meets; the real runs are in test_cpu_build.py (CPU) and test_vulkan_build.py (lavapipe)."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

from buildmgr import backends
from buildmgr.core.device_records import Device, Role, Selection, State
from buildmgr.placement import coverage
from buildmgr.placement.check import Here, check
from buildmgr.placement.syntax import parse, shaping_args

CUDA_FA_OFF = backends.removed_kernels(["CUDA"], {"GGML_CUDA_FA": "OFF"})


def source(name: str, device: str, size: str = "1K") -> str:
    return f" {name[:20]:>20} ({size[:5]:>5}) [{device[:5]:>5} {'':>8}]"


def node(index: int, op: str, name: str, device: str, *sources: tuple[str, str]) -> str:
    head = f"node #{index:3d} ({op[:10]:>10}): {name[:20]:>20} ({'1K':>5}) [{device[:5]:>5} {'':>8}] use=1,c=1:"
    return head + "".join(source(n, d) for n, d in sources)


def split(number: int, device: str, *inputs: tuple[str, str]) -> str:
    text = f"## SPLIT #{number}: {device} # {len(inputs)} inputs"
    return text + (": " + "".join(f"[{n} ({s:>5})] " for n, s in inputs) if inputs else "")


def reserve(tokens: int) -> str:
    return (
        f"graph_reserve: reserving a graph for ubatch with n_tokens = {tokens:4d}, n_seqs =  1, n_outputs = {tokens:4d}"
    )


def layer_graph(device: str, layers: int, fa_device: str) -> list[str]:
    """A llama graph as the scheduler prints it: token embeddings on the CPU, then each layer on `device` except its
    FLASH_ATTN_EXT on `fa_device` (its own split each way)."""
    lines = [split(0, "CPU"), node(0, "GET_ROWS", "inp_embd", "CPU", ("token_embd.weight", "CPU"))]
    number = 1
    index = 1
    lines.append(split(number, device, ("inp_embd", "8K")))
    for layer in range(layers):
        lines.append(node(index, "MUL_MAT", f"Qcur-{layer}", device, (f"blk.{layer}.attn_q.weight", device)))
        index += 1
        if fa_device != device:
            number += 1
            lines.append(split(number, fa_device, (f"Qcur-{layer}", "8K"), (f"cache_k_l{layer} (view)", "1M")))
        lines.append(node(index, "FLASH_ATTN_EXT", f"__fattn__-{layer}", fa_device, (f"Qcur-{layer}", device)))
        index += 1
        if fa_device != device:
            number += 1
            lines.append(split(number, device, (f"__fattn__-{layer}", "8K")))
        # a name past 20 characters loses its '-N': the layer is the one before it
        lines.append(node(index, "MUL_MAT", f"ffn_moe_weights_norm-{layer}", device))
        index += 1
    lines.append(node(index, "MUL_MAT", "result_output", device, ("output.weight", device)))
    return lines


def sched_log(device: str, layers: int, fa_device: str, preamble: tuple[str, ...] = ()) -> str:
    assigned = [f"load_tensors: layer {n:3d} assigned to device {device}, is_swa = 0" for n in range(layers + 1)]
    lines = [*preamble, *assigned]
    # the fused-op probe (here: its attention elsewhere), then pp, tg and pp again, as sched_reserve does
    lines += [reserve(1), "", *layer_graph(device, layers, "CPU" if fa_device == device else device)]
    for tokens in (512, 1, 512):
        lines += [reserve(tokens), "", *layer_graph(device, layers, fa_device)]
    lines += ["llama_context: graph splits = 3", *layer_graph(device, layers, "CPU")]  # a real run: not reserved
    return "\n".join(lines)


def test_flash_attention_on_the_cpu_of_a_cuda_build_without_its_kernels_is_named_with_its_cause():
    found = coverage.cover(coverage.read(sched_log("CUDA0", 4, "CPU")), CUDA_FA_OFF)
    assert found is not None
    prefill, decode = found.graphs
    assert (prefill.phase, prefill.tokens, decode.phase, decode.tokens) == ("prefill", 512, "decode", 1)
    assert prefill.ops["FLASH_ATTN_EXT"] == {"CPU": 4}  # printed as FLASH_ATTN: the whole name back
    assert prefill.ops["MUL_MAT"] == {"CUDA0": 9}
    assert prefill.splits == 2 + 2 * 4
    [off] = decode.off
    assert (off.op, off.device, off.home, off.layers, off.count) == ("FLASH_ATTN_EXT", "CPU", "CUDA0", (0, 1, 2, 3), 4)
    assert "no CUDA FlashAttention kernels" in off.cause and "GGML_CUDA_FA=OFF" in off.cause
    assert found.partial == f"FLASH_ATTN_EXT ×4 on CPU ({off.cause})"
    assert found.layers == {"CUDA0": 4}


def test_without_a_define_to_blame_the_cause_is_the_backend_s_own_refusal():
    found = coverage.cover(coverage.read(sched_log("Vulkan1", 2, "CPU")))
    assert found is not None
    [off] = found.graphs[0].off
    assert off.home == "Vulkan1"  # from the split header: the node lines hold 5 characters, "Vulka"
    assert off.cause.startswith("Vulkan1 does not run FLASH_ATTN_EXT on these operands")


def test_every_op_on_its_layer_s_device_is_no_partial_and_copies_are_counted():
    found = coverage.cover(coverage.read(sched_log("Vulkan0", 3, "Vulkan0")))
    assert found is not None and found.partial is None
    prefill = found.graphs[0]
    assert prefill.splits == 2 and prefill.off == ()
    assert prefill.copied_bytes == 8 * 1024 and prefill.copied_per_token == 16.0


def test_a_log_without_scheduler_lines_has_no_coverage():
    assert coverage.cover(coverage.read("load_tensors: layer   0 assigned to device CPU, is_swa = 0\n")) is None


def test_weights_the_user_sent_to_the_cpu_are_no_fallback_but_those_the_loader_kept_there_are():
    lines = ["load_tensors: layer   0 assigned to device CUDA0, is_swa = 0"]
    lines += ["load_tensors: layer   1 assigned to device CUDA0, is_swa = 0"]
    lines += [
        "tensor blk.0.ffn_up.weight (4 MiB q8_0) buffer type overridden to CPU",
        "done_getting_tensors: tensor 'blk.0.ffn_down.weight' (tq2_0) (and 3 others) cannot be used with preferred "
        "buffer type CUDA0, using CPU instead",
        reserve(1),
        split(0, "CUDA0"),
        node(0, "MUL_MAT", "Qcur-0", "CUDA0", ("blk.0.attn_q.weight", "CUDA0")),
        split(1, "CPU", ("ffn_norm-0", "8K")),
        node(1, "MUL_MAT", "ffn_up-0", "CPU", ("blk.0.ffn_up.weight", "CPU")),
        node(2, "MUL_MAT", "ffn_down-0", "CPU", ("blk.0.ffn_down.weight", "CPU")),
    ]
    found = coverage.cover(coverage.read("\n".join(lines)))
    assert found is not None
    [off] = found.graphs[0].off
    assert off.cause == (
        "CUDA0 has no MUL_MAT kernel for tq2_0 weights: the loader kept blk.0.ffn_down.weight and 3 others on the CPU"
    )
    assert found.graphs[0].ops["MUL_MAT"] == {"CUDA0": 1, "CPU": 2}


def test_a_size_too_wide_for_its_five_characters_is_read_as_mib():
    lines = [reserve(1), split(0, "CUDA0", ("big", "12345M"), ("small", "3K"))]
    found = coverage.read("\n".join(lines))
    assert found.graphs[0].splits[0].inputs == (("big", 12345 * 2**20), ("small", 3 * 2**10))


# --- the check of the flags ------------------------------------------------------------------------------------------


def _cuda_here(removed=()) -> Here:
    device = Device("CUDA0", "CUDA", 0, "NVIDIA H200", 143000, 140000, Role.GPU, "0000:19:00.0")
    return Here((device,), {"CUDA0": Selection(State.USED)}, "0c1e570", removed=tuple(removed))


def test_fa_on_a_cuda_device_of_a_build_without_its_kernels_is_named_and_auto_is_not():
    for flags in (["-dev", "CUDA0", "-fa", "1"], ["--flash-attn", "on"]):
        [placement], _ = parse("llama-cli", flags, {})
        [finding] = check(placement, _cuda_here(CUDA_FA_OFF))
        assert finding.severity == "warning" and finding.rule == "kernels-removed"
        assert "FLASH_ATTN_EXT of the layers on CUDA0 would run on the CPU" in finding.message
        assert finding.fix == f"rebuild without -D GGML_CUDA_FA=OFF, or run without {flags[-2]} on"
        assert check(placement, _cuda_here()) == []
    for flags in (["-fa", "auto"], ["-fa", "off"], []):
        [placement], _ = parse("llama-cli", flags, {})
        assert check(placement, _cuda_here(CUDA_FA_OFF)) == []
    [placement], _ = parse("llama-cli", [], {"LLAMA_ARG_FLASH_ATTN": "enabled"})
    assert placement.flash_attn == "on" and check(placement, _cuda_here(CUDA_FA_OFF))


def test_only_the_value_that_removes_the_kernels_counts():
    assert backends.removed_kernels(["CUDA"], {"GGML_CUDA_FA": "ON"}) == []
    assert backends.removed_kernels(["CUDA"], {}) == []
    assert backends.removed_kernels(["Vulkan"], {"GGML_CUDA_FA": "OFF"}) == []
    assert [g.device_prefix for g in backends.removed_kernels(["ROCm"], {"GGML_CUDA_FA": "0"})] == ["ROCm"]


def test_fa_in_llama_bench_s_syntax_is_one_test_per_value_and_the_run_takes_the_graph_shaping_flags():
    placements, _ = parse("llama-bench", ["-dev", "CUDA0", "-fa", "0,1"], {})
    assert [p.flash_attn for p in placements] == ["off", "on"]
    assert placements[1].devices == ("CUDA0",)
    args = ["-m", "m.gguf", "-ub", "256", "--cache-type-k", "q8_0", "-nkvo", "-t", "8", "-dev", "CUDA0"]
    assert shaping_args("llama-cli", args) == ["-ub", "256", "-ctk", "q8_0", "-nkvo", "1", "-t", "8"]
    assert shaping_args("llama-bench", ["-ub", "256,512", "-nkvo", "1"]) == ["-ub", "256", "-nkvo", "1"]


def test_a_verified_run_of_a_placement_refused_for_removed_kernels_is_as_predicted():
    from buildmgr.placement.verify import VerifyOutcome, agreement

    [placement], _ = parse("llama-cli", ["-fa", "on"], {})
    findings = check(placement, _cuda_here(CUDA_FA_OFF))
    assert agreement(findings, VerifyOutcome("ran", 0)) == "as predicted: ran"


def _graph(*lines: str, assigned: tuple[str, ...] = ("CUDA0", "CUDA0", "CUDA0")) -> coverage.Log:
    layers = [f"load_tensors: layer {n:3d} assigned to device {d}, is_swa = 0" for n, d in enumerate(assigned)]
    return coverage.read("\n".join([*layers, reserve(1), *lines]))


def test_what_the_user_put_on_the_cpu_is_no_fallback_nor_what_follows_from_it():
    """-ot ffn=CPU: the matrices and the activations between them run on the CPU by the user's choice; -nkvo: the
    attention over a KV cache kept on the CPU. Attention whose inputs are all on the device still counts."""
    log = _graph(
        "tensor blk.0.ffn_up.weight (4 MiB f16) buffer type overridden to CPU",
        "tensor blk.0.ffn_gate.weight (4 MiB f16) buffer type overridden to CPU",
        "llama_kv_cache: layer   1: dev = CPU",
        split(0, "CUDA0"),
        node(0, "MUL_MAT", "Qcur-0", "CUDA0", ("blk.0.attn_q.weight", "CUDA0")),
        split(1, "CPU", ("Qcur-0", "8K")),
        node(1, "FLASH_ATTN_EXT", "__fattn__-0", "CPU", ("Qcur-0", "CUDA0"), ("cache_k_l0 (view)", "CUDA0")),
        node(2, "MUL_MAT", "ffn_up-0", "CPU", ("blk.0.ffn_up.weight", "CPU"), ("ffn_norm-0", "CPU")),
        node(3, "MUL_MAT", "ffn_gate-0", "CPU", ("blk.0.ffn_gate.weight", "CPU"), ("ffn_norm-0", "CPU")),
        node(4, "SWIGLU", "ffn_swiglu-0", "CPU", ("ffn_gate-0", "CPU"), ("ffn_up-0", "CPU")),
        node(5, "FLASH_ATTN_EXT", "__fattn__-1", "CPU", ("Qcur-1", "CPU"), ("cache_k_l1 (view)", "CPU")),
    )
    found = coverage.cover(log)
    assert found is not None
    [off] = found.graphs[0].off
    assert (off.op, off.layers) == ("FLASH_ATTN_EXT", (0,))


def test_a_router_the_user_put_on_the_cpu_carries_the_routing_after_it_through_reshaped_views():
    """llama.cpp's own fit on an H100 (2026-12-06) sent layer 3's `ffn_(gate|up|gate_up|down).*` to the CPU, which
    takes the router (ffn_gate_inp) too: the routing ops read its results through reshaped views (build_moe_ffn), which
    the scheduler does not print, and were called a fallback, so tune never raced the fit. A CPU op reading a view of
    a device's result still is one."""
    log = _graph(
        "tensor blk.0.ffn_gate_inp.weight (0 MiB f32) buffer type overridden to CPU",
        "tensor blk.0.ffn_up_exps.weight (384 MiB f16) buffer type overridden to CPU",
        split(0, "CUDA0"),
        node(0, "MUL_MAT", "Qcur-0", "CUDA0", ("blk.0.attn_q.weight", "CUDA0")),
        split(1, "CPU", ("ffn_norm-0", "8K")),
        node(1, "MUL_MAT", "ffn_moe_logits-0", "CPU", ("blk.0.ffn_gate_inp.weight", "CPU"), ("ffn_norm-0", "CPU")),
        node(2, "SOFT_MAX", "ffn_moe_probs-0", "CPU", ("ffn_moe_logits-0", "CPU")),
        node(3, "ARGSORT", "ffn_moe_argsort-0", "CPU", ("ffn_moe_probs-0", "CPU")),
        node(
            4, "GET_ROWS", "ffn_moe_weights-0", "CPU", ("ffn_moe_probs-0 (reshaped)", "CPU"), ("ffn_moe_topk-0", "CPU")
        ),
        node(5, "SUM_ROWS", "ffn_moe_weights_sum-0", "CPU", ("ffn_moe_weights-0 (reshaped)", "CPU")),
        node(6, "CLAMP", "ffn_moe_weights_sum_clamped-0", "CPU", ("ffn_moe_weights_sum-0", "CPU")),
        node(
            7,
            "DIV",
            "ffn_moe_weights_norm-0",
            "CPU",
            ("ffn_moe_weights-0 (reshaped)", "CPU"),
            ("ffn_moe_weights_sum_clamped-0", "CPU"),
        ),
        node(8, "MUL_MAT_ID", "ffn_moe_up-0", "CPU", ("blk.0.ffn_up_exps.weight", "CPU"), ("ffn_moe_topk-0", "CPU")),
        split(2, "CUDA0", ("ffn_moe_up-0", "8K")),
        node(9, "SOFT_MAX", "kq_soft_max-1", "CUDA0", ("kq-1", "CUDA0")),
        split(3, "CPU", ("kq_soft_max-1", "8K")),
        node(10, "CLAMP", "kq_clamped-1", "CPU", ("kq_soft_max-1", "CUDA0")),
        node(11, "DIV", "kq_scaled-1", "CPU", ("kq_clamped-1 (reshaped)", "CPU")),
    )
    found = coverage.cover(log)
    assert found is not None
    assert [(off.op, off.layers) for off in found.graphs[0].off] == [("CLAMP", (1,)), ("DIV", (1,))]


def test_an_op_the_build_lacks_is_still_its_fallback_where_it_reads_what_the_user_put_on_the_cpu():
    """-ot attn_q=CPU on a build without CUDA's FA kernels: FlashAttention reads the CPU's Qcur through a view, but
    it runs on the CPU because the build has no kernel for it (the KV cache on the card would have drawn it there)."""
    log = _graph(
        "tensor blk.0.attn_q.weight (4 MiB f16) buffer type overridden to CPU",
        split(0, "CPU"),
        node(0, "MUL_MAT", "Qcur-0", "CPU", ("blk.0.attn_q.weight", "CPU"), ("attn_norm-0", "CPU")),
        node(1, "FLASH_ATTN_EXT", "__fattn__-0", "CPU", ("Qcur-0 (permuted)", "CPU"), ("cache_k_l0 (view)", "CUDA0")),
    )
    found = coverage.cover(log, CUDA_FA_OFF)
    assert found is not None
    [off] = found.graphs[0].off
    assert off.op == "FLASH_ATTN_EXT" and "no CUDA FlashAttention kernels" in off.cause


def test_a_cut_name_keeps_no_false_layer_and_a_tied_output_is_the_output_layer():
    """'ffn_moe_swiglu_oai-12' prints as 'ffn_moe_swiglu_oai-1'; a tied LM head multiplies by token_embd.weight."""
    log = _graph(
        split(0, "CUDA0"),
        node(0, "MUL_MAT", "ffn_up-12", "CUDA0", ("blk.12.ffn_up.weight", "CUDA0")),
        split(1, "CPU", ("ffn_up-12", "8K")),
        node(1, "SWIGLU_OAI", "ffn_moe_swiglu_oai-12", "CPU", ("ffn_up-12", "CUDA0")),
        node(2, "MUL_MAT", "result_output", "CPU", ("token_embd.weight", "CPU"), ("result_norm", "CPU")),
        assigned=("CPU",) * 12 + ("CUDA0", "CUDA0"),
    )
    found = coverage.cover(log)
    assert found is not None
    by_op = {o.op: o for o in found.graphs[0].off}
    assert by_op["SWIGLU_OAI"].layers == (12,) and by_op["SWIGLU_OAI"].home == "CUDA0"
    assert (
        by_op["MUL_MAT"].layers == (13,) and by_op["MUL_MAT"].cause == "its weights (token_embd.weight) are on the CPU"
    )


def test_a_row_is_judged_by_its_own_graph():
    """A fallback in decode alone leaves the prefill rows whole."""
    lines = ["load_tensors: layer   0 assigned to device CUDA0, is_swa = 0"]
    lines += [reserve(512), split(0, "CUDA0"), node(0, "FLASH_ATTN_EXT", "__fattn__-0", "CUDA0")]
    lines += [reserve(1), split(0, "CPU"), node(0, "FLASH_ATTN_EXT", "__fattn__-0", "CPU")]
    found = coverage.cover(coverage.read("\n".join(lines)))
    assert found is not None
    assert found.partial_in(["prefill"]) is None
    assert found.partial_in(["decode"]) == found.partial_in(["prefill", "decode"]) == found.partial
    assert found.partial is not None and found.partial.startswith("FLASH_ATTN_EXT ×1 on CPU (CUDA0 does not run")


def test_removed_kernels_warn_so_bench_measures_them_but_run_check_refuses_and_ngl_0_moves_nothing():
    from buildmgr.core.findings import errors
    from buildmgr.placement.run import CheckReport, Tested

    [placement], _ = parse("llama-cli", ["-dev", "CUDA0", "-fa", "on"], {})
    [finding] = check(placement, _cuda_here(CUDA_FA_OFF))
    assert finding.severity == "warning" and errors([finding]) == []  # not a certain failure: bench runs it
    report = CheckReport("cuda-x", "llama-cli", False, (), (Tested(placement, (finding,)),), False)
    assert report.exit_code == 0 and report.refused == [finding]
    [none], _ = parse("llama-cli", ["-dev", "CUDA0", "-fa", "on", "-ngl", "0"], {})
    assert check(none, _cuda_here(CUDA_FA_OFF)) == []


def test_check_covers_the_placement_bench_would_run():
    from buildmgr.placement.check import bench_words

    [placement], _ = parse("llama-cli", ["-dev", "CUDA0", "-cmoe", "-ncmoe", "3", "-fa", "on"], {})
    words = bench_words(placement)
    assert words[words.index("-ot") + 1].endswith("=CPU") and words[-4:] == ["-fa", "on", "-ncmoe", "3"]


H200_COVERAGE = Path(__file__).parent / "fixtures" / "h200" / "coverage"


def h200_log(name: str) -> coverage.Log:
    with gzip.open(H200_COVERAGE / f"{name}.log.gz", "rt", encoding="utf-8") as handle:
        return coverage.read(handle.read())


def test_the_h200_s_own_scheduler_log_of_a_cuda_build_without_fa_kernels_names_each_fallback_and_its_cause():
    """Issue #47 on the H200 (2026-12-05): `cuda --sm 90 -D GGML_CUDA_FA=OFF`, a 4-layer F16 llama, `-dev CUDA0 -fa 1`:
    the scheduler ran every layer's FLASH_ATTN_EXT on the CPU and copied the KV cache's views each token; without
    -fa every op of the layers ran on CUDA0 in two splits."""
    found = coverage.cover(h200_log("sched-cuda0-fa"), CUDA_FA_OFF)
    assert found is not None and found.layers == {"CUDA0": 4}
    prefill, decode = found.graphs
    assert (prefill.tokens, decode.tokens) == (512, 1)
    for graph in (prefill, decode):
        assert graph.ops["FLASH_ATTN_EXT"] == {"CPU": 4} and set(graph.ops["MUL_MAT"]) == {"CUDA0"}
        assert graph.splits == 2 + 2 * 4  # the embeddings, then CUDA0 and back around each layer's attention
        [off] = graph.off
        assert (off.op, off.device, off.home, off.layers) == ("FLASH_ATTN_EXT", "CPU", "CUDA0", (0, 1, 2, 3))
        assert "no CUDA FlashAttention kernels" in off.cause and "GGML_CUDA_FA=OFF" in off.cause
    # decode copies the K and V cache views of every layer to the CPU and back for one token: 4 MiB against 10 KiB
    assert decode.copied_per_token > 4 * 2**20
    plain = coverage.cover(h200_log("sched-cuda0"), CUDA_FA_OFF)
    assert plain is not None and plain.partial is None
    assert [(g.splits, g.off, g.copied_per_token) for g in plain.graphs] == [(2, (), 10264.0), (2, (), 10240.0)]
    # without the build's define to blame, the cause is the backend's own refusal, still on the right device
    [blind] = coverage.cover(h200_log("sched-cuda0-fa")).graphs[1].off  # type: ignore[union-attr]
    assert blind.cause.startswith("CUDA0 does not run FLASH_ATTN_EXT on these operands")


def test_the_same_build_s_vulkan_device_runs_flash_attention_itself_and_nothing_is_said():
    """Issue #47 on an H100 (2026-12-05, sm_90 as the H200): `cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF`, `-dev Vulkan0
    -fa 1`: the define removes CUDA's kernels only, so Vulkan0 runs every layer's FLASH_ATTN_EXT in two splits and the
    coverage names no fallback (fixtures/h100/coverage/, with the check's text of both placements)."""
    with gzip.open(H200_COVERAGE.parent.parent / "h100" / "coverage" / "sched-vk0-fa.log.gz", "rt") as handle:
        found = coverage.cover(coverage.read(handle.read()), CUDA_FA_OFF)
    assert found is not None and found.layers == {"Vulkan0": 4} and found.partial is None
    for graph in found.graphs:
        assert graph.ops["FLASH_ATTN_EXT"] == {"Vulkan0": 4} and graph.splits == 2 and graph.off == ()


def test_what_flash_attention_auto_resolved_to_is_read_from_the_run_that_resolved_it():
    """llama.cpp lays the KV cache out for FlashAttention before it resolves `-fa auto`, then says what auto became:
    off on the H200's CUDA0 of a build without its FA kernels, on for the CPU; a run given -fa says nothing."""
    assert coverage.cover(h200_log("sched-cuda0"), CUDA_FA_OFF).flash_attn_auto is False  # type: ignore[union-attr]
    assert h200_log("sched-cuda0-fa").flash_attn_auto is None  # -fa 1: nothing to resolve
    cpu = (Path(__file__).parent / "fixtures" / "bench" / "llama-bench-v-cpu.txt").read_text()
    assert coverage.read(cpu).flash_attn_auto is True


def test_bench_says_where_fa_auto_turned_flash_attention_off_after_laying_the_cache_out_for_it():
    from buildmgr.bench.aggregate import fa_auto_notes
    from buildmgr.placement.cover import Covered

    off = coverage.cover(h200_log("sched-cuda0"), CUDA_FA_OFF)  # auto resolved off
    assert off is not None
    covered = {
        "cuda0": Covered(off),
        "cuda0-fa": Covered(coverage.cover(h200_log("sched-cuda0-fa"), CUDA_FA_OFF)),  # -fa 1: nothing resolved
        "vk0": Covered(dataclasses.replace(off, flash_attn_auto=True)),  # auto resolved on
        "untaken": Covered(None, "the coverage run failed"),
    }
    [note] = fa_auto_notes(covered)
    assert note.startswith("cuda0: ") and "-fa 0" in note


def test_check_says_where_fa_auto_turned_flash_attention_off_and_nothing_where_it_was_given():
    from buildmgr.cli import render
    from buildmgr.placement.cover import Covered

    for name, said in (("sched-cuda0", True), ("sched-cuda0-fa", False)):
        lines: list[tuple[str, str]] = []
        render.coverage(
            Covered(coverage.cover(h200_log(name), CUDA_FA_OFF)),
            lambda text, style="", into=lines: into.append((text, style)),
        )
        assert [(t.strip(), s) for t, s in lines if "-fa auto" in t] == (
            [(coverage.FA_AUTO_OFF, "yellow")] if said else []
        )
