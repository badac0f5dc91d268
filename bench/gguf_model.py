"""A llama-architecture GGUF with random weights, dense or mixture-of-experts, of any size: for speed figures that
mean something without downloading a model. Its vocabulary is byte-level SentencePiece (the 256 bytes, the three
specials, and filler pieces up to the size asked; bare ids below that size), so llama-server and llama-cli can
tokenize and print, not only llama-bench. Used by tests (a small F32 one) and by the GPU scripts (1-3 GB F16).

    python bench/gguf_model.py OUT.gguf --embd 2048 --ff 5632 --layers 20 [--experts 16 --used 4] [--type f16]
"""

from __future__ import annotations

import argparse
from pathlib import Path

BYTE_VOCAB = 3 + 256  # the specials and a piece for every byte


def write_model(
    path: Path,
    *,
    embd: int,
    ff: int,
    layers: int,
    heads: int | None = None,
    kv_heads: int | None = None,
    vocab: int = 32000,
    ctx: int = 8192,
    experts: int = 0,
    used: int = 0,
    dtype: str = "f16",
) -> None:
    import numpy as np
    from gguf import GGUFWriter, TokenType

    from buildmgr.proof.models import attention, feed_forward

    heads = heads or max(embd // 64, 1)
    kv_heads = kv_heads or heads
    head_dim = embd // heads
    np_type = np.float16 if dtype == "f16" else np.float32
    # One random block repeated: the values do not change the speed, and writing gigabytes stays fast.
    block = (np.random.default_rng(0).standard_normal(1 << 20) * 0.02).astype(np_type)

    def weight(*shape: int):  # numpy shapes are ggml's reversed
        return np.resize(block, shape)

    def ones(n: int):
        return np.ones(n, dtype=np.float32)

    writer = GGUFWriter(str(path), "llama")
    writer.add_context_length(ctx)
    writer.add_embedding_length(embd)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    if vocab >= BYTE_VOCAB:
        specials, pieces = ["<unk>", "<s>", "</s>"], [f"<0x{b:02X}>" for b in range(256)]
        tokens = specials + pieces + [f"t{i}" for i in range(vocab - BYTE_VOCAB)]
        types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores([0.0] * len(tokens))
        writer.add_token_types(types + [TokenType.NORMAL] * (vocab - BYTE_VOCAB))
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_unk_token_id(0)
    else:  # too few for the bytes: bare ids, which llama-bench takes and the text tools do not
        writer.add_tokenizer_model("none")
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(used)
    writer.add_tensor("token_embd.weight", weight(vocab, embd))
    writer.add_tensor("output_norm.weight", ones(embd))
    writer.add_tensor("output.weight", weight(vocab, embd))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(embd))
        for name, rows, cols in attention(i, embd, heads, kv_heads):
            writer.add_tensor(name, weight(rows, cols))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones(embd))
        if experts:
            writer.add_tensor(f"blk.{i}.ffn_gate_inp.weight", weight(experts, embd).astype(np.float32))
            writer.add_tensor(f"blk.{i}.ffn_gate_exps.weight", weight(experts, ff, embd))
            writer.add_tensor(f"blk.{i}.ffn_up_exps.weight", weight(experts, ff, embd))
            writer.add_tensor(f"blk.{i}.ffn_down_exps.weight", weight(experts, embd, ff))
        else:
            for name, rows, cols in feed_forward(i, embd, ff):
                writer.add_tensor(name, weight(rows, cols))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--embd", type=int, default=2048)
    parser.add_argument("--ff", type=int, default=5632)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--kv-heads", type=int)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--experts", type=int, default=0)
    parser.add_argument("--used", type=int, default=0)
    parser.add_argument("--type", choices=("f16", "f32"), default="f16")
    args = parser.parse_args()
    write_model(
        args.out,
        embd=args.embd,
        ff=args.ff,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        vocab=args.vocab,
        ctx=args.ctx,
        experts=args.experts,
        used=args.used,
        dtype=args.type,
    )


if __name__ == "__main__":
    main()
