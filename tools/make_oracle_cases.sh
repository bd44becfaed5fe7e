#!/usr/bin/env bash
# Makes the extra transformers-oracle fixtures under tests/data/ (run on the GPU machine, which has
# torch and transformers 5.17). Needs the shared oracle scripts copied into .oracle/ (carried).
# Usage: tools/make_oracle_cases.sh OUT_DIR
set -u
out=${1:?out dir}
mkdir -p "$out"
run() { echo "== $*"; PYTHONUNBUFFERED=1 python3 "$@" || echo "FAILED: $*"; }
[ -n "${ONLY_YARN:-}" ] || run .oracle/v4_oracle.py tools/oracle_configs/dims-b.json "$out/v4-dims-b" --seed 3 --prompt-lens 5,100,300 --device cpu
run .oracle/v4_oracle.py tools/oracle_configs/yarn-b.json "$out/v4-yarn-b" --seed 4 --device cpu
[ -n "${ONLY_YARN:-}" ] || run .oracle/v4_oracle.py /dev/stdin "$out/v4-tiny-bf16" --seed 5 --dtype bfloat16 --device cpu < .oracle/configs/tiny-a.json
run .oracle/official_format.py "$out/v4-yarn-b" "$out/v4-yarn-b-official" --seed 14
[ -n "${ONLY_YARN:-}" ] || run tools/fp32_reference_of_checkpoint.py "$out/v4-tiny-bf16"
