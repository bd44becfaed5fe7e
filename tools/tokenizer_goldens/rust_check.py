#!/usr/bin/env python3
"""Checks golden.jsonl files (made with tokenizers.js) against HuggingFace `tokenizers`, the Rust
library, through its Python binding. Needs `pip install tokenizers` (not available on every machine;
the goldens themselves are made without it).

Usage: rust_check.py TOKENIZER_JSON GOLDEN_JSONL [TOKENIZER_JSON GOLDEN_JSONL ...]
TOKENIZER_JSON may be gzip-compressed (.gz). For every line: Rust encode(text,
add_special_tokens=False).ids must equal "ids", and Rust decode(ids, skip_special_tokens=False) must
equal "decoded". Prints each difference as a JSON line and a summary line per file; exit 1 if any.
"""
import gzip
import json
import sys

import tokenizers
from tokenizers import Tokenizer

args = sys.argv[1:]
if not args or len(args) % 2:
    sys.exit(__doc__)
bad = 0
for tok_path, golden_path in zip(args[0::2], args[1::2]):
    if tok_path.endswith(".gz"):
        with gzip.open(tok_path, "rt", encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())
    else:
        tok = Tokenizer.from_file(tok_path)
    n = ids_ok = dec_ok = 0
    with open(golden_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            g = json.loads(line)
            n += 1
            ids = tok.encode(g["text"], add_special_tokens=False).ids
            if ids == g["ids"]:
                ids_ok += 1
            else:
                print(json.dumps({"file": golden_path, "line": lineno, "kind": "ids", "text": g["text"],
                                  "rust": ids, "tokenizers_js": g["ids"]}, ensure_ascii=False))
            dec = tok.decode(g["ids"], skip_special_tokens=False)
            if dec == g["decoded"]:
                dec_ok += 1
            else:
                print(json.dumps({"file": golden_path, "line": lineno, "kind": "decoded", "text": g["text"],
                                  "rust": dec, "tokenizers_js": g["decoded"]}, ensure_ascii=False))
    bad += (n - ids_ok) + (n - dec_ok)
    print(json.dumps({"file": golden_path, "rust_tokenizers": tokenizers.__version__, "lines": n,
                      "ids_equal": ids_ok, "decoded_equal": dec_ok}))
sys.exit(1 if bad else 0)
