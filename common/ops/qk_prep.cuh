// ops/qk_prep.cuh — a prefill chunk's queries and cache rows from its raw q/k/v projections.
//
// Usage:
//   qk_norm_rope_cache(qkv, T, d_pos, q_norm_w, k_norm_w, rope, q, kv.type, kv.layer(l),
//                      n_heads, n_kv_heads, head_dim, ctx, eps, stream);
//     qkv      float [T][(n_heads + 2 n_kv) * head_dim]  (q heads, then k heads, then v heads)
//     d_pos    device int: position of the first of the T tokens
//     q_norm_w, k_norm_w  bf16 [head_dim], or nullptr for families without q/k norm
//     rope     the (cos, sin) table (ops/rope.cuh); a table with cos_sin null: no rotation (a NoPE layer)
//     q        fp16 [T][n_heads][head_dim]                (normed, rotated; for the prefill attention, which
//                                                          computes in fp16: attention.cuh)
//     kv       this layer's cache (kv_cache.cuh), bf16 or FP8; rows pos..pos+T-1 written
//   qk_norm_rope_cache(..., eps, stream, fresh, fresh_rows);   // also k and v in fp16 into fresh (an fp16 KvLayer
//                      of fresh_rows rows per head), rows 0..T-1: the chunk's keys as computed, before the
//                      cache rounds them to bf16 or e4m3 (the engine's first prefill chunk attends to these)
//   ..., fresh, fresh_rows, kv_budget)   with KV eviction (h2o.cuh) the rows are kv_row(pos) .. + T - 1, not pos ..
//   a paged kv (kv.pages: the batched core's) writes each position's row through the sequence's block table
#pragma once

#include "gpu/pdl.cuh"
#include "ops/attn_params.cuh"
#include "ops/kv_cache.cuh"
#include "ops/rope.cuh"

namespace monocu {

// One warp per 32 / LPK heads of a token, LPK = head_dim / 8 lanes per head, each lane owning 8 consecutive
// elements: the head's sum of squares and the rotation's partner (element i + d/2, in lane dl ^ LPK/2) are
// shuffles, so a head costs one 32-byte load per lane and no block barrier. Heads [0, nh) are q, [nh, nh + nkv)
// k, [nh + nkv, nh + 2 nkv) v (stored to the cache as they are). (One block per head and token, thread i
// owning the pair (i, i + d/2), took 118 us per layer for a 2,048-token Qwen3-4B chunk: kb/log.md.)
template <KvType KV, int HD>
__global__ void qk_norm_rope_cache_kernel(const float* __restrict__ qkv, const int* __restrict__ d_pos,
                                          const bf16* __restrict__ q_norm_w, const bf16* __restrict__ k_norm_w,
                                          const float2* __restrict__ rope, __half* __restrict__ q_out, KvLayer kv, int nh,
                                          int nkv, int ctx, float eps, KvLayer fresh, int fresh_rows, int kv_budget) {
    constexpr int LPK = HD / 8, heads_per_warp = 32 / LPK;
    pdl_launch_dependents();
    pdl_wait();
    const int lane = threadIdx.x & 31, dl = lane % LPK, t = blockIdx.y, n_all = nh + 2 * nkv;
    const int head = (blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)) * heads_per_warp + lane / LPK;
    const int h = min(head, n_all - 1);  // lanes past the last head redo it (every lane joins the shuffles), store nothing
    const bool is_q = h < nh, is_v = h >= nh + nkv;
    const int pos = *d_pos + t;  // RoPE's position; the cache row is the same unless KV eviction keeps fewer rows
    const int row = kv_row(kv_budget, *d_pos) + t;
    float x[8];
    load_float8(qkv + ((size_t)t * n_all + h) * HD + dl * 8, x);
    head_norm_rope_8<LPK>(x, is_q ? q_norm_w : k_norm_w, rope, pos, dl, eps, !is_v);
    uint4 packed;
    float scale = kv_pack_8<KV, LPK>(x, packed);  // every lane: the FP8 scale is a shuffle over the head's lanes
    if (head >= n_all) return;
    if (is_q) {
        *reinterpret_cast<uint4*>(q_out + ((size_t)t * nh + h) * HD + dl * 8) = float8_to_half8_sat(x);
        return;
    }
    const int kvh = is_v ? h - nh - nkv : h - nh;
    kv_put_8<KV, LPK>(is_v ? kv.v : kv.k, is_v ? kv.v_scale : kv.k_scale, (size_t)kvh * ctx + kv_page_row(kv, row), dl, packed, scale);
    if (fresh.k) kv_put_8<KvType::F16, LPK>(is_v ? fresh.v : fresh.k, nullptr, (size_t)kvh * fresh_rows + t, dl, float8_to_half8_sat(x), 1.f);
}

template <int HD>
inline void qk_norm_rope_cache_launch(const float* qkv, int T, const int* d_pos, const bf16* q_norm_w, const bf16* k_norm_w,
                                      const RopeTable& rope, __half* q_out, KvType kv_type, const KvLayer& kv, int nh, int nkv, int ctx,
                                      float eps, const KvLayer& fresh, int fresh_rows, int kv_budget, cudaStream_t stream) {
    constexpr int kWarps = 8, heads_per_block = kWarps * 32 / (HD / 8);
    dim3 grid(CEIL_DIV(nh + 2 * nkv, heads_per_block), T);
    auto kernel = kv_type == KvType::BF16 ? qk_norm_rope_cache_kernel<KvType::BF16, HD> : qk_norm_rope_cache_kernel<KvType::FP8, HD>;
    launch(kernel, grid, kWarps * 32, 0, stream, qkv, d_pos, q_norm_w, k_norm_w, rope.cos_sin, q_out, kv, nh, nkv, ctx, eps, fresh, fresh_rows, kv_budget);
}

inline void qk_norm_rope_cache(const float* qkv, int T, const int* d_pos, const bf16* q_norm_w, const bf16* k_norm_w,
                               const RopeTable& rope, __half* q_out, KvType kv_type, const KvLayer& kv, int nh, int nkv, int hd,
                               int ctx, float eps, cudaStream_t stream, const KvLayer& fresh = KvLayer{}, int fresh_rows = 0,
                               int kv_budget = 0) {
    if (hd != 64 && hd != 128) die("qk_norm_rope_cache: head_dim %d is not supported (64, 128)", hd);
    if (kv_type == KvType::F16) die("qk_norm_rope_cache: the cache is bf16 or FP8 (fp16 is only the copy beside it)");
    if (rope.cos_sin && (rope.half != hd / 2 || (!kv.pages && rope.max_pos < ctx))) die("qk_norm_rope_cache: rope table does not match head_dim/context");
    if (fresh.k && T > fresh_rows) die("qk_norm_rope_cache: %d tokens do not fit the %d rows of the fp16 copy", T, fresh_rows);
    if (T <= 0) return;
    if (hd == 64)
        qk_norm_rope_cache_launch<64>(qkv, T, d_pos, q_norm_w, k_norm_w, rope, q_out, kv_type, kv, nh, nkv, ctx, eps, fresh, fresh_rows, kv_budget, stream);
    else
        qk_norm_rope_cache_launch<128>(qkv, T, d_pos, q_norm_w, k_norm_w, rope, q_out, kv_type, kv, nh, nkv, ctx, eps, fresh, fresh_rows, kv_budget, stream);
}

}  // namespace monocu
