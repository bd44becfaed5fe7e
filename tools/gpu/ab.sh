#!/usr/bin/env bash
# A/B of source variants in one device call: the working tree ("base") and one copy per variant
# with patches applied, all built at once, then the model benchmark run on every tree in turn,
# AB_ROUNDS times, so clock and thermal drift spread evenly over the variants (decode moves by
# 1-2% between calls, more than most single changes gain). Writes OUT_DIR/ab.md (the median of
# each case per variant and its change against base) and OUT_DIR/ab.tgz (raw JSON and logs; the
# device tool returns at most 8 files).
#
#   tools/gpu/ab.sh OUT_DIR "MODEL_BENCH_ARGS" NAME=PATCH[+PATCH...] | NAME=env:VAR=VALUE[+VAR=VALUE...]
#                   | NAME=args:ARG[+ARG...] ...
#
# PATCH: a file applied with `patch -p1` in the variant's copy; "-FILE" applies it in reverse (the
# variant without a change the working tree already has). env:...: no copy and no build — the
# working tree's binaries run with those environment settings (variants put behind environment
# switches by a patch applied on the device only, never committed: one build instead of one per
# variant, e.g. `static const int v = std::getenv("DI_EXP_X") ? ...` at the choice measured).
# args:...: no copy and no build either — the working tree's model bench with these arguments added
# ("+" for spaces; e.g. one_pass=args:--mhc-one-pass+1 for a CudaModelOptions switch the bench
# exposes). AB_ROUNDS (default 2). AB_GEMM_ARGS:
# also run `deepinfer_bench_gemm $AB_GEMM_ARGS` once in every tree (e.g. "--configs --ms 256").
# AB_TESTS: GPU test binaries to run in every tree after the builds, each NAME[:GTEST_FILTER] for
# build-gpu/deepinfer_cuda_NAME_tests (e.g. "gemm model:CudaModel.* fixture:*Tiny*"; list them in
# RUN_ALL_TARGETS too when that limits the build) -> OUT_DIR/tests.md (exit code and the lines
# that carry measurements or failures, per tree); AB_TEST_TIMEOUT seconds each (default 300);
# AB_TEST_TREES: only in these trees (names, e.g. "all"; default every tree).
# AB_TRACE_ARGS: after the rounds, one `deepinfer_bench_model $AB_TRACE_ARGS --trace` in every tree
# (e.g. "--batches 1 --contexts 1024 --prefill 4096") -> OUT_DIR/trace.md: each kernel kind's time
# in every tree side by side (tools/gpu/trace_table.py), so a change shows in the kernels it touched.
# AB_PREBUILT=DIR: use DIR/NAME.tar.xz from tools/gpu/prebuild.sh (built without a GPU, carried) for
# tree NAME ("base": the working tree) when it matches the tree's sources and loads here.
# Example (the working tree has a change, the variant leaves it out):
#   git diff > .gpuxab/change.patch
#   tools/gpu/ab.sh out/ab "--batches 1,256 --contexts 1024 --prefill 4096" without=-.gpuxab/change.patch
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[ $# -ge 3 ] || { sed -n '2,26p' "$0"; exit 2; }
out=$1; bench_args=$2; shift 2
mkdir -p "$out" && out=$(cd "$out" && pwd)
root=$PWD; rounds=${AB_ROUNDS:-2}
# The variant trees live under /tmp, where run_all.sh's default ../shared is not: every tree takes
# the fixtures and oracle scripts this tree sees (DEEPINFER_SHARED, else ../shared), as an absolute path.
shared=$(cd "${DEEPINFER_SHARED:-../shared}" 2>/dev/null && pwd) && export DEEPINFER_SHARED=$shared
raw=$(mktemp -d); names=(base); dirs=("$root"); envs=(""); extra=("")
# shellcheck source=tools/gpu/trees.sh
. tools/gpu/trees.sh

for spec in "$@"; do
  name=${spec%%=*}; patches=${spec#*=}
  [[ $name =~ ^[A-Za-z0-9_-]+$ && $spec == *=* ]] || { echo "bad variant '$spec' (NAME=PATCH[+PATCH...])"; exit 2; }
  if [[ $patches == env:* ]]; then  # the working tree's build, run with these settings
    names+=("$name"); dirs+=("$root"); envs+=("${patches#env:}"); extra+=("")
    continue
  fi
  if [[ $patches == args:* ]]; then  # the working tree's build, its model bench given these arguments
    a=${patches#args:}
    names+=("$name"); dirs+=("$root"); envs+=(""); extra+=("${a//+/ }")
    continue
  fi
  dir=/tmp/ab-$name
  rm -rf "$dir" && mkdir -p "$dir"
  tar c --exclude=./build-gpu --exclude='./.gpux*' . | tar x -C "$dir"  # not the carried packs and scratch
  apply_patches "$dir" "$root" "$patches" >"$raw/${name}_patch.log" 2>&1 ||
    { echo "variant $name:"; cat "$raw/${name}_patch.log"; exit 1; }
  names+=("$name"); dirs+=("$dir"); envs+=(""); extra+=("")
done
# Trees that are the working tree's build (env and args variants): not built or unpacked again.
shares_base() { [[ -n ${envs[$1]} || -n ${extra[$1]} ]]; }
# `env ${run_env[i]} CMD`: variant i's settings ("+"-separated in the spec) as env arguments.
run_env=()
for e in "${envs[@]}"; do run_env+=("${e//+/ }"); done

# AB_PREBUILT=DIR: binaries built elsewhere (tools/gpu/prebuild.sh) for trees whose sources they
# match (STAMP) and which load here; the other trees are built as usual.
prebuilt=()
if [ -n "${AB_PREBUILT:-}" ]; then
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for i in "${!names[@]}"; do
    prebuilt[i]=0
    pack=$AB_PREBUILT/${names[$i]}.tar.xz
    ! shares_base "$i" && [[ -f $pack ]] || continue
    tmp=$(mktemp -d)
    if ! tar xJf "$pack" -C "$tmp"; then
      echo "prebuilt ${names[$i]}: $pack does not unpack; building here"
      rm -rf "$tmp"
      continue
    fi
    missing=$(ldd "$tmp"/deepinfer_* | grep -m1 'not found')
    if [ "$(cat "$tmp/STAMP")" != "$(tree_stamp "${dirs[$i]}")" ]; then
      echo "prebuilt ${names[$i]}: built from other sources; building here"
    elif [ -n "$missing" ]; then
      echo "prebuilt ${names[$i]}: libraries missing here ($missing); building here"
    else
      mkdir -p "${dirs[$i]}/build-gpu" && cp "$tmp"/* "${dirs[$i]}/build-gpu/" && prebuilt[i]=1
      # The test binaries name their data by the source folder they were built in (prebuild.sh's
      # /tmp/prebuild-NAME): point that path at this tree.
      [ -e "/tmp/prebuild-${names[$i]}" ] || ln -s "${dirs[$i]}" "/tmp/prebuild-${names[$i]}"
      echo "prebuilt ${names[$i]}: $(for b in "$tmp"/deepinfer_*; do printf '%s ' "${b##*/}"; done)"
    fi
    rm -rf "$tmp"
  done
  # All or none: every tree's timings from one compiler's code.
  for i in "${!names[@]}"; do
    if ! shares_base "$i" && [[ ${prebuilt[$i]} == 0 ]]; then
      [[ " ${prebuilt[*]} " == *" 1 "* ]] && echo "not every tree has a usable pack: building every tree here"
      for j in "${!names[@]}"; do prebuilt[j]=0; done
      break
    fi
  done
fi

echo "== $(date +%H:%M:%S) build ${names[*]}"
pids=()
for i in "${!names[@]}"; do
  shares_base "$i" && continue  # env and args variants run the base tree's build
  [[ ${prebuilt[$i]:-0} == 1 ]] && continue
  (cd "${dirs[$i]}" && bash tools/gpu/run_all.sh build "$raw/build_${names[$i]}" >"$raw/build_${names[$i]}.txt" 2>&1) &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || { echo "a build FAILED"; tail -20 "$raw"/build_*.txt; exit 1; }
done

if [ -n "${AB_TESTS:-}" ]; then
  # shellcheck source=tools/gpu/gpu_tests.sh
  . tools/gpu/gpu_tests.sh
  : >"$out/tests.md"
  for i in "${!names[@]}"; do
    [[ -z ${AB_TEST_TREES:-} || " $AB_TEST_TREES " == *" ${names[$i]} "* ]] || continue
    for spec in $AB_TESTS; do
      echo "== $(date +%H:%M:%S) ${names[$i]}: $spec tests"
      log=$raw/test_${names[$i]}_${spec%%:*}.log
      (cd "${dirs[$i]}" && { [[ -z ${run_env[$i]} ]] || export ${run_env[$i]?}; } &&
        gpu_test_run "$spec" "$log" "${AB_TEST_TIMEOUT:-300}")
      { echo "### ${names[$i]}: $spec: exit $?"; gpu_test_summary "$log" 40; echo; } >>"$out/tests.md"
    done
  done
  cat "$out/tests.md"
fi

if [ -n "${AB_GEMM_ARGS:-}" ]; then
  for i in "${!names[@]}"; do
    echo "== $(date +%H:%M:%S) gemm bench ${names[$i]}"
    # shellcheck disable=SC2086  # the arguments are meant to split
    (cd "${dirs[$i]}" && env ${run_env[$i]} timeout 300 build-gpu/deepinfer_bench_gemm $AB_GEMM_ARGS) >"$raw/gemm_${names[$i]}.jsonl" 2>&1
  done
fi
for r in $(seq "$rounds"); do
  for i in "${!names[@]}"; do
    echo "== $(date +%H:%M:%S) model bench ${names[$i]}, round $r"
    # shellcheck disable=SC2086
    (cd "${dirs[$i]}" && env ${run_env[$i]} timeout 300 build-gpu/deepinfer_bench_model --config tools/oracle_configs/v4-mid.json \
      $bench_args ${extra[$i]}) >"$raw/model_${names[$i]}_$r.jsonl" 2>"$raw/model_${names[$i]}_$r.err" ||
      echo "model bench ${names[$i]} round $r failed: $(tail -1 "$raw/model_${names[$i]}_$r.err")"
  done
  # The table of the rounds so far, so a call cut off by its time limit still returns the finished ones.
  python3 tools/gpu/ab_table.py "$raw" "${names[@]}" >"$out/ab.md"
done
if [ -n "${AB_TRACE_ARGS:-}" ]; then
  traces=()
  for i in "${!names[@]}"; do
    echo "== $(date +%H:%M:%S) trace ${names[$i]}"
    # shellcheck disable=SC2086
    (cd "${dirs[$i]}" && env ${run_env[$i]} timeout 120 build-gpu/deepinfer_bench_model --config tools/oracle_configs/v4-mid.json \
      $AB_TRACE_ARGS ${extra[$i]} --trace "$raw/trace_${names[$i]}.jsonl") >"$raw/trace_${names[$i]}.out" 2>&1 &&
      traces+=("${names[$i]}=$raw/trace_${names[$i]}.jsonl")
  done
  if [ ${#traces[@]} -ge 2 ]; then
    python3 tools/gpu/trace_table.py "${traces[@]}" --top 40 >"$out/trace.md" 2>&1
  elif [ ${#traces[@]} -eq 1 ]; then
    python3 tools/gpu/trace_table.py "${traces[0]#*=}" --top 40 >"$out/trace.md" 2>&1
  fi
fi
cat "$out/ab.md"
tar czf "$out/ab.tgz" -C "$raw" . && rm -rf "$raw"
