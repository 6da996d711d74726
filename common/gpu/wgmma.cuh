// gpu/wgmma.cuh — Hopper's warpgroup matrix multiply (wgmma, sm_90a only: the build defines MONOCU_SM90A), as the
// Hopper prefill attention (ops/attention_sm90.cuh) uses it.
//
// Usage (every thread of a warpgroup: 4 consecutive warps starting at a warp index divisible by 4):
//   wgmma_fence();                                         // registers written before are ready for the MMA
//   wgmma_ss_m64n128<F16>(acc, desc_a, desc_b, k > 0);     // acc[64x128] (+)= A[64x16] B[16x128], both in shared memory
//   wgmma_rs_m64n<N, F16>(acc, a_regs, desc_b);            // acc[64xN] += A[64x16] (registers) B[16xN], B "transposed"
//   wgmma_rs_m64n<N, F16, false>(acc, a_regs, desc_b);     // ... B K-major
//   wgmma_commit();  wgmma_wait<0>();  wgmma_hold(acc);    // the MMAs are asynchronous: wait, then pin acc after it
//
// A wgmma is issued by the whole warpgroup and runs asynchronously: its accumulators may be read only after
// wgmma_wait, and wgmma_hold (an empty asm on every accumulator) keeps the compiler from moving their reads above it.
//
// Layouts (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply"): with w = warp % 4, g = lane / 4, t = lane % 4,
// accumulator element 4i + e of a thread is row 16w + g (e < 2) or 16w + g + 8 (e >= 2), column 8i + 2t + (e & 1):
// the mma.sync m16n8 layout (mma.cuh) repeated over the N / 8 column groups. A from registers takes mma.sync's
// m16n8k16 A fragment for the warp's 16 rows, so two accumulator column groups rounded to 16 bits are one A fragment
// (FlashAttention's P, kept in registers between its two products).
//
// Shared-memory operands are described by a 64-bit descriptor; the only layout used here is the 128-byte swizzle
// that the bulk tensor copy writes with CU_TENSOR_MAP_SWIZZLE_128B (tma.cuh): rows of 64 16-bit elements (128 bytes),
// the 16-byte chunks of row r permuted by r % 8, tiles 1024-byte aligned. Groups of 8 rows lie 1024 bytes apart
// (the stride byte offset). K-major (the reduction dimension along a row: Q and K for Q K^T): a k16 step inside a
// 64-wide row block starts 32 bytes further. MN-major (rows run along K: V for P V, with the "transpose B" flag):
// the leading byte offset is the distance between 64-column blocks of N, and a k16 step starts 16 rows further.
#pragma once

#include <cstdint>

namespace monocu {

#if defined(MONOCU_SM90A)

__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void* smem, uint32_t lbo_bytes = 16) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)((lbo_bytes >> 4) & 0x3FFF) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);  // layout type 1: 128-byte swizzle
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_hold(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for A operands in registers, which the MMA reads until it completes: kept (not reused) until here.
template <int R, int C>
__device__ __forceinline__ void wgmma_hold_regs(uint32_t (&r)[R][C]) {
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < C; j++) asm volatile("" : "+r"(r[i][j])::"memory");
}

// The accumulator operand lists (the asm needs every register named).
#define MONOCU_WG_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define MONOCU_WG_ACC32 MONOCU_WG_ACC8(0), MONOCU_WG_ACC8(8), MONOCU_WG_ACC8(16), MONOCU_WG_ACC8(24)
#define MONOCU_WG_ACC64 MONOCU_WG_ACC32, MONOCU_WG_ACC8(32), MONOCU_WG_ACC8(40), MONOCU_WG_ACC8(48), MONOCU_WG_ACC8(56)
#define MONOCU_WG_R32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MONOCU_WG_R64 MONOCU_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MONOCU_WG_ACC96 MONOCU_WG_ACC64, MONOCU_WG_ACC8(64), MONOCU_WG_ACC8(72), MONOCU_WG_ACC8(80), MONOCU_WG_ACC8(88)
#define MONOCU_WG_R96 MONOCU_WG_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"

// d[64x128] = A B (+ d when accumulate), A [64x16] and B [16x128] K-major in shared memory; fp16 or bf16 inputs.
template <bool F16>
__device__ __forceinline__ void wgmma_ss_m64n128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    if constexpr (F16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" MONOCU_WG_R64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : MONOCU_WG_ACC64
                     : "l"(a), "l"(b), "r"(accumulate));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" MONOCU_WG_R64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : MONOCU_WG_ACC64
                     : "l"(a), "l"(b), "r"(accumulate));
}

// d[64xN] += A B, A [64x16] in registers (mma.sync's A fragment per warp), B [16xN] in shared memory: MN-major
// (TransB, the default: V for P V) or K-major (rows of B along K, as a row-major [N][K] tile: the MXFP4 GEMM's x).
template <int N, bool F16, bool TransB = true>
__device__ __forceinline__ void wgmma_rs_m64n(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
    static_assert(N == 64 || N == 128 || (N == 192 && !F16), "wgmma_rs_m64n: N is 64 or 128 (192: bf16)");
    constexpr int tb = TransB ? 1 : 0;
    if constexpr (N == 192)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" MONOCU_WG_R96 "}, {%96, %97, %98, %99}, %100, p, 1, 1, %102;\n}\n"
                     : MONOCU_WG_ACC96
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(tb));
    else if constexpr (N == 128 && F16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" MONOCU_WG_R64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                     : MONOCU_WG_ACC64
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(tb));
    else if constexpr (N == 128)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" MONOCU_WG_R64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                     : MONOCU_WG_ACC64
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(tb));
    else if constexpr (F16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" MONOCU_WG_R32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : MONOCU_WG_ACC32
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(tb));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" MONOCU_WG_R32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : MONOCU_WG_ACC32
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(tb));
}

#undef MONOCU_WG_ACC8
#undef MONOCU_WG_ACC32
#undef MONOCU_WG_ACC64
#undef MONOCU_WG_R32
#undef MONOCU_WG_R64
#undef MONOCU_WG_ACC96
#undef MONOCU_WG_R96

// Register budgets per warpgroup (warp specialisation: the loading warpgroup gives registers to the computing ones).
template <int N>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void warpgroup_reg_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

#endif  // MONOCU_SM90A

}  // namespace monocu
