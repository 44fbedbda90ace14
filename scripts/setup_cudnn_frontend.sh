#!/usr/bin/env bash
# Installs the cuDNN frontend headers (header-only C++ graph API: the fused SDPA forward/backward that
# kernels/cuda/cudnn_sdpa.cpp uses) into the project-local prefix .local/cudnn_frontend/include, from a
# pinned PyPI wheel (never vendored into the repository). Only the wheel's include/ is unpacked: its
# Python module is not used. The cuDNN library itself comes with the CUDA toolkit (libcudnn.so.9);
# cmake/cudnn_frontend.cmake picks the headers up at configure time.
# Idempotent and quiet when the pinned version is present.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${MOCBENCH_CUDNN_FRONTEND_PREFIX:-$PWD/.local/cudnn_frontend}"
# name==version, the exact wheel file (one build of it: the headers are the same in every build) and its sha256
pin="nvidia-cudnn-frontend==1.32.0"
wheel="nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
sha="c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0"
stamp="$prefix/include/.mocbench-pin"
want="$pin $sha"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "setup_cudnn_frontend: installing the $pin headers into ${prefix#"$PWD"/}/include"
# shellcheck source=scripts/pinned_wheel.sh
. scripts/pinned_wheel.sh  # (the working folder is the repository root)
fetch_pinned_wheel setup_cudnn_frontend "$prefix/wheels" "$pin" "$wheel" "$sha" --platform manylinux_2_28_x86_64 \
  --python-version 3.11 --implementation cp --abi cp311
wheels="$prefix/wheels"

# Unpack into a fresh directory, then swap it in.
tmp="$prefix/include.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
python3 - "$wheels/$wheel" "$tmp" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit("setup_cudnn_frontend: the wheel has no include/cudnn_frontend.h")
    for n in names:
        z.extract(n, sys.argv[2])
EOF
echo "$want" >"$tmp/include/.mocbench-pin"
rm -rf "$prefix/include"
mv "$tmp/include" "$prefix/include"
rm -rf "$tmp"
trap - EXIT
echo "setup_cudnn_frontend: done"
