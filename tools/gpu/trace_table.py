#!/usr/bin/env python3
"""Where a traced step's time goes: `deepinfer_bench_model --trace FILE` (kernel start/end times,
not serialized, CUDA graph replays and programmatic dependent launches included) -> markdown.

    python3 tools/gpu/trace_table.py TRACE.jsonl [--top 30] [--case decode_b1_ctx1024] [--launches]
    python3 tools/gpu/trace_table.py base=A.jsonl new=B.jsonl ...   (side by side, per case)

Per traced case: the span (first kernel start to last kernel end), the busy time (the union of the
kernels' intervals) and the idle time (span - busy). The span is then split with no overlap and
nothing left over: every instant goes to the earliest-started kernel still running, and idle
instants to the gap before the next kernel. With programmatic dependent launch a kernel starts
while its predecessor runs and waits for it (griddepcontrol.wait) after a prologue (the GEMMs'
weight prefetch), so an instant with several kernels in flight belongs to the oldest: the one the
others wait for. Per kernel kind (the name without namespaces and template arguments; GEMM kernels
also by grid, which tells their calls apart): launches, attributed time, the kernels' own summed
durations (overlapping ones counted in full), and the idle time just before them; then the longest
gaps. --launches adds every launch in order (start, duration, idle before it, grid). Several
NAME=FILE arguments (the trees of tools/gpu/ab.sh) give one table per case instead: each kind's
attributed time in every trace, and its change against the first.
"""
import argparse
import collections
import json
import re
import sys


def short_name(name):
    """Kernel name without return type, namespaces, template arguments and parameters."""
    s = name
    depth, out = 0, []
    for ch in s:  # drop <...> and (...) nested content
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    s = s.split(" ")[-1]  # "void ns::k" -> "ns::k"
    return re.sub(r"^.*::", "", s) or name


def kind_name(kernel):
    """short_name, and the grid for GEMM kernels (one kernel template serves many calls)."""
    name = short_name(kernel[2])
    return f"{name} {'x'.join(str(g) for g in kernel[3])}" if "gemm" in name and kernel[3] else name


def split_span(kernels):
    """[(start, end, name)] sorted by start -> (attributed per index, idle gap before index)."""
    events = sorted({k[0] for k in kernels} | {k[1] for k in kernels})
    attributed = [0] * len(kernels)
    gap_before = [0] * len(kernels)
    for a, b in zip(events, events[1:]):
        running = [i for i, k in enumerate(kernels) if k[0] <= a and k[1] >= b]
        if running:
            attributed[min(running, key=lambda i: (kernels[i][0], i))] += b - a
        else:
            nxt = next(i for i, k in enumerate(kernels) if k[0] >= b)
            gap_before[nxt] += b - a
    return attributed, gap_before


def sorted_kernels(rows):
    """One case's records as (start, end, name, grid), by start."""
    return sorted((r["start_ns"], r["end_ns"], r["name"], tuple(r.get("grid", ()))) for r in rows)


def table(case, rows, top, launches):
    kernels = sorted_kernels(rows)
    span = max(k[1] for k in kernels) - kernels[0][0]
    attributed, gap_before = split_span(kernels)
    idle = sum(gap_before)
    lines = [f"### {case}", "",
             f"{len(kernels)} kernels; span {span / 1e3:.1f} us, busy {(span - idle) / 1e3:.1f} us, "
             f"idle {idle / 1e3:.1f} us ({100.0 * idle / span:.1f}%); summed kernel durations "
             f"{sum(k[1] - k[0] for k in kernels) / 1e3:.1f} us", "",
             "| kernel | launches | attributed us | % of span | own durations us | idle before us |",
             "|---|---|---|---|---|---|"]
    kinds = collections.OrderedDict()
    for i, k in enumerate(kernels):
        e = kinds.setdefault(kind_name(k), [0, 0, 0, 0])
        e[0] += 1
        e[1] += attributed[i]
        e[2] += k[1] - k[0]
        e[3] += gap_before[i]
    for name, (n, att, own, gap) in sorted(kinds.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| {name} | {n} | {att / 1e3:.1f} | {100.0 * att / span:.1f} | {own / 1e3:.1f} | {gap / 1e3:.1f} |")
    lines += ["", "Longest idle gaps (before the kernel named; its launch index in the step):", "",
              "| us | before | index |", "|---|---|---|"]
    for i in sorted(range(len(kernels)), key=lambda i: -gap_before[i])[:10]:
        if gap_before[i] > 0:
            lines.append(f"| {gap_before[i] / 1e3:.2f} | {short_name(kernels[i][2])} | {i} |")
    if launches:
        lines += ["", "| # | kernel | grid | start us | us | idle before us | attributed us |", "|---|---|---|---|---|---|---|"]
        t0 = kernels[0][0]
        for i, k in enumerate(kernels):
            grid = "x".join(str(g) for g in k[3])
            lines.append(f"| {i} | {short_name(k[2])} | {grid} | {(k[0] - t0) / 1e3:.1f} | {(k[1] - k[0]) / 1e3:.1f} | "
                         f"{gap_before[i] / 1e3:.1f} | {attributed[i] / 1e3:.1f} |")
    return "\n".join(lines) + "\n"


def attributed_by_kind(rows):
    """{kind: attributed ns} and the span of one case's records."""
    kernels = sorted_kernels(rows)
    attributed, _ = split_span(kernels)
    kinds = collections.Counter()
    for i, k in enumerate(kernels):
        kinds[kind_name(k)] += attributed[i]
    return kinds, max(k[1] for k in kernels) - kernels[0][0]


def compare(named_cases, top):
    """named_cases: [(name, {case: rows})] -> one markdown table per case, traces side by side."""
    names = [n for n, _ in named_cases]
    out = []
    for case in named_cases[0][1]:
        per = [attributed_by_kind(cases[case]) if case in cases else (collections.Counter(), 0) for _, cases in named_cases]
        kinds = sorted(set().union(*(k for k, _ in per)), key=lambda k: -max(p[0][k] for p in per))[:top]
        head = "| kernel | " + " | ".join(f"{n} us" for n in names) + " |"
        lines = [f"### {case}", "", head, "|---" * (len(names) + 1) + "|"]
        lines.append("| span (all kernels) | " + " | ".join(f"{span / 1e3:.1f}" + (
            f" ({100.0 * (span - per[0][1]) / per[0][1]:+.1f}%)" if i and per[0][1] else "") for i, (_, span) in enumerate(per)) + " |")
        for k in kinds:
            base = per[0][0][k]
            cells = [f"{p[0][k] / 1e3:.1f}" + (f" ({(p[0][k] - base) / 1e3:+.1f})" if i else "") for i, p in enumerate(per)]
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)


def load(path, only):
    cases = collections.OrderedDict()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("kind") == "trace" and (not only or r["case"] in only):
                cases.setdefault(r["case"], []).append(r)
    if not cases:
        sys.exit(f"{path}: no trace records")
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="+", help="TRACE.jsonl, or several NAME=TRACE.jsonl to compare")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--case", action="append", help="only these cases (default: all)")
    ap.add_argument("--launches", action="store_true", help="also every launch in order")
    args = ap.parse_args()
    if len(args.trace) > 1:
        named = []
        for spec in args.trace:
            name, sep, path = spec.partition("=")
            if not sep:
                sys.exit(f"'{spec}': several traces are compared as NAME=FILE")
            named.append((name, load(path, args.case)))
        print(compare(named, args.top))
        return
    cases = load(args.trace[0], args.case)
    print("\n".join(table(c, rows, args.top, args.launches) for c, rows in cases.items()))


if __name__ == "__main__":
    main()
