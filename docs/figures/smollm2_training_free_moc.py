"""The figure of bench/RESULTS.md, "SmolLM2-135M": perplexities measured with `mocbench eval` (numbers copied
from that section's table). Run with Debian's python3 (matplotlib)."""
import os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
dense = 11.98
gate = {0.1: 7009.6, 0.3: 4493.5, 0.5: 3487.1, 0.7: 1370.7, 0.9: 46.65}
absr = {0.3: 53.31, 0.5: 16.47, 0.7: 12.81, 0.9: 11.98}
fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
ax.plot(list(gate), list(gate.values()), "o-", label="top-K by G (the paper's rule, `select = gate`)")
ax.plot(list(absr), list(absr.values()), "s-", label="top-K by |SiLU(G)| (Theorem 1's rule, `abs_silu`)")
ax.plot([0.25], [5573.9], "^", color="C3", label="2:8 (K/d_ffn = 0.25, by G)")
ax.axhline(dense, color="grey", ls="--", lw=1, label=f"dense {dense} (= MoC at K = d_ffn)")
ax.set_yscale("log")
ax.set_xlabel("K / d_ffn (channels kept per token)")
ax.set_ylabel("perplexity (log scale)")
ax.set_title("SmolLM2-135M-Instruct (GGUF Q4_1), MoC applied without training\n4,088 tokens of Python docs (howto/functional), windows of 512, CPU fp32", fontsize=9)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
fig.tight_layout()
fig.savefig(os.path.join(os.path.dirname(os.path.abspath(__file__)), "smollm2_training_free_moc.png"))
