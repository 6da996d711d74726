// ops/attention.cuh — causal prefill attention over the KV cache, on tensor cores (FlashAttention-2 style).
//
// Usage:
//   prefill_attention(q, kv.type, kv.layer(l), d_pos, out, T, n_heads, n_kv_heads, head_dim, ctx, params, stream);
//     q      fp16 [T][n_heads][head_dim]   queries of tokens at positions *d_pos .. *d_pos + T - 1
//     kv     keys 0 .. *d_pos + T - 1: this layer's cache (bf16, or FP8 scaled back), or, type F16, the
//            fp16 copy of a chunk's own keys and values that qk_norm_rope_cache writes beside the cache
//     out    bf16 [T][n_heads * head_dim]  softmax(q k^T / sqrt(d) + causal mask) v
//            (paged, kv.pages: positions found through the sequence's block table, kv_cache.cuh)
//     params AttnParams (attn_params.cuh): a sliding window masks keys at or before pos - window too, and
//            the key tiles wholly before the block's first window are skipped
// head_dim 64 or 128; any GQA ratio (query head h reads KV head h / (n_heads / n_kv), like repeat_kv).
//
// The algorithm (Dao, "FlashAttention-2", 2023): a block of 4 warps owns 64 queries of one head, each
// warp 16 rows. Keys and values stream through shared memory 64 at a time; S = Q K^T and O += P V run
// on mma.sync m16n8k16 (fp32 accumulate); the softmax is online (running row max m, running sum l, O
// rescaled by 2^(m_old - m_new) whenever the max grows), so S never leaves registers.
// The MMA inputs are fp16 (q, the fp16 copy or an FP8 cache's tiles scaled back, P): q, k and v are
// RMS-normed or bounded (|x| < 65504 by far; the conversions saturate), and P = 2^(S - m) is in (0, 1],
// so fp16's 3 extra mantissa bits come free. With bf16 inputs the roundings of q, k, v and P were a third
// of the engine's error against transformers float32 at Qwen3-4B's last layer (oracle/precision_probe.py,
// kb/log.md). Over a bf16 cache (a later chunk of a long prompt) the keys and values are bf16 already;
// the tiles are then copied as they are and q and P go to bf16: converting every tile to fp16 made that
// attention 25% slower (4B, 2k tokens: 12.5 against 10.0 ms).
// Split keys (a short chunk over a long context, e.g. a new turn after a cached conversation or a prefix-cache hit:
// ceil(T / 64) x n_heads blocks would leave most SMs idle): grid z cuts each block's key tiles into `splits` runs;
// each writes its rows' unnormalised O, running max and sum to PrefillSplit's scratch, and a second kernel merges the
// runs as Flash-Decoding does (O = sum O_s 2^(m_s - M) / sum l_s 2^(m_s - M), the sink joining the sum).
// Fragment layouts (mma.cuh): S's accumulators, rounded to 16 bits, are directly the A operand of P V; K
// rows give B for Q K^T with plain 32-bit loads, and V's B fragments come from ldmatrix.trans.
// Shared-memory rows are padded by 16 bytes so that the 8 rows a warp touches at once fall in different
// banks.
#pragma once

#include <cstdlib>
#include <string>

#include "gpu/memory.cuh"
#include "gpu/mma.cuh"
#include "ops/attention_sm90.cuh"
#include "ops/attn_params.cuh"
#include "ops/kv_cache.cuh"

namespace monocu {

constexpr int kAttnQ = 64, kAttnK = 64, kAttnWarps = 4;
constexpr int kPrefillSplitRows = 256, kPrefillMaxSplits = 8;  // split keys for chunks of up to 256 tokens, in up to 8 runs

// The split-key scratch: [max_splits][max_rows][n_heads] partial rows (O in fp32, and (max, sum)).
struct PrefillSplit {
    float* o = nullptr;
    float2* ml = nullptr;
    int max_rows = 0, max_splits = 0, n_heads = 0, head_dim = 0, sms = 0;
};

inline PrefillSplit prefill_split_create(int n_heads, int head_dim, int max_rows, int max_splits, GpuMemory& mem) {
    PrefillSplit p;
    p.max_rows = max_rows, p.max_splits = max_splits, p.n_heads = n_heads, p.head_dim = head_dim;
    p.o = mem.alloc<float>((size_t)max_splits * max_rows * n_heads * head_dim, "activations");
    p.ml = mem.alloc<float2>((size_t)max_splits * max_rows * n_heads, "activations");
    p.sms = sm_count();
    return p;
}

// 8 elements of a key or value row for the shared-memory tile, in the MMA's 16-bit type: fp16 and bf16 rows
// as they are, an FP8 row scaled back into fp16.
template <KvType KV>
__device__ __forceinline__ uint4 kv_chunk_16(const void* base, const float* scales, size_t row, int hd, int col) {
    if constexpr (KV != KvType::FP8) {
        return *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + row * hd + col);
    } else {
        float f[8], s = scales[row];
        KvLoad<KV>::to_float(*reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(base) + row * hd + col), f);
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] *= s;
        return float8_to_half8_sat(f);
    }
}

// An fp16 pair of q, as the MMA's type: as is, or rounded to bf16.
template <bool F16>
__device__ __forceinline__ uint32_t q_pair(const __half* p) {
    uint32_t v = *reinterpret_cast<const uint32_t*>(p);
    if constexpr (F16) return v;
    float2 f = __half22float2(*reinterpret_cast<const __half2*>(&v));
    return pack_bf16x2(f.x, f.y);
}

template <int HD, KvType KV>
__global__ void __launch_bounds__(kAttnWarps * 32)
    prefill_attention_kernel(const __half* __restrict__ q, KvLayer kv, const int* __restrict__ d_pos, int T, int nh, int nkv,
                             int ctx, float scale_log2, AttnParams ap, bf16* __restrict__ out, float* __restrict__ part_o,
                             float2* __restrict__ part_ml) {
    constexpr bool F16 = KV != KvType::BF16;  // the MMA's input type: fp16, or bf16 over a bf16 cache
    constexpr int LD = HD + 8;                // padded row, in 16-bit elements
    __shared__ __align__(16) uint16_t Ks[kAttnK][LD];
    __shared__ __align__(16) uint16_t Vs[kAttnK][LD];

    const int qb = blockIdx.x, h = blockIdx.y, kvh = h / (nh / nkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int pos0 = kv_row(ap, *d_pos);  // the cache row of the first query (its position, unless KV eviction keeps fewer)
    const int row_lo = qb * kAttnQ + warp * 16 + g, row_hi = row_lo + 8;  // this thread's two query rows
    const int n_keys = pos0 + min(T, (qb + 1) * kAttnQ);                  // causal limit for the block
    const int key_lo = attn_first_key(ap, pos0 + qb * kAttnQ) / kAttnK * kAttnK;  // first tile any row sees

    // Q fragments for the warp's 16 rows (rows past T read row T-1; their output is not written).
    uint32_t qa[HD / 16][4];
    {
        const __half* q_lo = q + ((size_t)min(row_lo, T - 1) * nh + h) * HD;
        const __half* q_hi = q + ((size_t)min(row_hi, T - 1) * nh + h) * HD;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            qa[ks][0] = q_pair<F16>(q_lo + ks * 16 + 2 * t);
            qa[ks][1] = q_pair<F16>(q_hi + ks * 16 + 2 * t);
            qa[ks][2] = q_pair<F16>(q_lo + ks * 16 + 2 * t + 8);
            qa[ks][3] = q_pair<F16>(q_hi + ks * 16 + 2 * t + 8);
        }
    }
    float o[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    const int qpos_lo = pos0 + row_lo, qpos_hi = pos0 + row_hi;
    const int first_lo = attn_first_key(ap, qpos_lo), first_hi = attn_first_key(ap, qpos_hi);

    // This block's run of key tiles: all of them, or with split keys (grid z) its share.
    int kt_begin = key_lo, kt_end = n_keys;
    if (gridDim.z > 1) {
        const int per = CEIL_DIV(CEIL_DIV(n_keys - key_lo, kAttnK), (int)gridDim.z) * kAttnK;
        kt_begin = key_lo + (int)blockIdx.z * per;
        kt_end = min(n_keys, kt_begin + per);
    }
    for (int kt = kt_begin; kt < kt_end; kt += kAttnK) {
        // Stage 64 keys and values (rows past n_keys are zero so that 0-probability times V stays 0).
        __syncthreads();
        for (int c = threadIdx.x; c < kAttnK * HD / 8; c += kAttnWarps * 32) {
            int r = c / (HD / 8), col = (c % (HD / 8)) * 8, key = kt + r;
            uint4 kc = make_uint4(0, 0, 0, 0), vc = make_uint4(0, 0, 0, 0);
            if (key < n_keys) {
                size_t row = (size_t)kvh * ctx + kv_page_row(kv, key);
                kc = kv_chunk_16<KV>(kv.k, kv.k_scale, row, HD, col);
                vc = kv_chunk_16<KV>(kv.v, kv.v_scale, row, HD, col);
            }
            *reinterpret_cast<uint4*>(&Ks[r][col]) = kc;
            *reinterpret_cast<uint4*>(&Vs[r][col]) = vc;
        }
        __syncthreads();

        // S = Q K^T for 16 rows x 64 keys (8 tiles of 8 keys).
        float s[kAttnK / 8][4];
#pragma unroll
        for (int nt = 0; nt < kAttnK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                const uint16_t* krow = &Ks[nt * 8 + g][ks * 16 + 2 * t];
                mma_16816<F16>(s[nt], qa[ks], *reinterpret_cast<const uint32_t*>(krow),
                               *reinterpret_cast<const uint32_t*>(krow + 8));
            }
        }
        // Scale to log2 units, mask the future, and find this tile's row maxima.
        float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
        for (int nt = 0; nt < kAttnK / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = kt + nt * 8 + 2 * t + (e & 1);
                bool lo = e < 2;
                float v = s[nt][e] * scale_log2;
                if (key > (lo ? qpos_lo : qpos_hi) || key < (lo ? first_lo : first_hi)) v = -INFINITY;
                s[nt][e] = v;
                if (lo) mx_lo = fmaxf(mx_lo, v);
                else mx_hi = fmaxf(mx_hi, v);
            }
        }
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
        // A row may see no key of a tile (the first tiles of a sliding window): while its maximum is still
        // -inf, exponents are taken against 0, so its p are 0 and nothing is rescaled by exp2(-inf - -inf).
        const float use_lo = mx_lo == -INFINITY ? 0.f : mx_lo, use_hi = mx_hi == -INFINITY ? 0.f : mx_hi;
        float c_lo = exp2f(m_lo - use_lo), c_hi = exp2f(m_hi - use_hi);
        m_lo = mx_lo, m_hi = mx_hi;
        l_lo *= c_lo, l_hi *= c_hi;
#pragma unroll
        for (int d = 0; d < HD / 8; d++) o[d][0] *= c_lo, o[d][1] *= c_lo, o[d][2] *= c_hi, o[d][3] *= c_hi;

        // P = 2^(S - m), kept as the A operand of P V.
        uint32_t pa[kAttnK / 16][4];
#pragma unroll
        for (int nt = 0; nt < kAttnK / 8; nt++) {
            float p0 = exp2f(s[nt][0] - use_lo), p1 = exp2f(s[nt][1] - use_lo);
            float p2 = exp2f(s[nt][2] - use_hi), p3 = exp2f(s[nt][3] - use_hi);
            l_lo += p0 + p1;
            l_hi += p2 + p3;
            pa[nt / 2][(nt & 1) * 2 + 0] = pack_16x2<F16>(p0, p1);
            pa[nt / 2][(nt & 1) * 2 + 1] = pack_16x2<F16>(p2, p3);
        }
        // O += P V: for each 16-key step, ldmatrix.trans gives V's B fragments two dim-tiles at a time.
#pragma unroll
        for (int kk = 0; kk < kAttnK / 16; kk++) {
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt += 2) {
                int mi = lane >> 3, r = lane & 7;
                uint32_t b[4];
                ldmatrix_x4_trans(b, &Vs[kk * 16 + (mi & 1) * 8 + r][(dt + (mi >> 1)) * 8]);
                mma_16816<F16>(o[dt], pa[kk], b[0], b[1]);
                mma_16816<F16>(o[dt + 1], pa[kk], b[2], b[3]);
            }
        }
    }
    // Row sums: the 4 threads of a group each hold part of the row.
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    if (gridDim.z > 1) {  // a run of keys: its unnormalised rows, max and sum (prefill_split_merge_kernel finishes them)
        const size_t base = (size_t)blockIdx.z * T;
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            int col = d * 8 + 2 * t;
            if (row_lo < T) *reinterpret_cast<float2*>(part_o + ((base + row_lo) * nh + h) * HD + col) = make_float2(o[d][0], o[d][1]);
            if (row_hi < T) *reinterpret_cast<float2*>(part_o + ((base + row_hi) * nh + h) * HD + col) = make_float2(o[d][2], o[d][3]);
        }
        if (t == 0) {
            if (row_lo < T) part_ml[(base + row_lo) * nh + h] = make_float2(m_lo, l_lo);
            if (row_hi < T) part_ml[(base + row_hi) * nh + h] = make_float2(m_hi, l_hi);
        }
        return;
    }
    if (ap.sinks) {  // GPT-OSS: the head's sink joins each row's denominator
        const float sink = attn_sink_log2(ap, h);
        l_lo += exp2f(sink - m_lo), l_hi += exp2f(sink - m_hi);
    }
    float inv_lo = 1.f / l_lo, inv_hi = 1.f / l_hi;
    if (ap.h2o_stats && t == 0) {  // KV eviction: each query's softmax max and sum (h2o.cuh turns scores into probabilities)
        if (row_lo < T) ap.h2o_stats[(size_t)row_lo * nh + h] = make_float2(m_lo, l_lo);
        if (row_hi < T) ap.h2o_stats[(size_t)row_hi * nh + h] = make_float2(m_hi, l_hi);
    }
#pragma unroll
    for (int d = 0; d < HD / 8; d++) {
        int col = h * HD + d * 8 + 2 * t;
        if (row_lo < T)
            *reinterpret_cast<uint32_t*>(out + (size_t)row_lo * nh * HD + col) = pack_bf16x2(o[d][0] * inv_lo, o[d][1] * inv_lo);
        if (row_hi < T)
            *reinterpret_cast<uint32_t*>(out + (size_t)row_hi * nh * HD + col) = pack_bf16x2(o[d][2] * inv_hi, o[d][3] * inv_hi);
    }
}

// Merges a split pass's runs: one block per query row, a thread per (head, dim).
template <int HD>
__global__ void prefill_split_merge_kernel(const float* __restrict__ part_o, const float2* __restrict__ part_ml, int T, int nh, int splits,
                                           AttnParams ap, bf16* __restrict__ out) {
    const int row = blockIdx.x;
    for (int i = threadIdx.x; i < nh * HD; i += blockDim.x) {
        const int h = i / HD, d = i % HD;
        float M = -INFINITY;
        for (int z = 0; z < splits; z++) M = fmaxf(M, part_ml[((size_t)z * T + row) * nh + h].x);
        const float use = M == -INFINITY ? 0.f : M;
        float L = ap.sinks ? exp2f(attn_sink_log2(ap, h) - use) : 0.f, acc = 0.f;
        for (int z = 0; z < splits; z++) {
            const float2 ml = part_ml[((size_t)z * T + row) * nh + h];
            const float w = ml.x == -INFINITY ? 0.f : exp2f(ml.x - use);
            L += ml.y * w;
            acc += part_o[(((size_t)z * T + row) * nh + h) * HD + d] * w;
        }
        out[(size_t)row * nh * HD + i] = __float2bfloat16(acc / L);
    }
}

template <int HD, KvType KV>
inline void prefill_attention_launch(dim3 grid, const __half* q, const KvLayer& kv, const int* d_pos, bf16* out, int T, int nh, int nkv,
                                     int ctx, float scale_log2, const AttnParams& ap, const PrefillSplit* sp, cudaStream_t stream) {
    prefill_attention_kernel<HD, KV><<<grid, kAttnWarps * 32, 0, stream>>>(q, kv, d_pos, T, nh, nkv, ctx, scale_log2, ap, out,
                                                                          sp ? sp->o : nullptr, sp ? sp->ml : nullptr);
    LAUNCH_CHECK();
    if (grid.z > 1) {
        prefill_split_merge_kernel<HD><<<T, 256, 0, stream>>>(sp->o, sp->ml, T, nh, (int)grid.z, ap, out);
        LAUNCH_CHECK();
    }
}

template <int HD>
inline void prefill_attention_dispatch(dim3 grid, const __half* q, KvType type, const KvLayer& kv, const int* d_pos, bf16* out, int T,
                                       int nh, int nkv, int ctx, float scale_log2, const AttnParams& ap, const PrefillSplit* sp,
                                       cudaStream_t stream) {
    switch (type) {
        case KvType::BF16: return prefill_attention_launch<HD, KvType::BF16>(grid, q, kv, d_pos, out, T, nh, nkv, ctx, scale_log2, ap, sp, stream);
        case KvType::FP8: return prefill_attention_launch<HD, KvType::FP8>(grid, q, kv, d_pos, out, T, nh, nkv, ctx, scale_log2, ap, sp, stream);
        case KvType::F16: return prefill_attention_launch<HD, KvType::F16>(grid, q, kv, d_pos, out, T, nh, nkv, ctx, scale_log2, ap, sp, stream);
    }
}

// How many runs to cut each block's keys into: enough blocks for two waves of the SMs, at least 4 key tiles a run,
// at most the scratch's splits; 1 without scratch, past its rows, with KV eviction's statistics, or with few keys.
inline int prefill_splits(const PrefillSplit* sp, int T, int nh, long keys, const AttnParams& ap) {
    if (!sp || !sp->o || T > sp->max_rows || ap.h2o_stats || keys <= 0) return 1;
    const long blocks = (long)CEIL_DIV(T, kAttnQ) * nh;
    long want = CEIL_DIV(2L * sp->sms, blocks);
    want = std::min<long>(want, keys / (4 * kAttnK));
    return (int)std::max(1L, std::min<long>(want, sp->max_splits));
}

// Which kernel: the kit's choice, or one named (tests, the microbenchmark). MONOCU_PREFILL_ATTN=portable in the
// environment makes the kit's choice the portable kernel everywhere (before/after measurements on one binary).
enum class AttnKernel { Auto, Portable, Hopper };

inline bool prefill_attention_portable_forced() {
    static const bool forced = [] {
        const char* e = std::getenv("MONOCU_PREFILL_ATTN");
        return e && std::string(e) == "portable";
    }();
    return forced;
}

// keys: how many keys the chunk's last query sees (its position + 1), when the caller knows it (for split keys and the
// Hopper kernel); sp: split-key scratch, or null; force_splits > 0: that many runs whatever the heuristic says (tests).
// The Hopper kernel (attention_sm90.cuh) takes every unsplit pass it fits, unless the caller names a kernel (the batched
// core names the portable one for now: runtime/attention_layer.cuh); the portable one the rest.
inline void prefill_attention(const __half* q, KvType type, const KvLayer& kv, const int* d_pos, bf16* out, int T, int nh, int nkv,
                              int hd, int ctx, const AttnParams& ap, cudaStream_t stream, const PrefillSplit* sp = nullptr, long keys = 0,
                              int force_splits = 0, AttnKernel kernel = AttnKernel::Auto) {
    if (T <= 0) return;
    attn_params_check(ap, "prefill_attention");
    if (nh % nkv != 0) die("prefill_attention: %d heads are not a multiple of %d KV heads", nh, nkv);
    int splits = force_splits > 0 ? force_splits : prefill_splits(sp, T, nh, keys, ap);
    if (kernel == AttnKernel::Hopper ||
        (kernel == AttnKernel::Auto && splits == 1 && !prefill_attention_portable_forced() &&
         prefill_attention_sm90_fits(type, hd, ap, keys, kv))) {
        if (force_splits > 1) die("prefill_attention: the Hopper kernel does not split keys");
        return prefill_attention_sm90(q, type, kv, d_pos, out, T, nh, nkv, hd, ctx, keys, ap, stream);
    }
    if (splits > 1 && (!sp || T > sp->max_rows || splits > sp->max_splits || nh > sp->n_heads || hd != sp->head_dim || ap.h2o_stats))
        die("prefill_attention: %d key splits of %d rows do not fit the scratch", splits, T);
    dim3 grid(CEIL_DIV(T, kAttnQ), nh, splits);
    float scale_log2 = 1.4426950408889634f / sqrtf((float)hd);
    if (hd == 64) prefill_attention_dispatch<64>(grid, q, type, kv, d_pos, out, T, nh, nkv, ctx, scale_log2, ap, sp, stream);
    else if (hd == 128) prefill_attention_dispatch<128>(grid, q, type, kv, d_pos, out, T, nh, nkv, ctx, scale_log2, ap, sp, stream);
    else die("prefill_attention: head_dim %d is not supported (64, 128)", hd);
}

}  // namespace monocu
