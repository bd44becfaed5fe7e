#!/usr/bin/env bash
# The GPU machine's whole job in one script: build (the whole engine with the CUDA backend when its
# dependencies are there, else the GPU-only tree), make the bf16 oracle case at V4-Flash dimensions,
# run the GPU tests (and the engine's tests on the GPU), the kernel, model and engine benchmarks and
# the transformers peer, and write a report.
#
#   tools/gpu/run_all.sh [all|build|oracle|test|bench] [OUT_DIR]      (default: all, out/gpu)
#   RUN_ALL_PACK=1 packs the logs and raw JSON of OUT_DIR into OUT_DIR/logs.tgz at the end.
#   RUN_ALL_TARGETS="T1 T2": the build stage builds only these targets.
#
# Needs: nvcc (sm_90), cmake, ninja, g++, python3 with torch + transformers (oracle and peer), and
# nlohmann-json + GoogleTest (+ PCRE2, utf8proc, pkgconf for the engine) — system-wide, or as .deb
# files in .gpu-deps/ (tools/gpu/fetch_deps.sh downloads them where apt works), unpacked here into a
# private prefix. The oracle and peer scripts and the fixtures come from ../shared
# (DEEPINFER_SHARED overrides); without them the report says so.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
what=${1:-all}
out=${2:-out/gpu}
mkdir -p "$out"
out=$(cd "$out" && pwd)
shared=$(cd "${DEEPINFER_SHARED:-../shared}" 2>/dev/null && pwd || echo /nonexistent)
build=build-gpu
oracle_dir=$PWD/$build/oracle-v4flash
status=0
stamp() { echo "== [$(date +%H:%M:%S)] $*"; }
has() { [[ $what == all || " ${what//,/ } " == *" $1 "* ]]; }

# Dependencies from .gpu-deps: unpack into a private prefix, point the .pc files at it.
cmake_args=()
deps=/tmp/deepinfer-deps
if [ -d .gpu-deps ] && ls .gpu-deps/*.deb >/dev/null 2>&1; then
  mkdir -p $deps
  for f in .gpu-deps/*.deb; do dpkg -x "$f" $deps; done
  for pc in $deps/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc $deps/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i "s|^prefix=/usr\$|prefix=$deps/usr|" "$pc"
  done
  export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  cmake_args+=(-DCMAKE_PREFIX_PATH=$deps/usr)
  if ! command -v pkg-config >/dev/null && [ -x $deps/usr/bin/pkgconf ]; then
    cmake_args+=(-DPKG_CONFIG_EXECUTABLE=$deps/usr/bin/pkgconf)
  fi
fi
# The whole engine when PCRE2 and utf8proc can be found; the GPU-only tree otherwise.
engine=OFF
pc=$(command -v pkg-config || echo $deps/usr/bin/pkgconf)
if [ -x "$pc" ] && "$pc" --exists libpcre2-8 libutf8proc 2>/dev/null; then engine=ON; fi
if [[ $engine == ON ]]; then
  cmake_args+=(-DDEEPINFER_ACCELERATOR=nvidia)
else
  cmake_args+=(-DDEEPINFER_GPU_ONLY=ON)
fi
[ -d "$shared/fixtures" ] && cmake_args+=(-DDEEPINFER_FIXTURES_DIR="$shared/fixtures")

if has build; then
  stamp "build ($([[ $engine == ON ]] && echo 'engine + CUDA backend' || echo 'GPU-only tree'), sm_90)"
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_TESTS=ON "${cmake_args[@]}" >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
  # RUN_ALL_TARGETS="deepinfer_cuda_gemm_tests deepinfer_bench_gemm": only these (a quick kernel check).
  # shellcheck disable=SC2086  # the target list is meant to split
  cmake --build $build -j"$(nproc)" ${RUN_ALL_TARGETS:+--target $RUN_ALL_TARGETS} >>"$out/build.log" 2>&1 ||
    { grep -B2 -A12 -m5 'error' "$out/build.log"; exit 1; }
fi

if has oracle && [ ! -f "$oracle_dir/reference.safetensors" ]; then
  if [ -f "$shared/oracle/v4_oracle.py" ]; then
    stamp "oracle: v4_oracle.py, V4-Flash dimensions, bf16 (tools/oracle_configs/v4-flash-oracle.json)"
    python3 "$shared/oracle/v4_oracle.py" tools/oracle_configs/v4-flash-oracle.json "$oracle_dir" --dtype bfloat16 \
      --prompt-lens 5,40,300 --seed 3 >"$out/oracle.log" 2>&1 || { status=1; tail -5 "$out/oracle.log"; }
  else
    echo "no $shared/oracle/v4_oracle.py: the bf16 oracle case is not made"
  fi
fi
export DEEPINFER_GPU_ORACLE_DIR=$oracle_dir

if has test; then
  stamp "GPU tests"
  : >"$out/tests.log"
  for t in $build/deepinfer_cuda_*_tests; do
    # line-buffered: a test binary that aborts keeps the lines it printed before
    stdbuf -oL "$t" --gtest_brief=1 >>"$out/tests.log" 2>&1 || status=1
  done
  if [ -x $build/tests/deepinfer_model_tests ]; then
    stamp "engine tests (CPU and GPU devices)"
    filter='Engine*'  # the engine on both devices (tests that need the tokenizer fixture only where it is)
    [ -f "$shared/fixtures/tokenizer/deepseek-v3/tokenizer.json" ] || filter="$filter:-Engine.StopStringsWithATokenizer"
    stdbuf -oL $build/tests/deepinfer_model_tests --gtest_brief=1 --gtest_filter="$filter" >>"$out/tests.log" 2>&1 || status=1
  fi
  grep -E '^\[  (FAILED|PASSED)|rel rms|mean abs|Failure|Expected|Which is|actual' "$out/tests.log"
fi

if has bench; then
  stamp "GEMM benchmark (ours vs cuBLAS)"
  $build/deepinfer_bench_gemm ${GEMM_BENCH_ARGS:-} >"$out/gemm.jsonl" 2>>"$out/bench.err" || status=1
  if [ -x $build/deepinfer_bench_attention ]; then
    stamp "attention benchmark"
    $build/deepinfer_bench_attention >"$out/attention.jsonl" 2>>"$out/bench.err" || status=1
  fi
  stamp "model benchmark (v4-mid, random bf16 weights)"
  $build/deepinfer_bench_model --config tools/oracle_configs/v4-mid.json ${MODEL_BENCH_ARGS:-} \
    >"$out/model.jsonl" 2>>"$out/bench.err" || { status=1; tail -5 "$out/bench.err"; }
  if [ -x $build/deepinfer_bench_engine ]; then
    # The oracle checkpoint (V4-Flash dimensions) when the oracle stage made one, else the repo's
    # default model; steps chained on the device (async 1) and one at a time (async 0).
    engine_model=$oracle_dir
    [ -f "$oracle_dir/config.json" ] || engine_model=models/v4-code-19m
    stamp "engine benchmark (whole engine on the GPU, $engine_model, concurrency sweep)"
    : >"$out/engine.jsonl"
    for async in 1 0; do
      $build/deepinfer_bench_engine --model "$engine_model" --device cuda --json --prompt-len 512 --output-len 64 \
        --max-concurrency 64 --cache-mib 16384 --async-scheduling $async >>"$out/engine.jsonl" 2>>"$out/bench.err" ||
        { status=1; tail -5 "$out/bench.err"; }
    done
  fi
  if [ -f "$shared/oracle/hf_baseline.py" ]; then
    stamp "peer: transformers (hf_baseline.py)"
    python3 "$shared/oracle/hf_baseline.py" tools/oracle_configs/v4-mid.json --batches 1,8 --prompt 512 --new 16 \
      >"$out/hf.jsonl" 2>>"$out/bench.err" || { status=1; tail -5 "$out/bench.err"; }
  fi
  stamp "report"
  python3 tools/gpu/report.py "$out" >"$out/report.md" || status=1
  cat "$out/report.md"
fi
# RUN_ALL_PACK=1: the logs and raw JSON go into one logs.tgz, leaving report.md, the plots and the
# tarball (for callers that bring back only a few files).
if [ -n "${RUN_ALL_PACK:-}" ]; then
  shopt -s nullglob
  packed=("$out"/*.log "$out"/*.jsonl "$out"/*.err)
  if [ ${#packed[@]} -gt 0 ]; then
    tar czf "$out/logs.tgz" -C "$out" "${packed[@]##*/}" && rm -f "${packed[@]}"
  fi
fi
stamp "done (status $status)"
exit $status
