#!/usr/bin/env bash
# The README's two commands, exactly as written, in a fresh minimal Debian 12 root (debootstrap --variant
# minbase: no pip, no certificates, no compiler) -- the check that the set-up works on a plain Debian 12 and
# not only on our image (issue #27). Too slow for every CI run (a Debian root, every package and wheel
# downloaded, two full builds and the whole test suite on this machine's cores: 30-60 minutes on 2 cores);
# run it before changing scripts/setup.sh, the CMake files or the README's commands.
#
# Usage (root; network to the Debian mirror and PyPI):
#   scripts/check_fresh_debian.sh [--cuda] [--keep] [ROOT_DIR]
#     --cuda  bind-mount this machine's /usr/local/cuda (read-only) into the root: the CUDA backend is then
#             configured and built with Debian's stock CMake 3.25.1 modules
#     --keep  leave the root (default: removed at the end)
#     ROOT_DIR  where to build the root (default: a new folder under /var/tmp). Only a folder this script
#               created is ever removed; an existing ROOT_DIR must be empty or a root an earlier --keep left.
# Exit status: 0 when both commands passed; the log of each is ROOT_DIR/check-*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=0 keep=0 root=""
for a in "$@"; do
  case "$a" in
    --cuda) cuda=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) root="$a" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "check_fresh_debian: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
if [ "$cuda" = 1 ] && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "check_fresh_debian: --cuda needs the toolkit at /usr/local/cuda" >&2
  exit 2
fi
command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
created=0
if [ -z "$root" ]; then
  root=$(mktemp -d /var/tmp/mocbench-fresh-debian.XXXXXX)
  # mktemp makes it 0700; as the root's "/" that would keep every other user out of the whole tree (a test
  # that reads a results file as uid 65534 failed on it). A Debian "/" is 0755.
  chmod 755 "$root"
  created=1
elif [ ! -e "$root" ]; then
  mkdir -p "$root"
  created=1
elif [ -n "$(ls -A "$root")" ] && [ ! -x "$root/bin/bash" ]; then
  echo "check_fresh_debian: $root is neither empty nor a Debian root from an earlier --keep: refusing" >&2
  exit 2
fi
mirror=http://deb.debian.org/debian
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  # Never a folder the user brought: only one this script made (its mounts are gone by now).
  if [ "$keep" != 1 ] && [ "$created" = 1 ]; then rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
bind() {  # bind SRC DST [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mounted+=("$2")
  [ "${3:-}" = ro ] && mount -o remount,bind,ro "$2"
  return 0
}

echo "check_fresh_debian: debootstrap bookworm (minbase) into $root"
[ -x "$root/bin/bash" ] || debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.debootstrap.log" 2>&1 ||
  { tail -20 "$root.debootstrap.log" >&2; exit 1; }
cp /etc/resolv.conf "$root/etc/resolv.conf"
# This machine's own trust anchors (e.g. a network's TLS-inspecting proxy): the root's ca-certificates package
# adds them when setup.sh installs it, as it would on a machine of that network. Nothing else of the host's.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  # A kept root (--keep, then run again) may have the package already: refresh its bundle.
  [ -x "$root/usr/sbin/update-ca-certificates" ] && chroot "$root" /usr/sbin/update-ca-certificates >/dev/null 2>&1
fi
bind /proc "$root/proc"
bind /dev "$root/dev"
bind /sys "$root/sys"
if [ "$cuda" = 1 ]; then bind "$(readlink -f /usr/local/cuda)" "$root/usr/local/cuda" ro; fi

# The project as committed (git archive: no build folders, no .local wheels, nothing untracked).
rm -rf "$root/src" && mkdir -p "$root/src"
git archive HEAD | tar -x -C "$root/src"

run_in_root() {  # NAME COMMAND
  echo "check_fresh_debian: $1: $2"
  if chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
       TERM=dumb /bin/bash -c "cd /src && $2" > "$root/check-$1.log" 2>&1; then
    echo "check_fresh_debian: $1: passed"
  else
    echo "check_fresh_debian: $1: FAILED (log: $root/check-$1.log)" >&2
    tail -30 "$root/check-$1.log" >&2
    keep=1
    return 1
  fi
}
# The README's two commands, word for word.
run_in_root main "scripts/setup.sh && cmake --preset default && cmake --build --preset default && build/default/app/mocbench run scenarios/decode_bs1_4.toml"
run_in_root tests "scripts/test.sh"
echo "check_fresh_debian: both README commands passed in a fresh Debian 12 root$([ "$cuda" = 1 ] && echo ' (with the CUDA 13 toolkit)')"
