// runtime/batch.cuh — the tokens one forward pass runs: what the runner hands an engine's forward().
//
// Usage (the runner builds it; an engine reads it):
//   Batch b;  b.n_tokens = T;  b.ids = d_ids;  b.pos = d_pos;  b.slot = 0;  b.pos0 = 0;  b.n_out = 1;
//   model.forward(rt, b);            // logits for the last b.n_out tokens
//
// Every token carries its position (device array `pos`, read on the GPU, so that a decode step captured as
// a CUDA graph stays valid as positions advance) and belongs to a sequence, whose KV rows live in its slot of
// the cache (KvCache::layer(l, slot)). The kinds of batch:
//   - a prefill chunk of one sequence: T tokens at consecutive positions pos0 .. pos0 + T - 1;
//   - a decode step of one sequence: T = 1, its position only on the device (pos0 = -1);
//   - decode steps and prefill chunks of many sequences in one pass: the batched core's, with a slot and a
//     range of rows per sequence. The fields for it are not here yet: the kit's attention refuses
//     n_seqs > 1 until that issue lands, and engines need no change then (they pass the batch through).
#pragma once

namespace monocu {

struct Batch {
    int n_tokens = 0;          // rows of this pass
    const int* ids = nullptr;  // device [n_tokens] token ids
    const int* pos = nullptr;  // device [n_tokens] each token's position in its sequence (consecutive here)
    int n_seqs = 1;            // sequences in the pass
    int slot = 0;              // the sequence's KV-cache slot
    int pos0 = -1;             // position of the first token when the host knows it (prefill), else -1
    int n_out = 1;             // logits wanted for the last n_out tokens (all of them when dumping taps)
};

}  // namespace monocu
