#!/usr/bin/env bash
# Installs the dashboard's UI libraries into the project-local prefix .local/imgui, from one pinned PyPI
# wheel (never vendored into the repository): comma-deps-imgui holds static builds of Dear ImGui 1.92.7
# (docking branch) + ImPlot 0.18 + the GLFW/OpenGL3 backends (lib/libimgui.a) and GLFW 3.4
# (lib/libglfw3.a), with their headers. Debian 12 packages only ImGui 1.86 (no docking, no ImPlot).
# The wheel's own Python package needs Python >= 3.12, so the file is fetched, checked and unpacked rather
# than installed. cmake/imgui.cmake picks the prefix up at configure time.
# Idempotent and quiet when the pinned version is present.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${MOCBENCH_IMGUI_PREFIX:-$PWD/.local/imgui}"
pin="comma-deps-imgui==1.92.7.post104"
wheel="comma_deps_imgui-1.92.7.post104-py3-none-manylinux_2_28_x86_64.whl"
sha="f191a711ba008372c9ee1a620b2ab6859c062625268180a55980d88298f5b186"
stamp="$prefix/install/.mocbench-pin"
want="$pin $sha"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "setup_imgui: installing $pin into ${prefix#"$PWD"/}/install"
# shellcheck source=scripts/pinned_wheel.sh
. scripts/pinned_wheel.sh  # (the working folder is the repository root)
fetch_pinned_wheel setup_imgui "$prefix/wheels" "$pin" "$wheel" "$sha" --platform manylinux_2_28_x86_64 \
  --python-version 3.12

# Unpack the install tree (include/, lib/) into a fresh directory, then swap it in.
tmp="$prefix/install.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
python3 - "$pinned_wheel" "$tmp" <<'PY'
import os, sys, zipfile
marker = "/purelib/imgui/install/"
with zipfile.ZipFile(sys.argv[1]) as z:
    n = 0
    for name in z.namelist():
        i = name.find(marker)
        if i < 0 or name.endswith("/"):
            continue
        rel = name[i + len(marker):]
        # headers and the two static libraries; the wheel's Mesa copies are not used (the system's GL is)
        if not (rel.startswith("include/") or (rel.startswith("lib/lib") and rel.endswith(".a"))):
            continue
        dst = os.path.join(sys.argv[2], rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with z.open(name) as src, open(dst, "wb") as out:
            out.write(src.read())
        n += 1
    need = ["include/imgui.h", "include/implot.h", "lib/libimgui.a", "lib/libglfw3.a"]
    missing = [p for p in need if not os.path.exists(os.path.join(sys.argv[2], p))]
    if missing:
        sys.exit("setup_imgui: the wheel lacks " + ", ".join(missing))
PY
echo "$want" >"$tmp/.mocbench-pin"
rm -rf "$prefix/install"
mv "$tmp" "$prefix/install"
trap - EXIT
