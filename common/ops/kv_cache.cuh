// ops/kv_cache.cuh — the KV cache: bf16, or FP8 E4M3 with one scale per (token, head). (F16 names only the
// prefill's fp16 copy of a chunk's own keys and values, attention.cuh; no cache is made of it.)
//
// Usage:
//   KvCache kv = kv_cache_create(KvType::FP8, n_layers, n_kv, ctx, head_dim, mem, slots);
//   KvLayer L = kv.layer(l, slot);      // what the attention kernels and the cache writer take: layer l of the
//                                       // sequence in slot `slot` (each slot holds one sequence of up to ctx)
//   kv.bytes_per_token()                // K + V (+ scales) of one position over all layers
//   L.pages = table, L.page_shift = 4;  // paged: the layer's rows are a pool of 16-row blocks, a sequence's
//                                       // positions found through its block table (the batched core's)
//
// Layout per layer and slot: K and V [n_kv][ctx][head_dim] (one head's positions contiguous, so decode streams
// each head's keys in order), FP8 scales [n_kv][ctx] float; the whole cache is [layers][slots][...] of those.
// An FP8 row is q = e4m3(x / s) with
// s = max|x| / 448 over that head's head_dim values: per-token scales follow the keys' and values'
// real range (RoPE'd keys of different positions differ), at 4 bytes per 128 (3% over 1 byte/elem).
// Readers fold the scales into the math: score = (q . k_q) s_k, and o += (p s_v) v_q.
#pragma once

#include "gpu/memory.cuh"
#include "ops/quant.cuh"
#include "gpu/reduce.cuh"

namespace monocu {

enum class KvType { BF16, FP8, F16 };

struct KvLayer {
    void* k = nullptr;          // [n_kv][ctx][head_dim] bf16, e4m3 (or fp16: the prefill's copy)
    void* v = nullptr;
    float* k_scale = nullptr;   // [n_kv][ctx] (FP8 only)
    float* v_scale = nullptr;
    // Paged (the batched core): the ctx rows of each head are a pool of blocks of 2^page_shift rows, and a sequence's
    // position p lives in row pages[p >> page_shift] * 2^page_shift + p % 2^page_shift (kv_page_row). Null: row p.
    // A launch over many sequences (decode of a batch) finds sequence z's table at pages + z * pages_stride.
    const int* pages = nullptr;
    int page_shift = 0, pages_stride = 0;
};

// The cache row of a sequence's position p: p itself, or through its block table.
__host__ __device__ __forceinline__ int kv_page_row(const int* pages, int shift, int p) {
    return pages ? (pages[p >> shift] << shift) | (p & ((1 << shift) - 1)) : p;
}
__host__ __device__ __forceinline__ int kv_page_row(const KvLayer& kv, int p) { return kv_page_row(kv.pages, kv.page_shift, p); }

// K + V (+ FP8 scales) of one position over `layers` layers of n_kv heads.
inline size_t kv_bytes_per_token(KvType type, int layers, int n_kv, int head_dim) {
    return (size_t)layers * n_kv * 2 * (head_dim * (type == KvType::FP8 ? 1 : 2) + (type == KvType::FP8 ? sizeof(float) : 0));
}

struct KvCache {
    KvType type = KvType::BF16;
    int layers = 0, slots = 1, n_kv = 0, ctx = 0, head_dim = 0;
    uint8_t *k = nullptr, *v = nullptr;
    float *k_scale = nullptr, *v_scale = nullptr;

    size_t elem_bytes() const { return type == KvType::FP8 ? 1 : 2; }
    size_t layer_elems() const { return (size_t)n_kv * ctx * head_dim; }  // one layer of one slot
    KvLayer layer(int l, int slot = 0) const {
        size_t at = (size_t)l * slots + slot;
        KvLayer L;
        L.k = k + at * layer_elems() * elem_bytes();
        L.v = v + at * layer_elems() * elem_bytes();
        if (type == KvType::FP8) L.k_scale = k_scale + at * n_kv * ctx, L.v_scale = v_scale + at * n_kv * ctx;
        return L;
    }
    size_t bytes_per_token() const { return kv_bytes_per_token(type, layers, n_kv, head_dim); }
};

inline KvCache kv_cache_create(KvType type, int layers, int n_kv, int ctx, int head_dim, GpuMemory& mem, int slots = 1) {
    if (type == KvType::F16) die("kv_cache_create: an fp16 KV cache is not supported (bf16, fp8)");
    if (slots < 1) die("kv_cache_create: %d sequence slots", slots);
    KvCache c;
    c.type = type, c.layers = layers, c.slots = slots, c.n_kv = n_kv, c.ctx = ctx, c.head_dim = head_dim;
    size_t rows = (size_t)layers * slots * n_kv * ctx;
    c.k = mem.alloc<uint8_t>(rows * head_dim * c.elem_bytes(), "kv cache");
    c.v = mem.alloc<uint8_t>(rows * head_dim * c.elem_bytes(), "kv cache");
    if (type == KvType::FP8) {
        c.k_scale = mem.alloc<float>(rows, "kv cache");
        c.v_scale = mem.alloc<float>(rows, "kv cache");
    }
    return c;
}

// Zeroes rows row0 .. row0 + n - 1 of every layer, slot and head (K, V and FP8 scales): the batched core's padding
// block, which released blocks' table entries point at, so that whatever a kernel reads there (and masks) is finite.
inline void kv_cache_zero_rows(const KvCache& c, int row0, int n, cudaStream_t s) {
    if (row0 < 0 || n < 0 || row0 + n > c.ctx) die("internal: kv rows %d .. %d of %d", row0, row0 + n, c.ctx);
    const size_t heads = (size_t)c.layers * c.slots * c.n_kv, row = (size_t)c.head_dim * c.elem_bytes();
    for (uint8_t* p : {c.k, c.v}) CUDA_CHECK(cudaMemset2DAsync(p + row0 * row, c.ctx * row, 0, n * row, heads, s));
    if (c.type == KvType::FP8)
        for (float* p : {c.k_scale, c.v_scale}) CUDA_CHECK(cudaMemset2DAsync(p + row0, c.ctx * sizeof(float), 0, n * sizeof(float), heads, s));
}

// Lanes dl = 0 .. LPK-1 of an aligned group hold one head row of the cache (head_dim = 8 LPK), 8 elements
// each. kv_pack_8 puts a lane's 8 in the cache's form: bf16 (16 bytes of `packed`), or e4m3 (its first 8
// bytes) divided by the row's scale, which it returns (amax / 448 over the row: a shuffle over the group, so
// every lane of the warp calls it). kv_put_8 stores them (16-bit elements: bf16, or fp16 for the prefill's copy).
template <KvType KV, int LPK>
__device__ __forceinline__ float kv_pack_8(const float* x, uint4& packed) {
    if constexpr (KV == KvType::BF16) {
        packed = float8_to_bf16x8(x);
        return 1.f;
    } else {
        float amax = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(x[k]));
#pragma unroll
        for (int o = LPK / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        float s = amax > 0.f ? amax / kE4M3Max : 1.f, rs = 1.f / s;
        packed = make_uint4(0, 0, 0, 0);
        uint8_t* b = reinterpret_cast<uint8_t*>(&packed);
#pragma unroll
        for (int k = 0; k < 8; k++) b[k] = float_to_e4m3_dev(x[k] * rs);
        return s;
    }
}

// Lane dl's part of row `row` (and, from lane 0, the row's FP8 scale).
template <KvType KV, int LPK>
__device__ __forceinline__ void kv_put_8(void* cache, float* scales, size_t row, int dl, uint4 packed, float scale) {
    constexpr int hd = 8 * LPK;
    if constexpr (KV != KvType::FP8) {  // 16-bit elements
        *reinterpret_cast<uint4*>(static_cast<uint16_t*>(cache) + row * hd + dl * 8) = packed;
    } else {
        *reinterpret_cast<uint2*>(static_cast<uint8_t*>(cache) + row * hd + dl * 8) = make_uint2(packed.x, packed.y);
        if (dl == 0) scales[row] = scale;
    }
}

// 8 consecutive elements of a cache row (16 bytes of bf16, 8 of e4m3) as floats, before any FP8 scale.
template <KvType KV>
struct KvLoad {
    using Raw = typename std::conditional<KV == KvType::BF16, uint4, uint2>::type;  // 16 or 8 bytes
    static __device__ __forceinline__ void to_float(Raw r, float* f) {
        if constexpr (KV == KvType::BF16) {
            bf16x8_to_float(r, f);
        } else {
            const uint16_t* p = reinterpret_cast<const uint16_t*>(&r);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 t = e4m3x2_to_float2(p[k]);
                f[2 * k] = t.x, f[2 * k + 1] = t.y;
            }
        }
    }
};

}  // namespace monocu
