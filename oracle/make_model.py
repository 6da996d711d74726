#!/usr/bin/env python3
"""Make checkpoints with seeded random weights, saved exactly as transformers saves them.

    python3 oracle/make_model.py --preset qwen3-4b --out /tmp/q4b
    python3 oracle/make_model.py --preset tiny-gqa4 --out tests/data/models/tiny-gqa4 --dtype float16
    python3 oracle/make_model.py --preset llama3-8b --layers 3 --out /tmp/l8-3     # a real shape, few layers

Presets are real shapes (Qwen3 0.6B/4B/8B; Llama-3-8B, TinyLlama, Mistral-7B, Qwen2.5-7B, SmolLM3-3B) for speed
and fidelity at scale, and tiny ones (< 1 MB) for correctness tests, awkward on purpose (rope scaling with a
prompt past the original context, windows shorter than the prompt, biases, NoPE layers, GQA 1/4/7). Every
preset names its model_type (qwen3 when it does not); biases, which transformers starts at zero, are drawn
N(0, --bias-std) so that a bias the engine drops shows. Weights: transformers' own init (normal, std = initializer_range = --init-std,
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
from transformers import AutoConfig, AutoModelForCausalLM

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
# The Llama family (engines/llama.cu). Real shapes, as their Hub configs give them.
PRESETS.update({
    "llama3-8b": dict(model_type="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, bos_token_id=128000, eos_token_id=128001),
    "llama3.1-8b": dict(model_type="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                        bos_token_id=128000, eos_token_id=[128001, 128008, 128009]),
    "tinyllama": dict(model_type="llama", vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                      num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "mistral-7b": dict(model_type="mistral", vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, sliding_window=None),
    "qwen2.5-7b": dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False),
    "smollm3-3b": dict(model_type="smollm3", vocab_size=128256, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=65536, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 5000000.0}, tie_word_embeddings=True),
})
# Tiny, awkward members of the family for the committed GPU tests (prompts are 100 tokens).
TINY_L = dict(vocab_size=256, rms_norm_eps=1e-5, max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=None)
PRESETS.update({
    # Llama 3.1 rope scaling whose original context (32) the prompt passes; GQA 7 (7 heads over 1); head_dim 64.
    "tiny-llama3": dict(TINY_L, model_type="llama", hidden_size=112, intermediate_size=160, num_hidden_layers=2,
                        num_attention_heads=7, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    # attention_bias (q/k/v/o) and mlp_bias, linear rope scaling, MHA, tied, head_dim from hidden / heads (64).
    "tiny-llama-bias": dict(TINY_L, model_type="llama", hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True, attention_bias=True,
                            mlp_bias=True, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.5}),
    # dynamic (NTK) rope whose max_position_embeddings (48) the prompt passes; GQA 4.
    "tiny-llama-dynamic": dict(TINY_L, model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=1, head_dim=128, tie_word_embeddings=False,
                               max_position_embeddings=48, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 3.0}),
    # a sliding window (24) shorter than the prompt: masked in prefill and across every decode step; GQA 4.
    "tiny-mistral": dict(TINY_L, model_type="mistral", hidden_size=96, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=64, sliding_window=24, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # q/k/v biases; a sliding window (40) on layer 2 of 3 onwards (max_window_layers 1); MHA; tied.
    "tiny-qwen2": dict(TINY_L, model_type="qwen2", hidden_size=128, intermediate_size=224, num_hidden_layers=3,
                       num_attention_heads=2, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True,
                       use_sliding_window=True, sliding_window=40, max_window_layers=1,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # NoPE layers (no_rope_layers 1, 0, 1, 0) with a window (30) on them, o_proj bias (attention_bias); GQA 2.
    "tiny-smollm3": dict(TINY_L, model_type="smollm3", hidden_size=128, intermediate_size=160, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=128, tie_word_embeddings=True,
                         no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=30, attention_bias=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 2000000.0}),
})
# LFM2 (engines/lfm2.cu): conv and attention layers. The real shape as its Hub config gives it (full_attn_idxs).
LFM2_REAL = dict(model_type="lfm2", vocab_size=65536, max_position_embeddings=128000, norm_eps=1e-5, bos_token_id=1, eos_token_id=7,
                 pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True,
                 conv_L_cache=3, conv_bias=False, block_multiple_of=256, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True)
PRESETS.update({
    "lfm2-1.2b": dict(LFM2_REAL, hidden_size=2048, intermediate_size=12288, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, full_attn_idxs=[2, 5, 8, 10, 12, 14]),
})
PRESETS.update({
    # LFM2-8B-A1B: attention at 2, 6, 10, 14, 18, 21 of 24; two dense layers, then 32 experts, top 4. The router is
    # drawn wider than the init (logit std ~2.5) so that the expert choices are not near ties (see _router_std).
    "lfm2-8b-a1b": dict(LFM2_REAL, model_type="lfm2_moe", hidden_size=2048, intermediate_size=7168, moe_intermediate_size=1792,
                        num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=8, num_experts=32, num_experts_per_tok=4,
                        num_dense_layers=2, use_expert_bias=True, norm_topk_prob=True, routed_scaling_factor=1.0,
                        layer_types=["full_attention" if i in (2, 6, 10, 14, 18, 21) else "conv" for i in range(24)],
                        _router_std=2.5 / 2048 ** 0.5),
})
TINY_LFM = dict(model_type="lfm2", vocab_size=256, norm_eps=1e-5, max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
PRESETS.update({
    # a conv layer first, two attention layers in a row, attention last; GQA 3; the MLP width derived as Lfm2MLP does
    # with a multiplier and an odd multiple (200 -> 133 -> 199 -> 240); tied.
    "tiny-lfm2": dict(TINY_LFM, hidden_size=192, intermediate_size=200, num_hidden_layers=5, num_attention_heads=3,
                      num_key_value_heads=1, layer_types=["conv", "full_attention", "full_attention", "conv", "full_attention"],
                      block_multiple_of=48, block_ffn_dim_multiplier=1.5, block_auto_adjust_ff_dim=True, conv_L_cache=3,
                      tie_word_embeddings=True),
    # biases on in_proj, the conv and out_proj; 4 taps; attention first and last (full_attn_idxs only, as older
    # configs say it: layer_types is dropped from config.json); head_dim 128; no MLP adjustment; untied.
    "tiny-lfm2-bias": dict(TINY_LFM, hidden_size=128, intermediate_size=136, num_hidden_layers=4, num_attention_heads=1,
                           num_key_value_heads=1, full_attn_idxs=[0, 3], conv_bias=True, conv_L_cache=4,
                           block_auto_adjust_ff_dim=False, tie_word_embeddings=False, _drop_layer_types=True),
    # lfm2_moe: one dense layer, then 6 experts, top 4 (k does not divide E), a choice bias, renormalised; attention
    # in the middle two layers; the router wide enough that choices are clear (logit std ~2.5).
    "tiny-lfm2-moe": dict(TINY_LFM, model_type="lfm2_moe", hidden_size=128, intermediate_size=96, moe_intermediate_size=40,
                          num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, num_experts=6, num_experts_per_tok=4,
                          num_dense_layers=1, use_expert_bias=True, norm_topk_prob=True, routed_scaling_factor=1.0,
                          layer_types=["conv", "full_attention", "full_attention", "conv"], tie_word_embeddings=True,
                          _router_std=2.5 / 128 ** 0.5),
    # 40 experts (past one warp of the routing kernel), top 3, no choice bias, no renormalisation, a scaling factor;
    # no dense layer; attention last; untied.
    "tiny-lfm2-moe-wide": dict(TINY_LFM, model_type="lfm2_moe", hidden_size=64, intermediate_size=64, moe_intermediate_size=24,
                               num_hidden_layers=3, num_attention_heads=1, num_key_value_heads=1, num_experts=40, num_experts_per_tok=3,
                               num_dense_layers=0, use_expert_bias=False, norm_topk_prob=False, routed_scaling_factor=2.5,
                               layer_types=["conv", "conv", "full_attention"], tie_word_embeddings=False,
                               _router_std=2.5 / 64 ** 0.5),
})
# Qwen3-MoE (engines/qwen3.cu) and Mixtral (engines/llama.cu). Real shapes as their Hub configs give them; the router
# drawn wide enough (logit std ~2.5) that choices are rarely near ties.
PRESETS.update({
    "qwen3-30b-a3b": dict(REAL, model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                          num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                          num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                          tie_word_embeddings=False, _router_std=2.5 / 2048 ** 0.5),
    "mixtral-8x7b": dict(model_type="mixtral", vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, num_local_experts=8, num_experts_per_tok=2,
                         max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=None, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, _router_std=2.5 / 4096 ** 0.5),
    # Dense and sparse layers mixed (mlp_only_layers 0 and 2), 10 experts, top 3 (k does not divide E), renormalised; GQA 2.
    "tiny-qwen3-moe": dict(TINY, model_type="qwen3_moe", vocab_size=256, hidden_size=96, intermediate_size=160, moe_intermediate_size=48,
                           num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=10,
                           num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0, 2],
                           tie_word_embeddings=False, _router_std=2.5 / 96 ** 0.5),
    # Every second layer sparse (decoder_sparse_step 2: layers 1 and 3, less mlp_only_layers [3]), 36 experts (past one
    # warp of the routing kernel), top 5, not renormalised; head_dim 128, GQA 4, tied.
    "tiny-qwen3-moe-step": dict(TINY, model_type="qwen3_moe", vocab_size=256, hidden_size=64, intermediate_size=112,
                                moe_intermediate_size=32, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=1,
                                head_dim=128, num_experts=36, num_experts_per_tok=5, norm_topk_prob=False, decoder_sparse_step=2,
                                mlp_only_layers=[3], tie_word_embeddings=True, _router_std=2.5 / 64 ** 0.5),
    # 5 experts, top 2; a sliding window of 40 (shorter than the 100-token prompt); GQA 4; untied.
    "tiny-mixtral": dict(TINY_L, model_type="mixtral", hidden_size=128, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=64, num_local_experts=5, num_experts_per_tok=2,
                         sliding_window=40, rms_norm_eps=1e-5, tie_word_embeddings=False, _router_std=2.5 / 128 ** 0.5),
})
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def make(preset, out, seed=0, init_std=0.1, dtype="bfloat16", shard="5GB", tokenizer=None, device=None, embed_std=None,
         layers=None, bias_std=0.5):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    kw = dict(PRESETS[preset])
    model_type = kw.pop("model_type", "qwen3")
    drop_layer_types = kw.pop("_drop_layer_types", False)
    router_std = kw.pop("_router_std", None)  # a mixture's router (feed_forward.gate) drawn N(0, this); its choice bias N(0, 0.1)
    if layers:
        kw["num_hidden_layers"] = layers
        for key in ("no_rope_layers", "layer_types"):
            if isinstance(kw.get(key), list):
                kw[key] = kw[key][:layers]
        if isinstance(kw.get("full_attn_idxs"), list):
            kw["full_attn_idxs"] = [i for i in kw["full_attn_idxs"] if i < layers]
    cfg = AutoConfig.for_model(model_type, **kw, initializer_range=init_std)
    # Big presets are built directly in bf16: an 8B fp32 copy would need 32 GB for nothing.
    torch.set_default_dtype(torch.float32 if preset.startswith("tiny") else torch.bfloat16)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg)
    torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p, dtype=torch.float32))
            elif name.endswith(".bias"):
                p.normal_(0.0, bias_std)
            elif embed_std is not None and name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.normal_(0.0, embed_std)
            elif router_std is not None and name.endswith(".gate.weight"):  # feed_forward.gate (LFM2), mlp.gate
                p.normal_(0.0, router_std)
        for name, b in model.named_buffers():
            if name.endswith("expert_bias"):
                b.copy_(0.1 * torch.randn_like(b, dtype=torch.float32))
    model = model.to(DTYPES[dtype])
    os.makedirs(out, exist_ok=True)
    # Saved from host memory: transformers' save re-splits fused tensors (a mixture's experts) with copies that do not
    # fit beside a 93 GB model on the card (Mixtral-8x7B on an H200), and building that model on the CPU instead took
    # over 9 minutes. Small models are saved from where they are.
    if device != "cpu" and sum(p.numel() for p in model.parameters()) > 20e9:
        model = model.to("cpu")
    model.save_pretrained(out, max_shard_size=shard)
    if drop_layer_types:  # the config as older checkpoints write it: which layers attend only as full_attn_idxs
        path = os.path.join(out, "config.json")
        c = json.load(open(path))
        c["full_attn_idxs"] = [i for i, t in enumerate(c.pop("layer_types")) if t == "full_attention"]
        json.dump(c, open(path, "w"), indent=2)
    if tokenizer:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(tokenizer, f)):
                shutil.copy(os.path.join(tokenizer, f), out)
    with open(os.path.join(out, "made_by.json"), "w") as f:
        json.dump(dict(preset=preset, seed=seed, init_std=init_std, embed_std=embed_std, dtype=dtype, layers=layers,
                       bias_std=bias_std, norm_weights="1 + 0.1 N(0,1)"), f, indent=1)
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
    ap.add_argument("--layers", type=int, help="num_hidden_layers instead of the preset's (a real shape, fewer layers)")
    ap.add_argument("--bias-std", type=float, default=0.5, help="std of every bias (transformers starts them at zero)")
    ap.add_argument("--device", help="where to build the weights (default: cuda if present; cpu for models past the card)")
    a = ap.parse_args()
    make(a.preset, a.out, a.seed, a.init_std, a.dtype, a.shard, a.tokenizer, embed_std=a.embed_std, layers=a.layers,
         bias_std=a.bias_std, device=a.device)
    print(f"made {a.preset} in {a.out}")


if __name__ == "__main__":
    main()
