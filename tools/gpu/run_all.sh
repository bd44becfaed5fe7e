#!/usr/bin/env bash
# The GPU machine's whole job in one script: build the GPU-only tree (model + CUDA backend), run the
# GPU tests, the kernel and model benchmarks and the transformers peer, and write a report.
#
#   tools/gpu/run_all.sh [all|build|test|bench] [OUT_DIR]      (default: all, out/gpu)
#
# Needs: nvcc (sm_90), cmake, ninja, g++, python3 with torch + transformers (the peer), and
# nlohmann-json + GoogleTest — system-wide, or as .deb files in .gpu-deps/ (tools/gpu/fetch_deps.sh
# downloads them where apt works), unpacked here into a private prefix. The transformers peer
# script comes from ../shared/oracle (DEEPINFER_SHARED overrides); without it the report says so.
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
out=${2:-out/gpu}
mkdir -p "$out"
shared=${DEEPINFER_SHARED:-../shared}
status=0
stamp() { echo "== [$(date +%H:%M:%S)] $*"; }

prefix_args=()
if ! ls /usr/include/gtest/gtest.h >/dev/null 2>&1 && [ -d .gpu-deps ]; then
  mkdir -p /tmp/deepinfer-deps
  for f in .gpu-deps/*.deb; do dpkg -x "$f" /tmp/deepinfer-deps; done
  prefix_args=(-DCMAKE_PREFIX_PATH=/tmp/deepinfer-deps/usr)
fi

if [[ $what == all || $what == build ]]; then
  stamp "build (GPU-only tree, sm_90)"
  cmake -S . -B build-gpu -G Ninja -DDEEPINFER_GPU_ONLY=ON -DDEEPINFER_TESTS=ON "${prefix_args[@]}" >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
  cmake --build build-gpu -j"$(nproc)" >>"$out/build.log" 2>&1 || { grep -B2 -A12 -m5 'error' "$out/build.log"; exit 1; }
fi

if [[ $what == all || $what == test ]]; then
  stamp "GPU tests"
  for t in build-gpu/deepinfer_cuda_*_tests; do
    "$t" --gtest_brief=1 >>"$out/tests.log" 2>&1 || status=1
  done
  grep -E '^\[  (FAILED|PASSED)|rel rms|Failure|Expected|Which is|actual' "$out/tests.log"
fi

if [[ $what == all || $what == bench ]]; then
  stamp "GEMM benchmark (ours vs cuBLAS)"
  build-gpu/deepinfer_bench_gemm ${GEMM_BENCH_ARGS:-} >"$out/gemm.jsonl" 2>>"$out/bench.err" || status=1
  if [ -x build-gpu/deepinfer_bench_attention ]; then
    stamp "attention benchmark"
    build-gpu/deepinfer_bench_attention >"$out/attention.jsonl" 2>>"$out/bench.err" || status=1
  fi
  stamp "model benchmark (v4-mid, random bf16 weights)"
  build-gpu/deepinfer_bench_model --config tools/oracle_configs/v4-mid.json ${MODEL_BENCH_ARGS:-} \
    >"$out/model.jsonl" 2>>"$out/bench.err" || { status=1; tail -5 "$out/bench.err"; }
  if [ -f "$shared/oracle/hf_baseline.py" ]; then
    stamp "peer: transformers (hf_baseline.py)"
    python3 "$shared/oracle/hf_baseline.py" tools/oracle_configs/v4-mid.json --batches 1,8 --prompt 512 --new 16 \
      >"$out/hf.jsonl" 2>>"$out/bench.err" || { status=1; tail -5 "$out/bench.err"; }
  fi
  stamp "report"
  python3 tools/gpu/report.py "$out" >"$out/report.md" || status=1
  cat "$out/report.md"
fi
stamp "done (status $status)"
exit $status
