#!/usr/bin/env bash
# One device call in stages, most important first, each skipped once the call's deadline is near,
# so a call cut short by the device's time limit still returns what it finished. Built on ab.sh
# with prebuilt packs (tools/gpu/prebuild.sh): the call compiles nothing.
#
#   STAGES="setup tests attn ab trace" TREES="NAME=PATCH[+PATCH...] ..." \
#     TESTS="TREE=SPEC ..." [ATTN_TREES="base NAME ..."] [BENCH="MODEL_BENCH_ARGS"] [ROUNDS=5] \
#     [DEADLINE=560] [AB_PREBUILT=.gpuxpre] bash tools/gpu/staged_call.sh OUT_DIR
#
# Stages:
#   setup  unpack the packs into the trees (ab.sh with no rounds; base = the working tree)
#   tests  TESTS in order, each TREE=SPEC (SPEC as in gpu_tests.sh, e.g. "mc=attention"
#          "base=model:CudaModel.Concurrent*"); a tree whose tests fail leaves the A/B, and so
#          does every tree that applies one of its patches
#   attn   deepinfer_bench_attention in each of ATTN_TREES that has it
#   ab     ab.sh's alternating rounds over base and the remaining TREES (BENCH, ROUNDS)
#   trace  one traced step per tree side by side (batch 1 at 1k and a 4k prefill)
# Writes OUT_DIR/summary.md (every stage's result) and OUT_DIR/all.tgz (logs, raw JSON).
# Measured on an H100 (2026-12-07): a model-bench run with 4 decode batches and a 4k prefill takes
# ~1 s, so 8 rounds of 2 trees take ~20 s; the attention tests 4 s; CudaModel.ConcurrentBranches*
# 34 s; all 18 other CudaModel tests 340 s (run them in one tree only).
set -u
cd "$(dirname "$0")/../.." || exit 1
[ $# -ge 1 ] || { sed -n '2,19p' "$0"; exit 2; }
out=$1; mkdir -p "$out" && out=$(cd "$out" && pwd)
start=$(date +%s); deadline=${DEADLINE:-560}
left() { echo $((deadline - ($(date +%s) - start))); }
work=$(mktemp -d)
export AB_PREBUILT=${AB_PREBUILT:-.gpuxpre}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
trees=${TREES:-}
bench=${BENCH:-"--batches 1,8,64,256 --contexts 1024 --prefill 4096"}
summary=$out/summary.md
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version,memory.total --format=csv >>"$summary"
# shellcheck source=tools/gpu/gpu_tests.sh
. tools/gpu/gpu_tests.sh

# Runs a command in its own process group and kills the group after N seconds.
run_for() {
  local n=$1; shift
  setsid "$@" &
  local pid=$!
  (sleep "$n"; kill -TERM -- -"$pid" 2>/dev/null) &
  local watcher=$!
  wait "$pid"; local rc=$?
  kill "$watcher" 2>/dev/null
  return $rc
}
tree_dir() { if [ "$1" = base ]; then echo "$PWD"; else echo "/tmp/ab-$1"; fi; }
# Drops tree $1 from the A/B, and every tree that applies one of its patches (a stack built on it).
drop_tree() {
  local spec t p hit keep=""
  spec=$(echo " $trees " | grep -o " $1=[^ ]*" | sed "s# $1=##")
  for t in $trees; do
    [ "${t%%=*}" = "$1" ] && continue
    hit=0
    for p in ${spec//+/ }; do case "+${t#*=}+" in *"+$p+"*) hit=1 ;; esac; done
    if [ $hit = 1 ]; then echo "dropped ${t%%=*} too (it applies a patch of $1)" >>"$summary"; else keep="$keep $t"; fi
  done
  trees=$keep
}

for stage in ${STAGES:-setup tests ab}; do
  [ "$(left)" -gt 30 ] || { echo "skipped $stage: deadline" >>"$summary"; continue; }
  echo "== $(date +%T) $stage ($(left) s left)" >>"$summary"
  case $stage in
    setup)
      # shellcheck disable=SC2086  # the tree specs are meant to split
      AB_ROUNDS=0 bash tools/gpu/ab.sh "$work/setup" "--batches 1" $trees >"$work/setup.log" 2>&1
      grep -i "prebuilt\|fail\|bad" "$work/setup.log" >>"$summary" ;;
    tests)
      for t in ${TESTS:-}; do
        name=${t%%=*}; spec=${t#*=}; log=$work/test_${name}_${spec%%:*}.log
        (cd "$(tree_dir "$name")" && gpu_test_run "$spec" "$log" "$(( $(left) > 20 ? $(left) - 10 : 10 ))")
        rc=$?
        { echo "### $name: $spec: exit $rc"; gpu_test_summary "$log" 40; echo; } >>"$summary"
        [ $rc = 0 ] || [ "$name" = base ] || drop_tree "$name"
      done
      echo "trees for the A/B: $trees" >>"$summary" ;;
    attn)
      for name in ${ATTN_TREES:-base}; do
        bin=$(tree_dir "$name")/build-gpu/deepinfer_bench_attention
        [ -x "$bin" ] || continue
        run_for 90 "$bin" >"$work/attn_$name.jsonl" 2>&1
        echo "attention bench, $name:" >>"$summary"
        grep sink_attention "$work/attn_$name.jsonl" >>"$summary"
      done ;;
    ab)
      # shellcheck disable=SC2086
      AB_ROUNDS=${ROUNDS:-5} run_for $(( $(left) - 20 )) bash tools/gpu/ab.sh "$work/ab" "$bench" $trees >"$work/ab.log" 2>&1
      cat "$work/ab/ab.md" >>"$summary" ;;
    trace)
      # shellcheck disable=SC2086
      AB_ROUNDS=0 AB_TRACE_ARGS="--batches 1 --contexts 1024 --prefill 4096 --steps 3" \
        run_for $(( $(left) - 20 )) bash tools/gpu/ab.sh "$work/trace" "--batches 1" $trees >"$work/trace.log" 2>&1
      cat "$work/trace/trace.md" >>"$summary" ;;
    *) echo "unknown stage $stage" >>"$summary" ;;
  esac
done
tar czf "$out/all.tgz" -C "$work" . 2>/dev/null
echo "== done $(date +%T), $(( $(date +%s) - start )) s" >>"$summary"
