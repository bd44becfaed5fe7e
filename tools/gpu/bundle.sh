#!/usr/bin/env bash
# Several prebuilt packs (tools/gpu/prebuild.sh) as one xz stream, for the carry to the GPU machine.
# The packs' binaries embed the same kernels' fatbins, so one stream with a dictionary larger than a
# whole tree compresses every tree after the first to its differences: six trees of ~60 MB of
# binaries went as 11.4 MB (against ~48 MB as separate packs), which left room for models/ in the
# 64 MiB carry (2026-12-08).
#
#   tools/gpu/bundle.sh pack OUT.tar.xz PACK_DIR NAME[=BINARY,BINARY...] ...   (here)
#   tools/gpu/bundle.sh unpack BUNDLE.tar.xz PACK_DIR                          (on the GPU machine)
#
# pack: PACK_DIR/NAME.tar.xz's STAMP and binaries (all of them, or only the BINARY names listed)
# into OUT. unpack: every tree of the bundle back to PACK_DIR/NAME.tar.xz (xz -0, fast), as ab.sh
# and staged_call.sh expect with AB_PREBUILT=PACK_DIR.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,14p' "$0"; exit 2; }
mode=$1 bundle=$2 packs=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case $mode in
  pack)
    [ $# -ge 1 ] || { echo "bundle.sh pack: no trees named"; exit 2; }
    for spec in "$@"; do
      name=${spec%%=*}
      mkdir -p "$work/$name"
      tar xJf "$packs/$name.tar.xz" -C "$work/$name"
      if [[ $spec == *=* ]]; then
        keep=" STAMP ${spec#*=} "
        keep=${keep//,/ }
        for f in "$work/$name"/*; do [[ $keep == *" ${f##*/} "* ]] || rm -f "$f"; done
      fi
      [ -f "$work/$name/STAMP" ] || { echo "bundle.sh: $packs/$name.tar.xz has no STAMP"; exit 1; }
    done
    XZ_OPT=${XZ_OPT:---lzma2=preset=6,dict=400MiB} tar cJf "$bundle" -C "$work" .
    echo "$bundle: $(du -h "$bundle" | cut -f1) ($*)" ;;
  unpack)
    mkdir -p "$packs"
    tar xJf "$bundle" -C "$work"
    for dir in "$work"/*/; do
      name=$(basename "$dir")
      tar cf - -C "$dir" . | xz -0 -T0 >"$packs/$name.tar.xz"
      echo "$packs/$name.tar.xz: $(cd "$dir" && ls | tr '\n' ' ')"
    done ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
