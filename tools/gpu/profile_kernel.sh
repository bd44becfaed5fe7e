#!/usr/bin/env bash
# Why one kernel is slow: Nsight Compute's speed-of-light, occupancy, scheduler, warp-state (stall
# reasons) and memory sections for the launches whose name matches a pattern, in one model-bench
# case on v4-mid (the profiled step only: the bench brackets it with cudaProfilerStart/Stop).
#
#   tools/gpu/profile_kernel.sh OUT_DIR BUILD_DIR NAME_REGEX "BENCH_ARGS" [LAUNCHES]
#   e.g. tools/gpu/profile_kernel.sh out/k build-gpu 'wgmma_gemm_kernel' \
#          "--batches '' --contexts '' --prefill 4096" 3          -> OUT_DIR/kernel.txt
# PROFILE_SOURCE=1 adds the source counters (the warp-stall samples by instruction, and by source
# line when the binaries were built with -DDEEPINFER_CUDA_LINEINFO=ON).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=$1; build=$2; pattern=$3; bench_args=$4; launches=${5:-3}
mkdir -p "$out"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "no ncu"; exit 1; }
# shellcheck disable=SC2086  # the bench arguments are meant to split (quoted empties stay empty)
eval "set -- $bench_args"
"$ncu" --profile-from-start off --kernel-name "regex:$pattern" --launch-count "$launches" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  ${PROFILE_SOURCE:+--section SourceCounters --import-source yes} \
  --cache-control none --clock-control none --print-details all \
  "$build/deepinfer_bench_model" --config tools/oracle_configs/v4-mid.json --steps 3 --profile 1 "$@" \
  >"$out/kernel.txt" 2>"$out/kernel.err" || tail -3 "$out/kernel.err"
grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" \
  "$out/kernel.txt" | head -200
