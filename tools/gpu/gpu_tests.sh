# Sourced by tools/gpu/session_check.sh and tools/gpu/ab.sh: one GPU test spec run in a tree.
#
#   gpu_test_run SPEC LOG TIMEOUT   (in a tree's root) -> the test binary's exit status (127: none)
#   gpu_test_summary LOG [LINES]    -> the log's lines that carry measurements or failures
#
# SPEC: NAME[:GTEST_FILTER] for build-gpu/deepinfer_cuda_NAME_tests; "engine" is the engine's tests
# (build-gpu/tests/deepinfer_model_tests, filter Engine* unless one is given).
gpu_test_binary() {  # SPEC -> "BINARY FILTER"
  local t=${1%%:*} filter='*'
  [ "$1" != "$t" ] && filter=${1#*:}
  local bin=build-gpu/deepinfer_cuda_${t}_tests
  if [ "$t" = engine ]; then
    bin=build-gpu/tests/deepinfer_model_tests
    [ "$filter" = '*' ] && filter='Engine*'
  fi
  echo "$bin $filter"
}
gpu_test_run() {
  local bin filter
  read -r bin filter <<<"$(gpu_test_binary "$1")"
  [ -x "$bin" ] || { echo "no $bin" >"$2"; return 127; }
  timeout "$3" stdbuf -oL "$bin" --gtest_brief=1 --gtest_filter="$filter" >"$2" 2>&1
}
gpu_test_summary() {
  grep -E '^\[  (FAILED|PASSED)|rel rms|mean abs|max \||Failure|differs|Expected|Which is|actual|argmax|^no ' "$1" |
    head -"${2:-60}"
}
