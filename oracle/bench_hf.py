#!/usr/bin/env python3
"""transformers on the same checkpoint, timed the way `qwen3 --bench` times itself, for a side-by-side line.

    python3 oracle/bench_hf.py --model DIR --n-prompt 512 -n 128 [--attn eager|sdpa]

A random prompt of --n-prompt tokens (seeded), a timed prefill (one forward pass), then -n greedy decode
steps with the KV cache, one token at a time, synchronised per token like an interactive loop.
bf16 weights, eager attention by default (transformers' reference path).
"""
import argparse
import time

import torch
from transformers import AutoModelForCausalLM


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--attn", default="eager")
    a = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation=a.attn).cuda().eval()
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, model.config.vocab_size, (1, a.n_prompt), generator=g).cuda()

    def run():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = model(input_ids=ids, use_cache=True)
        tok = res.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        past = res.past_key_values
        for _ in range(a.n):
            res = model(input_ids=tok, past_key_values=past, use_cache=True)
            past = res.past_key_values
            tok = res.logits[:, -1].argmax(-1, keepdim=True)
            tok.item()  # the host needs each token, as a chat loop does
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    run()  # warm-up
    pre, dec = run()
    print(f"hf ({a.attn}, bf16): prefill {a.n_prompt} tokens: {1000 * pre:.2f} ms, {a.n_prompt / pre:.1f} tok/s")
    print(f"hf ({a.attn}, bf16): decode {a.n} tokens: {1000 * dec / a.n:.3f} ms/tok, {a.n / dec:.2f} tok/s")


if __name__ == "__main__":
    main()
