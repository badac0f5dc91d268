"""Prove a staged build runs: every tool's --version, then llama-bench on a tiny model."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import proc
from buildmgr.backends import NOT_A_CARD
from buildmgr.config import Dirs
from buildmgr.errors import TAIL_LINES, BuildFailed
from buildmgr.fsutil import locked
from buildmgr.probe import ProbeResult, probe_build
from buildmgr.receipt import SmokeResult, ToolRun

if TYPE_CHECKING:
    from buildmgr.progress import Reporter

TIMEOUT_S = 300
VERSIONED_TOOLS = ("llama-cli", "llama-server", "llama-bench", "llama-completion")
# Bump when the model below changes, so a cached file is never stale.
MODEL_NAME = "tiny-llama-v1.gguf"


def write_tiny_model(path: Path) -> None:
    """A 2-layer, 64-wide llama with random F32 weights and a byte-level SentencePiece vocab.

    About 0.5 MB. Enough for llama-bench and for tools that tokenize text.
    """
    import numpy as np
    from gguf import GGUFWriter, TokenType

    rng = np.random.default_rng(0)
    n_embd, n_ff, n_layer, n_head, n_ctx = 64, 128, 2, 4, 256
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256

    writer = GGUFWriter(str(path), "llama")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def weight(*shape: int) -> np.ndarray:  # numpy shapes are ggml's reversed
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(len(tokens), n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), n_embd))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tiny_model(cache_dir: Path) -> Path:
    path = cache_dir / "smoke" / MODEL_NAME
    if not path.exists():
        with locked(path.with_suffix(".lock")):
            if not path.exists():
                tmp = path.with_name(f".{path.name}.{os.getpid()}")
                write_tiny_model(tmp)
                os.replace(tmp, path)
    return path


def version_check(tool: Path, short_commit: str, env: dict[str, str]) -> ToolRun:
    ran = proc.run([str(tool), "--version"], timeout=TIMEOUT_S, env=env)
    output = ran.output  # --version prints to stderr
    line = next((ln for ln in output.splitlines() if ln.startswith("version:")), "")
    # "version: 0.5.0-dev (build 0, commit 0c1e570)"; older trees print "version: 0 (0c1e570)"
    passed = ran.ok and (short_commit == "unknown" or re.search(rf"\b{short_commit}\b", line) is not None)
    detail = line or output.strip()[-400:]
    return ToolRun([tool.name, "--version"], ran.returncode, ran.seconds, passed, detail)


def bench_check(tool: Path, model: Path, env: dict[str, str], extra_args: tuple[str, ...] = ()) -> ToolRun:
    command = [str(tool), "-m", str(model), "-p", "16", "-n", "8", "-r", "1", "-o", "json", *extra_args]
    ran = proc.run(command, timeout=TIMEOUT_S, env=env)
    passed, detail = False, ran.output.strip()[-400:]
    if ran.ok:
        try:
            results = json.loads(ran.stdout)
            speeds = [
                f"{'pp' if r['n_prompt'] else 'tg'}{r['n_prompt'] or r['n_gen']} {r['avg_ts']:.0f} t/s" for r in results
            ]
            where = results[0].get("devices", "?") if results else "?"
            passed, detail = bool(results), f"on {'CPU' if where == 'none' else where}: " + ", ".join(speeds)
        except (ValueError, KeyError, TypeError, IndexError):
            pass
    return ToolRun([tool.name, *command[1:2], model.name, *command[3:]], ran.returncode, ran.seconds, passed, detail)


@dataclass(frozen=True)
class Smoked:
    result: SmokeResult
    probe: ProbeResult | None  # the probe that named the devices benched (None: no llama-bench to bench with)


def smoke_run(prefix: Path, short_commit: str, model: Path, environ: Mapping[str, str]) -> Smoked:
    """--version of every tool, then llama-bench on the CPU and on every device the build lists here.

    The runs are independent (each its own process, each device its own bench), so they run side by side: the smoke
    run of a many-device build takes about as long as its slowest device, not their sum. The CPU's bench needs no
    probe, so it runs beside it."""
    env = dict(environ)  # the user's own, LD_LIBRARY_PATH included: RPATH wins over it
    bindir = prefix / "bin"
    bench = bindir / "llama-bench"
    tools = [bindir / name for name in VERSIONED_TOOLS if (bindir / name).exists()]
    devices: tuple[str, ...] = ()
    listed = None
    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = [pool.submit(version_check, tool, short_commit, env) for tool in tools]
        benches = []
        if bench.exists():
            benches.append(pool.submit(bench_check, bench, model, env, ("-dev", "none")))
            listed = probe_build(prefix, env)
            devices = tuple(d.name for d in listed.devices if d.backend not in NOT_A_CARD)
            benches += [pool.submit(bench_check, bench, model, env, ("-dev", name)) for name in devices]
        checks = [future.result() for future in versions + benches]
    return Smoked(SmokeResult(bool(checks) and all(c.passed for c in checks), tuple(checks), devices), listed)


def prove_runs(
    staging: Path, short_commit: str, dirs: Dirs, log: Path, reporter: Reporter, environ: Mapping[str, str]
) -> Smoked:
    """Run the staged build; raise (so nothing is published) unless every check passed."""
    smoked = smoke_run(staging, short_commit, tiny_model(dirs.cache), environ)
    result = smoked.result
    with open(log, "a", encoding="utf-8") as handle:
        handle.writelines(f"smoke: {shlex.join(c.command)} -> {c.returncode}: {c.detail}\n" for c in result.checks)
    for check in result.checks:
        what = " ".join(check.command[:2]) if "--version" in check.command else check.command[0]
        reporter.say(f"  {'✓' if check.passed else '✗'} {what}: {check.detail[:120]}")
    if result.passed:
        return smoked
    failed = result.failures[0] if result.failures else None
    if failed is None:
        raise BuildFailed("smoke run failed (no llama tools in the prefix); the build was not published", log=log)
    last = failed.detail.splitlines()[-1][:160] if failed.detail else "no output"
    raise BuildFailed(
        f"smoke run failed ({' '.join(failed.command[:2])}: exit {failed.returncode}, {last}); "
        "the build was not published",
        log=log,
        tail=tuple(failed.detail.splitlines()[-TAIL_LINES:]),
    )
