#!/usr/bin/env python3
"""Markdown tables of a decode_bs1_4 run (ffn-decode and decode, both decode_impl values) from a results
database: `bench/tools/decode_tables.py DB [RUN]` (default: the newest run). Used for bench/RESULTS.md."""
import sqlite3
import sys


def main():
    db = sqlite3.connect(sys.argv[1])
    run = int(sys.argv[2]) if len(sys.argv) > 2 else db.execute("SELECT max(id) FROM runs").fetchone()[0]
    pts = {}
    for pid, status in db.execute("SELECT id, status FROM points WHERE run_id=? ORDER BY sweep_index", (run,)):
        axes = dict(db.execute("SELECT name, value FROM point_axes WHERE point_id=?", (pid,)))
        mets = dict(db.execute("SELECT name, value FROM metrics WHERE point_id=?", (pid,)))
        key = (axes.get("mode"), axes.get("ffn"), int(axes.get("batch", 0)), axes.get("decode_impl", "kernels"))
        pts[key] = (status, mets)
    impls = ["kernels", "persistent"]
    ffns = ["dense", "moc", "moc_2:8"]
    f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
    print("| ffn | batch | kernels µs | persistent µs | floor µs | % of floor (k / p) | union | vs dense (k / p) | persistent vs kernels |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ffn in ffns:
        for b in range(1, 5):
            r = {i: pts.get(("ffn-decode", ffn, b, i), (None, {}))[1] for i in impls}
            d = {i: pts.get(("ffn-decode", "dense", b, i), (None, {}))[1] for i in impls}
            lat = {i: r[i].get("latency_us") for i in impls}
            fl = r["kernels"].get("floor_us")
            pct = [100 * fl / lat[i] if fl and lat[i] else None for i in impls]
            vs = [d[i].get("latency_us") / lat[i] if lat[i] and d[i].get("latency_us") else None for i in impls]
            un = r["kernels"].get("union_channels")
            pk = lat["kernels"] / lat["persistent"] if lat["kernels"] and lat["persistent"] else None
            print(f"| {ffn} | {b} | {f(lat['kernels'])} | {f(lat['persistent'])} | {f(fl)} | {f(pct[0], 0)}% / {f(pct[1], 0)}% | "
                  f"{'-' if ffn == 'dense' or un is None else int(un)} | {f(vs[0], 2)}x / {f(vs[1], 2)}x | {f(pk, 2)}x |")
    print()
    print("| ffn | batch | kernels ms/token | persistent ms/token | vs dense kernels (k / p) | persistent vs kernels | prefill ms (noise) |")
    print("|---|---|---|---|---|---|---|")
    for ffn in ffns:
        for b in range(1, 5):
            r = {i: pts.get(("decode", ffn, b, i), (None, {}))[1] for i in impls}
            d = pts.get(("decode", "dense", b, "kernels"), (None, {}))[1].get("ms_per_token")
            ms = {i: r[i].get("ms_per_token") for i in impls}
            vs = [d / ms[i] if d and ms[i] else None for i in impls]
            pk = ms["kernels"] / ms["persistent"] if ms["kernels"] and ms["persistent"] else None
            pre = r["kernels"].get("prefill_ms")
            pn = r["kernels"].get("prefill_noise")
            print(f"| {ffn} | {b} | {f(ms['kernels'], 3)} | {f(ms['persistent'], 3)} | {f(vs[0], 2)}x / {f(vs[1], 2)}x | "
                  f"{f(pk, 2)}x | {f(pre, 2)} ({f(100 * pn if pn is not None else None, 1)}%) |")
    bad = [(k, s) for k, (s, _) in pts.items() if s != "ok"]
    if bad:
        print("\nnot ok:", bad)


if __name__ == "__main__":
    main()
