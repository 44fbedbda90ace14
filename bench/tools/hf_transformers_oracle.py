#!/usr/bin/env python3
"""Issue #29's transformers oracle, for a machine with torch and transformers (the GPU machine): mocbench against
Hugging Face's own LlamaForCausalLM / Qwen3ForCausalLM / MixtralForCausalLM, both directions.

  1. transformers writes small random checkpoints (save_pretrained, safetensors); `mocbench eval --logits` reads
     them on the CPU and on CUDA (fp32): every logit against transformers' fp32 forward; `mocbench generate`
     against transformers' greedy generate (32 tokens). In bf16 on CUDA (`eval --precision bf16`: weights
     rounded on load, bf16 activations) against the same fp32 logits, next to transformers' own bf16 forward
     on CUDA: "within bf16 tolerance" is an error no larger than 2x transformers' own. (A random Mixtral's
     router flips experts under bf16 in both implementations, so its error is of the logits' size for both.)
  2. Folders mocbench wrote (`mocbench convert`, given as arguments) load in transformers with from_pretrained:
     transformers' logits against `mocbench eval` on the same folder.

usage: hf_transformers_oracle.py MOCBENCH WORKDIR [MOCBENCH_WRITTEN_DIR ...]
Prints one line per check; exit 1 when one fails.
"""
import copy
import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers

MOC, WORK = sys.argv[1], sys.argv[2]
WRITTEN = sys.argv[3:]
os.makedirs(WORK, exist_ok=True)
torch.manual_seed(0)
failures = 0
print(f"torch {torch.__version__}, transformers {transformers.__version__}")


def mocbench(*args):
    r = subprocess.run([MOC, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"mocbench {' '.join(args)}: exit {r.returncode}: {r.stdout[-400:]} {r.stderr[-400:]}")
    return r.stdout


def check(name, ok, detail):
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")


def their_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


def our_logits(folder, ids, device, precision="fp32"):
    out = os.path.join(WORK, "mine.npy")
    mocbench("eval", folder, "--ids", " ".join(map(str, ids)), "--device", device, "--precision", precision,
             "--logits", out, "--format", "json")
    return np.load(out).astype(np.float64)


def their_bf16_logits(model, ids):
    m = copy.deepcopy(model).to("cuda", dtype=torch.bfloat16)  # a copy: the fp32 model stays as it was
    with torch.no_grad():
        return m(torch.tensor([ids], device="cuda")).logits[0].float().cpu().double().numpy()


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


common = dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=2, vocab_size=512, max_position_embeddings=128, rms_norm_eps=1e-5,
              initializer_range=0.1, tie_word_embeddings=False)
configs = {
    "llama": lambda: transformers.LlamaConfig(**common, rope_theta=10000.0),
    "llama-tied": lambda: transformers.LlamaConfig(**{**common, "tie_word_embeddings": True}, rope_theta=500000.0),
    "qwen3": lambda: transformers.Qwen3Config(**common, head_dim=16, rope_theta=1e6, use_sliding_window=False),
    "mixtral": lambda: transformers.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2,
                                                  rope_theta=1e6, sliding_window=None),
}
rng = np.random.default_rng(0)
ids = [int(x) for x in rng.integers(0, 512, 48)]
for name, make in configs.items():
    try:
        cfg = make()
        model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).eval()
        folder = os.path.join(WORK, name)
        model.save_pretrained(folder, safe_serialization=True)
        if name == "qwen3":  # what transformers writes, for the record
            print("config.json keys:", sorted(json.load(open(os.path.join(folder, "config.json")))))
        want = their_logits(model, ids)
        for dev in ("cpu", "cuda"):
            got = our_logits(folder, ids, dev)
            r = rel(got, want)
            check(f"{name} transformers -> mocbench ({dev}, fp32)", got.shape == want.shape and r < 1e-5,
                  f"largest logit difference / largest logit = {r:.2e}")
        theirs = rel(their_bf16_logits(model, ids), want)
        r = rel(our_logits(folder, ids, "cuda", "bf16"), want)
        check(f"{name} transformers -> mocbench (cuda, bf16)", r < max(2 * theirs, 1e-3),
              f"against transformers' fp32 logits: mocbench bf16 {r:.2e}, transformers' own bf16 {theirs:.2e}")
        if name == "mixtral":  # mocbench's mixture of experts does not decode (README): logits only
            continue
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids[:16]]), max_new_tokens=32, do_sample=False,
                                 attention_mask=torch.ones(1, 16, dtype=torch.long))[0, 16:].tolist()
        ours = json.loads(mocbench("generate", folder, "--ids", " ".join(map(str, ids[:16])), "-n", "32",
                                   "--format", "json"))
        toks = ours.get("tokens") or ours.get("ids")
        same = sum(1 for a, b in zip(toks, gen) if a == b)
        first = next((i for i, (a, b) in enumerate(zip(toks, gen)) if a != b), None)
        check(f"{name} greedy 32 tokens (cpu)", toks == gen,
              f"{same}/32 equal" + ("" if first is None else f", first difference at {first}"))
    except Exception as e:  # a transformers without this architecture, a refusal: reported, not hidden
        check(f"{name}", False, f"{type(e).__name__}: {e}")

for folder in WRITTEN:
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        vocab = model.config.vocab_size
        sub = [i % vocab for i in ids[:40]]
        want = their_logits(model, sub)
        got = our_logits(folder, sub, "cpu")
        r = rel(got, want)
        check(f"mocbench-written {os.path.basename(folder)} -> transformers", got.shape == want.shape and r < 1e-5,
              f"largest logit difference / largest logit = {r:.2e}")
    except Exception as e:
        check(f"mocbench-written {folder}", False, f"{type(e).__name__}: {e}")

print(f"{failures} failed")
sys.exit(1 if failures else 0)
