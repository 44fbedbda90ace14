"""The gate figure of bench/RESULTS.md, "SmolLM2-135M": from smollm2_gate_analysis_k0.2.json, written by
`mocbench eval SmolLM2.gguf --tokens ids.txt --window 512 --ffn moc --k 0.2 --analyze FILE`. Debian's python3."""
import json
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
a = json.load(open(os.path.join(here, "smollm2_gate_analysis_k0.2.json")))
fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), dpi=110)
for ax, key, thr in ((axes[0], "pre", "threshold_pre"), (axes[1], "post", "threshold_post")):
    for l, colour in ((2, "C0"), (15, "C1"), (28, "C2")):
        h = a["layers"][l][key]
        n = len(h["density"])
        w = (h["hi"] - h["lo"]) / n
        xs = [h["lo"] + (i + 0.5) * w for i in range(n)]
        ax.plot(xs, h["density"], color=colour, label=f"layer {l}")
        ax.axvline(a["layers"][l][thr], color=colour, ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("G = x W_gate" if key == "pre" else "SiLU(G)")
    ax.set_ylabel("fraction of (token, channel)")
    ax.legend(fontsize=7)
ax = axes[2]
B = list(range(1, len(a["union_mean"]) + 1))
ax.plot(B, a["union_mean"], "o-", label="measured (4,088 tokens of Python docs)")
ax.plot(B, a["union_independent"], "s--", label="independent selections")
ax.set_xlabel("B (tokens of B sequences)")
ax.set_ylabel("channels a step reads (union)")
ax.legend(fontsize=7)
fig.suptitle(f"SmolLM2-135M gates, top-K by G with K = {a['kept']} of {a['d_ffn']} (dashed: median top-K threshold)",
             fontsize=9)
fig.tight_layout()
fig.savefig(os.path.join(here, "smollm2_gates.png"))
