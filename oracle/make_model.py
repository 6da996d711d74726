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
GPT-OSS presets (model_type gpt_oss) keep their experts as OpenAI publishes them, MXFP4 (oracle/mxfp4.py), unless
the preset says plain (tiny-gpt-oss-plain: fused, as transformers saves them). The tiny MXFP4 one is built as a
transformers model whose experts are then quantized and given back their decoded values, so that transformers and
the engine compute with the same weights; --plain-out DIR writes that decoded model for dump.py. The real shapes
(gpt-oss-20b / -120b, for speed) are streamed tensor by tensor to the published layout (bf16, MXFP4 experts,
shards of --shard), never a transformers model: the 120B would not fit; at 65 GB it also fills a card's disk, so
give it --layers (e.g. 24).

    python3 oracle/make_model.py --preset gpt-oss-120b --layers 24 --out /tmp/oss120-24 --shard 4GB
    python3 oracle/make_model.py --preset tiny-gpt-oss --out /tmp/tiny-oss --plain-out /tmp/tiny-oss-plain

Runs on the GPU machine (torch 2.11, transformers 5.x); on a CPU it works too, slowly.
"""
import argparse
import json
import os
import re
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxfp4  # noqa: E402

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
# GPT-OSS (engines/gpt_oss.cu): attention sinks, q/k/v/o biases, sliding (128) and full layers in turn, yarn rope
# without truncation, a biased router whose top-k softmax weights the experts, experts with biases and a clamped
# SwiGLU (limit 7, alpha 1.702: transformers' GptOssExperts hard-codes both, whatever swiglu_limit says), stored as
# OpenAI publishes them: MXFP4 blocks and scales (_mxfp4; oracle/mxfp4.py). The real shapes are streamed tensor by
# tensor to their checkpoint (make_gpt_oss_streamed: the 120B does not fit as a transformers model). Sinks are drawn
# N(0, _sinks_std) (large enough to move the attention output), the router wide (_router_std) so that choices are
# clear, and the tiny ones' gate_up weights wide (_gate_up_std: gate/up std ~5) so that the clamps bite.
GPT_OSS_ROPE = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "original_max_position_embeddings": 4096, "truncate": False}
GPT_OSS = dict(model_type="gpt_oss", vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_attention_heads=64,
               num_key_value_heads=8, head_dim=64, num_experts_per_tok=4, sliding_window=128, max_position_embeddings=131072,
               rms_norm_eps=1e-5, attention_bias=True, swiglu_limit=7.0, tie_word_embeddings=False, bos_token_id=None,
               eos_token_id=200002, pad_token_id=199999, rope_parameters=GPT_OSS_ROPE, _mxfp4=True, _sinks_std=1.5,
               _router_std=2.5 / 2880 ** 0.5)
GPT_OSS_EOS = [200002, 199999, 200012]  # generation_config.json's, as published


def _alternating(n):
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


PRESETS.update({
    "gpt-oss-20b": dict(GPT_OSS, num_hidden_layers=24, num_local_experts=32, layer_types=_alternating(24)),
    "gpt-oss-120b": dict(GPT_OSS, num_hidden_layers=36, num_local_experts=128, layer_types=_alternating(36)),
    # MXFP4 experts; a window (16) far shorter than the prompt on layers 0 and 2; GQA 3; 7 experts, top 3; yarn
    # whose original context (32) the prompt passes; hidden 96 = 3 MXFP4 blocks, expert width 64 = 2. Here and in
    # -plain, max_position_embeddings / original (16, 8) is not the factor: transformers 5 uses the factor (and warns).
    "tiny-gpt-oss": dict(GPT_OSS, vocab_size=256, hidden_size=96, intermediate_size=64, num_hidden_layers=3,
                         layer_types=["sliding_attention", "full_attention", "sliding_attention"], sliding_window=16,
                         num_attention_heads=6, num_key_value_heads=2, head_dim=64, num_local_experts=7, num_experts_per_tok=3,
                         max_position_embeddings=512, eos_token_id=2, pad_token_id=None,
                         rope_parameters=dict(GPT_OSS_ROPE, factor=4.0, original_max_position_embeddings=32),
                         _router_std=2.5 / 96 ** 0.5, _gate_up_std=5.0 / 96 ** 0.5),
    # the experts as transformers saves them (fused, input-major, gate/up interleaved; float32 here), not MXFP4; full
    # attention first, then a window of 24; MHA; top 4 of 4 (every expert); expert width (96) past hidden (64).
    "tiny-gpt-oss-plain": dict(GPT_OSS, vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                               layer_types=["full_attention", "sliding_attention"], sliding_window=24, num_attention_heads=4,
                               num_key_value_heads=4, head_dim=64, num_local_experts=4, num_experts_per_tok=4,
                               max_position_embeddings=512, eos_token_id=2, pad_token_id=None,
                               rope_parameters=dict(GPT_OSS_ROPE, factor=2.0, original_max_position_embeddings=64),
                               _mxfp4=False, _router_std=2.5 / 64 ** 0.5, _gate_up_std=5.0 / 64 ** 0.5),
})
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
MXFP4_CONFIG = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                    "model.embed_tokens", "lm_head"]}


def make(preset, out, seed=0, init_std=0.1, dtype="bfloat16", shard="5GB", tokenizer=None, device=None, embed_std=None,
         layers=None, bias_std=0.5, plain_out=None):
    """Returns the model (None for a streamed one). An MXFP4 preset also writes, to plain_out if given, its decoded
    weights as transformers saves them: the checkpoint for dump.py, since transformers may not load MXFP4 without its
    GPU kernels; the values are those the engine decodes."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    kw = dict(PRESETS[preset])
    model_type = kw.pop("model_type", "qwen3")
    drop_layer_types = kw.pop("_drop_layer_types", False)
    router_std = kw.pop("_router_std", None)  # a mixture's router (feed_forward.gate) drawn N(0, this); its choice bias N(0, 0.1)
    mxfp4_experts = kw.pop("_mxfp4", False)
    sinks_std = kw.pop("_sinks_std", None)
    gate_up_std = kw.pop("_gate_up_std", None)
    if layers:
        kw["num_hidden_layers"] = layers
        for key in ("no_rope_layers", "layer_types"):
            if isinstance(kw.get(key), list):
                kw[key] = kw[key][:layers]
        if isinstance(kw.get("full_attn_idxs"), list):
            kw["full_attn_idxs"] = [i for i in kw["full_attn_idxs"] if i < layers]
    cfg = AutoConfig.for_model(model_type, **kw, initializer_range=init_std)
    made_by = dict(preset=preset, seed=seed, init_std=init_std, embed_std=embed_std, dtype=dtype, layers=layers,
                   bias_std=bias_std, norm_weights="1 + 0.1 N(0,1)")
    gpt_oss = model_type == "gpt_oss"
    if gpt_oss:
        made_by.update(sinks_std=sinks_std, router_std=router_std, gate_up_std=gate_up_std, mxfp4_experts=mxfp4_experts)
    if gpt_oss and not preset.startswith("tiny"):
        made_by.update(dtype="bfloat16", streamed=True)
        return make_gpt_oss_streamed(cfg, out, init_std, embed_std, bias_std, sinks_std, router_std, shard, tokenizer,
                                     device, made_by)
    # Big presets are built directly in bf16: an 8B fp32 copy would need 32 GB for nothing.
    torch.set_default_dtype(torch.float32 if preset.startswith("tiny") else torch.bfloat16)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg)
    torch.set_default_dtype(torch.float32)
    model.eval()
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
            elif gpt_oss:  # the fused experts' biases end in _bias; the rest transformers may init its own way
                if name.endswith("_bias"):
                    p.normal_(0.0, bias_std)
                elif name.endswith(".sinks"):
                    p.normal_(0.0, sinks_std)
                elif name.endswith("mlp.router.weight"):
                    p.normal_(0.0, router_std or init_std)
                elif name.endswith("experts.gate_up_proj"):
                    p.normal_(0.0, gate_up_std or init_std)
                elif name.endswith("experts.down_proj"):
                    p.normal_(0.0, init_std)
        for name, b in model.named_buffers():
            if name.endswith("expert_bias"):
                b.copy_(0.1 * torch.randn_like(b, dtype=torch.float32))
    quantized = {}
    if gpt_oss:
        if mxfp4_experts:
            quantized = quantize_experts(model, cfg, DTYPES[dtype])
        check_experts(model, cfg, quantized)
        report_gpt_oss(model, cfg, seed)
    model = model.to(DTYPES[dtype])
    os.makedirs(out, exist_ok=True)
    # Saved from host memory: transformers' save re-splits fused tensors (a mixture's experts) with copies that do not
    # fit beside a 93 GB model on the card (Mixtral-8x7B on an H200), and building that model on the CPU instead took
    # over 9 minutes. Small models are saved from where they are.
    if device != "cpu" and sum(p.numel() for p in model.parameters()) > 20e9:
        model = model.to("cpu")
    model.save_pretrained(out, max_shard_size=shard)
    if quantized:
        if plain_out:
            model.save_pretrained(plain_out, max_shard_size=shard)
        write_mxfp4_checkpoint(model, quantized, out)
    if drop_layer_types:  # the config as older checkpoints write it: which layers attend only as full_attn_idxs
        path = os.path.join(out, "config.json")
        c = json.load(open(path))
        c["full_attn_idxs"] = [i for i, t in enumerate(c.pop("layer_types")) if t == "full_attention"]
        json.dump(c, open(path, "w"), indent=2)
    copy_tokenizer(tokenizer, out)
    with open(os.path.join(out, "made_by.json"), "w") as f:
        json.dump(made_by, f, indent=1)
    return model


def copy_tokenizer(tokenizer, out):
    if tokenizer:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(tokenizer, f)):
                shutil.copy(os.path.join(tokenizer, f), out)


# ---- gpt-oss ----

EXPERT_MATRICES = ("gate_up_proj", "down_proj")


def expert_rows(experts, cfg):
    """(gate_up [E][2I][H], down [E][H][I]) as views whose rows are output features (gate_up's even rows gate, odd
    rows up), the published layout, whichever way this transformers holds them (5.x: input-major, [E][H][2I])."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    gu, dn = experts.gate_up_proj, experts.down_proj
    if tuple(gu.shape[1:]) == (2 * I, H) and H != 2 * I:
        transposed = False
    elif tuple(gu.shape[1:]) == (H, 2 * I):
        transposed = True
    else:
        raise ValueError(f"gate_up_proj {tuple(gu.shape)} for hidden {H}, expert width {I}")
    assert tuple(dn.shape[1:]) == ((I, H) if transposed else (H, I)), tuple(dn.shape)
    return (gu.transpose(1, 2), dn.transpose(1, 2)) if transposed else (gu, dn)


@torch.no_grad()
def quantize_experts(model, cfg, storage):
    """Every layer's experts to MXFP4; the parameters get the decoded values back, so that transformers computes with
    exactly what the engine reads. Returns the published tensors (uint8, on the CPU) by name."""
    out = {}
    for i, layer in enumerate(model.model.layers):
        for name, rows in zip(EXPERT_MATRICES, expert_rows(layer.mlp.experts, cfg)):
            blocks, scales = mxfp4.quantize_rows(rows)
            decoded = mxfp4.dequantize(blocks, scales)
            assert torch.equal(decoded.to(storage).float(), decoded), f"layer {i} {name}: a decoded weight is not exact in {storage}"
            rows.copy_(decoded)  # a view of the parameter
            out[f"model.layers.{i}.mlp.experts.{name}_blocks"] = blocks.cpu()
            out[f"model.layers.{i}.mlp.experts.{name}_scales"] = scales.cpu()
    return out


@torch.no_grad()
def check_experts(model, cfg, quantized):
    """Each layer's MLP computed here from the tensors as the engine reads them (the published MXFP4 ones where there
    are, else the parameters in the published orientation) must match transformers' own: guards this file's reading
    of the layout (orientation, gate/up interleave, clamps, router softmax over the top k)."""
    device = next(model.parameters()).device
    x = torch.randn(1, 9, cfg.hidden_size, device=device)
    k, limit, alpha = cfg.num_experts_per_tok, 7.0, 1.702
    for i, layer in enumerate(model.model.layers):
        mlp, pre = layer.mlp, f"model.layers.{i}.mlp.experts."
        if quantized:
            gu, dn = (mxfp4.dequantize(quantized[pre + n + "_blocks"], quantized[pre + n + "_scales"]).to(device)
                      for n in EXPERT_MATRICES)
        else:
            gu, dn = expert_rows(mlp.experts, cfg)
        want = mlp(x)
        want = (want[0] if isinstance(want, (tuple, list)) else want)[0].float()
        top, idx = torch.topk(x[0] @ mlp.router.weight.T + mlp.router.bias, k, dim=-1)
        weights = torch.softmax(top, dim=-1)
        got = torch.zeros_like(x[0])
        for t in range(x.shape[1]):
            for j in range(k):
                e = int(idx[t, j])
                h = gu[e].float() @ x[0, t] + mlp.experts.gate_up_proj_bias[e]
                gate, up = h[0::2].clamp(max=limit), h[1::2].clamp(-limit, limit)
                y = dn[e].float() @ ((up + 1) * gate * torch.sigmoid(alpha * gate)) + mlp.experts.down_proj_bias[e]
                got[t] += weights[t, j] * y
        err = float((got - want).abs().max() / want.abs().max())
        assert err < 1e-3, f"layer {i}: the MLP from the published layout differs from transformers' by {err:.3g} of its max"
    print(f"experts: the published layout gives transformers' MLP output ({'MXFP4' if quantized else 'plain'}, {i + 1} layers)")


@torch.no_grad()
def report_gpt_oss(model, cfg, seed, n=100):
    """How much the awkward parts matter on a random prompt: how often the SwiGLU clamps bite (over every expert, not
    only the chosen ones), and how far the logits move without the sinks."""
    device = next(model.parameters()).device
    ids = torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(seed)).to(device)
    seen = []
    hooks = [layer.mlp.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append((args[0] if args else kwargs["hidden_states"]).reshape(-1, cfg.hidden_size)),
        with_kwargs=True) for layer in model.model.layers]
    logits = model(input_ids=ids).logits[0].float()
    for h in hooks:
        h.remove()
    for i, (layer, x) in enumerate(zip(model.model.layers, seen)):
        gu, _ = expert_rows(layer.mlp.experts, cfg)
        h = torch.einsum("th,ejh->etj", x.float(), gu.float()) + layer.mlp.experts.gate_up_proj_bias.float()[:, None, :]
        gate, up = h[..., 0::2], h[..., 1::2]
        print(f"layer {i}: gate > 7 in {float((gate > 7).float().mean()):.1%}, up outside [-7, 7] in "
              f"{float((up.abs() > 7).float().mean()):.1%} (every expert, {n} tokens)")
    sinks = [layer.self_attn.sinks.clone() for layer in model.model.layers]
    for layer in model.model.layers:
        layer.self_attn.sinks.fill_(-1e4)
    moved = (model(input_ids=ids).logits[0].float() - logits).abs()
    for layer, s in zip(model.model.layers, sinks):
        layer.self_attn.sinks.copy_(s)
    print(f"sinks: without them the logits move by {float(moved.max()):.2f} at most, {float(moved.mean()):.2f} on "
          f"average (logit std {float(logits.std()):.2f})")


def write_mxfp4_checkpoint(model, quantized, out):
    """Replace the fused experts that save_pretrained wrote with the published MXFP4 tensors (biases and everything else
    as saved, in the storage dtype), and declare the quantization as the published config.json does."""
    index = os.path.join(out, "model.safetensors.index.json")
    assert not os.path.exists(index), "an MXFP4 preset is small enough for one file"
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()
               if not k.endswith(tuple(f"experts.{n}" for n in EXPERT_MATRICES))}
    tensors.update(quantized)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    path = os.path.join(out, "config.json")
    c = json.load(open(path))
    c["quantization_config"] = MXFP4_CONFIG
    json.dump(c, open(path, "w"), indent=2)


def _bytes(size):
    """'5GB' -> 5e9, as transformers' max_shard_size reads it (GiB/MiB binary)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMG]i?B)?\s*", size, re.I)
    assert m, f"a size like 5GB, not {size!r}"
    unit = (m.group(2) or "B").upper()
    return int(float(m.group(1)) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KIB": 2 ** 10, "MIB": 2 ** 20, "GIB": 2 ** 30}[unit])


@torch.no_grad()
def make_gpt_oss_streamed(cfg, out, init_std, embed_std, bias_std, sinks_std, router_std, shard, tokenizer, device, made_by):
    """A real gpt-oss shape written straight to its published checkpoint (bf16, MXFP4 experts, shards of about
    --shard with model.safetensors.index.json), tensor by tensor on the GPU: the 120B (117B parameters) cannot be a
    transformers model in memory. The same init rules as make(); no transformers reference comes with it."""
    os.makedirs(out, exist_ok=True)
    H, I, E = cfg.hidden_size, cfg.intermediate_size, cfg.num_local_experts
    nh, nkv, hd, V = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size
    bf16 = torch.bfloat16

    def normal(shape, std):
        return (torch.randn(shape, device=device, dtype=torch.float32) * std).to(bf16).cpu()

    def norm_weight():
        return (1 + 0.1 * torch.randn(H, device=device)).to(bf16).cpu()

    def experts(rows, cols, std):  # [E][rows][cols] N(0, std) -> MXFP4, a few experts at a time on the card
        blocks = torch.empty(E, rows, cols // 32, 16, dtype=torch.uint8)
        scales = torch.empty(E, rows, cols // 32, dtype=torch.uint8)
        step = max(1, (1 << 27) // (rows * cols))
        for e in range(0, E, step):
            w = torch.randn(min(step, E - e), rows, cols, device=device) * std
            b, s = mxfp4.quantize_rows(w)
            blocks[e:e + step], scales[e:e + step] = b.cpu(), s.cpu()
        return blocks, scales

    limit, shards, current, weight_map, total = _bytes(shard), [], {}, {}, 0

    def flush():
        nonlocal current
        if current:
            name = f"tmp-{len(shards):05d}.safetensors"
            save_file(current, os.path.join(out, name), metadata={"format": "pt"})
            shards.append((name, list(current)))
            current = {}

    def add(tensors):
        nonlocal total
        current.update(tensors)
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        if sum(t.numel() * t.element_size() for t in current.values()) >= limit:
            flush()

    add({"model.embed_tokens.weight": normal((V, H), embed_std or init_std)})
    for i in range(cfg.num_hidden_layers):
        p, t = f"model.layers.{i}.", {}
        for proj, rows, cols in (("q_proj", nh * hd, H), ("k_proj", nkv * hd, H), ("v_proj", nkv * hd, H), ("o_proj", H, nh * hd)):
            t[p + f"self_attn.{proj}.weight"] = normal((rows, cols), init_std)
            t[p + f"self_attn.{proj}.bias"] = normal((rows,), bias_std)
        t[p + "self_attn.sinks"] = normal((nh,), sinks_std)
        t[p + "mlp.router.weight"] = normal((E, H), router_std or init_std)
        t[p + "mlp.router.bias"] = normal((E,), bias_std)
        pe = p + "mlp.experts."
        t[pe + "gate_up_proj_blocks"], t[pe + "gate_up_proj_scales"] = experts(2 * I, H, init_std)
        t[pe + "gate_up_proj_bias"] = normal((E, 2 * I), bias_std)
        t[pe + "down_proj_blocks"], t[pe + "down_proj_scales"] = experts(H, I, init_std)
        t[pe + "down_proj_bias"] = normal((E, H), bias_std)
        t[p + "input_layernorm.weight"] = norm_weight()
        t[p + "post_attention_layernorm.weight"] = norm_weight()
        add(t)
        print(f"layer {i + 1}/{cfg.num_hidden_layers}", end="\r", flush=True)
    add({"model.norm.weight": norm_weight(), "lm_head.weight": normal((V, H), embed_std or init_std)})
    flush()
    if len(shards) == 1:
        os.replace(os.path.join(out, shards[0][0]), os.path.join(out, "model.safetensors"))
    else:
        for k, (name, names) in enumerate(shards):
            final = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            os.replace(os.path.join(out, name), os.path.join(out, final))
            weight_map.update({n: final for n in names})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    cfg.save_pretrained(out)
    path = os.path.join(out, "config.json")
    c = json.load(open(path))
    c.update(architectures=["GptOssForCausalLM"], quantization_config=MXFP4_CONFIG)
    c["dtype"] = "bfloat16"
    if "torch_dtype" in c:
        c["torch_dtype"] = "bfloat16"
    json.dump(c, open(path, "w"), indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": GPT_OSS_EOS, "pad_token_id": cfg.pad_token_id}, f, indent=2)
    copy_tokenizer(tokenizer, out)
    with open(os.path.join(out, "made_by.json"), "w") as f:
        json.dump(made_by, f, indent=1)
    print(f"{cfg.num_hidden_layers} layers, {total / 1e9:.1f} GB in {len(shards)} file(s)")
    return None


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
    ap.add_argument("--plain-out", help="an MXFP4 tiny preset: also write its decoded weights here, as transformers saves "
                                        "them (the checkpoint dump.py loads)")
    a = ap.parse_args()
    make(a.preset, a.out, a.seed, a.init_std, a.dtype, a.shard, a.tokenizer, embed_std=a.embed_std, layers=a.layers,
         bias_std=a.bias_std, device=a.device, plain_out=a.plain_out)
    print(f"made {a.preset} in {a.out}")


if __name__ == "__main__":
    main()
