#!/usr/bin/env python3
"""An independent float64 NumPy forward of a Hugging Face LLaMA-family folder (issue #29's oracle), written from
transformers' modeling code's semantics -- not from mocbench: projections [out, in] applied as x W^T, RoPE by
rotate_half (the first and second half of each head rotate together), Qwen3's RMSNorm on each head's q and k
before RoPE, Mixtral's router (softmax over the experts, the top num_experts_per_tok kept and renormalized), a
head tied to the embedding when lm_head.weight is absent. Reads safetensors itself (F32, BF16, F16).

usage: llama_hf_ref.py DIR ID [ID ...] [--logits OUT.npy]   (prints the mean next-token cross-entropy)
"""
import json
import os
import struct
import sys

import numpy as np

from ref_common import report, rmsnorm, take_option


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        buf = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = buf[b:e]
        if info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        else:
            raise SystemExit(f"{path}: {name} is {info['dtype']}")
        out[name] = a.astype(np.float64).reshape(info["shape"])
    return out


def tensors(d):
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    out = {}
    for shard in sorted(set(idx["weight_map"].values())):
        out.update(read_safetensors(os.path.join(d, shard)))
    return out


def rope_half(x, theta):
    # x: [T, heads, hd]; element i pairs with i + hd/2, angle pos * theta^(-2i / hd)
    T, _, hd = x.shape
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], -1)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * c + rot * s


def swiglu(h, wg, wu, wd):
    g = h @ wg.T
    return (g / (1 + np.exp(-g)) * (h @ wu.T)) @ wd.T


def forward(d, ids):
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = tensors(d)
    arch = cfg["architectures"][0]
    D, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    KV = cfg.get("num_key_value_heads") or H
    hd = cfg.get("head_dim") or D // H
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    T = len(ids)
    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hd)
        if arch == "Qwen3ForCausalLM":
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope_half(q, theta), rope_half(k, theta)
        k = np.repeat(k, H // KV, axis=1)
        v = np.repeat(v, H // KV, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", s, v).reshape(T, H * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        if arch == "MixtralForCausalLM":
            logits = h @ w[p + "block_sparse_moe.gate.weight"].T
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            top = np.argsort(-pr, axis=-1, kind="stable")[:, :cfg["num_experts_per_tok"]]
            y = np.zeros_like(x)
            for t in range(T):
                sel = pr[t, top[t]] / pr[t, top[t]].sum()
                for e, wt in zip(top[t], sel):
                    q_ = p + f"block_sparse_moe.experts.{e}."
                    y[t] += wt * swiglu(h[t:t + 1], w[q_ + "w1.weight"], w[q_ + "w3.weight"], w[q_ + "w2.weight"])[0]
            x = x + y
        else:
            x = x + swiglu(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"])
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def main():
    args = sys.argv[1:]
    out = take_option(args, "--logits")
    ids = np.array([int(a) for a in args[1:]])
    report(forward(args[0], ids), ids, out)


if __name__ == "__main__":
    main()
