#!/usr/bin/env python3
"""Declared bytes (the roofline) against Nsight Compute's DRAM bytes, per kernel name (issue 25's target:
within 10% for at least 5 decode kernels of different kinds).

Usage: ncu_bytes.py NCU_CSV MOCBENCH DB [RUN [POINT]]
  NCU_CSV: `ncu --csv --page raw --kernel-name-base function --metrics dram__bytes_read.sum,dram__bytes_write.sum
           ...` of the same point run unprofiled (ncu flushes the caches before each kernel: every byte a kernel
           needs comes from DRAM, as the roofline's floor assumes).
  DB / RUN / POINT: a run of the same point with its profile (`mocbench stats RUN --report roofline --format csv`
           gives the declared bytes per step and the instances per step of every kernel name).
Prints, per kernel name found in both: ncu's mean DRAM bytes per instance, the declared mean, the ratio.
"""
import collections
import csv
import io
import subprocess
import sys


def short(name):
    """mocbench's short name of a demangled kernel name: no parameters, namespaces or template arguments."""
    name = name.split("(")[0].replace("<unnamed>", "").strip()
    depth, out = 0, ""
    for ch in name:  # drop template arguments, which may hold '::'
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out += ch
    parts = out.split()
    return parts[-1].split("::")[-1] if parts else out


def ncu_means(path):
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    rows = list(csv.reader(lines))
    head = rows[0]
    ki = head.index("Kernel Name")
    cols = [head.index(m) for m in ("dram__bytes_read.sum", "dram__bytes_write.sum")]
    units = rows[1]  # the units row: "byte", "Kbyte", "Mbyte", ...
    scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1}
    tot, cnt = collections.Counter(), collections.Counter()
    for r in rows[2:]:
        try:
            b = sum(float(r[c].replace(",", "")) * scale.get(units[c], 1) for c in cols)
        except ValueError:
            continue
        n = short(r[ki])
        tot[n] += b
        cnt[n] += 1
    return {n: (tot[n] / cnt[n], cnt[n]) for n in tot}


def declared_means(mocbench, db, run, point):
    cmd = [mocbench, "stats", run, "--db", db, "--report", "roofline", "--format", "csv"]
    if point is not None:
        cmd += ["--point", point]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    bytes_, inst = collections.Counter(), collections.Counter()
    for r in csv.DictReader(io.StringIO(out)):
        if r.get("report") != "roofline" or not r.get("Bytes per step") or r["Name"] == "Name":
            continue
        n = r["Name"]
        bytes_[n] += float(r["Bytes per step"])
        inst[n] += float(r["Instances"])
    return {n: bytes_[n] / inst[n] for n in bytes_ if inst[n] > 0}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    ncu = ncu_means(sys.argv[1])
    run = sys.argv[4] if len(sys.argv) > 4 else None
    if run is None:
        import sqlite3
        run = str(sqlite3.connect(sys.argv[3]).execute("SELECT max(id) FROM runs").fetchone()[0])
    point = sys.argv[5] if len(sys.argv) > 5 else None
    dec = declared_means(sys.argv[2], sys.argv[3], run, point)
    print(f"{'kernel':32s} {'ncu DRAM B/inst':>16s} {'n':>6s} {'declared B/inst':>16s} {'ncu/declared':>12s}")
    within = 0
    for n in sorted(set(ncu) & set(dec), key=lambda k: -dec[k]):
        b, c = ncu[n]
        ratio = b / dec[n] if dec[n] else float("nan")
        within += abs(ratio - 1) <= 0.10
        print(f"{n:32s} {b:16,.0f} {c:6d} {dec[n]:16,.0f} {ratio:12.3f}")
    print(f"{within} kernel name(s) within 10%")
    missing = sorted(set(dec) - set(ncu))
    if missing:
        print("declared but not in the ncu log:", ", ".join(missing))


if __name__ == "__main__":
    main()
