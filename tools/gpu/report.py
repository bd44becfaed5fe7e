#!/usr/bin/env python3
"""Turns tools/gpu/run_all.sh's outputs into a markdown report and pareto plots.

Usage: report.py OUT [CARD]  (CARD names the card in the plot titles when nvidia-smi is not there)
Reads OUT/{gpu.txt, gemm.jsonl, model.jsonl, hf.jsonl, tests.log}; writes markdown to stdout and
OUT/pareto_decode.png, OUT/pareto_prefill.png, OUT/pareto_engine.png (engine.jsonl). Floors: decode = (weight bytes + KV bytes) / the
measured copy bandwidth; prefill = FLOPs / the best bf16 GEMM rate measured in the same run (cuBLAS
on the largest square case), or 790 TFLOP/s (the device notes' measurement) when none was.
"""
import json, os, sys


def jsonl(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def main():
    out = sys.argv[1]
    model = jsonl(os.path.join(out, "model.jsonl"))
    attention = jsonl(os.path.join(out, "attention.jsonl"))
    gemm = jsonl(os.path.join(out, "gemm.jsonl"))
    hf = jsonl(os.path.join(out, "hf.jsonl"))
    engine = jsonl(os.path.join(out, "engine.jsonl"))
    bw = next((r["gbs"] for r in model if r.get("kind") == "bandwidth"), None)
    peak = max((r.get("cublas_tflops", 0) or 0 for r in gemm), default=0) or 790.0
    print("# deepinfer CUDA backend: benchmark report\n")
    # the plots' titles name the card the run was on (H100 and H200 runs both land here); a report
    # redrawn away from the GPU machine takes the name as the second argument
    card = sys.argv[2] if len(sys.argv) > 2 else "GPU"
    try:
        import subprocess
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        print(f"GPU: `{smi}`\n")
        card = smi.split(",")[0].removeprefix("NVIDIA ").strip() or card
    except OSError:
        pass
    print(f"Ceilings measured in this run: copy bandwidth {bw} GB/s (read + write); bf16 GEMM peak used for "
          f"prefill floors {peak:.0f} TFLOP/s.\n")
    info = next((r for r in model if r.get("kind") == "model"), None)
    if info:
        print(f"Model: v4-mid (tools/oracle_configs/v4-mid.json), random bf16 weights, "
              f"{info['device_weight_bytes'] / 1e9:.2f} GB on the device.\n")
    dec = [r for r in model if r.get("kind") == "decode"]
    if dec:
        print("## Decode (one token per sequence per step)\n")
        print("step ms: one synchronous step (host work, copies and the wait included); chained ms: steps "
              "enqueued two deep as the engine runs them (the GPU's time a step).\n")
        print("| batch | context | step ms | tok/s | bytes floor ms | x floor | FLOP floor ms | roofline ms | "
              "% of roofline | chained ms | chained x floor | chained % of roofline |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in dec:
            bytes_ms = (r["weight_bytes"] + r["kv_bytes"]) / (bw * 1e9) * 1e3 if bw else float("nan")
            flop_ms = r.get("flops", 0) / (peak * 1e12) * 1e3
            roof = max(bytes_ms, flop_ms)
            ch = r.get("chained_ms", 0)
            chained = (f"{ch:.3f} | {ch / bytes_ms:.2f} | {100 * roof / ch:.0f}%" if ch else "- | - | -")
            print(f"| {r['batch']} | {r['context']} | {r['step_ms']:.3f} | {r['tok_s']:.0f} | {bytes_ms:.3f} | "
                  f"{r['step_ms'] / bytes_ms:.2f} | {flop_ms:.3f} | {roof:.3f} | {100 * roof / r['step_ms']:.0f}% | "
                  f"{chained} |")
        print()
    pre = [r for r in model if r.get("kind") == "prefill"]
    if pre:
        print("## Prefill (one sequence, chunks of 8192 tokens)\n")
        print("| tokens | ms | tok/s | FLOPs | FLOP floor ms | % of bf16 roofline |")
        print("|---|---|---|---|---|---|")
        for r in pre:
            floor = r["flops"] / (peak * 1e12) * 1e3
            print(f"| {r['tokens']} | {r['ms']:.1f} | {r['tok_s']:.0f} | {r['flops']:.3g} | {floor:.2f} | "
                  f"{100 * floor / r['ms']:.0f}% |")
        print()
    if hf:
        print("## Peer: transformers (eager, bf16, same config and random weights)\n")
        print("| batch | prompt | prefill tok/s | decode step ms | decode tok/s |")
        print("|---|---|---|---|---|")
        for r in hf:
            print(f"| {r['batch']} | {r['prompt']} | {r['prefill_tok_s']:.0f} | {r['decode_step_ms']:.2f} | "
                  f"{r['decode_tok_s']:.1f} |")
        print()
    if engine:
        e0 = engine[0]
        print("## Whole engine on the GPU (deepinfer_bench_engine --device cuda: scheduler, step thread, "
              f"greedy on the GPU; model {e0.get('model', '?')}, {e0['prompt']}-token prompts, {e0['output']} output "
              "tokens; async 1: asynchronous scheduling with greedy steps chained on the device, 0: one step at a "
              "time)\n")
        print("| async | concurrency | wall s | output tok/s per GPU | tok/s per user | total tok/s | TTFT ms | TPOT ms | "
              "steps overlapped |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in engine:
            per_user = 1e3 / r["tpot_ms"] if r["tpot_ms"] > 0 else float("nan")
            print(f"| {r.get('async', 1)} | {r['concurrency']} | {r['wall_s']:.3f} | {r['out_tok_s']:.0f} | {per_user:.0f} | "
                  f"{r['total_tok_s']:.0f} | {r['ttft_ms']:.1f} | {r['tpot_ms']:.3f} | "
                  f"{r.get('overlapped_steps', '?')}/{r.get('steps', '?')} |")
        print()
    if attention:
        print("## Attention kernels, raw lines\n")
        print("```")
        for r in attention:
            print(json.dumps(r))
        print("```\n")
    if gemm:
        print("## GEMM kernels (ours vs cuBLAS), raw lines\n")
        print("```")
        for r in gemm:
            print(json.dumps(r))
        print("```\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        if dec:
            fig, ax = plt.subplots(figsize=(6, 4))
            for ctx in sorted({r["context"] for r in dec}):
                pts = sorted((1e3 / r["step_ms"], r["tok_s"]) for r in dec if r["context"] == ctx)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"deepinfer, context {ctx}")
            for r in hf:
                ax.plot(1e3 / r["decode_step_ms"], r["decode_tok_s"], "x", color="gray")
            ax.set_xlabel("tokens/s per user")
            ax.set_ylabel("output tokens/s per GPU")
            ax.set_xscale("log"); ax.set_yscale("log"); ax.grid(True, which="both", alpha=.3)
            ax.set_title(f"v4-mid decode on one {card} (x: transformers)")
            ax.legend(fontsize=8)
            fig.tight_layout(); fig.savefig(os.path.join(out, "pareto_decode.png"), dpi=110)
        if engine:
            fig, ax = plt.subplots(figsize=(6, 4))
            for mode in sorted({r.get("async", 1) for r in engine}, reverse=True):
                pts = [(1e3 / r["tpot_ms"], r["out_tok_s"], r["concurrency"]) for r in engine
                       if r["tpot_ms"] > 0 and r.get("async", 1) == mode]
                label = "deepinfer engine, steps chained on the GPU" if mode else "deepinfer engine, one step at a time"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
                for x, y, c in pts:
                    ax.annotate(str(c), (x, y), fontsize=7)
            ax.set_xlabel("tokens/s per user (1 / TPOT)")
            ax.set_ylabel("output tokens/s per GPU")
            ax.set_xscale("log"); ax.set_yscale("log"); ax.grid(True, which="both", alpha=.3)
            ax.set_title(f"engine concurrency sweep on one {card} (labels: concurrency)")
            ax.legend(fontsize=8)
            fig.tight_layout(); fig.savefig(os.path.join(out, "pareto_engine.png"), dpi=110)
        if pre:
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.plot([r["ms"] for r in pre], [r["tok_s"] for r in pre], "o-", label="deepinfer")
            for r in pre:
                ax.annotate(str(r["tokens"]), (r["ms"], r["tok_s"]))
            for r in hf:
                ms = r["batch"] * r["prompt"] / r["prefill_tok_s"] * 1e3
                ax.plot(ms, r["prefill_tok_s"], "x", color="gray")
            ax.set_xlabel("time to first token, ms"); ax.set_ylabel("prefill tokens/s per GPU")
            ax.set_xscale("log"); ax.set_yscale("log"); ax.grid(True, which="both", alpha=.3)
            ax.set_title(f"v4-mid prefill on one {card} (x: transformers)")
            ax.legend(fontsize=8)
            fig.tight_layout(); fig.savefig(os.path.join(out, "pareto_prefill.png"), dpi=110)
    except ImportError:
        print("(matplotlib missing: no plots)")


if __name__ == "__main__":
    main()
