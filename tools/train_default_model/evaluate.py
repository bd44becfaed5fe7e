#!/usr/bin/env python3
"""Evaluates an exported default-model folder with transformers in exact fp32 (TF32 off).

  evaluate.py MODEL_DIR HELDOUT.txt OUT_DIR [--window 512]

Writes OUT_DIR/eval.json (held-out mean NLL and perplexity by deepinfer perplexity's rule, see
train.py), OUT_DIR/heldout_logits.safetensors (input_ids [64] and fp32 logits [64, vocab] of the
first window: the engine's comparison test) and greedy samples. train.py calls the same code at the
end of training.
"""
import argparse, json, math, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import score_text  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("heldout")
    ap.add_argument("out")
    ap.add_argument("--window", type=int, default=512)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(a.out, exist_ok=True)
    from tokenizers import Tokenizer
    from transformers import DeepseekV4ForCausalLM
    from safetensors.torch import save_file
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    model = DeepseekV4ForCausalLM.from_pretrained(a.model, dtype=torch.float32).to("cuda").eval()
    text = open(a.heldout, encoding="utf-8").read()
    ids = tok.encode(text, add_special_tokens=False).ids
    nll, n = score_text(model, ids, a.window, "cuda")
    first = torch.tensor(ids[:a.window], device="cuda").unsqueeze(0)
    with torch.no_grad():
        lg = model(input_ids=first).logits[0].float().cpu()
    save_file({"input_ids": first[0, :64].cpu().to(torch.int64), "logits": lg[:64].contiguous()},
              os.path.join(a.out, "heldout_logits.safetensors"))
    samples = {}
    for prompt in ["def fibonacci(n):", "import os\n\n\ndef ", "class Stack:\n    def __init__(self):"]:
        x = torch.tensor(tok.encode(prompt, add_special_tokens=False).ids, device="cuda").unsqueeze(0)
        with torch.no_grad():
            for _ in range(64):
                x = torch.cat([x, model(input_ids=x).logits[0, -1].argmax().view(1, 1)], dim=1)
        samples[prompt] = {"ids": x[0].tolist(), "text": tok.decode(x[0].tolist(), skip_special_tokens=False)}
    report = {"heldout_tokens": n, "heldout_mean_nll": nll, "heldout_perplexity": math.exp(nll), "window": a.window,
              "tf32": False, "dtype": "float32 compute on the checkpoint's bf16 weights", "samples": samples}
    json.dump(report, open(os.path.join(a.out, "eval.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}))
    for p, s in samples.items():
        print(repr(s["text"]))


if __name__ == "__main__":
    main()
