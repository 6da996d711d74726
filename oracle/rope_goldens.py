#!/usr/bin/env python3
"""transformers' rope frequencies and attention scaling for the rope types the kit implements, as goldens for the
host test (tests/test_rope.cpp reads tests/data/rope_goldens.json when it is there).

    python3 oracle/rope_goldens.py --out tests/data/rope_goldens.json

Each case: a config (model_type, head_dim, rope parameters, max_position_embeddings) and what transformers'
ROPE_INIT_FUNCTIONS gives for it on the CPU in float32: inv_freq and attention_scaling.
"""
import argparse
import json

import torch
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

CASES = [
    # GPT-OSS's own rope_scaling: YaRN, no truncation
    dict(name="gpt-oss yarn", model_type="gpt_oss", head_dim=64, num_attention_heads=64, hidden_size=2880, max_position_embeddings=131072,
         rope=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                   original_max_position_embeddings=4096)),
    # Qwen3 with YaRN switched on for long context (the Qwen3 model cards' recipe), truncate at its default
    dict(name="qwen3 yarn x4", model_type="qwen3", head_dim=128, num_attention_heads=32, hidden_size=4096, max_position_embeddings=131072,
         rope=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0, original_max_position_embeddings=32768)),
    # mscale / mscale_all_dim (DeepSeek-style), an explicit attention_factor, no factor (derived)
    dict(name="yarn mscale", model_type="qwen3", head_dim=64, num_attention_heads=8, hidden_size=512, max_position_embeddings=65536,
         rope=dict(rope_type="yarn", rope_theta=10000.0, factor=16.0, mscale=1.0, mscale_all_dim=0.707,
                   original_max_position_embeddings=4096)),
    dict(name="yarn attention_factor", model_type="qwen3", head_dim=64, num_attention_heads=8, hidden_size=512, max_position_embeddings=8192,
         rope=dict(rope_type="yarn", rope_theta=10000.0, factor=2.0, attention_factor=1.25, beta_fast=16.0, beta_slow=2.0,
                   original_max_position_embeddings=4096)),
    # the kit's older types, for completeness
    dict(name="llama3", model_type="llama", head_dim=128, num_attention_heads=32, hidden_size=4096, max_position_embeddings=131072,
         rope=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=8192)),
    dict(name="linear", model_type="llama", head_dim=64, num_attention_heads=8, hidden_size=512, max_position_embeddings=8192,
         rope=dict(rope_type="linear", rope_theta=10000.0, factor=2.0)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = []
    for c in CASES:
        kw = dict(head_dim=c["head_dim"], num_attention_heads=c["num_attention_heads"], hidden_size=c["hidden_size"],
                  max_position_embeddings=c["max_position_embeddings"], rope_parameters=dict(c["rope"]))
        if c["model_type"] == "gpt_oss":
            kw["rope_scaling"] = dict(c["rope"])
        cfg = AutoConfig.for_model(c["model_type"], **kw)
        fn = ROPE_INIT_FUNCTIONS[c["rope"]["rope_type"]]
        inv, scale = fn(cfg, "cpu")
        out.append(dict(name=c["name"], head_dim=c["head_dim"], max_position_embeddings=c["max_position_embeddings"], rope=c["rope"],
                        inv_freq=[float(x) for x in inv.float().tolist()], attention_scaling=float(scale)))
        print(f"{c['name']}: attention scaling {float(scale):.6f}, inv_freq[0..3] {[round(float(x), 8) for x in inv[:4]]}")
    json.dump(dict(transformers=__import__("transformers").__version__, cases=out), open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
