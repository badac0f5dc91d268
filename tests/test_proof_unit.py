"""The proof's parts that need no build: the kernels model's encodings, a crash read from what gdb and llama.cpp print
(captured on this project's AMX machine), the CPU's AMX fault and its fix, and the faults a host remembers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from buildmgr import backends
from buildmgr.core.crashes import Crash, innermost_frame, short_function, signal_name, weight_buffers, weight_types
from buildmgr.proof import host_faults
from buildmgr.proof.models import KERNEL_TYPES, kernels_model

FIXTURES = Path(__file__).parent / "fixtures" / "crashes"
AMX_HOST = frozenset("sse4_2 avx f16c fma avx2 bmi2 avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi".split())
AMX_HOST |= {"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}


def test_the_kernels_model_holds_each_type_in_a_layer_of_its_own_with_small_finite_weights(tmp_path):
    from gguf import GGUFReader, quants

    reader = GGUFReader(str(kernels_model(tmp_path)))
    by_name = {t.name: t for t in reader.tensors}
    for layer, kind in enumerate(KERNEL_TYPES):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            tensor = by_name[f"blk.{layer}.{part}.weight"]
            assert tensor.tensor_type.name == kind
            values = quants.dequantize(tensor.data, tensor.tensor_type)
            assert np.isfinite(values).all()
            assert 0.001 < float(np.abs(values).max()) < 1.0, (kind, part)  # random, small, not all zero
    assert by_name["output.weight"].tensor_type.name == KERNEL_TYPES[-1]


def test_a_model_of_one_type_alone_has_only_that_type_in_its_matmuls(tmp_path):
    from gguf import GGUFReader

    reader = GGUFReader(str(kernels_model(tmp_path, "Q4_0")))
    matmuls = {t.tensor_type.name for t in reader.tensors if t.name.startswith("blk.") and "norm" not in t.name}
    assert matmuls == {"Q4_0"}


def test_gdb_names_the_amx_kernel_a_q8_0_model_died_in():
    assert innermost_frame((FIXTURES / "amx-q8_0-gdb.txt").read_text()) == (
        "tinygemm_kernel_amx<block_q8_0, …>",
        "libggml-cpu.so.0",
    )


def test_an_assertion_is_named_by_the_frame_below_the_abort():
    text = (
        "#0  0x00007ffff7aa8e2c in __pthread_kill_implementation (threadid=<optimized out>) at ./nptl/pthread_kill.c:44\n"
        "#1  0x00007ffff7a59fb2 in raise (sig=sig@entry=6) at ../sysdeps/posix/raise.c:26\n"
        "#2  0x00007ffff7a44472 in abort () at ./stdlib/abort.c:79\n"
        "#3  0x00007ffff7e1a2b3 in ggml_abort () from /p/lib/libggml-base.so\n"
        "#4  0x00007ffff6e1a2b3 in ggml_cuda_mul_mat(ggml_backend_cuda_context&, ggml_tensor const*) () from /p/lib/libggml-cuda.so\n"
    )
    assert innermost_frame(text) == ("ggml_cuda_mul_mat", "libggml-cuda.so")
    assert innermost_frame("Program exited normally.\nNo stack.\n") is None


def test_short_function_keeps_the_name_and_the_first_template_argument():
    assert short_function("ggml_compute_forward_mul_mat (params=0x1, dst=0x2)") == "ggml_compute_forward_mul_mat"
    assert short_function("void mmq<(ggml_type)8, 64, true>(int) [clone .isra.0]") == "mmq<(ggml_type)8, …>"


def test_signals_are_named_from_either_way_of_reporting_them():
    assert signal_name(-11) == "SIGSEGV"
    assert signal_name(132) == "SIGILL"  # a shell's 128 + 4
    assert signal_name(1) is None
    assert signal_name(-40) == "signal 40"  # a real-time signal has no name


def test_the_load_log_tells_the_weight_types_and_where_they_were_loaded():
    text = (FIXTURES / "amx-q8_0-load.txt").read_text()
    assert weight_types(text) == ("F16", "Q8_0")
    assert weight_buffers(text) == ("AMX", "CPU_Mapped")


def amx_crash(**changes: object) -> Crash:
    fields: dict[str, object] = {
        "signal": "SIGILL",
        "returncode": -4,
        "device": "CPU",
        "kinds": ("Q8_0",),
        "function": "tinygemm_kernel_amx<block_q8_0, …>",
        "library": "libggml-cpu.so.0",
        "buffers": ("AMX", "CPU_Mapped"),
        "without_extra": True,
    }
    return Crash(**(fields | changes))  # type: ignore[arg-type]


def test_an_amx_crash_is_the_known_fault_and_other_crashes_are_not():
    assert backends.known_fault(amx_crash()).name == "amx-kernels"
    assert backends.known_fault(amx_crash(function=None)).name == "amx-kernels"  # no gdb: the AMX buffers tell
    assert backends.known_fault(amx_crash(device="CUDA0")) is None
    assert backends.known_fault(amx_crash(without_extra=False)) is None  # fails without AMX too: something else
    assert backends.known_fault(amx_crash(buffers=("CPU_REPACK",), function="ggml_gemm_q4_0_8x8_q8_0")) is None
    # an exit code, or a process killed from outside, with AMX buffers loaded as they always are on this CPU: not it
    assert backends.known_fault(amx_crash(signal=None, returncode=1)) is None
    assert backends.known_fault(amx_crash(signal="SIGKILL", returncode=-9)) is None
    # AMX buffers, but nothing failed again alone: no evidence that AMX is the cause
    assert backends.known_fault(amx_crash(function=None, kinds=())) is None


def test_the_fix_lists_this_cpus_features_with_amx_off_and_leaves_other_builds_alone():
    fault = backends.runtime_fault("amx-kernels")
    assert fault is not None
    native = fault.fix({"GGML_NATIVE": "ON"}, AMX_HOST)
    assert native is not None
    assert native.defines["GGML_NATIVE"] == "OFF"
    assert native.defines["GGML_AVX512_VNNI"] == native.defines["GGML_AVX512"] == "ON"
    assert {native.defines[k] for k in ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")} == {"OFF"}
    assert fault.fix({}, AMX_HOST) == native  # ggml's default is native
    assert fault.fix({"GGML_NATIVE": "OFF"}, AMX_HOST) is None  # the user's own feature list stands
    assert fault.fix({"GGML_NATIVE": "ON"}, AMX_HOST - {"amx_tile", "amx_int8"}) is None
    lacking = fault.fix({"GGML_NATIVE": "ON"}, AMX_HOST - {"avx512_bf16"})
    assert lacking is not None and lacking.defines["GGML_AVX512_BF16"] == "OFF"
    universal = fault.fix({"GGML_BACKEND_DL": "ON", "GGML_CPU_ALL_VARIANTS": "ON", "GGML_NATIVE": "OFF"}, AMX_HOST)
    assert universal is not None and universal.left_out == ("ggml-cpu-sapphirerapids",) and not universal.defines


def test_a_fault_seen_is_fixed_only_for_the_same_compiler_and_cpu_and_the_users_own_define_wins():
    seen = (
        host_faults.SeenFault("amx-kernels", "/usr/bin/c++ 12.2.0", "Xeon (108 flags)", "SIGILL on CPU", "cpu-1", "t"),
    )
    args = ({"GGML_NATIVE": "ON"}, {}, "/usr/bin/c++ 12.2.0", "Xeon (108 flags)", AMX_HOST)
    applied, overruled = host_faults.fixes(seen, *args)
    assert [f.fault for f in applied] == ["amx-kernels"] and not overruled
    assert applied[0].defines["GGML_AMX_INT8"] == "OFF"
    assert host_faults.fixes(seen, args[0], {}, "/usr/bin/c++ 13.3.0", *args[3:]) == ([], [])
    assert host_faults.fixes(seen, args[0], {}, args[2], "Epyc (100 flags)", AMX_HOST) == ([], [])
    applied, overruled = host_faults.fixes(seen, args[0], {"GGML_NATIVE": "ON"}, *args[2:])
    assert applied == [] and "GGML_NATIVE" in overruled[0]
    # a CPU feature of the user's own is theirs; the fix (AMX off, the list) stays
    applied, overruled = host_faults.fixes(seen, args[0], {"GGML_AVX512": "OFF"}, *args[2:])
    assert not overruled and "GGML_AVX512" not in applied[0].defines and applied[0].defines["GGML_AMX_INT8"] == "OFF"


def test_a_remembered_fault_survives_a_second_one_and_a_broken_file_is_a_warning(tmp_path):
    from buildmgr.core.config import Dirs

    dirs = Dirs(data=tmp_path / "d", config=tmp_path / "c", cache=tmp_path / "k")
    first = host_faults.SeenFault("amx-kernels", "c++ 12", "cpu A", "SIGILL on CPU", "cpu-1", "t1")
    host_faults.remember(dirs, first)
    host_faults.remember(dirs, first.__class__(**{**first.__dict__, "cpu": "cpu B"}))
    assert [s.cpu for s in host_faults.read(dirs)] == ["cpu A", "cpu B"]
    host_faults.path(dirs).write_text("{")
    warned: list[str] = []
    assert host_faults.read(dirs, warned.append) == ()
    assert warned and "tried again" in warned[0]


@pytest.mark.parametrize("returncode", [-4, -11])
def test_a_crash_line_says_signal_device_types_and_function(returncode):
    crash = amx_crash(signal=signal_name(returncode), returncode=returncode)
    assert (
        crash.line()
        == f"{signal_name(returncode)} on CPU with Q8_0 in tinygemm_kernel_amx<block_q8_0, …> (libggml-cpu.so.0)"
    )


def test_an_abort_is_named_by_ggml_s_own_backtrace_and_its_assertion():
    """ggml prints its backtrace (through gdb, where installed) as it aborts: a real GGML_ASSERT of llama.cpp's graph."""
    from buildmgr.core.crashes import assertion

    text = (FIXTURES / "gqa-assert-abort.txt").read_text()
    assert innermost_frame(text) == ("ggml_flash_attn_ext", "libggml-base.so.0")
    assert assertion(text) == "ggml.c:5515: GGML_ASSERT(ggml_can_mul_mat(k, q)) failed"
    crash = Crash("SIGABRT", -6, "CPU", (), "ggml_flash_attn_ext", "libggml-base.so.0", assertion=assertion(text))
    assert crash.line().endswith("(libggml-base.so.0): ggml.c:5515: GGML_ASSERT(ggml_can_mul_mat(k, q)) failed")
    assert backends.known_fault(crash) is None


def test_a_receipts_fixes_are_carried_into_a_plan_whatever_this_host_remembers(tmp_path):
    """`verify` rebuilds a build from its receipt on a host that never saw the fault: the receipt's fix is taken, so
    the rebuild has the same defines and targets; where the host saw it too, the fix is taken once."""
    from buildmgr.building.options import leave_out_faults
    from buildmgr.building.recipes import Recipe
    from buildmgr.core.config import Dirs
    from buildmgr.store.receipt import FixRecord
    from buildmgr.tools.toolchain import Tool, Toolchain

    dirs = Dirs(data=tmp_path / "d", config=tmp_path / "c", cache=tmp_path / "k")
    tools = Toolchain(*(Tool(name, f"/usr/bin/{name}", "1") for name in ("cmake", "ninja", "cc", "c++", "ccache")))
    recipe = Recipe("universal", "", ("CPU",), ("llama-bench",), (), (("GGML_BACKEND_DL", "ON"),))
    carried = (FixRecord("amx-kernels", "left out", "SIGILL on CPU", {}, ("ggml-cpu-sapphirerapids",)),)
    same, fixes = leave_out_faults(recipe, {}, tools, dirs, lambda m: None, carried)
    assert fixes == carried and same == recipe
    host_faults.remember(dirs, host_faults.SeenFault("amx-kernels", "/usr/bin/c++ 1", "any", "SIGILL", "u-1", "t"))
    _, fixes = leave_out_faults(recipe, {}, tools, dirs, lambda m: None, carried)
    assert fixes == carried  # once, not again from the host's memory
