#!/usr/bin/env python3
"""Per point, every run's median and the median over the runs, from `mocbench export --all --format csv` files.

Usage: run_medians.py LABEL=CSV [LABEL=CSV ...]   (one CSV per variant: its runs of the same points)
Prints `LABEL: mode ffn batch  runs t1 t2 ...  median t ms` per point that ran ("LABEL: no point ran" when none did).
bench/micro/ab_decode.sh (two bundles) and knob_ab.sh (one knob's values) print their summaries with it."""
import csv
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        label, _, path = arg.rpartition("=")
        per = {}
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("status") != "ok" or not row.get("median_ms"):
                    continue
                per.setdefault((row["mode"], row["ffn"], row["batch"]), []).append(float(row["median_ms"]))
        if not per:
            print(f"{label}: no point ran")
        for key, t in sorted(per.items()):
            print(f"{label}: {' '.join(key)}  runs {' '.join(f'{x:.4f}' for x in t)}  "
                  f"median {statistics.median(t):.4f} ms")


if __name__ == "__main__":
    main()
