#!/usr/bin/env bash
# Installs what mocbench needs and is missing. Idempotent, quiet when everything is present.
# Debian packages only for now; PyPI wheels (later issues) go into the project-local prefix .local/.
set -euo pipefail

debian_packages=(
  cmake ninja-build g++ pkg-config git
  # the pinned PyPI wheels below: pip, and the CA certificates its HTTPS needs (not pulled in: apt runs with
  # --no-install-recommends, so a plain Debian 12 had neither)
  python3-pip ca-certificates
  libopenblas-openmp-dev  # CPU backend GEMMs (cblas), on the backend's own OpenMP threads (CMakeLists.txt)
  libgtest-dev         # tests
  libcli11-dev         # command line
  libtomlplusplus-dev  # scenario files
  libsqlite3-dev       # results database
  nlohmann-json3-dev   # tests: JSON parsed back (stats, Perfetto export)
  python3-matplotlib   # `mocbench report`: the paper figures (scripts/paper_report.py, Debian's python3)
  python3-numpy        # the GGUF oracle's float64 reference forward (tests/oracle/, issue #29)
  python3-yaml         # ... and the gguf package it reads the GGUF with imports yaml
  libsentencepiece-dev # training on real text: the BPE tokenizer ([data], model/data/)
  python3.11-doc       # the shipped corpus: the Python 3.11 documentation sources (PSF licence)
  # the dashboard (mocbench-gui): OpenGL and the X11 libraries GLFW opens, PNG screenshots, and the headless
  # X server + Mesa's software renderer its tests and screenshots run under
  libgl-dev libx11-dev libxrandr-dev libxinerama-dev libxcursor-dev libxi-dev libstb-dev
  xvfb xauth libgl1-mesa-dri
)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The cuDNN frontend headers (pinned PyPI wheel) for the bf16 attention path, and RAFT/RMM/rapids-logger
# (pinned PyPI wheels) for the RAFT select_k top-K backend; both into .local/, quiet when present. GPU-only
# (~114 MB): fetched only where the CUDA backend is built, i.e. where configure finds nvcc (on PATH, $CUDACXX,
# or the toolkit's usual place; MOCBENCH_CUDA_ROOT overrides that place).
cuda_root=${MOCBENCH_CUDA_ROOT:-/usr/local/cuda}
if command -v nvcc >/dev/null 2>&1 || [ -x "$cuda_root/bin/nvcc" ] || { [ -n "${CUDACXX:-}" ] && [ -x "$CUDACXX" ]; }; then
  "$(dirname "$0")/setup_cudnn_frontend.sh"
  "$(dirname "$0")/setup_raft.sh"
else
  echo "setup: no nvcc: the CPU backend only; the GPU-only wheels (cuDNN frontend, RAFT) are not fetched" \
       "(run scripts/setup.sh again after installing the CUDA toolkit)"
fi
# Dear ImGui 1.92 (docking) + ImPlot + GLFW 3.4 for the dashboard (pinned PyPI wheel into .local/imgui).
"$(dirname "$0")/setup_imgui.sh"
# llama.cpp's gguf Python package (pinned PyPI wheel into .local/gguf-py): the GGUF tests' oracle.
"$(dirname "$0")/setup_gguf_py.sh"
"$(dirname "$0")/setup_tokenizers_py.sh"  # the tokenize script and its test (tests/test_tokenize_script.cpp)

if ! command -v nvcc >/dev/null 2>&1 && [ -x "$cuda_root/bin/nvcc" ]; then
  if [ "$cuda_root" = /usr/local/cuda ]; then
    echo "setup: note: nvcc is at /usr/local/cuda/bin (configure looks there too)" >&2
  else
    echo "setup: note: nvcc is at $cuda_root/bin: set CUDACXX=$cuda_root/bin/nvcc (or put it on PATH) for configure" >&2
  fi
fi
