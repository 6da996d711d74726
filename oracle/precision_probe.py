#!/usr/bin/env python3
"""Which bf16 rounding in the engine's prefill costs the most fidelity? A float32 transformers run with
chosen roundings put back, measured against the plain float32 run.

    python3 oracle/precision_probe.py --model DIR --ids ids.txt [--sets "norm_in attn_out act qkv p all"]

The engine keeps the residual stream and every accumulation in float32; what it rounds to bf16 is:
  norm_in   the RMSNorm outputs that feed q/k/v and gate/up (the cuBLAS GEMMs' A operand)
  attn_out  the attention output that feeds o_proj
  act       the SwiGLU output that feeds down_proj
  q, k, v   queries, keys and values as attention reads them (qkv: all three)
  p         the softmax numerators 2^(s - m) as the A operand of P V (the row sums stay float32)
Each set (points joined by '+', or 'all') is one forward pass; the table gives rel-L2 against float32 at a
few layers and at final_norm, the tap where the engine's error peaks. A point rounds to --dtype, or to
float16 when written POINT:f16 (what that format would buy).
"""
import argparse

import torch
import transformers.models.qwen3.modeling_qwen3 as qwen3_module
from transformers import AutoModelForCausalLM

POINTS = ("norm_in", "attn_out", "act", "q", "k", "v", "p")
ACTIVE = {}  # point -> dtype it rounds to
ROUND_TO = [torch.bfloat16]
CALLS = [0]


def rounded(x, point):
    return x.to(ACTIVE[point]).float() if point in ACTIVE else x


def probe_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Causal softmax attention with GQA, float32, rounding where the engine's kernel does."""
    CALLS[0] += 1
    q, k, v = rounded(query, "q"), rounded(key, "k"), rounded(value, "v")
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.matmul(q, k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            s = s.masked_fill(~attention_mask[..., : k.shape[2]], float("-inf"))
        else:
            s = s + attention_mask[..., : k.shape[2]]
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    out = torch.matmul(rounded(p, "p"), v) / p.sum(dim=-1, keepdim=True)
    return out.transpose(1, 2).contiguous(), None


def install_rounding_hooks(model):
    def round_input(point):
        def hook(_module, args):
            return (rounded(args[0], point),) + tuple(args[1:])
        return hook
    for layer in model.model.layers:
        at, mlp = layer.self_attn, layer.mlp
        for lin in (at.q_proj, at.k_proj, at.v_proj, mlp.gate_proj, mlp.up_proj):
            lin.register_forward_pre_hook(round_input("norm_in"))
        at.o_proj.register_forward_pre_hook(round_input("attn_out"))
        mlp.down_proj.register_forward_pre_hook(round_input("act"))
    qwen3_module.eager_attention_forward = probe_attention


def add_taps(model, store):
    """Forward hooks keeping the hidden state after each layer, then final_norm, float32 on the GPU."""
    def keep(i):
        def hook(_module, _inputs, output):
            store[i] = (output[0] if isinstance(output, (tuple, list)) else output)[0].float()
        return hook
    layers = model.model.layers
    for i, layer in enumerate(layers):
        layer.register_forward_hook(keep(i))
    model.model.norm.register_forward_hook(keep(len(layers)))


@torch.no_grad()
def taps(model, ids, store):
    store.clear()
    model(input_ids=ids)
    return [store[i] for i in range(len(store))]


def parse_set(name, default_dtype):
    """'all', 'none' or POINT[:f16]+POINT[:f16]... -> {point: dtype}."""
    if name in ("all", "none"):
        return {p: default_dtype for p in POINTS} if name == "all" else {}
    chosen = {}
    for item in name.split("+"):
        point, _, fmt = item.partition(":")
        if fmt not in ("", "f16"):
            raise SystemExit(f"precision_probe: unknown format '{fmt}' in '{item}' (only :f16)")
        dtype = torch.float16 if fmt else default_dtype
        members = ("q", "k", "v") if point == "qkv" else (point,)
        for m in members:
            if m not in POINTS:
                raise SystemExit(f"precision_probe: unknown rounding point '{m}'; known: {POINTS} and qkv")
            chosen[m] = dtype
    return chosen


def rel_l2(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="file of whitespace-separated token ids")
    ap.add_argument("--sets", default="none " + " ".join(POINTS) + " all")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 here
    ROUND_TO[0] = getattr(torch, a.dtype)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager", device_map="cuda").eval()
    ids = torch.tensor([[int(t) for t in open(a.ids).read().split()]], device="cuda")
    store = {}
    add_taps(model, store)
    ref = taps(model, ids, store)  # plain transformers, before any patching
    install_rounding_hooks(model)
    n = len(ref)
    cols = [0, n // 4, n // 2, 3 * n // 4, n - 2, n - 1]
    print(f"rounding to {a.dtype}; rel-L2 vs float32 at taps " + ", ".join("final_norm" if c == n - 1 else f"layer_{c:02d}" for c in cols))
    for name in a.sets.split():
        ACTIVE.clear()
        ACTIVE.update(parse_set(name, ROUND_TO[0]))
        CALLS[0] = 0
        got = taps(model, ids, store)
        if CALLS[0] == 0:
            raise SystemExit("precision_probe: the patched attention was never called (transformers changed its dispatch)")
        print(f"{name:>44}  " + "  ".join(f"{rel_l2(got[c], ref[c]):.3e}" for c in cols))


if __name__ == "__main__":
    main()
