// linear.cuh — one call per projection, whatever the number of tokens or the weight format.
//
// Usage:
//   LinearScratch sc{&gemm, xb, f, wb};          // xb bf16 [T_max][K_max], f float [T_max][N_max],
//                                                // wb bf16 [N_max][K_max] (only for quantized weights)
//   linear_rmsnorm(L.qkv, x, norm_w, eps, qkv, T, sc, stream);          // qkv = W rmsnorm(x)
//   linear_rmsnorm_swiglu(L.gate_up, x, norm_w, eps, h, T, sc, stream); // h = silu(gate) * up of rmsnorm(x)
//   linear_add(L.o, att, x, T, sc, stream);                             // x += W att
//   linear(L.lm_head, xb, logits, T, sc, stream);                       // logits = W xb
//   linear_add(..., stream, l2_ahead(L.next, after_wait));              // decode: also warm L2 (gemv.cuh)
//
// Decode (T == 1) runs our GEMV (gemv.cuh) in the weights' own format, with the RMSNorm fused into its
// input staging and the SwiGLU into its epilogue: 4 matmul launches per layer. Prefill (T > 1) normalises
// into xb and runs one cuBLAS GEMM per projection (beta = 1 adds the residual); quantized weights are
// first dequantized into wb, then multiplied in bf16 on the tensor cores.
#pragma once

#include "gemm.cuh"
#include "gemv.cuh"
#include "quant.cuh"
#include "rmsnorm.cuh"
#include "swiglu.cuh"

namespace monocu {

struct LinearScratch {
    Gemm* gemm = nullptr;
    bf16* xb = nullptr;  // [T_max][K_max] normalised input (prefill)
    float* f = nullptr;  // [T_max][N_max] GEMM output before SwiGLU (prefill)
    bf16* wb = nullptr;  // [N_max][K_max] dequantized weights (prefill of FP8/INT4)
    size_t wb_elems = 0;
};

// The bf16 weights a prefill GEMM multiplies with: L's own, or L dequantized into the scratch.
inline const bf16* prefill_weights(const Linear& L, LinearScratch& sc, cudaStream_t s) {
    if (L.fmt == WFormat::BF16) return static_cast<const bf16*>(L.w);
    if ((size_t)L.N * L.K > sc.wb_elems) die("prefill: no dequantization scratch for a %d x %d %s projection", L.N, L.K, wformat_name(L.fmt));
    dequant_to_bf16(L, sc.wb, s);
    return sc.wb;
}

inline void linear(const Linear& L, const bf16* x, float* y, int T, LinearScratch& sc, cudaStream_t s) {
    if (T == 1) return gemv(L, x, y, s);
    gemm_bf16(*sc.gemm, x, prefill_weights(L, sc, s), y, T, L.N, L.K, false, s);
}

inline void linear_add(const Linear& L, const bf16* x, float* y, int T, LinearScratch& sc, cudaStream_t s, L2Prefetch pf = {}) {
    if (T == 1) return gemv_add(L, x, y, s, pf);
    gemm_bf16(*sc.gemm, x, prefill_weights(L, sc, s), y, T, L.N, L.K, true, s);
}

inline void linear_rmsnorm(const Linear& L, const float* x, const bf16* norm_w, float eps, float* y, int T,
                           LinearScratch& sc, cudaStream_t s) {
    if (T == 1) return gemv_rmsnorm(L, x, norm_w, eps, y, s);
    rmsnorm(x, norm_w, sc.xb, T, L.K, eps, s);
    gemm_bf16(*sc.gemm, sc.xb, prefill_weights(L, sc, s), y, T, L.N, L.K, false, s);
}

// L holds gate_proj and up_proj interleaved by rows (2i = gate_i, 2i+1 = up_i); h is bf16 [T][N / 2].
inline void linear_rmsnorm_swiglu(const Linear& L, const float* x, const bf16* norm_w, float eps, bf16* h, int T,
                                  LinearScratch& sc, cudaStream_t s, L2Prefetch pf = {}) {
    if (T == 1) return gemv_rmsnorm_swiglu(L, x, norm_w, eps, h, s, pf);
    rmsnorm(x, norm_w, sc.xb, T, L.K, eps, s);
    gemm_bf16(*sc.gemm, sc.xb, prefill_weights(L, sc, s), sc.f, T, L.N, L.K, false, s);
    swiglu_interleaved(sc.f, h, T, L.N / 2, s);
}

}  // namespace monocu
