// GPTQ (gptq.h): the inverse-Hessian factor, equality with round-to-nearest when inputs are uncorrelated,
// a lower output error than round-to-nearest when they are correlated, and its errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "host/errors.h"
#include "host/gptq.h"
#include "host/npy.h"
#include "test_util.h"

using namespace monocu;

namespace {

// T rows of K inputs that share a few directions (as a layer's activations do): x = A z + small noise,
// some columns several times larger than the rest; bf16-valued, as the engine dumps them. The same seed
// gives the same directions A; draws gives other tokens.
std::vector<float> correlated_inputs(int T, int K, uint32_t seed, uint32_t draws = 0) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    const int R = 6;
    std::vector<float> a((size_t)K * R), x((size_t)T * K);
    for (float& v : a) v = nd(rng);
    rng.seed(seed * 7919u + draws + 1);
    for (int t = 0; t < T; t++) {
        float z[R];
        for (float& v : z) v = nd(rng);
        for (int k = 0; k < K; k++) {
            float s = 0.1f * nd(rng);
            for (int r = 0; r < R; r++) s += a[(size_t)k * R + r] * z[r];
            x[(size_t)t * K + k] = round_to_bf16(s * (k % 7 == 0 ? 4.f : 1.f));
        }
    }
    return x;
}

std::vector<float> random_rows(int N, int K, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.f, 0.05f);
    std::vector<float> w((size_t)N * K);
    for (float& v : w) v = round_to_bf16(nd(rng));
    return w;
}

// sum over tokens of |(W - Q) x|^2
double output_error(const std::vector<float>& w, const std::vector<float>& q, const std::vector<float>& x, int N, int K, int T) {
    double err = 0;
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++) {
            double d = 0;
            for (int k = 0; k < K; k++) d += ((double)w[(size_t)n * K + k] - q[(size_t)n * K + k]) * x[(size_t)t * K + k];
            err += d * d;
        }
    return err;
}

// Dequantized rows, by each format's own reader (quant.h).
std::vector<float> fp8_values(const std::vector<uint8_t>& q, const std::vector<float>& s, int N, int K) {
    std::vector<float> v((size_t)N * K);
    int kb = fp8_kblock(K);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) v[(size_t)n * K + k] = e4m3_to_float(q[(size_t)n * K + k]) * s[(size_t)n * (K / kb) + k / kb];
    return v;
}
std::vector<float> int4_values(const std::vector<uint8_t>& p, const std::vector<uint16_t>& s, int N, int K) {
    std::vector<float> v((size_t)N * K);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) v[(size_t)n * K + k] = int4_dequant(&p[(size_t)n * K / 2], &s[(size_t)n * K / kInt4Group], k);
    return v;
}

}  // namespace

TEST_CASE("gptq_factor: U^T U is the inverse of the damped Gram matrix") {
    std::mt19937 rng(3);
    const int K = 48, T = 200;
    auto x = correlated_inputs(T, K, 100);
    InputGram g(K);
    g.add(x.data(), T);
    CHECK(g.tokens == T);
    GptqFactor f = gptq_factor(g, 0.01);
    double mean = 0;
    for (int i = 0; i < K; i++) mean += g.at(i, i) / K;
    double worst = 0;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            double s = 0;  // (U^T U (H + d I))_ij
            for (int m = 0; m < K; m++) {
                double utu = 0;
                for (int r = 0; r <= std::min(i, m); r++) utu += f.at(r, i) * f.at(r, m);
                s += utu * (g.at(m, j) + (m == j ? f.damp_used * mean : 0.0));
            }
            worst = std::max(worst, std::fabs(s - (i == j ? 1.0 : 0.0)));
        }
    CHECK(worst < 1e-8);
    for (int i = 0; i < K; i++)
        for (int j = 0; j < i; j++) CHECK(f.at(i, j) == 0.0);  // upper triangular
}

TEST_CASE("GPTQ with uncorrelated inputs is round-to-nearest, bit for bit") {
    std::mt19937 rng(4);
    const int N = 12, K = 384;
    auto w = random_rows(N, K, rng);
    InputGram g(K);
    for (int k = 0; k < K; k++) g.h[(size_t)k * K + k] = 3.0;
    g.tokens = 1;
    GptqFactor f = gptq_factor(g, 0.01);
    for (int n = 0; n < N; n++) {
        const float* row = &w[(size_t)n * K];
        std::vector<uint8_t> q1(K), q2(K), p1(K / 2), p2(K / 2);
        std::vector<float> s1(K / 128), s2(K / 128);
        std::vector<uint16_t> g1(K / 128), g2(K / 128);
        quantize_fp8_row(row, K, q1.data(), s1.data());
        gptq_fp8_row(row, K, f, q2.data(), s2.data());
        CHECK(q1 == q2);
        CHECK(s1 == s2);
        quantize_int4_row(row, K, p1.data(), g1.data());
        gptq_int4_row(row, K, f, p2.data(), g2.data());
        CHECK(p1 == p2);
        CHECK(g1 == g2);
    }
}

TEST_CASE("GPTQ lowers the output error on correlated inputs (FP8 and INT4, quant.h's formats)") {
    std::mt19937 rng(5);
    const int N = 32, K = 256, T = 2000;
    auto x = correlated_inputs(T, K, 100);
    auto w = random_rows(N, K, rng);
    InputGram g(K);
    g.add(x.data(), T);
    GptqFactor f = gptq_factor(g, 0.01);
    // Measured on other tokens from the same distribution too, so that this is not just fitting the calibration set.
    auto held = correlated_inputs(T, K, 100, 1);
    std::vector<uint8_t> q_rtn((size_t)N * K), q_gptq((size_t)N * K), p_rtn((size_t)N * K / 2), p_gptq((size_t)N * K / 2);
    std::vector<float> s_rtn(N * 2), s_gptq(N * 2);
    std::vector<uint16_t> g_rtn(N * 2), g_gptq(N * 2);
    for (int n = 0; n < N; n++) {
        const float* row = &w[(size_t)n * K];
        quantize_fp8_row(row, K, &q_rtn[(size_t)n * K], &s_rtn[n * 2]);
        gptq_fp8_row(row, K, f, &q_gptq[(size_t)n * K], &s_gptq[n * 2]);
        quantize_int4_row(row, K, &p_rtn[(size_t)n * K / 2], &g_rtn[n * 2]);
        gptq_int4_row(row, K, f, &p_gptq[(size_t)n * K / 2], &g_gptq[n * 2]);
    }
    for (const auto* xs : {&x, &held}) {
        double fp8_rtn = output_error(w, fp8_values(q_rtn, s_rtn, N, K), *xs, N, K, T);
        double fp8_gptq = output_error(w, fp8_values(q_gptq, s_gptq, N, K), *xs, N, K, T);
        double int4_rtn = output_error(w, int4_values(p_rtn, g_rtn, N, K), *xs, N, K, T);
        double int4_gptq = output_error(w, int4_values(p_gptq, g_gptq, N, K), *xs, N, K, T);
        CAPTURE(fp8_rtn);
        CAPTURE(fp8_gptq);
        CAPTURE(int4_rtn);
        CAPTURE(int4_gptq);
        CHECK(fp8_gptq < 0.7 * fp8_rtn);
        CHECK(int4_gptq < 0.7 * int4_rtn);
    }
}

TEST_CASE("GPTQ: a column no input reaches is zeroed; unusable calibration is an error") {
    std::mt19937 rng(6);
    const int K = 128, T = 64;
    auto x = correlated_inputs(T, K, 100);
    for (int t = 0; t < T; t++) x[(size_t)t * K + 5] = 0.f;
    InputGram g(K);
    g.add(x.data(), T);
    GptqFactor f = gptq_factor(g, 0.01);
    CHECK(f.dead[5] == 1);
    auto w = random_rows(1, K, rng);
    w[5] = 0.3f;
    std::vector<uint8_t> q(K), p(K / 2);
    std::vector<float> s(1);
    std::vector<uint16_t> gs(1);
    gptq_fp8_row(w.data(), K, f, q.data(), s.data());
    CHECK(e4m3_to_float(q[5]) == 0.f);
    gptq_int4_row(w.data(), K, f, p.data(), gs.data());
    CHECK(int4_dequant(p.data(), gs.data(), 5) == 0.f);

    CHECK_THROWS_WITH_AS(gptq_factor(InputGram(16), 0.01), "gptq: no calibration tokens for a 16-wide input", UserError);
    InputGram zeros(16);
    std::vector<float> zx(16 * 4, 0.f);
    zeros.add(zx.data(), 4);
    CHECK_THROWS_WITH_AS(gptq_factor(zeros, 0.01), "gptq: every calibration input is zero for a 16-wide input", UserError);
    std::vector<float> row(2 * K, 0.01f);
    std::vector<uint8_t> q2(2 * K);
    std::vector<float> s2(2);
    CHECK_THROWS_WITH_AS(gptq_fp8_row(row.data(), 2 * K, f, q2.data(), s2.data()), "gptq: a factor for 128 inputs used on a row of 256", UserError);
}

TEST_CASE("tools/quantize --calib: GPTQ from the engine's dumped inputs; bad calibration folders are one-line errors") {
    const char* quantize = MONOCU_HOST_BUILD_DIR "/tools/quantize";
    const std::string model = "tests/data/models/tiny-gqa4";  // hidden 96, 4 heads x 64, MLP 192, 2 layers
    if (access(quantize, X_OK) != 0) {
        MESSAGE("skipped: " << quantize << " not built (run make first)");
        return;
    }
    monocu_test::TempDir dir;
    const std::string calib = dir / "calib";
    REQUIRE(mkdir(calib.c_str(), 0755) == 0);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto dump = [&](const std::string& name, int T, int K) {
        std::vector<float> x((size_t)T * K);
        for (float& v : x) v = round_to_bf16(nd(rng));
        npy_write_f32(calib + "/" + name + ".npy", x.data(), {T, K});
    };
    for (int l = 0; l < 2; l++) {
        dump(strf("layer_%02d_attn_in", l), 40, 96);
        dump(strf("layer_%02d_o_in", l), 40, 256);
        dump(strf("layer_%02d_mlp_in", l), 40, 96);
        dump(strf("layer_%02d_down_in", l), 40, 192);
    }
    std::string out;
    REQUIRE(monocu_test::run_command(std::string(quantize) + " " + model + " " + (dir / "q") + " --dtype fp8 --calib " + calib + "," + calib, &out) == 0);
    CHECK(out.find("14 projections to fp8 by GPTQ over 80 calibration tokens") != std::string::npos);
    CHECK(monocu_test::read_file(dir / "q/config.json").find("\"method\": \"gptq\"") != std::string::npos);

    auto error_of = [&](const std::string& args, int code) {
        CHECK(monocu_test::run_command(std::string(quantize) + " " + model + " " + (dir / "bad") + " --dtype fp8 " + args, &out) == code);
        CHECK(std::count(out.begin(), out.end(), '\n') <= 2);  // one line (usage errors add "see --help")
        return out;
    };
    CHECK(error_of("--calib " + calib + " --damp 0", 2).find("--damp: '0' is not a number in (0, 1]") != std::string::npos);
    CHECK(error_of("--calib " + calib + ",," + calib, 2).find("--calib: empty folder name") != std::string::npos);
    // An FP8 output projection (int4's default) is GPTQ'd from the final norm's dump, which must then exist.
    CHECK(error_of("--calib " + calib + " --lm-head fp8", 1).find(calib + "/final_norm.npy: cannot open") != std::string::npos);
    dump("final_norm", 40, 96);
    REQUIRE(monocu_test::run_command(std::string(quantize) + " " + model + " " + (dir / "q4") + " --dtype fp8 --lm-head fp8 --calib " + calib, &out) == 0);
    CHECK(out.find("(lm_head fp8 by GPTQ)") != std::string::npos);
    REQUIRE(monocu_test::run_command(std::string(quantize) + " " + model + " " + (dir / "q5") + " --dtype fp8 --calib " + calib, &out) == 0);
    CHECK(out.find("(lm_head bf16)") != std::string::npos);
    dump("layer_01_down_in", 40, 100);
    CHECK(error_of("--calib " + calib, 1).find(calib + "/layer_01_down_in.npy: expected [tokens][192]") != std::string::npos);
    std::remove((calib + "/layer_00_o_in.npy").c_str());
    CHECK(error_of("--calib " + calib, 1).find(calib + "/layer_00_o_in.npy: cannot open") != std::string::npos);
}
