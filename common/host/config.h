// host/config.h — a checkpoint's config.json and generation_config.json as plain structs.
//
// Usage:
//   ModelConfig c = load_model_config("models/qwen3-tiny", kQwen3Defaults);
//   GenerationConfig g = load_generation_config("models/qwen3-tiny");   // all-default if the file is absent
//
// The family defaults are a JSON object the engine passes in, copied from the family's transformers
// config class, so "absent from config.json" means exactly what it means to transformers. A key that is
// absent from both the file and the defaults is an error; so is a key of the wrong JSON type. Errors name
// the file and the key. Derived values follow transformers:
//   head_dim             = hidden_size / num_attention_heads when absent or null (and no family default)
//   num_key_value_heads  = num_attention_heads when absent or null
//   rope_theta           = rope_parameters.rope_theta (transformers 5) or rope_theta (4.x), default 10000
//   rope_type            = rope_parameters.rope_type, or rope_scaling.rope_type / .type, default "default"
//   rms_norm_eps         = norm_eps where a family names it so (LFM2)
//   sliding_window       = 0 unless use_sliding_window (Qwen2/3) or the family has no such switch
//   layer_types          = from the file, else "sliding_attention" for layers >= max_window_layers when a
//                          window is in use, else "full_attention"
//   dtype                = "dtype" (transformers 5) or "torch_dtype"
//   eos_token_ids        = eos_token_id, an int or a list
#pragma once

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "host/errors.h"
#include "host/files.h"
#include "host/rope.h"

namespace monocu {

struct QuantizationConfig {
    std::string method;                 // "" when unquantized; "fp8" for Qwen's FP8 releases
    std::string fmt;                    // "e4m3"
    std::vector<int> weight_block_size; // e.g. {128, 128}
    std::string activation_scheme;      // "dynamic"
};

struct ModelConfig {
    std::string path;  // config.json, for messages
    std::string model_type;
    std::vector<std::string> architectures;
    int vocab_size = 0, hidden_size = 0, intermediate_size = 0;
    int num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
    int max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    bool tie_word_embeddings = false;
    bool attention_bias = false;
    std::string hidden_act = "silu";
    RopeConfig rope;
    bool use_sliding_window = false;
    int sliding_window = 0;  // 0: no window
    int max_window_layers = 0;
    std::vector<std::string> layer_types;
    std::string dtype;  // "bfloat16", "float16", "float32", ... ("" if unstated)
    int bos_token_id = -1;
    std::vector<int> eos_token_ids;
    QuantizationConfig quant;
    // The file and the family defaults as read, for the keys only one family has (an engine reads them with
    // find() and the json_as_* checks above, so errors name the file and key the same way).
    nlohmann::json file, defaults;
    const nlohmann::json* find(const char* key) const;
    const nlohmann::json& require(const char* key) const;  // ... or one line: the key is missing (or null)
};

struct GenerationConfig {
    std::vector<int> eos_token_ids;
    int bos_token_id = -1;
    bool do_sample = false;
    double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
    int top_k = 50;
    bool present = false;  // the file existed
};

// ---- JSON access with errors that name file and key ----

inline nlohmann::json read_json_file(const std::string& path) {
    std::string text = read_file_bounded(path, kConfigMaxBytes);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        die("%s: not valid JSON (%s)", path.c_str(), e.what());
    }
}

// Looks key up in the file, then in the defaults. An explicit null in the file is None to transformers (it
// overrides the class default: Mistral v0.3's "sliding_window": null means no window), so it gives nullptr,
// as does a key absent or null in both.
inline const nlohmann::json* config_lookup(const nlohmann::json& file, const nlohmann::json& defaults, const char* key) {
    if (file.contains(key)) return file[key].is_null() ? nullptr : &file[key];
    if (defaults.contains(key) && !defaults[key].is_null()) return &defaults[key];
    return nullptr;
}

inline const nlohmann::json& config_require(const std::string& path, const nlohmann::json& file, const nlohmann::json& defaults,
                                            const char* key) {
    const nlohmann::json* v = config_lookup(file, defaults, key);
    if (!v) die("%s: missing required key '%s'", path.c_str(), key);
    return *v;
}

inline int json_as_int(const std::string& path, const char* key, const nlohmann::json& v) {
    if (!v.is_number_integer()) die("%s: '%s' must be an integer, found %s", path.c_str(), key, v.dump().c_str());
    int64_t x = v.get<int64_t>();
    if (x < INT32_MIN || x > INT32_MAX) die("%s: '%s' = %lld is out of range", path.c_str(), key, (long long)x);
    return static_cast<int>(x);
}
inline double json_as_double(const std::string& path, const char* key, const nlohmann::json& v) {
    if (!v.is_number()) die("%s: '%s' must be a number, found %s", path.c_str(), key, v.dump().c_str());
    return v.get<double>();
}
inline bool json_as_bool(const std::string& path, const char* key, const nlohmann::json& v) {
    if (!v.is_boolean()) die("%s: '%s' must be true or false, found %s", path.c_str(), key, v.dump().c_str());
    return v.get<bool>();
}
inline std::string json_as_string(const std::string& path, const char* key, const nlohmann::json& v) {
    if (!v.is_string()) die("%s: '%s' must be a string, found %s", path.c_str(), key, v.dump().c_str());
    return v.get<std::string>();
}
// An int, or a list of ints (eos_token_id); null or absent gives an empty list.
inline std::vector<int> json_as_int_list(const std::string& path, const char* key, const nlohmann::json* v) {
    std::vector<int> out;
    if (!v || v->is_null()) return out;
    if (v->is_array()) {
        for (const auto& x : *v) out.push_back(json_as_int(path, key, x));
    } else {
        out.push_back(json_as_int(path, key, *v));
    }
    return out;
}

inline int config_int(const std::string& p, const nlohmann::json& f, const nlohmann::json& d, const char* key) {
    return json_as_int(p, key, config_require(p, f, d, key));
}
inline int config_positive_int(const std::string& p, const nlohmann::json& f, const nlohmann::json& d, const char* key) {
    int v = config_int(p, f, d, key);
    if (v <= 0) die("%s: '%s' must be positive, found %d", p.c_str(), key, v);
    return v;
}

// ---- rope: transformers 5 writes rope_parameters, 4.x wrote rope_theta + rope_scaling ----

inline RopeConfig parse_rope(const std::string& p, const nlohmann::json& f, const nlohmann::json& d) {
    RopeConfig r;
    if (const nlohmann::json* t = config_lookup(f, d, "rope_theta")) r.theta = json_as_double(p, "rope_theta", *t);
    const nlohmann::json* params = config_lookup(f, d, "rope_parameters");
    const char* params_key = "rope_parameters";
    if (!params) {
        params = config_lookup(f, d, "rope_scaling");
        params_key = "rope_scaling";
    }
    if (params) {
        if (!params->is_object()) die("%s: '%s' must be an object, found %s", p.c_str(), params_key, params->dump().c_str());
        const nlohmann::json& q = *params;
        if (q.contains("rope_theta")) r.theta = json_as_double(p, "rope_theta", q["rope_theta"]);
        if (q.contains("rope_type")) r.type = json_as_string(p, "rope_type", q["rope_type"]);
        else if (q.contains("type")) r.type = json_as_string(p, "type", q["type"]);
        if (q.contains("factor") && !q["factor"].is_null()) r.factor = json_as_double(p, "factor", q["factor"]), r.factor_set = true;
        if (q.contains("low_freq_factor")) r.low_freq_factor = json_as_double(p, "low_freq_factor", q["low_freq_factor"]);
        if (q.contains("high_freq_factor")) r.high_freq_factor = json_as_double(p, "high_freq_factor", q["high_freq_factor"]);
        auto num = [&](const char* k, double& v) {
            if (q.contains(k) && !q[k].is_null()) v = json_as_double(p, k, q[k]);
        };
        num("beta_fast", r.beta_fast), num("beta_slow", r.beta_slow), num("attention_factor", r.attention_factor);
        num("mscale", r.mscale), num("mscale_all_dim", r.mscale_all_dim);
        if (q.contains("truncate") && !q["truncate"].is_null()) r.truncate = json_as_bool(p, "truncate", q["truncate"]);
        if (q.contains("original_max_position_embeddings") && !q["original_max_position_embeddings"].is_null())
            r.original_max_position_embeddings =
                json_as_int(p, "original_max_position_embeddings", q["original_max_position_embeddings"]);
    }
    if (!(r.theta > 0) || !std::isfinite(r.theta)) die("%s: rope_theta must be positive, found %g", p.c_str(), r.theta);
    if (r.type == "yarn") {
        if (r.original_max_position_embeddings <= 0) die("%s: yarn rope scaling needs original_max_position_embeddings", p.c_str());
        if (!(r.beta_fast > 0 && r.beta_slow > 0 && std::isfinite(r.beta_fast) && std::isfinite(r.beta_slow)))
            die("%s: yarn's beta_fast %g and beta_slow %g must be positive", p.c_str(), r.beta_fast, r.beta_slow);
        if (!(r.attention_factor >= 0 && r.mscale >= 0 && r.mscale_all_dim >= 0) || !std::isfinite(r.attention_factor))
            die("%s: yarn's attention_factor, mscale and mscale_all_dim must be non-negative", p.c_str());
    }
    return r;
}

inline QuantizationConfig parse_quantization(const std::string& p, const nlohmann::json& f) {
    QuantizationConfig q;
    if (!f.contains("quantization_config") || f["quantization_config"].is_null()) return q;
    const nlohmann::json& j = f["quantization_config"];
    if (!j.is_object()) die("%s: 'quantization_config' must be an object", p.c_str());
    if (!j.contains("quant_method")) die("%s: quantization_config has no 'quant_method'", p.c_str());
    q.method = json_as_string(p, "quant_method", j["quant_method"]);
    if (j.contains("fmt") && !j["fmt"].is_null()) q.fmt = json_as_string(p, "fmt", j["fmt"]);
    if (j.contains("activation_scheme") && !j["activation_scheme"].is_null())
        q.activation_scheme = json_as_string(p, "activation_scheme", j["activation_scheme"]);
    if (j.contains("weight_block_size") && !j["weight_block_size"].is_null()) {
        if (!j["weight_block_size"].is_array()) die("%s: 'weight_block_size' must be a list", p.c_str());
        for (const auto& x : j["weight_block_size"]) q.weight_block_size.push_back(json_as_int(p, "weight_block_size", x));
    }
    return q;
}

// ---- config.json ----

inline const nlohmann::json* ModelConfig::find(const char* key) const { return config_lookup(file, defaults, key); }
inline const nlohmann::json& ModelConfig::require(const char* key) const { return config_require(path, file, defaults, key); }

inline ModelConfig parse_model_config(const std::string& p, const nlohmann::json& f, const nlohmann::json& d) {
    if (!f.is_object()) die("%s: not a JSON object", p.c_str());
    ModelConfig c;
    c.path = p;
    c.file = f, c.defaults = d;
    c.model_type = json_as_string(p, "model_type", config_require(p, f, d, "model_type"));
    if (const nlohmann::json* a = config_lookup(f, d, "architectures")) {
        if (!a->is_array()) die("%s: 'architectures' must be a list", p.c_str());
        for (const auto& x : *a) c.architectures.push_back(json_as_string(p, "architectures", x));
    }
    c.vocab_size = config_positive_int(p, f, d, "vocab_size");
    c.hidden_size = config_positive_int(p, f, d, "hidden_size");
    c.intermediate_size = config_positive_int(p, f, d, "intermediate_size");
    c.num_hidden_layers = config_positive_int(p, f, d, "num_hidden_layers");
    c.num_attention_heads = config_positive_int(p, f, d, "num_attention_heads");
    c.num_key_value_heads = config_lookup(f, d, "num_key_value_heads") ? config_positive_int(p, f, d, "num_key_value_heads")
                                                                         : c.num_attention_heads;
    if (config_lookup(f, d, "head_dim")) {
        c.head_dim = config_positive_int(p, f, d, "head_dim");
    } else {
        if (c.hidden_size % c.num_attention_heads != 0)
            die("%s: no head_dim, and hidden_size %d is not divisible by num_attention_heads %d", p.c_str(), c.hidden_size,
                c.num_attention_heads);
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        die("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", p.c_str(), c.num_attention_heads,
            c.num_key_value_heads);
    c.max_position_embeddings = config_positive_int(p, f, d, "max_position_embeddings");
    const char* eps_key = config_lookup(f, d, "rms_norm_eps") || !config_lookup(f, d, "norm_eps") ? "rms_norm_eps" : "norm_eps";  // LFM2's name
    c.rms_norm_eps = json_as_double(p, eps_key, config_require(p, f, d, eps_key));
    if (!(c.rms_norm_eps > 0)) die("%s: '%s' must be positive", p.c_str(), eps_key);
    if (const nlohmann::json* v = config_lookup(f, d, "tie_word_embeddings")) c.tie_word_embeddings = json_as_bool(p, "tie_word_embeddings", *v);
    if (const nlohmann::json* v = config_lookup(f, d, "attention_bias")) c.attention_bias = json_as_bool(p, "attention_bias", *v);
    if (const nlohmann::json* v = config_lookup(f, d, "hidden_act")) c.hidden_act = json_as_string(p, "hidden_act", *v);
    c.rope = parse_rope(p, f, d);
    c.rope.max_position = c.max_position_embeddings;

    // Sliding window: Qwen2/3 only use it when use_sliding_window is true.
    bool has_switch = config_lookup(f, d, "use_sliding_window") != nullptr;
    if (has_switch) c.use_sliding_window = json_as_bool(p, "use_sliding_window", *config_lookup(f, d, "use_sliding_window"));
    const nlohmann::json* sw = config_lookup(f, d, "sliding_window");
    if (sw && (!has_switch || c.use_sliding_window)) {
        c.sliding_window = json_as_int(p, "sliding_window", *sw);
        if (c.sliding_window < 0) die("%s: 'sliding_window' must be non-negative", p.c_str());
    }
    c.max_window_layers = config_lookup(f, d, "max_window_layers") ? config_int(p, f, d, "max_window_layers") : c.num_hidden_layers;
    if (const nlohmann::json* lt = config_lookup(f, d, "layer_types")) {
        if (!lt->is_array()) die("%s: 'layer_types' must be a list", p.c_str());
        for (const auto& x : *lt) c.layer_types.push_back(json_as_string(p, "layer_types", x));
        if ((int)c.layer_types.size() != c.num_hidden_layers)
            die("%s: 'layer_types' has %zu entries for %d layers", p.c_str(), c.layer_types.size(), c.num_hidden_layers);
    } else {
        for (int i = 0; i < c.num_hidden_layers; i++)
            c.layer_types.push_back(c.sliding_window > 0 && i >= c.max_window_layers ? "sliding_attention" : "full_attention");
    }
    if (const nlohmann::json* v = config_lookup(f, d, "dtype")) c.dtype = json_as_string(p, "dtype", *v);
    else if (const nlohmann::json* v2 = config_lookup(f, d, "torch_dtype")) c.dtype = json_as_string(p, "torch_dtype", *v2);
    if (const nlohmann::json* v = config_lookup(f, d, "bos_token_id")) c.bos_token_id = json_as_int(p, "bos_token_id", *v);
    c.eos_token_ids = json_as_int_list(p, "eos_token_id", config_lookup(f, d, "eos_token_id"));
    c.quant = parse_quantization(p, f);
    return c;
}

inline ModelConfig load_model_config(const std::string& model_dir, const nlohmann::json& defaults = nlohmann::json::object()) {
    std::string p = model_dir + "/config.json";
    return parse_model_config(p, read_json_file(p), defaults);
}

// ---- generation_config.json (optional file) ----

inline GenerationConfig parse_generation_config(const std::string& p, const nlohmann::json& f) {
    if (!f.is_object()) die("%s: not a JSON object", p.c_str());
    GenerationConfig g;
    g.present = true;
    const nlohmann::json none = nlohmann::json::object();
    g.eos_token_ids = json_as_int_list(p, "eos_token_id", config_lookup(f, none, "eos_token_id"));
    if (const nlohmann::json* v = config_lookup(f, none, "bos_token_id")) g.bos_token_id = json_as_int(p, "bos_token_id", *v);
    if (const nlohmann::json* v = config_lookup(f, none, "do_sample")) g.do_sample = json_as_bool(p, "do_sample", *v);
    if (const nlohmann::json* v = config_lookup(f, none, "temperature")) g.temperature = json_as_double(p, "temperature", *v);
    if (const nlohmann::json* v = config_lookup(f, none, "top_p")) g.top_p = json_as_double(p, "top_p", *v);
    if (const nlohmann::json* v = config_lookup(f, none, "min_p")) g.min_p = json_as_double(p, "min_p", *v);
    if (const nlohmann::json* v = config_lookup(f, none, "top_k")) g.top_k = json_as_int(p, "top_k", *v);
    if (const nlohmann::json* v = config_lookup(f, none, "repetition_penalty"))
        g.repetition_penalty = json_as_double(p, "repetition_penalty", *v);
    return g;
}

inline GenerationConfig load_generation_config(const std::string& model_dir) {
    std::string p = model_dir + "/generation_config.json";
    struct stat st;
    if (::stat(p.c_str(), &st) != 0 && errno == ENOENT) return GenerationConfig{};  // optional; anything else is read and checked
    return parse_generation_config(p, read_json_file(p));
}

}  // namespace monocu
