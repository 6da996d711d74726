// ops/quant.cuh — quantize bf16 weights on the GPU at load time, and dequantize tiles back for prefill GEMMs.
//
// Usage:
//   quantize_fp8(w_bf16, q, scale, N, K, stream);           // per 128 inputs of a row: s = max|w| / 448
//   quantize_int4_g128(w_bf16, packed, scales, N, K, stream); // per 128 weights: s = bf16(max|w| / 7)
//   dequant_to_bf16(linear, out_bf16, stream);                // FP8, INT4 or MXFP4 Linear back to bf16 [N][K]
//
// The arithmetic is quant.h's, operation for operation (IEEE division, round-to-nearest-even), so the
// GPU and tools/quantize on a CPU produce identical bits; tests/test_gpu_quant.cu checks that.
// Prefill of quantized weights runs through cuBLAS in bf16: each projection is dequantized into a scratch
// buffer right before its GEMM (reads 1 or 0.5 byte/weight, writes 2; cheap next to a 2k-token GEMM).
#pragma once

#include <cuda_fp8.h>

#include "gpu/memory.cuh"
#include "gpu/reduce.cuh"
#include "host/quant.h"
#include "ops/weights.cuh"

namespace monocu {

__device__ __forceinline__ uint8_t float_to_e4m3_dev(float x) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float2 e4m3x2_to_float2(uint16_t v) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2*>(&h));
}

// One warp per (row, block of kblock inputs): the block's max |w|, then every weight divided by max / 448.
static __global__ void quantize_fp8_kernel(const bf16* __restrict__ w, uint8_t* __restrict__ q, float* __restrict__ scale, int kblock,
                                           size_t n_blocks) {
    size_t blk = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (blk >= n_blocks) return;
    const bf16* x = w + blk * kblock;
    float amax = 0.f;
    for (int k = lane; k < kblock; k += 32) amax = fmaxf(amax, fabsf(__bfloat162float(x[k])));
    amax = warp_max(amax);
    float s = __fdiv_rn(amax, kE4M3Max);
    if (s == 0.f) s = 1.f;
    for (int k = lane; k < kblock; k += 32) q[blk * kblock + k] = float_to_e4m3_dev(__fdiv_rn(__bfloat162float(x[k]), s));
    if (lane == 0) scale[blk] = s;
}

__device__ __forceinline__ float int4_q_dev(float w, float s) { return fminf(7.f, fmaxf(-8.f, rintf(__fdiv_rn(w, s)))); }

// One thread per group of 128 weights, the clipping search of quant.h in the same order with the same
// roundings (explicit _rn intrinsics: no fused multiply-adds), so the bits match tools/quantize.
static __global__ void quantize_int4_kernel(const bf16* __restrict__ w, uint8_t* __restrict__ packed, bf16* __restrict__ scales,
                                            size_t n_groups) {
    size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const bf16* x = w + g * kInt4Group;
    float amax = 0.f;
    for (int k = 0; k < kInt4Group; k++) amax = fmaxf(amax, fabsf(__bfloat162float(x[k])));
    float base = __fdiv_rn(amax, 7.f);
    bf16 best = __float2bfloat16_rn(0.f);
    double best_err = INFINITY;
    for (int c = 0; c < kInt4ClipCount; c++) {
        bf16 sb = __float2bfloat16_rn(__fmul_rn(base, int4_clip(c)));
        float s = __bfloat162float(sb);
        if (s == 0.f) {
            best = sb;
            break;
        }
        double err = 0;
        for (int k = 0; k < kInt4Group; k++) {
            float xf = __bfloat162float(x[k]);
            double d = __dsub_rn((double)__fmul_rn(int4_q_dev(xf, s), s), (double)xf);
            err = __dadd_rn(err, __dmul_rn(d, d));
        }
        if (err < best_err) best_err = err, best = sb;
    }
    float s = __bfloat162float(best);
    uint8_t* dst = packed + g * (kInt4Group / 2);
    for (int k = 0; k < kInt4Group; k += 2) {
        int q0 = 0, q1 = 0;
        if (s != 0.f) q0 = (int)int4_q_dev(__bfloat162float(x[k]), s), q1 = (int)int4_q_dev(__bfloat162float(x[k + 1]), s);
        dst[k / 2] = (uint8_t)((q0 + 8) | ((q1 + 8) << 4));
    }
    scales[g] = best;
}

// scale: float [N][K / fp8_kblock(K)], row-major (a row's blocks are consecutive, as Linear wants them).
inline void quantize_fp8(const bf16* w, uint8_t* q, float* scale, int N, int K, cudaStream_t s) {
    size_t blocks = (size_t)N * (K / fp8_kblock(K));
    quantize_fp8_kernel<<<(unsigned)CEIL_DIV(blocks * 32, 256), 256, 0, s>>>(w, q, scale, fp8_kblock(K), blocks);
    LAUNCH_CHECK();
}

inline void quantize_int4_g128(const bf16* w, uint8_t* packed, bf16* scales, int N, int K, cudaStream_t s) {
    if (K % kInt4Group != 0) die("int4: in_features %d is not a multiple of %d", K, kInt4Group);
    size_t groups = (size_t)N * K / kInt4Group;
    quantize_int4_kernel<<<(unsigned)CEIL_DIV(groups, 128), 128, 0, s>>>(w, packed, scales, groups);
    LAUNCH_CHECK();
}

// Dequantization for the prefill GEMM, one 16-byte store of 8 bf16 weights per thread (8 e4m3 bytes or 4
// bytes of nibbles in, inside one row and one scale block): a warp writes 512 contiguous bytes. (Per pair of
// weights with a 64-bit division each, it ran at about half the copy bandwidth; 32 or 64 bytes per thread,
// in 2 or 4 strided stores, was slower again for INT4: kb/log.md.)
static __global__ void dequant_fp8_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale, int kblock, int n_kb,
                                          bf16* __restrict__ out, int K, unsigned n_chunks) {
    const unsigned chunks_per_row = K / 8;
    for (unsigned c = blockIdx.x * blockDim.x + threadIdx.x; c < n_chunks; c += gridDim.x * blockDim.x) {
        unsigned row = c / chunks_per_row, k = (c % chunks_per_row) * 8;
        uint2 w = reinterpret_cast<const uint2*>(q)[c];
        float s = scale[(size_t)row * n_kb + k / kblock];  // kblock is a multiple of 8: one scale for the chunk
        const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&w);
        uint4 o;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = e4m3x2_to_float2(pairs[j]);
            op[j] = __floats2bfloat162_rn(f.x * s, f.y * s);
        }
        reinterpret_cast<uint4*>(out)[c] = o;
    }
}

static __global__ void dequant_int4_kernel(const uint8_t* __restrict__ packed, const bf16* __restrict__ scales,
                                           bf16* __restrict__ out, unsigned n_chunks) {
    for (unsigned c = blockIdx.x * blockDim.x + threadIdx.x; c < n_chunks; c += gridDim.x * blockDim.x) {
        uint32_t w = reinterpret_cast<const uint32_t*>(packed)[c];
        float s = __bfloat162float(scales[(size_t)c * 8 / kInt4Group]);  // a chunk's 8 weights share a group
        uint4 o;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t b = (w >> (8 * j)) & 0xFF;  // element 2j in the low nibble, 2j + 1 in the high one
            op[j] = __floats2bfloat162_rn(((int)(b & 0xF) - 8) * s, ((int)(b >> 4) - 8) * s);
        }
        reinterpret_cast<uint4*>(out)[c] = o;
    }
}

// MXFP4 (weights.cuh): the E2M1 codes' values and an E8M0 scale byte's power of two, on the device.
// Built from the code's bits (no table: a dynamically indexed local array lives in local memory): exponent e = bits
// 2..1, mantissa m = bit 0: (1 + m / 2) 2^(e - 1) for e > 0, m / 2 for e = 0; bit 3 the sign.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
    const uint32_t e = (code >> 1) & 3u, m = code & 1u;
    const uint32_t bits = e ? (126u + e) << 23 | m << 22 : (m ? 0x3F000000u : 0u);
    return __uint_as_float(bits | (code & 8u) << 28);
}
__device__ __forceinline__ float e8m0_value(uint32_t s) { return __uint_as_float(s ? s << 23 : 0x00400000u); }  // 2^(s - 127)

static __global__ void dequant_mxfp4_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                                            bf16* __restrict__ out, unsigned n_chunks) {
    for (unsigned c = blockIdx.x * blockDim.x + threadIdx.x; c < n_chunks; c += gridDim.x * blockDim.x) {
        uint32_t w = reinterpret_cast<const uint32_t*>(packed)[c];
        float s = e8m0_value(scales[c / 4]);  // 8 weights of a block of 32
        uint4 o;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t b = (w >> (8 * j)) & 0xFF;  // element 2j in the low nibble, 2j + 1 in the high one
            op[j] = __floats2bfloat162_rn(e2m1_value(b & 0xF) * s, e2m1_value(b >> 4) * s);
        }
        reinterpret_cast<uint4*>(out)[c] = o;
    }
}

inline void dequant_to_bf16(const Linear& L, bf16* out, cudaStream_t s) {
    size_t n = (size_t)L.N * L.K;
    if (n / 8 >= (1ull << 32)) die("dequant_to_bf16: a %d x %d projection is too large", L.N, L.K);
    if (L.fmt == WFormat::FP8 && (L.K % 8 != 0 || L.kblock % 8 != 0))
        die("dequant_to_bf16: fp8 needs K and its scale block to be multiples of 8 (K %d, block %d)", L.K, L.kblock);
    if (L.fmt == WFormat::INT4 && L.K % kInt4Group != 0) die("dequant_to_bf16: int4 needs K %% %d == 0, got %d", kInt4Group, L.K);
    if (L.fmt == WFormat::MXFP4 && L.K % 32 != 0) die("dequant_to_bf16: mxfp4 needs K %% 32 == 0, got %d", L.K);
    unsigned chunks = (unsigned)(n / 8), grid = (unsigned)std::min<size_t>(CEIL_DIV(chunks, 256), 8192);
    if (L.fmt == WFormat::FP8)
        dequant_fp8_kernel<<<grid, 256, 0, s>>>((const uint8_t*)L.w, (const float*)L.scale, L.kblock, L.K / L.kblock, out, L.K, chunks);
    else if (L.fmt == WFormat::INT4)
        dequant_int4_kernel<<<grid, 256, 0, s>>>((const uint8_t*)L.w, (const bf16*)L.scale, out, chunks);
    else if (L.fmt == WFormat::MXFP4)
        dequant_mxfp4_kernel<<<grid, 256, 0, s>>>((const uint8_t*)L.w, (const uint8_t*)L.scale, out, chunks);
    else
        die("dequant_to_bf16: the weights are bf16 already");
    LAUNCH_CHECK();
}

}  // namespace monocu
