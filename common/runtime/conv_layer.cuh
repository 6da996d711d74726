// runtime/conv_layer.cuh — a short-convolution layer's conv (LFM2) for any batch: one sequence's pass, or the batched
// core's decode rows and prompt chunks, each sequence with its own state.
//
// Usage (an engine's forward):
//   short_conv_layer(bcx, b, conv_w, conv_b, states, slot_stride, y, dim, L, stream);
//     states       the layer's state of slot 0 ([L - 1][dim] floats); slot s's at states + s * slot_stride
//     b.slot       the sequence's slot (one sequence), or each BatchSeq::slot / b.slots (the batched core)
#pragma once

#include "ops/short_conv.cuh"
#include "runtime/batch.cuh"

namespace monocu {

inline void short_conv_layer(const float* bcx, const Batch& b, const bf16* w, const bf16* bias, float* states, size_t slot_stride, bf16* y,
                             int dim, int L, cudaStream_t st) {
    if (!b.tables) return short_conv(bcx, b.n_tokens, b.pos, w, bias, states + (size_t)b.slot * slot_stride, y, dim, L, st);
    // decode rows: one launch; then each prompt chunk with its sequence's state
    short_conv_rows(bcx, b.n_decode, b.pos, b.slots, w, bias, states, slot_stride, y, dim, L, st);
    for (int i = b.n_decode; i < b.n_seqs; i++) {
        const BatchSeq& q = b.seqs[i];
        short_conv(bcx + (size_t)q.row0 * 3 * dim, q.n, b.pos + q.row0, w, bias, states + (size_t)q.slot * slot_stride, y + (size_t)q.row0 * dim,
                   dim, L, st);
    }
}

}  // namespace monocu
