// runtime/attention_layer.cuh — one call per layer for self-attention over the KV cache, whatever the batch:
// the queries and the new cache rows made from the raw q/k/v projections (per-head norm, RoPE), then softmax
// attention over the sequence's cached positions.
//
// Usage:
//   Attention a = attention_create(AttnSpec{layers, n_heads, n_kv, head_dim, eps}, KvType::FP8, ctx, slots,
//                                  max_tokens, prefill_via_cache, mem, KvEviction{budget, window});  // the runner,
//                                  // once; with a budget (H2O, ops/h2o.cuh) the cache holds budget + max_tokens rows
//   AttnLayer L{q_norm_w, k_norm_w, &rope, params};   // the engine, per layer: norms (null: none), rope
//                                                     // (null: a NoPE layer), window (attn_params.cuh)
//   attention(a, L, layer, qkv, batch, out, stream);  // qkv float [T][(n_heads + 2 n_kv) head_dim] (q heads,
//                                                     // k heads, v heads); out bf16 [T][n_heads head_dim]
//
// The choice of kernels lives here, not in the engines (one path in their forward()):
//   - a decode step (T = 1): flash_decode_fused makes the queries and the new cache row inside the attention
//     launch (flash_decode.cuh): two launches per layer;
//   - a prefill chunk: qk_norm_rope_cache writes q (fp16) and the cache rows, then prefill_attention. A chunk at
//     position 0 attends to its own keys and values in fp16 (`fresh`, written beside the cache), as transformers
//     attends over a prompt: the cache's rounding (bf16 or e4m3) then applies from the first decoded token.
//     fp16 keeps 3 more bits than a bf16 cache (attention.cuh says why that matters). Later chunks need earlier
//     positions, which only the cache holds; so does prefill_via_cache (--kv-prefill-cache), with which
//     oracle/quant_eval.py measures what the FP8 cache's rounding costs;
//   - several sequences in one pass (the batched core, b.tables set): the cache is a pool of blocks and each
//     sequence finds its positions through its block table (kv_cache.cuh's pages). The pass's first n_decode rows
//     are one decode token each, of as many sequences: one Flash-Decoding launch takes them all (grid z =
//     sequence). Each prefill chunk after them runs the prefill path above on its rows, through its own table
//     (a chunk at position 0 again reading its own fp16 keys), a few launches per chunk;
//   - with KV eviction on, after either: the pass's attention added to each row's sum, and the rows past the
//     budget evicted (h2o.cuh). Positions then outrun cache rows: kv_row (attn_params.cuh) maps one to the other.
#pragma once

#include "ops/attention.cuh"
#include "ops/flash_decode.cuh"
#include "ops/h2o.cuh"
#include "ops/qk_prep.cuh"
#include "gpu/profile.cuh"
#include "runtime/batch.cuh"

namespace monocu {

// The model's attention, as the kit's state needs it.
struct AttnSpec {
    int layers = 0;  // layers with a KV cache
    int n_heads = 0, n_kv = 0, head_dim = 0;
    float eps = 1e-6f;  // of the per-head q/k norms, where the family has them
};

// What one layer brings besides the cache.
struct AttnLayer {
    const bf16* q_norm = nullptr;    // [head_dim] per-head RMSNorm of the queries, or null
    const bf16* k_norm = nullptr;    // ... of the keys, or null
    RopeTable* rope = nullptr;       // rotary embedding table, or null: no rotation (a NoPE layer)
    AttnParams params;               // sliding window (and, later, sinks and softcap)
};

// The batched core's cache: a pool of `blocks` blocks of block_size positions, shared by up to max_seqs sequences
// of up to seq_ctx positions each (host/kv_blocks.h hands the blocks out).
struct KvPaging {
    int blocks = 0;        // 0: not paged (one sequence per slot, position = row)
    int block_size = 16;   // a power of two
    int max_seqs = 1;
    int seq_ctx = 0;
};

struct Attention {
    AttnSpec spec;
    int page_shift = -1;  // paged (KvPaging): log2 of the block size; -1: not paged
    KvCache kv;         // [layers][slots][n_kv][rows][head_dim], bf16 or FP8 (kv_cache.cuh); rows = ctx without eviction
    H2o h2o;            // KV eviction, when on
    FlashDecode fd;     // decode's split plan and partial results
    __half* q = nullptr;  // [max_tokens][n_heads][head_dim] a prefill chunk's queries (fp16: attention.cuh)
    KvLayer fresh;      // fp16 [n_kv][max_tokens][head_dim] keys and values of a chunk at position 0, or none
    int fresh_rows = 0;
    PrefillSplit split;  // split-key scratch for short chunks over long contexts (attention.cuh)
};

// A budget that reaches the context evicts nothing and is dropped: the cache then holds every position, as without one.
// With paging (pg.blocks > 0) the cache holds pg.blocks * pg.block_size rows per layer and head, in one slot.
inline Attention attention_create(const AttnSpec& spec, KvType kv_type, int ctx, int slots, int max_tokens, bool prefill_via_cache,
                                  GpuMemory& mem, const KvEviction& ev = {}, const KvPaging& pg = {}) {
    Attention a;
    a.spec = spec;
    const bool evict = ev.budget > 0 && ev.budget + 1 < ctx;
    int rows = evict ? std::min(ctx, ev.budget + max_tokens) : ctx;
    if (pg.blocks > 0) {
        if (evict) die("KV eviction (--kv-budget) and the batched core's paged cache do not go together");
        if (pg.block_size < 1 || (pg.block_size & (pg.block_size - 1))) die("kv blocks of %d positions: a power of two is needed", pg.block_size);
        if ((long)pg.blocks * pg.block_size > INT32_MAX / 2) die("a KV pool of %d blocks of %d is too large", pg.blocks, pg.block_size);
        rows = pg.blocks * pg.block_size, slots = 1;
        for (a.page_shift = 0; (1 << a.page_shift) < pg.block_size; a.page_shift++) {}
    }
    a.kv = kv_cache_create(kv_type, spec.layers, spec.n_kv, rows, spec.head_dim, mem, slots);
    a.fd = pg.blocks > 0 ? flash_decode_plan(spec.n_heads, spec.n_kv, spec.head_dim, rows, mem, pg.max_seqs, pg.seq_ctx)
                         : flash_decode_plan(spec.n_heads, spec.n_kv, spec.head_dim, rows, mem);
    if (evict) a.h2o = h2o_create(ev, spec.layers, slots, spec.n_heads, spec.n_kv, rows, max_tokens, mem);
    a.q = mem.alloc<__half>((size_t)max_tokens * spec.n_heads * spec.head_dim, "activations");
    a.split = prefill_split_create(spec.n_heads, spec.head_dim, std::min(max_tokens, kPrefillSplitRows), kPrefillMaxSplits, mem);
    if (!prefill_via_cache) {
        a.fresh.k = mem.alloc<__half>((size_t)max_tokens * spec.n_kv * spec.head_dim, "activations");
        a.fresh.v = mem.alloc<__half>((size_t)max_tokens * spec.n_kv * spec.head_dim, "activations");
        a.fresh_rows = max_tokens;
    }
    return a;
}

// For -v and --bench: ", H2O budget N (window W, R cache rows)" when eviction is on.
inline std::string kv_eviction_note(const Attention& a) {
    if (!a.h2o.on()) return "";
    return ", H2O budget " + std::to_string(a.h2o.budget) + " (window " + std::to_string(a.h2o.window) + ", " + std::to_string(a.kv.ctx) +
           " cache rows)";
}

// One prompt chunk of one sequence: rows row0 .. row0 + T - 1 of qkv and out, at positions pos0 .. (d_pos: the rows'
// positions on the device); its keys and values go to kv (through its table when paged). A chunk at position 0 attends
// to its own fp16 copy, written beside the cache (`fresh`); returns whether it did. kernel: the prefill attention's.
inline bool attention_chunk(Attention& a, const AttnLayer& L, const KvLayer& kv, const AttnParams& ap, const float* qkv, const int* d_pos,
                            int pos0, int T, int row0, bf16* out, cudaStream_t st, AttnKernel kernel = AttnKernel::Auto) {
    const AttnSpec& s = a.spec;
    const size_t q_w = (size_t)s.n_heads * s.head_dim, qkv_w = q_w + 2 * (size_t)s.n_kv * s.head_dim;
    if (row0 + T > a.fresh_rows && a.fresh.k) die("attention: rows %d..%d pass the %d planned", row0, row0 + T - 1, a.fresh_rows);
    const bool own = a.fresh.k && pos0 == 0;  // the chunk at position 0 reads its own fp16 keys and values
    KvLayer fresh;                             // its rows of the fp16 copy (whose head stride stays fresh_rows)
    if (own) {
        fresh.k = static_cast<__half*>(a.fresh.k) + (size_t)row0 * s.head_dim;
        fresh.v = static_cast<__half*>(a.fresh.v) + (size_t)row0 * s.head_dim;
    }
    RopeTable rope;  // a view of the layer's table (no copy of its config), or none
    if (L.rope) rope.cos_sin = L.rope->cos_sin, rope.max_pos = L.rope->max_pos, rope.half = L.rope->half;
    if (L.rope && pos0 >= 0) rope.cos_sin = rope_rows_for(*L.rope, pos0, T, st);
    __half* q = a.q + (size_t)row0 * q_w;
    {
        OpScope op("q/k norm + rope + cache", st);
        qk_norm_rope_cache(qkv + (size_t)row0 * qkv_w, T, d_pos, L.q_norm, L.k_norm, rope, q, a.kv.type, kv, s.n_heads, s.n_kv, s.head_dim,
                           a.kv.ctx, s.eps, st, fresh, a.fresh_rows, ap.kv_budget);
    }
    // Causal work: QK^T and PV over the keys before each query (an estimate past position 0 or with a window).
    double keys = (pos0 > 0 ? kv_row(ap, pos0) : 0) + (T + 1) / 2.0;
    OpScope op("attention", st, 4.0 * T * keys * s.n_heads * s.head_dim);
    prefill_attention(q, own ? KvType::F16 : a.kv.type, own ? fresh : kv, d_pos, out + (size_t)row0 * q_w, T, s.n_heads, s.n_kv, s.head_dim,
                      own ? a.fresh_rows : a.kv.ctx, ap, st, &a.split, own ? T : (long)kv_row(ap, pos0) + T, 0, kernel);
    return own;
}

// The batched core's pass: decode tokens of b.n_decode sequences in one launch, then each prefill chunk on its own.
inline void attention_paged(Attention& a, const AttnLayer& L, int layer, const float* qkv, const Batch& b, bf16* out, cudaStream_t st) {
    const AttnSpec& s = a.spec;
    if (a.page_shift < 0) die("attention: block tables given, but the cache is not paged");
    if (!b.seqs || b.n_decode < 0 || b.n_decode > b.n_seqs) die("attention: a batched pass without its sequences");
    KvLayer kv = a.kv.layer(layer, 0);
    kv.page_shift = a.page_shift, kv.pages_stride = b.table_stride;
    const AttnParams& ap = L.params;
    if (b.n_decode > 0) {
        OpScope op("attention", st);
        kv.pages = b.tables;
        flash_decode_fused(a.fd, DecodeQkv{qkv, L.q_norm, L.k_norm, L.rope ? L.rope->cos_sin : nullptr, s.eps}, a.kv.type, kv, b.pos, out, st,
                           ap, b.n_decode);
    }
    for (int i = b.n_decode; i < b.n_seqs; i++) {
        const BatchSeq& q = b.seqs[i];
        kv.pages = b.tables + (size_t)i * b.table_stride;
        attention_chunk(a, L, kv, ap, qkv, b.pos + q.row0, q.pos0, q.n, q.row0, out, st);
    }
}

// out = attention of the batch's queries over its sequence's cached positions (and its own), after writing
// its keys and values to the cache.
inline void attention(Attention& a, const AttnLayer& L, int layer, const float* qkv, const Batch& b, bf16* out, cudaStream_t st) {
    const AttnSpec& s = a.spec;
    if (layer < 0 || layer >= s.layers) die("attention: layer %d of %d", layer, s.layers);
    if (b.tables) return attention_paged(a, L, layer, qkv, b, out, st);
    if (b.n_seqs != 1) die("attention: %d sequences in one pass need block tables (the batched core)", b.n_seqs);
    if (a.page_shift >= 0) die("attention: the paged cache needs block tables");
    const KvLayer kv = a.kv.layer(layer, b.slot);
    const int T = b.n_tokens;
    AttnParams ap = L.params;
    if (a.h2o.on()) ap.kv_budget = a.h2o.budget, ap.h2o_scores = a.h2o.scores, ap.h2o_stats = a.h2o.stats;
    if (T == 1) {
        {
            OpScope op("attention", st);
            DecodeQkv in{qkv, L.q_norm, L.k_norm, L.rope ? L.rope->cos_sin : nullptr, s.eps};
            flash_decode_fused(a.fd, in, a.kv.type, kv, b.pos, out, st, ap);
        }
        if (a.h2o.on()) {
            OpScope op("kv eviction", st);
            h2o_after_decode(a.h2o, layer, b.slot, a.kv.type, kv, s.head_dim, a.kv.ctx, b.pos, st);
        }
        return;
    }
    if (a.h2o.on() && b.pos0 < 0) die("attention: KV eviction needs a prefill pass's first position on the host");
    const bool own = attention_chunk(a, L, kv, ap, qkv, b.pos, b.pos0, T, 0, out, st);
    if (a.h2o.on()) {
        OpScope op("kv eviction", st);
        h2o_after_prefill(a.h2o, layer, b.slot, a.q, own ? KvType::F16 : a.kv.type, own ? a.fresh : kv, own ? a.fresh_rows : a.kv.ctx,
                          a.kv.type, kv, s.head_dim, a.kv.ctx, b.pos, b.pos0, T, st);
    }
}

}  // namespace monocu
