#!/usr/bin/env python3
"""Per-kernel table from ncu --csv output, one section per file: launches, summed
gpu__time_duration, share of the step, and for every other metric in the file (PROFILE_SOL=1 in
profile.sh: DRAM / L2 / SM throughput and achieved occupancy, % of peak) its mean over the
kernel's launches weighted by their durations."""
import csv, re, sys, os
from collections import defaultdict

TIME = "gpu__time_duration.sum"
SHORT = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2 %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy %",
}

def short(name):
    name = re.sub(r"\(.*$", "", name)          # drop the argument list
    name = re.sub(r"^void ", "", name)
    name = name.replace("deepinfer::backend::cuda::", "").replace("(anonymous namespace)::", "")
    return name[:110]

def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None

for path in sys.argv[1:]:
    launches = defaultdict(dict)  # launch id -> {"name": ..., metric: value}
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        value = number(r.get("Metric Value", ""))
        if value is None:
            continue
        launch = launches[r.get("ID", str(len(launches)))]
        launch["name"] = short(r["Kernel Name"])
        launch[r["Metric Name"]] = value
    rows = [l for l in launches.values() if TIME in l]
    extra = sorted({m for l in rows for m in l if m not in ("name", TIME)})
    total = sum(l[TIME] for l in rows)
    agg = defaultdict(lambda: {"t": 0.0, "n": 0, "w": defaultdict(float)})
    for l in rows:
        a = agg[l["name"]]
        a["t"] += l[TIME]
        a["n"] += 1
        for m in extra:
            a["w"][m] += l.get(m, 0.0) * l[TIME]
    print(f"## {os.path.basename(path)}: {len(rows)} kernels, {total/1e3:.1f} us total\n")
    heads = ["kernel", "launches", "us", "%"] + [SHORT.get(m, m) for m in extra]
    print("| " + " | ".join(heads) + " |\n|" + "---|" * len(heads))
    for n, a in sorted(agg.items(), key=lambda kv: -kv[1]["t"])[:40]:
        cells = [f"`{n}`", str(a["n"]), f"{a['t']/1e3:.1f}", f"{100*a['t']/max(total,1):.1f}"]
        cells += [f"{a['w'][m]/max(a['t'],1e-30):.0f}" for m in extra]
        print("| " + " | ".join(cells) + " |")
    print()
