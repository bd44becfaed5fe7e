#!/usr/bin/env bash
# Timeline of one decode step as the GPU runs it (a replayed CUDA graph, kernels overlapped by
# programmatic dependent launch), with Nsight Systems: every graph node's start and end, then
# tools/gpu/timeline.py -> OUT_DIR/timeline.md (span, busy and idle time, idle time by the kernel
# that waited, kernel time by kind). Unlike profile.sh (ncu: kernels serialized one by one), this
# shows the gaps between kernels. Needs a built tree (tools/gpu/run_all.sh build) and a whole
# Nsight Systems install: the device tool's H100 image (2026-12-06) has none, and the nsys inside
# Nsight Compute's folder records a .qdstrm it cannot import.
#
#   tools/gpu/timeline.sh [OUT_DIR] [BUILD_DIR] [BATCHES]      (BATCHES default "1 64")
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/gpu}
build=${2:-build-gpu}
batches=${3:-1 64}
mkdir -p "$out"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
[ -n "$nsys" ] || { echo "no nsys"; exit 1; }
: >"$out/timeline.md"
for b in $batches; do
  rep=/tmp/timeline_b$b
  # --profile 1: the bench brackets its last decode step with cudaProfilerStart/Stop.
  "$nsys" profile -f true -o "$rep" --trace=cuda --cuda-graph-trace=node --capture-range=cudaProfilerApi \
    --capture-range-end=stop "$build/deepinfer_bench_model" --config tools/oracle_configs/v4-mid.json \
    --batches "$b" --contexts 1024 --prefill "" --steps 5 --profile 1 >"$out/timeline_b$b.log" 2>&1 ||
    { tail -5 "$out/timeline_b$b.log"; continue; }
  "$nsys" stats -f csv -r cuda_gpu_trace -o "$rep" --force-overwrite true "$rep.nsys-rep" >>"$out/timeline_b$b.log" 2>&1
  csv=$(ls "${rep}"*cuda_gpu_trace*.csv 2>/dev/null | head -1)
  [ -n "$csv" ] || { echo "no trace csv for batch $b"; tail -5 "$out/timeline_b$b.log"; continue; }
  cp "$csv" "$out/timeline_b$b.csv"
  python3 tools/gpu/timeline.py "$csv" "decode batch $b, context 1024 (one replayed step)" >>"$out/timeline.md"
done
cat "$out/timeline.md"
