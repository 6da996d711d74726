// gemm.cuh — prefill matmul through cuBLAS: C[T][N] (=|+=) A[T][K] . W[N][K]^T, bf16 in, fp32 out.
//
// Usage:
//   Gemm g;                                              // owns a cuBLAS handle bound to nothing yet
//   gemm_bf16(g, A, W, C, T, N, K, /*accumulate=*/false, stream);   // C = A W^T
//   gemm_bf16(g, A, W, x, T, N, K, /*accumulate=*/true,  stream);   // x += A W^T (residual add for free)
//
// Row-major A [T][K] and W [N][K] are column-major A^T [K][T] and W^T [K][N] to cuBLAS, so
// C^T [N][T] = op_T(W^T) . A^T is one cublasGemmEx call with W transposed, leading dimension K for
// both inputs and N for C. Tensor cores, fp32 accumulate (CUBLAS_COMPUTE_32F), fp32 output: the
// residual stream stays fp32 and the beta = 1 form adds the projection into it in the same pass.
#pragma once

#include "gpu_memory.cuh"

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

}  // namespace monocu
