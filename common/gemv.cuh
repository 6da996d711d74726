// gemv.cuh — batch-1 decode matmul for bf16 weights: y = W x, the step that decides decode speed.
//
// Usage:
//   gemv(W, x_bf16, y, N, K, stream);                          // y[n]  = W[n] . x
//   gemv_add(W, x_bf16, y, N, K, stream);                      // y[n] += W[n] . x      (residual add)
//   gemv_rmsnorm(W, x_f32, norm_w, eps, y, N, K, stream);      // y[n]  = W[n] . rmsnorm(x)
//   gemv_rmsnorm_swiglu(W, x_f32, norm_w, eps, h, N, K, stream); // h[i] = silu(W[2i].n) * (W[2i+1].n)
//   W bf16 [N][K] row-major (nn.Linear's weight as stored), K a multiple of 8, rows 16-byte aligned.
//
// Why our own kernel: at batch 1 the whole cost is reading W once, and cuBLAS reaches only 34-61% of
// HBM bandwidth on Qwen3-4B's projection shapes. Layout of the work:
//   - a block of 8 warps stages x in shared memory as bf16 (K * 2 bytes), normalising it first when the
//     RMSNorm is fused (every block recomputes the sum of squares: K floats from L2, cheap);
//   - each warp owns 2 consecutive rows; each lane reads 16-byte chunks (8 weights) at stride 32 chunks,
//     so a warp reads 512 contiguous bytes per row per step; 4 steps are unrolled and issued before any
//     use, i.e. 8 independent 16-byte loads in flight per lane (Little's law: ~30 KB per SM covers HBM
//     latency at ~36 GB/s per SM);
//   - loads bypass L1 (streaming: each weight byte is used once); fp32 accumulate; shuffle reduction.
// Napkin: Qwen3-4B reads ~8.0 GB of weights per token; at 3.0 TB/s (H100 copy) that is 2.7 ms.
#pragma once

#include "gpu_memory.cuh"
#include "reduce.cuh"
#include "swiglu.cuh"

namespace monocu {

enum class GemvInput { BF16, F32_RMSNORM };
enum class GemvOutput { STORE_F32, ADD_F32, SWIGLU_BF16 };

constexpr int kGemvWarps = 8, kGemvRowsPerWarp = 2, kGemvUnroll = 4;
constexpr int kGemvRowsPerBlock = kGemvWarps * kGemvRowsPerWarp;

// 8 bf16 (one 16-byte chunk) dotted with 8 bf16, accumulated in fp32.
__device__ __forceinline__ float dot8_bf16(uint4 w, uint4 x) {
    const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 a = __bfloat1622float2(wp[k]), b = __bfloat1622float2(xp[k]);
        s = fmaf(a.x, b.x, s);
        s = fmaf(a.y, b.y, s);
    }
    return s;
}

// Stages x (bf16 copy, or RMSNorm of float x rounded to bf16 as the prefill path does) into xs.
template <GemvInput IN>
__device__ __forceinline__ void gemv_stage_input(const void* x_in, const bf16* norm_w, float eps, bf16* xs, int K) {
    if constexpr (IN == GemvInput::BF16) {
        const uint4* src = static_cast<const uint4*>(x_in);
        for (int c = threadIdx.x; c < K / 8; c += blockDim.x) reinterpret_cast<uint4*>(xs)[c] = src[c];
    } else {
        const float* x = static_cast<const float*>(x_in);
        float ss = 0.f;
        for (int i = threadIdx.x; i < K; i += blockDim.x) ss += x[i] * x[i];
        float inv = rsqrtf(block_sum(ss) / K + eps);
        for (int i = threadIdx.x; i < K; i += blockDim.x) xs[i] = __float2bfloat16_rn(x[i] * inv * __bfloat162float(norm_w[i]));
    }
    __syncthreads();
}

template <GemvInput IN, GemvOutput OUT>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_bf16_kernel(const bf16* __restrict__ W, const void* __restrict__ x_in, const bf16* __restrict__ norm_w, float eps,
                     float* __restrict__ y, bf16* __restrict__ y_bf16, int N, int K) {
    extern __shared__ __align__(16) unsigned char gemv_smem[];
    bf16* xs = reinterpret_cast<bf16*>(gemv_smem);
    gemv_stage_input<IN>(x_in, norm_w, eps, xs, K);

    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row0 = (blockIdx.x * kGemvWarps + warp) * kGemvRowsPerWarp;
    if (row0 >= N) return;
    int row1 = min(row0 + 1, N - 1);  // a lone last row computes itself twice; the copy is dropped
    const uint4* w0 = reinterpret_cast<const uint4*>(W + (size_t)row0 * K);
    const uint4* w1 = reinterpret_cast<const uint4*>(W + (size_t)row1 * K);
    const uint4* xv = reinterpret_cast<const uint4*>(xs);
    int chunks = K / 8;
    float acc0 = 0.f, acc1 = 0.f;
    for (int c = lane; c < chunks; c += 32 * kGemvUnroll) {
        uint4 a[kGemvUnroll], b[kGemvUnroll];
#pragma unroll
        for (int u = 0; u < kGemvUnroll; u++) {
            int idx = c + 32 * u;
            if (idx < chunks) {
                a[u] = __ldcs(w0 + idx);
                b[u] = __ldcs(w1 + idx);
            }
        }
#pragma unroll
        for (int u = 0; u < kGemvUnroll; u++) {
            int idx = c + 32 * u;
            if (idx < chunks) {
                uint4 xc = xv[idx];
                acc0 += dot8_bf16(a[u], xc);
                acc1 += dot8_bf16(b[u], xc);
            }
        }
    }
    acc0 = warp_sum(acc0);
    acc1 = warp_sum(acc1);
    if (lane != 0) return;
    if constexpr (OUT == GemvOutput::STORE_F32) {
        y[row0] = acc0;
        if (row0 + 1 < N) y[row0 + 1] = acc1;
    } else if constexpr (OUT == GemvOutput::ADD_F32) {
        y[row0] += acc0;
        if (row0 + 1 < N) y[row0 + 1] += acc1;
    } else {  // rows (2i, 2i+1) = (gate_i, up_i)
        y_bf16[row0 / 2] = __float2bfloat16_rn(silu(acc0) * acc1);
    }
}

template <GemvInput IN, GemvOutput OUT>
inline void gemv_launch(const bf16* W, const void* x, const bf16* norm_w, float eps, float* y, bf16* y_bf16, int N, int K,
                        cudaStream_t stream) {
    if (K % 8 != 0) die("gemv: K = %d must be a multiple of 8 (16-byte rows)", K);
    if ((reinterpret_cast<uintptr_t>(W) | reinterpret_cast<uintptr_t>(x)) % 16 != 0) die("gemv: W and x must be 16-byte aligned");
    if (OUT == GemvOutput::SWIGLU_BF16 && N % 2 != 0) die("gemv: swiglu needs an even number of rows, got %d", N);
    size_t smem = (size_t)K * sizeof(bf16);
    static bool raised = false;  // one attribute call per instantiation
    if (!raised) {
        CUDA_CHECK(cudaFuncSetAttribute(gemv_bf16_kernel<IN, OUT>, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
        raised = true;
    }
    if (smem > 96 * 1024) die("gemv: K = %d is too large for the shared-memory copy of x", K);
    gemv_bf16_kernel<IN, OUT><<<CEIL_DIV(N, kGemvRowsPerBlock), kGemvWarps * 32, smem, stream>>>(W, x, norm_w, eps, y, y_bf16, N, K);
    LAUNCH_CHECK();
}

inline void gemv(const bf16* W, const bf16* x, float* y, int N, int K, cudaStream_t s) {
    gemv_launch<GemvInput::BF16, GemvOutput::STORE_F32>(W, x, nullptr, 0.f, y, nullptr, N, K, s);
}
inline void gemv_add(const bf16* W, const bf16* x, float* y, int N, int K, cudaStream_t s) {
    gemv_launch<GemvInput::BF16, GemvOutput::ADD_F32>(W, x, nullptr, 0.f, y, nullptr, N, K, s);
}
inline void gemv_rmsnorm(const bf16* W, const float* x, const bf16* norm_w, float eps, float* y, int N, int K, cudaStream_t s) {
    gemv_launch<GemvInput::F32_RMSNORM, GemvOutput::STORE_F32>(W, x, norm_w, eps, y, nullptr, N, K, s);
}
inline void gemv_rmsnorm_swiglu(const bf16* W, const float* x, const bf16* norm_w, float eps, bf16* h, int N, int K,
                                cudaStream_t s) {
    gemv_launch<GemvInput::F32_RMSNORM, GemvOutput::SWIGLU_BF16>(W, x, norm_w, eps, nullptr, h, N, K, s);
}

}  // namespace monocu
