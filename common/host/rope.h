// host/rope.h — rotary position embedding's frequencies, with the checkpoint's rope scaling (host math).
//
// Usage:
//   RopeConfig r;  r.theta = 1e6;  r.type = "llama3"; ...      // host/config.h fills it from config.json
//   std::vector<float> inv = rope_inv_freq(r, head_dim);       // inv_freq[i], i < head_dim / 2
//   std::vector<RopeCosSin> t = rope_cos_sin_host(r, head_dim, max_pos);   // (cos, sin) per position and i
//
// inv_freq follows transformers' rope initialisers (modeling_rope_utils.py) in float32: default theta^(-2i/d);
// linear divides by factor; llama3 keeps high frequencies, divides low ones by factor and blends between.
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
    double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
    int original_max_position_embeddings = 0;   // llama3 / yarn
    int max_position = 0;                       // dynamic: max_position_embeddings, past which the base grows
};

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
    die("rope_type '%s' is not supported (default, linear, llama3, dynamic are)", r.type.c_str());
}

// (cos, sin) of positions p0 .. p0 + n - 1 with the frequencies inv, appended to t.
inline void rope_rows(const std::vector<float>& inv, int p0, int n, std::vector<RopeCosSin>& t) {
    for (int p = p0; p < p0 + n; p++)
        for (float f : inv) {
            float a = static_cast<float>(p) * f;
            t.push_back(RopeCosSin{static_cast<float>(std::cos(static_cast<double>(a))), static_cast<float>(std::sin(static_cast<double>(a)))});
        }
}

// The table of positions 0 .. max_pos - 1, each row as a decode step at that position rotates (for "dynamic",
// row p >= max_position with the frequencies of seq_len p + 1: a step's pass ends at its own position).
inline std::vector<RopeCosSin> rope_cos_sin_host(const RopeConfig& r, int head_dim, int max_pos) {
    std::vector<RopeCosSin> t;
    t.reserve(static_cast<size_t>(max_pos) * (head_dim / 2));
    int plain = r.type == "dynamic" ? std::min(max_pos, r.max_position) : max_pos;
    rope_rows(rope_inv_freq(r, head_dim), 0, plain, t);
    for (int p = plain; p < max_pos; p++) rope_rows(rope_inv_freq(r, head_dim, p + 1), p, 1, t);
    return t;
}

}  // namespace monocu
