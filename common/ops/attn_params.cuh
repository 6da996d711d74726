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
// softcap (Gemma 2: scores s -> c tanh(s / c)) and sinks (GPT-OSS: one learned logit per head that joins the
// softmax denominator) are declared, and refused by attn_params_check until their kernels exist.
#pragma once

#include "host/errors.h"

namespace monocu {

struct AttnParams {
    int window = 0;                // 0: full causal; W > 0: keys (i - W, i] for a query at position i
    float softcap = 0.f;           // not implemented yet (attn_params_check refuses it)
    const float* sinks = nullptr;  // [n_heads] not implemented yet (attn_params_check refuses it)
};

inline void attn_params_check(const AttnParams& p, const char* who) {
    if (p.window < 0) die("%s: sliding window %d is negative", who, p.window);
    if (p.softcap != 0.f) die("%s: attention logit softcapping is not implemented", who);
    if (p.sinks) die("%s: attention sinks are not implemented", who);
}

// The first key a query at position pos may see.
__host__ __device__ __forceinline__ int attn_first_key(const AttnParams& p, int pos) {
    return p.window > 0 && pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
}

}  // namespace monocu
