#!/usr/bin/env python3
"""Writes a small random llama-architecture GGUF with the `gguf` package's own writer and quantizers (issue
#29's oracle fixture): F32 norms, a Q8_0 token embedding tied to the output (no output.weight), Q4_1 and Q4_0
attention, F16 and BF16 FFN matrices; GQA (heads 4, kv heads 2), head size 16 (RoPE over all of it). q and k
are written as llama.cpp's converter writes them: rows permuted for its RoPE layout.

usage: make_tiny_gguf.py OUT.gguf [SEED]
"""
import sys

import numpy as np
import gguf
from gguf.quants import quantize

Q = gguf.GGMLQuantizationType


def permute(w, heads):  # llama.cpp's convert_hf_to_gguf.py LlamaModel.permute (Hugging Face -> GGUF rows)
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    d, F, H, KV, L, V, ctx = 64, 96, 4, 2, 2, 160, 64
    hd = d // H
    w = gguf.GGUFWriter(out, "llama")
    w.add_block_count(L)
    w.add_context_length(ctx)
    w.add_embedding_length(d)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)

    def mat(rows, cols, scale=0.15):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def add(name, arr, qtype):
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, arr.astype(np.float32 if qtype == Q.F32 else np.float16))
        else:
            w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)

    add("token_embd.weight", mat(V, d, 0.5), Q.Q8_0)
    add("output_norm.weight", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32), Q.F32)
    for l in range(L):
        p = f"blk.{l}."
        add(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32), Q.F32)
        add(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32), Q.F32)
        add(p + "attn_q.weight", permute(mat(d, d), H), Q.Q4_1)
        add(p + "attn_k.weight", permute(mat(KV * hd, d), KV), Q.Q4_0)
        add(p + "attn_v.weight", mat(KV * hd, d), Q.Q8_0)
        add(p + "attn_output.weight", mat(d, d), Q.Q4_1)
        add(p + "ffn_gate.weight", mat(F, d), Q.F16)
        add(p + "ffn_up.weight", mat(F, d), Q.BF16)
        add(p + "ffn_down.weight", mat(d, F), Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
