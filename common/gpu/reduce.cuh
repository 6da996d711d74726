// gpu/reduce.cuh — warp- and block-wide sums and maxima, the building block of norms and softmax.
//
// Usage (inside a kernel, every thread of the block must call it):
//   float total = block_sum(partial);        // blockDim.x a multiple of 32, at most 1024
//   float m = warp_max(v);                    // all 32 lanes get the result
#pragma once

#include <cuda_runtime.h>

namespace monocu {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reduce v over the whole block with a warp reduction (warp_sum or warp_max); the result reaches every
// thread. Uses 33 floats of shared memory; blockDim.x a multiple of 32.
template <float (*WarpReduce)(float)>
__device__ __forceinline__ float block_reduce(float v, float identity) {
    __shared__ float partial[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = WarpReduce(v);
    __syncthreads();  // partial[] may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = WarpReduce(lane < nwarps ? partial[lane] : identity);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce<warp_sum>(v, 0.f); }
__device__ __forceinline__ float block_max(float v) { return block_reduce<warp_max>(v, -INFINITY); }

}  // namespace monocu
