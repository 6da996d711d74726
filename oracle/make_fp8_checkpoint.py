#!/usr/bin/env python3
"""Rewrite a bf16 checkpoint in the layout of Qwen's official FP8 releases (e.g. Qwen/Qwen3-8B-FP8).

    python3 oracle/make_fp8_checkpoint.py --model models/pycoder-13m --out /tmp/pycoder-fp8

Every q/k/v/o/gate/up/down projection becomes `weight` float8_e4m3fn plus `weight_scale_inv` float32
[ceil(N/128), ceil(K/128)], one scale per 128x128 block with w ~= weight * weight_scale_inv, and config.json
gets quantization_config {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
"weight_block_size": [128, 128]}, as those releases have it. Embeddings, norms and lm_head stay bf16.
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_blocks(w, block=128):
    n, k = w.shape
    nb, kb = (n + block - 1) // block, (k + block - 1) // block
    wp = torch.zeros(nb * block, kb * block, dtype=torch.float32)
    wp[:n, :k] = w.float()
    blocks = wp.view(nb, block, kb, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(nb * block, kb * block)[:n, :k].contiguous(), scale.float()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tensors = {}
    for f in sorted(os.listdir(a.model)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(a.model, f)))
    out = {}
    for name, t in tensors.items():
        if name.endswith(".weight") and any(f".{p}." in name for p in PROJ):
            q, s = quantize_blocks(t)
            out[name] = q
            out[name + "_scale_inv"] = s
        else:
            out[name] = t
    save_file(out, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [128, 128]}
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    for f in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(a.model, f)):
            shutil.copy(os.path.join(a.model, f), a.out)
    print(f"wrote {a.out} in Qwen's FP8 layout ({sum(1 for n in out if n.endswith('_scale_inv'))} projections)")


if __name__ == "__main__":
    main()
