#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log per kernel name (profiling aid)."""
import collections, csv, sys

rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
ki, mi, vi = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
tot, cnt = collections.Counter(), collections.Counter()
for r in body:
    if r[mi] != "gpu__time_duration.sum":
        continue
    name = r[ki].split("(")[0][:90]
    tot[name] += float(r[vi].replace(",", ""))
    cnt[name] += 1
allt = sum(tot.values())
print(f"{len(body)} kernels, {allt/1e3:.1f} us in total")
for n, t in tot.most_common(40):
    print(f"{t/1e3:10.1f} us {cnt[n]:6d} x {t/cnt[n]/1e3:8.2f} us  {n}")
