#!/usr/bin/env bash
# Builds, on a machine without a GPU (nvcc is enough), the GPU binaries of the trees an A/B call will
# run, so the call on the GPU machine spends its device time running them rather than compiling
# (~1-2 minutes a call). Each tree is the working tree with patches applied, named as in ab.sh:
#
#   tools/gpu/prebuild.sh OUT_DIR base NAME=PATCH[+PATCH...] ...
#
# "base" is the working tree as it is. Every tree is built in /tmp/prebuild-NAME (kept, so the next
# run of the same tree rebuilds only what changed) with RUN_ALL_TARGETS (default: the model bench
# and the attention, ops and gemm tests) and packed to OUT_DIR/NAME.tar.xz: build-gpu's binaries and
# a STAMP of the tree's sources (trees.sh). ab.sh AB_PREBUILT=OUT_DIR unpacks them into its trees when
# the stamp matches and the binaries load there; otherwise it builds on the GPU machine as before.
# OUT_DIR goes to the GPU machine in `carry` (~4 MB for the first binary of a pack, ~0.3 MB for each next one).
# PREBUILD_CMAKE_ARGS: more CMake arguments for every tree (e.g. -DDEEPINFER_CUDA_LINEINFO=ON for
# Nsight Compute's source view; the stamp does not cover them).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
out=$1; shift
mkdir -p "$out" && out=$(cd "$out" && pwd)
root=$PWD
# ccache (apt install ccache), when there: the trees differ in a few files, so with paths taken
# relative to /tmp every other object of a tree comes from the cache (-j2 builds a tree in ~15 min).
launch=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=/tmp
  launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
targets=${RUN_ALL_TARGETS:-deepinfer_bench_model deepinfer_cuda_attention_tests deepinfer_cuda_ops_tests deepinfer_cuda_gemm_tests}
# shellcheck source=tools/gpu/trees.sh
. tools/gpu/trees.sh

for spec in "$@"; do
  name=${spec%%=*}; patches=; [[ $spec == *=* ]] && patches=${spec#*=}
  [[ $name =~ ^[A-Za-z0-9_-]+$ ]] || { echo "bad tree '$spec' (base or NAME=PATCH[+PATCH...])"; exit 2; }
  dir=/tmp/prebuild-$name
  mkdir -p "$dir"
  # The tree's files afresh, as the device tool sends them (tracked, and untracked but not ignored);
  # the build folder stays, so ninja rebuilds only what changed.
  find "$dir" -mindepth 1 -maxdepth 1 ! -name build-gpu -exec rm -rf {} +
  git ls-files -z -co --exclude-standard | tar c --null -T - | tar x -C "$dir"
  if [ -n "$patches" ]; then apply_patches "$dir" "$root" "$patches" || { echo "tree $name: see above"; exit 1; }; fi
  echo "== $(date +%H:%M:%S) build $name"
  # Not run_all.sh's build stage: that one points the build at the fixtures of this machine, which
  # the GPU machine does not have at the same path (the tests built here need none).
  # shellcheck disable=SC2086  # PREBUILD_CMAKE_ARGS (e.g. -DDEEPINFER_CUDA_LINEINFO=ON) is meant to split
  cmake -S "$dir" -B "$dir/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_TESTS=ON \
    -DDEEPINFER_GPU_ONLY=ON ${PREBUILD_CMAKE_ARGS:-} "${launch[@]}" >"$out/$name.build.log" 2>&1 || { tail -20 "$out/$name.build.log"; exit 1; }
  # shellcheck disable=SC2086  # the target list is meant to split
  cmake --build "$dir/build-gpu" -j"$(nproc)" --target $targets >>"$out/$name.build.log" 2>&1 ||
    { grep -B2 -A12 -m5 error "$out/$name.build.log"; exit 1; }
  tree_stamp "$dir" >"$dir/build-gpu/STAMP"
  bins=(STAMP)
  for t in $targets; do bins+=("$t"); done
  # A 192 MiB xz dictionary: every binary embeds the same kernels' fatbins (~17 MB uncompressed
  # each), and the default 8 MiB window cannot reach the previous binary's copy (a pack of the model
  # bench and two test binaries: 10.1 -> 4.8 MB; the carry is 64 MiB).
  XZ_OPT=${XZ_OPT:---lzma2=preset=6,dict=192MiB} tar cJf "$out/$name.tar.xz" -C "$dir/build-gpu" "${bins[@]}" || exit 1
  echo "$name: $(du -h "$out/$name.tar.xz" | cut -f1) ($(cat "$dir/build-gpu/STAMP"))"
done
