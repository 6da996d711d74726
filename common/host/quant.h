// host/quant.h — weight quantization on the host: FP8 E4M3 per output channel, INT4 symmetric groups of 128.
//
// Usage:
//   uint8_t b = float_to_e4m3(x);  float y = e4m3_to_float(b);        // OCP E4M3 ("e4m3fn"): max 448, no inf
//   quantize_fp8_row(w, K, q, scales);        // per 128 along K (fp8_kblock): s = max|w| / 448, q = e4m3(w / s)
//   quantize_int4_row(w, K, packed, scales);  // per 128: s = bf16(c max|w| / 7), q = clamp(rint(w / s), -8, 7),
//                                             // c in kInt4Clip chosen for the least squared error
//
// These are the reference definitions: the GPU quantizers (quant.cuh) do the same float operations in the
// same order (IEEE division, round-to-nearest-even), so tools/quantize on a CPU and quantize-on-load on
// the GPU produce the same bits. INT4 layout: row-major [N][K / 2] bytes, element 2j in the low nibble of
// byte j, stored as q + 8 (0..15); scales bf16 [N][K / 128]. Symmetric (no zero point): see kb/decisions.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "host/bf16.h"

namespace monocu {

constexpr int kInt4Group = 128;
constexpr float kE4M3Max = 448.0f;

// Round to nearest even, saturating to +-448; NaN stays NaN (0x7F).
inline uint8_t float_to_e4m3(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint8_t sign = (u >> 24) & 0x80;
    if (std::isnan(f)) return 0x7F;
    float a = std::fabs(f);
    if (a >= kE4M3Max) return sign | 0x7E;
    std::memcpy(&u, &a, 4);
    int exp = static_cast<int>(u >> 23) - 127;
    if (exp < -6) {  // E4M3 subnormals are multiples of 2^-9
        int q = static_cast<int>(std::nearbyint(a * 512.0f));  // exact scaling, then round half to even
        return sign | static_cast<uint8_t>(q);                 // q == 8 is the smallest normal, 0x08
    }
    uint32_t man = u & 0x7FFFFF, r = man >> 20, rem = man & 0xFFFFF;
    if (rem > 0x80000 || (rem == 0x80000 && (r & 1))) r++;
    if (r == 8) r = 0, exp++;
    if (exp > 8 || (exp == 8 && r > 6)) return sign | 0x7E;
    return sign | static_cast<uint8_t>(((exp + 7) << 3) | r);
}

inline float e4m3_to_float(uint8_t b) {
    int e = (b >> 3) & 0xF, m = b & 7;
    float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : (e == 15 && m == 7) ? NAN : std::ldexp(1.0f + m / 8.0f, e - 7);
    return (b & 0x80) ? -v : v;
}

// FP8 weights get one scale per 128 consecutive inputs of a row (K not divisible by 128: one per row). A
// finer scale than per channel keeps fewer small weights in e4m3's subnormal range (measured on the shipped
// model: kb/decisions.md).
constexpr int kFp8Block = 128;
inline int fp8_kblock(int K) { return K % kFp8Block == 0 ? kFp8Block : K; }

// The scale of n values: s = max|w| / 448 (1 if all zero).
inline float fp8_block_scale(const float* w, int n) {
    float amax = 0.f;
    for (int k = 0; k < n; k++) amax = std::fmax(amax, std::fabs(w[k]));
    float s = amax / kE4M3Max;
    return s == 0.f ? 1.f : s;
}

// n values sharing one scale: q = e4m3(w / s).
inline void quantize_fp8_block(const float* w, int n, uint8_t* q, float* scale) {
    float s = fp8_block_scale(w, n);
    for (int k = 0; k < n; k++) q[k] = float_to_e4m3(w[k] / s);
    *scale = s;
}

// One row: K / fp8_kblock(K) scales.
inline void quantize_fp8_row(const float* w, int K, uint8_t* q, float* scales) {
    int kb = fp8_kblock(K);
    for (int b = 0; b < K / kb; b++) quantize_fp8_block(w + b * kb, kb, q + b * kb, scales + b);
}

// Clipping candidates for an INT4 group's scale (fractions of max|w| / 7). Round-to-nearest with the
// full range wastes levels on the rare largest weights; trying a few tighter ranges and keeping the one with
// the least squared error (the "MSE clipping" of e.g. llama.cpp's and AWQ's searches) costs nothing at run
// time. The search is written so that the GPU repeats it bit for bit: same candidate order, float scale
// arithmetic, and a sequential double sum of exactly representable squares.
constexpr int kInt4ClipCount = 6;
constexpr float int4_clip(int c) { return c == 0 ? 1.0f : c == 1 ? 0.95f : c == 2 ? 0.9f : c == 3 ? 0.85f : c == 4 ? 0.8f : 0.75f; }

inline float int4_q(float w, float s) { return std::fmin(7.f, std::fmax(-8.f, std::rint(w / s))); }

// The bf16 scale for one group of 128 weights.
inline uint16_t int4_group_scale(const float* x) {
    float amax = 0.f;
    for (int k = 0; k < kInt4Group; k++) amax = std::fmax(amax, std::fabs(x[k]));
    float base = amax / 7.0f;
    uint16_t best = 0;
    double best_err = INFINITY;
    for (int c = 0; c < kInt4ClipCount; c++) {
        volatile float scaled = base * int4_clip(c);  // volatile: no contraction or reassociation
        uint16_t sb = float_to_bf16_bits(scaled);
        float s = bf16_bits_to_float(sb);
        if (s == 0.f) return 0;
        double err = 0;
        for (int k = 0; k < kInt4Group; k++) {
            volatile float qs = int4_q(x[k], s) * s;      // exact: a small integer times a bf16
            volatile double d = (double)qs - (double)x[k];  // exact in double
            volatile double sq = d * d;
            err = err + sq;
        }
        if (err < best_err) best_err = err, best = sb;
    }
    return best;
}

// K must be a multiple of 128. packed: K / 2 bytes; scales: K / 128 bf16 bit patterns.
inline void quantize_int4_row(const float* w, int K, uint8_t* packed, uint16_t* scales) {
    for (int g = 0; g < K / kInt4Group; g++) {
        const float* x = w + g * kInt4Group;
        uint16_t sb = int4_group_scale(x);
        float s = bf16_bits_to_float(sb);
        scales[g] = sb;
        for (int k = 0; k < kInt4Group; k += 2) {
            int q0 = 0, q1 = 0;
            if (s != 0.f) q0 = static_cast<int>(int4_q(x[k], s)), q1 = static_cast<int>(int4_q(x[k + 1], s));
            packed[(g * kInt4Group + k) / 2] = static_cast<uint8_t>((q0 + 8) | ((q1 + 8) << 4));
        }
    }
}

inline float int4_dequant(const uint8_t* packed, const uint16_t* scales, int k) {
    int nib = (packed[k / 2] >> ((k & 1) * 4)) & 0xF;
    return (nib - 8) * bf16_bits_to_float(scales[k / kInt4Group]);
}

}  // namespace monocu
