#!/usr/bin/env python3
"""Markdown tables of the training scenarios from a `mocbench export --format csv` file.

Usage: python3 bench/tools/train_tables.py export.csv
Prints one table per scenario found: train_memory, train_throughput, ffn_train_latency, topk.
"""
import csv
import sys


def f(v, scale=1.0, nd=1):
    try:
        return f"{float(v) * scale:.{nd}f}"
    except (TypeError, ValueError):
        return "-"


def gb(v):
    return f(v, 1e-9, 2)


def main(path):
    rows = list(csv.DictReader(open(path, newline="")))
    by = {}
    for r in rows:
        by.setdefault(r["scenario"], []).append(r)
    dev = rows[0]["device_name"] if rows else ""
    print(f"device: {dev}\n")

    if "train_memory" in by:
        print("### train_memory\n")
        print("| preset | batch | precision | ffn | gcp | status | peak GB | weights | grads | optimizer | activations | workspace | act. model GB | paper model GB |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in by["train_memory"]:
            print(f"| {r['preset']} | {r['batch']} | {r['precision']} | {r['ffn']} | {r['gcp']} | {r['status']} | "
                  f"{gb(r.get('peak_bytes'))} | {gb(r.get('peak_weights_bytes'))} | {gb(r.get('peak_gradients_bytes'))} | "
                  f"{gb(r.get('peak_optimizer_state_bytes'))} | {gb(r.get('peak_activations_bytes'))} | "
                  f"{gb(r.get('peak_workspace_bytes'))} | {gb(r.get('activation_model_bytes'))} | {gb(r.get('activation_paper_bytes'))} |")
        print()
    if "train_throughput" in by:
        print("### train_throughput\n")
        phases = ["forward", "backward", "attention", "ffn", "ffn.gate", "ffn.up", "ffn.down", "ffn.topk", "ffn.act",
                  "head", "loss", "optimizer"]
        print("| preset | batch | precision | ffn | status | step ms | tokens/s | MFU % | peak GB | " +
              " | ".join(phases) + " |")
        print("|" + "---|" * (9 + len(phases)))
        for r in by["train_throughput"]:
            ph = " | ".join(f(r.get(f"phase_{p}_ms")) for p in phases)
            print(f"| {r['preset']} | {r['batch']} | {r['precision']} | {r['ffn']} | {r['status']} | {f(r.get('step_ms'))} | "
                  f"{f(r.get('tokens_per_s'), 1, 0)} | {f(r.get('mfu_pct'))} | {gb(r.get('peak_bytes'))} | {ph} |")
        print()
    if "ffn_train_latency" in by:
        print("### ffn_train_latency\n")
        print("| ffn | gcp | forward ms | backward ms | fwd+bwd ms | stored MB (model) | peak activations MB |")
        print("|---|---|---|---|---|---|---|")
        for r in by["ffn_train_latency"]:
            print(f"| {r['ffn']} | {r['gcp']} | {f(r.get('forward_ms'), 1, 2)} | {f(r.get('backward_ms'), 1, 2)} | "
                  f"{f(r.get('fwd_bwd_ms'), 1, 2)} | {f(r.get('ffn_activation_bytes'), 1e-6, 0)} | "
                  f"{f(r.get('peak_activation_bytes'), 1e-6, 0)} |")
        print()
    if "topk" in by:
        print("### topk\n")
        print("| preset | rows | backend | status | latency us | error |")
        print("|---|---|---|---|---|---|")
        for r in by["topk"]:
            rows_n = int(r["batch"]) * int(r["seq"]) if r.get("batch") and r.get("seq") else "-"
            print(f"| {r['preset']} | {rows_n} | {r['topk_backend']} | {r['status']} | {f(r.get('latency_us'))} | "
                  f"{(r.get('error') or '')[:60]} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
