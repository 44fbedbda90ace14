#!/usr/bin/env python3
"""An independent float64 NumPy forward of a llama-architecture GGUF (issue #29's oracle), written from the
LLaMA architecture and llama.cpp's layout -- not from mocbench: weights come from the `gguf` package's own
reader and dequantizer, q and k stay in llama.cpp's permuted row order and RoPE rotates adjacent pairs
(llama.cpp's "norm" RoPE), as llama.cpp runs them; the LM head is output.weight or, when the file has none, the
token embedding. Prints the mean next-token cross-entropy of the ids given, and optionally saves the logits.

usage: llama_gguf_ref.py FILE.gguf ID [ID ...] [--logits OUT.npy] [--greedy N]
  --greedy N: instead, N greedy tokens after the ids (ties: the lowest id), one line: the ids, then the
  smallest gap between the best and second-best logit over the N choices (where ties could flip a choice)
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

from ref_common import report, rmsnorm, take_option


def tensors(reader):
    out = {}
    for t in reader.tensors:
        # dequantize gives the values in ggml order reversed (numpy: slowest first): [out, in] for a matrix.
        out[t.name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
    return out


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return v.tobytes().decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0].item()


def rope_adjacent(x, theta):
    # x: [T, heads, hd]; pairs (2i, 2i + 1) rotate by pos * theta^(-2i / hd)
    T, _, hd = x.shape
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = a * s + b * c
    return y


def forward(reader, ids):
    w = tensors(reader)
    d = field(reader, "llama.embedding_length")
    H = field(reader, "llama.attention.head_count")
    KV = field(reader, "llama.attention.head_count_kv")
    L = field(reader, "llama.block_count")
    eps = field(reader, "llama.attention.layer_norm_rms_epsilon")
    theta = field(reader, "llama.rope.freq_base")
    hd = d // H
    T = len(ids)
    x = w["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = f"blk.{l}."
        h = rmsnorm(x, w[p + "attn_norm.weight"], eps)
        q = rope_adjacent((h @ w[p + "attn_q.weight"].T).reshape(T, H, hd), theta)
        k = rope_adjacent((h @ w[p + "attn_k.weight"].T).reshape(T, KV, hd), theta)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, KV, hd)
        k = np.repeat(k, H // KV, axis=1)
        v = np.repeat(v, H // KV, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, d)
        x = x + o @ w[p + "attn_output.weight"].T
        h = rmsnorm(x, w[p + "ffn_norm.weight"], eps)
        g = h @ w[p + "ffn_gate.weight"].T
        u = h @ w[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    x = rmsnorm(x, w["output_norm.weight"], eps)
    head = w.get("output.weight", w["token_embd.weight"])
    return x @ head.T


def main():
    args = sys.argv[1:]
    out = take_option(args, "--logits")
    greedy = take_option(args, "--greedy", int)
    reader = gguf.GGUFReader(args[0])
    ids = np.array([int(a) for a in args[1:]])
    if greedy:
        seq, gap = list(ids), np.inf
        for _ in range(greedy):
            last = forward(reader, np.array(seq))[-1]
            top2 = np.sort(last)[-2:]
            gap = min(gap, float(top2[1] - top2[0]))
            seq.append(int(np.argmax(last)))
        print(" ".join(map(str, seq[len(ids):])), gap)
        return
    report(forward(reader, ids), ids, out)


if __name__ == "__main__":
    main()
