#!/usr/bin/env python3
"""Trains deepinfer's default model: a small DeepSeek-V4-architecture LM on Python source code.

Runs on the GPU machine (torch 2.11, transformers 5.17, tokenizers; nothing downloaded). One call:

  1. corpus: every .py file of the Python standard library (PSF-2.0) and of the installed packages
     in PACKAGES (permissive licences, listed there), read from this machine. Files are split
     train / held-out by a hash of their relative path (2% held out); the training split is capped
     at --max-train-chars by a hash-ordered selection of files.
  2. tokenizer: byte-level BPE trained with HF `tokenizers` on the training split (vocab 8192),
     with BOS/EOS and the DeepSeek-V4 chat special tokens -> tokenizer.json, tokenizer_config.json.
  3. model: transformers' DeepseekV4ForCausalLM from config.json in this folder (every V4 feature:
     sliding, CSA and HCA attention, hash-routed and learned MoE, mHC), fixed seed, AdamW,
     bf16 autocast over fp32 weights, `--steps` steps of `--batch` x `--seq` tokens.
  4. export: bf16 safetensors in shards of <= 14 MB with model.safetensors.index.json.
  5. evaluation with the exported bf16 weights computed in fp32: held-out mean NLL and perplexity
     by the same rule as `deepinfer perplexity` (the text tokenized whole, without special tokens,
     cut into windows of --eval-window tokens, each scored on its own: every token but a window's
     first is predicted from the tokens before it in its window); logits of the first window for
     the engine's comparison test; greedy samples.

Usage: train.py OUT_DIR [--steps N] [--batch B] [--seq T] [--smoke]
"""
import argparse, hashlib, json, math, os, sys, time, glob, random
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from evaluate import evaluate_exported  # noqa: E402


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# Installed packages whose Python sources join the corpus, with their licences (all permissive).
PACKAGES = [("numpy", "BSD-3-Clause"), ("transformers", "Apache-2.0"), ("torch", "BSD-3-Clause"),
            ("sympy", "BSD-3-Clause"), ("networkx", "BSD-3-Clause"), ("pandas", "BSD-3-Clause"),
            ("sklearn", "BSD-3-Clause"), ("jax", "Apache-2.0"), ("matplotlib", "Matplotlib License (PSF-based)"),
            ("_pytest", "MIT"), ("setuptools", "MIT"), ("pip", "MIT"), ("requests", "Apache-2.0"),
            ("rich", "MIT"), ("jinja2", "BSD-3-Clause"), ("click", "BSD-3-Clause")]


def corpus_files():
    import importlib, sysconfig
    roots = [("stdlib", sysconfig.get_paths()["stdlib"], "PSF-2.0")]
    for name, lic in PACKAGES:
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        roots.append((name, os.path.dirname(mod.__file__), lic))
    out = []
    for name, root, lic in roots:
        for p in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
            if "site-packages" in os.path.relpath(p, root):
                continue  # the stdlib root may hold a venv's site-packages
            rel = name + "/" + os.path.relpath(p, root)
            out.append((rel, p, lic))
    return roots, out


def read_text(path):
    try:
        with open(path, "rb") as f:
            b = f.read()
        t = b.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if len(t) < 64 or len(t) > 400_000:
        return None
    return t


def is_heldout(rel):
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % 50 == 0


def train_tokenizer(texts, vocab_size, out_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": specials[0], "eos_token": specials[1],
                   "add_bos_token": False, "add_eos_token": False, "model_max_length": 4096}, f, indent=2)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--eval-window", type=int, default=512)
    ap.add_argument("--heldout-chars", type=int, default=120_000)
    ap.add_argument("--max-train-chars", type=int, default=240_000_000)
    ap.add_argument("--smoke", action="store_true", help="small corpus and few steps: checks every stage")
    ap.add_argument("--time-limit", type=float, default=480.0, help="stop training after this many seconds")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    device = "cuda"
    t_start = time.time()

    # 1. corpus
    roots, files = corpus_files()
    train_texts, held_texts, train_meta, manifest = [], [], [], []
    for rel, path, lic in files:
        t = read_text(path)
        if t is None:
            continue
        if is_heldout(rel):
            held_texts.append(t)
            manifest.append({"file": rel, "licence": lic, "split": "heldout", "bytes": len(t.encode())})
        else:
            train_texts.append(t)
            train_meta.append({"file": rel, "licence": lic, "split": "train", "bytes": len(t.encode())})
    if a.smoke:
        train_texts, train_meta = train_texts[:800], train_meta[:800]
    if sum(map(len, train_texts)) > a.max_train_chars:  # keep a hash-ordered subset: fixed, spread over packages
        order = sorted(range(len(train_texts)), key=lambda i: hashlib.sha1(train_texts[i][:256].encode()).hexdigest())
        kept, total = [], 0
        for i in order:
            if total + len(train_texts[i]) > a.max_train_chars:
                continue
            kept.append(i)
            total += len(train_texts[i])
        train_texts = [train_texts[i] for i in sorted(kept)]
        train_meta = [train_meta[i] for i in sorted(kept)]
    manifest += train_meta
    log(f"corpus: {len(train_texts)} train files ({sum(map(len, train_texts))/1e6:.1f} M chars), "
        f"{len(held_texts)} held-out files; roots " + ", ".join(f"{n}={r} ({l})" for n, r, l in roots))
    with open(os.path.join(a.out, "corpus_manifest.json"), "w") as f:
        json.dump({"roots": [{"name": n, "path": r, "licence": l} for n, r, l in roots], "files": manifest}, f)

    # 2. tokenizer
    tok = train_tokenizer(train_texts, a.vocab, a.out)
    eos = tok.token_to_id("<｜end▁of▁sentence｜>")
    log(f"tokenizer: vocab {tok.get_vocab_size()}")
    enc = tok.encode_batch(train_texts)
    stream = []
    for e in enc:
        stream.extend(e.ids)
        stream.append(eos)
    data = torch.tensor(stream, dtype=torch.int64)
    log(f"train tokens: {len(stream)/1e6:.2f} M ({sum(map(len, train_texts))/len(stream):.2f} chars/token)")
    heldout_text = "".join(t if t.endswith("\n") else t + "\n" for t in held_texts)[:a.heldout_chars]
    with open(os.path.join(a.out, "heldout.txt"), "w") as f:
        f.write(heldout_text)

    # 3. model
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    cfg_dict = json.load(open(os.path.join(HERE, "config.json")))
    cfg_dict["vocab_size"] = tok.get_vocab_size()
    cfg_dict["bos_token_id"] = tok.token_to_id("<｜begin▁of▁sentence｜>")
    cfg_dict["eos_token_id"] = eos
    cfg = DeepseekV4Config(**cfg_dict)
    model = DeepseekV4ForCausalLM(cfg).to(device)
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():  # hash routing: each token id gets K distinct experts, fixed by the seed
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=g)[:cfg.num_experts_per_tok] for _ in range(b.shape[0])]
                b.copy_(torch.stack(rows).to(b.dtype))
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params/1e6:.2f} M parameters; dtype {next(model.parameters()).dtype}")
    for name, p in model.named_parameters():
        if p.numel() > 1 and float(p.float().std()) == 0.0 and p.dim() > 1:
            log(f"  note: {name} {tuple(p.shape)} starts constant")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    steps = 30 if a.smoke else a.steps
    warmup = max(1, min(200, steps // 10))

    def lr_at(i):
        if i < warmup:
            return a.lr * (i + 1) / warmup
        frac = (i - warmup) / max(1, steps - warmup)
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    model.train()
    t_train = time.time()
    losses = []
    done = 0
    for i in range(steps):
        starts = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=g)
        x = torch.stack([data[s:s + a.seq] for s in starts.tolist()]).to(device, non_blocking=True)
        for pg in opt.param_groups:
            pg["lr"] = lr_at(i)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        done = i + 1
        if i % 50 == 0 or i == steps - 1:
            el = time.time() - t_train
            log(f"step {i} loss {losses[-1]:.4f} lr {lr_at(i):.2e} {el:.0f}s "
                f"{(i + 1) * a.batch * a.seq / el / 1e3:.1f} k tok/s")
        if time.time() - t_train > a.time_limit:
            log(f"time limit reached after {done} steps")
            break
    train_secs = time.time() - t_train

    # 4. export (bf16 shards)
    model.eval()
    model = model.to(torch.bfloat16)
    export = os.path.join(a.out, "model")
    model.save_pretrained(export, max_shard_size="14MB", safe_serialization=True)
    for f_ in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(a.out, f_), "rb") as src, open(os.path.join(export, f_), "wb") as dst:
            dst.write(src.read())
    log("exported: " + ", ".join(f"{f_} {os.path.getsize(os.path.join(export, f_))/1e6:.1f} MB" for f_ in sorted(os.listdir(export))))

    # 5. evaluation on the exported weights, computed in exact fp32 (see evaluate.py)
    ev = evaluate_exported(export, heldout_text, a.out, a.eval_window, log)
    nll, n, samples = ev["heldout_mean_nll"], ev["heldout_tokens"], ev["samples"]
    report = {"params": n_params, "steps": done, "batch": a.batch, "seq": a.seq, "lr": a.lr, "seed": a.seed,
              "train_tokens": len(stream), "tokens_seen": done * a.batch * a.seq, "train_seconds": train_secs,
              "final_train_loss": sum(losses[-20:]) / min(20, len(losses)), "heldout_tokens": n,
              "heldout_mean_nll": nll, "heldout_perplexity": math.exp(nll), "eval_window": a.eval_window,
              "samples": samples, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "total_seconds": time.time() - t_start, "loss_curve": losses[::10]}
    import transformers, tokenizers
    report["transformers"] = transformers.__version__
    report["tokenizers"] = tokenizers.__version__
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(f"done in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
