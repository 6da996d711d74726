// ops/attention_sm90.cuh — causal prefill attention for Hopper (sm_90a), FlashAttention-3 style: wgmma for Q K^T
// and P V, bulk tensor copies (TMA) for the tiles, a loading warpgroup beside two computing ones.
//
// Usage (attention.cuh's prefill_attention chooses it where it applies; the arguments are that function's):
//   if (prefill_attention_sm90_fits(type, hd, ap, keys, kv)) prefill_attention_sm90(q, type, kv, d_pos, out, T, nh, nkv, hd, ctx, keys, ap, st);
// It takes a bf16 or FP8 cache (or the fp16 copy of a chunk's own keys and values), contiguous or paged, head_dim 64 or
// 128, any GQA ratio, sliding windows and sinks; the portable kernel (attention.cuh) does the rest (KV eviction's
// statistics, split keys for short chunks) and every other GPU.
// A block owns 128 queries of one head (grid x = head, so the heads of a KV group run side by side and share its
// tiles in L2; grid y = query block, the longest first). Warpgroup 0 loads: one thread issues the bulk copies of the
// block's Q tile once and of each 128-key K and V tile into a ring of 3 stages, each stage's "full" barrier
// completing when its bytes have landed and its "empty" barrier when both computing warpgroups have finished with it.
// Warpgroups 1 and 2 compute, 64 query rows each: S = Q K^T (wgmma, both from shared memory, fp32 accumulators in
// registers), the online softmax of attention.cuh on S in registers, then O += P V with P straight from registers
// (the accumulator layout is the A operand's, wgmma.cuh) and V read "transposed" from its row-major tile. The key
// tiles run from the diagonal down, so only the first (and, with a window, the last) needs the per-element mask.
// The loading warpgroup gives its registers to the computing ones (setmaxnreg 24 / 240). Over an FP8 cache the copies
// bring the e4m3 codes, and the whole loading warpgroup widens each tile to fp16 in place, times the row scales it
// reads itself (as the portable kernel scales them), K a tile ahead of V, in a ring of 2 stages (48 / 224 registers;
// 72 / 216 at head_dim 64).
//
// Rows past the keys a block may see are not loaded (paged) or read as zeros (past the view's extent), but a
// paged tile's stale rows, or the cache's unwritten ones (0xFF: NaN), would make 0 x NaN in P V: the computing
// warpgroups zero those V rows of the diagonal tile before using it (FP8: the widening writes them as zeros). Their
// scores are masked by selection.
#pragma once

#include <type_traits>

#include "gpu/memory.cuh"
#include "gpu/mma.cuh"
#include "gpu/pdl.cuh"
#include "gpu/tma.cuh"
#include "gpu/wgmma.cuh"
#include "ops/attn_params.cuh"
#include "ops/kv_cache.cuh"

namespace monocu {

#if defined(MONOCU_SM90A)

constexpr int kSm90AttnM = 128, kSm90AttnN = 128, kSm90Threads = 384;

// Ring stages: 3 for 16-bit tiles; 2 for an FP8 cache, which also keeps the scales (3 x 64 KB of tiles and Q's
// 32 KB leave no room for them in 227 KB).
template <KvType KV>
constexpr int sm90_stages() { return KV == KvType::FP8 ? 2 : 3; }

template <int HD, KvType KV>
struct Sm90AttnSmem {
    static constexpr int kAtoms = HD / 64, S = sm90_stages<KV>();  // 64-column blocks of a row (a 128-byte swizzled row each)
    uint16_t q[kAtoms][kSm90AttnM][64];
    uint16_t k[S][kAtoms][kSm90AttnN][64];
    uint16_t v[S][kAtoms][kSm90AttnN][64];
    float k_scale[KV == KvType::FP8 ? S : 1][kSm90AttnN], v_scale[KV == KvType::FP8 ? S : 1][kSm90AttnN];  // FP8 only
    uint64_t full_q, full_k[S], full_v[S], empty_k[S], empty_v[S];
    uint64_t load_k[S], load_v[S];  // FP8: the codes have landed (full_*: widened)
};

// 2^x in one instruction (subnormal results flush to 0: they would be rounded away in P's 16 bits anyway).
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

struct Sm90AttnArgs {
    const int* d_pos;  // the first query's position (the chunk's)
    int T, nh, nkv;
    float scale_log2;
    AttnParams ap;
    bf16* out;
    const int* pages;  // paged: the sequence's block table, blocks of 2^page_shift rows; else null
    int page_shift;
    const float *k_scale, *v_scale;  // FP8: the layer's row scales [n_kv][ctx]
    int ctx;
};

// One K or V tile (keys kt .. kt + 127 of KV head kvh) into its stage, completing on bar. Paged, a box per block (or
// per 128 rows of a larger block), and none for blocks wholly past the last key. 16-bit rows land as the tile
// (128-byte swizzled, 64 columns a box); FP8 rows land as codes in the upper half of the stage (unswizzled, a whole
// row a box), for the loading warpgroup to widen (sm90_widen_fp8).
template <int HD, KvType KV>
__device__ __forceinline__ void sm90_load_kv(const CUtensorMap* map, uint16_t (*dst)[kSm90AttnN][64], uint64_t* bar, int kt, int kvh,
                                             int n_keys, const Sm90AttnArgs& a) {
    constexpr int A = HD / 64;
    constexpr bool FP8 = KV == KvType::FP8;
    const int R = a.pages ? min(kSm90AttnN, 1 << a.page_shift) : kSm90AttnN;
    int boxes = 1;  // contiguous: one box (rows past the view's extent read as zeros)
    if (a.pages)
        for (boxes = 0; boxes * R < kSm90AttnN && kt + boxes * R < n_keys;) boxes++;
    mbar_expect_tx(bar, boxes * R * HD * (FP8 ? 1 : 2));
    uint8_t* codes = reinterpret_cast<uint8_t*>(&dst[0][0][0]) + kSm90AttnN * HD;  // FP8: the stage's upper half
    for (int b = 0; b < boxes; b++) {
        const int row = a.pages ? kv_page_row(a.pages, a.page_shift, kt + b * R) : kt;
        if constexpr (FP8) {
            tma_load_3d(codes + b * R * HD, map, bar, 0, row, kvh);
        } else {
#pragma unroll
            for (int at = 0; at < A; at++) tma_load_3d(&dst[at][b * R][0], map, bar, at * 64, row, kvh);
        }
    }
}

// 16 e4m3 codes times their row's scale as fp16: columns 16 col .. + 15 of a tile row, stored where the 128-byte
// swizzle puts them (64-column block col / 4, its 16-byte chunks 2 (col % 4) and + 1, permuted by row % 8).
__device__ __forceinline__ void sm90_put_fp8x16(uint8_t* tile, int row, int col, uint4 raw, float scale) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(&raw);
    uint32_t h[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        __half2_raw x = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(p[k]), __NV_E4M3);
        float2 f = __half22float2(*reinterpret_cast<__half2*>(&x));
        h[k] = pack_half2(fminf(fmaxf(f.x * scale, -65504.f), 65504.f), fminf(fmaxf(f.y * scale, -65504.f), 65504.f));
        if (scale == 0.f) h[k] = 0;  // a row past the last key (a cache row's scale is never 0): zero, whatever its codes
    }
    uint8_t* row_base = tile + (col / 4) * (kSm90AttnN * 128) + row * 128;
    *reinterpret_cast<uint4*>(row_base + ((((col % 4) * 2) ^ (row & 7)) * 16)) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(row_base + ((((col % 4) * 2 + 1) ^ (row & 7)) * 16)) = make_uint4(h[4], h[5], h[6], h[7]);
}

// The loading warpgroup (128 threads), an FP8 tile: the e4m3 codes in the stage's upper half, times their row scales,
// into fp16 in the stage itself, 128-byte swizzled as the MMAs read it. Writes must not overtake the reads of the codes
// they cover. head_dim 128: a row's codes lie exactly under its second 64-column block, so the 8 lanes that own a row
// read it whole before writing it (a warp barrier). head_dim 64: fp16 rows 64-127 cover the codes of rows 0-127, so
// each half of the rows is read into registers before a barrier of the warpgroup and written after it.
template <int HD>
__device__ __forceinline__ void sm90_widen_fp8(uint16_t (*tile)[kSm90AttnN][64], const float* scales, int tid) {
    uint8_t* base = reinterpret_cast<uint8_t*>(&tile[0][0][0]);
    const uint8_t* codes = base + kSm90AttnN * HD;
    if constexpr (HD == 128) {
#pragma unroll 2
        for (int step = 0; step < kSm90AttnN / 16; step++) {
            const int row = step * 16 + tid / 8, col = tid % 8;
            const uint4 raw = *reinterpret_cast<const uint4*>(codes + row * HD + col * 16);
            const float sc = scales[row];
            __syncwarp();
            sm90_put_fp8x16(base, row, col, raw, sc);
        }
    } else {
        static_assert(HD == 64, "sm90_widen_fp8: head_dim 64 or 128");
#pragma unroll
        for (int half = 0; half < 2; half++) {
            uint4 raw[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int ch = tid + 128 * j, row = half * 64 + ch / 4;
                raw[j] = *reinterpret_cast<const uint4*>(codes + row * HD + (ch % 4) * 16);
            }
            named_barrier(6, 128);  // (1-5: the computing warpgroups')
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int ch = tid + 128 * j, row = half * 64 + ch / 4;
                sm90_put_fp8x16(base, row, ch % 4, raw[j], scales[row]);
            }
        }
    }
    fence_proxy_async();
}

template <int HD, KvType KV>
__global__ void __launch_bounds__(kSm90Threads, 1)
    prefill_attention_sm90_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                                  const __grid_constant__ CUtensorMap tv, const Sm90AttnArgs a) {
    constexpr int A = HD / 64, BM = kSm90AttnM, BN = kSm90AttnN, S = sm90_stages<KV>();
    constexpr bool F16 = KV != KvType::BF16, FP8 = KV == KvType::FP8;  // the MMAs' type: fp16 unless over a bf16 cache
    // Registers per thread: every warpgroup starts at the launch's share; the computing ones may grow only by what the
    // loading one gives back (setmaxnreg.inc would wait for registers forever).
    constexpr int kEntryRegs = 65536 / kSm90Threads / 8 * 8, kLoadRegs = !FP8 ? 24 : HD == 64 ? 72 : 48;
    constexpr int kMathRegs = !FP8 ? 240 : HD == 64 ? 216 : 224;
    static_assert((kEntryRegs - kLoadRegs) * 128 >= (kMathRegs - kEntryRegs) * 256, "the computing warpgroups' registers exceed the launch's");
    extern __shared__ uint8_t smem_raw[];
    auto& sm = *reinterpret_cast<Sm90AttnSmem<HD, KV>*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

    const int h = blockIdx.x, qb = gridDim.y - 1 - blockIdx.y, kvh = h / (a.nh / a.nkv);
    const int pos0 = *a.d_pos;
    const int n_keys = pos0 + min(a.T, (qb + 1) * BM);                        // the block's causal limit
    const int key_lo = attn_first_key(a.ap, pos0 + qb * BM) / BN * BN;         // first tile any row sees
    const int n_tiles = CEIL_DIV(n_keys - key_lo, BN);                         // tile i: keys key_lo + (n_tiles - 1 - i) BN ..
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(&sm.full_q, 1);
        for (int s = 0; s < S; s++) {
            mbar_init(&sm.full_k[s], FP8 ? 128 : 1), mbar_init(&sm.full_v[s], FP8 ? 128 : 1);
            mbar_init(&sm.empty_k[s], 256), mbar_init(&sm.empty_v[s], 256);
            mbar_init(&sm.load_k[s], 1), mbar_init(&sm.load_v[s], 1);
        }
        mbar_init_fence();
    }
    __syncthreads();

    auto tile_key0 = [&](int i) { return key_lo + (n_tiles - 1 - i) * BN; };  // tile i's first key
    if (wg == 0) {  // the loader
        const int tid = threadIdx.x;
        warpgroup_reg_dealloc<kLoadRegs>();
        // Tile i's K (v = 0) or V (v = 1), by one thread, once its stage is free; FP8: as codes, completing on load_*.
        auto issue = [&](int i, int v) {
            const int s = i % S;
            if (i >= S) mbar_wait(v ? &sm.empty_v[s] : &sm.empty_k[s], ((i / S) - 1) & 1);
            uint64_t* bar = FP8 ? (v ? &sm.load_v[s] : &sm.load_k[s]) : (v ? &sm.full_v[s] : &sm.full_k[s]);
            sm90_load_kv<HD, KV>(v ? &tv : &tk, v ? sm.v[s] : sm.k[s], bar, tile_key0(i), kvh, n_keys, a);
        };
        if (tid == 0) {
            mbar_expect_tx(&sm.full_q, BM * HD * 2);
#pragma unroll
            for (int at = 0; at < A; at++) tma_load_3d(&sm.q[at][0][0], &tq, &sm.full_q, at * 64, h, qb * BM);
            for (int i = 0; i < (FP8 ? 1 : n_tiles); i++) issue(i, 0), issue(i, 1);  // FP8: the rest as the tiles are widened
        }
        if constexpr (FP8) {
            // Thread 0 starts the next tile's copies, then the warpgroup widens this one. K runs a tile ahead of V: the
            // computing warpgroups' Q K^T of tile i + 1 must not wait behind the widening of tile i's V, which waits (for
            // its stage) on their P V of tile i - 1. Thread r reads row r's scales a tile ahead (0 past the last key).
            auto scale_of = [&](const float* scales, int i) {
                const int key = tile_key0(i) + tid;
                return key < n_keys ? scales[(size_t)kvh * a.ctx + kv_page_row(a.pages, a.page_shift, key)] : 0.f;
            };
            // Tile j of K (v = 0) or V: its scales into shared memory (the next tile's read ahead), the next tile's copies,
            // then the widening.
            float next[2] = {scale_of(a.k_scale, 0), scale_of(a.v_scale, 0)};
            auto widen = [&](int j, int v) {
                const int s = j % S;
                float* scales = v ? sm.v_scale[s] : sm.k_scale[s];
                scales[tid] = next[v];
                if (j + 1 < n_tiles) {
                    next[v] = scale_of(v ? a.v_scale : a.k_scale, j + 1);
                    if (tid == 0) issue(j + 1, v);
                }
                named_barrier(6, 128);  // the scales
                mbar_wait(v ? &sm.load_v[s] : &sm.load_k[s], (j / S) & 1);
                sm90_widen_fp8<HD>(v ? sm.v[s] : sm.k[s], scales, tid);
                mbar_arrive(v ? &sm.full_v[s] : &sm.full_k[s]);
            };
            widen(0, 0);
            for (int i = 0; i < n_tiles; i++) {
                if (i + 1 < n_tiles) widen(i + 1, 0);
                widen(i, 1);
            }
        }
        return;
    }
    warpgroup_reg_alloc<kMathRegs>();

    // A computing warpgroup: query rows c * 64 .. c * 64 + 63 of the block.
    const int c = wg - 1, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int row_lo = qb * BM + c * 64 + warp * 16 + g, row_hi = row_lo + 8;  // this thread's two query rows
    const int qpos_lo = pos0 + row_lo, qpos_hi = pos0 + row_hi;
    const int first_lo = attn_first_key(a.ap, qpos_lo), first_hi = attn_first_key(a.ap, qpos_hi);
    const int wg_pos = pos0 + qb * BM + c * 64;  // the warpgroup's first query position

    mbar_wait(&sm.full_q, 0);
    if constexpr (!F16) {  // over a bf16 cache the products are bf16: q (fp16 in memory) converted in place
#pragma unroll
        for (int at = 0; at < A; at++)
            for (int e = tid; e < 64 * 64 / 8; e += 128) {
                uint4* p = reinterpret_cast<uint4*>(&sm.q[at][c * 64][0]) + e;
                uint4 x = *p;
                uint32_t* w = reinterpret_cast<uint32_t*>(&x);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
                    w[j] = pack_bf16x2(f.x, f.y);
                }
                *p = x;
            }
        fence_proxy_async();
        named_barrier(2 + c, 128);
    }

    float o[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    float sc[BN / 2];        // S of the newest tile, then its P in fp32
    uint32_t pa[BN / 16][4];  // P of the tile whose P V runs, as the A operand (16 keys per step)

    // The two computing warpgroups take turns issuing their products (ping-pong): while one runs its softmax on the
    // CUDA cores, the other's matrix products hold the tensor cores. Warpgroup 0 goes first.
    if (c == 1) named_barrier_arrive(4, 256);

    // S = Q K^T of tile i into sc (issued, not waited for).
    auto issue_qk = [&](int i) {
        const int s = i % S;
        mbar_wait(&sm.full_k[s], (i / S) & 1);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            wgmma_ss_m64n128<F16>(sc, wgmma_desc_sw128(&sm.q[ks / 4][c * 64][(ks % 4) * 16]),
                                  wgmma_desc_sw128(&sm.k[s][ks / 4][0][(ks % 4) * 16]), ks > 0);
        wgmma_commit();
    };
    // O += P V of tile i from pa (issued, not waited for).
    auto issue_pv = [&](int i) {
        const int s = i % S;
        mbar_wait(&sm.full_v[s], (i / S) & 1);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) wgmma_rs_m64n<HD, F16>(o, pa[kk], wgmma_desc_sw128(&sm.v[s][0][kk * 16][0], BN * 128));
        wgmma_commit();
    };
    // The online softmax of tile i's S (waited for) in place: scaled to log2 units, masked where a row may not see a
    // key (only tiles crossing the diagonal or a window edge), P = 2^(S - m); returns each row's rescale of O.
    auto softmax = [&](int i, float& c_lo, float& c_hi) {
        const int kt = tile_key0(i);
        const bool masked = kt + BN - 1 > wg_pos || kt < attn_first_key(a.ap, wg_pos + 63);
        // The maxima are taken on the raw scores (the scale is positive) and the scale joins the exponent's FMA.
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const bool lo = e < 2;
                if (masked) {
                    const int key = kt + n * 8 + 2 * t + (e & 1);
                    if (key > (lo ? qpos_lo : qpos_hi) || key < (lo ? first_lo : first_hi)) sc[4 * n + e] = -INFINITY;
                }
                if (lo) mx_lo = fmaxf(mx_lo, sc[4 * n + e]);
                else mx_hi = fmaxf(mx_hi, sc[4 * n + e]);
            }
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
        mx_lo = fmaxf(m_lo, mx_lo * a.scale_log2), mx_hi = fmaxf(m_hi, mx_hi * a.scale_log2);
        // A row that has seen no key yet (a window's first tiles) keeps max -inf: exponents against 0 make its p 0.
        const float use_lo = mx_lo == -INFINITY ? 0.f : mx_lo, use_hi = mx_hi == -INFINITY ? 0.f : mx_hi;
        c_lo = exp2f(m_lo - use_lo), c_hi = exp2f(m_hi - use_hi);
        m_lo = mx_lo, m_hi = mx_hi;
        l_lo *= c_lo, l_hi *= c_hi;
#pragma unroll
        for (int n = 0; n < BN / 8; n++) {
            sc[4 * n] = exp2_ftz(fmaf(sc[4 * n], a.scale_log2, -use_lo)), sc[4 * n + 1] = exp2_ftz(fmaf(sc[4 * n + 1], a.scale_log2, -use_lo));
            sc[4 * n + 2] = exp2_ftz(fmaf(sc[4 * n + 2], a.scale_log2, -use_hi)), sc[4 * n + 3] = exp2_ftz(fmaf(sc[4 * n + 3], a.scale_log2, -use_hi));
            l_lo += sc[4 * n] + sc[4 * n + 1], l_hi += sc[4 * n + 2] + sc[4 * n + 3];
        }
    };
    auto pack_p = [&] {
#pragma unroll
        for (int n = 0; n < BN / 8; n++) {
            pa[n / 2][(n & 1) * 2 + 0] = pack_16x2<F16>(sc[4 * n], sc[4 * n + 1]);
            pa[n / 2][(n & 1) * 2 + 1] = pack_16x2<F16>(sc[4 * n + 2], sc[4 * n + 3]);
        }
    };

    // The diagonal tile (tile 0): its V rows past the last key zeroed by both warpgroups (see the top). FP8 tiles
    // come widened with those rows zero already (the loading warpgroup's K runs ahead of V and needs tile 0's Q K^T
    // done before it widens tile 0's V).
    if (!FP8 && n_keys - tile_key0(0) < BN) {
        const int from = n_keys - tile_key0(0), tid2 = threadIdx.x - 128;
        mbar_wait(&sm.full_v[0], 0);
        for (int e = tid2; e < A * (BN - from) * 8; e += 256) {
            const int at = e / ((BN - from) * 8), r = from + (e / 8) % (BN - from), ch = e % 8;
            reinterpret_cast<uint4*>(&sm.v[0][at][r][0])[ch] = make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
        named_barrier(1, 256);
    }

    // Tile 0: S, softmax, P (O is still zero: nothing to rescale). Warpgroup 1 does not hand the turn back after its
    // last issue (nobody waits for it).
    float c_lo, c_hi;
    named_barrier(4 + c, 256);
    issue_qk(0);
    if (c == 0 || n_tiles > 1) named_barrier_arrive(4 + (1 - c), 256);
    wgmma_wait<0>();
    wgmma_hold(sc);
    mbar_arrive(&sm.empty_k[0]);
    softmax(0, c_lo, c_hi);
    pack_p();
    // Tile i's Q K^T runs beside tile i - 1's P V; the softmax of tile i waits only for the first.
    for (int i = 1; i < n_tiles; i++) {
        named_barrier(4 + c, 256);
        issue_qk(i);
        issue_pv(i - 1);
        if (c == 0 || i < n_tiles - 1) named_barrier_arrive(4 + (1 - c), 256);
        wgmma_wait<1>();
        wgmma_hold(sc);
        mbar_arrive(&sm.empty_k[i % S]);
        softmax(i, c_lo, c_hi);
        wgmma_wait<0>();
        wgmma_hold(o);
        wgmma_hold_regs(pa);
        mbar_arrive(&sm.empty_v[(i - 1) % S]);
#pragma unroll
        for (int d = 0; d < HD / 8; d++) o[4 * d] *= c_lo, o[4 * d + 1] *= c_lo, o[4 * d + 2] *= c_hi, o[4 * d + 3] *= c_hi;
        pack_p();
    }
    issue_pv(n_tiles - 1);
    wgmma_wait<0>();
    wgmma_hold(o);
    mbar_arrive(&sm.empty_v[(n_tiles - 1) % S]);

    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    if (a.ap.sinks) {  // GPT-OSS: the head's sink joins each row's denominator
        const float sink = attn_sink_log2(a.ap, h);
        l_lo += exp2f(sink - m_lo), l_hi += exp2f(sink - m_hi);
    }
    const float inv_lo = 1.f / l_lo, inv_hi = 1.f / l_hi;
#pragma unroll
    for (int d = 0; d < HD / 8; d++) {
        const int col = h * HD + d * 8 + 2 * t;
        if (row_lo < a.T)
            *reinterpret_cast<uint32_t*>(a.out + (size_t)row_lo * a.nh * HD + col) = pack_bf16x2(o[4 * d] * inv_lo, o[4 * d + 1] * inv_lo);
        if (row_hi < a.T)
            *reinterpret_cast<uint32_t*>(a.out + (size_t)row_hi * a.nh * HD + col) = pack_bf16x2(o[4 * d + 2] * inv_hi, o[4 * d + 3] * inv_hi);
    }
}

template <int HD, KvType KV>
inline void prefill_attention_sm90_launch(const __half* q, const KvLayer& kv, const int* d_pos, bf16* out, int T, int nh, int nkv, int ctx,
                                          long keys, const AttnParams& ap, cudaStream_t stream) {
    // Rows the views may read: the cache's (or the pool's); contiguous, no more than the chunk can see (a copy's rows past
    // its chunk may lie past its buffer, and rows past the keys then read as zeros).
    const uint64_t rows = kv.pages ? (uint64_t)ctx : (uint64_t)std::min<long>(ctx, keys), H = HD, N = nkv, C = ctx;
    const uint32_t R = kv.pages ? (uint32_t)std::min(kSm90AttnN, 1 << kv.page_shift) : (uint32_t)kSm90AttnN;
    const CUtensorMap tq = tma_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, q, {H, (uint64_t)nh, (uint64_t)T}, {H * 2, (uint64_t)nh * HD * 2},
                                   {64, 1, kSm90AttnM});
    CUtensorMap tk, tv;
    if constexpr (KV == KvType::FP8) {  // codes: a whole row a box, unswizzled (the scales are read by the loading threads)
        tk = tma_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, kv.k, {H, rows, N}, {H, C * H}, {(uint32_t)HD, R, 1}, CU_TENSOR_MAP_SWIZZLE_NONE);
        tv = tma_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, kv.v, {H, rows, N}, {H, C * H}, {(uint32_t)HD, R, 1}, CU_TENSOR_MAP_SWIZZLE_NONE);
    } else {
        const CUtensorMapDataType type = KV == KvType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        tk = tma_map(type, kv.k, {H, rows, N}, {H * 2, C * H * 2}, {64, R, 1});
        tv = tma_map(type, kv.v, {H, rows, N}, {H * 2, C * H * 2}, {64, R, 1});
    }
    Sm90AttnArgs a{d_pos, T, nh, nkv, 1.4426950408889634f / sqrtf((float)HD), ap, out, kv.pages, kv.page_shift, kv.k_scale, kv.v_scale, ctx};
    const size_t smem = sizeof(Sm90AttnSmem<HD, KV>) + 1024;  // + room to align the tiles to 1024 bytes
    allow_dynamic_smem(prefill_attention_sm90_kernel<HD, KV>, smem);
    dim3 grid(nh, CEIL_DIV(T, kSm90AttnM));
    prefill_attention_sm90_kernel<HD, KV><<<grid, kSm90Threads, smem, stream>>>(tq, tk, tv, a);
    LAUNCH_CHECK();
}

#endif  // MONOCU_SM90A

// Whether the Hopper kernel takes this pass: built for sm_90a, head_dim 64 or 128, no KV eviction, a known bound on
// the keys read (the chunk's last position + 1), and paged blocks of at least 8 rows (a 16-bit box must start on a
// 1024-byte boundary of the swizzle).
inline bool prefill_attention_sm90_fits(KvType type, int hd, const AttnParams& ap, long keys, const KvLayer& kv) {
#if defined(MONOCU_SM90A)
    (void)type;  // every cache type fits
    return (hd == 64 || hd == 128) && !ap.h2o_stats && ap.kv_budget == 0 && keys > 0 && (!kv.pages || kv.page_shift >= 3);
#else
    (void)type, (void)hd, (void)ap, (void)keys, (void)kv;
    return false;
#endif
}

inline void prefill_attention_sm90(const __half* q, KvType type, const KvLayer& kv, const int* d_pos, bf16* out, int T, int nh, int nkv,
                                   int hd, int ctx, long keys, const AttnParams& ap, cudaStream_t stream) {
    if (!prefill_attention_sm90_fits(type, hd, ap, keys, kv)) die("prefill_attention_sm90: this pass does not fit the Hopper kernel");
#if defined(MONOCU_SM90A)
    auto go = [&](auto hd_c, auto kv_c) {
        prefill_attention_sm90_launch<decltype(hd_c)::value, decltype(kv_c)::value>(q, kv, d_pos, out, T, nh, nkv, ctx, keys, ap, stream);
    };
    using KT = KvType;
    auto with_hd = [&](auto kv_c) { hd == 64 ? go(std::integral_constant<int, 64>{}, kv_c) : go(std::integral_constant<int, 128>{}, kv_c); };
    if (type == KT::F16) with_hd(std::integral_constant<KT, KT::F16>{});
    else if (type == KT::BF16) with_hd(std::integral_constant<KT, KT::BF16>{});
    else with_hd(std::integral_constant<KT, KT::FP8>{});
#else
    (void)q, (void)kv, (void)d_pos, (void)out, (void)T, (void)nh, (void)nkv, (void)ctx, (void)stream;
#endif
}

}  // namespace monocu
