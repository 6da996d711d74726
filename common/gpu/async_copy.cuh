// gpu/async_copy.cuh — copies from global to shared memory that a thread starts now and uses later (cp.async,
// compute capability 8.0+).
//
// Usage:
//   cp_async_16(smem_dst, global_src, n);   // n = 16 or fewer bytes are read, the rest of the 16 is zeroed
//                                           // (n = 0 reads nothing: a zero-filled slot); 16-byte aligned
//   cp_async_16_ca(smem_dst, global_src);   // 16 bytes through L1 (the one above skips L1)
//   cp_async_16_read_once(smem_dst, global_src, n);  // as cp_async_16, for data no one reads again soon
//   cp_async_4(smem_dst, global_src, n);    // the same for 4 bytes (n = 0 to 4 read, the rest zeroed), 4-byte aligned
//   cp_async_commit();                      // closes a group of this thread's copies
//   cp_async_wait<N>();                     // all but this thread's N most recent groups have landed
// A thread's own copies are visible to it after cp_async_wait; for other threads' copies add the barrier
// (__syncwarp or __syncthreads) that orders them. Flash-Decoding keeps a ring of key tiles in flight per warp.
#pragma once

namespace monocu {

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int n_bytes = 16) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n_bytes) : "memory");
}

// The same with two L2 hints for a stream read once: its lines go first when L2 needs room (evict_first),
// and L2 fetches the whole 256-byte block around each request. Flash-Decoding's bf16 key and value tiles:
// at 16k context (Qwen3-4B, H100) decode went from 247.5 to 251.1 tok/s (kb/log.md, tenth session); the
// GEMVs stream their weights with evict-first loads (__ldcs) for the same reason.
__device__ __forceinline__ void cp_async_16_read_once(void* smem, const void* gmem, int n_bytes = 16) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    unsigned long long policy;  // not volatile: the same value every call, so the compiler may make it once per loop
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;" ::"r"(s), "l"(gmem), "r"(n_bytes), "l"(policy)
                 : "memory");
}

// The same through L1 (cp.async.ca): for data that several blocks of an SM read, such as a GEMV's x.
__device__ __forceinline__ void cp_async_16_ca(void* smem, const void* gmem) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

// 4 bytes (n_bytes 4), fewer with the rest zeroed, or a zeroed slot (n_bytes 0); both addresses 4-byte aligned.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, int n_bytes = 4) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(n_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace monocu
