#!/usr/bin/env bash
# Side-by-side single-thread encode throughput: deepinfer vs @huggingface/tokenizers (tokenizers.js)
# on the same >= 10 MB mixed text, the same chunking, the same tokens (checked by ids_checksum).
# Usage: bench/tokenizer/run.sh BUILD_DIR [TOKENIZER_JSON] [OUT_JSONL]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:?build dir (with deepinfer_bench_tokenizer)}
tok=${2:-$root/../shared/fixtures/tokenizer/deepseek-v3/tokenizer.json}
out=${3:-/dev/stdout}
work=${TOKBENCH_DIR:-/tmp/tokbench}
mkdir -p "$work"
[ -f "$work/mixed.txt" ] || bash "$here/make_corpus.sh" "$work/mixed.txt" >&2
if [ ! -d "$work/js/node_modules/@huggingface/tokenizers" ]; then
  mkdir -p "$work/js" && cp "$root"/tools/tokenizer_goldens/package*.json "$work/js/" && (cd "$work/js" && npm ci --silent) >&2
fi
{
  echo "{\"machine\": \"$(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"input_sha256\": \"$(sha256sum "$work/mixed.txt" | cut -d' ' -f1)\"}"
  "$build/deepinfer_bench_tokenizer" "$tok" "$work/mixed.txt"
  TOKENIZERS_JS_DIR="$work/js" node "$here/hf_encode_bench.mjs" "$work/mixed.txt" "$tok" --runs 2
  "$build/deepinfer_bench_tokenizer" "$tok" "$work/mixed.txt"
} > "$out"
