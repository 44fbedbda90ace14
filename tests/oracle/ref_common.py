"""What the float64 NumPy references (llama_gguf_ref.py, llama_hf_ref.py) share: RMSNorm, their option parsing
and the loss they print. Neither reads anything of mocbench."""
import numpy as np


def rmsnorm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def take_option(args, name, convert=str):
    """Removes `name VALUE` from args and returns VALUE converted (None when absent)."""
    if name not in args:
        return None
    i = args.index(name)
    value = convert(args[i + 1])
    del args[i:i + 2]
    return value


def report(logits, ids, out):
    """Saves the logits to `out` (when given) and prints the mean next-token cross-entropy of the ids."""
    if out:
        np.save(out, logits)
    z = logits[:-1] - logits[:-1].max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    print(f"{float(np.mean(lse - z[np.arange(len(ids) - 1), ids[1:]])):.10f}")
