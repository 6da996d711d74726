// ops/quant_rows.cuh — y (+)= W x for a pass of a few rows (up to 64 tokens: the batched core's decode steps) over
// FP8 or INT4 weights, on the tensor cores, reading each weight once per 16 rows.
//
// Usage (ops/linear.cuh chooses it):
//   if (quant_rows_fit(L, T)) quant_rows(L, x, T, y, add, stream);   x bf16 [T][K], y fp32 [T][N]; add: y += W x
//
// Why: one token runs the GEMV (gemv.cuh), and a long pass dequantizes the weights to bf16 for a cuBLAS GEMM. In
// between, a GEMV per token reads the weights once per token and the GEMM path moves 5 bytes a weight (FP8: read 1,
// write 2, read 2) before it multiplies: at 16 sequences an FP8 model decoded slower than the bf16 one (kb/status.md).
// Here the weights go straight from memory into the MMA's B fragments, widened to fp16 in registers, and each is read
// once per 16 tokens (past 16, the blocks of other tokens read the same rows again: 32 tokens cost ~1.7x 16's).
// Qwen3-8B's projections on the H200 (tools/bench_gemv --rows), 16 tokens: FP8 13-40 us (33-66% of the copy
// bandwidth; a GEMV per token takes 8-27 us each, dequantizing for a GEMM 26-135 us), INT4 9-47 us (20-30%; GEMV
// 5.5-18 us each, dequantize + GEMM 23-124 us).
//
// Shape: a block of 8 warps owns 32 weight rows (4 n-tiles of 8) and 16 tokens (one m-tile; rows past T are zero).
// Its warps split K in k-blocks of 64 bytes of each row (64 FP8 weights, or 128 INT4 ones: one scale group; warp w
// takes k-blocks w, w + 8, ...: together 512 contiguous bytes of each row), then add their partial sums through shared
// memory in a fixed order (deterministic, no atomics). An MMA's k order may be any permutation both operands share, so
// a lane reads 16 contiguous bytes of one row per k-block, and the x fragments follow:
//   FP8, k-step ks: slots 2t, 2t + 1 | 2t + 8, 2t + 9 hold k = 16t + 4ks + 0, 1 | 2, 3 (the queries of
//     flash_decode.cuh use the same trick); e4m3 pairs widen in one cvt;
//   INT4, k-step ks = 2q + r: the pairs (32t + 8q + i, 32t + 8q + i + 4) with i = 2r (slots 2t..) and 2r + 1 (2t + 8..):
//     nibbles i and i + 4 of the lane's word q, which one mask makes an fp16 pair (0x6400 | u = 1024 + u; minus
//     1032 is u - 8, exact), then times the group's scale.
// x is widened to fp16 scaled by 2^-8 (fp16's range; products add in fp32) and the 2^8 comes back at the end with
// FP8's per-channel scale; FP8's 128-block scales and INT4's group scales multiply B in fp16.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "gpu/cuda_check.h"
#include "gpu/mma.cuh"
#include "gpu/pdl.cuh"
#include "ops/quant.cuh"
#include "ops/weights.cuh"

namespace monocu {

constexpr int kQuantRowsWarps = 8;        // per block, splitting K
constexpr int kQuantRowsTiles = 4;        // n-tiles of 8 weight rows per block
constexpr int kQuantRowsMaxTokens = 64;   // the most rows a launch takes (linear.cuh sends it fewer: kQuantRowsPassMax)
constexpr float kQuantRowsXScale = 1.f / 256.f;

// Whether quant_rows takes a pass of T rows over L: FP8 with K in 64-element blocks each inside one scale block, or
// INT4 (K in its 128-groups).
inline bool quant_rows_fit(const Linear& L, int T) {
    if (T < 1 || T > kQuantRowsMaxTokens) return false;
    if (L.fmt == WFormat::FP8) return L.K % 64 == 0 && (L.kblock == L.K || L.kblock % 64 == 0);
    return L.fmt == WFormat::INT4 && L.K % kInt4Group == 0;
}

// Two bf16 of x (elements i and j of a run held in uint4s) as the fp16 pair an A fragment holds, scaled by 2^-8.
__device__ __forceinline__ uint32_t quant_rows_x_pair(const uint4* run, int i, int j) {
    const bf16* e = reinterpret_cast<const bf16*>(run);
    __half2 h = __floats2half2_rn(__bfloat162float(e[i]) * kQuantRowsXScale, __bfloat162float(e[j]) * kQuantRowsXScale);
    return *reinterpret_cast<uint32_t*>(&h);
}

template <bool INT4>
static __global__ void __launch_bounds__(kQuantRowsWarps * 32, INT4 ? 1 : 2)  // INT4: 158 registers (x of 32 k a lane), no spill
    quant_rows_kernel(Linear L, const bf16* __restrict__ x, int T, float* __restrict__ y, bool add) {
    constexpr int NT = kQuantRowsTiles, W = kQuantRowsWarps, ROWS = NT * 8;
    constexpr int KB = INT4 ? 128 : 64;  // weights in a k-block: 64 bytes of a row
    constexpr int KS = KB / 16, XV = KB / 4 / 8;  // k-steps; uint4s of x a lane holds per token row
    extern __shared__ float quant_rows_red[];  // [W][16 tokens][ROWS]
    pdl_launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int N = L.N, K = L.K, n_kb = K / KB;
    const size_t row_bytes = INT4 ? (size_t)K / 2 : (size_t)K;
    const int tok0 = blockIdx.x * 16, row0 = blockIdx.y * ROWS;
    const bool per_channel = !INT4 && L.kblock == K;
    const int n_sb = INT4 ? K / kInt4Group : K / L.kblock;

    // This lane's weight rows (B column g of each n-tile; rows past N read the last row, never written) and tokens
    // (A rows g and g + 8; past T they read as zero).
    const uint8_t* wrow[NT];
    int rows[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        rows[nt] = min(row0 + nt * 8 + g, N - 1);
        wrow[nt] = static_cast<const uint8_t*>(L.w) + rows[nt] * row_bytes + t * 16;
    }
    const bool tok_ok[2] = {tok0 + g < T, tok0 + g + 8 < T};
    const bf16* xrow[2] = {x + (size_t)min(tok0 + g, T - 1) * K + t * (KB / 4), x + (size_t)min(tok0 + g + 8, T - 1) * K + t * (KB / 4)};

    // Two k-blocks in flight per warp: slot u holds k-block kb + u W's weights (a uint4 per n-tile), their scales and
    // x (XV uint4 per token row). A slot is refilled with the k-block 2 W further as soon as it has been multiplied.
    constexpr int U = 2;
    uint4 wv[U][NT], xv[U][2][XV];
    float sc[U][NT];  // loaded with their weights (read when multiplying, they stalled every k-block: 33-66% of copy, from 20-41%)
    auto load_w = [&](int u, int kb) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            wv[u][nt] = __ldg(reinterpret_cast<const uint4*>(wrow[nt] + (size_t)kb * 64));
            if constexpr (INT4) sc[u][nt] = __bfloat162float(__ldg(static_cast<const bf16*>(L.scale) + (size_t)rows[nt] * n_sb + kb));
            else sc[u][nt] = per_channel ? 1.f : __ldg(static_cast<const float*>(L.scale) + (size_t)rows[nt] * n_sb + kb * KB / L.kblock);
        }
    };
    auto load_x = [&](int u, int kb) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < XV; j++)
                xv[u][h][j] = tok_ok[h] ? *reinterpret_cast<const uint4*>(xrow[h] + (size_t)kb * KB + 8 * j) : make_uint4(0, 0, 0, 0);
    };
    float acc[NT][4] = {};
    // The first weights go out before the wait for the previous kernel (weights are never written); x after it.
#pragma unroll
    for (int u = 0; u < U; u++)
        if (warp + u * W < n_kb) load_w(u, warp + u * W);
    pdl_wait();
#pragma unroll
    for (int u = 0; u < U; u++)
        if (warp + u * W < n_kb) load_x(u, warp + u * W);

    for (int kb0 = warp; kb0 < n_kb; kb0 += U * W) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int kb = kb0 + u * W;
            if (kb >= n_kb) break;
            uint32_t a[KS][4];  // per k-step: rows g, g + 8 | k slots 2t.. and 2t + 8..
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int h = 0; h < 2; h++) {  // the element pair (e0, e1) of slots 2t + 8h, + 1
                    const int e0 = INT4 ? 8 * (ks / 2) + 2 * (ks % 2) + h : 4 * ks + 2 * h, e1 = INT4 ? e0 + 4 : e0 + 1;
                    a[ks][2 * h] = quant_rows_x_pair(xv[u][0], e0, e1), a[ks][2 * h + 1] = quant_rows_x_pair(xv[u][1], e0, e1);
                }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint32_t* wd = reinterpret_cast<const uint32_t*>(&wv[u][nt]);
                const __half2 s2 = __float2half2_rn(sc[u][nt]);
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    __half2 b[2];
                    if constexpr (INT4) {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int i = 2 * (ks % 2) + h;
                            uint32_t v = ((wd[ks / 2] >> (4 * i)) & 0x000F000Fu) | 0x64006400u;  // 1024 + u, two of them
                            b[h] = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&v), __float2half2_rn(1032.f)), s2);
                        }
                    } else {
                        __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(wd[ks] & 0xffffu), __NV_E4M3);
                        __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(wd[ks] >> 16), __NV_E4M3);
                        b[0] = __hmul2(*reinterpret_cast<__half2*>(&lo), s2), b[1] = __hmul2(*reinterpret_cast<__half2*>(&hi), s2);
                    }
                    mma_16816<true>(acc[nt], a[ks], *reinterpret_cast<uint32_t*>(&b[0]), *reinterpret_cast<uint32_t*>(&b[1]));
                }
            }
            const int next = kb + U * W;  // refill this slot
            if (next < n_kb) load_w(u, next), load_x(u, next);
        }
    }

    // The warps' partial sums meet in shared memory: C rows are tokens, columns weight rows.
    float* red = quant_rows_red + warp * 16 * ROWS;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        red[g * ROWS + nt * 8 + 2 * t] = acc[nt][0], red[g * ROWS + nt * 8 + 2 * t + 1] = acc[nt][1];
        red[(g + 8) * ROWS + nt * 8 + 2 * t] = acc[nt][2], red[(g + 8) * ROWS + nt * 8 + 2 * t + 1] = acc[nt][3];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 16 * ROWS; i += W * 32) {
        const int tok = tok0 + i / ROWS, row = row0 + i % ROWS;
        if (tok >= T || row >= N) continue;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < W; w++) s += quant_rows_red[w * 16 * ROWS + i];
        float v = s * (1.f / kQuantRowsXScale) * (per_channel ? static_cast<const float*>(L.scale)[row] : 1.f);
        if (L.bias) v += __bfloat162float(static_cast<const bf16*>(L.bias)[row]);
        float* out = y + (size_t)tok * N + row;
        *out = add ? *out + v : v;
    }
}

inline void quant_rows(const Linear& L, const bf16* x, int T, float* y, bool add, cudaStream_t stream) {
    if (!quant_rows_fit(L, T))
        die("quant_rows: '%s' (%s, %d x %d) over %d rows does not fit the kernel", L.label, wformat_name(L.fmt), L.N, L.K, T);
    if ((reinterpret_cast<uintptr_t>(L.w) | reinterpret_cast<uintptr_t>(x)) % 16 != 0) die("quant_rows: W and x must be 16-byte aligned");
    if (CEIL_DIV(L.N, kQuantRowsTiles * 8) > 65535) die("quant_rows: %d rows are too many for the grid", L.N);
    constexpr size_t smem = (size_t)kQuantRowsWarps * 16 * kQuantRowsTiles * 8 * sizeof(float);
    const dim3 grid(CEIL_DIV(T, 16), CEIL_DIV(L.N, kQuantRowsTiles * 8));
    if (L.fmt == WFormat::INT4) launch(quant_rows_kernel<true>, grid, kQuantRowsWarps * 32, smem, stream, L, x, T, y, add);
    else launch(quant_rows_kernel<false>, grid, kQuantRowsWarps * 32, smem, stream, L, x, T, y, add);
}

}  // namespace monocu
