// gpu/types.cuh — the 16-bit float types on the GPU and the 8-wide conversions kernels share.
//
// Usage:
//   bf16 w;                                  // __nv_bfloat16
//   float f[8]; bf16x8_to_float(*(const uint4*)p, f);     // 16 bytes of bf16 -> 8 floats
//   uint4 v = float8_to_bf16x8(f);           // and back (round to nearest even)
//   uint4 h = float8_to_half8_sat(f);        // to fp16, clamped to +-65504
//   load_float8(p, f);                       // 8 floats from a 16-byte aligned address
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace monocu {

using bf16 = __nv_bfloat16;

// 8 bf16 (one 16-byte load) widened to float.
__device__ __forceinline__ void bf16x8_to_float(uint4 v, float* f) {
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 t = __bfloat1622float2(p[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

// 8 floats rounded to bf16 (round to nearest even), as one 16-byte value: the reverse of bf16x8_to_float.
__device__ __forceinline__ uint4 float8_to_bf16x8(const float* f) {
    uint4 v;
    __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    return v;
}

// 8 floats rounded to fp16 as one 16-byte value, clamped to fp16's largest finite value (65504) so that an
// out-of-range activation saturates instead of becoming inf (a NaN stays NaN). fp16 keeps 3 more mantissa
// bits than bf16; the prefill attention computes in it (attention.cuh).
__device__ __forceinline__ float clamp_to_half_range(float x) {
    constexpr float kMax = 65504.f;
    return x > kMax ? kMax : x < -kMax ? -kMax : x;
}
__device__ __forceinline__ uint4 float8_to_half8_sat(const float* f) {
    uint4 v;
    __half2* p = reinterpret_cast<__half2*>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = __floats2half2_rn(clamp_to_half_range(f[2 * k]), clamp_to_half_range(f[2 * k + 1]));
    return v;
}

// 8 floats from a 16-byte aligned address (two 16-byte loads).
__device__ __forceinline__ void load_float8(const float* p, float* x) {
    float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

}  // namespace monocu
