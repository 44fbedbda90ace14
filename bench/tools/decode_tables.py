#!/usr/bin/env python3
"""Markdown tables of a decode_bs1_4 run (ffn-decode and decode) from a results database:
`bench/tools/decode_tables.py DB [RUN] [--peer PEER.csv]` (default: the newest run). Used for bench/RESULTS.md.

One column per decode_impl value the run holds: "kernels" now; runs recorded before the persistent step
was retired also hold "persistent", shown beside it with its ratio to the kernel path.
With --peer (bench/peers/torch_decode_peer.py's CSV, run in the same device call), a third table as RESULTS shows
the study: per (ffn, batch) mocbench's ms per token and one-layer us beside the peer's fastest full-FFN variant that
ran (dense; moc_k1024_*; moc28_*), and each profiled step's busy time against its timed median (one layer: the busy
time of a replay, divided by its calls: calls_per_replay, or weight_copies in runs before 2026-11-28)."""
import csv
import sqlite3
import sys


def peer_best(path):
    """{(study, ffn, batch): (median_us, variant/impl)}: the fastest full-FFN row of each that ran."""
    kinds = (("dense", lambda v: v == "dense"), ("moc", lambda v: v.startswith("moc_k")),
             ("moc_2:8", lambda v: v.startswith("moc28")))
    best = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            if r.get("study") not in ("ffn-decode", "decode") or not r.get("median_us"):
                continue
            ffn = next((k for k, match in kinds if match(r["variant"])), None)
            if ffn is None:
                continue
            key = (r["study"], ffn, int(r["batch"]))
            v = float(r["median_us"])
            if key not in best or v < best[key][0]:
                best[key] = (v, r["variant"] + "/" + r["impl"])
    return best


def main():
    args = sys.argv[1:]
    peer = None
    if "--peer" in args:
        i = args.index("--peer")
        if i + 1 >= len(args):
            sys.exit(__doc__)
        peer = peer_best(args[i + 1])
        del args[i:i + 2]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    # Read-only: a mistyped path is an error, not a new empty database file.
    db = sqlite3.connect(f"file:{args[0]}?mode=ro", uri=True)
    run = int(args[1]) if len(args) > 1 else db.execute("SELECT max(id) FROM runs").fetchone()[0]
    pts = {}
    for pid, status in db.execute("SELECT id, status FROM points WHERE run_id=? ORDER BY sweep_index", (run,)):
        axes = dict(db.execute("SELECT name, value FROM point_axes WHERE point_id=?", (pid,)))
        mets = dict(db.execute("SELECT name, value FROM metrics WHERE point_id=?", (pid,)))
        key = (axes.get("mode"), axes.get("ffn"), int(axes.get("batch", 0)), axes.get("decode_impl", "kernels"))
        pts[key] = (status, mets)
    impls = ["kernels"] + sorted({k[3] for k in pts} - {"kernels"})
    others = impls[1:]
    short = {i: i[0] for i in impls}  # k, p
    ffns = ["dense", "moc", "moc_2:8"]
    f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
    tag = " / ".join(short[i] for i in impls)

    def ratio(a, b):
        return a / b if a and b else None

    cols = [f"{i} µs" for i in impls] + ["floor µs", f"% of floor ({tag})", "union", f"vs dense ({tag})"]
    cols += [f"{i} vs kernels" for i in others]
    print("| ffn | batch | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for ffn in ffns:
        for b in range(1, 5):
            r = {i: pts.get(("ffn-decode", ffn, b, i), (None, {}))[1] for i in impls}
            d = {i: pts.get(("ffn-decode", "dense", b, i), (None, {}))[1] for i in impls}
            lat = {i: r[i].get("latency_us") for i in impls}
            fl = r["kernels"].get("floor_us")
            pct = " / ".join(f(100 * fl / lat[i] if fl and lat[i] else None, 0) + "%" for i in impls)
            vs = " / ".join(f(ratio(d[i].get("latency_us"), lat[i]), 2) + "x" for i in impls)
            un = r["kernels"].get("union_channels")
            row = [f(lat[i]) for i in impls] + [f(fl), pct, "-" if ffn == "dense" or un is None else str(int(un)), vs]
            row += [f(ratio(lat["kernels"], lat[i]), 2) + "x" for i in others]
            print(f"| {ffn} | {b} | " + " | ".join(row) + " |")
    print()
    cols = [f"{i} ms/token" for i in impls] + [f"vs dense kernels ({tag})"]
    cols += [f"{i} vs kernels" for i in others] + ["prefill ms (noise)"]
    print("| ffn | batch | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for ffn in ffns:
        for b in range(1, 5):
            r = {i: pts.get(("decode", ffn, b, i), (None, {}))[1] for i in impls}
            d = pts.get(("decode", "dense", b, "kernels"), (None, {}))[1].get("ms_per_token")
            ms = {i: r[i].get("ms_per_token") for i in impls}
            vs = " / ".join(f(ratio(d, ms[i]), 2) + "x" for i in impls)
            pre = r["kernels"].get("prefill_ms")
            pn = r["kernels"].get("prefill_noise")
            row = [f(ms[i], 3) for i in impls] + [vs] + [f(ratio(ms["kernels"], ms[i]), 2) + "x" for i in others]
            row.append(f"{f(pre, 2)} ({f(100 * pn if pn is not None else None, 1)}%)")
            print(f"| {ffn} | {b} | " + " | ".join(row) + " |")
    if peer is not None:
        print()
        cols = ["ms per token", "vs dense", "PyTorch peer, ms", "one FFN layer, us", "vs dense", "PyTorch peer, us",
                "profiled vs timed"]
        print("| ffn | batch | " + " | ".join(cols) + " |")
        print("|---|---|" + "---|" * len(cols))

        def over(m, per):
            busy, med = m.get("profile_gpu_busy_ms"), m.get("median_ms")
            if busy is None or not med:
                return "-"
            return f"{100 * (busy / per - med) / med:+.1f}%"

        for ffn in ffns:
            for b in range(1, 5):
                dm = pts.get(("decode", ffn, b, "kernels"), (None, {}))[1]
                fm = pts.get(("ffn-decode", ffn, b, "kernels"), (None, {}))[1]
                dd = pts.get(("decode", "dense", b, "kernels"), (None, {}))[1].get("ms_per_token")
                fd = pts.get(("ffn-decode", "dense", b, "kernels"), (None, {}))[1].get("latency_us")
                ms, us = dm.get("ms_per_token"), fm.get("latency_us")
                pd = peer.get(("decode", ffn, b), (None, ""))[0]
                pf = peer.get(("ffn-decode", ffn, b), (None, ""))[0]
                row = [f(ms, 3), f(ratio(dd, ms), 2) + "x", f(pd / 1e3 if pd else None, 3), f(us),
                       f(ratio(fd, us), 2) + "x", f(pf), over(dm, 1) + " / " + over(fm, fm.get("calls_per_replay") or fm.get("weight_copies") or 1)]
                print(f"| {ffn} | {b} | " + " | ".join(row) + " |")
    bad = [(k, s) for k, (s, _) in pts.items() if s != "ok"]
    if bad:
        print("\nnot ok:", bad)


if __name__ == "__main__":
    main()
