// gpu/trace.cuh — a timeline of the decode kernels, block by block: a profiling build (make trace).
//
// Usage:
//   in a kernel:  TRACE_BEGIN();                    first statement: the block starts
//                 TRACE_MARK(k);                    k = 1 .. 5: points of the kernel's own (see below)
//                 TRACE_END(kind, a, b);            thread 0 appends the block's record
//   host:         trace_enable(true); ...decode steps...; trace_enable(false); trace_save(path);
//                 (the engine does this for 3 decode steps with --bench --timeline FILE)
//   analysis:     python3 oracle/trace_report.py FILE.512 bf16
// Thread 0 of each block reads %globaltimer (nanoseconds, one clock for all SMs) at each point and appends
// one record to a device buffer. The kernels' points: GEMV (kind 1, a = N, b = K): 1 after waiting for the
// previous kernel, 2 x staged, 3 its rows done, 4 every warp done (a barrier only this build has), 5 thread 0's
// copies of x landed (between 1 and 2; what remains of the staging is the other warps' copies and the arithmetic).
// Flash-Decoding's split blocks (kind 2): 1 after the wait, 2 queries ready, 3 keys done, 4 partials
// written; its merge (kind 3): 1 after the wait, 4 merged. Without MONOCU_TRACE every macro is empty and
// the kernels are the normal build's.
// Why: it shows where a step's time goes between kernels (the wait after the previous kernel, staging,
// the last blocks' tail), which per-kernel timings cannot; kb/log.md has what it found.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "host/errors.h"

namespace monocu {

// One block's record, as oracle/trace_report.py reads it (56 bytes, little-endian).
struct TraceRecord {
    unsigned kind, a, b, block, sm, pad;
    unsigned long long t[6];  // ns; 0 where a point was not reached
};

#ifdef MONOCU_TRACE
constexpr bool kTraceBuild = true;
constexpr unsigned kTraceCapacity = 1u << 19;  // records: 3 steps of an 8B model need ~300k
__device__ int g_trace_on;
__device__ unsigned g_trace_count;
__device__ TraceRecord g_trace[kTraceCapacity];

__device__ __forceinline__ void trace_append(unsigned kind, unsigned a, unsigned b, const unsigned long long* t) {
    if (!g_trace_on || threadIdx.x != 0) return;
    unsigned i = atomicAdd(&g_trace_count, 1u);
    if (i >= kTraceCapacity) return;
    TraceRecord r;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    r.kind = kind, r.a = a, r.b = b, r.block = blockIdx.x + blockIdx.y * gridDim.x, r.sm = sm, r.pad = 0;
    for (int k = 0; k < 6; k++) r.t[k] = t[k];
    g_trace[i] = r;
}

inline void trace_enable(bool on) {
    int v = on;
    unsigned zero = 0;
    CUDA_CHECK(cudaMemcpyToSymbol(g_trace_on, &v, sizeof v));
    if (on) CUDA_CHECK(cudaMemcpyToSymbol(g_trace_count, &zero, sizeof zero));
}

inline void trace_save(const std::string& path) {
    unsigned n = 0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&n, g_trace_count, sizeof n));
    if (n > kTraceCapacity) die("trace: %u records do not fit the buffer of %u (trace fewer steps)", n, kTraceCapacity);
    std::vector<TraceRecord> recs(n);
    CUDA_CHECK(cudaMemcpyFromSymbol(recs.data(), g_trace, n * sizeof(TraceRecord)));
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(recs.data(), sizeof(TraceRecord), n, f) != n) die("%s: cannot write the trace", path.c_str());
    std::fclose(f);
    std::printf("trace: %u block records -> %s\n", n, path.c_str());
}

// The stamps live in shared memory and only thread 0 takes them. Kept in every thread's registers, they
// cost the 4-row FP8 and INT4 GEMVs up to 13 registers, which held FP8's down_proj to 2 blocks per SM
// instead of 3: that build's Qwen3-4B fp8 decode read 405 tok/s against the normal build's 460, and its
// timeline showed a second wave of down_proj blocks that the normal build does not have. Now: 433 tok/s;
// the FP8 and INT4 GEMVs take the normal build's registers (the bf16 ones without a fused norm 74 instead
// of 64, still 3 blocks per SM under gemv.cuh's cap) (kb/log.md, thirteenth session).
#define TRACE_BEGIN()                                                \
    __shared__ unsigned long long trace_t_[6];                        \
    if (threadIdx.x == 0) {                                           \
        for (int trace_k_ = 1; trace_k_ < 6; trace_k_++) trace_t_[trace_k_] = 0; \
        trace_t_[0] = monocu::global_timer_ns();                          \
    }
#define TRACE_MARK(k)                                         \
    do {                                                      \
        if (threadIdx.x == 0) trace_t_[k] = monocu::global_timer_ns(); \
    } while (0)
#define TRACE_BARRIER() __syncthreads()
#define TRACE_END(kind, a, b) monocu::trace_append(kind, a, b, trace_t_)
#else
constexpr bool kTraceBuild = false;
inline void trace_enable(bool) { die("this binary has no tracing: build it with make trace"); }
inline void trace_save(const std::string&) { die("this binary has no tracing: build it with make trace"); }
#define TRACE_BEGIN()
#define TRACE_MARK(k)
#define TRACE_BARRIER()
#define TRACE_END(kind, a, b)
#endif

}  // namespace monocu
