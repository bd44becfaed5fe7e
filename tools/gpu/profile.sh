#!/usr/bin/env bash
# Per-kernel GPU time of one decode step (batch 1, 64, 256 at context 1k) and one 4k prefill on
# v4-mid, with Nsight Compute (ncu; no replay of caches or clocks: --cache-control none,
# --clock-control none). Needs a built tree (tools/gpu/run_all.sh build).
#
#   [PROFILE_SOL=1] [PROFILE_CASES="decode_b1 prefill_4k"] tools/gpu/profile.sh [OUT_DIR] [BUILD_DIR]
#     -> OUT_DIR/profile.md (PROFILE_CASES: a subset of the four cases below; default all)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/gpu}
build=${2:-build-gpu}
mkdir -p "$out"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "no ncu"; exit 1; }
# PROFILE_SOL=1: also DRAM / L2 / SM throughput and achieved occupancy per kernel (more replays).
metrics=gpu__time_duration.sum
[ -n "${PROFILE_SOL:-}" ] && metrics=$metrics,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
run() {  # name, model bench args
  local name=$1; shift
  "$ncu" --profile-from-start off --metrics "$metrics" --csv --print-units base \
    --cache-control none --clock-control none \
    $build/deepinfer_bench_model --config tools/oracle_configs/v4-mid.json --steps 3 --profile 1 "$@" \
    >"$out/prof_$name.csv" 2>"$out/prof_$name.err" || tail -3 "$out/prof_$name.err"
}
cases=${PROFILE_CASES:-decode_b1 decode_b64 decode_b256 prefill_4k}
for c in $cases; do
  case $c in
    decode_b*) run "$c" --batches "${c#decode_b}" --contexts 1024 --prefill "" ;;
    prefill_4k) run prefill_4k --batches "" --contexts "" --prefill 4096 ;;
    *) echo "unknown case $c (decode_bN or prefill_4k)" ;;
  esac
done
python3 tools/gpu/profile_table.py "$out"/prof_*.csv >"$out/profile.md"
cat "$out/profile.md"
