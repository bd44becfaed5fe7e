#!/usr/bin/env python3
"""Same measurement as hf_encode_bench.mjs with HuggingFace `tokenizers` (the Rust library, through
its Python binding; `pip install tokenizers`), for a second peer number where that is installed.

Usage: hf_rust_encode_bench.py FILE TOKENIZER_JSON [--mode chunks|lines] [--chunk-bytes 4096] [--runs 3]
Same input split, calls, warm-up, best-of-N and ids_checksum as hf_encode_bench.mjs (see there).
One encode() call per chunk from a Python loop: single-threaded (encode_batch, which would use a
thread pool, is not used; RAYON_NUM_THREADS=1 is set anyway). Python call overhead is included
(about a microsecond per 4 KB call). Prints one JSON line.
"""
import argparse
import json
import os
import platform
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("tokenizer_json")
ap.add_argument("--mode", choices=["chunks", "lines"], default="chunks")
ap.add_argument("--chunk-bytes", type=int, default=4096)
ap.add_argument("--runs", type=int, default=3)
a = ap.parse_args()

raw = open(a.file, "rb").read()
text = raw.decode("utf-8")
parts = text.split("\n")
lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
if a.mode == "lines":
    pieces = lines
else:
    pieces, cur, cur_bytes = [], [], 0
    for line in lines:
        cur.append(line)
        cur_bytes += len(line.encode("utf-8"))
        if cur_bytes >= a.chunk_bytes:
            pieces.append("".join(cur))
            cur, cur_bytes = [], 0
    if cur:
        pieces.append("".join(cur))

t0 = time.perf_counter()
tok = Tokenizer.from_file(a.tokenizer_json)
load_s = time.perf_counter() - t0

checksum = 0
tokens = 0
t0 = time.perf_counter()
for p in pieces:
    ids = tok.encode(p, add_special_tokens=False).ids
    tokens += len(ids)
    for i in ids:
        checksum = (checksum * 31 + i + 1) & 0xFFFFFFFF
warm_s = time.perf_counter() - t0

times = []
for _ in range(a.runs):
    n = 0
    t0 = time.perf_counter()
    for p in pieces:
        n += len(tok.encode(p, add_special_tokens=False).ids)
    times.append(time.perf_counter() - t0)
    assert n == tokens, (n, tokens)
best = min(times)
print(json.dumps({
    "impl": f"tokenizers (Rust) {tokenizers.__version__}, Python {platform.python_version()}",
    "tokenizer": a.tokenizer_json, "file": a.file, "bytes": len(raw),
    "mode": f"chunks>={a.chunk_bytes}B at line ends" if a.mode == "chunks" else "lines",
    "calls": len(pieces), "tokens": tokens, "ids_checksum": checksum,
    "load_s": round(load_s, 3), "warmup_s": round(warm_s, 3), "runs_s": [round(t, 3) for t in times],
    "best_s": round(best, 3), "mb_per_s": round(len(raw) / 1e6 / best, 3),
    "tokens_per_s": round(tokens / best),
}))
