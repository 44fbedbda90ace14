#!/usr/bin/env python3
"""Draws a mocbench Perfetto export (mocbench export RUN --format perfetto) as a PNG: one lane per track,
complete events as boxes coloured by phase, memory counters as a line. A quick look without a browser
(the dashboard is the real viewer). Usage: trace_png.py trace.json out.png [--from US] [--to US] [--pid N]"""
import argparse
import collections
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def phase_of(e):
    """The innermost phase of an event (its args' phase path, or a phase range's own name), layers merged."""
    p = (e.get("args") or {}).get("phase") or e["name"]
    leaf = p.split("/")[-1]
    return "layer" if leaf.startswith("layer.") else leaf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--from", dest="t0", type=float, default=None)
    ap.add_argument("--to", dest="t1", type=float, default=None)
    ap.add_argument("--pid", type=int, default=None)
    a = ap.parse_args()
    ev = json.load(open(a.trace))["traceEvents"]
    pid = a.pid if a.pid is not None else next(e["pid"] for e in ev if e["ph"] == "X")
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}
    proc = next((e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == pid), "")
    xs = [e for e in ev if e["ph"] == "X" and e["pid"] == pid]
    t0 = a.t0 if a.t0 is not None else min(e["ts"] for e in xs)
    t1 = a.t1 if a.t1 is not None else max(e["ts"] + e["dur"] for e in xs)
    lanes = sorted({e["tid"] for e in xs})
    phases = sorted({phase_of(e) for e in xs})
    cmap = plt.get_cmap("tab20")
    colour = {p: cmap(i % 20) for i, p in enumerate(phases)}
    fig, ax = plt.subplots(figsize=(16, 1.2 + 0.45 * len(lanes)))
    for row, tid in enumerate(lanes):
        for e in xs:
            if e["tid"] != tid or e["ts"] + e["dur"] < t0 or e["ts"] > t1:
                continue
            p = phase_of(e)
            ax.broken_barh([(e["ts"], max(e["dur"], (t1 - t0) / 4000))], (row - 0.4, 0.8), color=colour[p], lw=0)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([names.get(t, str(t)) for t in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(t0, t1)
    ax.set_xlabel("µs from the trace start")
    ax.set_title(proc, fontsize=9)
    counts = collections.Counter(phase_of(e) for e in xs if e.get("cat") != "phase")
    top = [p for p, _ in counts.most_common(14)]
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colour[p]) for p in top], labels=top, fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
