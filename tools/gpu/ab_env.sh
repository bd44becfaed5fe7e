#!/usr/bin/env bash
# A/B of variants that one build can run: the model benchmark alternated over named environment
# settings, AB_ROUNDS times, in the tree as it is (built once). Cheaper than tools/gpu/ab.sh, which
# builds a tree per variant (minutes of device time each): put the variants behind environment
# switches in a patch applied on the device only (never committed: library code reads no
# environment), e.g. `static const int v = std::getenv("DI_EXP_X") ? std::atoi(...) : 0;` at the
# choice being measured, apply it, build, then
#
#   tools/gpu/ab_env.sh OUT_DIR "MODEL_BENCH_ARGS" NAME="VAR=VALUE [VAR=VALUE...]" [NAME=...]
#
# The first variant is always "base" (no setting). Writes OUT_DIR/ab.md after every round (medians
# and changes against base, tools/gpu/ab_table.py) and OUT_DIR/ab.tgz (raw JSON and stderr).
# Example (2026-12-06: the 128 x 192 tile rule and the old wo_a path against the tree):
#   patch -p1 < gpusession/knobs.patch && RUN_ALL_TARGETS=deepinfer_bench_model tools/gpu/run_all.sh build out/b
#   tools/gpu/ab_env.sh out/ab "--batches 1,64,256 --contexts 1024 --prefill 4096" n192="DI_EXP_N192=2" merge="DI_EXP_MERGE=1"
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 2; }
out=$1; bench_args=$2; shift 2
mkdir -p "$out" && out=$(cd "$out" && pwd)
rounds=${AB_ROUNDS:-2}
bench=build-gpu/deepinfer_bench_model
[ -x $bench ] || { echo "no $bench: build first (RUN_ALL_TARGETS=deepinfer_bench_model tools/gpu/run_all.sh build)"; exit 1; }
names=(base); settings=("")
for spec in "$@"; do
  name=${spec%%=*}
  [[ $name =~ ^[A-Za-z0-9_-]+$ && $spec == *=* && $name != base ]] || { echo "bad variant '$spec' (NAME=\"VAR=VALUE ...\")"; exit 2; }
  names+=("$name"); settings+=("${spec#*=}")
done
raw=$(mktemp -d)
for r in $(seq "$rounds"); do
  for i in "${!names[@]}"; do
    echo "== $(date +%H:%M:%S) model bench ${names[$i]}, round $r"
    # shellcheck disable=SC2086  # the settings and the bench arguments are meant to split
    env ${settings[$i]} timeout 300 $bench --config tools/oracle_configs/v4-mid.json $bench_args \
      >"$raw/model_${names[$i]}_$r.jsonl" 2>"$raw/model_${names[$i]}_$r.err" ||
      echo "model bench ${names[$i]} round $r failed: $(tail -1 "$raw/model_${names[$i]}_$r.err")"
  done
  python3 tools/gpu/ab_table.py "$raw" "${names[@]}" >"$out/ab.md"
done
cat "$out/ab.md"
tar czf "$out/ab.tgz" -C "$raw" . && rm -rf "$raw"
