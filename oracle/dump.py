#!/usr/bin/env python3
"""Run a checkpoint through transformers and write the oracle taps the engines write with --dump-dir.

    python3 oracle/dump.py --model DIR --ids ids.txt --out ref_fp32 --dtype float32 --greedy 32
    python3 oracle/dump.py --model DIR --prompt "def main(" --out ref_bf16 --dtype bfloat16 --greedy 128

Taps (float32 .npy, batch dimension dropped): embed [T, dim], layer_00 .. layer_NN [T, dim] (hidden
state after each decoder layer), final_norm [T, dim], logits [T, vocab], routing_NN [T, k] (a mixture layer's
chosen experts; with --greedy N also those of the N - 1 tokens fed back), all for the prompt positions;
prompt_ids.npy; and with --greedy N, ids.npy (the N greedy tokens, KV cache, no early stop at EOS unless
--stop-at-eos) and gen_gaps.npy (top-1 minus top-2 logit at each greedy step, to tell near-ties apart).
The attention runs in transformers' eager implementation, the plainest reference it has.
"""
import argparse
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def read_ids(path):
    text = open(path).read().replace(",", " ").replace("[", " ").replace("]", " ")
    return [int(t) for t in text.split()]


def load(model_dir, dtype, device="cuda"):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype], attn_implementation="eager", device_map=device)
    # An MXFP4 checkpoint (GPT-OSS) comes back with its experts dequantized to bf16 (exact: E2M1 x 2^e) whatever dtype
    # was asked for; the float32 reference then casts them too, so that every matmul runs in float32.
    if dtype == "float32":
        model = model.float()
    return model.eval()


def add_taps(model, taps):
    """Forward hooks that store each tap as float32 numpy, batch row 0."""
    def keep(name):
        def hook(_module, _inputs, output):
            t = output[0] if isinstance(output, (tuple, list)) else output
            taps[name] = t[0].detach().float().cpu().numpy()
        return hook
    inner = model.model
    final = inner.norm if hasattr(inner, "norm") else inner.embedding_norm  # LFM2 names its final norm so
    handles = [inner.embed_tokens.register_forward_hook(keep("embed")), final.register_forward_hook(keep("final_norm"))]
    for i, layer in enumerate(inner.layers):
        handles.append(layer.register_forward_hook(keep(f"layer_{i:02d}")))
    return handles


def add_routing_taps(model, calls):
    """A mixture layer's chosen experts, [T][k] per forward call, appended to calls["routing_NN"]."""
    handles = []
    for i, layer in enumerate(model.model.layers):
        block = getattr(layer, "feed_forward", None) or getattr(layer, "mlp", None)  # LFM2's name, and the others'
        router = getattr(block, "gate", None) or getattr(block, "router", None)  # GPT-OSS calls it mlp.router
        if router is not None and hasattr(router, "top_k"):  # LFM2-MoE's, Qwen3-MoE's, Mixtral's, GPT-OSS's:
            def keep_choice(_m, _i, out, name=f"routing_{i:02d}"):  # (logits, weights, experts); older GPT-OSS: (weights, experts)
                calls.setdefault(name, []).append(out[2 if len(out) > 2 else 1].detach().float().cpu().numpy())
            handles.append(router.register_forward_hook(keep_choice))
    return handles


@torch.no_grad()
def greedy(model, ids, n, eos=None):
    """n greedy tokens with the KV cache; returns (tokens, top1 - top2 gaps)."""
    device = next(model.parameters()).device
    cur = torch.tensor([ids], device=device)
    past, out, gaps = None, [], []
    for _ in range(n):
        res = model(input_ids=cur, past_key_values=past, use_cache=True)
        logits = res.logits[0, -1].float()
        top = torch.topk(logits, 2)
        tok = int(top.indices[0])
        out.append(tok)
        gaps.append(float(top.values[0] - top.values[1]))
        if eos is not None and tok in eos:
            break
        past = res.past_key_values
        cur = torch.tensor([[tok]], device=device)
    return out, gaps


@torch.no_grad()
def dump(model, ids, out_dir, n_greedy=0, eos=None):
    os.makedirs(out_dir, exist_ok=True)
    taps, calls = {}, {}
    handles = add_taps(model, taps)
    routers = add_routing_taps(model, calls)
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([ids], device=device)).logits[0].float().cpu().numpy()
    for h in handles:
        h.remove()
    taps["logits"] = logits
    for name, arr in taps.items():
        np.save(os.path.join(out_dir, name + ".npy"), arr.astype(np.float32))
    np.save(os.path.join(out_dir, "prompt_ids.npy"), np.array(ids, dtype=np.int32))
    if n_greedy:
        toks, gaps = greedy(model, ids, n_greedy, eos)
        np.save(os.path.join(out_dir, "ids.npy"), np.array(toks, dtype=np.int32))
        np.save(os.path.join(out_dir, "gen_gaps.npy"), np.array(gaps, dtype=np.float32))
    for h in routers:
        h.remove()
    # A mixture's choices cover the greedy steps too: the prompt's rows, then one row per token fed back (greedy's
    # first call re-runs the prompt, the same rows: dropped), so that an engine run with --force-routing follows
    # fp32's choices through the generated tokens as well.
    for name, rows in calls.items():
        taps[name] = np.concatenate([rows[0]] + rows[2:])
        np.save(os.path.join(out_dir, name + ".npy"), taps[name].astype(np.float32))
    return taps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ids", help="file of token ids (whitespace/comma separated or a JSON list)")
    src.add_argument("--prompt", help="text, tokenized with the checkpoint's tokenizer (no special tokens added)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--greedy", type=int, default=0, help="also generate N greedy tokens")
    ap.add_argument("--stop-at-eos", action="store_true", help="stop greedy generation at the config's EOS ids")
    a = ap.parse_args()
    model = load(a.model, a.dtype)
    if a.ids:
        ids = read_ids(a.ids)
    else:
        ids = AutoTokenizer.from_pretrained(a.model).encode(a.prompt, add_special_tokens=False)
    eos = None
    if a.stop_at_eos:
        e = model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None else model.config.eos_token_id
        eos = set(e if isinstance(e, list) else [e])
    dump(model, ids, a.out, a.greedy, eos)
    print(f"dumped {len(ids)} prompt tokens of {a.model} ({a.dtype}) to {a.out}")


if __name__ == "__main__":
    main()
