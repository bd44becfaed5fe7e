#!/usr/bin/env python3
"""Adds fp32 reference logits for a checkpoint saved in a lower precision (e.g. bf16).

v4_oracle.py --dtype bfloat16 records transformers' own bf16 run. An engine that computes in fp32
on the bf16 weights should instead match transformers run in fp32 on those same weights; this
script computes that and writes reference_fp32.safetensors (same keys as reference.safetensors).
Usage: fp32_reference_of_checkpoint.py DIR
"""
import os, sys
import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV4ForCausalLM

d = sys.argv[1]
ref = load_file(os.path.join(d, "reference.safetensors"))
model = DeepseekV4ForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
out = {}
with torch.no_grad():
    i = 0
    while f"p{i}.input_ids" in ref:
        seq = torch.cat([ref[f"p{i}.input_ids"], ref[f"p{i}.greedy_tokens"][:-1]])
        out[f"p{i}.input_ids"] = ref[f"p{i}.input_ids"]
        out[f"p{i}.greedy_tokens"] = ref[f"p{i}.greedy_tokens"]
        out[f"p{i}.logits"] = model(input_ids=seq[None]).logits[0].float()
        diff = (out[f"p{i}.logits"] - ref[f"p{i}.logits"].float()).abs().max().item()
        print(f"p{i}: fp32 vs bf16 transformers max abs {diff:.4g}")
        i += 1
save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(d, "reference_fp32.safetensors"))
