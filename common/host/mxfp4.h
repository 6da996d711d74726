// host/mxfp4.h — MXFP4 (OCP Microscaling FP4) as GPT-OSS checkpoints store their experts, on the host: the
// reference the GPU kernels and tools/quantize are checked against.
//
// Usage:
//   float w = mxfp4_value(blocks_row, scales_row, k);        // element k of a row
//   mxfp4_decode_row(blocks_row, scales_row, K, out);        // the whole row, K floats
//   mxfp4_encode_row(x, K, blocks_row, scales_row);          // and back (tools/quantize --dtype mxfp4)
//
// Layout (GPT-OSS's `*_blocks` / `*_scales` tensors): a row of K weights is K / 32 blocks of 32; block b is 16 bytes
// (`blocks` [.., K / 32, 16] uint8) holding element 2j of the block in the low nibble of byte j and element 2j + 1 in
// the high nibble, each an E2M1 code: sign bit, then 0, 0.5, 1, 1.5, 2, 3, 4, 6. Each block has one E8M0 scale byte
// s (`scales` [.., K / 32] uint8), the power of two 2^(s - 127). A weight is code value x 2^(s - 127): exact in
// float (and in bf16, for every scale a real checkpoint holds), which is what transformers' dequantization gives.
// 4.25 bits per weight.
#pragma once

#include <cmath>
#include <cstdint>

namespace monocu {

constexpr int kMxfp4Block = 32;  // weights per scale

// The 16 E2M1 codes' values (bit 3 is the sign; -0 decodes as -0).
constexpr float kE2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(s - 127), as a float: s = 0 is 2^-127 (a float subnormal); s = 255 is E8M0's NaN.
inline float e8m0_to_float(uint8_t s) { return s == 255 ? NAN : std::ldexp(1.0f, (int)s - 127); }

inline float mxfp4_value(const uint8_t* blocks, const uint8_t* scales, int k) {
    uint8_t byte = blocks[k / 2];
    return kE2M1[k % 2 ? byte >> 4 : byte & 0x0F] * e8m0_to_float(scales[k / kMxfp4Block]);
}

inline void mxfp4_decode_row(const uint8_t* blocks, const uint8_t* scales, int K, float* out) {
    for (int k = 0; k < K; k++) out[k] = mxfp4_value(blocks, scales, k);
}

// The E2M1 code nearest to v (|v| <= 6 after scaling), ties to the code with an even mantissa bit, as IEEE rounding
// would; the sign is kept for zero too.
inline uint8_t e2m1_code(float v) {
    uint8_t sign = std::signbit(v) ? 8 : 0;
    float a = std::fabs(v);
    uint8_t best = 0;
    for (uint8_t c = 1; c < 8; c++) {
        float d = std::fabs(a - kE2M1[c]), db = std::fabs(a - kE2M1[best]);
        if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    return sign | best;
}

// One row of K (a multiple of 32) to MXFP4. Each block's scale is the smallest power of two 2^e with
// max|x| / 2^e <= 6 (no weight clips), then each weight rounds to its nearest E2M1 value; an all-zero block gets
// 2^-127. Exponents past E8M0's range clamp (such weights are not in any real model).
inline void mxfp4_encode_row(const float* x, int K, uint8_t* blocks, uint8_t* scales) {
    for (int b = 0; b < K / kMxfp4Block; b++) {
        const float* v = x + b * kMxfp4Block;
        float amax = 0.f;
        for (int i = 0; i < kMxfp4Block; i++) amax = std::fmax(amax, std::fabs(v[i]));
        int e = -127;
        if (amax > 0.f) {
            int ex;
            float m = std::frexp(amax / 6.0f, &ex);  // amax / 6 = m 2^ex, m in [0.5, 1)
            e = m == 0.5f ? ex - 1 : ex;             // the smallest e with amax / 6 <= 2^e
            if (e < -127) e = -127;
            if (e > 127) e = 127;
        }
        scales[b] = (uint8_t)(e + 127);
        float inv = std::ldexp(1.0f, -e);
        for (int i = 0; i < kMxfp4Block; i += 2) {
            uint8_t lo = e2m1_code(v[i] * inv), hi = e2m1_code(v[i + 1] * inv);
            blocks[b * 16 + i / 2] = (uint8_t)(lo | (hi << 4));
        }
    }
}

}  // namespace monocu
