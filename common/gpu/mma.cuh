// gpu/mma.cuh — warp-level tensor-core helpers (mma.sync m16n8k16, ldmatrix) shared by the attention kernels.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"): with g = lane / 4, t = lane % 4,
//   A (16x16, row-major): {A[g][2t..2t+1], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]}
//   B (16x8, "col"):      {B[2t..2t+1][g], B[2t+8..2t+9][g]}
//   C (16x8, fp32):       {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}
// Two C tiles side by side, rounded to 16 bits, are exactly an A fragment: that is how P = softmax(S)
// feeds P V without leaving registers (FlashAttention-2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace monocu {

// c += a b with fp32 accumulators; inputs bf16, or fp16 when F16.
template <bool F16 = false>
__device__ __forceinline__ void mma_16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    if constexpr (F16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 16-bit matrices, transposed: lane i gives the row address of matrix i / 8, row i % 8.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem_row) {
    uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// Two floats as the 16-bit pair an MMA operand register holds: bf16, or fp16 when F16.
template <bool F16 = false>
__device__ __forceinline__ uint32_t pack_16x2(float lo, float hi) {
    return F16 ? pack_half2(lo, hi) : pack_bf16x2(lo, hi);
}

}  // namespace monocu
