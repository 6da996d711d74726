#!/usr/bin/env python3
"""Make Qwen3 checkpoints with seeded random weights, saved exactly as transformers saves them.

    python3 oracle/make_model.py --preset qwen3-4b --out /tmp/q4b
    python3 oracle/make_model.py --preset tiny-gqa4 --out tests/data/models/tiny-gqa4 --dtype float16

Presets are real Qwen3 shapes (0.6B, 4B, 8B) for speed and fidelity at scale, and tiny ones (< 1 MB)
for correctness tests. Weights: transformers' own init (normal, std = initializer_range = --init-std,
default 0.1 instead of transformers' 0.02) so that logits are peaked and argmax rarely near-ties;
--embed-std gives embed_tokens / lm_head their own std (peaked logits with calm inner layers: logit
std ~ sqrt(hidden) x embed_std); RMSNorm weights are 1 + 0.1 N(0, 1) so that a missing norm weight shows.
Runs on the GPU machine (torch 2.11, transformers 5.x); on a CPU it works too, slowly.
"""
import argparse
import json
import os
import shutil

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

REAL = dict(max_position_embeddings=40960, rms_norm_eps=1e-6, vocab_size=151936,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
PRESETS = {
    "qwen3-0.6b": dict(REAL, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3-4b": dict(REAL, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3-8b": dict(REAL, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
}
TINY = dict(max_position_embeddings=512, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
PRESETS.update({
    # Each tiny model stays under 1 MB with its dumps. head_dim 64, no GQA, tied embeddings:
    "tiny-mha": dict(TINY, vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, head_dim=64, tie_word_embeddings=True),
    # head_dim 64, GQA 4, untied, hidden size not a power of two
    "tiny-gqa4": dict(TINY, vocab_size=256, hidden_size=96, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False),
    # head_dim 128, GQA 8, tied, hidden smaller than a head
    "tiny-gqa8": dict(TINY, vocab_size=256, hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=1, head_dim=128, tie_word_embeddings=True),
    # head_dim 128, GQA 2, untied, odd-looking sizes
    "tiny-gqa2": dict(TINY, vocab_size=256, hidden_size=72, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=128, tie_word_embeddings=False),
})
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def make(preset, out, seed=0, init_std=0.1, dtype="bfloat16", shard="5GB", tokenizer=None, device=None, embed_std=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    cfg = Qwen3Config(**PRESETS[preset], initializer_range=init_std)
    # Big presets are built directly in bf16: an 8B fp32 copy would need 32 GB for nothing.
    torch.set_default_dtype(torch.bfloat16 if preset.startswith("qwen3-") else torch.float32)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p, dtype=torch.float32))
            elif embed_std is not None and name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.normal_(0.0, embed_std)
    model = model.to(DTYPES[dtype])
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, max_shard_size=shard)
    if tokenizer:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(tokenizer, f)):
                shutil.copy(os.path.join(tokenizer, f), out)
    with open(os.path.join(out, "made_by.json"), "w") as f:
        json.dump(dict(preset=preset, seed=seed, init_std=init_std, embed_std=embed_std, dtype=dtype,
                       norm_weights="1 + 0.1 N(0,1)"), f, indent=1)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init-std", type=float, default=0.1)
    ap.add_argument("--embed-std", type=float, help="std of embed_tokens / lm_head only (default: --init-std)")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--shard", default="5GB", help="max_shard_size for save_pretrained (e.g. 2GB to get shards)")
    ap.add_argument("--tokenizer", help="folder whose tokenizer.json/tokenizer_config.json are copied in")
    a = ap.parse_args()
    make(a.preset, a.out, a.seed, a.init_std, a.dtype, a.shard, a.tokenizer, embed_std=a.embed_std)
    print(f"made {a.preset} in {a.out}")


if __name__ == "__main__":
    main()
