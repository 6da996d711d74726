// host/gptq.h — calibrated weight quantization (GPTQ) on the host, into quant.h's FP8 and INT4 formats.
//
// Usage:
//   InputGram g(K);  g.add(x, T);                 // sum over calibration tokens of x x^T (x: a projection's input rows)
//   GptqFactor f = gptq_factor(g, 0.01);           // once per input: U with U^T U = (H + damp mean(diag H) I)^-1
//   gptq_fp8_row(w, K, f, q, scales);              // one row, stored exactly as quantize_fp8_row stores it
//   gptq_int4_row(w, K, f, packed, scales);        // one row, as quantize_int4_row
//
// The method (Frantar et al., 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers", after Optimal Brain Quantization): rounding each weight to the nearest code (quant.h) keeps
// every weight close, but what matters is the layer's output y = W x on the inputs it actually sees. GPTQ
// quantizes a row's columns in order and, after each, moves the remaining columns to absorb that column's
// rounding error as well as correlated inputs allow: with H = sum x x^T and U the upper Cholesky factor
// of H^-1, column i's error e_i = (w_i - q_i) / U_ii is spread as w_j -= e_i U_ij for j > i. That minimises
// (w - q) H (w - q)^T greedily, the squared output error over the calibration tokens. Rows are
// independent (the same U serves every row of a projection). A group's scale (per 128 columns) is taken
// from the group's weights as they stand when the loop reaches it, with quant.h's rule, so the stored
// format, and the engines' readers, are unchanged. Damping (a fraction of the mean diagonal added to H)
// keeps the factorisation stable when inputs are nearly collinear; a column no token ever excites (zero
// diagonal) has its weights set to zero, as they cannot change any output.
//
// Cost: the factor is O(K^3) per distinct input (3 dense passes in double), each row O(K^2): minutes for
// K ~ 4k on one core, seconds for the shipped model. Work is in double; codes and scales are computed from
// floats, exactly as quant.h computes them.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "host/errors.h"
#include "host/quant.h"

namespace monocu {

// H = sum over tokens of x x^T for one projection input (K x K, double, upper triangle filled by add()).
struct InputGram {
    int K = 0;
    int64_t tokens = 0;
    std::vector<double> h;  // row-major K x K
    explicit InputGram(int k = 0) : K(k), h((size_t)k * k, 0.0) {}

    // T rows of K floats.
    void add(const float* x, int64_t T) {
        std::vector<double> row(K);
        for (int64_t t = 0; t < T; t++) {
            for (int k = 0; k < K; k++) row[k] = x[(size_t)t * K + k];
            for (int i = 0; i < K; i++) {
                double xi = row[i];
                if (xi == 0.0) continue;
                double* hi = &h[(size_t)i * K];
                for (int j = i; j < K; j++) hi[j] += xi * row[j];
            }
        }
        tokens += T;
    }
    double at(int i, int j) const { return i <= j ? h[(size_t)i * K + j] : h[(size_t)j * K + i]; }
};

struct GptqFactor {
    int K = 0;
    std::vector<double> u;        // row-major K x K upper triangular: U^T U = (H + damp I)^-1
    std::vector<uint8_t> dead;    // columns with zero diagonal (no calibration input reaches them)
    double damp_used = 0;         // the damping fraction that made H positive definite
    double at(int i, int j) const { return u[(size_t)i * K + j]; }
};

namespace gptq_detail {

// In place: A (row-major n x n, symmetric, lower triangle read) = L L^T, L left in the lower triangle.
// False if A is not positive definite.
inline bool cholesky_lower(std::vector<double>& a, int n) {
    for (int j = 0; j < n; j++) {
        double* aj = &a[(size_t)j * n];
        double d = aj[j];
        for (int k = 0; k < j; k++) d -= aj[k] * aj[k];
        if (!(d > 0.0)) return false;
        d = std::sqrt(d);
        aj[j] = d;
        for (int i = j + 1; i < n; i++) {
            double* ai = &a[(size_t)i * n];
            double s = ai[j];
            for (int k = 0; k < j; k++) s -= ai[k] * aj[k];
            ai[j] = s / d;
        }
    }
    return true;
}

// In place: the lower-triangular L becomes L^-1 (lower triangle; the upper is not touched).
inline void invert_lower(std::vector<double>& l, int n) {
    for (int j = 0; j < n; j++) {
        l[(size_t)j * n + j] = 1.0 / l[(size_t)j * n + j];
        for (int i = j + 1; i < n; i++) {
            double s = 0;
            for (int k = j; k < i; k++) s += l[(size_t)i * n + k] * l[(size_t)k * n + j];
            l[(size_t)i * n + j] = -s / l[(size_t)i * n + i];
        }
    }
}

}  // namespace gptq_detail

// U for gptq_*_row: H + damp * mean(diag H) * I = L L^T; H^-1 = L^-T L^-1; its Cholesky factor L2 L2^T; U = L2^T.
// The damping grows tenfold (up to 1) while the matrix is not positive definite.
inline GptqFactor gptq_factor(const InputGram& g, double damp) {
    using namespace gptq_detail;
    const int K = g.K;
    if (g.tokens == 0) die("gptq: no calibration tokens for a %d-wide input", K);
    GptqFactor f;
    f.K = K;
    f.dead.assign(K, 0);
    double mean_diag = 0;
    for (int i = 0; i < K; i++) {
        if (g.at(i, i) == 0.0) f.dead[i] = 1;
        mean_diag += g.at(i, i);
    }
    mean_diag = mean_diag / K;
    if (!(mean_diag > 0.0)) die("gptq: every calibration input is zero for a %d-wide input", K);
    for (double d = damp; d <= 1.0; d *= 10) {
        std::vector<double> a((size_t)K * K);
        for (int i = 0; i < K; i++)
            for (int j = 0; j <= i; j++) a[(size_t)i * K + j] = f.dead[i] || f.dead[j] ? (i == j ? 1.0 : 0.0) : g.at(j, i);
        for (int i = 0; i < K; i++) a[(size_t)i * K + i] += d * mean_diag;
        if (!cholesky_lower(a, K)) continue;
        invert_lower(a, K);  // a's lower triangle: L^-1
        std::vector<double> hinv((size_t)K * K);  // (L^-1)^T L^-1, lower triangle
        for (int i = 0; i < K; i++)
            for (int j = 0; j <= i; j++) {
                double s = 0;
                for (int k = i; k < K; k++) s += a[(size_t)k * K + i] * a[(size_t)k * K + j];
                hinv[(size_t)i * K + j] = s;
            }
        if (!cholesky_lower(hinv, K)) continue;
        f.u.assign((size_t)K * K, 0.0);
        for (int i = 0; i < K; i++)
            for (int j = i; j < K; j++) f.u[(size_t)i * K + j] = hinv[(size_t)j * K + i];
        f.damp_used = d;
        return f;
    }
    die("gptq: the calibration inputs of a %d-wide projection stay singular with damping up to 1", K);
}

namespace gptq_detail {

// The row loop shared by both formats. group(k0, cur) sets the scale of columns [k0, k0 + group_size) from
// cur, their values as the loop reaches them; quantize(k, w_k) stores column k's code and returns its
// dequantized value.
template <class Group, class Quantize>
inline void gptq_row(const float* w_in, int K, int group_size, const GptqFactor& f, Group group, Quantize quantize) {
    if (f.K != K) die("gptq: a factor for %d inputs used on a row of %d", f.K, K);
    std::vector<double> w(w_in, w_in + K);
    for (int k = 0; k < K; k++)
        if (f.dead[k]) w[k] = 0.0;
    std::vector<float> cur(group_size);
    for (int k0 = 0; k0 < K; k0 += group_size) {
        for (int k = 0; k < group_size; k++) cur[k] = static_cast<float>(w[k0 + k]);
        group(k0, cur.data());
        for (int i = k0; i < k0 + group_size; i++) {
            double q = quantize(i, static_cast<float>(w[i]));
            double e = (w[i] - q) / f.at(i, i);
            const double* ui = &f.u[(size_t)i * K];
            for (int j = i + 1; j < K; j++) w[j] -= e * ui[j];
        }
    }
}

}  // namespace gptq_detail

// One row into FP8 E4M3 with one scale per fp8_kblock(K) columns (as quantize_fp8_row stores it).
inline void gptq_fp8_row(const float* w, int K, const GptqFactor& f, uint8_t* q, float* scales) {
    const int kb = fp8_kblock(K);
    float s = 1.f;
    auto group = [&](int k0, const float* cur) { s = scales[k0 / kb] = fp8_block_scale(cur, kb); };
    auto quantize = [&](int k, float v) {
        q[k] = float_to_e4m3(v / s);
        return (double)e4m3_to_float(q[k]) * s;
    };
    gptq_detail::gptq_row(w, K, kb, f, group, quantize);
}

// One row into symmetric INT4 groups of 128 with bf16 scales (as quantize_int4_row stores it).
inline void gptq_int4_row(const float* w, int K, const GptqFactor& f, uint8_t* packed, uint16_t* scales) {
    if (K % kInt4Group != 0) die("gptq: int4 needs K %% %d == 0, got %d", kInt4Group, K);
    float s = 0.f;
    auto group = [&](int k0, const float* cur) {
        scales[k0 / kInt4Group] = int4_group_scale(cur);  // quant.h's clipping search on the group as it stands
        s = bf16_bits_to_float(scales[k0 / kInt4Group]);
    };
    auto quantize = [&](int k, float v) {
        int code = s != 0.f ? static_cast<int>(int4_q(v, s)) : 0;
        uint8_t nib = static_cast<uint8_t>(code + 8);
        uint8_t& byte = packed[k / 2];
        byte = (k & 1) ? static_cast<uint8_t>((byte & 0x0F) | (nib << 4)) : static_cast<uint8_t>((byte & 0xF0) | nib);
        return (double)code * s;
    };
    gptq_detail::gptq_row(w, K, kInt4Group, f, group, quantize);
}

}  // namespace monocu
