// ops/swiglu.cuh — the gated MLP activation: h = silu(gate) * up, or GPT-OSS's clamped form of it.
//
// Usage:
//   swiglu_interleaved(gu, h, T, ffn, stream);   // gu float [T][ffn][2] = (gate, up) pairs, h bf16 [T][ffn]
//   swiglu_interleaved(gu, h, T, ffn, stream, GluAct{1.702f, 7.f});   // GPT-OSS's experts
//
// GPT-OSS (GluAct with a limit): g = min(gate, limit), u = clamp(up, -limit, limit), h = g sigmoid(alpha g) (u + 1).
//
// The engines store gate_proj and up_proj interleaved row by row (row 2i = gate_i, row 2i+1 = up_i), so one
// matmul produces both and each (gate, up) pair sits side by side: the decode GEMV applies this same
// function in its epilogue; prefill, after the cuBLAS GEMM, runs this kernel.
#pragma once

#include "gpu/memory.cuh"

namespace monocu {

__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }

// Which gated activation: limit 0, the plain SwiGLU; limit > 0, GPT-OSS's (swiglu_limit, swiglu_alpha).
struct GluAct {
    float alpha = 1.f, limit = 0.f;
};

__device__ __forceinline__ float glu(float gate, float up, const GluAct& a) {
    if (a.limit <= 0.f) return silu(gate) * up;
    float g = fminf(gate, a.limit), u = fminf(fmaxf(up, -a.limit), a.limit);
    return g / (1.f + __expf(-a.alpha * g)) * (u + 1.f);
}

static __global__ void swiglu_interleaved_kernel(const float2* __restrict__ gu, bf16* __restrict__ h, size_t n, GluAct act) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float2 p = gu[i];
        h[i] = __float2bfloat16_rn(glu(p.x, p.y, act));
    }
}

inline void swiglu_interleaved(const float* gu, bf16* h, int T, int ffn, cudaStream_t stream, GluAct act = {}) {
    size_t n = (size_t)T * ffn;
    if (n == 0) return;
    int grid = (int)std::min<size_t>(CEIL_DIV(n, 256), 4096);
    swiglu_interleaved_kernel<<<grid, 256, 0, stream>>>(reinterpret_cast<const float2*>(gu), h, n, act);
    LAUNCH_CHECK();
}

}  // namespace monocu
