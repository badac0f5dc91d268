"""Stage 6: prove a staged build runs: every tool's --version, then llama-bench on a tiny model."""

from __future__ import annotations

import json
import re
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from buildmgr.fsutil import locked

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


@dataclass(frozen=True)
class Check:
    command: list[str]
    returncode: int
    seconds: float
    passed: bool
    detail: str


@dataclass(frozen=True)
class SmokeResult:
    passed: bool
    checks: tuple[Check, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "checks": [asdict(c) for c in self.checks]}

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The binaries must run from their prefix alone: no LD_LIBRARY_PATH help."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(extra or {})
    return env


def _run(command: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False)
        output = result.stdout + result.stderr
        code = result.returncode
    except subprocess.TimeoutExpired:
        output, code = f"timed out after {TIMEOUT_S} s", -1
    except OSError as err:
        output, code = str(err), -1
    return code, output, round(time.monotonic() - start, 3)


def version_check(tool: Path, short_commit: str, env: dict[str, str]) -> Check:
    code, output, seconds = _run([str(tool), "--version"], env)
    line = next((ln for ln in output.splitlines() if ln.startswith("version:")), "")
    # "version: 0.5.0-dev (build 0, commit 0c1e570)"; older trees print "version: 0 (0c1e570)"
    passed = code == 0 and (short_commit == "unknown" or re.search(rf"\b{short_commit}\b", line) is not None)
    detail = line or output.strip()[-400:]
    return Check([tool.name, "--version"], code, seconds, passed, detail)


def bench_check(tool: Path, model: Path, env: dict[str, str], extra_args: tuple[str, ...] = ()) -> Check:
    command = [str(tool), "-m", str(model), "-p", "16", "-n", "8", "-r", "1", "-o", "json", *extra_args]
    code, output, seconds = _run(command, env)
    passed, detail = False, output.strip()[-400:]
    if code == 0:
        try:
            start = output.index("[")
            results = json.loads(output[start : output.rindex("]") + 1])
            speeds = [f"{r['n_prompt'] or r['n_gen']} tok: {r['avg_ts']:.0f} t/s on {r.get('backends', '?')}" for r in results]
            passed, detail = bool(results), "; ".join(speeds)
        except (ValueError, KeyError, TypeError):
            pass
    return Check([tool.name, "-m", model.name, *command[3:]], code, seconds, passed, detail)


def smoke_run(prefix: Path, short_commit: str, model: Path) -> SmokeResult:
    env = clean_env()
    bindir = prefix / "bin"
    checks = [version_check(bindir / name, short_commit, env) for name in VERSIONED_TOOLS if (bindir / name).exists()]
    bench = bindir / "llama-bench"
    if bench.exists():
        checks.append(bench_check(bench, model, env))
    return SmokeResult(passed=bool(checks) and all(c.passed for c in checks), checks=tuple(checks))
