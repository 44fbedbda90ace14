#!/usr/bin/env bash
# Installs RAFT (header-only raft::matrix::select_k) and what its headers need into the project-local
# prefix .local/rapids, from pinned PyPI wheels (never vendored into the repository):
#   libraft-cu13   RAFT headers, plus the CCCL 3.5 headers (include/rapids/{cuda,cub,thrust}) that
#                  RAFT 26.10 needs: CUDA 13.0's bundled CCCL (3.0.1) is too old for it
#   librmm-cu13    RMM headers and librmm.so (RMM is no longer header-only: select_k's scratch
#                  allocations and device_buffer call into it)
#   rapids-logger  rapids_logger headers and librapids_logger.so (RAFT's and RMM's logging)
# The wheels' own Requires-Dist on the cuda-toolkit/nvjitlink wheels is skipped (--no-deps): the
# local CUDA toolkit provides those. cmake/raft.cmake picks the prefix up at configure time.
# Idempotent and quiet when everything is present; --print-includes prints the include directories.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${MOCBENCH_RAFT_PREFIX:-$PWD/.local/rapids}"
site="$prefix/site"
# name==version sha256 (PyPI, manylinux x86_64, py3-none)
pins=(
  "libraft-cu13==26.10.0 ab3650df4779b9319ca46524f82f8cc0848dec43034ab3bdd0da5c256e5500c8"
  "librmm-cu13==26.10.0 39edcc7396f5291e95331089909b1e13e445fa2dbd4e7323992fb29fb04a5a1b"
  "rapids-logger==0.3.0 9d9094dd241c4e0f2d0c3bad448871e62f9b915e1ef65db41b0a1cf4473b1066"
)
stamp="$site/.mocbench-pins"
want="$(printf '%s\n' "${pins[@]}")"

print_includes() {
  # Order matters: the wheel's CCCL must come before the toolkit's own include/cccl.
  echo "$site/libraft/include/rapids"
  echo "$site/libraft/include"
  echo "$site/librmm/include"
  echo "$site/rapids_logger/include"
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  [ "${1:-}" = "--print-includes" ] && print_includes
  exit 0
fi

echo "setup_raft: installing RAFT/RMM/rapids-logger wheels into ${site#"$PWD"/}"
wheels="$prefix/wheels"
mkdir -p "$wheels"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
files=()
for pin in "${pins[@]}"; do
  spec="${pin%% *}" sha="${pin##* }"
  name="${spec%%==*}" version="${spec##*==}"
  pattern="${name//-/_}-${version}-*.whl"
  # shellcheck disable=SC2206
  found=($wheels/$pattern)
  if [ ! -f "${found[0]}" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --python-version 3.11 --implementation py -d "$wheels" "$spec" >/dev/null
    # shellcheck disable=SC2206
    found=($wheels/$pattern)
  fi
  whl="${found[0]}"
  if ! echo "$sha  $whl" | sha256sum -c --status -; then
    echo "setup_raft: sha256 mismatch for $whl" >&2
    rm -f "$whl"
    exit 1
  fi
  files+=("$whl")
done

# Install into a fresh directory, then swap it in (pip --target will not replace an existing one).
tmp="$prefix/site.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip install -q --no-deps --no-index --no-compile --target "$tmp" "${files[@]}" >/dev/null
echo "$want" >"$tmp/.mocbench-pins"
rm -rf "$site"
mv "$tmp" "$site"
trap - EXIT
echo "setup_raft: done; include directories (in this order):"
print_includes | sed 's/^/  /'
