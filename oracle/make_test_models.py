#!/usr/bin/env python3
"""Make the tiny committed test models and their transformers dumps (tests/data/models/<name>/).

    python3 oracle/make_test_models.py tests/data/models [NAME ...]     (all, or only those)

Each model: a tiny-* preset of make_model.py (init std 0.1, embeddings 0.5) with its own storage dtype (so
the loader's BF16, F16 and F32 paths all run; tiny-gpt-oss's experts are MXFP4, and its reference runs on their
decoded values, a twin make_model.py writes to a scratch folder), prompt_ids.txt (100 seeded random ids), and
ref/ = dump.py in float32 with 32 greedy tokens. tests/test_gpu_engine.cu runs the engine on each and compares taps and greedy ids, no Python.
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dump  # noqa: E402
import make_model  # noqa: E402

MODELS = {"tiny-mha": "bfloat16", "tiny-gqa4": "bfloat16", "tiny-gqa8": "float32", "tiny-gqa2": "float16",
          # engines/llama.cu's family, each awkward in its own way (make_model.py says how)
          "tiny-llama3": "bfloat16", "tiny-llama-bias": "float32", "tiny-llama-dynamic": "bfloat16",
          "tiny-mistral": "bfloat16", "tiny-qwen2": "float16", "tiny-smollm3": "bfloat16",
          # engines/lfm2.cu
          "tiny-lfm2": "bfloat16", "tiny-lfm2-bias": "float32", "tiny-lfm2-moe": "bfloat16", "tiny-lfm2-moe-wide": "float16",
          # Qwen3-MoE (engines/qwen3.cu), Mixtral (engines/llama.cu)
          "tiny-qwen3-moe": "bfloat16", "tiny-qwen3-moe-step": "float16", "tiny-mixtral": "float32",
          # engines/gpt_oss.cu: MXFP4 experts as published (the rest bf16), and the experts as transformers saves them
          "tiny-gpt-oss": "bfloat16", "tiny-gpt-oss-plain": "float32"}
PROMPT, GREEDY = 100, 32
EMBED_STD = 0.5  # logit std ~ sqrt(hidden) x 0.5: peaked enough that greedy steps rarely near-tie


# The engine test compares greedy tokens up to the reference's first near-tie (top-2 gap < 0.05) and wants at least 8;
# a model whose greedy run near-ties sooner is drawn again with the next seed (made_by.json keeps the one used).
MIN_CLEAR, CLEAR_GAP, ATTEMPTS = 16, 0.05, 8


def main():
    root, only = sys.argv[1], set(sys.argv[2:])
    for i, (name, dtype) in enumerate(MODELS.items()):
        if only and name not in only:
            continue
        d = os.path.join(root, name)
        for attempt in range(ATTEMPTS):
            with tempfile.TemporaryDirectory() as plain:  # an MXFP4 model's decoded twin, which transformers loads
                make_model.make(name, d, seed=100 + i + 1000 * attempt, dtype=dtype, embed_std=EMBED_STD, plain_out=plain)
                vocab = make_model.PRESETS[name]["vocab_size"]
                ids = np.random.default_rng(200 + i).integers(0, vocab, PROMPT).tolist()
                with open(os.path.join(d, "prompt_ids.txt"), "w") as f:
                    f.write(" ".join(map(str, ids)) + "\n")
                model = dump.load(plain if make_model.PRESETS[name].get("_mxfp4") else d, "float32")
                dump.dump(model, ids, os.path.join(d, "ref"), GREEDY)
            gaps = np.load(os.path.join(d, "ref", "gen_gaps.npy"))
            clear = int(np.argmax(gaps < CLEAR_GAP)) if (gaps < CLEAR_GAP).any() else len(gaps)
            if clear >= MIN_CLEAR:
                break
            print(f"{name}: seed {100 + i + 1000 * attempt} near-ties after {clear} greedy tokens; drawing again")
        size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(d) for f in fs)
        print(f"{name}: {dtype}, {size / 1e6:.2f} MB with its dumps")


if __name__ == "__main__":
    main()
