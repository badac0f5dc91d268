"""The GGUF models a proof runs, written here with `gguf` (nothing is downloaded): the tiny F32 llama that tools
which tokenize text can read, and the kernels llama, whose layers hold the weight types real models are published in.

An F32 model never reaches the quantized matmul kernels, the CPU's repacked buffers (AMX among them) or a GPU's
quantized paths: a build that crashes on every Q8_0 model passes it. The kernels model puts each type of
`KERNEL_TYPES` in a layer of its own, so one llama-bench run crosses them all; a model of one type alone names the
type that fails. Its weights are random in each type's own encoding (`gguf` quantizes F16, BF16, Q8_0 and Q4_0;
K-quant blocks are drawn directly, scales set so that the values stay small): a random-weight model needs valid
blocks, not a good quantizer."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.core.fsutil import locked

if TYPE_CHECKING:
    import numpy as np

# Bump a name when its model changes, so that a cached file is never stale.
TINY_NAME = "tiny-llama-v1.gguf"
KERNELS_VERSION = 1
# F16 and BF16 (unquantized checkpoints), Q8_0 and Q4_0 (the most downloaded quantized files, repacked on x86 and
# ARM and AMX's types), Q4_K and Q6_K (every K-quant mix: Q4_K_M keeps Q6_K for some tensors).
KERNEL_TYPES = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")
# 256 wide: a K-quant row is whole 256-value blocks, and the repack and AMX paths take rows of that size.
EMBD, FF, HEADS, KV_HEADS, VOCAB, CTX = 256, 512, 4, 2, 256, 1024


def attention(layer: int, embd: int, heads: int, kv_heads: int) -> list[tuple[str, int, int]]:
    """A llama layer's attention weights: (name, rows, cols), numpy's order (ggml's reversed)."""
    head_dim = embd // heads
    return [
        (f"blk.{layer}.attn_q.weight", heads * head_dim, embd),
        (f"blk.{layer}.attn_k.weight", kv_heads * head_dim, embd),
        (f"blk.{layer}.attn_v.weight", kv_heads * head_dim, embd),
        (f"blk.{layer}.attn_output.weight", embd, heads * head_dim),
    ]


def feed_forward(layer: int, embd: int, ff: int) -> list[tuple[str, int, int]]:
    """A dense llama layer's feed-forward weights, as `attention` gives them."""
    return [
        (f"blk.{layer}.ffn_gate.weight", ff, embd),
        (f"blk.{layer}.ffn_up.weight", ff, embd),
        (f"blk.{layer}.ffn_down.weight", embd, ff),
    ]


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


def _k_blocks(
    rng: np.random.Generator, rows: int, cols: int, size: int, scale_at: tuple[int, ...], d: float
) -> np.ndarray:
    """Random K-quant blocks with their f16 super-block scales (at these byte offsets) set to `d`."""
    import numpy as np

    blocks = rng.integers(0, 256, size=(rows * cols // 256, size), dtype=np.uint8)
    for at in scale_at:
        blocks[:, at : at + 2] = np.full((len(blocks), 1), d, dtype=np.float16).view(np.uint8)
    return blocks.reshape(rows, cols // 256 * size)


def encode(rng: np.random.Generator, kind: str, rows: int, cols: int) -> tuple[np.ndarray, object]:
    """A random `rows`×`cols` weight in `kind`'s encoding, and the raw type to declare it with (None: numpy's own)."""
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    values = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    if kind == "F16":
        return values.astype(np.float16), None
    qtype = GGMLQuantizationType[kind]
    if kind == "Q4_K":  # d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles: d·sc·q − dmin·m
        return _k_blocks(rng, rows, cols, 144, (0, 2), 2e-5), qtype
    if kind == "Q6_K":  # 128 + 64 bytes of 6-bit values, 16 int8 scales, then d (f16): d·scale·(q − 32)
        return _k_blocks(rng, rows, cols, 210, (208,), 5e-6), qtype
    return quants.quantize(values, qtype), qtype


def write_kernels_model(
    path: Path, kinds: tuple[str, ...] = KERNEL_TYPES, layers_per_kind: int = 1, embd: int = EMBD, ff: int = FF
) -> None:
    """A llama whose layers hold `kinds` in turn (every matmul weight of a layer in its kind; the output in the last),
    with a vocabulary of bare ids (llama-bench needs no tokenizer). About 4 MB for `KERNEL_TYPES` at the proof's size;
    `embd` and `ff` (multiples of 256) make one of any size for a benchmark (bench/amx-fix.sh)."""
    import numpy as np
    from gguf import GGUFWriter

    rng = np.random.default_rng(0)
    layers = [kind for kind in kinds for _ in range(layers_per_kind)]
    heads = embd // (EMBD // HEADS)  # heads of 64
    kv_heads = heads * KV_HEADS // HEADS
    writer = GGUFWriter(str(path), "llama")
    writer.add_context_length(CTX)
    writer.add_embedding_length(embd)
    writer.add_block_count(len(layers))
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(embd // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(VOCAB)
    writer.add_tokenizer_model("none")

    def add(name: str, kind: str, rows: int, cols: int) -> None:  # rows × cols is numpy's order, ggml's reversed
        data, raw = encode(rng, kind, rows, cols)
        writer.add_tensor(name, data, raw_dtype=raw)  # type: ignore[arg-type]

    ones = np.ones(embd, dtype=np.float32)
    add("token_embd.weight", "F16", VOCAB, embd)
    writer.add_tensor("output_norm.weight", ones)
    add("output.weight", layers[-1], VOCAB, embd)
    for i, kind in enumerate(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        for name, rows, cols in attention(i, embd, heads, kv_heads):
            add(name, kind, rows, cols)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        for name, rows, cols in feed_forward(i, embd, ff):
            add(name, kind, rows, cols)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _cached(path: Path, write: Callable[[Path], None]) -> Path:
    if not path.exists():
        with locked(path.with_suffix(".lock")):
            if not path.exists():
                tmp = path.with_name(f".{path.name}.{os.getpid()}")
                write(tmp)
                os.replace(tmp, path)
    return path


def tiny_model(cache_dir: Path) -> Path:
    return _cached(cache_dir / "smoke" / TINY_NAME, write_tiny_model)


def kernels_model(cache_dir: Path, kind: str | None = None) -> Path:
    """The kernels model (every type of `KERNEL_TYPES`), or one of a single `kind` in two layers."""
    name = f"kernels-v{KERNELS_VERSION}-{kind or 'mixed'}.gguf"
    if kind is None:
        return _cached(cache_dir / "smoke" / name, write_kernels_model)
    return _cached(cache_dir / "smoke" / name, lambda path: write_kernels_model(path, (kind,), 2))
