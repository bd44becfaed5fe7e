#!/usr/bin/env python3
"""Timeline of one profiled step from Nsight Systems' kernel trace (tools/gpu/timeline.sh).

Reads the CSV of `nsys stats --report cuda_gpu_trace --format csv` (kernels and memory operations,
graph nodes traced one by one with --cuda-graph-trace=node) and prints, as markdown:
  * the span of the step (first kernel's start to last kernel's end), the sum of kernel durations,
    the busy time (union of kernel intervals: kernels overlapped by programmatic dependent launch
    count once) and the idle time between kernels;
  * the idle time by the kernel that follows the gap (what the GPU waited on before launching it);
  * kernel time by kind (name patterns) and the longest kernels.

    timeline.py TRACE.csv [TITLE]
"""
import csv
import re
import sys
from collections import defaultdict

KINDS = [
    ("gemm (wgmma TMA tiles)", r"wgmma"),
    ("gemm (mma.sync tiles)", r"gemm_kernel|gemm_tile|GemmParams"),
    ("fp8 gemm", r"fp8"),
    ("attention", r"attention|attn|combine_splits"),
    ("indexer / top-k", r"index|topk|top_k"),
    ("mHC", r"hc_"),
    ("norm / rope", r"norm|rope"),
    ("routing / MoE glue", r"route|moe|swiglu|permute|scatter|gather"),
    ("kv cache / compressor", r"compress|cache|kv_"),
    ("sampling / head", r"greedy|argmax|sample|logit"),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def short(name, width=70):
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"deepinfer::backend::cuda::|^void ", "", name)
    name = re.sub(r"\(.*", "", name)  # drop the argument list
    return name if len(name) <= width else name[: width - 3] + "..."


def load(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.strip()]
    # nsys prints a notice line or two before the header in some versions: start at the header.
    start = next(i for i, l in enumerate(lines) if "Start" in l and "Name" in l)
    for r in csv.DictReader(lines[start:]):
        key = lambda pred: next(k for k in r if pred(k))
        s = float(r[key(lambda k: k.startswith("Start"))])
        d = float(r[key(lambda k: k.startswith("Duration"))])
        name = r[key(lambda k: k.strip() == "Name")]
        if name.startswith("[CUDA mem"):
            continue
        rows.append((s, s + d, name))
    rows.sort()
    return rows


def main():
    path = sys.argv[1]
    title = sys.argv[2] if len(sys.argv) > 2 else path
    rows = load(path)
    if not rows:
        print(f"### {title}\n\nno kernels in the trace\n")
        return
    span = rows[-1][1] - rows[0][0]
    total = sum(e - s for s, e, _ in rows)
    busy, idle_before = 0.0, defaultdict(float)
    cur_s, cur_e = rows[0][0], rows[0][1]
    gaps = []
    for s, e, name in rows[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append(s - cur_e)
            idle_before[short(name, 50)] += s - cur_e
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    us = lambda ns: ns / 1e3
    print(f"### {title}\n")
    print(f"{len(rows)} kernels; span {us(span):.1f} us, kernel time {us(total):.1f} us (sum), busy {us(busy):.1f} us "
          f"(union), idle {us(span - busy):.1f} us in {len(gaps)} gaps "
          f"(median {us(sorted(gaps)[len(gaps) // 2]) if gaps else 0:.2f} us)\n")
    print("| idle before (the kernel that waited) | us |\n|---|---|")
    for name, t in sorted(idle_before.items(), key=lambda kv: -kv[1])[:12]:
        print(f"| {name} | {us(t):.1f} |")
    print_sums(rows, kind_of, "kind", "kernels")
    print_sums(rows, short, "kernel", "launches", limit=25)
    print()


def print_sums(rows, key, what, count_label, limit=None):
    """A table of kernel time summed over rows grouped by key(name), longest first."""
    time, count = defaultdict(float), defaultdict(int)
    for s, e, name in rows:
        time[key(name)] += e - s
        count[key(name)] += 1
    print(f"\n| {what} | {count_label} | us (sum) |\n|---|---|---|")
    for k, t in sorted(time.items(), key=lambda kv: -kv[1])[:limit]:
        print(f"| {k} | {count[k]} | {t / 1e3:.1f} |")


if __name__ == "__main__":
    main()
