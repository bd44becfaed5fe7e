#!/usr/bin/env python3
"""Evaluates an exported default-model folder with transformers in exact fp32 (TF32 off).

  evaluate.py MODEL_DIR HELDOUT.txt OUT_DIR [--window 512]

Writes OUT_DIR/eval.json (held-out mean NLL and perplexity by deepinfer perplexity's rule, see
train.py), OUT_DIR/heldout_logits.safetensors (input_ids [64] and fp32 logits [64, vocab] of the
first window: the engine's comparison test) and greedy samples. train.py calls the same code at the
end of training (evaluate_exported).
"""
import argparse, json, math, os
import torch


@torch.no_grad()
def score_text(model, ids, window, device):
    """Mean NLL per predicted token, windows scored independently (deepinfer perplexity's rule)."""
    total, count = 0.0, 0
    for s in range(0, len(ids), window):
        w = ids[s:s + window]
        if len(w) < 2:
            continue
        x = torch.tensor(w, device=device).unsqueeze(0)
        logits = model(input_ids=x).logits[0].double()
        lp = torch.log_softmax(logits[:-1], dim=-1)
        nll = -lp.gather(1, x[0, 1:].unsqueeze(1)).squeeze(1)
        total += nll.sum().item()
        count += nll.numel()
    return total / count, count


def evaluate_exported(model_dir, heldout_text, out_dir, window=512, log=print):
    """Reloads an exported checkpoint in exact fp32 (TF32 off) and evaluates it.

    Reloading matters: model.to(bfloat16) also rounds float buffers such as RoPE's inv_freq, which
    the checkpoint does not store (engines recompute them in fp32 from the config). Writes
    out_dir/heldout_logits.safetensors; returns the held-out figures and greedy samples.
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    from tokenizers import Tokenizer
    from transformers import DeepseekV4ForCausalLM
    from safetensors.torch import save_file
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to("cuda").eval()
    ids = tok.encode(heldout_text, add_special_tokens=False).ids
    nll, n = score_text(model, ids, window, "cuda")
    log(f"held-out: {n} predicted tokens, mean NLL {nll:.6f}, perplexity {math.exp(nll):.4f}")
    first = torch.tensor(ids[:window], device="cuda").unsqueeze(0)
    with torch.no_grad():
        lg = model(input_ids=first).logits[0].float().cpu()
    save_file({"input_ids": first[0, :64].cpu().to(torch.int64), "logits": lg[:64].contiguous()},
              os.path.join(out_dir, "heldout_logits.safetensors"))
    samples = {}
    for prompt in ["def fibonacci(n):", "import os\n\n\ndef ", "class Stack:\n    def __init__(self):"]:
        x = torch.tensor(tok.encode(prompt, add_special_tokens=False).ids, device="cuda").unsqueeze(0)
        with torch.no_grad():
            for _ in range(64):
                x = torch.cat([x, model(input_ids=x).logits[0, -1].argmax().view(1, 1)], dim=1)
        samples[prompt] = {"ids": x[0].tolist(), "text": tok.decode(x[0].tolist(), skip_special_tokens=False)}
        log(f"sample {prompt!r} -> {samples[prompt]['text']!r}")
    return {"heldout_tokens": n, "heldout_mean_nll": nll, "heldout_perplexity": math.exp(nll), "window": window,
            "tf32": False, "dtype": "float32 compute on the checkpoint's bf16 weights", "samples": samples}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("heldout")
    ap.add_argument("out")
    ap.add_argument("--window", type=int, default=512)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    report = evaluate_exported(a.model, open(a.heldout, encoding="utf-8").read(), a.out, a.window)
    json.dump(report, open(os.path.join(a.out, "eval.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
