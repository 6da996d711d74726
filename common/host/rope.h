// host/rope.h — rotary position embedding's frequencies, with the checkpoint's rope scaling (host math).
//
// Usage:
//   RopeConfig r;  r.theta = 1e6;  r.type = "llama3"; ...      // host/config.h fills it from config.json
//   std::vector<float> inv = rope_inv_freq(r, head_dim);       // inv_freq[i], i < head_dim / 2
//   std::vector<RopeCosSin> t = rope_cos_sin_host(r, head_dim, max_pos);   // (cos, sin) per position and i
//
// inv_freq follows transformers' rope initialisers (modeling_rope_utils.py) in float32: default theta^(-2i/d);
// linear divides by factor; llama3 keeps high frequencies, divides low ones by factor and blends between; yarn
// (GPT-OSS, long-context Qwen) blends extrapolated and interpolated frequencies over a ramp of dimensions set by
// beta_fast / beta_slow, and scales cos and sin by its attention factor (rope_attention_factor).
// Angles are float32 products pos * inv_freq, as transformers forms them, so long positions round alike.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "host/errors.h"

namespace monocu {

struct RopeConfig {
    std::string type = "default";  // default | linear | llama3 | dynamic | yarn | ...
    double theta = 10000.0;
    double factor = 1.0;                         // linear / llama3 / dynamic / yarn
    bool factor_set = false;                     // the config gave factor (yarn derives it otherwise)
    double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
    int original_max_position_embeddings = 0;   // llama3 / yarn
    int max_position = 0;                       // dynamic: max_position_embeddings, past which the base grows
    // yarn
    double beta_fast = 32.0, beta_slow = 1.0;   // rotations that bound the ramp between extrapolation and interpolation
    bool truncate = true;                       // the ramp's ends rounded to whole dimensions (GPT-OSS: false)
    double attention_factor = 0.0;              // cos and sin scale; 0: derived from factor (and mscale, mscale_all_dim)
    double mscale = 0.0, mscale_all_dim = 0.0;
};

// YaRN's factor: `factor`, or where the config leaves it out, max_position_embeddings / original_max_position_embeddings
// (as transformers derives it).
inline double yarn_factor(const RopeConfig& r) {
    if (r.factor_set || r.original_max_position_embeddings <= 0 || r.max_position <= 0) return r.factor;
    return (double)r.max_position / r.original_max_position_embeddings;
}

// What cos and sin are multiplied by: 1, or for yarn 0.1 ln(factor) + 1 (with mscale / mscale_all_dim, their ratio of
// that form), unless the config gives attention_factor.
inline double rope_attention_factor(const RopeConfig& r) {
    if (r.type != "yarn") return 1.0;
    if (r.attention_factor > 0) return r.attention_factor;
    double f = yarn_factor(r);
    auto get_mscale = [&](double m) { return f <= 1 ? 1.0 : 0.1 * m * std::log(f) + 1.0; };
    if (r.mscale > 0 && r.mscale_all_dim > 0) return get_mscale(r.mscale) / get_mscale(r.mscale_all_dim);
    return get_mscale(1.0);
}

// A (cos, sin) pair on the host; the same layout as CUDA's float2.
struct RopeCosSin {
    float cos, sin;
};

// inv_freq[i] for i < head_dim / 2, with the checkpoint's rope scaling applied (float32, as transformers).
// seq_len matters to "dynamic" (NTK) only: a forward pass whose last position is seq_len - 1 >= max_position
// rotates with base theta ((factor seq_len / max_position) - (factor - 1))^(d / (d - 2)), as transformers'
// dynamic_rope_update recomputes it for that pass.
inline std::vector<float> rope_inv_freq(const RopeConfig& r, int head_dim, int seq_len = 0) {
    int half = head_dim / 2;
    double base = r.theta;
    if (r.type == "dynamic") {
        if (r.max_position <= 0 || !(r.factor >= 1.0)) die("rope_type 'dynamic' needs max_position_embeddings and a factor >= 1");
        double len = std::max(seq_len, r.max_position);
        base = r.theta * std::pow(r.factor * len / r.max_position - (r.factor - 1), (double)head_dim / (head_dim - 2));
    }
    std::vector<float> inv(half);
    for (int i = 0; i < half; i++) {
        float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
        inv[i] = 1.0f / std::pow(static_cast<float>(base), exponent);
    }
    if (r.type == "default" || r.type == "dynamic") return inv;
    if (r.type == "linear") {
        for (float& f : inv) f /= static_cast<float>(r.factor);
        return inv;
    }
    if (r.type == "llama3") {
        // Llama 3.1: keep high frequencies, divide low ones by factor, blend in between.
        double old_ctx = r.original_max_position_embeddings;
        double low_wavelen = old_ctx / r.low_freq_factor, high_wavelen = old_ctx / r.high_freq_factor;
        for (float& f : inv) {
            double wavelen = 2 * M_PI / f;
            if (wavelen > low_wavelen) f = static_cast<float>(f / r.factor);
            else if (wavelen >= high_wavelen) {
                double smooth = (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
                f = static_cast<float>((1 - smooth) * f / r.factor + smooth * f);
            }
        }
        return inv;
    }
    if (r.type == "yarn") {
        // Dimensions rotating fewer than beta_slow times over the original context are interpolated (divided by the
        // factor), those rotating more than beta_fast times kept, and a linear ramp blends the ones between.
        int ctx = r.original_max_position_embeddings;
        if (ctx <= 0) die("rope_type 'yarn' needs original_max_position_embeddings");
        const float factor = static_cast<float>(yarn_factor(r));
        auto correction_dim = [&](double rotations) { return head_dim * std::log(ctx / (rotations * 2 * M_PI)) / (2 * std::log(r.theta)); };
        double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
        if (r.truncate) low = std::floor(low), high = std::ceil(high);
        low = std::max(low, 0.0), high = std::min(high, (double)head_dim - 1);
        if (low == high) high += 0.001;
        for (int i = 0; i < half; i++) {
            // theta^(2i/d) in float32, as transformers' base ** (arange(0, d, 2) / d)
            float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(head_dim));
            float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
            // transformers' (arange(d / 2) - low) / (high - low) in float32, clamped to [0, 1]
            float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
            ramp = std::min(1.0f, std::max(0.0f, ramp));
            float keep = 1.0f - ramp;  // the weight of the extrapolated (unscaled) frequency
            inv[i] = interpolation * (1.0f - keep) + extrapolation * keep;
        }
        return inv;
    }
    die("rope_type '%s' is not supported (default, linear, llama3, dynamic, yarn are)", r.type.c_str());
}

// (cos, sin) of positions p0 .. p0 + n - 1 with the frequencies inv, times scale (yarn's attention factor), appended
// to t.
inline void rope_rows(const std::vector<float>& inv, int p0, int n, std::vector<RopeCosSin>& t, float scale = 1.0f) {
    for (int p = p0; p < p0 + n; p++)
        for (float f : inv) {
            float a = static_cast<float>(p) * f;
            float c = static_cast<float>(std::cos(static_cast<double>(a))), s = static_cast<float>(std::sin(static_cast<double>(a)));
            t.push_back(RopeCosSin{c * scale, s * scale});
        }
}

// The table of positions 0 .. max_pos - 1, each row as a decode step at that position rotates (for "dynamic",
// row p >= max_position with the frequencies of seq_len p + 1: a step's pass ends at its own position).
inline std::vector<RopeCosSin> rope_cos_sin_host(const RopeConfig& r, int head_dim, int max_pos) {
    std::vector<RopeCosSin> t;
    t.reserve(static_cast<size_t>(max_pos) * (head_dim / 2));
    int plain = r.type == "dynamic" ? std::min(max_pos, r.max_position) : max_pos;
    rope_rows(rope_inv_freq(r, head_dim), 0, plain, t, static_cast<float>(rope_attention_factor(r)));
    for (int p = plain; p < max_pos; p++) rope_rows(rope_inv_freq(r, head_dim, p + 1), p, 1, t);
    return t;
}

}  // namespace monocu
