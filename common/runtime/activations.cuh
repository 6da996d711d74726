// runtime/activations.cuh — the activation buffers of a pre-norm decoder's forward pass (Llama, Qwen3 and
// their kin share them), sized for the runner's largest pass.
//
// Usage:
//   DecoderActivations s = decoder_activations(rt, dim, q_dim, kv_dim, ffn, vocab);   // in an engine's alloc()
//   return decoder_logits(rt, s, b, final_norm, lm_head, dim, vocab, eps, stream);   // the end of its forward()
//
// The KV cache is not here: it is the kit's (rt.attn, attention_layer.cuh), addressed by sequence.
#pragma once

#include "runtime/runtime.cuh"

namespace monocu {

struct DecoderActivations {
    float* x;       // [T][dim]               residual stream
    float* qkv;     // [T][q_dim + 2 kv_dim]  q, k, v projections (and biases) before norm / rope
    bf16* att;      // [T][q_dim]             attention output
    bf16* h;        // [T][ffn]               silu(gate) * up
    bf16* xn;       // [T][dim]               the final norm's output
    float* logits;  // [T][vocab]             (T rows only when dumping every position; else Runtime::max_out)
};

inline DecoderActivations decoder_activations(Runtime& rt, int dim, int q_dim, int kv_dim, int ffn, int vocab) {
    DecoderActivations s;
    s.x = rt.rows<float>(dim), s.qkv = rt.rows<float>(q_dim + 2 * kv_dim), s.att = rt.rows<bf16>(q_dim);
    s.h = rt.rows<bf16>(ffn), s.xn = rt.rows<bf16>(dim), s.logits = rt.logit_rows(vocab);
    return s;
}

// logits = lm_head(rmsnorm(x)) for the batch's last n_out rows, or the rows b.out_rows lists (the final_norm and logits
// taps with them).
inline const float* decoder_logits(Runtime& rt, DecoderActivations& s, const Batch& b, const bf16* final_norm, const Linear& lm_head, int dim,
                                   int vocab, float eps, cudaStream_t st) {
    if (b.n_out == 0) return s.logits;  // (a batched pass of prompt chunks that all end before their last token)
    if (b.out_rows) rmsnorm_rows(s.x, b.out_rows, final_norm, s.xn, b.n_out, dim, eps, st);  // the batched core's rows
    else rmsnorm(s.x + (size_t)(b.n_tokens - b.n_out) * dim, final_norm, s.xn, b.n_out, dim, eps, st);
    rt.taps.bf16("final_norm", s.xn, b.n_out, dim, st);
    linear(lm_head, s.xn, s.logits, b.n_out, rt.lin, st);
    rt.taps.f32("logits", s.logits, b.n_out, vocab, st);
    return s.logits;
}

}  // namespace monocu
