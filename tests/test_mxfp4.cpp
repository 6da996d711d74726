#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "host/mxfp4.h"

using namespace monocu;

TEST_CASE("mxfp4 decode: element 2j in the low nibble, 2j + 1 in the high one, times 2^(scale - 127)") {
    // One block of 32: byte j = (code of 2j + 1) << 4 | (code of 2j), codes 0..15 then 15..0.
    uint8_t blocks[16], scales[1] = {129};  // x 4
    int code[32];
    for (int i = 0; i < 32; i++) code[i] = i < 16 ? i : 31 - i;
    for (int j = 0; j < 16; j++) blocks[j] = (uint8_t)(code[2 * j] | (code[2 * j + 1] << 4));
    float out[32];
    mxfp4_decode_row(blocks, scales, 32, out);
    const float values[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < 32; i++) {
        CAPTURE(i);
        CHECK(out[i] == values[code[i]] * 4.0f);
        CHECK(std::signbit(out[i]) == (code[i] >= 8));  // -0 keeps its sign, as transformers' table has it
    }
    // The scale's whole range: 2^-127 (a float subnormal) .. 2^127, and 255 is NaN.
    for (int s : {0, 1, 100, 127, 128, 200, 254}) {
        CAPTURE(s);
        CHECK(e8m0_to_float((uint8_t)s) == std::ldexp(1.0f, s - 127));
    }
    CHECK(std::isnan(e8m0_to_float(255)));
    // Later blocks take their own scales.
    std::vector<uint8_t> b2(32, 0x72), s2 = {127, 120};  // every element 2 (low) / 6 (high)
    CHECK(mxfp4_value(b2.data(), s2.data(), 0) == 1.0f);
    CHECK(mxfp4_value(b2.data(), s2.data(), 31) == 6.0f);
    CHECK(mxfp4_value(b2.data(), s2.data(), 32) == std::ldexp(1.0f, -7));
    CHECK(mxfp4_value(b2.data(), s2.data(), 63) == 6.0f * std::ldexp(1.0f, -7));
}

TEST_CASE("mxfp4 encode: rounding to the nearest E2M1 value, ties to an even code; the scale never clips") {
    CHECK(e2m1_code(1.25f) == 2);   // 1.0 and 1.5 tie: 1.0's code is even
    CHECK(e2m1_code(1.26f) == 3);
    CHECK(e2m1_code(5.0f) == 6);    // 4 and 6 tie: 4
    CHECK(e2m1_code(5.01f) == 7);
    CHECK(e2m1_code(2.5f) == 4);    // 2 and 3: 2
    CHECK(e2m1_code(0.25f) == 0);   // 0 and 0.5: 0
    CHECK(e2m1_code(0.75f) == 2);   // 0.5 and 1: 1
    CHECK(e2m1_code(-3.4f) == 13);  // -3
    CHECK(e2m1_code(-0.1f) == 8);   // -0
    // The scale: the smallest power of two that brings the block's largest magnitude to 6 or less.
    std::vector<float> x(32, 0.f);
    uint8_t blocks[16], scale;
    auto scale_of = [&](float amax) {
        x[5] = -amax;
        mxfp4_encode_row(x.data(), 32, blocks, &scale);
        return (int)scale - 127;
    };
    CHECK(scale_of(6.0f) == 0);
    CHECK(scale_of(6.0001f) == 1);
    CHECK(scale_of(3.0f) == -1);
    CHECK(scale_of(3.0001f) == 0);
    CHECK(scale_of(48.0f) == 3);
    CHECK(scale_of(1e-30f) == -102);
    x[5] = 0.f;
    mxfp4_encode_row(x.data(), 32, blocks, &scale);  // an all-zero block
    CHECK(scale == 0);
    for (uint8_t b : blocks) CHECK(b == 0);
}

TEST_CASE("mxfp4: every representable row survives encode(decode()) bit for bit; random rows within half a step") {
    std::mt19937 g(5);
    for (int rep = 0; rep < 200; rep++) {
        const int K = 32 * (1 + rep % 7);
        std::vector<uint8_t> blocks(K / 2), scales(K / 32);
        for (auto& b : blocks) b = (uint8_t)(g() & 0xFF);
        for (auto& s : scales) s = (uint8_t)(60 + g() % 130);
        for (int b = 0; b < K / 32; b++) {  // each block's largest magnitude a 6, so that its scale is the one chosen
            int at = (int)(g() % 32);
            uint8_t& byte = blocks[b * 16 + at / 2];
            uint8_t c = (g() & 1) ? 15 : 7;
            byte = at % 2 ? (uint8_t)((byte & 0x0F) | (c << 4)) : (uint8_t)((byte & 0xF0) | c);
        }
        std::vector<float> w(K);
        mxfp4_decode_row(blocks.data(), scales.data(), K, w.data());
        std::vector<uint8_t> b2(K / 2), s2(K / 32);
        mxfp4_encode_row(w.data(), K, b2.data(), s2.data());
        CHECK(b2 == blocks);
        CHECK(s2 == scales);
    }
    std::normal_distribution<float> n(0.f, 0.02f);
    size_t over = 0;
    double num = 0, den = 0;
    for (int rep = 0; rep < 50; rep++) {
        const int K = 2880;  // GPT-OSS's hidden size
        std::vector<float> x(K), y(K);
        for (float& v : x) v = n(g);
        std::vector<uint8_t> blocks(K / 2), scales(K / 32);
        mxfp4_encode_row(x.data(), K, blocks.data(), scales.data());
        mxfp4_decode_row(blocks.data(), scales.data(), K, y.data());
        for (int k = 0; k < K; k++) {
            float step = e8m0_to_float(scales[k / 32]);  // the widest gap between E2M1 values is 2 steps (4 .. 6)
            over += std::fabs(y[k] - x[k]) > step;
            num += (double)(y[k] - x[k]) * (y[k] - x[k]);
            den += (double)x[k] * x[k];
        }
    }
    CHECK(over == 0);
    double rel = std::sqrt(num / den);
    MESSAGE("mxfp4 round trip of N(0, 0.02) rows: rel-L2 ", rel);
    CHECK(rel < 0.2);  // 4-bit: about 0.1-0.15 on Gaussian rows
    CHECK(rel > 0.02);
}
