#!/bin/bash
# EXPERIMENT (reverted next): MOCBENCH_XP bounds, interleaved, decode batch 1.
D=$PWD/build/cuda/dev
export LD_LIBRARY_PATH=$D MOCBENCH_CACHE_DIR=/tmp/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for r in 1 2; do
  for x in ${XPS:-0 1 2 3 4 8 16}; do
    MOCBENCH_XP=$x $D/mocbench run bench/micro/xp_decode.toml --db /tmp/xp_$x.db --no-profile --quiet || echo "xp $x failed"
  done
done
for x in ${XPS:-0 1 2 3 4 8 16}; do
  echo "== xp $x"
  python3 - /tmp/xp_$x.db <<'PY'
import sqlite3,sys,json
c=sqlite3.connect(sys.argv[1])
rows=c.execute("select p.run_id, a.value, m.value from points p join metrics m on m.point_id=p.id join point_axes a on a.point_id=p.id and a.name='ffn' where m.name='median_ms' order by p.run_id, p.id").fetchall()
for r in rows: print(r[0], r[1], round(r[2],4))
PY
done
