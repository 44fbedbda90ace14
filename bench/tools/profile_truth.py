#!/usr/bin/env python3
"""Issue 25's profile targets from a results database (bench/RESULTS.md, "Profiles that add up").

Per profiled point: the ops of one profiled step in exclusive device time (they sum to the busy time,
profile_gpu_busy_ms) against the timed median, with the inclusive sum (profile_inclusive_sum_ms) beside
it. Per decode point: the paper's FFN parts (gate, top-K, up & down) from the profile in exclusive time,
summed over the step's layers, against the same parts of one ffn-decode call (per call x layers; since 2026-11-28
they add up to the call: up & down is what the call adds after the gate and top-K passes, not MoC's up & down timed
alone, which is up_down_alone_us).

Usage: profile_truth.py MOCBENCH DB [RUN] [--alone DB2]
  RUN: default the newest. --alone: another database whose ffn-decode points give the parts timed alone
  (when DB holds only decode points).
"""
import json
import sqlite3
import subprocess
import sys


def load(con, run):
    points = {}
    for pid, idx, status in con.execute("SELECT id, sweep_index, status FROM points WHERE run_id=? ORDER BY sweep_index", (run,)):
        axes = dict(con.execute("SELECT name, value FROM point_axes WHERE point_id=?", (pid,)).fetchall())
        metrics = dict(con.execute("SELECT name, value FROM metrics WHERE point_id=?", (pid,)).fetchall())
        points[idx] = (axes, metrics, status)
    return points


def main():
    args = sys.argv[1:]
    alone_db = None
    if "--alone" in args:
        i = args.index("--alone")
        alone_db = args[i + 1]
        del args[i:i + 2]
    exe, db = args[0], args[1]
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    run = int(args[2]) if len(args) > 2 else con.execute("SELECT max(id) FROM runs").fetchone()[0]
    layers = json.loads(con.execute("SELECT config_json FROM runs WHERE id=?", (run,)).fetchone()[0] or "{}")
    points = {}
    for pid, idx, status in con.execute("SELECT id, sweep_index, status FROM points WHERE run_id=? ORDER BY sweep_index", (run,)):
        axes = dict(con.execute("SELECT name, value FROM point_axes WHERE point_id=?", (pid,)).fetchall())
        metrics = dict(con.execute("SELECT name, value FROM metrics WHERE point_id=?", (pid,)).fetchall())
        points[idx] = (axes, metrics, status)
    stats = json.loads(subprocess.run([exe, "stats", str(run), "--db", db, "--report", "phase_sum", "--format", "json"],
                                      check=True, capture_output=True, text=True).stdout)
    parts = {}
    phases = {}
    for p in stats["points"]:
        for rep in p["reports"]:
            if rep["id"] == "phase_sum_breakdown":
                unit = [c["key"] for c in rep["columns"] if c["key"].startswith("Profiled (")][0]
                parts[p["point"]] = {r["Part"]: r[unit] for r in rep["rows"]}
            if rep["id"] == "phase_sum":
                col = [c["key"] for c in rep["columns"] if "time per step" in c["key"]][0]
                phases[p["point"]] = {r["Phase"]: r[col] for r in rep["rows"]}
    n_layers = None
    try:
        n_layers = int(layers.get("model", {}).get("layers"))
    except Exception:
        pass
    # A device override of the model's layers (the CPU runs of decode_bs1_4.toml: 1 layer) is in the run's overrides.
    overrides = json.loads(con.execute("SELECT overrides_json FROM runs WHERE id=?", (run,)).fetchone()[0] or "[]")
    for o in overrides if isinstance(overrides, list) else []:
        if o.get("section") == "model" and o.get("key") == "layers":
            n_layers = int(o["value"])
    if not n_layers:
        n_layers = 24  # the 1b preset

    print("| point | mode | ffn | batch | impl | timed median | busy (= sum of exclusive) | busy / timed | inclusive sum | inclusive / timed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for idx, (axes, m, status) in sorted(points.items()):
        if "profile_gpu_busy_ms" not in m:
            continue
        mode = axes.get("mode", "")
        timed = m.get("median_ms")
        busy = m["profile_gpu_busy_ms"]
        inc = m.get("profile_inclusive_sum_ms", float("nan"))
        if mode == "ffn-decode":  # a profiled step is one replay: calls_per_replay calls (before: one per copy)
            calls = m.get("calls_per_replay") or m.get("weight_copies", 1) or 1
            timed = timed * calls
        print(f"| {idx} | {mode} | {axes.get('ffn','')} | {axes.get('batch','')} | {axes.get('decode_impl','')} | "
              f"{timed:.4f} ms | {busy:.4f} ms | {100*busy/timed:.1f}% | {inc:.4f} ms | {100*inc/timed:.1f}% |")

    print()
    print(f"FFN parts of a decode step (exclusive, summed over {n_layers} layers) vs ffn-decode parts timed alone x {n_layers}:")
    print()
    print("| ffn | batch | impl | gate prof / timed (us) | top-K prof / timed | up & down prof / timed | parts sum prof / timed | FFN prof / FFN latency x layers |")
    print("|---|---|---|---|---|---|---|---|")
    alone = {}
    sources = [points]
    if alone_db:
        c2 = sqlite3.connect(f"file:{alone_db}?mode=ro", uri=True)
        sources.append(load(c2, c2.execute("SELECT max(id) FROM runs").fetchone()[0]))
    for src in sources:
        for idx, (axes, m, status) in src.items():
            if axes.get("mode") == "ffn-decode":
                alone.setdefault((axes.get("ffn"), axes.get("batch"), axes.get("decode_impl")), m)
    for idx, (axes, m, status) in sorted(points.items()):
        if axes.get("mode") != "decode" or idx not in parts:
            continue
        key = (axes.get("ffn"), axes.get("batch"), axes.get("decode_impl"))
        a = alone.get(key)
        if not a:
            continue
        pr = parts[idx]
        row = []
        tot_p = tot_t = 0.0
        for part, metric in (("gate", "gate_us"), ("top-K", "topk_us"), ("up & down", "up_down_us")):
            p_us = pr.get(part, 0.0) * 1e3  # ms per step -> us
            t_us = a.get(metric, float("nan")) * n_layers
            tot_p += p_us
            if t_us == t_us:
                tot_t += t_us
            row.append(f"{p_us:.0f} / {t_us:.0f}")
        row.append(f"{tot_p:.0f} / {tot_t:.0f} ({100*tot_p/tot_t:.0f}%)" if tot_t > 0 and a.get("gate_us") == a.get("gate_us") else "-")
        ph = phases.get(idx, {}).get("ffn.decode")
        lat = a.get("latency_us", float("nan")) * n_layers
        if ph:
            row.append(f"ffn.decode {ph*1e3:.0f} / {lat:.0f} ({100*ph*1e3/lat:.0f}%)")
        else:  # no ffn.decode range: a run recorded before the persistent step was retired, that step's FFN
            # stages (gate, top-K, up, down) against the FFN timed alone
            row.append(f"FFN stages {tot_p:.0f} / {lat:.0f} ({100*tot_p/lat:.0f}%)")
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
