#!/usr/bin/env python3
"""Per-layer chain of a profiled decode step: each kernel's end minus its predecessor's end (the time it adds to
the step), median per kernel name over the step's launches, from a mocbench database's CUPTI kernel records.
Usage: chain.py DB [POINT_ID] [--timeline LAYER]  (default: every profiled point).
--timeline LAYER also prints that layer's kernels (from its QKV kernel to the next layer's) with start, end and
duration relative to the step's first kernel (us), grid, registers and shared memory: where a kernel's early-launched
blocks started, what overlapped -- bench/RESULTS.md part 9 read the pending-add experiment this way."""
import sqlite3, statistics, sys
args = [a for a in sys.argv[1:]]
timeline = None
if "--timeline" in args:
    i = args.index("--timeline")
    timeline = int(args[i + 1])
    del args[i:i + 2]
db = args[0]
c = sqlite3.connect(db)
pts = [int(args[1])] if len(args) > 1 else [r[0] for r in c.execute(
    "select distinct point_id from CUPTI_ACTIVITY_KIND_KERNEL order by point_id")]
names = dict(c.execute("select id, value from StringIds"))
for p in pts:
    rows = c.execute("select step, start, end, shortName, gridX, gridY, gridZ, blockX, registersPerThread, "
                     "dynamicSharedMemory, staticSharedMemory from CUPTI_ACTIVITY_KIND_KERNEL where point_id=? "
                     "order by step, start", (p,)).fetchall()
    steps = sorted({r[0] for r in rows})
    adds, step_ms = {}, []
    for s in steps:
        ks = [r for r in rows if r[0] == s]
        step_ms.append((max(r[2] for r in ks) - ks[0][1]) / 1e6)
        prev = ks[0][1]
        for k in ks:
            st, en, nm = k[1], k[2], k[3]
            adds.setdefault(names[nm], []).append(max(0, en - prev) / 1e3)  # 0: ended inside its predecessor
            prev = max(prev, en)
    print(f"point {p}: {len(steps)} steps, step span median {statistics.median(step_ms):.4f} ms")
    for nm, v in sorted(adds.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {nm:28s} n {len(v):4d}  median add {statistics.median(v):7.2f} us  sum/step {sum(v)/len(steps):8.1f} us")
    if timeline is not None:
        ks = [r for r in rows if r[0] == steps[0]]
        qkv = [i for i, r in enumerate(ks) if names[r[3]].startswith("k_qkv")]
        if timeline + 1 >= len(qkv):
            print(f"  (no layer {timeline}: the step has {max(0, len(qkv) - 1)} whole layers)")
            continue
        t0 = ks[0][1]
        print(f"  layer {timeline} of step {steps[0]} (us from the step's first kernel):")
        for k in ks[qkv[timeline]:qkv[timeline + 1] + 1]:
            _, st, en, nm, gx, gy, gz, bx, reg, dsm, ssm = k
            print(f"    {names[nm][:26]:26s} start {(st - t0) / 1e3:9.2f}  end {(en - t0) / 1e3:9.2f}  "
                  f"dur {(en - st) / 1e3:7.2f}  grid {gx}x{gy}x{gz} x {bx}  regs {reg}  smem {dsm}+{ssm}")
