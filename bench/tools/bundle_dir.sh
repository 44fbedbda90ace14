# Sourced by the device scripts (bench/micro/knob_ab.sh, bench/tools/final_study.sh).
# bundle_dir BUNDLE UNPACK_DIR: prints the bundle's dev folder -- BUNDLE itself when it is a folder, else
# scripts/device_bundle.sh's .tar.xz unpacked into UNPACK_DIR first (UNPACK_DIR/dev); fails when it cannot unpack.
bundle_dir() {
  if [ -d "$1" ]; then
    (cd "$1" && pwd)
  else
    mkdir -p "$2" && tar xJf "$1" -C "$2" && echo "$(cd "$2" && pwd)/dev"
  fi
}
