// gpu/tma.cuh — Hopper's bulk tensor copies (TMA) and the shared-memory barriers they complete on (sm_90).
//
// Usage:
//   CUtensorMap m = tma_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, {64, rows, heads}, {row_bytes, head_bytes},
//                           {64, box_rows, 1});       // host: a 3-D view of a 16-bit tensor, 128-byte swizzled boxes
//   kernel<<<...>>>(m, ...)                             // passed by value as a `const __grid_constant__ CUtensorMap`
//   mbar_init(&bar, arrivals); mbar_init_fence();       // one thread, then a barrier of the block
//   mbar_expect_tx(&bar, bytes); tma_load_3d(dst, &m, &bar, x, y, z);   // the loading thread
//   mbar_wait(&bar, phase & 1);                         // the using threads: the phase's bytes have all landed
//   mbar_arrive(&bar);                                  // ... and, on another barrier, "this buffer is free again"
//   mbar_arrive_on_copies(&bar);                        // an arrival once this thread's cp.async copies have landed
//
// A box is copied into shared memory as rows of 128 bytes whose 16-byte chunks are permuted by the row index (the
// swizzle wgmma.cuh's descriptors expect); coordinates past the tensor's extent read as zeros, and their bytes still
// count toward the barrier's transaction. Shared memory written by ordinary stores that the copy engine or the tensor
// cores read next needs fence_proxy_async() in each writing thread before the barrier that orders them.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "gpu/cuda_check.h"
#include "host/errors.h"

namespace monocu {

// The driver's tensor-map encoder, found once through the runtime (no link against libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 tma_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !p)
            die("the CUDA driver has no cuTensorMapEncodeTiled (a Hopper driver is needed)");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

// A view of a tensor of rank 2 or 3: dims in elements, x contiguous; strides: bytes between consecutive y (and z);
// box: elements copied per load. With the 128-byte swizzle a box row is 128 bytes (box[0] * element size).
template <int RANK>
inline CUtensorMap tma_map(CUtensorMapDataType type, const void* base, const uint64_t (&dims)[RANK], const uint64_t (&strides)[RANK - 1],
                           const uint32_t (&box)[RANK], CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
    static_assert(RANK == 2 || RANK == 3, "tma_map: rank 2 or 3");
    CUtensorMap m;
    cuuint64_t gdim[RANK], gstride[RANK - 1];
    cuuint32_t bdim[RANK], estride[RANK];
    for (int i = 0; i < RANK; i++) gdim[i] = dims[i], bdim[i] = box[i], estride[i] = 1;
    for (int i = 0; i < RANK - 1; i++) gstride[i] = strides[i];
    CUresult r = tma_encoder()(&m, type, RANK, const_cast<void*>(base), gdim, gstride, bdim, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        die("cuTensorMapEncodeTiled failed (%d) for a rank-%d tensor %llu x %llu, box %u x %u", (int)r, RANK, (unsigned long long)dims[0],
            (unsigned long long)dims[1], box[0], box[1]);
    return m;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the copy engine (then a block barrier).
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` of copies completing on this phase.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival on bar once every cp.async (gpu/async_copy.cuh) this thread has started has landed (the barrier's
// count includes it: "noinc").
__device__ __forceinline__ void mbar_arrive_on_copies(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
}

// Box at (x, y) of a rank-2 map, as tma_load_3d.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(x), "r"(y)
                 : "memory");
}

// Box at (x, y, z) of the map into shared memory (1024-byte aligned for the 128-byte swizzle), completing on bar.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y, int z) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z)
        : "memory");
}

// bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned) by the copy engine, completing on bar:
// one instruction for a contiguous run, no tensor map.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A barrier of `threads` threads (a multiple of 32) under id (1..15; 0 is __syncthreads'): named_barrier waits for
// all of them, named_barrier_arrive counts this thread's arrival and goes on (the other side of a hand-over).
__device__ __forceinline__ void named_barrier(int id, int threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace monocu
