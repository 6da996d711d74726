#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "host/quant.h"

using namespace monocu;

TEST_CASE("e4m3: every code round-trips, and rounding is to nearest even with saturation") {
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7F) == 0x7F) continue;  // NaN
        float f = e4m3_to_float(static_cast<uint8_t>(b));
        uint8_t back = float_to_e4m3(f);
        if (b == 0x80) CHECK(back == 0x80);  // -0 keeps its sign
        else CHECK(back == b);
    }
    CHECK(e4m3_to_float(0x7E) == 448.f);
    CHECK(e4m3_to_float(0x01) == std::ldexp(1.f, -9));
    CHECK(float_to_e4m3(1000.f) == 0x7E);
    CHECK(float_to_e4m3(-1e30f) == 0xFE);
    CHECK(float_to_e4m3(1.0625f) == 0x38);         // halfway between 1 and 1.125: even mantissa (1.0)
    CHECK(float_to_e4m3(1.1875f) == 0x3A);         // halfway between 1.125 and 1.25: even (1.25)
    CHECK(float_to_e4m3(std::ldexp(1.f, -10)) == 0x00);       // half the smallest subnormal: to even (0)
    CHECK(float_to_e4m3(std::ldexp(3.f, -10)) == 0x02);       // 1.5 subnormal steps: to even (2)
    CHECK(float_to_e4m3(std::nanf("")) == 0x7F);
    // Against the nearest code by brute force on random values.
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 30.f);
    for (int i = 0; i < 20000; i++) {
        float x = nd(rng) * (i % 3 == 0 ? 1e-3f : 1.f);
        float got = e4m3_to_float(float_to_e4m3(x));
        float best = 0.f;
        for (int b = 0; b < 256; b++) {
            if ((b & 0x7F) == 0x7F) continue;
            float c = e4m3_to_float(static_cast<uint8_t>(b));
            if (std::fabs(c - std::fmin(std::fmax(x, -448.f), 448.f)) < std::fabs(best - std::fmin(std::fmax(x, -448.f), 448.f))) best = c;
        }
        CHECK(std::fabs(got - x) <= std::fabs(best - x) + 1e-12f);
    }
}

TEST_CASE("fp8 per-row and int4 group quantization: error bounds and layout") {
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0.f, 0.05f);
    int K = 512;
    std::vector<float> w(K);
    for (auto& x : w) x = round_to_bf16(nd(rng));
    w[17] = 0.9f;  // an outlier sets the row's scale
    std::vector<uint8_t> q(K);
    std::vector<float> scales8(K / kFp8Block);
    quantize_fp8_row(w.data(), K, q.data(), scales8.data());
    CHECK(scales8[0] == doctest::Approx(0.9f / 448.f));  // the outlier's block
    CHECK(scales8[1] < 0.5f / 448.f);                      // the other blocks keep their own, smaller range
    double num = 0, den = 0;
    for (int k = 0; k < K; k++) {
        double d = e4m3_to_float(q[k]) * scales8[k / kFp8Block] - w[k];
        num += d * d, den += (double)w[k] * w[k];
    }
    CHECK(std::sqrt(num / den) < 0.04);  // 3 mantissa bits: ~2-3% relative

    std::vector<uint8_t> packed(K / 2);
    std::vector<uint16_t> scales(K / kInt4Group);
    quantize_int4_row(w.data(), K, packed.data(), scales.data());
    // The chosen scale is the clipping candidate with the least squared error over its group.
    auto group_err = [&](float s) {
        double e = 0;
        for (int k = 0; k < kInt4Group; k++) e += std::pow(int4_q(w[k], s) * s - w[k], 2);
        return e;
    };
    float chosen = bf16_bits_to_float(scales[0]);
    for (int c = 0; c < kInt4ClipCount; c++) CHECK(group_err(chosen) <= group_err(round_to_bf16(0.9f / 7.f * int4_clip(c))) + 1e-12);
    bool is_candidate = false;
    for (int c = 0; c < kInt4ClipCount; c++) is_candidate |= chosen == round_to_bf16(0.9f / 7.f * int4_clip(c));
    CHECK(is_candidate);
    num = den = 0;
    for (int k = kInt4Group; k < K; k++) {  // groups without the outlier
        double d = int4_dequant(packed.data(), scales.data(), k) - w[k];
        num += d * d, den += (double)w[k] * w[k];
    }
    CHECK(std::sqrt(num / den) < 0.2);
    std::vector<float> zeros(kInt4Group, 0.f);
    quantize_int4_row(zeros.data(), kInt4Group, packed.data(), scales.data());
    CHECK(packed[0] == 0x88);  // q = 0 stored as 8 in both nibbles
    CHECK(scales[0] == 0);
}
