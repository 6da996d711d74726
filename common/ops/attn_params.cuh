// ops/attn_params.cuh — the options a family's attention adds to plain causal softmax attention, in one struct
// that the prefill attention (attention.cuh) and Flash-Decoding (flash_decode.cuh) both take.
//
// Usage:
//   AttnParams p;            // full causal attention over every earlier position
//   p.window = 4096;         // sliding window (Mistral, Qwen2 / Qwen3 sliding layers, GPT-OSS): a query at
//                            // position i sees keys j with i - window < j <= i, transformers' mask
//   attn_params_check(p, "prefill_attention");   // die()s on an option its kernels do not implement yet
//
// Options the next families need are fields here, so that they reach every attention kernel the same way:
// sinks (GPT-OSS: one learned logit per query head that joins the softmax denominator and drops out of the sum,
// out = sum_j e^(s_j) v_j / (sum_j e^(s_j) + e^(sink)); both kernels add it to their final denominator), and softcap
// (Gemma 2: scores s -> c tanh(s / c)), declared and refused by attn_params_check until its kernels exist.
//
// KV eviction (ops/h2o.cuh) is not a family's option but the runtime's; the kit's attention layer sets its three
// fields, which change where a position's keys live (kv_row) and make the kernels record what H2O accumulates.
#pragma once

#include "host/errors.h"

namespace monocu {

struct AttnParams {
    int window = 0;                // 0: full causal; W > 0: keys (i - W, i] for a query at position i
    float softcap = 0.f;           // not implemented yet (attn_params_check refuses it)
    const float* sinks = nullptr;  // [n_heads] fp32 on the device, in the scores' natural-log units, or null
    // KV eviction (h2o.cuh), set by runtime/attention_layer.cuh:
    int kv_budget = 0;              // 0: position p lives in cache row p. N > 0: the cache keeps at most N rows between
                                    // passes, so a pass whose first token is at p writes rows min(p, N) onwards (kv_row)
    float* h2o_scores = nullptr;    // decode: each key's score q.k (log2 units, as the softmax takes it) [n_heads][rows]
    float2* h2o_stats = nullptr;    // each query's softmax (max, sum): decode [n_heads], prefill [T][n_heads]
};

// The cache row of the first token of a pass at position pos (every later token of the pass follows it): pos, or with
// KV eviction keeping `budget` rows between passes (h2o.cuh), at most budget.
__host__ __device__ __forceinline__ int kv_row(int budget, int pos) { return budget > 0 && pos > budget ? budget : pos; }
__host__ __device__ __forceinline__ int kv_row(const AttnParams& p, int pos) { return kv_row(p.kv_budget, pos); }

inline void attn_params_check(const AttnParams& p, const char* who) {
    if (p.window < 0) die("%s: sliding window %d is negative", who, p.window);
    if (p.softcap != 0.f) die("%s: attention logit softcapping is not implemented", who);
    if (p.kv_budget < 0) die("%s: KV budget %d is negative", who, p.kv_budget);
    if (p.kv_budget > 0 && p.sinks) die("%s: KV eviction (--kv-budget) with attention sinks is not implemented", who);
    if (p.kv_budget > 0 && p.window > 0) die("%s: KV eviction (--kv-budget) on a sliding-window layer is not implemented", who);
}

// A head's sink in the kernels' log2 units (their scores are q.k / sqrt(d) times log2 e): 2^(this - m) joins the sum.
__device__ __forceinline__ float attn_sink_log2(const AttnParams& p, int head) { return p.sinks[head] * 1.4426950408889634f; }

// The first key a query at position pos may see.
__host__ __device__ __forceinline__ int attn_first_key(const AttnParams& p, int pos) {
    return p.window > 0 && pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
}

}  // namespace monocu
