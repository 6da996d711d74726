// ops/gemm.cuh — prefill matmul through cuBLAS: C[T][N] (=|+=) A[T][K] . W[N][K]^T, bf16 in, fp32 out.
//
// Usage:
//   Gemm g;                                              // owns a cuBLAS handle bound to nothing yet
//   gemm_bf16(g, A, W, C, T, N, K, /*accumulate=*/false, stream);   // C = A W^T
//   gemm_bf16(g, A, W, x, T, N, K, /*accumulate=*/true,  stream);   // x += A W^T (residual add for free)
//   double tf = measure_gemm_tflops(g, M, N, K, stream);   // the prefill ceiling: cuBLAS bf16 on random data, TFLOP/s
//
// Row-major A [T][K] and W [N][K] are column-major A^T [K][T] and W^T [K][N] to cuBLAS, so
// C^T [N][T] = op_T(W^T) . A^T is one cublasGemmEx call with W transposed, leading dimension K for
// both inputs and N for C. Tensor cores, fp32 accumulate (CUBLAS_COMPUTE_32F), fp32 output: the
// residual stream stays fp32 and the beta = 1 form adds the projection into it in the same pass.
#pragma once

#include "gpu/memory.cuh"
#include "gpu/timing.cuh"

namespace monocu {

struct Gemm {
    cublasHandle_t handle = nullptr;
    Gemm() { CUBLAS_CHECK(cublasCreate(&handle)); }
    ~Gemm() {
        if (handle) cublasDestroy(handle);
    }
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;
};

inline void gemm_bf16(Gemm& g, const bf16* A, const bf16* W, float* C, int T, int N, int K, bool accumulate,
                      cudaStream_t stream) {
    if (T <= 0) return;
    CUBLAS_CHECK(cublasSetStream(g.handle, stream));
    const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
    CUBLAS_CHECK(cublasGemmEx(g.handle, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, CUDA_R_16BF, K, A, CUDA_R_16BF, K,
                              &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The prefill ceiling: a cuBLAS bf16 GEMM C[M][N] = A[M][K] B[N][K]^T on random data (median of 10).
inline double measure_gemm_tflops(Gemm& g, int M, int N, int K, cudaStream_t stream) {
    bf16 *a = nullptr, *b = nullptr;
    float* c = nullptr;
    CUDA_CHECK(cudaMalloc(&a, (size_t)M * K * 2));
    CUDA_CHECK(cudaMalloc(&b, (size_t)N * K * 2));
    CUDA_CHECK(cudaMalloc(&c, (size_t)M * N * 4));
    fill_bf16_kernel<<<1024, 256, 0, stream>>>(a, (size_t)M * K, 1);
    fill_bf16_kernel<<<1024, 256, 0, stream>>>(b, (size_t)N * K, 2);
    LAUNCH_CHECK();
    float ms = median_ms(stream, 3, 10, [&] { gemm_bf16(g, a, b, c, M, N, K, false, stream); });
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(c));
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12;
}

}  // namespace monocu
