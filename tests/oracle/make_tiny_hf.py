#!/usr/bin/env python3
"""Writes a small random Hugging Face checkpoint folder (config.json + model.safetensors) the way
transformers' save_pretrained lays it out, with NumPy only (issue #29's oracle fixture in CI, where torch is
absent): LlamaForCausalLM (GQA, head tied or not), Qwen3ForCausalLM (q_norm / k_norm) or MixtralForCausalLM
(router "gate", experts w1 / w3 / w2). Projections are [out, in] as PyTorch stores them. The safetensors file is
written here from its specification (8-byte header length, JSON header, the buffer).

usage: make_tiny_hf.py OUT_DIR llama|qwen3|mixtral SEED [--tied] [--bf16]
"""
import json
import os
import struct
import sys

import numpy as np


def write_safetensors(path, tensors, bf16):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if bf16:  # round to nearest even, keep the top 16 bits
            u = a.view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            raw, dt = u.tobytes(), "BF16"
        else:
            raw, dt = a.tobytes(), "F32"
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    out, arch, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tied, bf16 = "--tied" in sys.argv, "--bf16" in sys.argv
    rng = np.random.default_rng(seed)
    d, F, H, KV, L, V, ctx = 64, 96, 4, 2, 2, 160, 64
    hd = d // H
    E, K = 4, 2
    w = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.2
    g = lambda n: (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    t = {"model.embed_tokens.weight": w(V, d)}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = g(d)
        t[p + "self_attn.q_proj.weight"] = w(H * hd, d)
        t[p + "self_attn.k_proj.weight"] = w(KV * hd, d)
        t[p + "self_attn.v_proj.weight"] = w(KV * hd, d)
        t[p + "self_attn.o_proj.weight"] = w(d, H * hd)
        if arch == "qwen3":
            t[p + "self_attn.q_norm.weight"] = g(hd)
            t[p + "self_attn.k_norm.weight"] = g(hd)
        t[p + "post_attention_layernorm.weight"] = g(d)
        if arch == "mixtral":
            t[p + "block_sparse_moe.gate.weight"] = w(E, d)
            for e in range(E):
                q = p + f"block_sparse_moe.experts.{e}."
                t[q + "w1.weight"], t[q + "w3.weight"], t[q + "w2.weight"] = w(F, d), w(F, d), w(d, F)
        else:
            t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"] = w(F, d), w(F, d)
            t[p + "mlp.down_proj.weight"] = w(d, F)
    t["model.norm.weight"] = g(d)
    if not tied:
        t["lm_head.weight"] = w(V, d)
    cfg = {
        "architectures": [{"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM"}[arch]],
        "model_type": arch, "hidden_size": d, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": hd, "vocab_size": V,
        "max_position_embeddings": ctx, "rms_norm_eps": 1e-5, "rope_theta": 10000.0 if arch != "qwen3" else 1e6,
        "hidden_act": "silu", "tie_word_embeddings": tied, "rope_scaling": None, "attention_bias": False,
        "torch_dtype": "bfloat16" if bf16 else "float32",
    }
    if arch == "mixtral":
        cfg.update({"num_local_experts": E, "num_experts_per_tok": K, "sliding_window": None})
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), t, bf16)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
