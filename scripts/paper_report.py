#!/usr/bin/env python3
"""Writes the paper report: DIR/report.md and one PNG per table where a picture helps.

Called by `mocbench report` with the points it read from the results database(s) (DIR/data.json: every
point of the chosen runs, its axes, metrics and resolved model) and the paper's published numbers
(scenarios/paper/paper_numbers.toml). Every table shows our number, the paper's (an A800 measurement,
labelled as such and never mixed into ours), their ratio where it means something, and the device and run
that produced ours; rows the database cannot fill say so. Figures use matplotlib (Agg); without it the
report is still written and the figures are listed as missing.
"""
import argparse
import json
import math
import os
import tempfile
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

GB = 1e9
MB = 1e6
GIB = 1024.0 ** 3


def load_paper(path):
    if tomllib is None:
        raise SystemExit("paper_report: Python 3.11+ (tomllib) is needed to read " + path)
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    table = {}
    for n in doc.get("number", []):
        for key in ("table", "label", "row", "column", "value", "unit"):
            if key not in n:
                raise SystemExit(f"paper_report: {path}: an entry lacks '{key}': {n}")
        table[(n["table"], str(n["row"]), str(n["column"]))] = n
    return table


class Points:
    def __init__(self, points):
        self.points = points

    def of(self, scenario):
        return [p for p in self.points if p["scenario"] == scenario]

    def find(self, scenario, **axes):
        for p in self.of(scenario):
            if all(str(p["axes"].get(k)) == str(v) for k, v in axes.items()):
                return p
        return None


def fmt(v, digits=3):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits - 1}f}" if abs(v) >= 1 else f"{v:.{digits}f}"


def ratio(ours, paper):
    if ours is None or paper is None or paper == 0:
        return "–"
    return f"{ours / paper:.2f}"


def metric(p, name):
    if p is None or p.get("status") != "ok":
        return None
    v = p["metrics"].get(name)
    return v if isinstance(v, (int, float)) else None


def status_cell(p, value_text):
    """Our cell: the value, or why there is none."""
    if p is None:
        return "not measured"
    if p["status"] != "ok":
        return p["status"]
    return value_text


class Report:
    def __init__(self, points, paper, out_dir, plt):
        self.pts = points
        self.paper = paper
        self.out = out_dir
        self.plt = plt
        self.lines = []
        self.figures = []
        self.missing_figures = []
        self.sections = []

    def pv(self, table, row, col):
        n = self.paper.get((table, str(row), str(col)))
        return n["value"] if n else None

    def section(self, key, title, scenario, paper_label):
        self.sections.append(key)
        self.lines.append(f"\n## {title}\n")
        runs = sorted({(p["db"], p["run"], p["device_name"], p["device_kind"]) for p in self.pts.of(scenario)})
        src = f"`scenarios/paper/` scenario `{scenario}`; paper: `{paper_label}` (NVIDIA A800 80 GB)."
        if runs:
            ran = "; ".join(f"run {r} of {os.path.basename(db)} on {name} ({kind})" for db, r, name, kind in runs)
            self.lines.append(f"Ours: {ran}. Source: {src}\n")
            return True
        self.lines.append(f"**Not measured**: the database holds no run of `{scenario}`. Source: {src}\n")
        return False

    def table(self, header, rows):
        self.lines.append("| " + " | ".join(header) + " |")
        self.lines.append("|" + "---|" * len(header))
        for r in rows:
            self.lines.append("| " + " | ".join(r) + " |")
        self.lines.append("")

    def note(self, text):
        self.lines.append(text + "\n")

    def figure(self, name, title, draw):
        path = os.path.join(self.out, name)
        if self.plt is None:
            self.missing_figures.append(name)
            self.lines.append(f"*Figure `{name}` not drawn: matplotlib is missing (scripts/setup.sh installs "
                              f"python3-matplotlib).*\n")
            return
        fig = self.plt.figure(figsize=(7.5, 4.2), dpi=110)
        try:
            draw(fig)
            fig.suptitle(title, fontsize=10)
            fig.tight_layout()
            write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"))
        finally:
            self.plt.close(fig)
        self.figures.append(name)
        self.lines.append(f"![{title}]({name})\n")

    # ------------------------------------------------------------------ the tables

    def profile(self):
        sc = "paper_activation_profile"
        if not self.section("profile", "§2 profiling: activations per module (LLaMA 350M / 1.3B, batch 64 x seq 256)",
                            sc, "sec:profile"):
            return
        cols = []
        for p in self.pts.of(sc):
            cols.append(p)
        rows = []
        names = [("attention per layer", ["act_attention_bytes"], True), ("ffn per layer", ["act_ffn_bytes"], True),
                 ("others per layer", ["act_norm_bytes", "act_residual_bytes"], True),
                 ("lm head", ["act_head_bytes"], False), ("total", ["act_total_bytes"], False)]
        paper_col = {"350m": "350M", "1b": "1.3B"}
        header = ["module"]
        for p in cols:
            preset = p["axes"].get("preset", "?")
            header += [f"ours {preset} (MB)", f"paper {paper_col.get(preset, preset)} (MB, A800)", "ratio"]
        for label, keys, per_layer in names:
            r = [label]
            for p in cols:
                vals = [metric(p, k) for k in keys]
                ours = None
                if all(v is not None for v in vals) and p.get("model"):
                    ours = sum(vals) / (p["model"]["layers"] if per_layer else 1) / MB
                pv = self.pv("profile", label, paper_col.get(p["axes"].get("preset"), ""))
                r += [status_cell(p, fmt(ours)), fmt(pv), ratio(ours, pv)]
            rows.append(r)
        self.table(header, rows)
        ok = [p for p in cols if p["status"] == "ok" and p.get("model")]
        for p in ok:
            a, f = metric(p, "act_attention_bytes"), metric(p, "act_ffn_bytes")
            if a and f:
                self.note(f"{p['axes'].get('preset')}: FFN / attention = {f / a:.2f} (the paper: about 2.3). Ours "
                          "keeps neither O nor D nor the norm outputs (recomputed) and the logits in bf16, the "
                          "paper's profile keeps them (f32 logits): see `mocbench memory-model`.")

        def draw(fig):
            ax = fig.add_subplot(1, 1, 1)
            mods = ["attention per layer", "ffn per layer", "others per layer"]
            width = 0.2
            for i, p in enumerate(ok):
                preset = p["axes"].get("preset")
                ours = [sum(metric(p, k) for k in keys) / p["model"]["layers"] / MB for _, keys, _ in names[:3]]
                paper = [self.pv("profile", m, paper_col.get(preset, "")) for m in mods]
                xs = [j + i * 2 * width for j in range(3)]
                ax.bar(xs, ours, width, label=f"ours {preset}")
                ax.bar([x + width for x in xs], [v or 0 for v in paper], width, label=f"paper {paper_col.get(preset)} (A800)",
                       alpha=0.6)
            ax.set_xticks([j + width * (len(ok) - 0.5) for j in range(3)])
            ax.set_xticklabels(mods)
            ax.set_ylabel("MB per layer")
            ax.legend(fontsize=8)
        if ok:
            self.figure("profile.png", "Activations per layer and module (batch 64 x seq 256)", draw)

    def table2(self):
        sc = "paper_table2_ffn_activation"
        if not self.section("table2", "Table 2: FFN activation memory per variant (K = 20% of d_ffn)", sc,
                            "table:activation"):
            return
        rows, bars = [], []
        for ffn, gcp, key in [("dense", "false", "dense"), ("dense", "true", "dense+gcp"), ("moc", "false", "moc"),
                              ("moc", "true", "moc+gcp")]:
            p = self.pts.find(sc, ffn=ffn, gcp=gcp)
            ours = None
            if p is not None and metric(p, "ffn_activation_bytes") is not None and p.get("model"):
                m = p["model"]
                b, s = int(p["axes"].get("batch", 1)), int(p["axes"].get("seq", 1))
                ours = metric(p, "ffn_activation_bytes") / (b * s * m["hidden"] * m["act_bytes"])
            pv = self.pv("table2", key, "bsd")
            # The paper's bsd counts D (+1 bsd), which no backward reads and mocbench does not keep.
            rows.append([key, status_cell(p, fmt(ours)), fmt(pv), fmt(pv - 1 if pv else None), ratio(ours, pv - 1 if pv else None)])
            bars.append((key, ours, pv))
        self.table(["variant", "ours (bsd, measured)", "paper (bsd, formula)", "paper without D (bsd)",
                    "ratio ours / paper without D"], rows)
        self.note("The paper's numbers are its formula at d_ffn = 8d/3 (the 1b layer's d_ffn 5461 = 2.667 d); they "
                  "count the FFN output D (1 bsd), which mocbench does not keep (the residual stream after the add "
                  "is kept instead). Ours adds MoC's i16 channel indices.")

        def draw(fig):
            ax = fig.add_subplot(1, 1, 1)
            xs = range(len(bars))
            ax.bar([x - 0.2 for x in xs], [b[1] or 0 for b in bars], 0.4, label="ours (measured)")
            ax.bar([x + 0.2 for x in xs], [b[2] or 0 for b in bars], 0.4, label="paper (formula)", alpha=0.6)
            ax.set_xticks(list(xs))
            ax.set_xticklabels([b[0] for b in bars])
            ax.set_ylabel("bsd")
            ax.legend(fontsize=8)
        if any(b[1] for b in bars):
            self.figure("table2.png", "FFN activation per variant (units of bsd)", draw)

    def memory_table(self, key, title, sc, label, cols, rows_ffn, col_axis="preset", extra_axes=None, ppl_table=None):
        if not self.section(key, title, sc, label):
            return
        header = ["ffn"]
        for c in cols:
            header += [f"ours {c} (GB)", f"paper {c} (GB, A800)", "ratio"]
        rows, data = [], []
        for ffn in rows_ffn:
            r = [ffn]
            for c in cols:
                axes = {col_axis: c, "ffn": ffn}
                axes.update(extra_axes or {})
                p = self.pts.find(sc, **axes)
                ours = metric(p, "peak_bytes")
                ours = ours / GB if ours is not None else None
                cell = status_cell(p, fmt(ours))
                if p is not None and p["status"] == "oom" and p.get("model", {}).get("estimate"):
                    est = p["model"]["estimate"]["total_bytes"] / GB
                    cell = f"oom (model: ≥ {fmt(est)})"
                pv = self.pv(key, ffn, c)
                r += [cell, fmt(pv), ratio(ours, pv)]
                data.append((ffn, c, ours, pv))
            rows.append(r)
        self.table(header, rows)
        # MoC's saving against dense: ours and the paper's.
        sav = []
        for c in cols:
            d = next((x for x in data if x[0] == "dense" and x[1] == c), None)
            for ffn in rows_ffn:
                if ffn == "dense":
                    continue
                m = next((x for x in data if x[0] == ffn and x[1] == c), None)
                if d and m and d[2] and m[2]:
                    paper = (1 - m[3] / d[3]) * 100 if d[3] and m[3] else None
                    sav.append(f"{c} {ffn}: {100 * (1 - m[2] / d[2]):.0f}% below dense (paper: "
                               f"{'%.0f%%' % paper if paper is not None else '–'})")
        if sav:
            self.note("Memory saved by MoC: " + "; ".join(sav) + ".")
        self.note("Ours: the allocator's peak (weights, gradients, optimizer states, activations, workspace) of a "
                  "training step, pure bf16 AdamW (m and v in bf16). The paper: total GPU memory, whose optimizer "
                  "precision and allocator overheads it does not state.")
        if ppl_table:
            theirs = ", ".join(f"{r} {c} {fmt(self.pv(ppl_table, r, c))}" for r in rows_ffn for c in cols
                               if self.pv(ppl_table, r, c) is not None)
            self.note("Validation perplexity: **not measured** at the paper's C4 scale (1.1-13B tokens); mocbench's small-scale real-text study (scenarios/quality_small.toml, bench/RESULTS.md \"Training on real text\") compares dense, MoC and MoC 2:8 on 24.6M tokens of the Python docs" +
                      (f"; the paper's (C4, A800 runs): {theirs}." if theirs else "."))

        def draw(fig):
            ax = fig.add_subplot(1, 1, 1)
            n = len(rows_ffn)
            width = 0.8 / (2 * n)
            for i, ffn in enumerate(rows_ffn):
                ours = [next((x[2] for x in data if x[0] == ffn and x[1] == c), None) or 0 for c in cols]
                paper = [next((x[3] for x in data if x[0] == ffn and x[1] == c), None) or 0 for c in cols]
                xs = [j + (2 * i) * width - 0.4 + width / 2 for j in range(len(cols))]
                ax.bar(xs, ours, width, label=f"ours {ffn}")
                ax.bar([x + width for x in xs], paper, width, label=f"paper {ffn} (A800)", alpha=0.5, hatch="//")
            ax.set_xticks(range(len(cols)))
            ax.set_xticklabels(cols)
            ax.set_ylabel("peak training memory (GB)")
            ax.legend(fontsize=7, ncol=2)
        if any(x[2] for x in data):
            self.figure(f"{key}.png", title, draw)

    def figure1(self):
        sc = "paper_figure1_memory_by_batch"
        if not self.section("figure1", "Figure 1: memory breakdown of pre-training by batch size (seq 256)", sc,
                            "fig:llama-2-memory-profile"):
            return
        cats = ["weights", "gradients", "optimizer_state", "activations", "workspace"]
        pts = sorted(self.pts.of(sc), key=lambda p: (p["axes"].get("ffn", ""), int(p["axes"].get("batch", 0))))
        rows = []
        for p in pts:
            vals = [metric(p, f"peak_{c}_bytes") for c in cats]
            tot = metric(p, "peak_bytes")
            rows.append([p["axes"].get("ffn", "?"), p["axes"].get("batch", "?")] +
                        [status_cell(p, fmt(v / GIB if v is not None else None)) for v in vals] +
                        [status_cell(p, fmt(tot / GIB if tot is not None else None))])
        self.table(["ffn", "batch"] + [f"{c} (GiB)" for c in cats] + ["peak (GiB)"], rows)
        self.note("Each category's own peak during a step (they need not coincide; the last column is the peak of "
                  "their sum). The paper's Figure 1 (LLaMA-2, no numbers printed) shows the same shape: activations "
                  "grow with the batch and dominate; weights, gradients and optimizer states do not change.")

        def draw(fig):
            ax = fig.add_subplot(1, 1, 1)
            labels, bottoms = [], [0.0] * len(pts)
            for c in cats:
                vals = [(metric(p, f"peak_{c}_bytes") or 0) / GIB for p in pts]
                ax.bar(range(len(pts)), vals, 0.7, bottom=bottoms, label=c.replace("_", " "))
                bottoms = [b + v for b, v in zip(bottoms, vals)]
            for i, p in enumerate(pts):
                labels.append(f"{p['axes'].get('ffn')}\nbs {p['axes'].get('batch')}")
                if p["status"] != "ok":
                    ax.text(i, 0.5, p["status"], ha="center", rotation=90, fontsize=8)
            ax.set_xticks(range(len(pts)))
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_ylabel("GiB (each category's peak)")
            ax.legend(fontsize=7)
        if pts:
            self.figure("figure1.png", "Training memory by category and batch size", draw)

    def table8(self):
        sc = "paper_table8_ffn_decode"
        if not self.section("table8", "Tables 8 and 11: one FFN layer at batch 1 per decoding step (µs)", sc,
                            "ffn, ffn_appendix"):
            return
        parts = [("gate", "gate_us"), ("top-K", "topk_us"), ("up & down", "up_down_us"), ("other", "other_us"),
                 ("total", "latency_us")]
        paper_cols = {"gate": "gate", "top-K": "topk", "up & down": "up_down", "other": "other", "total": "total"}
        rows, data = [], {}
        dense = metric(self.pts.find(sc, ffn="dense"), "latency_us")
        for ffn in ["dense", "moc", "moc_2:8"]:
            p = self.pts.find(sc, ffn=ffn)
            r = [ffn]
            for label, m in parts:
                ours = metric(p, m)
                pv = self.pv("table8", ffn, paper_cols[label])
                cell = status_cell(p, fmt(ours))
                if ours is not None and ours < 0:
                    cell = f"{fmt(ours)} †"
                    ours = 0.0  # drawn as nothing: see the note
                r += [cell, fmt(pv)]
                data[(ffn, label)] = (ours, pv)
            ours_total = metric(p, "latency_us")
            pd = self.pv("table8", "dense", "total")
            pt = self.pv("table8", ffn, "total")
            r += [f"{dense / ours_total:.2f}x" if dense and ours_total else "–",
                  f"{pd / pt:.2f}x" if pd and pt else "–"]
            rows.append(r)
        header = ["ffn"]
        for label, _ in parts:
            header += [f"ours {label}", f"paper {label} (A800)"]
        self.table(header + ["ours vs dense", "paper vs dense"], rows)
        self.note("Ours: mocbench's CUDA kernels (the kernel path), cold weights; the parts add up to the total: gate "
                  "is the gate pass timed alone, top-K the gate pass with the selection minus the gate pass (floored "
                  "at 0: MoC 2:8's 2-of-8 choice adds no measurable time to it), up & down what the rest of the call "
                  "adds (the CSV's up_down_alone_us has MoC's up & down timed alone, longer: alone it does not "
                  "overlap the passes before it), other the remainder (0 unless a floor cut a part). † Negative: "
                  "a run from before 2026-11-28, whose up & down was timed alone, so that the parts added up to "
                  "more than the fused whole. The paper: torch.compile on an A800.")

        def draw(fig):
            ax = fig.add_subplot(1, 1, 1)
            ffns = ["dense", "moc", "moc_2:8"]
            for k, (who, idx, off) in enumerate([("ours", 0, -0.2), ("paper (A800)", 1, 0.2)]):
                bottom = [0.0] * 3
                for j, (label, _) in enumerate(parts[:4]):
                    vals = [data.get((f, label), (None, None))[idx] or 0 for f in ffns]
                    ax.bar([x + off for x in range(3)], vals, 0.38, bottom=bottom,
                           color=f"C{j}", alpha=1.0 if idx == 0 else 0.45, label=label if k == 0 else None)
                    bottom = [b + v for b, v in zip(bottom, vals)]
            ax.set_xticks(range(3))
            ax.set_xticklabels([f"{f}\n(ours | paper)" for f in ffns])
            ax.set_ylabel("µs")
            ax.legend(fontsize=8)
        self.figure("table8.png", "One FFN layer at batch 1: breakdown, ours (left) vs the paper's A800 (right)", draw)

    def table9(self):
        sc = "paper_table9_decode"
        if not self.section("table9", "Table 9: end-to-end decoding, batch 1, prompt 128, 128 generated", sc, "e2e"):
            return
        dense = metric(self.pts.find(sc, ffn="dense"), "ms_per_token")
        rows = []
        for ffn in ["dense", "moc", "moc_2:8"]:
            p = self.pts.find(sc, ffn=ffn)
            ms, tps = metric(p, "ms_per_token"), metric(p, "tokens_per_s")
            pms, ptps = self.pv("table9", ffn, "ms_per_token"), self.pv("table9", ffn, "tokens_per_s")
            pd = self.pv("table9", "dense", "ms_per_token")
            rows.append([ffn, status_cell(p, fmt(ms)), fmt(pms), ratio(ms, pms), status_cell(p, fmt(tps)), fmt(ptps),
                         f"{dense / ms:.2f}x" if dense and ms else "–", f"{pd / pms:.2f}x" if pd and pms else "–"])
        self.table(["ffn", "ours ms/token", "paper ms/token (A800)", "ratio", "ours tokens/s", "paper tokens/s (A800)",
                    "ours vs dense", "paper vs dense"], rows)

    def table10(self):
        sc = "paper_table10_throughput"
        if not self.section("table10", "Tables 10 and 14: training throughput (350M batch 128, 1B batch 64 / 128)", sc,
                            "tab:pretrain-throughput, tab:train_eff"):
            return
        rows = []
        for preset, batch in [("350m", 128), ("1b", 64), ("1b", 128)]:
            for ffn in ["dense", "moc", "moc_2:8"]:
                p = self.pts.find(sc, preset=preset, batch=batch, ffn=ffn)
                tps, peak, mfu = metric(p, "tokens_per_s"), metric(p, "peak_bytes"), metric(p, "mfu_pct")
                if batch == 128 and preset == "1b":
                    ptps = self.pv("table14", ffn, "128")
                    pmem = self.pv("table14_mem", ffn, "128")
                    if self.pv("table14_oom", ffn, "128"):
                        ptps, pmem = None, None
                        paper_t = "OOM"
                    else:
                        paper_t = fmt(ptps)
                elif preset == "1b":
                    ptps, pmem = self.pv("table10", ffn, "1b"), self.pv("table14_mem", ffn, "64")
                    t14 = self.pv("table14", ffn, "64")
                    paper_t = f"{fmt(ptps)} (Table 14: {fmt(t14)})" if ptps or t14 else "–"
                else:
                    ptps, pmem = self.pv("table10", ffn, "350m"), None
                    paper_t = fmt(ptps)
                rows.append([preset, str(batch), ffn, status_cell(p, fmt(tps)), paper_t, ratio(tps, ptps),
                             status_cell(p, fmt(mfu)), status_cell(p, fmt(peak / GB if peak else None)), fmt(pmem)])
        self.table(["model", "batch", "ffn", "ours tokens/s", "paper (A800)", "ratio", "ours MFU %", "ours peak GB",
                    "paper memory GB (A800)"], rows)
        self.note("The paper's Table 10 caption says samples/s; its values match tokens/s (its Table 14 gives 7,639 "
                  "tokens/s for 1B at batch 64 on the same GPU), so they are compared as tokens/s. Ours: pure bf16.")

    def table12(self):
        sc = "paper_table12_batch"
        if not self.section("table12", "Table 12: one FFN layer across decoding batch sizes 1-4 (µs)", sc, "tab:bszabl"):
            return
        rows, series = [], {"dense": [], "moc": []}
        for b in [1, 2, 3, 4]:
            pd, pm = self.pts.find(sc, ffn="dense", batch=b), self.pts.find(sc, ffn="moc", batch=b)
            d, m = metric(pd, "latency_us"), metric(pm, "latency_us")
            u = metric(pm, "union_channels")
            qd, qm = self.pv("table12", "dense", b), self.pv("table12", "moc", b)
            rows.append([str(b), status_cell(pd, fmt(d)), status_cell(pm, fmt(m)),
                         f"{d / m:.2f}x" if d and m else "–", fmt(u), fmt(qd), fmt(qm),
                         f"{qd / qm:.2f}x" if qd and qm else "–"])
            series["dense"].append((b, d, qd))
            series["moc"].append((b, m, qm))
        self.table(["batch", "ours dense", "ours MoC", "ours speedup", "MoC union (channels)", "paper dense (A800)",
                    "paper MoC (A800)", "paper speedup"], rows)
        self.note("With random weights each row selects its own channels, so the union read at batch 4 is about "
                  "3,100 of 5,461; the paper's model (not named; its latencies are ~10x the 1.3B layer's) and trained "
                  "weights select more alike.")

        def draw(fig):
            ax = fig.add_subplot(1, 1, 1)
            for k, ffn in enumerate(["dense", "moc"]):
                xs = [x for x, _, _ in series[ffn]]
                ax.plot(xs, [y if y is not None else float("nan") for _, y, _ in series[ffn]], "o-", color=f"C{k}",
                        label=f"ours {ffn}")
                ax.plot(xs, [q if q is not None else float("nan") for _, _, q in series[ffn]], "s--", color=f"C{k}",
                        alpha=0.5, label=f"paper {ffn} (A800)")
            ax.set_xlabel("decoding batch")
            ax.set_ylabel("µs per FFN layer")
            ax.set_yscale("log")
            ax.set_xticks([1, 2, 3, 4])
            ax.legend(fontsize=8)
        self.figure("table12.png", "One FFN layer vs decoding batch", draw)

    def kabl(self):
        sc = "paper_k_ablation"
        if not self.section("kabl", "K ablation: memory and speed against K (350M training, 1b FFN decode)", sc,
                            "tab:kabl"):
            return
        train = sorted([p for p in self.pts.of(sc) if p["mode"] == "train"], key=lambda p: int(p["axes"].get("k", 0)))
        dec = sorted([p for p in self.pts.of(sc) if p["mode"] == "ffn-decode"], key=lambda p: int(p["axes"].get("k", 0)))
        rows = []
        for p in train:
            k = p["axes"].get("k")
            peak, tps = metric(p, "peak_bytes"), metric(p, "tokens_per_s")
            pv = self.pv("kabl", "moc", k)
            rows.append([k, status_cell(p, fmt(peak / GB if peak else None)), fmt(pv), ratio(peak / GB if peak else None, pv),
                         status_cell(p, fmt(tps)), f"not measured (paper: {fmt(self.pv('kabl_ppl', 'moc', k))})"])
        self.table(["K", "ours peak GB (350M bs128)", "paper GB (A800)", "ratio", "ours tokens/s", "perplexity"], rows)
        rows = [[p["axes"].get("k"), status_cell(p, fmt(metric(p, "latency_us"))),
                 status_cell(p, fmt(metric(p, "pct_of_floor")))] for p in dec]
        self.table(["K", "ours 1b FFN layer µs (batch 1)", "ours % of byte floor"], rows)

        def draw(fig):
            ax1 = fig.add_subplot(1, 2, 1)
            ks = [int(p["axes"]["k"]) for p in train]
            ax1.plot(ks, [(metric(p, "peak_bytes") or float("nan")) / GB for p in train], "o-", label="ours")
            ax1.plot(ks, [self.pv("kabl", "moc", k) or float("nan") for k in ks], "s--", alpha=0.6, label="paper (A800)")
            ax1.set_xlabel("K")
            ax1.set_ylabel("350M training peak (GB)")
            ax1.legend(fontsize=8)
            ax2 = fig.add_subplot(1, 2, 2)
            kd = [int(p["axes"]["k"]) for p in dec]
            ax2.plot(kd, [metric(p, "latency_us") or float("nan") for p in dec], "o-", color="C2")
            ax2.set_xlabel("K")
            ax2.set_ylabel("1b FFN layer at batch 1 (µs)")
        if train or dec:
            self.figure("kabl.png", "Against K: training memory (left), decode latency (right)", draw)

    # ------------------------------------------------------------------

    def build(self):
        devices = sorted({(p["device_kind"], p["device_name"]) for p in self.pts.points})
        self.lines.append("# MoC paper tables rebuilt by mocbench\n")
        self.lines.append("Our numbers come from the results database(s) read by `mocbench report`; the paper's are "
                          "its published NVIDIA A800 (80 GB) measurements, copied once into "
                          "`scenarios/paper/paper_numbers.toml`, shown beside ours and never mixed into them. "
                          "Ratio = ours / paper. Devices of our runs: " +
                          (", ".join(f"{n} ({k})" for k, n in devices) if devices else "none") + ".\n")
        self.profile()
        self.table2()
        self.figure1()
        self.memory_table("table3", "Table 3 (memory): pre-training LLaMA 60M-1B at batch 256/256/128/64, seq 256",
                          "paper_table3_memory", "tab:pretrain-c4", ["60m", "130m", "350m", "1b"],
                          ["dense", "moc", "moc_2:8"], ppl_table="table3_ppl")
        self.memory_table("table5", "Table 5 (memory): GQA LLaMA 130M (batch 256) and 350M (batch 128)",
                          "paper_table5_gqa", "tab:gqa", ["130m-gqa", "350m-gqa"], ["dense", "moc"],
                          ppl_table="table5_ppl")
        self.memory_table("table6", "Table 6: Qwen3-300M (batch 128) and LLaMA-7B (batch 16): training memory",
                          "paper_table6_qwen3_7b", "tab:qwen3llama7B", ["qwen3-300m", "7b"], ["dense", "moc"],
                          ppl_table="table6_ppl")
        self.note("The paper's Table 6 reports perplexity only: its memory cells are empty above.")
        self.memory_table("table7", "Table 7 (memory): Mixtral 180M (batch 256) and 530M (batch 128), 8 experts, top 2",
                          "paper_table7_mixtral", "tab:pretrain-mixtral-c4", ["mixtral-180m", "mixtral-530m"],
                          ["dense", "moc"], ppl_table="table7_ppl")
        if "table7" in self.sections:
            self.note("The paper's Table 7 names its small model 160M (its configuration table, Table 13: 180M) and "
                      "gives K / d_model = 512 / 1024 for 530M, whose Table 13 hidden size is 768: mocbench runs the "
                      "Table 13 shapes with K = d_model / 2 (256 and 384), the rule of the caption.")
        self.table8()
        self.table9()
        self.table10()
        self.table12()
        self.kabl()
        if self.missing_figures:
            self.lines.append("\nFigures not drawn (no matplotlib): " + ", ".join(self.missing_figures) + ".\n")
        return "\n".join(self.lines) + "\n"


class WriteError(Exception):
    """A file of the report could not be written (disk full, no permission): said plainly, no traceback."""


def write_atomic(path, write):
    """write(tmp) into a temporary file beside path, then rename it over path: an earlier file of that name
    stays whole when writing fails, and the temporary file is removed."""
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=os.path.dirname(path) or ".")
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would have made it (mkstemp's file is private)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise WriteError(f"cannot write {path}: {e.strerror or e}") from None


def write_text(path, text):
    def w(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    write_atomic(path, w)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data")
    ap.add_argument("--paper", required=True)
    ap.add_argument("-o", "--out")
    ap.add_argument("--require-figures", action="store_true")
    ap.add_argument("--check-paper", action="store_true", help="only validate the paper numbers file")
    a = ap.parse_args()
    if a.check_paper:
        paper = load_paper(a.paper)
        print(f"paper numbers: {len(paper)} entries in {len({k[0] for k in paper})} tables")
        return 0
    if not a.data or not a.out:
        ap.error("--data and -o are required")
    with open(a.data) as f:
        points = json.load(f)["points"]
    paper = load_paper(a.paper)
    plt = None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: F811
    except ImportError:
        plt = None
    path = os.path.join(a.out, "report.md")
    try:
        os.makedirs(a.out, exist_ok=True)
        rep = Report(Points(points), paper, a.out, plt)
        text = rep.build()
        write_text(path, text)
    except (WriteError, OSError) as e:
        msg = str(e) if isinstance(e, WriteError) else f"cannot write into {a.out}: {e.strerror or e}"
        print(f"report: {msg}; the report in {a.out} is incomplete (files written before this one are new, the "
              f"others are as they were)", file=sys.stderr)
        return 1
    print(f"report: {path} ({len(rep.sections)} tables, {len(rep.figures)} figures"
          + (f", {len(rep.missing_figures)} not drawn: no matplotlib" if rep.missing_figures else "") + ")")
    for name in rep.figures:
        print(f"  {os.path.join(a.out, name)}")
    if a.require_figures and rep.missing_figures:
        print("report: figures were required but matplotlib is missing (scripts/setup.sh installs python3-matplotlib)",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
