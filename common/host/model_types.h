// host/model_types.h — the model_types monocu runs, which engine runs each, and the transformers defaults each
// config class fills in for keys a config.json leaves out; and the checks every engine's config must pass.
//
// Usage:
//   const ModelType* t = find_model_type("mistral");     // null if no engine runs it
//   ModelConfig c = load_checked_config(dir);            // config.json with its family's defaults, validated:
//                                                        // what inspect and every engine read
//   struct Config : DecoderDims { ... };  cfg.read_dims(c);  // dim, ffn, n_layers, n_heads, n_kv, head_dim, ...
//
// Limits: each size positive and within what real checkpoints use, with headroom (the largest public models have
// hidden 16384-25600, 126 layers, 128 heads, vocabularies of 262k, contexts of 10M), so a corrupt or hostile
// config.json is one clear line instead of a giant allocation. What the kernels need on top (head_dim 64 or
// 128, at most 8 query heads per KV head, sizes a multiple of 8) is checked here too, for every engine alike.
#pragma once

#include <cstring>
#include <string>

#include "host/config.h"

namespace monocu {

struct ModelType {
    const char* name;      // config.json's model_type
    const char* engine;    // the binary that runs it (engines/<engine>.cu)
    const char* defaults;  // the transformers config class's defaults for keys the file may leave out (JSON)
};

inline const ModelType* model_types(size_t* n) {
    static const ModelType kTypes[] = {
        {"qwen3", "qwen3", R"({"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "hidden_act": "silu",
          "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
          "attention_bias": false, "use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 28})"},
        {"qwen3_moe", "qwen3", R"({"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
          "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_act": "silu", "max_position_embeddings": 32768,
          "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "attention_bias": false, "use_sliding_window": false,
          "decoder_sparse_step": 1, "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_local_experts": 128,
          "norm_topk_prob": false, "mlp_only_layers": [], "rope_theta": 10000.0})"},
        {"llama", "llama", R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
          "num_attention_heads": 32, "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
          "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false, "rope_theta": 10000.0})"},
        {"mistral", "llama", R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 131072,
          "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "sliding_window": 4096, "rope_theta": 10000.0})"},
        {"mixtral", "llama", R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 131072,
          "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "num_experts_per_tok": 2, "num_local_experts": 8,
          "rope_theta": 1000000.0})"},
        {"qwen2", "llama", R"({"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu", "max_position_embeddings": 32768,
          "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "use_sliding_window": false, "sliding_window": 4096,
          "max_window_layers": 28, "rope_theta": 10000.0})"},
        {"smollm3", "llama", R"({"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
          "num_attention_heads": 16, "num_key_value_heads": 4, "hidden_act": "silu", "max_position_embeddings": 32768,
          "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "use_sliding_window": false, "attention_bias": false,
          "mlp_bias": false, "no_rope_layer_interval": 4, "rope_theta": 2000000.0})"},
        {"gpt_oss", "gpt_oss", R"({"vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
          "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_act": "silu",
          "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "attention_bias": true,
          "sliding_window": 128, "num_local_experts": 128, "num_experts_per_tok": 4, "swiglu_limit": 7.0, "swiglu_alpha": 1.702,
          "rope_theta": 150000.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
          "truncate": false, "original_max_position_embeddings": 4096}})"},
        {"lfm2", "lfm2", R"({"vocab_size": 65536, "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 128000,
          "norm_eps": 1e-5, "tie_word_embeddings": true, "rope_theta": 1000000.0, "conv_bias": false, "conv_L_cache": 3,
          "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": true})"},
        {"lfm2_moe", "lfm2", R"({"vocab_size": 65536, "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
          "max_position_embeddings": 128000, "norm_eps": 1e-5, "tie_word_embeddings": true, "rope_theta": 1000000.0,
          "conv_bias": false, "conv_L_cache": 3, "num_dense_layers": 2, "num_experts_per_tok": 4, "num_experts": 32,
          "use_expert_bias": true, "routed_scaling_factor": 1.0, "norm_topk_prob": true})"},
    };
    *n = sizeof(kTypes) / sizeof(kTypes[0]);
    return kTypes;
}

inline const ModelType* find_model_type(const std::string& name) {
    size_t n;
    const ModelType* t = model_types(&n);
    for (size_t i = 0; i < n; i++)
        if (name == t[i].name) return &t[i];
    return nullptr;
}

inline std::string model_type_names() {
    size_t n;
    const ModelType* t = model_types(&n);
    std::string s;
    for (size_t i = 0; i < n; i++) s += (i ? ", " : "") + std::string(t[i].name);
    return s;
}

// Each size within what real checkpoints use, and what every engine's kernels need.
inline void check_model_config(const ModelConfig& c) {
    const char* p = c.path.c_str();
    auto within = [&](const char* key, long long v, long long hi) {
        if (v < 1 || v > hi) die("%s: '%s' = %lld is outside the range real models use (1..%lld)", p, key, v, hi);
    };
    within("vocab_size", c.vocab_size, 1ll << 22);
    within("hidden_size", c.hidden_size, 1 << 17);
    within("intermediate_size", c.intermediate_size, 1 << 20);
    within("num_hidden_layers", c.num_hidden_layers, 1 << 12);
    within("num_attention_heads", c.num_attention_heads, 1 << 12);
    within("num_key_value_heads", c.num_key_value_heads, c.num_attention_heads);
    within("head_dim", c.head_dim, 1 << 12);
    within("max_position_embeddings", c.max_position_embeddings, 1ll << 26);
    if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) die("%s: 'rms_norm_eps' = %g is outside (0, 1)", p, c.rms_norm_eps);
    if (!(c.rope.factor > 0) || !std::isfinite(c.rope.factor)) die("%s: the rope scaling factor %g must be positive", p, c.rope.factor);
    // What the kernels need (every engine's GEMVs, attention and cache).
    if (c.head_dim != 64 && c.head_dim != 128) die("%s: head_dim %d is not supported (64, 128)", p, c.head_dim);
    if (c.num_attention_heads / c.num_key_value_heads > 8)
        die("%s: %d query heads per KV head is not supported (at most 8)", p, c.num_attention_heads / c.num_key_value_heads);
    if (c.hidden_size % 8 || c.intermediate_size % 8) die("%s: hidden_size and intermediate_size must be multiples of 8", p);
    if (c.hidden_act != "silu") die("%s: hidden_act '%s' is not supported (silu)", p, c.hidden_act.c_str());
}

// The sizes every decoder engine reads from a checked config, under the short names its code uses. An engine's
// Config derives from it and adds its family's switches (engines/qwen3.cu, engines/llama.cu).
struct DecoderDims {
    int dim, ffn, n_layers, n_heads, n_kv, head_dim, vocab;  // hidden_size, intermediate_size, num_hidden_layers, ...
    int q_dim, kv_dim;                                       // n_heads * head_dim, n_kv * head_dim
    float eps;                                               // rms_norm_eps
    void read_dims(const ModelConfig& h) {
        dim = h.hidden_size, ffn = h.intermediate_size, n_layers = h.num_hidden_layers;
        n_heads = h.num_attention_heads, n_kv = h.num_key_value_heads, head_dim = h.head_dim, vocab = h.vocab_size;
        q_dim = n_heads * head_dim, kv_dim = n_kv * head_dim;
        eps = static_cast<float>(h.rms_norm_eps);
    }
};

// config.json read with its model_type's defaults and checked; a model_type no engine runs is an error.
inline ModelConfig load_checked_config(const std::string& dir) {
    std::string path = dir + "/config.json";
    nlohmann::json file = read_json_file(path);
    if (!file.is_object()) die("%s: not a JSON object", path.c_str());
    if (!file.contains("model_type")) die("%s: missing required key 'model_type'", path.c_str());
    std::string type = json_as_string(path, "model_type", file["model_type"]);
    const ModelType* t = find_model_type(type);
    if (!t) die("%s: model_type '%s' is not one monocu runs (%s)", path.c_str(), type.c_str(), model_type_names().c_str());
    ModelConfig c = parse_model_config(path, file, nlohmann::json::parse(t->defaults));
    check_model_config(c);
    return c;
}

}  // namespace monocu
