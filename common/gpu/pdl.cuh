// gpu/pdl.cuh — programmatic dependent launch (Hopper and newer): the next kernel starts while this one ends.
//
// Usage:
//   launch(kernel, grid, block, smem_bytes, stream, args...);   // host: a launch the next kernel may overlap
//   __global__ void kernel(...) {
//       pdl_launch_dependents();   // first: our successor may now be scheduled
//       ... loads of data no kernel writes (weights) ...
//       pdl_wait();                // every thread, before it reads what an earlier kernel wrote or writes anything
//       ...
//   }
//
// Why: decoding one token runs ~200 small kernels. Normally kernel n+1 starts only when kernel n has
// drained, and HBM sits idle while kernel n's last blocks finish and kernel n+1's first loads are in
// flight (measured gain from overlapping that: 1-3 points of roofline on Qwen3-4B, kb/log.md). With the
// launch attribute below, kernel n+1's blocks are scheduled as soon as every
// block of kernel n has called griddepcontrol.launch_dependents (PTX ISA, "griddepcontrol"); they fill
// the SMs' free slots, start streaming their weights, then griddepcontrol.wait holds them until kernel n has
// finished and its writes are visible. Kernel n itself waited for kernel n-1 before finishing, so the
// ordering carries down the whole chain. A kernel launched the ordinary way after one of ours still waits
// for it to finish, so cuBLAS, cub and copies need nothing special.
//
// Off on devices before compute capability 9.0 (both instructions are then no-ops), or with pdl_enabled() = false
// (the engine's --no-pdl), which turns every launch() back into an ordinary one.
#pragma once

#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "gpu/cuda_check.h"

namespace monocu {

__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

inline bool device_supports_pdl() { return compute_capability_major() >= 9; }

// Whether launch() asks for overlap; set it before the first launch (and before any graph capture).
inline bool& pdl_enabled() {
    static bool on = device_supports_pdl();
    return on;
}

// Appends the PDL attribute to attrs[n] when enabled; returns the new attribute count.
inline unsigned add_pdl_attribute(cudaLaunchAttribute* attrs, unsigned n) {
    if (!pdl_enabled()) return n;
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    return n + 1;
}

// Kernels that overlap must agree on how the SM splits its 256 KB between L1 and shared memory: an SM
// changes that split (the carveout) only when no block is resident, so a kernel that needs a larger
// shared part than the one still running waits for the SM to drain, which is the very overlap PDL is
// for. Every kernel launched through here (and the GEMV and Flash-Decoding) asks for the same split:
// 164 KB shared (72%), enough for two Flash-Decoding blocks (75 KB each) beside GEMV blocks, and 92 KB of
// L1, which the GEMVs' loads in flight need. Measured on the H100 (kb/log.md): 8B bf16 decode 155 ->
// 166 tok/s; the whole shared part (228 KB, 28 KB of L1) slowed the GEMVs by up to 25% instead.
// Once per kernel, before any graph capture (the engine's first decode step is eager).
constexpr int kDecodeSharedCarveoutPct = 72;

template <class... Params>
inline void prefer_decode_carveout(void (*kernel)(Params...)) {
    static std::unordered_set<const void*> done;
    if (!done.insert(reinterpret_cast<const void*>(kernel)).second) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, kDecodeSharedCarveoutPct));
}

// Lets a kernel take `bytes` of dynamic shared memory (past the 48 KB default), once per kernel, before any graph
// capture (the engine's first decode step is eager). Keyed by the kernel's address, never by a static flag in the
// launcher: each translation unit has its own copy of a template kernel (a local symbol) and needs its own call, while a
// static in an inline launcher is one for the whole program; the GPU tests, several translation units, launch the same
// kernels (a shared flag once left a second unit's flash-decoding without its attribute: "invalid argument").
template <class... Params>
inline void allow_dynamic_smem(void (*kernel)(Params...), size_t bytes) {
    static std::unordered_map<const void*, size_t> raised;
    size_t& r = raised[reinterpret_cast<const void*>(kernel)];
    if (r >= bytes) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    r = bytes;
}

template <class... Params, class... Args>
inline void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
    cudaLaunchAttribute attrs[1];
    cfg.attrs = attrs;
    cfg.numAttrs = add_pdl_attribute(attrs, 0);
    prefer_decode_carveout(kernel);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace monocu
