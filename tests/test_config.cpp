#include <doctest/doctest.h>

#include "host/config.h"
#include "host/model_types.h"
#include "test_util.h"

using namespace monocu;
using namespace monocu_test;
using nlohmann::json;

// Qwen3's defaults, as transformers' Qwen3Config declares them.
static const json kQwen3Defaults = json::parse(find_model_type("qwen3")->defaults);

// Qwen3-4B's config.json as published (transformers 4.x era keys).
static const char* kQwen3_4B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2560, "initializer_range": 0.02, "intermediate_size": 9728,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

TEST_CASE("a published Qwen3 config.json (transformers 4.x keys)") {
    ModelConfig c = parse_model_config("config.json", json::parse(kQwen3_4B), kQwen3Defaults);
    CHECK(c.model_type == "qwen3");
    CHECK(c.hidden_size == 2560);
    CHECK(c.num_key_value_heads == 8);
    CHECK(c.head_dim == 128);
    CHECK(c.rope.theta == 1000000.0);
    CHECK(c.rope.type == "default");
    CHECK(c.tie_word_embeddings);
    CHECK(c.dtype == "bfloat16");
    CHECK(c.sliding_window == 0);
    CHECK(c.layer_types.size() == 36);
    CHECK(c.layer_types[35] == "full_attention");
    CHECK(c.eos_token_ids == std::vector<int>{151645});
    CHECK(c.bos_token_id == 151643);
    CHECK(c.quant.method.empty());
}

TEST_CASE("transformers 5 keys: rope_parameters and dtype") {
    json f = json::parse(kQwen3_4B);
    f.erase("rope_theta");
    f.erase("rope_scaling");
    f.erase("torch_dtype");
    f["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000000.0}};
    f["dtype"] = "float32";
    f["eos_token_id"] = json::array({1, 2, 3});
    ModelConfig c = parse_model_config("config.json", f, kQwen3Defaults);
    CHECK(c.rope.theta == 5000000.0);
    CHECK(c.dtype == "float32");
    CHECK(c.eos_token_ids == std::vector<int>{1, 2, 3});
}

TEST_CASE("defaults fill what the file leaves out, like transformers") {
    json f = {{"model_type", "qwen3"}, {"hidden_size", 256}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
    ModelConfig c = parse_model_config("config.json", f, kQwen3Defaults);
    CHECK(c.head_dim == 128);  // Qwen3Config's own default, not hidden / heads
    CHECK(c.num_hidden_layers == 32);
    CHECK(c.vocab_size == 151936);
    CHECK(c.rope.theta == 10000.0);  // no rope_theta anywhere: transformers' default

    // Without a family default, head_dim is hidden / heads and kv heads equal heads.
    json bare = {{"model_type", "llama"}, {"vocab_size", 100}, {"hidden_size", 256}, {"intermediate_size", 512},
                 {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"max_position_embeddings", 64},
                 {"rms_norm_eps", 1e-5}, {"head_dim", nullptr}};
    ModelConfig b = parse_model_config("config.json", bare, json::object());
    CHECK(b.head_dim == 64);
    CHECK(b.num_key_value_heads == 4);
    CHECK_FALSE(b.tie_word_embeddings);
}

// gpt-oss-20b's config.json as published (rope_scaling, not rope_parameters), and the defaults GptOssConfig fills in.
TEST_CASE("gpt_oss: the published config's YaRN rope and MXFP4 quantization_config; the defaults' YaRN when none is given") {
    static const json kDefaults = json::parse(find_model_type("gpt_oss")->defaults);
    json f = json::parse(R"({"architectures": ["GptOssForCausalLM"], "attention_bias": true, "eos_token_id": 200002,
      "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880, "max_position_embeddings": 131072,
      "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
      "num_key_value_heads": 8, "num_local_experts": 32, "pad_token_id": 199999,
      "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                              "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
      "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
      "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}, "rope_theta": 150000,
      "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": false, "vocab_size": 201088})");
    ModelConfig c = parse_model_config("config.json", f, kDefaults);
    CHECK(find_model_type("gpt_oss")->engine == std::string("gpt_oss"));
    CHECK(c.rope.type == "yarn");
    CHECK(c.rope.factor == 32.0);
    CHECK(c.rope.theta == 150000.0);
    CHECK(c.rope.original_max_position_embeddings == 4096);
    CHECK(c.quant.method == "mxfp4");
    CHECK(c.num_hidden_layers == 24);
    CHECK(c.find("swiglu_alpha")->get<double>() == doctest::Approx(1.702));  // from the defaults
    // The file's rope wins over the defaults' (which are yarn too): a plain rope stays plain.
    f["rope_scaling"] = {{"rope_type", "default"}};
    CHECK(parse_model_config("config.json", f, kDefaults).rope.type == "default");
    // Transformers 5 writes rope_parameters, which wins as well.
    f.erase("rope_scaling");
    f["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1000.0}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                            {"beta_fast", 32.0}, {"beta_slow", 1.0}};
    ModelConfig t5 = parse_model_config("config.json", f, kDefaults);
    CHECK(t5.rope.factor == 4.0);
    CHECK(t5.rope.theta == 1000.0);
    // No rope keys at all: GptOssConfig's YaRN.
    f.erase("rope_parameters");
    f.erase("rope_theta");
    ModelConfig d = parse_model_config("config.json", f, kDefaults);
    CHECK(d.rope.type == "yarn");
    CHECK(d.rope.factor == 32.0);
    CHECK(d.rope.theta == 150000.0);
}

TEST_CASE("sliding window only with use_sliding_window, and layer_types follow max_window_layers") {
    json f = json::parse(kQwen3_4B);
    f["use_sliding_window"] = true;
    f["sliding_window"] = 1024;
    f["max_window_layers"] = 30;
    ModelConfig c = parse_model_config("config.json", f, kQwen3Defaults);
    CHECK(c.sliding_window == 1024);
    CHECK(c.layer_types[29] == "full_attention");
    CHECK(c.layer_types[30] == "sliding_attention");
    f["layer_types"] = json::array({"full_attention"});
    CHECK_THROWS_WITH_AS(parse_model_config("config.json", f, kQwen3Defaults),
                         doctest::Contains("'layer_types' has 1 entries for 36 layers"), UserError);
}

TEST_CASE("quantization_config of Qwen's FP8 releases") {
    json f = json::parse(kQwen3_4B);
    f["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}}};
    ModelConfig c = parse_model_config("config.json", f, kQwen3Defaults);
    CHECK(c.quant.method == "fp8");
    CHECK(c.quant.fmt == "e4m3");
    CHECK(c.quant.weight_block_size == std::vector<int>{128, 128});
}

TEST_CASE("missing, mistyped and impossible keys name the file and the key") {
    auto err = [](json f) {
        try {
            parse_model_config("m/config.json", f, json::object());
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    json f = json::parse(kQwen3_4B);
    json g = f;
    g.erase("hidden_size");
    CHECK(err(g) == "m/config.json: missing required key 'hidden_size'");
    g = f;
    g["num_hidden_layers"] = "36";
    CHECK(err(g) == "m/config.json: 'num_hidden_layers' must be an integer, found \"36\"");
    g = f;
    g["vocab_size"] = -5;
    CHECK(err(g) == "m/config.json: 'vocab_size' must be positive, found -5");
    g = f;
    g["num_key_value_heads"] = 5;
    CHECK(err(g) == "m/config.json: num_attention_heads 32 is not a multiple of num_key_value_heads 5");
    g = f;
    g["rms_norm_eps"] = "small";
    CHECK(err(g) == "m/config.json: 'rms_norm_eps' must be a number, found \"small\"");
    g = f;
    g["tie_word_embeddings"] = 1;
    CHECK(err(g) == "m/config.json: 'tie_word_embeddings' must be true or false, found 1");
    g = f;
    g["rope_theta"] = 0;
    CHECK(err(g).find("rope_theta must be positive") != std::string::npos);
    g = f;
    g["hidden_size"] = 1e12;
    CHECK(err(g).find("'hidden_size' must be an integer") != std::string::npos);
    g = f;
    g["num_hidden_layers"] = 5000000000LL;
    CHECK(err(g) == "m/config.json: 'num_hidden_layers' = 5000000000 is out of range");
    CHECK(err(json::array()) == "m/config.json: not a JSON object");
}

TEST_CASE("files on disk: malformed JSON, absent generation config, generation config values") {
    TempDir dir;
    write_file(dir / "config.json", "{\"model_type\": \"qwen3\",");
    CHECK_THROWS_WITH_AS(load_model_config(dir.path), doctest::Contains("config.json: not valid JSON"), UserError);
    CHECK_THROWS_WITH_AS(load_model_config(dir / "absent"), doctest::Contains("config.json: cannot open"), UserError);
    CHECK_FALSE(load_generation_config(dir.path).present);
    write_file(dir / "generation_config.json",
               R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
                   "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})");
    GenerationConfig g = load_generation_config(dir.path);
    CHECK(g.present);
    CHECK(g.do_sample);
    CHECK(g.eos_token_ids == std::vector<int>{151645, 151643});
    CHECK(g.top_k == 20);
    CHECK(g.temperature == doctest::Approx(0.6));
    write_file(dir / "generation_config.json", R"({"top_k": "twenty"})");
    CHECK_THROWS_WITH_AS(load_generation_config(dir.path),
                         doctest::Contains("generation_config.json: 'top_k' must be an integer"), UserError);
}

// issue 33: one validation for inspect and every engine; each problem one line naming the file, the key and the value.
TEST_CASE("hostile config.json values are refused with the key and the value named") {
    auto check = [](json f) {
        ModelConfig c = parse_model_config("config.json", f, kQwen3Defaults);
        check_model_config(c);
    };
    json good = json::parse(kQwen3_4B);
    CHECK_NOTHROW(check(good));
    struct Case { const char* key; json value; const char* message; };
    for (const Case& k : {Case{"hidden_size", 0, "'hidden_size' must be positive, found 0"},
                          Case{"vocab_size", -1, "'vocab_size' must be positive, found -1"},
                          Case{"num_hidden_layers", 1ll << 40, "'num_hidden_layers' = 1099511627776 is out of range"},
                          Case{"hidden_size", "2560", "'hidden_size' must be an integer, found \"2560\""},
                          Case{"head_dim", 1000000000, "'head_dim' = 1000000000 is outside the range real models use (1..4096)"},
                          Case{"head_dim", 96, "head_dim 96 is not supported (64, 128)"},
                          Case{"vocab_size", 1 << 30, "'vocab_size' = 1073741824 is outside the range real models use"},
                          Case{"num_key_value_heads", 3, "num_attention_heads 32 is not a multiple of num_key_value_heads 3"},
                          Case{"num_attention_heads", 8192, "'num_attention_heads' = 8192 is outside the range real models use (1..4096)"},
                          Case{"rms_norm_eps", 2.0, "'rms_norm_eps' = 2 is outside (0, 1)"},
                          Case{"hidden_act", "gelu", "hidden_act 'gelu' is not supported (silu)"},
                          Case{"max_position_embeddings", 1ll << 31, "'max_position_embeddings' = 2147483648 is out of range"},
                          Case{"intermediate_size", 9730, "hidden_size and intermediate_size must be multiples of 8"}}) {
        CAPTURE(k.key);
        json f = good;
        f[k.key] = k.value;
        CHECK_THROWS_WITH_AS(check(f), doctest::Contains(k.message), UserError);
    }
    CHECK(find_model_type("llama") != nullptr);
    CHECK(find_model_type("gpt2") == nullptr);
}
