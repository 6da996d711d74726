// ops/flash_decode.cuh — attention for one new token over the whole KV cache (Flash-Decoding).
//
// Usage:
//   FlashDecode fd = flash_decode_plan(n_heads, n_kv_heads, head_dim, ctx, mem);   // once, at load
//   flash_decode(fd, q, kv.type, kv.layer(l), d_pos, out, stream, params);
//   flash_decode_fused(fd, DecodeQkv{qkv, q_norm_w, k_norm_w, rope.cos_sin, eps}, kv.type, kv.layer(l), d_pos, out, stream, params);
//     (the same, after doing qk_norm_rope_cache's work for this one token itself: see DecodeQkv)
//   flash_decode_fused(fd, in, kv.type, paged_layer, d_pos, out, stream, params, n);   // n sequences' decode tokens in
//     one launch, each through its own block table (the batched core: grid z = sequence, splits_for(n) each)
//     q       bf16 [n_heads][head_dim]     this token's queries (normed, rotated)
//     kv      this layer's cache (kv_cache.cuh), bf16 or FP8; keys 0 .. *d_pos are valid
//     out     bf16 [n_heads * head_dim]    softmax(q k^T / sqrt(d)) v, heads side by side
//     params  AttnParams (attn_params.cuh): with a sliding window only keys pos - window + 1 .. pos are split
//             and read
//
// Why split: one block per head would leave most of the GPU idle and make per-token cost grow with
// context. Flash-Decoding (Dao et al., 2023) splits the key range across blocks: grid = (splits, kv
// heads); each block streams its slice of K and V once for all G = n_heads / n_kv query heads of its
// group (GQA: K/V read once, not G times), keeps an online softmax (running max m, sum l, unnormalised
// output o) and writes (m, l, o). A second, small launch merges the splits (a warp per 32 dims of a head):
//   M = max m_s,  L = sum l_s 2^(m_s - M),  out = sum o_s 2^(m_s - M) / L.
// The split count is fixed at plan time (CUDA graphs replay a fixed grid); the slice length follows the
// live length *d_pos + 1, so a short context uses few splits; the blocks of the other splits return at once
// (they are launched, since the grid is fixed, but touch nothing: the merge reads only the active splits).
// Inside a block (flash_decode_split_kernel): 4 warps, each taking every 4th 16-key tile of the block's
// range through a ring in shared memory (cp.async), S = Q K^T and O += P V on tensor cores with the G
// query heads as the MMA rows, online softmax in registers (FlashAttention-2's inner loop). Scores are
// kept in log2 units (scaled by log2(e)/sqrt(d)), so the softmax uses exp2. An FP8 tile is widened to fp16
// in registers as its fragments are loaded (flash_decode_scores / _pv).
// Contract: *d_pos and the cache rows before it are read before the wait for the previous kernel, so
// they must be written before that kernel was launched (an earlier decode step).
#pragma once

#include <cfloat>
#include <type_traits>

#include "gpu/async_copy.cuh"
#include "gpu/memory.cuh"
#include "gpu/mma.cuh"
#include "ops/attn_params.cuh"
#include "ops/kv_cache.cuh"
#include "gpu/pdl.cuh"
#include "ops/rope.cuh"
#include "gpu/trace.cuh"

namespace monocu {

struct FlashDecode {
    int n_heads = 0, n_kv = 0, head_dim = 0, ctx = 0, n_splits = 1;  // ctx: the cache's rows per head (their stride)
    int min_chunk = 64;         // keys: the smallest split (one 16-key tile per warp)
    int max_seqs = 1;           // sequences one launch may take (the batched core's decode)
    int sms = 1;                // the GPU's SMs (read once, at plan time)
    float* part_o = nullptr;    // [seqs][n_heads][splits][head_dim]
    float2* part_ml = nullptr;  // [seqs][n_heads][splits]: (max in log2 units, sum)
    int keys = 0;               // the longest sequence's keys (the plan's context), which the split choice assumes
    // Splits per sequence when n sequences share a launch: exactly the plan's for one, else best_splits up to it.
    int splits_for(int n) const { return n == 1 ? n_splits : best_splits(n, n_kv, sms, keys, n_splits); }
    // The split count, up to `most`, whose launch should end soonest with 2 blocks per SM, taking a block's time
    // as its keys plus a fixed cost of about 128 keys' worth (its first tiles' latency, its share of the merge).
    // Whole waves matter: 4 sequences over 8 KV heads on 132 SMs at 16k take one wave of 2,048 keys at 8 splits,
    // 4 waves of 496 at 33, and two waves at 9 (the old choice, 2 x 132 blocks / 32 rounded up).
    static int best_splits(int n, int n_kv, int sms, int keys, int most) {
        int best = 1;
        double best_cost = 0.0;
        for (int s = 1; s <= most; s++) {
            double waves = (double)CEIL_DIV((long long)n * n_kv * s, 2LL * sms);
            double cost = waves * ((double)keys / s + 128.0);
            if (s == 1 || cost < best_cost * 0.999) best = s, best_cost = cost;
        }
        return best;
    }
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

constexpr int kFdWarps = 4;  // warps per split block

constexpr int kFdMaxSplits = 256;

// Keys per split for the live length: a whole number of min_chunk keys (a multiple of the 16-key tile), so
// that short contexts use few splits, each a tile per warp.
__device__ __forceinline__ int flash_decode_chunk(int len, int n_splits, int min_chunk) {
    int chunk = (len + n_splits - 1) / n_splits;
    return max(1, (chunk + min_chunk - 1) / min_chunk) * min_chunk;
}
// How many splits have keys at that chunk size (the rest return at once).
__device__ __forceinline__ int flash_decode_active_splits(int len, int chunk, int n_splits) { return min(n_splits, (len + chunk - 1) / chunk); }

// o += w v, four lanes of a partial output.
__device__ __forceinline__ void fma4(float4& o, float4 v, float w) {
    o.x = fmaf(v.x, w, o.x), o.y = fmaf(v.y, w, o.y), o.z = fmaf(v.z, w, o.z), o.w = fmaf(v.w, w, o.w);
}

// This token's cache row of one KV head as the block that makes it keeps it in shared memory, in the
// cache's form (bf16, or e4m3 with its scales), so that the tile holding it need not read it back.
template <int HD>
struct FdNewRow {
    __align__(16) uint8_t k[HD * 2], v[HD * 2];  // HD bf16, or HD e4m3 bytes
    float k_scale, v_scale;
};

// Fused mode, warp-wide, before the wait: the q and k norm weights and the RoPE row of pos into L1 (a line
// per lane; they are never written, and pos is known), so that the norm and rotation of the queries and of the
// new row, once the projections arrive, do not wait on L2 between their shuffles.
template <int HD>
__device__ __forceinline__ void flash_decode_prefetch_norm_rope(const DecodeQkv& in, int pos, int lane) {
    constexpr int kNormLines = HD * 2 / 128, kRopeLines = HD / 2 * 8 / 128;  // 128-byte lines: bf16 weights; float2 (cos, sin)
    const void* base = nullptr;  // null: no norm (families without q/k norm), or a lane with no line
    int line = lane;
    if (line < kNormLines) {
        base = in.q_norm;
    } else if (line < 2 * kNormLines) {
        base = in.k_norm, line -= kNormLines;
    } else if (line < 2 * kNormLines + kRopeLines) {
        base = in.rope ? in.rope + (size_t)pos * (HD / 2) : nullptr, line -= 2 * kNormLines;
    }
    if (base) asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const char*>(base) + line * 128));
}

// Warp-wide (slot 0's lanes store): the new token's cache row of KV head kvh, rotated for position pos, to
// cache row `at` (pos itself unless KV eviction keeps fewer rows: kv_row) and to `keep`.
template <int HD, KvType KV>
__device__ __forceinline__ void flash_decode_store_new_row(const DecodeQkv& in, const KvLayer& kv, int n_heads, int n_kv, int kvh, int pos,
                                                           int at, int ctx, int dl, bool writer, FdNewRow<HD>& keep) {
    constexpr int LPK = HD / 8;
    const float* k_raw = in.qkv + (size_t)(n_heads + kvh) * HD + dl * 8;
    const float* v_raw = in.qkv + (size_t)(n_heads + n_kv + kvh) * HD + dl * 8;
    float k[8], v[8];
    load_float8(k_raw, k);
    load_float8(v_raw, v);
    head_norm_rope_8<LPK>(k, in.k_norm, in.rope, pos, dl, in.eps);
    uint4 pk, pv;
    float sk = kv_pack_8<KV, LPK>(k, pk), sv = kv_pack_8<KV, LPK>(v, pv);
    if (!writer) return;
    size_t row = (size_t)kvh * ctx + kv_page_row(kv, at);
    kv_put_8<KV, LPK>(kv.k, kv.k_scale, row, dl, pk, sk);
    kv_put_8<KV, LPK>(kv.v, kv.v_scale, row, dl, pv, sv);
    kv_put_8<KV, LPK>(keep.k, &keep.k_scale, 0, dl, pk, sk);  // row 0 of a one-row "cache"
    kv_put_8<KV, LPK>(keep.v, &keep.v_scale, 0, dl, pv, sv);
}

// Shared memory of one warp: a ring of key tiles (16 keys of K and V each, as cp.async lands them). A bf16
// row is padded to HD + 8 elements, so that the 8 rows an ldmatrix touches fall in different banks; an FP8 row
// (HD e4m3 bytes) to HD + 16 bytes, so that the 16-byte fragment loads of flash_decode_scores / _pv do not collide.
// Two stages: the tile in use and the next one in flight. (Deeper rings, and for FP8 3 or 4 blocks per SM instead of
// 2, measured no faster: kb/log.md, thirtieth session.)
template <int HD, KvType KV>
struct FdTiles {
    static constexpr bool kFp8 = KV == KvType::FP8;
    static constexpr int kKeys = 16;                        // one k16 step of P V, two n8 tiles of Q K^T
    static constexpr int kLd = HD + 8;                      // padded bf16 row, elements
    static constexpr int kStages = 2;
    static constexpr int kRowBytes = kFp8 ? HD + 16 : kLd * 2;
    static constexpr int kChunksPerRow = HD * (kFp8 ? 1 : 2) / 16;
    static constexpr size_t kScaleBytes = kFp8 ? kKeys * 4 : 0;
    static constexpr size_t kStageBytes = 2 * (kKeys * kRowBytes + kScaleBytes);  // K rows (+ scales), then V
    static constexpr size_t kWarpBytes = kStages * kStageBytes;
    static constexpr size_t kSmemBytes = kFdWarps * kWarpBytes;
    // kv: 0 = K, 1 = V
    static __device__ __forceinline__ unsigned char* rows(unsigned char* warp_smem, int stage, int kv) {
        return warp_smem + stage * kStageBytes + kv * (kKeys * kRowBytes + kScaleBytes);
    }
    static __device__ __forceinline__ float* scales(unsigned char* warp_smem, int stage, int kv) {
        return reinterpret_cast<float*>(rows(warp_smem, stage, kv) + kKeys * kRowBytes);
    }
};

// Warp-wide: starts copying the tile of keys key0 .. key0 + 15 into ring stage `stage` and commits one
// group. Keys at or past `end` become zeros (so that 0-probability times V stays 0), and so does row
// `skip` (this token's row, which may not be written yet: flash_decode_fix_row fills it later).
template <int HD, KvType KV>
__device__ __forceinline__ void flash_decode_issue_tile(unsigned char* ws, int stage, const uint8_t* k_rows, const uint8_t* v_rows,
                                                        const float* ks, const float* vs, const int* pages, int shift, int key0, int end,
                                                        int skip, int lane) {
    using T = FdTiles<HD, KV>;
    constexpr int kChunks = T::kKeys * T::kChunksPerRow;
    constexpr size_t kRow = (size_t)HD * (T::kFp8 ? 1 : 2);  // bytes of a cache row in global memory
    // bf16: read-once hints (async_copy.cuh). Not for FP8, whose 16k decode they slowed (269.8 -> 264.6 tok/s,
    // Qwen3-4B, H100, kb/log.md tenth session).
    auto copy = [](void* dst, const void* src, int n) {
        if constexpr (T::kFp8) cp_async_16(dst, src, n);
        else cp_async_16_read_once(dst, src, n);
    };
#pragma unroll
    for (int c = lane; c < kChunks; c += 32) {
        int r = c / T::kChunksPerRow, col = (c % T::kChunksPerRow) * 16, key = key0 + r;
        bool valid = key < end && key != skip;
        size_t off = valid ? (size_t)kv_page_row(pages, shift, key) * kRow + col : 0;
        copy(T::rows(ws, stage, 0) + r * T::kRowBytes + col, k_rows + off, valid ? 16 : 0);
        copy(T::rows(ws, stage, 1) + r * T::kRowBytes + col, v_rows + off, valid ? 16 : 0);
    }
    if constexpr (T::kFp8) {  // the 16 keys' scales: lane = 16 kv + r (one 4-byte copy each: rows are not 16-byte aligned)
        int kv = lane / 16, r = lane % 16, key = key0 + r;
        bool valid = key < end && key != skip;
        cp_async_4(T::scales(ws, stage, kv) + r, (kv ? vs : ks) + (valid ? kv_page_row(pages, shift, key) : 0), valid ? 4 : 0);
    }
    cp_async_commit();
}

// Warp-wide, after the tile holding row `pos` has landed: that row (and its scales), from `kept` where this
// block made it (fused mode), else straight from global memory, where the previous kernel has just written it.
template <int HD, KvType KV>
__device__ __forceinline__ void flash_decode_fix_row(unsigned char* ws, int stage, const uint8_t* k_rows, const uint8_t* v_rows,
                                                     const float* ks, const float* vs, int r, int pos, const FdNewRow<HD>* kept, int lane) {
    using T = FdTiles<HD, KV>;
    constexpr size_t kRow = (size_t)HD * (T::kFp8 ? 1 : 2);
    int kv = lane / 16, c = lane % 16;
    if (c < T::kChunksPerRow) {
        uint4 v;
        if (kept) v = *reinterpret_cast<const uint4*>((kv ? kept->v : kept->k) + c * 16);
        else v = __ldcg(reinterpret_cast<const uint4*>((kv ? v_rows : k_rows) + (size_t)pos * kRow + c * 16));
        *reinterpret_cast<uint4*>(T::rows(ws, stage, kv) + r * T::kRowBytes + c * 16) = v;
    }
    if (T::kFp8 && c == T::kChunksPerRow)
        T::scales(ws, stage, kv)[r] = kept ? (kv ? kept->v_scale : kept->k_scale) : __ldcg((kv ? vs : ks) + pos);
    __syncwarp();
}

// The MMA fragments. bf16 cache: Q K^T reads K's rows as they are (rows g, k-steps of 16 dims) and P V reads V
// transposed by ldmatrix. FP8 cache: the tensor cores take fp16 (every e4m3 value is exact in it; the per-key
// scales multiply S and P instead), widened in registers as the fragments are loaded, two bytes per cvt. An MMA's
// k order, and its output columns, may be any permutation both operands share, so each lane's bytes are chosen
// contiguous in shared memory (16-byte loads, no conversion pass, no second buffer):
//   Q K^T, k-step ks: slots 2t, 2t + 1 | 2t + 8, 2t + 9 hold head dims t HD/4 + 4 ks + 0, 1 | 2, 3, so that a lane's
//     K bytes for every k-step are the HD/4 bytes of its key's row from t HD/4 (the queries follow suit);
//   P V: output column c of n-tile dt is head dim c HD/8 + dt, so that a lane's V bytes for every n-tile are the
//     HD/8 bytes from g HD/8 of each of its 4 keys' rows (keys 2t, 2t + 1, 2t + 8, 2t + 9; byte_perm pairs them).
// (FP8 MMAs for Q K^T, K's codes as they are and the queries split into two e4m3 parts, were slower: 16k, one
// sequence, H200, 17.5 -> 20.3 us; kb/log.md.)
template <int HD, bool FP8>
__device__ __forceinline__ int flash_decode_out_dim(int dt, int col) { return FP8 ? col * (HD / 8) + dt : dt * 8 + col; }

__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {  // the low 16 bits: two e4m3, low byte first
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Q as the A operand: rows = the G query heads of this KV head (rows >= G are zero, so only the a[0] and a[2]
// registers are kept), in the cache type's k order (above). bf16 for a bf16 cache, fp16 for FP8.
template <int HD, bool FP8>
__device__ __forceinline__ void flash_decode_q_fragments(const bf16* q_rows, int G, int lane, uint32_t (*qa)[2]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t v = 0;
            if (g < G) {
                int dim = FP8 ? t * (HD / 4) + ks * 4 + 2 * h : ks * 16 + 2 * t + 8 * h;
                v = *reinterpret_cast<const uint32_t*>(q_rows + (size_t)g * HD + dim);
                if (FP8) {
                    float2 f = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
                    v = pack_16x2<true>(f.x, f.y);
                }
            }
            qa[ks][h] = v;
        }
    }
}

// S (two n8 tiles of keys: s[nt], lane holding keys nt * 8 + 2t, + 1 of query row g) = Q K^T over one tile. Even
// and odd k-steps accumulate apart (s, s_odd; the caller adds them): two chains of dependent MMAs half as long.
template <int HD, KvType KV>
__device__ __forceinline__ void flash_decode_scores(const uint32_t (*qa)[2], const unsigned char* k_rows, int lane, float (*s)[4],
                                                    float (*s_odd)[4]) {
    using T = FdTiles<HD, KV>;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t zero = 0;
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
        uint32_t w[HD / 16];  // FP8: this lane's HD/4 bytes of key nt * 8 + g, a word per k-step
        if constexpr (T::kFp8) {
            const uint4* src = reinterpret_cast<const uint4*>(k_rows + (nt * 8 + g) * T::kRowBytes + t * (HD / 4));
#pragma unroll
            for (int i = 0; i < HD / 64; i++) {
                uint4 v = src[i];
                w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
            }
        }
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            uint32_t a[4] = {qa[ks][0], zero, qa[ks][1], zero}, b0, b1;
            if constexpr (T::kFp8) {
                b0 = e4m3x2_to_f16x2(w[ks]), b1 = e4m3x2_to_f16x2(w[ks] >> 16);
            } else {
                const uint16_t* krow = reinterpret_cast<const uint16_t*>(k_rows) + (nt * 8 + g) * T::kLd + ks * 16 + 2 * t;
                b0 = *reinterpret_cast<const uint32_t*>(krow), b1 = *reinterpret_cast<const uint32_t*>(krow + 8);
            }
            mma_16816<T::kFp8>(ks % 2 ? s_odd[nt] : s[nt], a, b0, b1);
        }
    }
}

// O += P V over one tile; pa: P as the A operand (keys 2t, 2t + 1 and 2t + 8, 2t + 9 of row g).
template <int HD, KvType KV>
__device__ __forceinline__ void flash_decode_pv(const uint32_t* pa, const unsigned char* v_rows, int lane, float (*o)[4]) {
    using T = FdTiles<HD, KV>;
    if constexpr (T::kFp8) {
        constexpr int B = HD / 8;  // bytes of each key's row: one per n-tile
        using Vec = std::conditional_t<B == 16, uint4, uint2>;
        const int g = lane >> 2, t = lane & 3;
        Vec r[4];
#pragma unroll
        for (int k = 0; k < 4; k++) r[k] = *reinterpret_cast<const Vec*>(v_rows + (2 * t + (k & 1) + 8 * (k >> 1)) * T::kRowBytes + g * B);
#pragma unroll
        for (int j = 0; j < B / 4; j++) {  // dims 4j .. 4j + 3 of this lane's run: n-tiles 4j .. 4j + 3
            uint32_t w[4];
#pragma unroll
            for (int k = 0; k < 4; k++) w[k] = reinterpret_cast<const uint32_t*>(&r[k])[j];
            // (key 2t, key 2t + 1) byte pairs of dims 4j, 4j + 1 | 4j + 2, 4j + 3; the same for keys 2t + 8, 2t + 9
            uint32_t lo0 = __byte_perm(w[0], w[1], 0x5140), hi0 = __byte_perm(w[0], w[1], 0x7362);
            uint32_t lo1 = __byte_perm(w[2], w[3], 0x5140), hi1 = __byte_perm(w[2], w[3], 0x7362);
            mma_16816<true>(o[4 * j], pa, e4m3x2_to_f16x2(lo0), e4m3x2_to_f16x2(lo1));
            mma_16816<true>(o[4 * j + 1], pa, e4m3x2_to_f16x2(lo0 >> 16), e4m3x2_to_f16x2(lo1 >> 16));
            mma_16816<true>(o[4 * j + 2], pa, e4m3x2_to_f16x2(hi0), e4m3x2_to_f16x2(hi1));
            mma_16816<true>(o[4 * j + 3], pa, e4m3x2_to_f16x2(hi0 >> 16), e4m3x2_to_f16x2(hi1 >> 16));
        }
    } else {  // ldmatrix.trans gives V's B fragments, two 8-dim tiles at a time
        const uint16_t* Vt = reinterpret_cast<const uint16_t*>(v_rows);
        const int mi = lane >> 3, r = lane & 7;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, Vt + ((mi & 1) * 8 + r) * T::kLd + (dt + (mi >> 1)) * 8);
            mma_16816<false>(o[dt], pa, b[0], b[1]);
            mma_16816<false>(o[dt + 1], pa, b[2], b[3]);
        }
    }
}

// The split kernel. Grid (splits, KV heads), 4 warps. Each warp takes every 4th 16-key tile of the
// block's key range and runs FlashAttention-2's inner loop on it with the G query heads as the MMA's M
// rows: S = Q K^T and O += P V on mma.sync (bf16, or fp16 for an FP8 cache: its K and V are exact in
// fp16 and its scales multiply S and P), online softmax in registers. Tiles stream through a per-warp
// ring in shared memory (cp.async), kStages - 1 ahead of the one being multiplied.
// (The CUDA-core version before this spent ~100 instructions per key on dot products, shuffles and
// exp2 in every lane: at 16k it took the same 51 us per layer with the FP8 cache as with bf16, so it was
// not bound by bytes; this one takes 31 / 22 us, kb/log.md.)
// Before waiting for the previous kernel, a block already reads *d_pos and starts its first tiles: the
// rows before *d_pos are written by earlier decode steps, which the caller separates from this launch by
// an ordinary (non-overlapping) launch or copy. Row *d_pos (this token's) is written by the previous
// kernel or by this launch, so it is read only after the wait (flash_decode_fix_row).
template <int HD, int G, KvType KV>
__global__ void __launch_bounds__(kFdWarps * 32, 2)
    flash_decode_split_kernel(const bf16* __restrict__ q, DecodeQkv in, KvLayer kv, const int* __restrict__ d_pos, int ctx, int n_splits,
                              int min_chunk, float scale_log2, AttnParams ap, float* __restrict__ part_o, float2* __restrict__ part_ml) {
    using T = FdTiles<HD, KV>;
    constexpr bool FP8 = T::kFp8;
    constexpr int NS = T::kStages, LPK = HD / 8;
    extern __shared__ __align__(16) unsigned char fd_smem[];
    __shared__ __align__(16) bf16 sq[G][HD];  // fused mode: this group's queries after q_norm and RoPE
    __shared__ FdNewRow<HD> new_row;          // fused mode: this token's cache row, in the block holding pos

    TRACE_BEGIN();
    pdl_launch_dependents();
    const int split = blockIdx.x, kvh = blockIdx.y, n_kv = gridDim.y, n_heads = n_kv * G;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (const int z = blockIdx.z) {  // sequence z of a batch (the batched core): its token's row, position, table, partials
        d_pos += z;
        if (kv.pages) kv.pages += (size_t)z * kv.pages_stride;
        if (in.qkv) in.qkv += (size_t)z * (n_heads + 2 * n_kv) * HD;
        else q += (size_t)z * n_heads * HD;
        part_o += (size_t)z * n_heads * n_splits * HD, part_ml += (size_t)z * n_heads * n_splits;
    }
    // pos: the token's position (its RoPE row); at: its cache row (pos, unless KV eviction keeps fewer rows)
    const int pos = *d_pos, at = kv_row(ap, pos), first = attn_first_key(ap, at), len = at + 1 - first;
    const int chunk = flash_decode_chunk(len, n_splits, min_chunk);
    const int begin = first + split * chunk, end = min(at + 1, begin + chunk);  // keys first .. at, split
    const int n_active = flash_decode_active_splits(len, chunk, n_splits);
    if (split >= n_active) return;  // an idle split (short context): whole block, before any dependent read
    const bool fused = in.qkv != nullptr;

    const size_t row_bytes = (size_t)HD * (FP8 ? 1 : 2);
    const uint8_t* k_rows = static_cast<const uint8_t*>(kv.k) + (size_t)kvh * ctx * row_bytes;
    const uint8_t* v_rows = static_cast<const uint8_t*>(kv.v) + (size_t)kvh * ctx * row_bytes;
    const float* ks = FP8 ? kv.k_scale + (size_t)kvh * ctx : nullptr;
    const float* vs = FP8 ? kv.v_scale + (size_t)kvh * ctx : nullptr;
    unsigned char* ws = fd_smem + warp * T::kWarpBytes;
    auto tile_key0 = [&](int j) { return begin + T::kKeys * (warp + kFdWarps * j); };  // this warp's j-th tile
    auto issue = [&](int j) {
        int key0 = tile_key0(j);
        if (key0 < end) flash_decode_issue_tile<HD, KV>(ws, j % NS, k_rows, v_rows, ks, vs, kv.pages, kv.page_shift, key0, end, at, lane);
        else cp_async_commit();  // an empty group keeps "group j = tile j"
    };
#pragma unroll
    for (int j = 0; j < NS - 1; j++) issue(j);
    if (fused && warp == 0) flash_decode_prefetch_norm_rope<HD>(in, pos, lane);
    pdl_wait();  // q (or qkv) and row pos were just written
    TRACE_MARK(1);

    // Queries: fused mode makes them here (q_norm, RoPE, rounded to bf16 as the separate path stores them),
    // warp w the heads w, w + 4, ...; the block holding pos also stores the new cache row first.
    const bf16* q_rows = q + (size_t)kvh * G * HD;
    if (fused) {
        const int slot = lane / LPK, dl = lane % LPK;
        for (int g0 = warp; g0 < G; g0 += kFdWarps * (32 / LPK)) {
            int gh = g0 + kFdWarps * slot;  // this lane's head; every lane joins the shuffles
            float x[8];
            load_float8(in.qkv + (size_t)(kvh * G + min(gh, G - 1)) * HD + dl * 8, x);
            head_norm_rope_8<LPK>(x, in.q_norm, in.rope, pos, dl, in.eps);
            if (gh < G)
#pragma unroll
                for (int j = 0; j < 8; j++) sq[gh][dl * 8 + j] = __float2bfloat16_rn(x[j]);
        }
        if (warp == 0 && begin <= at && at < end)
            flash_decode_store_new_row<HD, KV>(in, kv, n_heads, n_kv, kvh, pos, at, ctx, lane % LPK, lane / LPK == 0, new_row);
        __syncthreads();  // sq, and the new row, which only this block reads
        q_rows = &sq[0][0];
        TRACE_MARK(2);
    }
    uint32_t qa[HD / 16][2];
    flash_decode_q_fragments<HD, FP8>(q_rows, G, lane, qa);

    float o[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m = -INFINITY, l = 0.f;  // row g (query head g): running max in log2 units, this lane's part of the sum
    const uint32_t zero = 0;  // rows g + 8 of P: no such head

    for (int j = 0; tile_key0(j) < end; j++) {
        const int key0 = tile_key0(j), stage = j % NS;
        __syncwarp();             // every lane is done with tile j - 1: its stage may be refilled
        issue(j + NS - 1);        // so NS - 1 tiles are in flight while this one is waited for and multiplied
        cp_async_wait<NS - 1>();  // this lane's copies of tile j have landed ...
        __syncwarp();             // ... and so have the other lanes'
        if (key0 <= at && at < key0 + T::kKeys)
            flash_decode_fix_row<HD, KV>(ws, stage, k_rows, v_rows, ks, vs, at - key0, kv_page_row(kv, at), fused ? &new_row : nullptr, lane);
        // S = Q K^T: two tiles of 8 keys; lane holds keys nt * 8 + 2t, + 1 of row g.
        float s[2][4] = {}, s_odd[2][4] = {};
        flash_decode_scores<HD, KV>(qa, T::rows(ws, stage, 0), lane, s, s_odd);
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] += s_odd[nt][e];
        // Scale to log2 units (and by the FP8 key scales), mask keys past the end, online softmax of row g.
        float mx = m, p[2][2];
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int r = nt * 8 + 2 * t + e;
                float v = s[nt][e] * scale_log2;
                if (FP8) v *= T::scales(ws, stage, 0)[r];
                p[nt][e] = key0 + r < end ? v : -INFINITY;
                mx = fmaxf(mx, p[nt][e]);
                if (ap.h2o_scores && g < G && key0 + r < end) ap.h2o_scores[(size_t)(kvh * G + g) * ctx + key0 + r] = v;  // KV eviction
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));  // key0 is valid, so mx is finite
        if (!__all_sync(0xffffffffu, mx == m)) {  // a new maximum somewhere: rescale (past the first tiles, seldom)
            float corr = exp2f(m - mx);
            m = mx;
            l *= corr;
#pragma unroll
            for (int d = 0; d < HD / 8; d++) o[d][0] *= corr, o[d][1] *= corr;
        }
        uint32_t pa[4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            float p0 = exp2f(p[nt][0] - m), p1 = exp2f(p[nt][1] - m);
            l += p0 + p1;
            if (FP8) p0 *= T::scales(ws, stage, 1)[nt * 8 + 2 * t], p1 *= T::scales(ws, stage, 1)[nt * 8 + 2 * t + 1];
            pa[nt * 2] = pack_16x2<FP8>(p0, p1);
            pa[nt * 2 + 1] = zero;  // rows g + 8: no such head
        }
        flash_decode_pv<HD, KV>(pa, T::rows(ws, stage, 1), lane, o);
    }
    cp_async_wait<0>();  // no copy may land in shared memory once it is reused below
    TRACE_MARK(3);
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);

    // Merge the 4 warps through shared memory (the ring's space), then write this split's partial result.
    float* wo = reinterpret_cast<float*>(fd_smem);     // [warps][G][HD]
    float2* wml = reinterpret_cast<float2*>(wo + kFdWarps * G * HD);  // [warps][G]
    __syncthreads();
    if (g < G) {
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            wo[(warp * G + g) * HD + flash_decode_out_dim<HD, FP8>(d, 2 * t)] = o[d][0];
            wo[(warp * G + g) * HD + flash_decode_out_dim<HD, FP8>(d, 2 * t + 1)] = o[d][1];
        }
        if (t == 0) wml[warp * G + g] = make_float2(m, l);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * HD; i += kFdWarps * 32) {
        int gh = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kFdWarps; w++) M = fmaxf(M, wml[w * G + gh].x);
        float acc = 0.f, L = 0.f;
#pragma unroll
        for (int w = 0; w < kFdWarps; w++) {
            float2 ml = wml[w * G + gh];
            float c = ml.y > 0.f ? exp2f(ml.x - M) : 0.f;  // a warp without keys has m = -inf, l = 0
            acc += wo[(w * G + gh) * HD + d] * c;
            L += ml.y * c;
        }
        int h = kvh * G + gh;
        part_o[((size_t)h * n_splits + split) * HD + d] = acc;
        if (d == 0) part_ml[(size_t)h * n_splits + split] = make_float2(M, L);
    }
    TRACE_MARK(4);
    TRACE_END(2, 0, 0);
}

// The merge: block (h, j), one warp, writes dims 32 j .. 32 j + 31 of query head h from the active splits.
// Lane 8 g + q takes dims 4 q .. 4 q + 3 of those and splits g, g + 4, g + 8, ..., 16 of them loaded at once
// (one L2 round trip for up to 64 splits: 33 at full context on 132 SMs with 8 KV heads); each lane keeps
// its own (M, L, o), and the 4 groups combine by shuffles. No shared memory, so that these small blocks do
// not take the room of the next GEMV's blocks, which become resident beside them (PDL). Loads use __ldcg:
// the split launch wrote the partials, through L2.
// Why a launch of its own: before, the last split block of each KV head merged its G heads after a
// release-acquire count: one launch fewer, but a counter round trip and one block's merge of all splits
// (4.7 us at 16k) sat on the critical path. Qwen3-4B on the H100 (kb/log.md, tenth session), old and new
// binaries alternating: 512 context 312.2-312.5 -> 314.5-315.2 tok/s (bf16), 457 -> 461 (fp8), 612 -> 612
// (int4); 16k 248.0 -> 255.2-255.5, with the read-once key loads (which alone gave 247.5 -> 251.1). Merged by
// 4-warp blocks with shared memory instead: 16k 254.3, but int4 2% slower at 512 (those blocks crowd out
// o_proj's); one lane per dim over all splits: 1.5% slower at 16k.
template <int HD>
__global__ void __launch_bounds__(32)
    flash_decode_merge_kernel(const float* __restrict__ part_o, const float2* __restrict__ part_ml, const int* __restrict__ d_pos, int n_splits,
                              int min_chunk, AttnParams ap, bf16* __restrict__ out) {
    constexpr int kBatch = 16, kGroups = 4;
    TRACE_BEGIN();
    pdl_launch_dependents();
    const int h = blockIdx.x, grp = threadIdx.x / 8, d = blockIdx.y * 32 + (threadIdx.x % 8) * 4, z = blockIdx.z;
    d_pos += z, out += (size_t)z * gridDim.x * HD;  // sequence z of a batch
    part_o += (size_t)z * gridDim.x * n_splits * HD, part_ml += (size_t)z * gridDim.x * n_splits;
    const int at = kv_row(ap, *d_pos), len = at + 1 - attn_first_key(ap, at);
    const int n_active = flash_decode_active_splits(len, flash_decode_chunk(len, n_splits, min_chunk), n_splits);
    const float2* ml = part_ml + (size_t)h * n_splits;
    const float* po = part_o + (size_t)h * n_splits * HD + d;
    pdl_wait();  // the split launch is done
    TRACE_MARK(1);
    float M = -INFINITY, L = 0.f;  // this lane's running max (log2 units) and sum over its splits; o is scaled to M
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = grp; s0 < n_active; s0 += kGroups * kBatch) {
        float2 m[kBatch];
        float4 v[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; i++) {
            int sp = s0 + i * kGroups;
            m[i] = make_float2(-INFINITY, 0.f);  // l = 0: weight 0 (also guards a split without keys)
            if (sp < n_active) m[i] = __ldcg(&ml[sp]), v[i] = __ldcg(reinterpret_cast<const float4*>(po + (size_t)sp * HD));
        }
        float Mb = M;
#pragma unroll
        for (int i = 0; i < kBatch; i++)
            if (m[i].y > 0.f) Mb = fmaxf(Mb, m[i].x);
        float c = M == -INFINITY ? 0.f : exp2f(M - Mb);
        o = make_float4(o.x * c, o.y * c, o.z * c, o.w * c), L *= c;
#pragma unroll
        for (int i = 0; i < kBatch; i++) {
            if (!(m[i].y > 0.f)) continue;
            float w = exp2f(m[i].x - Mb);
            fma4(o, v[i], w);
            L = fmaf(m[i].y, w, L);
        }
        M = Mb;
    }
#pragma unroll
    for (int off = 8; off < 32; off *= 2) {  // groups g and g ^ (off / 8) combine
        float Mo = __shfl_xor_sync(0xffffffffu, M, off), Lo = __shfl_xor_sync(0xffffffffu, L, off);
        float4 oo;
        oo.x = __shfl_xor_sync(0xffffffffu, o.x, off), oo.y = __shfl_xor_sync(0xffffffffu, o.y, off);
        oo.z = __shfl_xor_sync(0xffffffffu, o.z, off), oo.w = __shfl_xor_sync(0xffffffffu, o.w, off);
        float Mn = fmaxf(M, Mo);
        float a = L > 0.f ? exp2f(M - Mn) : 0.f, b = Lo > 0.f ? exp2f(Mo - Mn) : 0.f;
        o.x = o.x * a + oo.x * b, o.y = o.y * a + oo.y * b, o.z = o.z * a + oo.z * b, o.w = o.w * a + oo.w * b;
        L = L * a + Lo * b, M = Mn;
    }
    if (ap.h2o_stats && blockIdx.y == 0 && threadIdx.x == 0) ap.h2o_stats[h] = make_float2(M, L);  // KV eviction
    if (ap.sinks) L += exp2f(attn_sink_log2(ap, h) - M);  // GPT-OSS: the head's sink joins the denominator
    if (grp == 0) {
        float inv_L = 1.f / L;
        uint2 packed = make_uint2(pack_bf16x2(o.x * inv_L, o.y * inv_L), pack_bf16x2(o.z * inv_L, o.w * inv_L));
        *reinterpret_cast<uint2*>(out + (size_t)h * HD + d) = packed;
    }
    TRACE_MARK(4);
    TRACE_END(3, 0, 0);
}

// ctx: rows per head of the cache the launches read; seq_ctx (0: ctx) the longest sequence, which sizes the splits.
inline FlashDecode flash_decode_plan(int n_heads, int n_kv, int head_dim, int ctx, GpuMemory& mem, int max_seqs = 1, int seq_ctx = 0) {
    if (head_dim != 64 && head_dim != 128) die("flash_decode: head_dim %d is not supported (64, 128)", head_dim);
    if (n_heads % n_kv != 0 || n_heads / n_kv > 8) die("flash_decode: %d heads over %d KV heads (group of 1..8 supported)", n_heads, n_kv);
    const int sms = sm_count();
    FlashDecode fd;
    fd.n_heads = n_heads, fd.n_kv = n_kv, fd.head_dim = head_dim, fd.ctx = ctx, fd.sms = sms;
    // At most one split per min_chunk keys; of those, the count that fills whole waves of 2 blocks per SM best
    // (splits_for). 33 for 8 KV heads on 132 SMs at 16k.
    fd.keys = seq_ctx > 0 ? seq_ctx : ctx;
    fd.n_splits = FlashDecode::best_splits(1, n_kv, sms, fd.keys, std::max(1, std::min(CEIL_DIV(fd.keys, fd.min_chunk), kFdMaxSplits)));
    fd.max_seqs = std::max(1, max_seqs);
    size_t parts = 0;  // the most (sequence, split) pairs a launch writes
    for (int n = 1; n <= fd.max_seqs; n++) parts = std::max(parts, (size_t)n * fd.splits_for(n));
    fd.part_o = mem.alloc<float>(parts * n_heads * head_dim, "workspace");
    fd.part_ml = mem.alloc<float2>(parts * n_heads, "workspace");
    return fd;
}

template <int HD, int G, KvType KV>
inline void flash_decode_split_launch(const FlashDecode& fd, const bf16* q, const DecodeQkv& in, const KvLayer& kv, const int* d_pos,
                                      bf16* out, const AttnParams& ap, int n_seqs, cudaStream_t stream) {
    constexpr size_t ring = FdTiles<HD, KV>::kSmemBytes, merge = (size_t)kFdWarps * G * (HD * 4 + 8);  // the warps' merge reuses the ring
    constexpr size_t smem = ring > merge ? ring : merge;
    allow_dynamic_smem(flash_decode_split_kernel<HD, G, KV>, smem);  // once, before any graph capture (eager warm-up)
    const int splits = fd.splits_for(n_seqs);
    dim3 grid(splits, fd.n_kv, n_seqs);
    float scale_log2 = 1.4426950408889634f / sqrtf((float)HD);
    launch(flash_decode_split_kernel<HD, G, KV>, grid, kFdWarps * 32, smem, stream, q, in, kv, d_pos, fd.ctx, splits, fd.min_chunk, scale_log2,
           ap, fd.part_o, fd.part_ml);
    launch(flash_decode_merge_kernel<HD>, dim3(fd.n_heads, HD / 32, n_seqs), 32, 0, stream, fd.part_o, fd.part_ml, d_pos, splits, fd.min_chunk, ap,
           out);
}

template <int HD, KvType KV>
inline void flash_decode_split_dispatch(const FlashDecode& fd, const bf16* q, const DecodeQkv& in, const KvLayer& kv, const int* d_pos,
                                        bf16* out, const AttnParams& ap, int n, cudaStream_t s) {
    switch (fd.n_heads / fd.n_kv) {
        case 1: return flash_decode_split_launch<HD, 1, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
        case 2: return flash_decode_split_launch<HD, 2, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
        case 3: return flash_decode_split_launch<HD, 3, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
        case 4: return flash_decode_split_launch<HD, 4, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
        case 5: return flash_decode_split_launch<HD, 5, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
        case 6: return flash_decode_split_launch<HD, 6, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
        case 7: return flash_decode_split_launch<HD, 7, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
        case 8: return flash_decode_split_launch<HD, 8, KV>(fd, q, in, kv, d_pos, out, ap, n, s);
    }
}

inline void flash_decode_any(const FlashDecode& fd, const bf16* q, const DecodeQkv& in, KvType type, const KvLayer& kv, const int* d_pos,
                             bf16* out, const AttnParams& ap, cudaStream_t stream, int n = 1) {
    if (type == KvType::F16) die("flash_decode: reads a bf16 or FP8 cache, not fp16");
    attn_params_check(ap, "flash_decode");
    if (n < 1 || n > fd.max_seqs) die("flash_decode: %d sequences in one launch; planned for at most %d", n, fd.max_seqs);
    if (n > 1 && (ap.kv_budget || ap.h2o_scores)) die("flash_decode: KV eviction is for one sequence at a time");
    if (fd.head_dim == 64) {
        if (type == KvType::BF16) flash_decode_split_dispatch<64, KvType::BF16>(fd, q, in, kv, d_pos, out, ap, n, stream);
        else flash_decode_split_dispatch<64, KvType::FP8>(fd, q, in, kv, d_pos, out, ap, n, stream);
    } else {
        if (type == KvType::BF16) flash_decode_split_dispatch<128, KvType::BF16>(fd, q, in, kv, d_pos, out, ap, n, stream);
        else flash_decode_split_dispatch<128, KvType::FP8>(fd, q, in, kv, d_pos, out, ap, n, stream);
    }
}

// Two launches: the split blocks, then the merge into out. q is ready.
// (n sequences: q, d_pos and out hold a row each, kv.pages a table each, as flash_decode_fused below.)
inline void flash_decode(const FlashDecode& fd, const bf16* q, KvType type, const KvLayer& kv, const int* d_pos, bf16* out,
                         cudaStream_t stream, const AttnParams& ap = {}, int n = 1) {
    flash_decode_any(fd, q, DecodeQkv{}, type, kv, d_pos, out, ap, stream, n);
}

// The same, making q and the new cache row from the raw projections (DecodeQkv) in the split launch.
// n sequences (the batched core's decode): token z's projections are row z of in.qkv, its position d_pos[z], its
// block table kv.pages + z kv.pages_stride, its output row z of out.
inline void flash_decode_fused(const FlashDecode& fd, const DecodeQkv& in, KvType type, const KvLayer& kv, const int* d_pos, bf16* out,
                               cudaStream_t stream, const AttnParams& ap = {}, int n = 1) {
    if (!in.qkv) die("flash_decode_fused: needs the projections");
    flash_decode_any(fd, nullptr, in, type, kv, d_pos, out, ap, stream, n);
}

}  // namespace monocu
