// ops/rmsnorm.cuh — RMSNorm of float rows into bf16 (the input of the next matmul).
//
// Usage:
//   rmsnorm(x, weight, out, T, dim, eps, stream);   // x float [T][dim], weight bf16 [dim], out bf16 [T][dim]
//   rmsnorm_rows(x, rows, weight, out, n, dim, eps, stream);   // out row i from x row rows[i] (device [n])
//
// out = weight * x / sqrt(mean(x^2) + eps), accumulated in fp32 and rounded to bf16 once
// (transformers' Qwen3RMSNorm / LlamaRMSNorm; in a bf16 model they round before the weight multiply,
// we round after: the fp32 reference is what we are measured against).
#pragma once

#include "gpu/memory.cuh"
#include "gpu/pdl.cuh"
#include "gpu/profile.cuh"
#include "gpu/reduce.cuh"

namespace monocu {

static __global__ void rmsnorm_kernel(const float* __restrict__ x, const int* __restrict__ rows, const bf16* __restrict__ w,
                                      bf16* __restrict__ out, int dim, float eps) {
    pdl_launch_dependents();
    pdl_wait();
    const float* row = x + (size_t)(rows ? rows[blockIdx.x] : blockIdx.x) * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
    float inv = rsqrtf(block_sum(ss) / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        out[(size_t)blockIdx.x * dim + i] = __float2bfloat16_rn(row[i] * inv * __bfloat162float(w[i]));
}

inline void rmsnorm(const float* x, const bf16* w, bf16* out, int T, int dim, float eps, cudaStream_t stream) {
    if (T <= 0) return;
    OpScope op("rmsnorm", stream);
    launch(rmsnorm_kernel, T, 256, 0, stream, x, (const int*)nullptr, w, out, dim, eps);
}

inline void rmsnorm_rows(const float* x, const int* rows, const bf16* w, bf16* out, int n, int dim, float eps, cudaStream_t stream) {
    if (n <= 0) return;
    OpScope op("rmsnorm", stream);
    launch(rmsnorm_kernel, n, 256, 0, stream, x, rows, w, out, dim, eps);
}

}  // namespace monocu
