#!/usr/bin/env bash
# One device call: unpack carried fixtures (when a folder of them is named), build, run the named GPU
# test binaries (each may carry a gtest filter as NAME:FILTER; "engine" is the engine's tests on the
# CPU and GPU devices), optionally the model bench; leaves
# summary.txt and logs.tgz in OUT_DIR.
#   tools/gpu/session_check.sh OUT_DIR "TESTS" [FIXTURE_PACK_DIR] [MODEL_BENCH_ARGS]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=$1; tests=$2; pack=${3:-}; bench_args=${4:-}
mkdir -p "$out"; out=$(cd "$out" && pwd)
logs=$(mktemp -d); summary=$out/summary.txt; : >"$summary"
note() { echo "$*" | tee -a "$summary"; }
if [ -n "$pack" ] && [ -d "$pack" ]; then
  mkdir -p .gpux/shared/fixtures
  cp -r "$pack/oracle" .gpux/shared/ 2>/dev/null
  for t in "$pack"/*.tar.xz; do xz -dc "$t" | tar x -C .gpux/shared/fixtures; done
  export DEEPINFER_SHARED=.gpux/shared
  note "fixtures: $(ls .gpux/shared/fixtures | tr '\n' ' ')"
fi
note "== $(date +%H:%M:%S) build"
bash tools/gpu/run_all.sh build "$logs" >"$logs/build_stage.txt" 2>&1 || { note "build FAILED"; tail -30 "$logs/build_stage.txt" | tee -a "$summary"; }
# shellcheck source=tools/gpu/gpu_tests.sh
. tools/gpu/gpu_tests.sh
for spec in $tests; do
  t=${spec%%:*}
  note "== $(date +%H:%M:%S) $spec tests"
  gpu_test_run "$spec" "$logs/${t}_tests.log" "${QUICK_TEST_TIMEOUT:-300}"
  note "exit $?"
  gpu_test_summary "$logs/${t}_tests.log" "${QUICK_GREP_LINES:-60}" >>"$summary"
done
if [ -n "$bench_args" ] && [ -x build-gpu/deepinfer_bench_model ]; then
  note "== $(date +%H:%M:%S) model bench: $bench_args"
  # shellcheck disable=SC2086  # the arguments are meant to split
  timeout 200 build-gpu/deepinfer_bench_model --config tools/oracle_configs/v4-mid.json $bench_args \
    >"$out/model.jsonl" 2>"$logs/model_bench.err"
  note "exit $?"; cat "$out/model.jsonl" >>"$summary"
fi
note "== $(date +%H:%M:%S) done"
tar czf "$out/logs.tgz" -C "$logs" . && rm -rf "$logs"
