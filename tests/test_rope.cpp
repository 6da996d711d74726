#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <vector>

#include "host/config.h"
#include "host/rope.h"

using namespace monocu;

// GPT-OSS's rope_scaling: theta 150000, head_dim 64, YaRN factor 32 from a 4096 context, beta 32 / 1, no truncation.
static RopeConfig gpt_oss_yarn() {
    RopeConfig r;
    r.type = "yarn", r.theta = 150000.0, r.factor = 32.0, r.factor_set = true, r.original_max_position_embeddings = 4096;
    r.max_position = 131072, r.beta_fast = 32.0, r.beta_slow = 1.0, r.truncate = false;
    return r;
}

TEST_CASE("yarn: dimensions that turn often keep their frequency, slow ones are divided by the factor, a ramp between") {
    RopeConfig plain;
    plain.theta = 150000.0;
    const std::vector<float> base = rope_inv_freq(plain, 64), yarn = rope_inv_freq(gpt_oss_yarn(), 64);
    // The ramp's ends: d ln(ctx / (2 pi beta)) / (2 ln theta) for beta 32 and 1: 8.09 and 17.40 (not rounded).
    const double low = 64 * std::log(4096 / (32 * 2 * M_PI)) / (2 * std::log(150000.0));
    const double high = 64 * std::log(4096 / (1 * 2 * M_PI)) / (2 * std::log(150000.0));
    CHECK(low == doctest::Approx(8.093).epsilon(1e-3));
    CHECK(high == doctest::Approx(17.398).epsilon(1e-3));
    for (int i = 0; i < 32; i++) {
        CAPTURE(i);
        float pos_freq = std::pow(150000.0f, static_cast<float>(2 * i) / 64.0f);
        float interpolated = 1.0f / (32.0f * pos_freq);
        if (i <= 8) CHECK(yarn[i] == base[i]);               // ramp 0: the plain frequency, exactly
        else if (i >= 18) CHECK(yarn[i] == interpolated);    // ramp 1: divided by the factor
        else {
            double ramp = (i - low) / (high - low);
            double want = interpolated * ramp + base[i] * (1 - ramp);
            CHECK(yarn[i] == doctest::Approx(want).epsilon(1e-6));
            CHECK(yarn[i] < base[i]);
            CHECK(yarn[i] > interpolated);
        }
    }
    // truncate (the default) rounds the ends outwards to whole dimensions: 8 and 18.
    RopeConfig t = gpt_oss_yarn();
    t.truncate = true;
    const std::vector<float> tr = rope_inv_freq(t, 64);
    CHECK(tr[8] == base[8]);
    CHECK(tr[18] == 1.0f / (32.0f * std::pow(150000.0f, 36.0f / 64.0f)));
    CHECK(tr[12] == doctest::Approx(base[12] * 0.6 + (1.0f / (32.0f * std::pow(150000.0f, 24.0f / 64.0f))) * 0.4).epsilon(1e-6));
    // A factor of 1 changes nothing.
    RopeConfig one = gpt_oss_yarn();
    one.factor = 1.0;
    const std::vector<float> same = rope_inv_freq(one, 64);
    for (int i = 0; i < 32; i++) CHECK(same[i] == doctest::Approx(base[i]).epsilon(1e-7));
    CHECK(rope_attention_factor(one) == 1.0);
}

TEST_CASE("yarn: cos and sin carry the attention factor 0.1 ln(factor) + 1, or the config's own") {
    RopeConfig r = gpt_oss_yarn();
    CHECK(rope_attention_factor(r) == doctest::Approx(0.1 * std::log(32.0) + 1.0));
    const std::vector<float> inv = rope_inv_freq(r, 64);
    const std::vector<RopeCosSin> t = rope_cos_sin_host(r, 64, 3);
    const float a = static_cast<float>(rope_attention_factor(r));
    for (int i = 0; i < 32; i++) {
        CHECK(t[i].cos == a);  // position 0
        CHECK(t[i].sin == 0.0f);
        float angle = 2.0f * inv[i];
        CHECK(t[2 * 32 + i].cos == doctest::Approx(std::cos(angle) * a).epsilon(1e-6));
        CHECK(t[2 * 32 + i].sin == doctest::Approx(std::sin(angle) * a).epsilon(1e-6));
    }
    r.attention_factor = 1.25;
    CHECK(rope_attention_factor(r) == 1.25);
    r.attention_factor = 0, r.mscale = 0.707, r.mscale_all_dim = 0.707;  // DeepSeek-style: equal mscales cancel
    CHECK(rope_attention_factor(r) == doctest::Approx(1.0));
    // No factor in the config: max_position_embeddings / original_max_position_embeddings.
    RopeConfig d = gpt_oss_yarn();
    d.factor = 1.0, d.factor_set = false;
    CHECK(yarn_factor(d) == 32.0);
    // Other rope types are not scaled.
    RopeConfig plain;
    CHECK(rope_attention_factor(plain) == 1.0);
}

TEST_CASE("yarn keys in config.json: rope_scaling as GPT-OSS writes it") {
    nlohmann::json f = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                        {"num_attention_heads", 1}, {"num_key_value_heads", 1}, {"head_dim", 64}, {"vocab_size", 100},
                        {"max_position_embeddings", 131072}, {"rope_theta", 150000}, {"rms_norm_eps", 1e-5},
                        {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                                          {"truncate", false}, {"original_max_position_embeddings", 4096}}}};
    ModelConfig c = parse_model_config("config.json", f, nlohmann::json::object());
    CHECK(c.rope.type == "yarn");
    CHECK(c.rope.factor == 32.0);
    CHECK(c.rope.factor_set);
    CHECK(c.rope.beta_fast == 32.0);
    CHECK(c.rope.beta_slow == 1.0);
    CHECK_FALSE(c.rope.truncate);
    CHECK(c.rope.original_max_position_embeddings == 4096);
    CHECK(rope_inv_freq(c.rope, 64) == rope_inv_freq(gpt_oss_yarn(), 64));
    auto refused = [&](const char* key, nlohmann::json v) {
        nlohmann::json g = f;
        if (v.is_null()) g["rope_scaling"].erase(key);
        else g["rope_scaling"][key] = v;
        CHECK_THROWS_AS(parse_model_config("config.json", g, nlohmann::json::object()), UserError);
    };
    refused("truncate", "no");
    refused("beta_fast", -1.0);
    refused("original_max_position_embeddings", nullptr);
    refused("attention_factor", -2.0);
}

// transformers' own numbers (oracle/rope_goldens.py on the GPU machine writes tests/data/rope_goldens.json): every
// frequency within a float32 rounding, the attention scaling exactly as computed.
TEST_CASE("rope frequencies and attention scaling equal transformers' on its goldens") {
    std::ifstream f("tests/data/rope_goldens.json");
    if (!f) {
        MESSAGE("skipped: tests/data/rope_goldens.json not made yet (oracle/rope_goldens.py)");
        return;
    }
    nlohmann::json g = nlohmann::json::parse(f);
    REQUIRE(g["cases"].size() >= 4);
    for (const auto& c : g["cases"]) {
        CAPTURE(c["name"].get<std::string>());
        nlohmann::json file = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"intermediate_size", 64}, {"num_hidden_layers", 1},
                               {"num_attention_heads", 1}, {"num_key_value_heads", 1}, {"head_dim", c["head_dim"]}, {"vocab_size", 8},
                               {"rms_norm_eps", 1e-6}, {"max_position_embeddings", c["max_position_embeddings"]}, {"rope_parameters", c["rope"]}};
        ModelConfig m = parse_model_config("config.json", file, nlohmann::json::object());
        std::vector<float> inv = rope_inv_freq(m.rope, c["head_dim"].get<int>());
        const auto& want = c["inv_freq"];
        REQUIRE(inv.size() == want.size());
        for (size_t i = 0; i < inv.size(); i++) {
            CAPTURE(i);
            CHECK(inv[i] == doctest::Approx(want[i].get<double>()).epsilon(2e-7));
        }
        CHECK(rope_attention_factor(m.rope) == doctest::Approx(c["attention_scaling"].get<double>()).epsilon(1e-12));
    }
}
