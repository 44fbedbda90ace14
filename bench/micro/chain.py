#!/usr/bin/env python3
"""Per-layer chain of a profiled decode step: each kernel's end minus its predecessor's end (the time it adds to
the step), median per kernel name over the step's launches, from a mocbench database's CUPTI kernel records.
Usage: chain.py DB [POINT_ID] [--timeline LAYER] [--stages] [--stage-launches]  (default: every profiled point).
--timeline LAYER also prints that layer's kernels (from its QKV kernel to the next layer's) with start, end and
duration relative to the step's first kernel (us), grid, registers and shared memory: where a kernel's early-launched
blocks started, what overlapped -- bench/RESULTS.md part 9 read the pending-add experiment this way.
--stages also prints the stage stamps of the point (kernels that stamp: the decode FFN's): each stage's duration, median
over its launches, in kernel and stage order -- bench/RESULTS.md part 10 read the up/down kernel's "gate & up" and
"down" this way.
--stage-launches prints, for the first step, every stamped launch: its predecessor's end, its first block's start, each
stage (start, duration) and its end, relative to the step's first kernel (us) -- bench/RESULTS.md part 15 read the
dense ring's stream this way (how early its blocks came, how long each layer's "gate & up" took).
layer_svg.py draws the same adds against the kernels' byte floors (it imports kernel_rows and adds from here)."""
import argparse
import sqlite3
import statistics

COLS = ("step", "start", "end", "name", "gridX", "gridY", "gridZ", "blockX", "regs", "dsmem", "ssmem", "op_bytes")


def kernel_rows(c, point):
    """The point's kernel records in step and start order, as dicts of COLS (names resolved)."""
    names = dict(c.execute("select id, value from StringIds"))
    rows = c.execute("select step, start, end, shortName, gridX, gridY, gridZ, blockX, registersPerThread, "
                     "dynamicSharedMemory, staticSharedMemory, opBytes from CUPTI_ACTIVITY_KIND_KERNEL "
                     "where point_id=? order by step, start", (point,)).fetchall()
    out = []
    for r in rows:
        d = dict(zip(COLS, r))
        d["name"] = names[d["name"]]
        out.append(d)
    return out


def adds(step_rows):
    """What each kernel of one step adds: its end minus the latest end before it (0 when it ended inside)."""
    prev = step_rows[0]["start"]
    out = []
    for k in step_rows:
        out.append(max(0, k["end"] - prev) / 1e3)
        prev = max(prev, k["end"])
    return out


def stamp_rows(c, point):
    """The point's stage stamps in start order as (step, kernel, launch, stage, start, end), names resolved; none
    for a database from before stage stamps were stored."""
    names = dict(c.execute("select id, value from StringIds"))
    try:
        rows = c.execute("select step, kernel, launch, stage, start, end from STAGE_STAMPS where point_id=? "
                         "order by start", (point,)).fetchall()
    except sqlite3.OperationalError:
        return []
    return [(st, names[k], launch, names[sg], a, b) for st, k, launch, sg, a, b in rows]


def stage_medians(c, point):
    """(kernel, stage, n, median us) for each stamped stage of the point, in the order the stages first ran."""
    per, order = {}, []
    for _, kernel, _, stage, start, end in stamp_rows(c, point):
        key = (kernel, stage)
        if key not in per:
            per[key] = []
            order.append(key)
        per[key].append((end - start) / 1e3)
    return [(k, s, len(per[(k, s)]), statistics.median(per[(k, s)])) for k, s in order]


def stage_launches(c, point, rows):
    """Lines for --stage-launches: each stamped launch of the point's first step beside its CUPTI record (the k-th
    stamped launch of a kernel name is that name's k-th kernel record of the step, in start order)."""
    st = stamp_rows(c, point)
    if not st or not rows:
        return ["  (no stage stamps at this point)"]
    step = min(r["step"] for r in rows)
    ks = [r for r in rows if r["step"] == step]
    t0 = ks[0]["start"]
    per = {}
    for s_, kernel, launch, stage, start, end in st:
        if s_ == step:
            per.setdefault((kernel, launch), []).append((stage, start, end))
    recs = {}  # kernel name -> indices of its records in ks
    for i, r in enumerate(ks):
        recs.setdefault(r["name"], []).append(i)
    out, seen = [], {}
    for kname, launch in sorted(per, key=lambda kl: min(x[1] for x in per[kl])):
        idx = seen.get(kname, 0)
        seen[kname] = idx + 1
        if idx >= len(recs.get(kname, [])):
            continue
        i = recs[kname][idx]
        k = ks[i]
        prev_end = max((r["end"] for r in ks[:i]), default=k["start"])
        stages = " ".join(f"{nm} [{(a - t0) / 1e3:.2f} +{(b - a) / 1e3:.2f}]" for nm, a, b in per[(kname, launch)])
        out.append(f"  {kname[:12]:12s} #{idx:<3d} prev end {(prev_end - t0) / 1e3:9.2f}  start {(k['start'] - t0) / 1e3:9.2f} "
                   f"(early {(prev_end - k['start']) / 1e3:6.2f})  {stages}  end {(k['end'] - t0) / 1e3:9.2f} "
                   f"adds {max(0, k['end'] - prev_end) / 1e3:6.2f}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db")
    ap.add_argument("point", nargs="?", type=int, help="point id (sweep index + 1); default every profiled point")
    ap.add_argument("--timeline", type=int, metavar="LAYER", help="also print this layer's kernels")
    ap.add_argument("--stages", action="store_true", help="also print the stage stamps' median durations")
    ap.add_argument("--stage-launches", action="store_true", help="also print every stamped launch of the first step")
    args = ap.parse_args()
    timeline = args.timeline
    c = sqlite3.connect(args.db)
    pts = [args.point] if args.point is not None else [r[0] for r in c.execute(
        "select distinct point_id from CUPTI_ACTIVITY_KIND_KERNEL order by point_id")]
    for p in pts:
        rows = kernel_rows(c, p)
        steps = sorted({r["step"] for r in rows})
        per, step_ms = {}, []
        for s in steps:
            ks = [r for r in rows if r["step"] == s]
            step_ms.append((max(r["end"] for r in ks) - ks[0]["start"]) / 1e6)
            for k, a in zip(ks, adds(ks)):
                per.setdefault(k["name"], []).append(a)
        print(f"point {p}: {len(steps)} steps, step span median {statistics.median(step_ms):.4f} ms")
        for nm, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {nm:28s} n {len(v):4d}  median add {statistics.median(v):7.2f} us  "
                  f"sum/step {sum(v) / len(steps):8.1f} us")
        if args.stages:
            st = stage_medians(c, p)
            if not st:
                print("  (no stage stamps at this point)")
            for kernel, stage, n, med in st:
                print(f"  stage {kernel:12s} {stage:12s} n {n:4d}  median {med:7.2f} us")
        if args.stage_launches:
            for line in stage_launches(c, p, rows):
                print(line)
        if timeline is None:
            continue
        ks = [r for r in rows if r["step"] == steps[0]]
        qkv = [i for i, r in enumerate(ks) if r["name"].startswith("k_qkv")]
        if timeline + 1 >= len(qkv):
            print(f"  (no layer {timeline}: the step has {max(0, len(qkv) - 1)} whole layers)")
            continue
        t0 = ks[0]["start"]
        print(f"  layer {timeline} of step {steps[0]} (us from the step's first kernel):")
        for k in ks[qkv[timeline]:qkv[timeline + 1] + 1]:
            print(f"    {k['name'][:26]:26s} start {(k['start'] - t0) / 1e3:9.2f}  end {(k['end'] - t0) / 1e3:9.2f}  "
                  f"dur {(k['end'] - k['start']) / 1e3:7.2f}  grid {k['gridX']}x{k['gridY']}x{k['gridZ']} x "
                  f"{k['blockX']}  regs {k['regs']}  smem {k['dsmem']}+{k['ssmem']}")


if __name__ == "__main__":
    main()
