// ops/linear.cuh — one call per projection, whatever the number of tokens or the weight format.
//
// Usage:
//   LinearScratch sc{&gemm, xb, f, wb};          // xb bf16 [T_max][K_max], f float [T_max][N_max],
//                                                // wb bf16 [N_max][K_max] (only for quantized weights)
//   linear_rmsnorm(L.qkv, x, norm_w, eps, qkv, T, sc, stream);          // qkv = W rmsnorm(x)
//   linear_rmsnorm_swiglu(L.gate_up, x, norm_w, eps, h, T, sc, stream); // h = silu(gate) * up of rmsnorm(x)
//   linear_add(L.o, att, x, T, sc, stream);                             // x += W att
//   linear(L.lm_head, xb, logits, T, sc, stream);                       // logits = W xb
//   linear_add(..., stream, l2_ahead(L.next, after_wait));              // decode: also warm L2 (gemv.cuh)
//   dequant_ahead(L.next, T, sc);   // prefill of FP8/INT4 weights: dequantize the next projection now, on a side
//                                   // stream, while this one's GEMM runs (sc.ring: a DequantRing; else a no-op)
//
// Decode (T == 1) runs our GEMV (gemv.cuh) in the weights' own format, with the RMSNorm fused into its
// input staging and the SwiGLU into its epilogue: 4 matmul launches per layer. Prefill (T > 1) normalises
// into xb and runs one cuBLAS GEMM per projection (beta = 1 adds the residual); quantized weights are
// first dequantized into wb, then multiplied in bf16 on the tensor cores. Dequantization only reads and
// writes memory while a 2k-token GEMM is bound by the tensor cores, so with a DequantRing the two overlap:
// each projection's weights are turned to bf16 on a side stream while the GEMM before it runs.
#pragma once

#include "ops/gemm.cuh"
#include "ops/gemv.cuh"
#include "ops/quant.cuh"
#include "ops/rmsnorm.cuh"
#include "ops/swiglu.cuh"

namespace monocu {

// Two bf16 buffers for dequantized weights, filled in turn: start() dequantizes a projection into the next
// buffer on a side stream once the last GEMM that read that buffer is done; acquire() hands a GEMM the buffer
// that holds its projection (the GEMM's stream waits for the dequantization), or dequantizes it there and
// then; release() marks the buffer free once that GEMM is done. Events carry every dependency, so the
// streams never wait on the host. (Prefill only: decode multiplies the quantized weights directly.)
struct DequantRing {
    cudaStream_t side = nullptr;
    bf16* buf[2] = {};
    size_t cap[2] = {};                   // elements each buffer holds
    const Linear* held[2] = {};           // what buffer k holds or is being filled with (null: nothing in use)
    cudaEvent_t ready[2] = {}, freed[2] = {};
    int turn = 0;                          // the buffer the next fill goes to

    void init(bf16* b0, size_t n0, bf16* b1, size_t n1) {
        buf[0] = b0, buf[1] = b1, cap[0] = n0, cap[1] = n1;
        CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        for (int k = 0; k < 2; k++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&ready[k], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&freed[k], cudaEventDisableTiming));
        }
    }
    // The buffer for a projection of n elements: the one whose turn it is, unless only the other is large enough.
    int pick(size_t n) {
        int k = cap[turn] >= n ? turn : cap[turn ^ 1] >= n ? turn ^ 1 : -1;
        if (k >= 0) turn = k ^ 1;
        return k;
    }
    void start(const Linear& L) {
        int k = pick((size_t)L.N * L.K);
        if (k < 0) return;  // too large to dequantize ahead: acquire() will say so
        CUDA_CHECK(cudaStreamWaitEvent(side, freed[k], 0));
        dequant_to_bf16(L, buf[k], side);
        CUDA_CHECK(cudaEventRecord(ready[k], side));
        held[k] = &L;
    }
    int acquire(const Linear& L, cudaStream_t s) {
        for (int k = 0; k < 2; k++)
            if (held[k] == &L) {
                CUDA_CHECK(cudaStreamWaitEvent(s, ready[k], 0));
                return k;
            }
        int k = pick((size_t)L.N * L.K);
        if (k < 0) die("prefill: no dequantization scratch for a %d x %d %s projection", L.N, L.K, wformat_name(L.fmt));
        CUDA_CHECK(cudaStreamWaitEvent(s, ready[k], 0));  // a fill started into k and never used must end first
        dequant_to_bf16(L, buf[k], s);
        held[k] = &L;
        return k;
    }
    void release(int k, cudaStream_t s) {
        CUDA_CHECK(cudaEventRecord(freed[k], s));
        held[k] = nullptr;
    }
};

struct LinearScratch {
    Gemm* gemm = nullptr;
    bf16* xb = nullptr;  // [T_max][K_max] normalised input (prefill)
    float* f = nullptr;  // [T_max][N_max] GEMM output before SwiGLU (prefill)
    bf16* wb = nullptr;  // [N_max][K_max] dequantized weights (prefill of FP8/INT4), when there is no ring
    size_t wb_elems = 0;
    DequantRing* ring = nullptr;  // or two buffers, filled ahead (dequant_ahead)
};

// Prefill of T tokens: start turning `next`'s weights to bf16 while the GEMMs already queued run.
inline void dequant_ahead(const Linear& next, int T, LinearScratch& sc) {
    if (T > 1 && next.fmt != WFormat::BF16 && sc.ring) sc.ring->start(next);
}

// The bf16 weights a prefill GEMM multiplies with: L's own, or L dequantized (ring buffer `slot`, or wb).
struct PrefillWeights {
    const bf16* w;
    int slot;  // the ring buffer to release after the GEMM, or -1
};
inline PrefillWeights prefill_weights(const Linear& L, LinearScratch& sc, cudaStream_t s) {
    if (L.fmt == WFormat::BF16) return {static_cast<const bf16*>(L.w), -1};
    if (sc.ring) {
        int k = sc.ring->acquire(L, s);
        return {sc.ring->buf[k], k};
    }
    if ((size_t)L.N * L.K > sc.wb_elems) die("prefill: no dequantization scratch for a %d x %d %s projection", L.N, L.K, wformat_name(L.fmt));
    dequant_to_bf16(L, sc.wb, s);
    return {sc.wb, -1};
}
// After the GEMM that reads pw is queued: its buffer may be refilled once that GEMM is done.
inline void prefill_weights_done(const PrefillWeights& pw, LinearScratch& sc, cudaStream_t s) {
    if (pw.slot >= 0) sc.ring->release(pw.slot, s);
}

// y (+)= W x for T > 1 rows: the GEMM on L's bf16 weights.
inline void prefill_gemm(const Linear& L, const bf16* x, float* y, int T, bool add, LinearScratch& sc, cudaStream_t s) {
    PrefillWeights pw = prefill_weights(L, sc, s);
    gemm_bf16(*sc.gemm, x, pw.w, y, T, L.N, L.K, add, s);
    prefill_weights_done(pw, sc, s);
}

inline void linear(const Linear& L, const bf16* x, float* y, int T, LinearScratch& sc, cudaStream_t s) {
    if (T == 1) return gemv(L, x, y, s);
    prefill_gemm(L, x, y, T, false, sc, s);
}

inline void linear_add(const Linear& L, const bf16* x, float* y, int T, LinearScratch& sc, cudaStream_t s, L2Prefetch pf = {}) {
    if (T == 1) return gemv_add(L, x, y, s, pf);
    prefill_gemm(L, x, y, T, true, sc, s);
}

inline void linear_rmsnorm(const Linear& L, const float* x, const bf16* norm_w, float eps, float* y, int T,
                           LinearScratch& sc, cudaStream_t s) {
    if (T == 1) return gemv_rmsnorm(L, x, norm_w, eps, y, s);
    rmsnorm(x, norm_w, sc.xb, T, L.K, eps, s);
    prefill_gemm(L, sc.xb, y, T, false, sc, s);
}

// L holds gate_proj and up_proj interleaved by rows (2i = gate_i, 2i+1 = up_i); h is bf16 [T][N / 2].
inline void linear_rmsnorm_swiglu(const Linear& L, const float* x, const bf16* norm_w, float eps, bf16* h, int T,
                                  LinearScratch& sc, cudaStream_t s, L2Prefetch pf = {}) {
    if (T == 1) return gemv_rmsnorm_swiglu(L, x, norm_w, eps, h, s, pf);
    rmsnorm(x, norm_w, sc.xb, T, L.K, eps, s);
    prefill_gemm(L, sc.xb, sc.f, T, false, sc, s);
    swiglu_interleaved(sc.f, h, T, L.N / 2, s);
}

}  // namespace monocu
