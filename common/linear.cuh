// linear.cuh — one call per projection, whatever the number of tokens: GEMV at T == 1, cuBLAS above.
//
// Usage:
//   LinearScratch sc{&gemm, xb, f};              // xb bf16 [T_max][K_max], f float [T_max][N_max]
//   linear_rmsnorm(L.qkv, x, norm_w, eps, qkv, T, sc, stream);        // qkv = W rmsnorm(x)
//   linear_rmsnorm_swiglu(L.gate_up, x, norm_w, eps, h, T, sc, stream); // h = silu(gate) * up of rmsnorm(x)
//   linear_add(L.o, att, x, T, sc, stream);                           // x += W att
//   linear(L.lm_head, xb, logits, T, sc, stream);                     // logits = W xb
//
// Decode (T == 1) fuses the RMSNorm into the GEMV's input staging and the SwiGLU into its epilogue, so a
// layer is 4 matmul launches; prefill normalises into xb, runs one GEMM per projection (beta = 1 adds the
// residual), and applies SwiGLU as a separate pass over f.
#pragma once

#include "gemm.cuh"
#include "gemv.cuh"
#include "rmsnorm.cuh"
#include "swiglu.cuh"

namespace monocu {

struct Linear {
    int N = 0, K = 0;   // out_features, in_features
    bf16* w = nullptr;  // [N][K]
    size_t bytes() const { return (size_t)N * K * sizeof(bf16); }
};

struct LinearScratch {
    Gemm* gemm = nullptr;
    bf16* xb = nullptr;  // [T_max][K_max] normalised input (prefill)
    float* f = nullptr;  // [T_max][N_max] GEMM output before SwiGLU (prefill)
};

inline void linear(const Linear& L, const bf16* x, float* y, int T, LinearScratch& sc, cudaStream_t s) {
    if (T == 1) gemv(L.w, x, y, L.N, L.K, s);
    else gemm_bf16(*sc.gemm, x, L.w, y, T, L.N, L.K, false, s);
}

inline void linear_add(const Linear& L, const bf16* x, float* y, int T, LinearScratch& sc, cudaStream_t s) {
    if (T == 1) gemv_add(L.w, x, y, L.N, L.K, s);
    else gemm_bf16(*sc.gemm, x, L.w, y, T, L.N, L.K, true, s);
}

inline void linear_rmsnorm(const Linear& L, const float* x, const bf16* norm_w, float eps, float* y, int T,
                           LinearScratch& sc, cudaStream_t s) {
    if (T == 1) return gemv_rmsnorm(L.w, x, norm_w, eps, y, L.N, L.K, s);
    rmsnorm(x, norm_w, sc.xb, T, L.K, eps, s);
    gemm_bf16(*sc.gemm, sc.xb, L.w, y, T, L.N, L.K, false, s);
}

// L holds gate_proj and up_proj interleaved by rows (2i = gate_i, 2i+1 = up_i); h is bf16 [T][N / 2].
inline void linear_rmsnorm_swiglu(const Linear& L, const float* x, const bf16* norm_w, float eps, bf16* h, int T,
                                  LinearScratch& sc, cudaStream_t s) {
    if (T == 1) return gemv_rmsnorm_swiglu(L.w, x, norm_w, eps, h, L.N, L.K, s);
    rmsnorm(x, norm_w, sc.xb, T, L.K, eps, s);
    gemm_bf16(*sc.gemm, sc.xb, L.w, sc.f, T, L.N, L.K, false, s);
    swiglu_interleaved(sc.f, h, T, L.N / 2, s);
}

}  // namespace monocu
