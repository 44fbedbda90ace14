#!/usr/bin/env python3
"""Cross-checks mocbench's safetensors files against the reference implementation (the `safetensors` PyPI
package with PyTorch, as on the GPU machine).

  safetensors_crosscheck.py read FILE EXPECTED.json   load FILE with safetensors and compare every tensor
                                                      (dtype, shape, values) with what mocbench says it wrote
  safetensors_crosscheck.py write FILE                write known tensors (F32, BF16, I32, metadata) for
                                                      mocbench's reader (tests/test_checkpoint.cpp checks them)
"""
import json
import sys


def main():
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    if sys.argv[1] == "read":
        path, expected = sys.argv[2], json.load(open(sys.argv[3]))
        names = 0
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
            assert meta.get("format") == "mocbench-checkpoint-1", meta
            keys = set(f.keys())
            assert keys == set(expected), (sorted(keys ^ set(expected)))[:5]
            for name, e in expected.items():
                t = f.get_tensor(name)
                want_dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "I32": torch.int32}[e["dtype"]]
                assert t.dtype == want_dtype, (name, t.dtype)
                assert list(t.shape) == e["shape"], (name, list(t.shape), e["shape"])
                # mocbench prints each value with 9 significant digits: exact for float32 (and bf16) values.
                got = t.float().flatten()
                want = torch.tensor(e["values"], dtype=torch.float32)
                assert torch.equal(got, want), (name, got[:4].tolist(), want[:4].tolist())
                names += 1
        print(f"safetensors {__import__('safetensors').__version__} (torch {torch.__version__}) read {path}: "
              f"{names} tensors, dtypes, shapes and values equal, metadata {meta.get('format')}")
    elif sys.argv[1] == "write":
        tensors = {
            "a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
            "b": torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16),
            "c": torch.tensor([7, 8], dtype=torch.int32),
        }
        save_file(tensors, sys.argv[2], metadata={"by": "python"})
        print(f"wrote {sys.argv[2]}")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
