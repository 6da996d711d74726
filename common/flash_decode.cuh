// flash_decode.cuh — attention for one new token over the whole KV cache (Flash-Decoding).
//
// Usage:
//   FlashDecode fd = flash_decode_plan(n_heads, n_kv_heads, head_dim, ctx, mem);   // once, at load
//   flash_decode(fd, q, kv.type, kv.layer(l), d_pos, out, stream);
//   flash_decode_fused(fd, DecodeQkv{qkv, q_norm_w, k_norm_w, rope.cos_sin, eps}, kv.type, kv.layer(l), d_pos, out, stream);
//     (the same, after doing qk_norm_rope_cache's work for this one token itself: see DecodeQkv)
//     q       bf16 [n_heads][head_dim]     this token's queries (normed, rotated)
//     kv      this layer's cache (kv_cache.cuh), bf16 or FP8; keys 0 .. *d_pos are valid
//     out     bf16 [n_heads * head_dim]    softmax(q k^T / sqrt(d)) v, heads side by side
//
// Why split: one block per head would leave most of the GPU idle and make per-token cost grow with
// context. Flash-Decoding (Dao et al., 2023) splits the key range across blocks: grid = (splits, kv
// heads); each block streams its slice of K and V once for all G = n_heads / n_kv query heads of its
// group (GQA: K/V read once, not G times), keeps an online softmax (running max m, sum l, unnormalised
// output o) and writes (m, l, o). The last block of a KV head to finish merges the splits:
//   M = max m_s,  L = sum l_s 2^(m_s - M),  out = sum o_s 2^(m_s - M) / L.
// The split count is fixed at plan time (CUDA graphs replay a fixed grid); the slice length follows the
// live length *d_pos + 1, so a short context uses few splits; the blocks of the other splits return at once
// (they are launched, since the grid is fixed, but touch nothing: the merge and its counter only count the
// active splits).
// Layout inside a block: head_dim / 8 lanes share a key, each loading 16 bytes (8 dims) of K and of V;
// a warp covers 256 / head_dim keys per step, 4 warps per block, U steps unrolled so that 2U 16-byte
// loads (8-byte for FP8, with twice the steps) per lane are in flight. FP8 scales fold into the score and
// into p, never into the 8 dims. Scores are kept in log2 units (q pre-scaled by log2(e)/sqrt(d)), so the
// softmax uses exp2.
#pragma once

#include <cfloat>

#include "gpu_memory.cuh"
#include "kv_cache.cuh"
#include "pdl.cuh"
#include "rope.cuh"

namespace monocu {

struct FlashDecode {
    int n_heads = 0, n_kv = 0, head_dim = 0, ctx = 0, n_splits = 1;
    float* part_o = nullptr;    // [n_heads][n_splits][head_dim]
    float2* part_ml = nullptr;  // [n_heads][n_splits]: (max in log2 units, sum)
    int* done = nullptr;        // [n_kv] split blocks finished for this step; the last one merges, resets to 0
};

// The fused mode's input: this token's raw projections, from which every block makes the queries of its
// group itself (q_norm, RoPE), and the block whose key range holds the new position also makes and stores
// the new cache row (k_norm, RoPE; v as is). That does in the attention launch what qk_norm_rope_cache
// does for prefill, one launch fewer per layer.
struct DecodeQkv {
    const float* qkv = nullptr;    // [n_heads + 2 n_kv][head_dim] fp32: q heads, k heads, v heads
    const bf16* q_norm = nullptr;  // [head_dim], or null for families without q/k norm
    const bf16* k_norm = nullptr;
    const float2* rope = nullptr;  // [ctx][head_dim / 2] (cos, sin): RopeTable::cos_sin
    float eps = 0.f;
};

constexpr int kFdWarps = 4, kFdMinChunk = 32;  // keys: one unrolled step of a block (head_dim 128, bf16, G <= 4)

// Merges softmax state (m2, l2, o2) into (m, l, o); m in log2 units, -inf for "no keys yet".
template <int N>
__device__ __forceinline__ void softmax_merge(float& m, float& l, float* o, float m2, float l2, const float* o2) {
    float M = fmaxf(m, m2);
    if (M == -INFINITY) return;
    float c1 = exp2f(m - M), c2 = exp2f(m2 - M);
    l = l * c1 + l2 * c2;
#pragma unroll
    for (int j = 0; j < N; j++) o[j] = o[j] * c1 + o2[j] * c2;
    m = M;
}

constexpr int kFdMaxSplits = 256;

// Whole block, for heads h0 .. h0 + G - 1: out[h][d] from the active splits' (m, l, o):
//   M = max m_s,  c_s = 2^(m_s - M),  out = sum o_s c_s / sum l_s c_s.
// It runs once per layer on the critical path, so all G heads go at once: warp w computes the weights
// c_s / L of heads w, w + 4, ... into shared memory, then every thread sums some (head, dim) outputs over the
// splits, its loads independent of each other (__ldcg: the partials were written by other blocks of this
// launch, and L1 is not coherent across blocks). (Merging per thread with the online rule instead makes
// each load wait for the previous split's arithmetic: the kernel measured twice as slow.)
template <int G>
__device__ __forceinline__ void flash_decode_merge(const float* part_o, const float2* part_ml, int n_splits, int n_active, int hd, int h0,
                                                   bf16* out) {
    __shared__ float c[G][kFdMaxSplits];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int g = warp; g < G; g += kFdWarps) {
        const float2* ml = part_ml + (size_t)(h0 + g) * n_splits;
        float m_max = -INFINITY;
        for (int s = lane; s < n_active; s += 32) m_max = fmaxf(m_max, __ldcg(&ml[s]).x);
        m_max = warp_max(m_max);
        float lsum = 0.f;
        for (int s = lane; s < n_active; s += 32) {
            float2 v = __ldcg(&ml[s]);
            float w = v.y > 0.f ? exp2f(v.x - m_max) : 0.f;  // guard: a split without keys would have l = 0, m = -inf
            c[g][s] = w;
            lsum += v.y * w;
        }
        float inv_L = 1.f / warp_sum(lsum);
        for (int s = lane; s < n_active; s += 32) c[g][s] *= inv_L;  // each lane rescales its own entries
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
        int g = i / hd, d = i % hd;
        const float* po = part_o + (size_t)(h0 + g) * n_splits * hd + d;
        float o = 0.f;
#pragma unroll 8
        for (int s = 0; s < n_active; s++) o = fmaf(__ldcg(po + (size_t)s * hd), c[g][s], o);
        out[(size_t)(h0 + g) * hd + d] = __float2bfloat16_rn(o);
    }
}

// Keys per split for the live length: a whole number of the block's unrolled steps (keys_per_iter), so
// that no block runs a partial step; short contexts then use few splits of one step each.
__device__ __forceinline__ int flash_decode_chunk(int len, int n_splits, int keys_per_iter) {
    int chunk = (len + n_splits - 1) / n_splits;
    return max(1, (chunk + keys_per_iter - 1) / keys_per_iter) * keys_per_iter;
}

// Warp-wide (slot 0's lanes store): the new token's cache row of KV head kvh at position pos.
template <int HD, KvType KV>
__device__ __forceinline__ void flash_decode_store_new_row(const DecodeQkv& in, const KvLayer& kv, int n_heads, int n_kv, int kvh, int pos,
                                                           int ctx, int dl, bool writer) {
    constexpr int LPK = HD / 8;
    const float* k_raw = in.qkv + (size_t)(n_heads + kvh) * HD + dl * 8;
    const float* v_raw = in.qkv + (size_t)(n_heads + n_kv + kvh) * HD + dl * 8;
    float k[8], v[8];
    load_float8(k_raw, k);
    load_float8(v_raw, v);
    head_norm_rope_8<LPK>(k, in.k_norm, in.rope + (size_t)pos * (HD / 2), dl, in.eps);
    size_t row = (size_t)kvh * ctx + pos;
    kv_store_8<KV, LPK>(kv.k, kv.k_scale, row, dl, k, writer);
    kv_store_8<KV, LPK>(kv.v, kv.v_scale, row, dl, v, writer);
}

// bf16 cache, G <= 4: at most 128 registers, so 4 blocks fit an SM and the planned 4 blocks per SM run as one
// wave (165 registers gave 3 per SM: 1.33 waves at long context; 8B at 16k ran 129 instead of 135 tok/s).
// The FP8 path (twice the unrolled steps) spills under that bound and measured no better, so it is left free.
template <int HD, int G, KvType KV>
__global__ void __launch_bounds__(kFdWarps * 32, KV == KvType::BF16 && G <= 4 ? 4 : 1)
    flash_decode_split_kernel(const bf16* __restrict__ q, DecodeQkv in, KvLayer kv, const int* __restrict__ d_pos, int ctx, int n_splits,
                              float scale_log2, float* __restrict__ part_o, float2* __restrict__ part_ml, int* __restrict__ done,
                              bf16* __restrict__ out) {
    using Load = KvLoad<KV>;
    constexpr int LPK = HD / 8;                // lanes per key, 8 dims each
    constexpr int KPW = 32 / LPK;              // keys per warp step
    constexpr int KPB = kFdWarps * KPW;        // keys per block step
    constexpr int U = (G >= 8 ? 2 : 4) * (KV == KvType::FP8 ? 2 : 1);  // steps unrolled (FP8 loads are 8 bytes)
    constexpr bool FP8 = KV == KvType::FP8;
    __shared__ float sm_ml[kFdWarps][G][2];
    __shared__ float sm_o[kFdWarps][G][HD];

    pdl_launch_dependents();
    pdl_wait();  // q (or qkv), the cache and *d_pos were just written
    const int split = blockIdx.x, kvh = blockIdx.y, n_kv = gridDim.y, n_heads = n_kv * G;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = lane / LPK, dl = lane % LPK;
    const int pos = *d_pos, len = pos + 1, chunk = flash_decode_chunk(len, n_splits, KPB * U);
    const int begin = split * chunk, end = min(len, begin + chunk);
    const int n_active = min(n_splits, (len + chunk - 1) / chunk);
    if (split >= n_active) return;  // an idle split (short context): whole block
    const bool fused = in.qkv != nullptr;

    float qf[G][8], m[G], l[G], acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (fused) {  // q = rope(q_norm(q_raw)), rounded to bf16 as the separate path stores it
            load_float8(in.qkv + (size_t)(kvh * G + g) * HD + dl * 8, qf[g]);
            head_norm_rope_8<LPK>(qf[g], in.q_norm, in.rope + (size_t)pos * (HD / 2), dl, in.eps);
#pragma unroll
            for (int j = 0; j < 8; j++) qf[g][j] = __bfloat162float(__float2bfloat16_rn(qf[g][j]));
        } else {
            bf16x8_to_float(*reinterpret_cast<const uint4*>(q + (size_t)(kvh * G + g) * HD + dl * 8), qf[g]);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) qf[g][j] *= scale_log2, acc[g][j] = 0.f;
        m[g] = -INFINITY;
        l[g] = 0.f;
    }
    if (fused && begin <= pos && pos < end) {  // this block's keys include the new one: make its row first
        if (warp == 0) flash_decode_store_new_row<HD, KV>(in, kv, n_heads, n_kv, kvh, pos, ctx, dl, slot == 0);
        __syncthreads();  // the row is read below by every warp of this block (and by no other block)
    }
    const size_t eb = FP8 ? 1 : 2;  // bytes per cache element
    const uint8_t* kb = static_cast<const uint8_t*>(kv.k) + ((size_t)kvh * ctx * HD + dl * 8) * eb;
    const uint8_t* vb = static_cast<const uint8_t*>(kv.v) + ((size_t)kvh * ctx * HD + dl * 8) * eb;
    const float* ks = FP8 ? kv.k_scale + (size_t)kvh * ctx : nullptr;
    const float* vs = FP8 ? kv.v_scale + (size_t)kvh * ctx : nullptr;

    // base is warp-uniform, so every lane runs the same iterations and the shuffles stay converged.
    for (int base = begin + warp * KPW; base < end; base += KPB * U) {
        typename Load::Raw kk[U], vv[U];
        float kscale[U], vscale[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int key = base + u * KPB + slot;
            kscale[u] = vscale[u] = 1.f;
            if (key < end) {
                kk[u] = Load::load(kb + (size_t)key * HD * eb);
                vv[u] = Load::load(vb + (size_t)key * HD * eb);
                if (FP8) kscale[u] = ks[key], vscale[u] = vs[key];
            }
        }
        float s[U][G];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8];
            Load::to_float(kk[u], kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float d = 0.f;
#pragma unroll
                for (int j = 0; j < 8; j++) d = fmaf(qf[g][j], kf[j], d);
#pragma unroll
                for (int o = LPK / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                s[u][g] = base + u * KPB + slot < end ? d * kscale[u] : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < U; u++) mx = fmaxf(mx, s[u][g]);
            if (mx == -INFINITY) continue;  // no valid key for this lane yet
            float corr = exp2f(m[g] - mx);
            l[g] *= corr;
#pragma unroll
            for (int j = 0; j < 8; j++) acc[g][j] *= corr;
#pragma unroll
            for (int u = 0; u < U; u++) {
                float p = exp2f(s[u][g] - mx);  // 0 for invalid keys
                if (p == 0.f) continue;
                float vf[8];
                Load::to_float(vv[u], vf);
                l[g] += p;
                p *= vscale[u];
#pragma unroll
                for (int j = 0; j < 8; j++) acc[g][j] = fmaf(p, vf[j], acc[g][j]);
            }
            m[g] = mx;
        }
    }

    // Merge the key slots of this warp (lanes LPK apart hold the same dims of different keys).
#pragma unroll
    for (int off = LPK; off < 32; off <<= 1) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            float m2 = __shfl_xor_sync(0xffffffffu, m[g], off), l2 = __shfl_xor_sync(0xffffffffu, l[g], off), o2[8];
#pragma unroll
            for (int j = 0; j < 8; j++) o2[j] = __shfl_xor_sync(0xffffffffu, acc[g][j], off);
            softmax_merge<8>(m[g], l[g], acc[g], m2, l2, o2);
        }
    }
    // Merge the warps through shared memory; warp 0 writes this split's partial result.
    if (slot == 0) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            if (dl == 0) sm_ml[warp][g][0] = m[g], sm_ml[warp][g][1] = l[g];
#pragma unroll
            for (int j = 0; j < 8; j++) sm_o[warp][g][dl * 8 + j] = acc[g][j];
        }
    }
    __syncthreads();
    if (warp == 0 && slot == 0) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            for (int w = 1; w < kFdWarps; w++) softmax_merge<8>(m[g], l[g], acc[g], sm_ml[w][g][0], sm_ml[w][g][1], &sm_o[w][g][dl * 8]);
            int h = kvh * G + g;
            float* dst = part_o + ((size_t)h * n_splits + split) * HD + dl * 8;
#pragma unroll
            for (int j = 0; j < 8; j++) dst[j] = acc[g][j];
            if (dl == 0) part_ml[(size_t)h * n_splits + split] = make_float2(m[g], l[g]);
        }
    }
    // The last split block of this KV head to finish merges all splits of its G heads (the "last block"
    // pattern: a fence makes this block's partials visible before it counts itself done), which saves a
    // separate combine launch per layer.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&done[kvh], 1) == n_active - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    flash_decode_merge<G>(part_o, part_ml, n_splits, n_active, HD, kvh * G, out);
    if (threadIdx.x == 0) done[kvh] = 0;  // ready for the next step (CUDA graphs replay this kernel)
}

inline FlashDecode flash_decode_plan(int n_heads, int n_kv, int head_dim, int ctx, GpuMemory& mem) {
    if (head_dim != 64 && head_dim != 128) die("flash_decode: head_dim %d is not supported (64, 128)", head_dim);
    if (n_heads % n_kv != 0 || n_heads / n_kv > 8) die("flash_decode: %d heads over %d KV heads (group of 1..8 supported)", n_heads, n_kv);
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FlashDecode fd;
    fd.n_heads = n_heads, fd.n_kv = n_kv, fd.head_dim = head_dim, fd.ctx = ctx;
    // About 4 blocks per SM at full context; at short context one split per kFdMinChunk keys (one step each).
    fd.n_splits = std::max(1, std::min({CEIL_DIV(4 * sms, n_kv), CEIL_DIV(ctx, kFdMinChunk), kFdMaxSplits}));
    fd.part_o = mem.alloc<float>((size_t)n_heads * fd.n_splits * head_dim, "workspace");
    fd.part_ml = mem.alloc<float2>((size_t)n_heads * fd.n_splits, "workspace");
    fd.done = mem.alloc<int>(n_kv, "workspace");
    CUDA_CHECK(cudaMemset(fd.done, 0, n_kv * sizeof(int)));
    return fd;
}

template <int HD, int G>
inline void flash_decode_split_launch(const FlashDecode& fd, const bf16* q, const DecodeQkv& in, KvType type, const KvLayer& kv,
                                      const int* d_pos, bf16* out, cudaStream_t stream) {
    dim3 grid(fd.n_splits, fd.n_kv);
    float scale_log2 = 1.4426950408889634f / sqrtf((float)HD);
    auto kernel = type == KvType::BF16 ? flash_decode_split_kernel<HD, G, KvType::BF16> : flash_decode_split_kernel<HD, G, KvType::FP8>;
    launch(kernel, grid, kFdWarps * 32, 0, stream, q, in, kv, d_pos, fd.ctx, fd.n_splits, scale_log2, fd.part_o, fd.part_ml, fd.done, out);
}

template <int HD>
inline void flash_decode_split_dispatch(const FlashDecode& fd, const bf16* q, const DecodeQkv& in, KvType t, const KvLayer& kv,
                                        const int* d_pos, bf16* out, cudaStream_t s) {
    switch (fd.n_heads / fd.n_kv) {
        case 1: return flash_decode_split_launch<HD, 1>(fd, q, in, t, kv, d_pos, out, s);
        case 2: return flash_decode_split_launch<HD, 2>(fd, q, in, t, kv, d_pos, out, s);
        case 3: return flash_decode_split_launch<HD, 3>(fd, q, in, t, kv, d_pos, out, s);
        case 4: return flash_decode_split_launch<HD, 4>(fd, q, in, t, kv, d_pos, out, s);
        case 5: return flash_decode_split_launch<HD, 5>(fd, q, in, t, kv, d_pos, out, s);
        case 6: return flash_decode_split_launch<HD, 6>(fd, q, in, t, kv, d_pos, out, s);
        case 7: return flash_decode_split_launch<HD, 7>(fd, q, in, t, kv, d_pos, out, s);
        case 8: return flash_decode_split_launch<HD, 8>(fd, q, in, t, kv, d_pos, out, s);
    }
}

inline void flash_decode_any(const FlashDecode& fd, const bf16* q, const DecodeQkv& in, KvType type, const KvLayer& kv, const int* d_pos,
                             bf16* out, cudaStream_t stream) {
    if (fd.head_dim == 64) flash_decode_split_dispatch<64>(fd, q, in, type, kv, d_pos, out, stream);
    else flash_decode_split_dispatch<128>(fd, q, in, type, kv, d_pos, out, stream);
}

// One launch: the split blocks, the last of which (per KV head) merges the splits into out. q is ready.
inline void flash_decode(const FlashDecode& fd, const bf16* q, KvType type, const KvLayer& kv, const int* d_pos, bf16* out,
                         cudaStream_t stream) {
    flash_decode_any(fd, q, DecodeQkv{}, type, kv, d_pos, out, stream);
}

// The same, making q and the new cache row from the raw projections (DecodeQkv) in the same launch.
inline void flash_decode_fused(const FlashDecode& fd, const DecodeQkv& in, KvType type, const KvLayer& kv, const int* d_pos, bf16* out,
                               cudaStream_t stream) {
    if (!in.qkv || !in.rope) die("flash_decode_fused: needs the projections and the rope table");
    flash_decode_any(fd, nullptr, in, type, kv, d_pos, out, stream);
}

}  // namespace monocu
