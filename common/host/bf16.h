// host/bf16.h — bfloat16 and float16 bit conversions on the host (loading F32/F16 weights, test references).
//
// Usage:
//   uint16_t b = float_to_bf16_bits(x);   // round to nearest even, NaN stays NaN
//   float x = bf16_bits_to_float(b);
//   float h = f16_bits_to_float(u16);
// bfloat16 is the top 16 bits of an IEEE float32: same exponent range, 8 bits of mantissa.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace monocu {

inline float bf16_bits_to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint16_t float_to_bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    u += 0x7FFFu + ((u >> 16) & 1);  // round to nearest, ties to even
    return static_cast<uint16_t>(u >> 16);
}

inline float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

inline float f16_bits_to_float(uint16_t h) {
    uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    float v;
    if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
    return sign ? -v : v;
}

}  // namespace monocu
