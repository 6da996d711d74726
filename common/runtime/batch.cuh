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
//   - the batched core's pass (runtime/batched.cuh): decode steps and prefill chunks of many sequences, over the
//     paged cache. Rows 0 .. n_decode - 1 are one decode token each (sequences 0 .. n_decode - 1), then each
//     other sequence's chunk; every sequence reads and writes its positions through its block table, and the
//     logits wanted are those of the rows out_rows lists. Engines pass the batch through: attention and the
//     final logits (the kit's) are what read these fields.
#pragma once

namespace monocu {

// One sequence's rows in a batched pass (host).
struct BatchSeq {
    int row0 = 0, n = 0;  // its tokens are rows row0 .. row0 + n - 1 of the pass
    int pos0 = 0;         // the position of the first
    int slot = 0;         // its slot of any per-sequence state besides the KV cache (LFM2's conv state)
};

struct Batch {
    int n_tokens = 0;          // rows of this pass
    const int* ids = nullptr;  // device [n_tokens] token ids
    const int* pos = nullptr;  // device [n_tokens] each token's position in its sequence (consecutive here)
    int n_seqs = 1;            // sequences in the pass
    int slot = 0;              // the sequence's KV-cache slot
    int pos0 = -1;             // position of the first token when the host knows it (prefill), else -1
    int n_out = 1;             // logits wanted for the last n_out tokens (all of them when dumping taps)
    // The batched core's pass (tables set):
    const BatchSeq* seqs = nullptr;   // host [n_seqs]: the first n_decode are decode steps, rows 0 .. n_decode - 1
    int n_decode = 0;
    const int* tables = nullptr;      // device [n_seqs][table_stride] block ids (sequence i's at tables + i table_stride)
    int table_stride = 0;
    const int* out_rows = nullptr;    // device [n_out] rows whose logits are wanted, in order (null: the last n_out)
    const int* slots = nullptr;       // device [n_seqs] each sequence's BatchSeq::slot (decode rows read theirs here)
};

}  // namespace monocu
