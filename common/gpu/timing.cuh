// gpu/timing.cuh — device timing and the memory-bandwidth ceiling every speed figure is compared with.
//
// Usage:
//   GpuTimer t(stream); t.start(); ...; float ms = t.stop();     // CUDA events, synchronises on stop
//   double gbs = measure_copy_bandwidth(stream);                 // device-to-device copy, GB/s (read + write)
//   double now = wall_ms();                                      // host clock
//   double ms = time_rounds(stream, calls, reps, [&](int i) { ... });  // ms per round of calls fn(0..calls-1)
//   float ms = median_ms(stream, warmups, runs, [&] { ... });    // median of runs timed calls, after warmups
//
// The roofline: decode at batch 1 must read every weight once per token, so tokens/s can be at most
// (copy bandwidth) / (bytes read per token). The copy bandwidth is measured here, in the same process,
// on 1 GiB buffers of non-zero data (median of 20 copies, counting bytes read plus bytes written).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/types.cuh"

namespace monocu {

inline double wall_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct GpuTimer {
    cudaEvent_t a = nullptr, b = nullptr;
    cudaStream_t stream;
    explicit GpuTimer(cudaStream_t s) : stream(s) {
        CUDA_CHECK(cudaEventCreate(&a));
        CUDA_CHECK(cudaEventCreate(&b));
    }
    ~GpuTimer() {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
    }
    GpuTimer(const GpuTimer&) = delete;
    GpuTimer& operator=(const GpuTimer&) = delete;
    void start() { CUDA_CHECK(cudaEventRecord(a, stream)); }
    float stop() {
        CUDA_CHECK(cudaEventRecord(b, stream));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0.f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        return ms;
    }
};

// Milliseconds per round of `calls` calls fn(0), ..., fn(calls - 1): one round to warm up, then `reps` rounds
// back to back on the stream, timed together (the engines' per-operation breakdowns).
template <class Fn>
inline double time_rounds(cudaStream_t stream, int calls, int reps, Fn&& fn) {
    for (int i = 0; i < calls; i++) fn(i);
    GpuTimer t(stream);
    t.start();
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < calls; i++) fn(i);
    return t.stop() / reps;
}

// Median milliseconds of `runs` timed calls of fn(), each timed alone, after `warmups` calls (timed the same way,
// then dropped: first calls pay for uploads, caches and clocks).
template <class Fn>
inline float median_ms(cudaStream_t stream, int warmups, int runs, Fn&& fn) {
    GpuTimer t(stream);
    std::vector<float> ms;
    for (int i = 0; i < warmups + runs; i++) {
        t.start();
        fn();
        float m = t.stop();
        if (i >= warmups) ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static __global__ void fill_pattern_kernel(uint32_t* p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)(i * 2654435761u) ^ 0x5bd1e995u;
}

// Device-to-device copy bandwidth in GB/s (1e9 bytes), counting each byte read and each byte written.
inline double measure_copy_bandwidth(cudaStream_t stream, size_t bytes = (size_t)1 << 30) {
    void *src = nullptr, *dst = nullptr;
    CUDA_CHECK(cudaMalloc(&src, bytes));
    CUDA_CHECK(cudaMalloc(&dst, bytes));
    fill_pattern_kernel<<<1024, 256, 0, stream>>>(static_cast<uint32_t*>(src), bytes / 4);
    LAUNCH_CHECK();
    float ms = median_ms(stream, 3, 20, [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); });
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

// A number in [0, 1) from element i and a seed (a multiplicative hash, 16 bits kept): benchmark data.
__device__ __forceinline__ float hash_unit(size_t i, uint32_t seed) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    return (h & 0xFFFF) / 65536.f;
}

static __global__ void fill_bf16_kernel(bf16* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn((hash_unit(i, seed) - 0.5f) * 0.1f);
}

}  // namespace monocu
