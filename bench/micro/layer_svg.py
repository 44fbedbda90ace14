#!/usr/bin/env python3
"""One decode layer's time against its byte floor, per kernel, as an SVG picture, from profiled steps.

Usage: layer_svg.py OUT.svg DB[@POINT][:LABEL] [DB[@POINT][:LABEL] ...]

For each database (a `mocbench run` with a profiled decode point; POINT is its point id, sweep index + 1 -- the
first profiled point when left out): the top bar is what each kernel of a layer adds to the step (its end minus the
previous kernel's end, median over the step's layers -- bench/micro/chain.py's numbers), the bar under it what each
kernel's declared bytes take at the device's measured copy bandwidth (DEVICE_CEILINGS), same colours, same scale. The gap between the two bars is the layer's
distance from its byte floor, kernel by kernel. Kernels that run once per step (embedding, LM head, sampling) are
left out: a layer is the kernels from one QKV kernel to the next.
"""
import html
import os
import sqlite3
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chain  # noqa: E402  (kernel_rows, adds: the per-kernel adds of bench/micro/chain.py)

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]


def layer_of(db, point=None):
    c = sqlite3.connect(db)
    if point is None:
        point = c.execute("select min(point_id) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    ceil = c.execute("select device, copyGBps from DEVICE_CEILINGS order by measuredUnixMs desc limit 1").fetchone()
    if point is None or ceil is None:
        sys.exit(f"{db}: no profiled kernels or no measured copy bandwidth")
    device, gbps = ceil
    rows = chain.kernel_rows(c, point)
    steps = sorted({r["step"] for r in rows})
    per_add, per_floor, order, layers = {}, {}, [], 0
    for s in steps:
        ks = [r for r in rows if r["step"] == s]
        first = [i for i, r in enumerate(ks) if r["name"].startswith("k_qkv")]
        if len(first) < 2:
            sys.exit(f"{db}: no decode layers (k_qkv_*) in step {s} of point {point}")
        layers += len(first) - 1
        for i, (k, a) in enumerate(zip(ks, chain.adds(ks))):
            if not first[0] <= i < first[-1]:
                continue  # outside whole layers
            if k["name"] not in per_add:
                order.append(k["name"])
            per_add.setdefault(k["name"], []).append(a)
            per_floor.setdefault(k["name"], []).append((k["op_bytes"] or 0) / gbps / 1e3)  # bytes / (GB/s) -> us
    # Per layer: the median launch times the launches per layer (1 for every kernel of today's decode layers).
    per = {n: (statistics.median(per_add[n]) * len(per_add[n]) / layers,
               statistics.median(per_floor[n]) * len(per_floor[n]) / layers) for n in order}
    return device, gbps, order, per


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = sys.argv[1]
    sets = []
    for arg in sys.argv[2:]:
        spec, _, label = arg.partition(":")
        db, _, point = spec.partition("@")
        sets.append((label or spec, *layer_of(db, int(point) if point else None)))
    colours, kernels = {}, []
    for _, _, _, order, _ in sets:
        for n in order:
            if n not in colours:
                colours[n] = PALETTE[len(colours) % len(PALETTE)]
                kernels.append(n)
    longest = max(sum(a for a, _ in per.values()) for *_, per in sets)
    W, left, right, bar, gap = 900, 150, 120, 22, 30
    scale = (W - left - right) / longest
    H = 98 + len(sets) * (2 * bar + gap + 18) + 30 + 20 * ((len(kernels) + 2) // 3)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15" font-weight="bold">One decode layer: time each kernel adds vs its '
           f'byte floor (us)</text>',
           f'<text x="{left}" y="40" fill="#555">{html.escape(sets[0][1])}, measured copy bandwidth '
           f'{sets[0][2]:.0f} GB/s</text>',
           f'<text x="{left}" y="56" fill="#555">upper bar: what each kernel adds to the step (its end after the '
           f'previous end, median of the layers)</text>',
           f'<text x="{left}" y="72" fill="#555">lower bar: the bytes it declares, at copy bandwidth</text>']
    y = 88
    for label, device, gbps, order, per in sets:
        svg.append(f'<text x="{left - 8}" y="{y + bar + 4}" text-anchor="end" font-weight="bold">'
                   f'{html.escape(label)}</text>')
        for row, idx in (("time", 0), ("floor", 1)):
            x = left
            for n in order:
                w = per[n][idx] * scale
                if w <= 0:
                    continue
                svg.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colours[n]}" '
                           f'fill-opacity="{1.0 if idx == 0 else 0.45}" stroke="white"><title>{html.escape(n)} '
                           f'{per[n][idx]:.1f} us</title></rect>')
                if w > 26:
                    svg.append(f'<text x="{x + w / 2:.1f}" y="{y + bar - 7}" text-anchor="middle" fill="white" '
                               f'font-size="10">{per[n][idx]:.1f}</text>')
                x += w
            total = sum(v[idx] for v in per.values())
            svg.append(f'<text x="{x + 6:.1f}" y="{y + bar - 7}">{row} {total:.1f}</text>')
            y += bar
        y += gap + 18
    y += 4
    for i, n in enumerate(kernels):
        cx, cy = left + (i % 3) * 240, y + (i // 3) * 20
        svg.append(f'<rect x="{cx}" y="{cy - 10}" width="12" height="12" fill="{colours[n]}"/>')
        svg.append(f'<text x="{cx + 18}" y="{cy}">{html.escape(n)}</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
