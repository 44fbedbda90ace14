#!/usr/bin/env python3
"""The DRAM timeline of one decode step, from Nsight Compute's PM sampling of the step's graph.

Where a step's time goes that no kernel's own numbers show: the DRAM is either streaming weights or waiting on a
latency chain (a reduction, a kernel's wait, the attention). ncu samples device-wide counters every ~1.5 us over a
whole graph launch (the `PmSampling` section); this prints how busy the DRAM was and where it idled, and with
--png draws it. Capture on the device (bench/micro/NOTES.md, nineteenth session):

  ncu --clock-control none --nvtx --nvtx-include "step/" --graph-profiling graph --launch-skip 5 --launch-count 1 \\
      --section PmSampling -o pm mocbench run scenarios/decode_bs1_4.toml --no-profile --only mode=decode ...
  ncu -i pm.ncu-rep --page raw --print-metric-instances values --csv > pm.csv

Usage: pm_timeline.py pm.csv [--png out.png] [--from US] [--to US] [--title T]
Reads the first profiled workload of the CSV. "busy-equivalent" is the step's DRAM traffic as time at 100% of the
DRAM's peak (the sum of the samples' percentages times the interval): the step's DRAM floor as this GPU measures it.
"""
import argparse
import csv
import re
import signal
import sys

DRAM = "dramc__throughput.avg.pct_of_peak_sustained_elapsed"
READ = "dramc__read_throughput.avg.pct_of_peak_sustained_elapsed"
WRITE = "dramc__write_throughput.avg.pct_of_peak_sustained_elapsed"
CTAS = "gr__ctas_launched_realtime.sum"
INST = "sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed"


def load(path):
    """(interval_us, {metric suffix: [samples]}) of the CSV's first workload row."""
    rows = list(csv.reader(open(path)))
    head = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if head is None or len(rows) < head + 3:
        sys.exit(f"{path}: not an `ncu --page raw --print-metric-instances values --csv` export")
    names, row = rows[head], rows[head + 2]  # the row after the header holds the units

    def series(suffix):
        idx = [k for k, n in enumerate(names) if n.endswith(suffix)]
        if not idx:
            return None
        m = re.search(r"\((.*)\)", row[idx[0]])
        return [float(x.replace(",", "")) for x in m.group(1).split(";")] if m else None

    iv = [k for k, n in enumerate(names) if n == "profiler__pmsampler_interval_time"]
    if not iv or series(DRAM) is None:
        sys.exit(f"{path}: no PM sampling series (capture with --section PmSampling)")
    interval = float(row[iv[0]].split()[0].replace(",", ""))
    return interval, {k: series(k) for k in (DRAM, READ, WRITE, CTAS, INST)}


def runs_below(vals, level):
    """(start index, length) of each run of samples under level."""
    out, start = [], None
    for i, v in enumerate(vals + [level + 1]):
        if v < level and start is None:
            start = i
        elif v >= level and start is not None:
            out.append((start, i - start))
            start = None
    return out


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--png")
    ap.add_argument("--from", dest="t0", type=float, default=None, help="us from the step's first busy sample")
    ap.add_argument("--to", dest="t1", type=float, default=None)
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    iv, s = load(a.csv)
    dram = s[DRAM]
    busy = [i for i, v in enumerate(dram) if v > 1.0]
    if not busy:
        sys.exit("the DRAM never moved: nothing to show")
    lo, hi = busy[0], busy[-1] + 1
    seg = dram[lo:hi]
    span = len(seg) * iv
    equiv = sum(seg) / 100.0 * iv
    print(f"{a.csv}: {len(seg)} samples of {iv:g} us = {span:.1f} us from the first to the last busy sample")
    print(f"  DRAM mean {sum(seg) / len(seg):.1f}% of peak; busy-equivalent {equiv:.1f} us ({100 * equiv / span:.1f}% "
          f"of the span); writes {sum(s[WRITE][lo:hi]) / 100 * iv:.1f} us of it")
    for level in (10, 50, 90):
        n = sum(1 for v in seg if v < level)
        print(f"  under {level:2d}%: {n:4d} samples = {n * iv:7.1f} us")
    idle = runs_below(seg, 10)
    hist = {}
    for _, n in idle:
        hist[n] = hist.get(n, 0) + 1
    print("  runs under 10% by length (samples: count): " + ", ".join(f"{k}: {hist[k]}" for k in sorted(hist)))
    # Plateaus: runs of >= 6 samples at >= 85% (in a decode step, one per layer: the FFN's weight stream), and the
    # windows between them (the rest of each layer: the latency chain around the attention half).
    plate = [(i, n) for i, n in runs_below([100.0 - v for v in seg], 15.0) if n >= 6]
    if len(plate) >= 2:
        gaps = [(plate[k][0] + plate[k][1], plate[k + 1][0]) for k in range(len(plate) - 1)]
        pl = sorted(n for _, n in plate)
        gl = sorted(b - a for a, b in gaps)
        gm = [sum(seg[a:b]) / (b - a) for a, b in gaps if b > a]
        print(f"  plateaus (>= 85% for >= 6 samples): {len(plate)}, median {pl[len(pl) // 2] * iv:.1f} us; between "
              f"them: median {gl[len(gl) // 2] * iv:.1f} us at a mean {sum(gm) / max(1, len(gm)):.0f}% of peak")
    print("  per sample, tenths of peak: " + "".join(str(min(9, int(v / 10))) for v in seg))
    if not a.png:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [i * iv for i in range(len(seg))]
    k0 = 0 if a.t0 is None else max(0, int(a.t0 / iv))
    k1 = len(seg) if a.t1 is None else min(len(seg), int(a.t1 / iv) + 1)
    tt = t[k0:k1]
    fig, ax = plt.subplots(3, 1, figsize=(14, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1, 1]})
    rd, wr = s[READ][lo:hi][k0:k1], s[WRITE][lo:hi][k0:k1]
    ax[0].fill_between(tt, 0, rd, step="post", color="#3b7dd8", label="DRAM read")
    ax[0].fill_between(tt, rd, [r + w for r, w in zip(rd, wr)], step="post", color="#e07b39", label="DRAM write")
    ax[0].set_ylim(0, 105)
    ax[0].set_ylabel("% of peak")
    ax[0].legend(loc="upper right", fontsize=8)
    ax[0].set_title(a.title or f"{a.csv}: DRAM busy-equivalent {equiv:.0f} us of a {span:.0f} us span "
                    f"({100 * equiv / span:.0f}%), {iv:g} us samples")
    if s[INST]:
        ax[1].fill_between(tt, 0, s[INST][lo:hi][k0:k1], step="post", color="#5a9e5a")
    ax[1].set_ylabel("SM issue %")
    ax[1].set_ylim(0, 105)
    if s[CTAS]:
        ax[2].bar(tt, s[CTAS][lo:hi][k0:k1], width=iv, align="edge", color="#777777")
    ax[2].set_ylabel("blocks\nlaunched")
    ax[2].set_xlabel("us from the step's first busy sample")
    fig.tight_layout()
    fig.savefig(a.png, dpi=90)
    print(f"  wrote {a.png}")


if __name__ == "__main__":
    main()
