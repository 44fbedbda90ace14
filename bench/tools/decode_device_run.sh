#!/bin/bash
# One device call for the decode-step kernels (profiling aid): GPU tests, per-op graph timings
# (GpuPerf.DISABLED_DecodeOpTimings, every skinny-GEMM variant), the end-to-end 1b decode of
# bench/profile_decode.toml (default build, best GEMM variant of the timings, cuBLASLt GEMMs, and a baseline
# build when given) and an ncu per-kernel summary.
# Usage (on the device, repo root): bash bench/tools/decode_device_run.sh BUNDLE_DIR [STEPS]
#   BUNDLE_DIR holds stripped mocbench, mocbench_tests, libmocbench_cuda.so, libgomp.so.1 and optionally
#   base.tar.xz (a baseline bundle: base/{mocbench,libmocbench_cuda.so,libgomp.so.1}).
#   STEPS: any of tests,perf,e2e,best,base,cublas,ncu,memcheck,sass (default: all).
# Logs go to /tmp/decode_run and, packed after every step, to $OUT/logs.tgz (few files come back);
# $OUT/summary.txt has the short version, printed last.
set -u
B=$(cd "$1" && pwd)
STEPS=${2:-tests,perf,e2e,best,base,cublas,ncu,memcheck,sass}
OUTD=${OUT:-out}
O=/tmp/decode_run
rm -rf "$O"; mkdir -p "$O" "$OUTD"
has() { case ",$STEPS," in *",$1,"*) return 0;; esac; return 1; }
export LD_LIBRARY_PATH=$B
T0=$(date +%s)
pack() { tar -czf "$OUTD/logs.tgz" -C /tmp decode_run 2>/dev/null; cp "$O/summary.txt" "$OUTD/summary.txt" 2>/dev/null; }
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$O/summary.txt"; pack; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$O/gpu.txt" 2>&1
sed 's/^ffn = \["dense", "moc"\]/ffn = ["dense"]/' bench/profile_decode.toml > /tmp/profile_dense.toml

e2e() {  # label, env assignments ("" for none), bin dir
  local label=$1 envs=$2 dir=$3
  rm -f /tmp/e2e_$label.db
  env $envs LD_LIBRARY_PATH=$dir timeout 60 "$dir/mocbench" run bench/profile_decode.toml --db /tmp/e2e_$label.db \
    > "$O/e2e_$label.log" 2>&1
  stamp "e2e $label ($envs) rc=$?"
  LD_LIBRARY_PATH=$dir "$dir/mocbench" show 1 --db /tmp/e2e_$label.db > "$O/e2e_$label.show" 2>&1
  grep -E "mode=decode" "$O/e2e_$label.show" | awk -v l="$label" '{print "  " l ": " $4, $5, $6, "ms/token"}' \
    | tee -a "$O/summary.txt"
}

if has tests; then
  timeout 150 "$B/mocbench_tests" --gtest_filter='GpuOps*:GpuAttention*:GpuDecode*:GpuBatch*:GpuModel*:GpuMoc*:GpuFfn*' \
    > "$O/tests.log" 2>&1
  stamp "tests rc=$?"
  grep -E "^\[  (PASSED|FAILED) |test suites ran" "$O/tests.log" | tee -a "$O/summary.txt"
fi
BEST=""
if has perf; then
  timeout 90 "$B/mocbench_tests" --gtest_also_run_disabled_tests --gtest_filter='GpuPerf.DISABLED_DecodeOpTimings' \
    > "$O/perf.log" 2>&1
  stamp "perf rc=$?"
  grep -E "us/call" "$O/perf.log" | tee -a "$O/summary.txt"
  # The fastest chained variant for the 2048 x 2048 projection at one row, and for the LM head.
  BEST=$(python3 - "$O/perf.log" <<'PY'
import re, sys
best = {}
for line in open(sys.argv[1]):
    m = re.match(r"gemm m1 k2048 n(\d+) -> \S+ v=(\S+): chained ([\d.]+)", line)
    if not m: continue
    n, v, us = int(m.group(1)), m.group(2), float(m.group(3))
    key = "big" if n >= 16384 else "small"
    if v == "default" or (key == "big" and v == "off"): continue
    if key not in best or us < best[key][1]: best[key] = (v, us)
env = []
if "small" in best: env.append("MOCBENCH_SKINNY=" + best["small"][0])
if "big" in best: env.append("MOCBENCH_SKINNY_BIG=" + best["big"][0])
print(" ".join(env))
PY
)
  echo "best variants: $BEST" | tee -a "$O/summary.txt"
fi
has e2e && e2e new "" "$B"
has best && [ -n "$BEST" ] && e2e best "$BEST" "$B"
if has base && [ -f "$B/base.tar.xz" ]; then
  python3 -c "import tarfile; tarfile.open('$B/base.tar.xz').extractall('/tmp')"
  e2e base "" /tmp/base
fi
has cublas && e2e cublas "MOCBENCH_SKINNY=off MOCBENCH_SKINNY_BIG=off" "$B"
if has ncu; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  env $BEST timeout 90 "$NCU" --csv --metrics gpu__time_duration.sum --launch-skip 2500 --launch-count 700 \
    "$B/mocbench" run /tmp/profile_dense.toml --db /tmp/ncu.db > "$O/ncu.csv" 2> "$O/ncu.err"
  stamp "ncu ($BEST) rc=$?"
  python3 bench/tools/ncu_summary.py "$O/ncu.csv" > "$O/ncu_summary.txt" 2>&1
  head -30 "$O/ncu_summary.txt" | tee -a "$O/summary.txt"
fi
if has memcheck; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout 100 "$CS" --tool memcheck "$B/mocbench_tests" \
    --gtest_filter='GpuOps.Rms*:GpuOps.Rope*:GpuOps.KvCache*:GpuOps.SampleGreedy*:GpuAttention.Decode*:GpuOpsGraph.DecodeStep*' \
    > "$O/memcheck.log" 2>&1
  stamp "memcheck rc=$?"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/memcheck.log" | tail -4 | tee -a "$O/summary.txt"
fi
if has sass; then
  CO=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  "$CO" -sass "$B/libmocbench_cuda.so" 2>/dev/null | awk '/Function : .*skinny_gemm_kernelILi64ELi1EfE/{f=1;print;next} /Function :/{f=0} f' \
    > "$O/skinny_64_m1_f32.sass"
  echo "skinny 64/m1 sass: $(grep -c 'LDG' "$O/skinny_64_m1_f32.sass") LDG, $(grep -cE 'LDL|STL' "$O/skinny_64_m1_f32.sass") local" \
    | tee -a "$O/summary.txt"
fi
stamp done
