#!/usr/bin/env bash
# A short GPU check for a change in progress: build, the chosen GPU test binaries, the model
# benchmark on v4-mid; OUT_DIR gets summary.txt, logs.tgz and model.jsonl (tools/gpu/session_check.sh,
# with this script's defaults and no carried fixtures).
#
#   tools/gpu/quick_check.sh [OUT_DIR] [TESTS] [MODEL_BENCH_ARGS]
#     TESTS: space-separated suffixes of build-gpu/deepinfer_cuda_*_tests (default: "gemm ops model")
#     MODEL_BENCH_ARGS: default "--batches 1,64,256 --contexts 1024 --prefill 4096"
# Each test binary runs under a QUICK_TEST_TIMEOUT (default 300) s timeout, the benchmark under 200 s.
exec bash "$(dirname "$0")/session_check.sh" "${1:-out/quick}" "${2:-gemm ops model}" "" \
  "${3:---batches 1,64,256 --contexts 1024 --prefill 4096}"
