#!/usr/bin/env bash
# Configures the project against the FindCUDAToolkit.cmake that Debian 12 ships unpatched (issue #27): with
# the CUDA 13 toolkit, CMake 3.25.1's stock module fails ("set_property could not find TARGET
# CUDA::nvToolsExt") unless the project keeps it from that branch (see the CUDA block of CMakeLists.txt).
# Machines whose system copy of the module was patched by hand would hide a regression; this check does not.
#
# The stock module comes from Debian's cmake-data package of the installed CMake version (apt-get download),
# or -- offline -- from the system copy with the known local patch taken out again. Exit 0: configure
# passed; 1: it failed (log on stderr); 77: nothing to check here (no nvcc, or no module found).
# Usage: scripts/check_stock_cmake.sh   (CTest runs it as StockCMakeConfiguresWithCuda)
set -uo pipefail
cd "$(dirname "$0")/.."
nvcc=/usr/local/cuda/bin/nvcc
command -v nvcc >/dev/null 2>&1 && nvcc=$(command -v nvcc)
if [ ! -x "$nvcc" ]; then
  echo "check_stock_cmake: no nvcc: the CUDA block is not configured here (skipped)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/mocbench-stock-cmake.XXXXXX")
trap 'rm -rf "$work"' EXIT
ver=$(cmake --version | awk 'NR == 1 {print $3}')
mm=${ver%.*}
sys="/usr/share/cmake-$mm/Modules/FindCUDAToolkit.cmake"
mkdir -p "$work/modules" "$work/deb"
stock=""
# The package of exactly the installed version (its modules are the ones this CMake would load).
pkgver=$(dpkg-query -W -f='${Version}' cmake-data 2>/dev/null || true)
if [ -n "$pkgver" ] && (cd "$work/deb" && apt-get download "cmake-data=$pkgver" >/dev/null 2>&1); then
  deb=$(ls "$work"/deb/cmake-data_*.deb 2>/dev/null | head -1)
  if [ -n "$deb" ] && dpkg-deb -x "$deb" "$work/deb/x" 2>/dev/null; then
    # The whole Modules folder: FindCUDAToolkit.cmake includes its siblings by their path.
    f=$(find "$work/deb/x" -name FindCUDAToolkit.cmake | head -1)
    [ -n "$f" ] && cp -r "$(dirname "$f")/." "$work/modules/" && stock="cmake-data package ($(basename "$deb"))"
  fi
fi
if [ -z "$stock" ] && [ -f "$sys" ]; then
  # The local patch guards the deprecation mark with "TARGET CUDA::nvToolsExt AND"; the stock file does not.
  cp -r "$(dirname "$sys")/." "$work/modules/"
  sed 's/if(TARGET CUDA::nvToolsExt AND CMAKE_MINIMUM_REQUIRED_VERSION/if(CMAKE_MINIMUM_REQUIRED_VERSION/' \
    "$sys" > "$work/modules/FindCUDAToolkit.cmake"
  stock="$sys without the local patch"
fi
if [ -z "$stock" ]; then
  echo "check_stock_cmake: no FindCUDAToolkit.cmake for CMake $ver (skipped)"
  exit 77
fi
if ! grep -q 'if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)' "$work/modules/FindCUDAToolkit.cmake"; then
  echo "check_stock_cmake: note: this CMake's module has no unguarded nvToolsExt branch (nothing to catch)"
fi
echo "check_stock_cmake: configuring with the stock module from $stock"
if cmake -S . -B "$work/build" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release -DMOCBENCH_GUI=OFF \
     -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_MODULE_PATH="$work/modules" > "$work/log" 2>&1 &&
   grep -q "mocbench: CUDA backend ON" "$work/log"; then
  echo "check_stock_cmake: ok (CUDA backend ON)"
  exit 0
fi
echo "check_stock_cmake: configure FAILED against the stock FindCUDAToolkit.cmake:" >&2
tail -30 "$work/log" >&2
exit 1
