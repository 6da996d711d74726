// ops/gemm_mxfp4.cuh — a prefill chunk's expert GEMMs over MXFP4 weights on Hopper: every expert in one launch, the
// weights read as the checkpoint holds them (4.25 bits each; no bf16 copy of them anywhere).
//
// Usage (runtime/moe_layer.cuh; the rows grouped by expert, expert e's rows first[e] .. first[e + 1] - 1):
//   n = mxfp4_gemm_tiles(first, E, tiles);             // host: each expert's rows cut into tiles of up to 192
//   (tiles uploaded to d_tiles)
//   if (mxfp4_gemm_used(L)) mxfp4_grouped_gemm(L, w, scales, bias, x, rows, d_tiles, n, y, add, stream);
//       // y[r] (+)= W_e x[r] + b_e for each row r of expert e; L is any expert's projection (the shape), w, scales and
//       // bias the device tables of every expert's blocks, scales and biases (load/load_linear.cuh's ExpertLinears;
//       // bias may be null)
//
// Why: before this, each expert's weights were dequantized to bf16 into a scratch buffer and multiplied by cuBLAS:
// 23 ms of gpt-oss-20b's 65 ms 2k-token prefill went to the dequantization, and the 120b's 128 experts made it worse.
//
// The product is computed transposed, Y^T = W X^T, so that the weights are wgmma's A operand, which may come from
// registers: each thread turns the codes it needs into bf16 in registers, and nothing dequantized is ever stored.
//   - Work: an item is 128 weight rows by one tile (up to 192 rows of one expert). Persistent: one block of 384
//     threads per SM takes items b, b + grid, ... (row blocks fastest, so that the blocks running together share an
//     x tile in L2). Warpgroup 0 loads; warpgroups 1 and 2 compute 64 weight rows each.
//   - Loading, 64 inputs a stage into a ring of 4 (running on into the next item): one thread copies the x tile (one
//     or two boxes of 128 rows x 64, bf16) by bulk tensor copies, 128-byte swizzled as wgmma reads a K-major B; each of the 128 threads
//     copies its weight row's two 16-byte blocks and the 8 aligned bytes around its two scales with cp.async (zeros
//     past N or K), none of them waited for by the thread. The stage's barrier completes when all of it has landed;
//     a second barrier says both computing warpgroups are done with it.
//   - Computing: per 16 inputs, a thread's A fragment is its rows g and g + 8 (of its warp's 16) at inputs 2t, 2t + 1,
//     2t + 8, 2t + 9: bytes t and t + 4 (and 8 + t, 12 + t for the block's second 16), byte t of each 4-byte word of the
//     row's 16-byte block. A byte's two codes become a bf16 pair by a byte permute, one multiply by a constant and
//     masks (mx_pair), times 2^126 and the block's scale (bf16 multiplies, exact). Stage i + 1 is converted while
//     stage i's products run. Tiles of up to 64 rows use 64-column products, up to 128 128-column ones, longer ones
//     192 (96 accumulators a thread: 256 would not fit the 168 registers a thread of 384 gets).
//   - Output: each thread owns 96, 64 or 32 elements of Y^T; it stores them plus the bias (or adds them) inside the tile
//     and N.
// Measured (H200, kb/status.md): gpt-oss-20b's 2k prefill 31,663 tok/s dequantizing -> 46,439 (8k 29,807 -> 42,268),
// the experts at 345 / 323 TFLOP/s (cuBLAS on bf16 weights: ~406 for gate_up); 512 tokens 12,063 -> 27,590; the 120b's
// 2k 8,385 -> 20,630 (128 experts: ~64 rows an expert, ~195 TFLOP/s). The 128-row tiles with 9 instructions a pair
// and 8 stages ran the 20b's 2k at 41,785 (MONOCU_MXFP4_TILE=128 brings the tiling back: 42,718 with the rest as now).
// Where the time goes (ncu, 128-row kernel): the tensor pipe is busy a third of the cycles; the conversion keeps the
// issue slots half busy and the products wait on it. Tried: a read-modify-write of y for biases written first (a round
// trip per element: 194 TFLOP/s; now the bias joins the store); scales loaded by the loading threads themselves (they
// waited on each load: no gain over the pipeline depth); 256-token tiles with setmaxnreg (hung; likely cause, not
// checked: the loading warpgroup's cp.async address arithmetic needs more than the 40 registers it kept); 2^126 folded
// into the scale for scales <= 128, one multiply a pair (no faster).
// Shapes (mxfp4_gemm_fits): built for sm_90a, K a multiple of 32, weights and scales 16-byte aligned.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/async_copy.cuh"
#include "gpu/memory.cuh"
#include "gpu/pdl.cuh"
#include "gpu/tma.cuh"
#include "gpu/wgmma.cuh"
#include "ops/weights.cuh"

namespace monocu {

constexpr int kMxgRows = 128;   // weight rows per block
constexpr int kMxgTile = 192;   // the most expert rows (tokens) a tile holds (products over 64, 128 or 192 of them)
constexpr int kMxgK = 64;       // inputs per stage
constexpr int kMxgStages = 4;
constexpr int kMxgThreads = 384;

// One tile of the list: rows row0 .. row0 + rows - 1 (rows <= kMxgTile), all of expert `expert`.
struct MxgTile {
    int expert, row0, rows, pad;
};

// Rows a tile takes: 192 (the default) or 128 (MONOCU_MXFP4_TILE=128; the tests set it directly). Larger tiles convert
// each code once for more products.
inline int& mxfp4_gemm_tile_rows() {
    static int rows = [] {
        const char* v = std::getenv("MONOCU_MXFP4_TILE");
        return v && std::string(v) == "128" ? 128 : kMxgTile;
    }();
    return rows;
}

// Host: the tiles of the rows grouped by expert (first[e] .. first[e + 1] - 1 are expert e's); returns their number.
inline int mxfp4_gemm_tiles(const std::vector<int>& first, int E, std::vector<MxgTile>& tiles) {
    const int rows = mxfp4_gemm_tile_rows();
    if (rows != 128 && rows != kMxgTile) die("mxfp4_gemm_tiles: tiles of %d rows (128 or %d)", rows, kMxgTile);
    tiles.clear();
    for (int e = 0; e < E; e++)
        for (int r = first[e]; r < first[e + 1]; r += rows) tiles.push_back({e, r, std::min(rows, first[e + 1] - r), 0});
    return (int)tiles.size();
}
// The most tiles that `rows` gathered rows of E experts can make (tiles of 128 rows or more).
inline int mxfp4_gemm_max_tiles(long rows, int E) { return (int)(rows / 128) + E; }

// On by default where it fits; MONOCU_MXFP4_GEMM=off brings back dequantize-then-cuBLAS for the experts (to compare,
// or should the kernel be in doubt). Read once, before loading: the dequantization scratch is sized for the experts
// only when it is off.
inline bool& mxfp4_gemm_on() {
    static bool on = [] {
        const char* v = std::getenv("MONOCU_MXFP4_GEMM");
        return !(v && std::string(v) == "off");
    }();
    return on;
}

// Whether the kernel can take L's shape (a Hopper build, K a multiple of 32, 16-byte aligned tensors) ...
inline bool mxfp4_gemm_fits(const Linear& L) {
#if defined(MONOCU_SM90A)
    return L.fmt == WFormat::MXFP4 && L.K % 32 == 0 && L.N > 0 && reinterpret_cast<uintptr_t>(L.w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(L.scale) % 16 == 0;
#else
    (void)L;
    return false;
#endif
}
// ... and whether the kit uses it for L (switched on, and it fits).
inline bool mxfp4_gemm_used(const Linear& L) { return mxfp4_gemm_on() && mxfp4_gemm_fits(L); }

#if defined(MONOCU_SM90A)

struct MxgSmem {
    uint16_t x[kMxgStages][256][kMxgK];        // 128-byte swizzled rows (first: 1024-byte aligned), two boxes of 128
    uint8_t w[kMxgStages][kMxgRows][32];       // a row's two 16-byte blocks, swapped in rows with bit 2 set (banks)
    uint32_t scale[kMxgStages][kMxgRows][2];   // the aligned 8 bytes that hold a row's two scales (mxg_scale_word)
    uint64_t full[kMxgStages], empty[kMxgStages];
};

struct MxgArgs {
    const uint8_t* const* w;      // [E] blocks [N][K / 2]
    const uint8_t* const* scale;  // [E] scales [N][K / 32]
    const bf16* const* bias;      // [E] bf16 [N], or null
    const MxgTile* tiles;
    float* y;                     // [rows][N]
    int N, K, row_tiles, items;   // row_tiles: blocks of 128 weight rows; items: row_tiles x the tiles
    bool add;
};

// bf16 multiply of two pairs (exact here: one factor a power of two, and subnormal inputs are kept).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// The two E2M1 codes of byte `sel` (0-3) of v (element 2j in the low nibble, 2j + 1 in the high) as a bf16 pair times
// scale2 (the block's scale in both halves). The byte is taken alone (a byte permute), and one multiply by 2^6 + 2^18
// makes two copies of it, 12 bits apart: the low code's magnitude bits e1 e0 m land on bf16 bits 6-8 and its sign on
// bit 9, the high code's on 22-24 and 25; the signs go up 6 to bits 15 and 31 (the stray bits are masked off). Each
// half is then the code's value times 2^-126 (a subnormal for e = 0, a normal number otherwise, for all 8 codes):
// times 2^126, times 2^(s - 127), both exact. 7 instructions a pair (checked on the CPU for every byte and scale).
__device__ __forceinline__ uint32_t mx_pair(uint32_t v, uint32_t sel, uint32_t scale2) {
    const uint32_t t = __byte_perm(v, 0u, 0x4440u | sel) * 0x00040040u;
    const uint32_t bits = (t & 0x01C001C0u) | ((t << 6) & 0x80008000u);
    return bf16x2_mul(bf16x2_mul(bits, 0x7E807E80u), scale2);  // x 2^126, x 2^(s - 127)
}
__device__ __forceinline__ uint32_t mx_scale2(uint32_t s) { return (s << 7) | (s << 23); }  // 2^(s - 127) twice (s = 0: 0)
// Row n's scales of stage i (MXFP4 blocks 2i and 2i + 1) start at byte n KB + 2i of the tensor: the loader copies the
// two aligned 4-byte words from its 4-byte boundary down (the two bytes lie within them), the reader starts at
// (n KB + 2i) % 4.
__device__ __forceinline__ size_t mxg_scale_word(int n, int KB, int i) { return ((size_t)n * KB + 2 * i) & ~size_t(3); }

// The loading warpgroup (128 threads; thread r owns weight row r of each item), over the block's items in turn:
// each stage's x tile (one thread, a bulk tensor copy) and each row's two weight blocks and scale words (cp.async,
// zeros past N and K), all completing on the stage's barrier.
__device__ __forceinline__ void mxg_load(MxgSmem& sm, const CUtensorMap& tx, const MxgArgs& a) {
    const int r = threadIdx.x, n_k = CEIL_DIV(a.K, kMxgK), KB = a.K / 32, sw = (r >> 2) & 1;
    const size_t scale_bytes = (size_t)a.N * KB;
    int it = 0;  // stages so far, over all items
    for (int item = blockIdx.x; item < a.items; item += gridDim.x) {
        const MxgTile tile = a.tiles[item / a.row_tiles];
        const int n = (item % a.row_tiles) * kMxgRows + r;
        const bool row_ok = n < a.N;
        const uint8_t* w = a.w[tile.expert] + (size_t)(row_ok ? n : 0) * (a.K / 2);
        const uint8_t* sc = a.scale[tile.expert];
        for (int i = 0; i < n_k; i++, it++) {
            const int s = it % kMxgStages;
            if (it >= kMxgStages) mbar_wait(&sm.empty[s], ((it / kMxgStages) - 1) & 1);
            if (r == 0) {  // the x tile, in boxes of 128 rows (a second one only for a tile of more than 128)
                const int boxes = tile.rows > 128 ? 2 : 1;
                mbar_expect_tx(&sm.full[s], boxes * 128 * kMxgK * 2);
                for (int bx = 0; bx < boxes; bx++) tma_load_2d(&sm.x[s][bx * 128][0], &tx, &sm.full[s], i * kMxgK, tile.row0 + bx * 128);
            }
#pragma unroll
            for (int blk = 0; blk < 2; blk++) {
                const int b = 2 * i + blk;
                const bool ok = row_ok && b < KB;
                cp_async_16(&sm.w[s][r][(blk ^ sw) * 16], ok ? w + (size_t)b * 16 : w, ok ? 16 : 0);
            }
            const size_t word = mxg_scale_word(row_ok ? n : 0, KB, i);
            cp_async_4(&sm.scale[s][r][0], sc + word, row_ok ? 4 : 0);
            const size_t rest = word + 4 < scale_bytes ? scale_bytes - word - 4 : 0;  // (the tensor may end inside the word)
            cp_async_4(&sm.scale[s][r][1], sc + word + 4, row_ok ? (int)(rest < 4 ? rest : 4) : 0);
            mbar_arrive_on_copies(&sm.full[s]);
        }
    }
}

// A computing warpgroup's share of one item: weight rows c * 64 .. + 63 of the block's 128, tile columns 0 .. NT - 1;
// `it` counts the block's stages over its items.
template <int NT>
__device__ __forceinline__ void mxg_compute(MxgSmem& sm, const MxgArgs& a, const MxgTile& tile, int n0, int& it, int c) {
    const int n_k = CEIL_DIV(a.K, kMxgK), KB = a.K / 32;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int r_lo = c * 64 + warp * 16 + g, r_hi = r_lo + 8;  // this thread's two rows of the block
    const int sw = (r_lo >> 2) & 1;                            // (r_hi has the same)
    const int n_lo = n0 + r_lo, n_hi = n0 + r_hi;
    float acc[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; i++) acc[i] = 0.f;
    // Stage i's A fragments (after waiting for the stage), 16 inputs kk at a time: bytes 8 (kk % 2) + t (inputs 2t,
    // 2t + 1) and that + 4 (2t + 8, 2t + 9) of the row's block kk / 2, i.e. byte t of its 4-byte words.
    auto convert = [&](uint32_t(&A)[4][4], int i) {
        const int s = (it + i) % kMxgStages;
        mbar_wait(&sm.full[s], ((it + i) / kMxgStages) & 1);
        const uint8_t* sc_lo = reinterpret_cast<const uint8_t*>(sm.scale[s][r_lo]) + ((n_lo * KB + 2 * i) & 3);
        const uint8_t* sc_hi = reinterpret_cast<const uint8_t*>(sm.scale[s][r_hi]) + ((n_hi * KB + 2 * i) & 3);
#pragma unroll
        for (int blk = 0; blk < 2; blk++) {
            const uint4 lo = *reinterpret_cast<const uint4*>(&sm.w[s][r_lo][(blk ^ sw) * 16]);
            const uint4 hi = *reinterpret_cast<const uint4*>(&sm.w[s][r_hi][(blk ^ sw) * 16]);
            const bool in_k = 2 * i + blk < KB;  // (past K the codes are zeros; the scale bytes there may be anything)
            const uint32_t m_lo = mx_scale2(in_k ? sc_lo[blk] : 127u), m_hi = mx_scale2(in_k ? sc_hi[blk] : 127u);
            const uint32_t sel = t;  // byte t of each 4-byte word
            A[2 * blk][0] = mx_pair(lo.x, sel, m_lo), A[2 * blk][1] = mx_pair(hi.x, sel, m_hi);
            A[2 * blk][2] = mx_pair(lo.y, sel, m_lo), A[2 * blk][3] = mx_pair(hi.y, sel, m_hi);
            A[2 * blk + 1][0] = mx_pair(lo.z, sel, m_lo), A[2 * blk + 1][1] = mx_pair(hi.z, sel, m_hi);
            A[2 * blk + 1][2] = mx_pair(lo.w, sel, m_lo), A[2 * blk + 1][3] = mx_pair(hi.w, sel, m_hi);
        }
    };
    auto issue = [&](uint32_t(&A)[4][4], int i) {
        const int s = (it + i) % kMxgStages;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_m64n<NT, false, false>(acc, A[kk], wgmma_desc_sw128(&sm.x[s][0][kk * 16]));
        wgmma_commit();
    };
    // Stage i's products run while stage i + 1 is converted (two sets of fragments, taking turns).
    auto step = [&](uint32_t(&A)[4][4], uint32_t(&B)[4][4], int i) {
        issue(A, i);
        if (i + 1 < n_k) convert(B, i + 1);
        wgmma_wait<0>();
        wgmma_hold(acc);
        wgmma_hold_regs(A);
        mbar_arrive(&sm.empty[(it + i) % kMxgStages]);
    };
    uint32_t A0[4][4], A1[4][4];
    convert(A0, 0);
    for (int i = 0; i < n_k; i += 2) {
        step(A0, A1, i);
        if (i + 1 < n_k) step(A1, A0, i + 1);
    }
    it += n_k;
    // acc[4 j + e]: row r_lo (e < 2) or r_hi, tile column 8 j + 2 t + (e & 1). Adding, every load comes first (a store
    // between them would keep the compiler from running them together: a round trip to memory each).
    auto out = [&](int j, int e) -> float* {
        const int col = 8 * j + 2 * t + (e & 1), n = e < 2 ? n_lo : n_hi;
        return col < tile.rows && n < a.N ? a.y + (size_t)(tile.row0 + col) * a.N + n : nullptr;
    };
    if (a.add)
#pragma unroll
        for (int j = 0; j < NT / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (const float* p = out(j, e)) acc[4 * j + e] += *p;
    const bf16* bias = a.bias ? a.bias[tile.expert] : nullptr;
    const float b_lo = bias && n_lo < a.N ? __bfloat162float(bias[n_lo]) : 0.f, b_hi = bias && n_hi < a.N ? __bfloat162float(bias[n_hi]) : 0.f;
#pragma unroll
    for (int j = 0; j < NT / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (float* p = out(j, e)) *p = acc[4 * j + e] + (e < 2 ? b_lo : b_hi);
}

// Persistent: grid = the SMs (or fewer items); block b takes items b, b + grid, ... (item = tile x row_tiles + row
// block: the blocks running together share the x tiles in L2).
template <int S>  // (a template so that only the engines that launch it compile it; S = kMxgStages)
__global__ void __launch_bounds__(kMxgThreads, 1) mxfp4_gemm_kernel(const __grid_constant__ CUtensorMap tx, const MxgArgs a) {
    static_assert(S == kMxgStages, "mxfp4_gemm_kernel: the ring is MxgSmem's");
    extern __shared__ uint8_t smem_raw[];
    auto& sm = *reinterpret_cast<MxgSmem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kMxgStages; s++) mbar_init(&sm.full[s], 128 + 1), mbar_init(&sm.empty[s], 256);
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) return mxg_load(sm, tx, a);
    int it = 0;
    for (int item = blockIdx.x; item < a.items; item += gridDim.x) {
        const MxgTile tile = a.tiles[item / a.row_tiles];
        const int n0 = (item % a.row_tiles) * kMxgRows;
        if (tile.rows <= 64) mxg_compute<64>(sm, a, tile, n0, it, wg - 1);
        else if (tile.rows <= 128) mxg_compute<128>(sm, a, tile, n0, it, wg - 1);
        else mxg_compute<192>(sm, a, tile, n0, it, wg - 1);
    }
}

#endif  // MONOCU_SM90A

// y[r] (+)= W_e x[r] + b_e over the tiles' rows: x bf16 [rows][L.K], y fp32 [rows][L.N]; w, scales and bias (bf16 [N],
// or a null table) device tables [E].
template <int S = kMxgStages>
inline void mxfp4_grouped_gemm(const Linear& L, const void* const* w, const void* const* scales, const void* const* bias, const bf16* x,
                               long rows, const MxgTile* d_tiles, int n_tiles, float* y, bool add, cudaStream_t stream) {
    if (!mxfp4_gemm_fits(L)) die("mxfp4_grouped_gemm: the %d x %d projection '%s' does not fit the kernel", L.N, L.K, L.label);
    if (n_tiles <= 0 || rows <= 0) return;
#if defined(MONOCU_SM90A)
    const uint64_t K = (uint64_t)L.K;
    const CUtensorMap tx = tma_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, x, {K, (uint64_t)rows}, {K * 2}, {(uint32_t)kMxgK, 128u});
    const int row_tiles = CEIL_DIV(L.N, kMxgRows);
    MxgArgs a{reinterpret_cast<const uint8_t* const*>(w), reinterpret_cast<const uint8_t* const*>(scales),
              reinterpret_cast<const bf16* const*>(bias), d_tiles, y, L.N, L.K, row_tiles, row_tiles * n_tiles, add};
    const size_t smem = sizeof(MxgSmem) + 1024;  // + room to align the tiles to 1024 bytes
    allow_dynamic_smem(mxfp4_gemm_kernel<S>, smem);
    mxfp4_gemm_kernel<S><<<std::min(a.items, sm_count()), kMxgThreads, smem, stream>>>(tx, a);
    LAUNCH_CHECK();
#else
    (void)w, (void)scales, (void)bias, (void)x, (void)d_tiles, (void)y, (void)add, (void)stream;
#endif
}

}  // namespace monocu
