#!/usr/bin/env bash
# A short GPU check for a change in progress, shaped for a device call that brings back few files:
# build (tools/gpu/run_all.sh build), run the chosen GPU test binaries and the model benchmark on
# v4-mid, and leave exactly three files in OUT_DIR: summary.txt (pass/fail lines, the figures),
# logs.tgz (every log), model.jsonl.
#
#   tools/gpu/quick_check.sh [OUT_DIR] [TESTS] [MODEL_BENCH_ARGS]
#     TESTS: space-separated suffixes of build-gpu/deepinfer_cuda_*_tests (default: "gemm ops model")
#     MODEL_BENCH_ARGS: default "--batches 1,64,256 --contexts 1024 --prefill 4096"
# Each test binary runs under a QUICK_TEST_TIMEOUT (default 300) s timeout, the benchmark under 200 s.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${1:-out/quick}
tests=${2:-gemm ops model}
bench_args=${3:---batches 1,64,256 --contexts 1024 --prefill 4096}
mkdir -p "$out"
out=$(cd "$out" && pwd)
logs=$(mktemp -d)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "== $(date +%H:%M:%S) build"
bash tools/gpu/run_all.sh build "$logs" >"$logs/build_stage.txt" 2>&1 || { note "build FAILED"; tail -20 "$logs/build_stage.txt" | tee -a "$summary"; }
for t in $tests; do
  bin=build-gpu/deepinfer_cuda_${t}_tests
  [ -x "$bin" ] || { note "no $bin"; continue; }
  note "== $(date +%H:%M:%S) $t tests"
  timeout "${QUICK_TEST_TIMEOUT:-300}" stdbuf -oL "$bin" --gtest_brief=1 >"$logs/${t}_tests.log" 2>&1
  note "exit $?"
  grep -E '^\[  (FAILED|PASSED)|rel rms|max \||Failure|differs|Expected|Which is|actual' "$logs/${t}_tests.log" | head -40 >>"$summary"
done
if [ -x build-gpu/deepinfer_bench_model ]; then
  note "== $(date +%H:%M:%S) model bench: $bench_args"
  # shellcheck disable=SC2086  # the arguments are meant to split
  timeout 200 build-gpu/deepinfer_bench_model --config tools/oracle_configs/v4-mid.json $bench_args \
    >"$out/model.jsonl" 2>"$logs/model_bench.err"
  note "exit $?"
  cat "$out/model.jsonl" >>"$summary"
fi
note "== $(date +%H:%M:%S) done"
tar czf "$out/logs.tgz" -C "$logs" . && rm -rf "$logs"
