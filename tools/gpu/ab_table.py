#!/usr/bin/env python3
"""Markdown table of an A/B run (tools/gpu/ab.sh): per benchmark case, the median over the rounds of
each variant's time and its change against the first variant (base).

    ab_table.py RAW_DIR NAME [NAME...]     reads RAW_DIR/model_NAME_ROUND.jsonl
"""
import glob
import json
import os
import statistics
import sys


def cases(path):
    """{case: ms} of one model bench run (decode step ms, prefill ms)."""
    found = {}
    with open(path) as f:
        for line in f:
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            if d.get("kind") == "decode":
                found[f"decode b{d['batch']} ctx {d['context']}"] = d["step_ms"]
                if d.get("chained_ms"):
                    found[f"decode b{d['batch']} ctx {d['context']} chained"] = d["chained_ms"]
            elif d.get("kind") == "prefill":
                found[f"prefill {d['tokens']}"] = d["ms"]
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    raw, names = sys.argv[1], sys.argv[2:]
    runs = {}  # name -> case -> [ms per round]
    order = []
    for name in names:
        runs[name] = {}
        for path in sorted(glob.glob(os.path.join(raw, f"model_{name}_*.jsonl"))):
            for case, ms in cases(path).items():
                runs[name].setdefault(case, []).append(ms)
                if case not in order:
                    order.append(case)
    rounds = max((len(v) for r in runs.values() for v in r.values()), default=0)
    print(f"Median of {rounds} alternating rounds, ms (change against {names[0]}).\n")
    print("| case | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for case in order:
        base = runs[names[0]].get(case)
        cells = []
        for name in names:
            values = runs[name].get(case)
            if not values:
                cells.append("-")
                continue
            med = statistics.median(values)
            cell = f"{med:.3f}"
            if name != names[0] and base:
                cell += f" ({100 * (med / statistics.median(base) - 1):+.1f}%)"
            cells.append(cell)
        print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
