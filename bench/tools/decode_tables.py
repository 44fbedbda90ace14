#!/usr/bin/env python3
"""Markdown tables of a decode_bs1_4 run (ffn-decode and decode) from a results database:
`bench/tools/decode_tables.py DB [RUN]` (default: the newest run). Used for bench/RESULTS.md.

One column per decode_impl value the run holds: "kernels" now; runs recorded before the persistent step
was retired also hold "persistent", shown beside it with its ratio to the kernel path."""
import sqlite3
import sys


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    # Read-only: a mistyped path is an error, not a new empty database file.
    db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    run = int(sys.argv[2]) if len(sys.argv) > 2 else db.execute("SELECT max(id) FROM runs").fetchone()[0]
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
    bad = [(k, s) for k, (s, _) in pts.items() if s != "ok"]
    if bad:
        print("\nnot ok:", bad)


if __name__ == "__main__":
    main()
