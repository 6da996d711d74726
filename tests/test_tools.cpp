// The host tools as a user runs them, on hostile arguments (issue 33): tools/quantize never writes into or over its
// input and never leaves a half-written output; tools/inspect refuses what no engine can run; an engine says what is
// wrong with its folder, config, prompt or flags before it looks for a GPU. Skips what is not built (make builds the
// tools before the host tests; `make all` the engines).
#include <dirent.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "host/model_types.h"
#include "host/mxfp4.h"
#include "host/safetensors.h"
#include "host/safetensors_writer.h"
#include "test_util.h"

using namespace monocu_test;

static bool built(const std::string& tool) { return access(tool.c_str(), X_OK) == 0; }

static std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

static std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (e->d_name[0] != '.') out.push_back(e->d_name);
        closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// A folder in dir of links to tests/data/models/MODEL's files, its config.json a copy with the first `from` made `to`.
static std::string model_with_config(const TempDir& dir, const std::string& model, const std::string& from, const std::string& to) {
    std::string m = dir / ("m" + std::to_string(std::rand())), log;
    REQUIRE(run_command("mkdir " + m + " && ln -s $PWD/tests/data/models/" + model + "/* " + m + " && rm " + m + "/config.json", &log) == 0);
    std::string cfg = slurp("tests/data/models/" + model + "/config.json");
    size_t at = cfg.find(from);
    REQUIRE(at != std::string::npos);
    cfg.replace(at, from.size(), to);
    write_file(m + "/config.json", cfg);
    return m;
}

// The engine refuses model folder m in one line: its config.json, then `line`.
static void check_config_refused(const std::string& engine, const std::string& m, const std::string& line) {
    std::string log;
    CHECK(run_command("timeout 60 " + engine + " -m " + m + " --ids " + m + "/prompt_ids.txt", &log) == 1);
    CHECK(log == "error: " + m + "/config.json: " + line + "\n");
}

TEST_CASE("quantize refuses its own input as output, and an output inside it; a failed run leaves nothing") {
    const std::string q = MONOCU_HOST_BUILD_DIR "/tools/quantize";
    if (!built(q)) {
        MESSAGE("skipped: " << q << " not built");
        return;
    }
    TempDir dir;
    std::string m = dir / "m", log;
    REQUIRE(run_command("cp -r models/pycoder-13m " + m, &log) == 0);
    std::string shard = m + "/model-00001-of-00002.safetensors", before = slurp(shard);
    REQUIRE(before.size() > 1000);
    CHECK(run_command(q + " " + m + " " + m + " --dtype int4", &log) == 1);
    CHECK(log.find("the output is the input folder") != std::string::npos);
    CHECK(run_command(q + " " + m + " " + m + "/ --dtype int4", &log) == 1);
    CHECK(run_command(q + " " + m + " " + m + "/sub --dtype int4", &log) == 1);
    CHECK(log.find("is inside the input folder") != std::string::npos);
    CHECK(slurp(shard) == before);  // the input untouched
    CHECK(entries(m) == std::vector<std::string>{"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                                                 "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
                                                 "tokenizer_config.json"});
    // A run that fails midway (calibration dumps that do not exist) leaves no output folder, and no partial one.
    CHECK(run_command(q + " " + m + " " + (dir / "out") + " --dtype int4 --calib " + (dir / "nowhere"), &log) == 1);
    CHECK(entries(dir.path) == std::vector<std::string>{"m"});
    // A good run makes the folder whole; a second run into it is refused (it is not empty).
    REQUIRE(run_command(q + " " + m + " " + (dir / "out") + " --dtype int4", &log) == 0);
    CHECK(entries(dir / "out") == std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                                           "tokenizer_config.json"});
    CHECK(run_command(q + " " + m + " " + (dir / "out") + " --dtype fp8", &log) == 1);
    CHECK(log.find("already exists and is not empty") != std::string::npos);
}

TEST_CASE("inspect refuses configs no engine can run, and files that are not regular files, in one line") {
    const std::string ins = MONOCU_HOST_BUILD_DIR "/tools/inspect";
    if (!built(ins)) {
        MESSAGE("skipped: " << ins << " not built");
        return;
    }
    TempDir dir;
    std::string m = dir / "m", log;
    REQUIRE(run_command("cp -r models/pycoder-13m " + m, &log) == 0);
    REQUIRE(run_command(ins + " " + m, &log) == 0);
    std::string good = slurp(m + "/config.json");
    struct Case { std::string from, to, message; };
    for (const Case& c : {Case{"\"hidden_size\": 384", "\"hidden_size\": 0", "'hidden_size' must be positive, found 0"},
                          Case{"\"hidden_size\": 384", "\"hidden_size\": \"384\"", "'hidden_size' must be an integer"},
                          Case{"\"num_hidden_layers\": 6", "\"num_hidden_layers\": 1099511627776", "'num_hidden_layers' = 1099511627776 is out of range"},
                          Case{"\"vocab_size\": ", "\"vocab_size\": -1, \"x\": ", "'vocab_size' must be positive, found -1"},
                          Case{"\"model_type\": \"qwen3\"", "\"model_type\": \"gpt2\"", "model_type 'gpt2' is not one monocu runs"}}) {
        CAPTURE(c.to);
        std::string text = good;
        size_t at = text.find(c.from);
        REQUIRE(at != std::string::npos);
        text.replace(at, c.from.size(), c.to);
        write_file(m + "/config.json", text);
        CHECK(run_command(ins + " " + m, &log) == 1);
        CHECK(log.find(c.message) != std::string::npos);
        CHECK(std::count(log.begin(), log.end(), '\n') == 1);
    }
    write_file(m + "/config.json", good);
    // A FIFO where the weights should be: an error at once, not a hang.
    REQUIRE(run_command("rm " + m + "/model-00002-of-00002.safetensors && mkfifo " + m + "/model-00002-of-00002.safetensors", &log) == 0);
    CHECK(run_command("timeout 10 " + ins + " " + m, &log) == 1);
    CHECK(log.find("is a FIFO, not a regular file") != std::string::npos);
}

TEST_CASE("tokenize refuses ids outside the vocabulary and a tokenizer.json that is not a file") {
    const std::string tk = MONOCU_HOST_BUILD_DIR "/tools/tokenize";
    if (!built(tk)) {
        MESSAGE("skipped: " << tk << " not built");
        return;
    }
    std::string log;
    REQUIRE(run_command(tk + " -m models/pycoder-13m --decode \"1 2 3\"", &log) == 0);
    CHECK(run_command(tk + " -m models/pycoder-13m --decode \"1 99999\"", &log) == 1);
    CHECK(log.find("token id 99999 is not in models/pycoder-13m's vocabulary (8192 ids)") != std::string::npos);
    CHECK(run_command("printf 'ab\\377c' | " + tk + " -m models/pycoder-13m --stdin", &log) == 1);
    CHECK(log.find("standard input: invalid UTF-8 at byte 2 (0xff)") != std::string::npos);
    TempDir dir;
    REQUIRE(run_command("mkdir " + (dir / "tokenizer.json"), &log) == 0);
    CHECK(run_command(tk + " -m " + dir.path + " -p hi", &log) == 1);
    CHECK(log.find("tokenizer.json: is a folder, not a regular file") != std::string::npos);
    REQUIRE(run_command("rmdir " + (dir / "tokenizer.json") + " && mkfifo " + (dir / "tokenizer.json"), &log) == 0);
    CHECK(run_command("timeout 10 " + tk + " -m " + dir.path + " -p hi", &log) == 1);
    CHECK(log.find("is a FIFO, not a regular file") != std::string::npos);
}

// Everything a user can get wrong is said before the GPU (runtime/runner.cuh), so these run on any machine, and
// on one without a GPU the last says what is missing in one line.
TEST_CASE("an engine refuses bad inputs in one line before it looks for a GPU") {
    const std::string e = MONOCU_ENGINE_DIR "/qwen3";
    if (!built(e)) {
        MESSAGE("skipped: " << e << " not built");
        return;
    }
    std::string log;
    TempDir dir;
    auto refused = [&](const std::string& args, const std::string& line) {
        CAPTURE(args);
        CHECK(run_command("timeout 60 " + e + " " + args, &log) == 1);
        CHECK(log == "error: " + line + "\n");
    };
    refused("-m " + (dir / "none") + " -p hi", "-m " + (dir / "none") + ": no such folder");
    refused("-m README.md -p hi", "-m README.md: not a folder (give the checkpoint's folder)");
    std::ofstream(dir / "bad.txt", std::ios::binary) << "def f():\n\xc3(";
    refused("-m models/pycoder-13m -f " + (dir / "bad.txt"), (dir / "bad.txt") + ": invalid UTF-8 at byte 9 (0xc3)");
    REQUIRE(run_command("mkfifo " + (dir / "fifo"), &log) == 0);
    refused("-m models/pycoder-13m -f " + (dir / "fifo"), (dir / "fifo") + ": is a FIFO, not a regular file");
    refused("-m models/pycoder-13m -cnv",
            "models/pycoder-13m: -cnv needs a chat template (tokenizer_config.json or chat_template.jinja has none)");
    std::ofstream(dir / "tools.json") << R"([{"type": "function", "function": {"description": "no name"}}])";
    refused("-m models/pycoder-13m -p hi --tools " + (dir / "tools.json"),
            "--tools " + (dir / "tools.json") + ": tool 0 has no function name ({\"type\": \"function\", \"function\": {\"name\": ...}})");
    refused("-m models/pycoder-13m -p hi --force-routing " + (dir / "none"), "--force-routing " + (dir / "none") + ": no such folder");
    std::ofstream(dir / "ids.txt") << "5 8192";
    refused("-m models/pycoder-13m --ids " + (dir / "ids.txt"), (dir / "ids.txt") + ": token id 8192 is outside the vocabulary [0, 8192)");

    // A config no engine can run, beside the shipped model's own files.
    std::string m = dir / "m";
    REQUIRE(run_command("mkdir " + m + " && ln -s $PWD/models/pycoder-13m/* " + m + " && rm " + m + "/config.json", &log) == 0);
    std::string cfg = slurp("models/pycoder-13m/config.json");
    const std::string key = "\"head_dim\": 64";
    size_t at = cfg.find(key);
    REQUIRE(at != std::string::npos);
    cfg.replace(at, key.size(), "\"head_dim\": 1000000000");
    std::ofstream(m + "/config.json") << cfg;
    refused("-m " + m + " -p hi", m + "/config.json: 'head_dim' = 1000000000 is outside the range real models use (1..4096)");

    // Valid inputs reach the GPU check: a GPU runs them; without one, one line says what is missing.
    int rc = run_command("timeout 120 " + e + " -m models/pycoder-13m -p hi -n 2", &log);
    if (rc != 0) {
        CHECK(rc == 1);
        CHECK(log.rfind("error: ", 0) == 0);
        CHECK(std::count(log.begin(), log.end(), '\n') == 1);
        MESSAGE("no usable GPU here: " << log);
    }
}

// engines/lfm2.cu's own config rules, each one line before any GPU work, on copies of the tiny committed models.
TEST_CASE("the lfm2 engine refuses configs it cannot run, in one line") {
    const std::string e = MONOCU_ENGINE_DIR "/lfm2";
    if (!built(e)) {
        MESSAGE("skipped: " << e << " not built");
        return;
    }
    TempDir dir;
    auto with_config = [&](const std::string& model, const std::string& from, const std::string& to) {
        return model_with_config(dir, model, from, to);
    };
    auto refused = [&](const std::string& m, const std::string& line) { check_config_refused(e, m, line); };
    std::string m = with_config("tiny-lfm2", "\"conv\",\n    \"full_attention\",\n    \"full_attention\",\n    \"conv\",\n    \"full_attention\"",
                    "\"conv\",\n    \"conv\",\n    \"conv\",\n    \"conv\",\n    \"conv\"");
    refused(m, "no layer is full_attention (transformers' LFM2 needs at least one)");
    refused(with_config("tiny-lfm2", "\"conv\",\n    \"full_attention\",\n    \"full_attention\"", "\"mamba\",\n    \"full_attention\",\n    \"full_attention\""),
            "layer_types[0] 'mamba' is not supported (full_attention, conv)");
    refused(with_config("tiny-lfm2-bias", "\"conv_L_cache\": 4", "\"conv_L_cache\": 9"), "'conv_L_cache' = 9 is not supported (1..8)");
    refused(with_config("tiny-lfm2-bias", "\"full_attn_idxs\": [\n    0,", "\"full_attn_idxs\": [\n    7,"), "full_attn_idxs holds 7; there are 4 layers");
    refused(with_config("tiny-lfm2-moe", "\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 7"), "'num_experts_per_tok' = 7 is not supported (1..6)");
    refused(with_config("tiny-lfm2-moe", "\"num_dense_layers\": 1", "\"num_dense_layers\": 5"), "'num_dense_layers' = 5 for 4 layers");
    refused(with_config("tiny-lfm2-bias", "\"conv_L_cache\": 4", "\"conv_L_cache\": null"), "missing required key 'conv_L_cache'");
    refused(with_config("tiny-lfm2-moe", "\"use_expert_bias\": true", "\"use_expert_bias\": null"), "missing required key 'use_expert_bias'");
}

TEST_CASE("the gpt_oss engine refuses configs it cannot run, in one line") {
    const std::string e = MONOCU_ENGINE_DIR "/gpt_oss";
    if (!built(e)) {
        MESSAGE("skipped: " << e << " not built");
        return;
    }
    TempDir dir;
    auto with_config = [&](const std::string& from, const std::string& to) { return model_with_config(dir, "tiny-gpt-oss", from, to); };
    auto refused = [&](const std::string& m, const std::string& line) { check_config_refused(e, m, line); };
    refused(with_config("\"swiglu_limit\": 7.0", "\"swiglu_limit\": 0"), "'swiglu_limit' = 0 must be positive");
    refused(with_config("\"layer_types\": [\n    \"sliding_attention\"", "\"layer_types\": [\n    \"mamba\""),
            "layer_types[0] 'mamba' is not supported");
    refused(with_config("\"sliding_window\": 16", "\"sliding_window\": null"), "layer 0 is sliding_attention but sliding_window is 0");
    refused(with_config("\"rope_type\": \"yarn\"", "\"rope_type\": \"longrope\""), "rope type 'longrope' is not supported (yarn, default)");
    refused(with_config("\"quant_method\": \"mxfp4\"", "\"quant_method\": \"gptq\""),
            "quantization_config 'gptq' is not supported (mxfp4 as published, or tools/quantize output)");
    refused(with_config("\"layer_types\": [\n    \"sliding_attention\",", "\"layer_types\": ["), "'layer_types' has 2 entries for 3 layers");
}

// tokenize --reply: a model's output split by the checkpoint's (here a template's) tool-call format.
TEST_CASE("tokenize --reply splits an output into content, reasoning and tool calls") {
    const std::string tk = MONOCU_HOST_BUILD_DIR "/tools/tokenize";
    if (!built(tk)) {
        MESSAGE("skipped: " << tk << " not built");
        return;
    }
    TempDir dir;
    std::string log;
    std::ofstream(dir / "out.txt") << "plan\n</think>\n\nOn it.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    std::ofstream(dir / "chat.json") << R"({"messages": [{"role": "user", "content": "Weather?"}], "enable_thinking": true})";
    REQUIRE_MESSAGE(run_command(tk + " --template tests/data/templates/qwq-32b.jinja --reply " + (dir / "out.txt") + " --chat " +
                                    (dir / "chat.json") + " 2>&1",
                                &log) == 0,
                    log);
    nlohmann::json j = nlohmann::json::parse(log);
    CHECK(j["format"] == "hermes");
    CHECK(j["message"]["content"] == "On it.");
    CHECK(j["message"]["reasoning_content"] == "plan");  // QwQ's prompt opened <think>
    CHECK(j["message"]["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(j["message"]["tool_calls"][0]["function"]["arguments"] == R"({"city":"Oslo"})");
    CHECK(j["warnings"].empty());
    std::ofstream(dir / "bad.txt") << "[TOOL_CALLS]f{1}";
    REQUIRE(run_command(tk + " --template tests/data/templates/mistral-nemo-instruct-2407.jinja --reply " + (dir / "bad.txt") + " 2>&1", &log) == 0);
    j = nlohmann::json::parse(log);
    CHECK(j["message"]["content"] == "[TOOL_CALLS]f{1}");
    CHECK(j["warnings"].size() == 1);
    CHECK(run_command(tk + " -m models/pycoder-13m --reply " + (dir / "out.txt"), &log) == 1);
    CHECK(log.find("has no chat template") != std::string::npos);
}

// The front command (tools/front/monocu.cpp): the engine for the checkpoint's model_type, with the same arguments.
TEST_CASE("monocu runs the engine that the checkpoint's model_type needs, or says in one line why it cannot") {
    const std::string f = MONOCU_ENGINE_DIR "/monocu";
    if (!built(f) || !built(MONOCU_ENGINE_DIR "/qwen3") || !built(MONOCU_ENGINE_DIR "/llama") || !built(MONOCU_ENGINE_DIR "/lfm2")) {
        MESSAGE("skipped: " << f << " or an engine not built");
        return;
    }
    std::string log;
    // -h after -m is the engine's own help, so its first line names the engine that ran.
    for (const auto& [dir, engine] : std::vector<std::pair<std::string, std::string>>{
             {"tiny-gqa4", "qwen3"}, {"tiny-qwen3-moe", "qwen3"}, {"tiny-mixtral", "llama"}, {"tiny-llama3", "llama"}, {"tiny-lfm2-moe", "lfm2"}}) {
        CAPTURE(dir);
        CHECK(run_command(f + " -m tests/data/models/" + dir + " -h", &log) == 0);
        CHECK(log.rfind("usage: " + engine + " -m MODEL_DIR", 0) == 0);
    }
    CHECK(run_command(f + " --help", &log) == 0);
    CHECK(log.find("qwen3_moe    qwen3") != std::string::npos);
    CHECK(log.find("mixtral      llama") != std::string::npos);
    auto refused = [&](const std::string& args, const std::string& line) {
        CAPTURE(args);
        CHECK(run_command(f + " " + args, &log) == 1);
        CHECK(log == "error: " + line + "\n");
    };
    TempDir dir;
    refused("-p hi", "monocu: give the checkpoint with -m MODEL_DIR (--help lists the model types)");
    refused("-m " + (dir / "none") + " -p hi", "-m " + (dir / "none") + ": no such folder");
    refused("-m " + dir.path + " -p hi", dir.path + ": no config.json in this folder");
    std::ofstream(dir / "config.json") << R"({"model_type": "bert"})";
    std::string names;
    size_t n;
    const monocu::ModelType* t = monocu::model_types(&n);
    for (size_t i = 0; i < n; i++) names += (i ? ", " : "") + std::string(t[i].name);
    refused("-m " + dir.path + " -p hi", (dir / "config.json") + ": model_type 'bert' is not supported (" + names + " are)");
    std::ofstream(dir / "config.json") << R"({"model_type": 3})";
    refused("-m " + dir.path, (dir / "config.json") + ": no model_type (a string) in config.json");
    // The engine's own checks follow: it ran with the same arguments.
    CHECK(run_command(f + " -m tests/data/models/tiny-gqa4 --no-such-flag", &log) == 2);
    CHECK(log == "error: unknown flag '--no-such-flag' (see --help)\n");
}

TEST_CASE("inspect shows a mixture's experts (what a token reads) and MXFP4 expert tensors") {
    const std::string ins = MONOCU_HOST_BUILD_DIR "/tools/inspect";
    if (!built(ins)) {
        MESSAGE("skipped: " << ins << " not built");
        return;
    }
    std::string log;
    REQUIRE(run_command(ins + " tests/data/models/tiny-qwen3-moe", &log) == 0);
    CHECK(log.find("3 of 10 experts per token") != std::string::npos);
    CHECK(log.find("mlp_only_layers          [0,2]") != std::string::npos);
    // GPT-OSS's layout: gate_up_proj_blocks U8 [E, 2 ffn, K / 32, 16] beside gate_up_proj_scales U8 [E, 2 ffn, K / 32].
    TempDir dir;
    monocu::SafetensorsWriter wr;
    wr.add("model.layers.0.mlp.experts.gate_up_proj_blocks", monocu::DType::U8, {4, 8, 2, 16}, [] { return std::vector<uint8_t>(4 * 8 * 2 * 16, 0x21); });
    wr.add("model.layers.0.mlp.experts.gate_up_proj_scales", monocu::DType::U8, {4, 8, 2}, [] { return std::vector<uint8_t>(4 * 8 * 2, 127); });
    wr.write(dir / "model.safetensors", {{"format", "pt"}});
    REQUIRE(run_command(ins + " " + (dir / "model.safetensors"), &log) == 0);
    CHECK(log.find("MXFP4: 1 tensors (+ their scales), 2048 weights in 1.06 KiB: 4.25 bits per weight") != std::string::npos);
}

// --dtype mxfp4: GPT-OSS's experts as OpenAI publishes them, each output row host/mxfp4.h's encoding of the column of
// transformers' input-major tensor; everything else copied bit for bit; a checkpoint without such experts is refused.
TEST_CASE("quantize --dtype mxfp4 writes GPT-OSS's experts in the published layout") {
    const std::string q = MONOCU_HOST_BUILD_DIR "/tools/quantize";
    if (!built(q)) {
        MESSAGE("skipped: " << q << " not built");
        return;
    }
    TempDir dir;
    std::string m = dir / "m", log;
    REQUIRE(run_command("mkdir -p " + m, &log) == 0);
    const int64_t E = 3, H = 64, F = 32;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 0.3f);
    std::vector<float> gu((size_t)E * H * 2 * F), dn((size_t)E * F * H), bias((size_t)E * 2 * F);
    for (auto* v : {&gu, &dn, &bias})
        for (float& x : *v) x = normal(rng);
    auto bytes = [](const std::vector<float>& v) {
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
        return b;
    };
    monocu::SafetensorsWriter w;
    w.add("model.layers.0.mlp.experts.gate_up_proj", monocu::DType::F32, {E, H, 2 * F}, [&] { return bytes(gu); });
    w.add("model.layers.0.mlp.experts.down_proj", monocu::DType::F32, {E, F, H}, [&] { return bytes(dn); });
    w.add("model.layers.0.mlp.experts.gate_up_proj_bias", monocu::DType::F32, {E, 2 * F}, [&] { return bytes(bias); });
    w.write(m + "/model.safetensors", {{"format", "pt"}});
    std::ofstream(m + "/config.json") << R"({"model_type": "gpt_oss"})";
    REQUIRE_MESSAGE(run_command(q + " " + m + " " + (dir / "out") + " --dtype mxfp4", &log) == 0, log);
    nlohmann::json cfg = nlohmann::json::parse(slurp(dir / "out/config.json"));
    CHECK(cfg["quantization_config"]["quant_method"] == "mxfp4");
    monocu::Checkpoint ck = monocu::Checkpoint::open(dir / "out");
    CHECK(ck.find("model.layers.0.mlp.experts.gate_up_proj") == nullptr);
    const monocu::TensorView& b = ck.get("model.layers.0.mlp.experts.gate_up_proj_blocks", monocu::DType::U8, {E, 2 * F, H / 32, 16});
    const monocu::TensorView& sc = ck.get("model.layers.0.mlp.experts.gate_up_proj_scales", monocu::DType::U8, {E, 2 * F, H / 32});
    ck.get("model.layers.0.mlp.experts.down_proj_blocks", monocu::DType::U8, {E, H, F / 32, 16});
    size_t bad = 0;
    std::vector<float> col(H);
    std::vector<uint8_t> eb(H / 2), es(H / 32);
    for (int64_t e = 0; e < E; e++)
        for (int64_t n = 0; n < 2 * F; n++) {
            for (int64_t k = 0; k < H; k++) col[k] = gu[(size_t)((e * H + k) * 2 * F + n)];
            monocu::mxfp4_encode_row(col.data(), (int)H, eb.data(), es.data());
            size_t row = (size_t)(e * 2 * F + n);
            bad += std::memcmp(eb.data(), b.data + row * (H / 2), H / 2) != 0;
            bad += std::memcmp(es.data(), sc.data + row * (H / 32), H / 32) != 0;
        }
    CHECK(bad == 0);
    const monocu::TensorView& bt = ck.get("model.layers.0.mlp.experts.gate_up_proj_bias", {E, 2 * F});
    CHECK(std::memcmp(bt.data, bias.data(), bias.size() * 4) == 0);
    // Nothing to write in mxfp4: refused, and nothing left behind.
    CHECK(run_command(q + " models/pycoder-13m " + (dir / "none") + " --dtype mxfp4", &log) == 1);
    CHECK(log.find("no mlp.experts.gate_up_proj") != std::string::npos);
    CHECK(access((dir / "none").c_str(), F_OK) != 0);
}
