#!/usr/bin/env python3
"""Compare the SASS of two builds kernel by kernel: did a change that should not touch the machine code touch it?

    bench/tools/sass_diff.py BEFORE AFTER [--cuobjdump PATH] [--only REGEX]

BEFORE and AFTER are each a comma-separated list of objects / shared libraries (cuobjdump -sass is run on them) or of
text files cuobjdump already wrote (*.sass, *.txt). Kernels are matched by mangled name with the anonymous
namespace's per-file tag removed (`_GLOBAL__N__<hash>_<n>_<file>_cu_<hash>`), so a kernel moved to another .cu file
still matches itself. Per kernel it says `exact` (the same instructions, operands and all), `registers` (the same
but for register numbers and immediates: the allocator or an address moved), or how many instructions differ (a
difflib alignment of the normalized streams). Exit status: 0 when every kernel present on both sides is exact, 1
otherwise, 2 on a usage error.

cuobjdump: the CUDA toolkit's (/usr/local/cuda/bin) or the PyPI wheel nvidia-cuda-cuobjdump's; --cuobjdump or
$CUOBJDUMP picks another.
"""
import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys

FUNC = re.compile(r"\s+Function : (\S+)")
INSN = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);")
ANON = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")


def find_cuobjdump(given):
    for c in (given, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("sass_diff: no cuobjdump (give --cuobjdump or $CUOBJDUMP)")


def sass_text(path, cuobjdump):
    if path.endswith((".sass", ".txt")):
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    r = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sass_diff: cuobjdump -sass {path} failed: {r.stderr.strip()}")
    return r.stdout


def kernels(paths, cuobjdump):
    out = {}
    for p in paths.split(","):
        cur = None
        for line in sass_text(p, cuobjdump).splitlines():
            m = FUNC.match(line)
            if m:
                cur = ANON.sub("<anon>", m.group(1))
                out[cur] = []
                continue
            if cur:
                m = INSN.match(line)
                if m:
                    out[cur].append(re.sub(r"\s+", " ", m.group(1)))
    return out


def normalized(insns):
    res = []
    for i in insns:
        i = re.sub(r"\bU?R\d+\b", "R", i)
        i = re.sub(r"\bU?P\d\b", "P", i)
        res.append(re.sub(r"0x[0-9a-f]+", "#", i))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--cuobjdump")
    ap.add_argument("--only", help="compare only kernels whose (normalized) name matches this regex")
    a = ap.parse_args()
    tool = find_cuobjdump(a.cuobjdump) if not all(
        p.endswith((".sass", ".txt")) for p in (a.before + "," + a.after).split(",")) else None
    A, B = kernels(a.before, tool), kernels(a.after, tool)
    if a.only:
        keep = re.compile(a.only)
        A = {k: v for k, v in A.items() if keep.search(k)}
        B = {k: v for k, v in B.items() if keep.search(k)}
    exact = True
    counts = {"exact": 0, "registers": 0, "changed": 0}
    for k in sorted(set(A) & set(B)):
        if A[k] == B[k]:
            counts["exact"] += 1
            continue
        exact = False
        na, nb = normalized(A[k]), normalized(B[k])
        if na == nb:
            counts["registers"] += 1
            print(f"registers  {len(A[k]):6d} {len(B[k]):6d}  {k}")
            continue
        counts["changed"] += 1
        ops = [o for o in difflib.SequenceMatcher(None, na, nb, autojunk=False).get_opcodes() if o[0] != "equal"]
        changed = sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in ops)
        print(f"changed    {len(A[k]):6d} {len(B[k]):6d}  {changed} instructions in {len(ops)} places  {k}")
    for k in sorted(set(A) - set(B)):
        print(f"only before  {k}")
    for k in sorted(set(B) - set(A)):
        print(f"only after   {k}")
    print(f"{len(set(A) & set(B))} kernels on both sides: {counts['exact']} exact, {counts['registers']} same up to "
          f"registers and immediates, {counts['changed']} changed; {len(set(A) - set(B))} only before, "
          f"{len(set(B) - set(A))} only after")
    return 0 if exact and set(A) == set(B) else 1


if __name__ == "__main__":
    sys.exit(main())
