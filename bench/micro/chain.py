#!/usr/bin/env python3
"""Per-layer chain of a profiled decode step: each kernel's end minus its predecessor's end (the time it adds to
the step), median per kernel name over the step's launches, from a mocbench database's CUPTI kernel records.
Usage: chain.py DB [POINT_ID]  (default: every profiled point)."""
import sqlite3, statistics, sys
db = sys.argv[1]
c = sqlite3.connect(db)
pts = [int(sys.argv[2])] if len(sys.argv) > 2 else [r[0] for r in c.execute(
    "select distinct point_id from CUPTI_ACTIVITY_KIND_KERNEL order by point_id")]
names = dict(c.execute("select id, value from StringIds"))
for p in pts:
    rows = c.execute("select step, start, end, shortName from CUPTI_ACTIVITY_KIND_KERNEL where point_id=? "
                     "order by step, start", (p,)).fetchall()
    steps = sorted({r[0] for r in rows})
    adds, step_ms = {}, []
    for s in steps:
        ks = [r for r in rows if r[0] == s]
        step_ms.append((max(r[2] for r in ks) - ks[0][1]) / 1e6)
        prev = ks[0][1]
        for _, st, en, nm in ks:
            adds.setdefault(names[nm], []).append(max(0, en - prev) / 1e3)  # 0: ended inside its predecessor
            prev = max(prev, en)
    print(f"point {p}: {len(steps)} steps, step span median {statistics.median(step_ms):.4f} ms")
    for nm, v in sorted(adds.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {nm:28s} n {len(v):4d}  median add {statistics.median(v):7.2f} us  sum/step {sum(v)/len(steps):8.1f} us")
