#!/usr/bin/env python3
"""Per-kernel time table from ncu --csv output (gpu__time_duration.sum), one section per file."""
import csv, re, sys, os
from collections import defaultdict

def short(name):
    name = re.sub(r"\(.*$", "", name)          # drop the argument list
    name = re.sub(r"^void ", "", name)
    name = name.replace("deepinfer::backend::cuda::", "").replace("(anonymous namespace)::", "")
    return name[:110]

for path in sys.argv[1:]:
    rows = []
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        rows.append((short(r["Kernel Name"]), float(r["Metric Value"].replace(",", "")), r.get("Grid Size", ""), r.get("Block Size", "")))
    total = sum(t for _, t, _, _ in rows)
    agg = defaultdict(lambda: [0.0, 0])
    for n, t, g, b in rows:
        agg[n][0] += t
        agg[n][1] += 1
    print(f"## {os.path.basename(path)}: {len(rows)} kernels, {total/1e3:.1f} us total\n")
    print("| kernel | launches | us | % |\n|---|---|---|---|")
    for n, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:40]:
        print(f"| `{n}` | {c} | {t/1e3:.1f} | {100*t/max(total,1):.1f} |")
    print()
