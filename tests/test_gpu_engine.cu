// The engines against transformers on the tiny committed models (tests/data/models/<name>/): every tap
// within rel-L2 2e-2 of the float32 dump, greedy tokens identical up to the first near-tie, and the prompt run
// as decode steps (-ub 1) giving the prefill's logits. Runs the built engine binary as a user would
// (build/<ARCH>/qwen3 --ids ... --dump-dir ...), the one for the model's model_type.
#include <dirent.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "host/npy.h"
#include "test_util.h"

#ifndef MONOCU_BUILD_DIR
#define MONOCU_BUILD_DIR "build/sm_90"
#endif

using namespace monocu;
using namespace monocu_test;

static std::vector<std::string> test_models(const std::string& root) {
    std::vector<std::string> names;
    DIR* d = opendir(root.c_str());
    if (!d) return names;
    while (dirent* e = readdir(d))
        if (e->d_name[0] != '.' && access((root + "/" + e->d_name + "/ref/logits.npy").c_str(), R_OK) == 0) names.push_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

static std::string file_text(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The engine binary that runs a checkpoint folder: by config.json's model_type.
static std::string engine_for(const std::string& dir) {
    std::string cfg = file_text(dir + "/config.json"), engine = "qwen3";
    for (const char* t : {"\"llama\"", "\"mistral\"", "\"mixtral\"", "\"qwen2\"", "\"smollm3\""})
        if (cfg.find(std::string("\"model_type\": ") + t) != std::string::npos) engine = "llama";
    for (const char* t : {"\"lfm2\"", "\"lfm2_moe\""})
        if (cfg.find(std::string("\"model_type\": ") + t) != std::string::npos) engine = "lfm2";
    if (cfg.find("\"model_type\": \"gpt_oss\"") != std::string::npos) engine = "gpt_oss";
    return std::string(MONOCU_BUILD_DIR) + "/" + engine;
}

static double rel_l2(const NpyArray& a, const NpyArray& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < b.data.size(); i++) {
        double d = (double)a.data[i] - b.data[i];
        num += std::isfinite(a.data[i]) ? d * d : INFINITY;
        den += (double)b.data[i] * b.data[i];
    }
    return std::sqrt(num / den);
}

// Greedy tokens must agree until the reference's top-1/top-2 gap drops below this (random weights
// near-tie sometimes; past such a step the two continuations may legitimately differ), or below 1% of the
// reference logits' rms over the prompt, whichever is larger: our logits may differ from fp32's by ~1% of their
// scale (the taps' bar is 2%), so a smaller gap is a tie at our precision. (tiny-lfm2, logits' rms 7.1: its step 20
// has a gap of 0.061; its first runs with the Hopper prefill attention took the other token there, its decode steps
// (-ub 1) this one.)
constexpr float kClearGap = 0.05f;
constexpr double kClearGapOfRms = 0.01;

static double rms(const NpyArray& a) {
    double s = 0;
    for (float x : a.data) s += (double)x * x;
    return a.data.empty() ? 0.0 : std::sqrt(s / a.data.size());
}

TEST_CASE("every engine matches transformers on the tiny test models") {
    std::string root = "tests/data/models";
    std::vector<std::string> models = test_models(root);
    REQUIRE_MESSAGE(!models.empty(), "no test models with dumps under ", root);
    for (const std::string& name : models) {
        CAPTURE(name);
        std::string dir = root + "/" + name, engine = engine_for(dir);
        REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
        TempDir out;
        NpyArray ref_ids = npy_read(dir + "/ref/ids.npy"), gaps = npy_read(dir + "/ref/gen_gaps.npy");
        std::string cmd = engine + " -m " + dir + " --ids " + dir + "/prompt_ids.txt --temp 0 -q -c 256 -n " +
                          std::to_string(ref_ids.data.size()) + " --dump-dir " + out.path;
        // A mixture of experts takes transformers' expert choices for the prompt (a near tie may go either way in
        // bf16): the taps then measure the arithmetic; the routing kernel has its own test (test_gpu_kernels.cu).
        bool mixture = false;
        for (int l = 0; l < 64 && !mixture; l++) mixture = access((dir + strf("/ref/routing_%02d.npy", l)).c_str(), R_OK) == 0;
        if (mixture) cmd += " --force-routing " + dir + "/ref";
        std::string log;
        REQUIRE_MESSAGE(run_command(cmd, &log) == 0, log);
        std::vector<std::string> taps = {"embed", "final_norm", "logits"};
        for (int l = 0; access((dir + strf("/ref/layer_%02d.npy", l)).c_str(), R_OK) == 0; l++) taps.push_back(strf("layer_%02d", l));
        for (const std::string& tap : taps) {
            CAPTURE(tap);
            NpyArray ours = npy_read(out / (tap + ".npy")), ref = npy_read(dir + "/ref/" + tap + ".npy");
            REQUIRE(ours.shape == ref.shape);
            double e = rel_l2(ours, ref);
            CHECK_MESSAGE(e < 2e-2, "rel_l2 ", e);
        }
        // MXFP4 experts: the other prefill path for the experts (on Hopper the default is the grouped GEMM on the
        // codes, ops/gemm_mxfp4.cuh; MONOCU_MXFP4_GEMM=off dequantizes for cuBLAS) against the same references, and
        // near the default path (both multiply the same exact weights).
        if (engine.find("gpt_oss") != std::string::npos && file_text(dir + "/config.json").find("\"mxfp4\"") != std::string::npos) {
            TempDir grouped;
            std::string gcmd = cmd;
            const std::string dump = " --dump-dir " + out.path;
            REQUIRE(gcmd.find(dump) != std::string::npos);
            gcmd.replace(gcmd.find(dump), dump.size(), " --dump-dir " + grouped.path);
            REQUIRE_MESSAGE(run_command("MONOCU_MXFP4_GEMM=off " + gcmd, &log) == 0, log);
            for (const std::string& tap : taps) {
                CAPTURE(tap);
                NpyArray g = npy_read(grouped / (tap + ".npy")), ref = npy_read(dir + "/ref/" + tap + ".npy"), ours = npy_read(out / (tap + ".npy"));
                REQUIRE(g.shape == ref.shape);
                CHECK_MESSAGE(rel_l2(g, ref) < 2e-2, "MONOCU_MXFP4_GEMM=off: rel_l2 ", rel_l2(g, ref));
                CHECK_MESSAGE(rel_l2(g, ours) < 5e-3, "MONOCU_MXFP4_GEMM=off against the default path: rel_l2 ", rel_l2(g, ours));
            }
        }
        NpyArray ids = npy_read(out / "ids.npy");
        const double clear_gap = std::max((double)kClearGap, kClearGapOfRms * rms(npy_read(dir + "/ref/logits.npy")));
        size_t checked = 0;
        for (size_t i = 0; i < ref_ids.data.size() && gaps.data[i] >= clear_gap; i++, checked++) {
            CAPTURE(i);
            REQUIRE(i < ids.data.size());
            CHECK(ids.data[i] == ref_ids.data[i]);
        }
        MESSAGE(name, ": ", checked, " greedy tokens compared before the first near-tie");
        CHECK(checked >= 8);

        // The same prompt as 100 decode steps (-ub 1: one token per pass, the decode kernels): every position's
        // logits as the prefill's, and the same greedy tokens. Not for dynamic (NTK) rope past its
        // max_position_embeddings: there transformers itself rotates a prompt by its whole length, a decode step by
        // its own position (the engines follow it), so the two differ by design.
        if (file_text(dir + "/config.json").find("\"dynamic\"") != std::string::npos) {
            MESSAGE(name, ": dynamic rope, prefill and decode steps differ by design (not compared)");
            continue;
        }
        TempDir steps;
        REQUIRE_MESSAGE(run_command(cmd + " -ub 1 --dump-dir " + steps.path, &log) == 0, log);
        for (const char* tap : {"embed", "layer_00", "final_norm", "logits"}) {
            CAPTURE(tap);
            NpyArray a = npy_read(steps / (std::string(tap) + ".npy")), p = npy_read(out / (std::string(tap) + ".npy"));
            REQUIRE(a.shape == p.shape);
            double e = rel_l2(a, p);
            CHECK_MESSAGE(e < 2e-2, "decode steps vs prefill rel_l2 ", e);
        }
        NpyArray step_ids = npy_read(steps / "ids.npy");
        for (size_t i = 0; i < checked; i++) CHECK(step_ids.data.at(i) == ids.data[i]);
    }
}

// KV eviction (--kv-budget, ops/h2o.cuh) in every engine family: until the cache first holds more than the budget
// the logits are the full cache's; after that they differ (some keys are gone) and stay finite; the prompt as
// decode steps and in chunks. A sliding-window model refuses eviction in one line.
TEST_CASE("KV eviction in every engine: the full cache's logits until the budget is reached, finite after") {
    std::string root = "tests/data/models";
    for (const char* name : {"tiny-gqa4", "tiny-llama3", "tiny-lfm2"}) {
        CAPTURE(name);
        std::string dir = root + "/" + name, engine = engine_for(dir);
        REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
        std::string cmd = engine + " -m " + dir + " --ids " + dir + "/prompt_ids.txt --temp 0 -q -c 256 -n 1";
        for (int ub : {1, 16}) {  // 100 prompt tokens; with chunks of 16, the cache first overflows 40 rows after the 3rd (48)
            CAPTURE(ub);
            int same_until = ub == 1 ? 41 : 48;
            TempDir full, evict;
            std::string log, u = " -ub " + std::to_string(ub);
            REQUIRE_MESSAGE(run_command(cmd + u + " --dump-dir " + full.path, &log) == 0, log);
            REQUIRE_MESSAGE(run_command(cmd + u + " --kv-budget 40 --kv-window 10 --dump-dir " + evict.path, &log) == 0, log);
            NpyArray a = npy_read(full / "logits.npy"), b = npy_read(evict / "logits.npy");
            REQUIRE(a.shape == b.shape);
            size_t vocab = a.shape.back(), rows = a.data.size() / vocab;
            REQUIRE(rows == 100);
            double before = 0, after = 0, norm = 0;
            size_t non_finite = 0;
            for (size_t i = 0; i < a.data.size(); i++) {
                double d = (double)a.data[i] - b.data[i];
                non_finite += !std::isfinite(b.data[i]);
                if (i / vocab < (size_t)same_until) before = std::max(before, std::fabs(d));
                else after = std::max(after, std::fabs(d));
                norm = std::max(norm, std::fabs((double)a.data[i]));
            }
            CHECK(non_finite == 0);
            CHECK_MESSAGE(before < 1e-3 * norm, "before the first eviction, max |diff| ", before, " of max |logit| ", norm);
            CHECK_MESSAGE(after > 1e-3 * norm, "after it, max |diff| ", after);
        }
        // A budget that holds the whole context evicts nothing: the same logits.
        TempDir full, big;
        std::string log;
        REQUIRE_MESSAGE(run_command(cmd + " --dump-dir " + full.path, &log) == 0, log);
        REQUIRE_MESSAGE(run_command(cmd + " --kv-budget 256 --dump-dir " + big.path, &log) == 0, log);
        CHECK(npy_read(full / "logits.npy").data == npy_read(big / "logits.npy").data);
    }
    std::string dir = root + "/tiny-mistral", log;
    int rc = run_command(engine_for(dir) + " -m " + dir + " --ids " + dir + "/prompt_ids.txt -q -n 1 --kv-budget 40", &log);
    CHECK(rc != 0);
    CHECK_MESSAGE(log.find("sliding-window") != std::string::npos, log);
}

// The model shipped in models/ against transformers on three prompts (tests/data/golden/): our tokenizer
// gives transformers' prompt ids, every tap is within rel-L2 2e-2 of the float32 dump, and the greedy
// 128 tokens (or up to the end-of-text token) equal transformers bf16's token for token.
TEST_CASE("shipped model: greedy tokens identical to transformers on the golden prompts") {
    std::string engine = std::string(MONOCU_BUILD_DIR) + "/qwen3", model = "models/pycoder-13m";
    std::string root = "tests/data/golden/pycoder-13m";
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    for (std::string p : {"p0", "p1", "p2"}) {
        CAPTURE(p);
        std::string dir = root + "/" + p;
        TempDir out;
        std::string cmd = engine + " -m " + model + " -f " + dir + "/prompt.txt --raw --temp 0 -n 128 -q --dump-dir " + out.path;
        std::string log;
        REQUIRE_MESSAGE(run_command(cmd, &log) == 0, log);
        CHECK(npy_read(out / "prompt_ids.npy").data == npy_read(dir + "/ref/prompt_ids.npy").data);
        for (const char* tap : {"embed", "layer_00", "layer_03", "layer_05", "final_norm", "logits"}) {
            CAPTURE(tap);
            double e = rel_l2(npy_read(out / (std::string(tap) + ".npy")), npy_read(dir + "/ref/" + tap + ".npy"));
            CHECK_MESSAGE(e < 2e-2, "rel_l2 ", e);
        }
        std::vector<float> ours = npy_read(out / "ids.npy").data, ref = npy_read(dir + "/hf_bf16_ids.npy").data;
        CHECK(ours == ref);
        MESSAGE(p, ": ", ours.size(), " greedy tokens, ", ours == ref ? "identical" : "DIFFERENT");
    }
}

// GPTQ end to end: the engine dumps its projection inputs (--dump-inputs) for a prompt, tools/quantize
// --calib quantizes from them, and the engine's logits on that prompt are closer to bf16's than with
// round-to-nearest (in-sample, so the difference is large and certain).
TEST_CASE("shipped model: --dump-inputs feeds tools/quantize --calib, and GPTQ lowers the logit error on its text") {
    std::string engine = std::string(MONOCU_BUILD_DIR) + "/qwen3", model = "models/pycoder-13m", quantize = "build/tools/quantize";
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    if (access(quantize.c_str(), X_OK) != 0) {
        MESSAGE("skipped: ", quantize, " not built");
        return;
    }
    std::string prompt = "tests/data/golden/pycoder-13m/p0/prompt.txt";
    TempDir dir;
    auto run_engine = [&](const std::string& m, const std::string& out, const std::string& extra) {
        std::string log;
        REQUIRE_MESSAGE(run_command(engine + " -m " + m + " -f " + prompt + " --raw --temp 0 -n 1 -q --dump-dir " + out + extra, &log) == 0, log);
        return npy_read(out + "/logits.npy");
    };
    NpyArray base = run_engine(model, dir / "bf16", " --dump-inputs");
    const int T = (int)base.shape[0];
    for (const auto& tap : std::vector<std::pair<std::string, int>>{{"layer_00_attn_in", 384}, {"layer_02_o_in", 384},
                                                                      {"layer_04_mlp_in", 384}, {"layer_05_down_in", 1152}}) {
        const std::string& name = tap.first;
        const int width = tap.second;
        CAPTURE(name);
        NpyArray a = npy_read(dir / "bf16/" + name + ".npy");
        CHECK(a.shape == std::vector<int64_t>{T, width});
        double ss = 0;
        for (float v : a.data) ss += (double)v * v;
        CHECK(std::isfinite(ss));
        CHECK(ss > 0);
    }
    std::string log;
    REQUIRE_MESSAGE(run_command(quantize + " " + model + " " + (dir / "rtn") + " --dtype int4", &log) == 0, log);
    REQUIRE_MESSAGE(run_command(quantize + " " + model + " " + (dir / "gptq") + " --dtype int4 --calib " + (dir / "bf16"), &log) == 0, log);
    double e_rtn = rel_l2(run_engine(dir / "rtn", dir / "rtn-out", ""), base);
    double e_gptq = rel_l2(run_engine(dir / "gptq", dir / "gptq-out", ""), base);
    MESSAGE("int4 logits vs bf16 on the calibration prompt: round-to-nearest ", e_rtn, ", GPTQ ", e_gptq);
    CHECK(e_gptq < 0.8 * e_rtn);
}

// -i/-o batch files (runtime/batch_file.cuh) on the shipped model: each line's greedy completion equals the same
// prompt run alone with -p; a bad line is reported with its number and skipped, the run goes on; JSON lines
// carry their own max_tokens; empty lines are skipped; the finish reasons are right.
TEST_CASE("batch files: one JSON result per line, the same text as -p, bad lines reported and skipped") {
    std::string engine = std::string(MONOCU_BUILD_DIR) + "/qwen3", model = "models/pycoder-13m";
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    TempDir dir;
    {
        std::ofstream in(dir / "in.txt");
        in << "def add(a, b):\n"                                        // line 1: text
           << "{\"prompt\": \"import os\\n\", \"max_tokens\": 5}\n"     // line 2: JSON with its own limit
           << "\n"                                                      // line 3: skipped
           << "{\"prompt\": 3}\n"                                       // line 4: bad
           << "{\"prompt\": \"class A:\"\n";                            // line 5: not JSON
    }
    std::string log;
    REQUIRE_MESSAGE(run_command(engine + " -m " + model + " --raw --temp 0 -n 24 -i " + (dir / "in.txt") + " -o " + (dir / "out.jsonl"), &log) == 0, log);
    CHECK(log.find("in.txt:4: \"prompt\" must be a string (skipped)") != std::string::npos);
    CHECK(log.find("in.txt:5: not a valid JSON object (skipped)") != std::string::npos);
    std::ifstream f(dir / "out.jsonl");
    std::vector<std::string> lines;
    for (std::string l; std::getline(f, l);) lines.push_back(l);
    REQUIRE(lines.size() == 4);
    CHECK(lines[0].find("\"line\":1,") != std::string::npos);
    CHECK(lines[0].find("\"completion_tokens\":24") != std::string::npos);
    CHECK(lines[0].find("\"finish_reason\":\"length\"") != std::string::npos);
    CHECK(lines[1].find("\"line\":2,") != std::string::npos);
    CHECK(lines[1].find("\"completion_tokens\":5") != std::string::npos);
    CHECK(lines[2].find("\"line\":4,\"error\"") != std::string::npos);
    CHECK(lines[3].find("\"line\":5,\"error\"") != std::string::npos);
    // Line 1's text is what -p prints for the same prompt (-q: the completion alone, then a newline).
    std::string alone;
    REQUIRE(run_command(engine + " -m " + model + " --raw --temp 0 -n 24 -q -p 'def add(a, b):'", &alone) == 0);
    size_t t = lines[0].find("\"text\":\"");
    REQUIRE(t != std::string::npos);
    std::string expected;  // alone's completion as a JSON string (the model writes ASCII Python)
    for (char ch : alone.substr(0, alone.size() - 1)) {
        if (ch == '\n') expected += "\\n";
        else if (ch == '"') expected += "\\\"";
        else if (ch == '\\') expected += "\\\\";
        else if (ch == '\t') expected += "\\t";
        else expected += ch;
    }
    CHECK(lines[0].compare(t + 8, expected.size(), expected) == 0);
}

// A batch file's lines with their own settings, on the serial path and through the batched core (-np 4): a stop
// string cuts the text before it (finish_reason "stop", the tokens up to the one that completed it counted); a line's
// "temperature": 0 is greedy under --temp 1; two lines with the same "seed" sample the same text.
TEST_CASE("batch files: a line's stop strings, temperature and seed") {
    std::string engine = std::string(MONOCU_BUILD_DIR) + "/qwen3", model = "models/pycoder-13m";
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    TempDir dir;
    std::string greedy;  // the greedy completion, from -p
    REQUIRE(run_command(engine + " -m " + model + " --raw --temp 0 -n 24 -q -p 'def add(a, b):'", &greedy) == 0);
    greedy.pop_back();  // (-q prints a newline after the completion)
    REQUIRE(greedy.size() > 12);
    // A stop string from the middle of the completion: the text ends where it first appears.
    const std::string stop = greedy.substr(greedy.size() / 2, 3);
    const std::string cut = greedy.substr(0, greedy.find(stop));
    {
        nlohmann::ordered_json a = {{"prompt", "def add(a, b):"}, {"max_tokens", 24}, {"temperature", 0}, {"stop", {"@@never@@", stop}}};
        nlohmann::ordered_json b = {{"prompt", "def add(a, b):"}, {"max_tokens", 24}, {"temperature", 0}};
        nlohmann::ordered_json c = {{"prompt", "import numpy as np\n"}, {"max_tokens", 24}, {"seed", 5}, {"top_k", 40}};
        nlohmann::ordered_json d = {{"prompt", "def f(x):"}, {"max_tokens", 1}, {"temperature", 5}};  // out of range
        std::ofstream(dir / "in.jsonl") << a.dump() << "\n" << b.dump() << "\n" << c.dump() << "\n" << c.dump() << "\n" << d.dump() << "\n";
    }
    for (std::string np : {"", " -np 4"}) {
        CAPTURE(np);
        std::string log;
        REQUIRE_MESSAGE(run_command(engine + " -m " + model + " --raw --temp 1 --seed 3 -n 24 -i " + (dir / "in.jsonl") + " -o " + (dir / "out.jsonl") + np, &log) == 0, log);
        CHECK(log.find("in.jsonl:5: 'temperature' must be between 0.0 and 2.0, got 5 (skipped)") != std::string::npos);
        std::ifstream f(dir / "out.jsonl");
        std::vector<nlohmann::json> out;
        for (std::string l; std::getline(f, l);) out.push_back(nlohmann::json::parse(l));
        REQUIRE(out.size() == 5);
        CHECK(out[0]["text"] == cut);
        CHECK(out[0]["finish_reason"] == "stop");
        CHECK(out[0]["completion_tokens"].get<int>() < 24);
        CHECK(out[1]["text"] == greedy);
        CHECK(out[1]["finish_reason"] == "length");
        CHECK(out[2]["text"] == out[3]["text"]);
        CHECK(out[2]["completion_tokens"] == 24);
        CHECK(out[4].contains("error"));
    }
}

// A copy of the shipped model (dir/m) whose tokenizer_config.json carries chat template `tmpl`.
static std::string shipped_model_with_template(const TempDir& dir, const std::string& tmpl) {
    std::string m = dir / "m", log;
    REQUIRE(run_command("cp -r models/pycoder-13m " + m, &log) == 0);
    nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(file_text(m + "/tokenizer_config.json"));
    cfg["chat_template"] = tmpl;
    std::ofstream(m + "/tokenizer_config.json") << cfg.dump(2);
    return m;
}

// -cnv (runtime/chat_loop.cuh): the shipped model with a chat template added (any Jinja template runs), two turns
// from stdin, then /exit. The second turn runs only what the KV cache does not hold (-v says how many prompt tokens
// came from the cache), both replies are printed, and the program ends with status 0.
TEST_CASE("chat: two turns keep the KV cache, then /exit") {
    std::string engine = std::string(MONOCU_BUILD_DIR) + "/qwen3";
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    TempDir dir;
    std::string m = shipped_model_with_template(dir, "{% for m in messages %}# {{ m.role }}\n{{ m.content }}\n{% endfor %}"
                                                     "{% if add_generation_prompt %}# assistant\n{% endif %}"),
                log;
    std::ofstream(dir / "turns.txt") << "def add(a, b):\nclass Stack:\n/exit\n";
    REQUIRE_MESSAGE(run_command(engine + " -m " + m + " -cnv --temp 0 -n 12 -v < " + (dir / "turns.txt"), &log) == 0, log);
    CHECK(log.find("> ") != std::string::npos);
    const std::string turn1 = "prompt tokens (0 from the cache)";
    size_t first = log.find(turn1);
    REQUIRE_MESSAGE(first != std::string::npos, log);
    size_t second = log.find(" from the cache)", first + turn1.size());
    REQUIRE_MESSAGE(second != std::string::npos, log);
    size_t open = log.rfind('(', second);
    int reused = std::atoi(log.c_str() + open + 1);
    CHECK_MESSAGE(reused > 5, "second turn reused ", reused, " tokens: ", log);
}

// Chat replies read apart (tokenizer/chat_reply.h) through the batch file: the shipped model with a template that
// offers tools (so replies are read as Hermes) and opens <think> for the model, so whatever it writes before a
// </think> is reasoning. A line's "tools" reach the template (a longer prompt than the same messages without
// them); --tools gives every line tools; a one-shot -p with --tools runs; -p with --show-reasoning / --hide-reasoning.
TEST_CASE("chat replies: tools reach the template, reasoning comes back apart") {
    std::string engine = std::string(MONOCU_BUILD_DIR) + "/qwen3";
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    TempDir dir;
    std::string m = shipped_model_with_template(dir, "{% if tools %}# tools\n{% for t in tools %}{{ t.function.name }}\n{% endfor %}"
                                                     "Call one as <tool_call>{json}</tool_call>\n{% endif %}{% for m in messages %}"
                                                     "# {{ m.role }}\n{{ m.content }}\n{% endfor %}"
                                                     "{% if add_generation_prompt %}# assistant\n<think>\n{% endif %}"),
                log;
    const std::string tools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
    std::ofstream(dir / "tools.json") << tools;
    {
        std::ofstream in(dir / "in.jsonl");
        in << R"({"messages": [{"role": "user", "content": "def add(a, b):"}]})" << "\n"
           << R"({"messages": [{"role": "user", "content": "def add(a, b):"}], "tools": )" << tools << "}\n";
    }
    REQUIRE_MESSAGE(run_command(engine + " -m " + m + " --temp 0 -n 16 -i " + (dir / "in.jsonl") + " -o " + (dir / "out.jsonl"), &log) == 0, log);
    std::ifstream f(dir / "out.jsonl");
    std::vector<nlohmann::json> out;
    for (std::string l; std::getline(f, l);) out.push_back(nlohmann::json::parse(l));
    REQUIRE(out.size() == 2);
    for (const nlohmann::json& r : out) {
        CAPTURE(r.dump());
        REQUIRE(r.contains("text"));
        std::string text = r["text"], reasoning = r.value("reasoning_content", std::string());
        size_t close = text.find("</think>");
        CHECK(reasoning == text.substr(0, close));  // everything before </think>, or all of it
        CHECK(!r.contains("warnings"));
    }
    CHECK(out[1]["prompt_tokens"].get<int>() > out[0]["prompt_tokens"].get<int>());
    // --tools: line 1 now gets the tools too, so its prompt is line 2's length.
    REQUIRE_MESSAGE(run_command(engine + " -m " + m + " --temp 0 -n 16 --tools " + (dir / "tools.json") + " -i " + (dir / "in.jsonl") + " -o " +
                                    (dir / "out2.jsonl"),
                                &log) == 0,
                    log);
    std::ifstream f2(dir / "out2.jsonl");
    std::string first;
    REQUIRE(std::getline(f2, first));
    CHECK(nlohmann::json::parse(first)["prompt_tokens"] == out[1]["prompt_tokens"]);
    CHECK_MESSAGE(run_command(engine + " -m " + m + " --temp 0 -n 8 -q --tools " + (dir / "tools.json") + " -p 'def add(a, b):'", &log) == 0, log);
    // -p through the template prints line 1's reply (the same prompt, greedy); --hide-reasoning leaves out what it
    // writes before </think> (pieces are skipped whole, so the one that closes it may show its tail).
    std::string shown, hidden;
    const std::string one = "( " + engine + " -m " + m + " --temp 0 -n 16 -q -p 'def add(a, b):' ";
    REQUIRE_MESSAGE(run_command(one + "--show-reasoning ) 2>/dev/null", &shown) == 0, shown);
    REQUIRE_MESSAGE(run_command(one + "--hide-reasoning ) 2>/dev/null", &hidden) == 0, hidden);
    const std::string text = out[0]["text"];
    CHECK(shown == text + "\n");
    CAPTURE(hidden);
    REQUIRE(!hidden.empty());
    hidden.pop_back();  // the newline after the reply
    const size_t close = text.find("</think>");
    if (close == std::string::npos) CHECK(hidden.empty());
    else CHECK((hidden.size() >= text.size() - close - 8 && text.size() >= hidden.size() && text.compare(text.size() - hidden.size(), hidden.size(), hidden) == 0));
}

// ---- the batched core (runtime/batched.cuh: -np / --parallel) ----

// The JSONL results of a batch run, by line number.
static std::map<int, nlohmann::json> batch_results(const std::string& path) {
    std::map<int, nlohmann::json> r;
    std::ifstream f(path);
    for (std::string l; std::getline(f, l);) {
        nlohmann::json j = nlohmann::json::parse(l);
        r[j["line"].get<int>()] = j;
    }
    return r;
}

// Greedy tokens of a batched run against a reference run of the same lines: equal until the first step where either
// run's top-1/top-2 gap is below kClearGap (the two passes round differently: GEMM rows against a GEMV, a chunk
// attending through the cache against its own fp16 keys; with logits near 12 that moved one run's gap of a float32
// tie, 0.009, past 0.05, kb/status.md); returns how many tokens were compared. A mixture
// (not strict) may also route a token differently where two experts' scores nearly tie (the router's GEMM rows
// against its decode GEMV): there each line counts only up to its first difference.
static size_t compare_batched(const std::map<int, nlohmann::json>& ref, const std::map<int, nlohmann::json>& got, bool strict) {
    size_t compared = 0;
    REQUIRE(ref.size() == got.size());
    for (const auto& kv : ref) {
        const int line = kv.first;
        const nlohmann::json& r = kv.second;
        CAPTURE(line);
        const nlohmann::json& g = got.at(line);
        REQUIRE(!g.contains("error"));
        std::vector<int> a = r["completion_ids"], b = g["completion_ids"];
        std::vector<float> gaps = r["gaps"], got_gaps = g["gaps"];
        for (size_t i = 0; i < a.size() && gaps[i] >= kClearGap && (i >= got_gaps.size() || got_gaps[i] >= kClearGap); i++, compared++) {
            CAPTURE(i);
            REQUIRE(i < b.size());
            if (!strict && a[i] != b[i]) break;
            CHECK(a[i] == b[i]);
        }
    }
    return compared;
}

// Every engine that runs --parallel, on the tiny models and on the shipped one: the batched core with one sequence
// gives exactly the serial path's tokens (the same kernels over a paged cache); many sequences at once, with prompts
// cut into chunks by a small token budget, prefix-cache hits (half the prompts share their first 40 tokens) and a
// pool small enough to force preemption, give each prompt its solo tokens up to the first near-tie. LFM2 (a conv state
// per sequence) takes part too, without prefix-cache hits (its state cannot start from a cached prefix).
TEST_CASE("batched core: every sequence gets its solo tokens, through chunks, prefix hits and preemption") {
    std::vector<std::string> dirs;
    for (const std::string& name : test_models("tests/data/models")) dirs.push_back("tests/data/models/" + name);
    dirs.push_back("models/pycoder-13m");
    for (const std::string& dir : dirs) {
        CAPTURE(dir);
        std::string engine = engine_for(dir), log;
        REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
        nlohmann::json cfg = nlohmann::json::parse(file_text(dir + "/config.json"));
        int vocab = cfg["vocab_size"].get<int>();
        // "dynamic" (NTK) RoPE past max_position_embeddings rotates a pass's rows with frequencies of that pass's length,
        // as transformers does: a prompt cut into chunks has keys a whole solo pass would not. Such a model shares no
        // prefix blocks (ModelInfo::share_prefix), so -np 1 equals the serial path on every line; the chunked runs are
        // compared, like a mixture, only up to each line's first difference.
        bool pass_dependent = false;
        for (const char* key : {"rope_scaling", "rope_parameters"})  // (older and newer transformers' names)
            if (cfg.contains(key) && cfg[key].is_object() && cfg[key].value("rope_type", cfg[key].value("type", "")) == "dynamic") pass_dependent = true;
        TempDir tmp;
        {
            std::ofstream in(tmp / "in.jsonl");
            std::mt19937 rng(7);
            std::vector<int> shared(40);
            for (int& t : shared) t = (int)(rng() % vocab);
            for (int i = 0; i < 64; i++) {
                std::vector<int> ids;
                if (i % 2) ids = shared;
                int n = 1 + (int)(rng() % 90);
                for (int k = 0; k < n; k++) ids.push_back((int)(rng() % vocab));
                nlohmann::json line = {{"prompt_ids", ids}, {"max_tokens", 4 + (int)(rng() % 20)}, {"return_gaps", true}};
                in << line.dump() << "\n";
            }
        }
        std::string base = engine + " -m " + dir + " --temp 0 -c 256 -i " + (tmp / "in.jsonl");
        REQUIRE_MESSAGE(run_command(base + " -o " + (tmp / "serial.jsonl"), &log) == 0, log);
        REQUIRE_MESSAGE(run_command(base + " -np 1 -o " + (tmp / "np1.jsonl"), &log) == 0, log);
        auto serial = batch_results(tmp / "serial.jsonl"), one = batch_results(tmp / "np1.jsonl");
        REQUIRE(serial.size() == 64);
        REQUIRE(one.size() == 64);
        for (const auto& kv : serial) {  // one at a time: the same tokens exactly, where no prefix came from the cache
            const int line = kv.first;
            const nlohmann::json& r = kv.second;
            CAPTURE(line);
            if (line % 2 == 0 && !pass_dependent) continue;  // (even lines: i odd, the shared prefix may come from the cache)
            CHECK(one.at(line)["completion_ids"] == r["completion_ids"]);
            CHECK(one.at(line)["completion_tokens"] == r["completion_tokens"]);
            CHECK(one.at(line)["finish_reason"] == r["finish_reason"]);
        }
        struct Run {
            std::string flags;
            std::string expect;  // a line the run must print (stderr)
        };
        const bool mixture = cfg.contains("num_local_experts") || cfg.contains("num_experts");
        for (Run run : {Run{"-np 64", "passes"}, Run{"-np 8 --batch-tokens 32", "prefix cache"}, Run{"-np 16 --kv-blocks 24", "preemptions"}}) {
            CAPTURE(run.flags);
            REQUIRE_MESSAGE(run_command(base + " " + run.flags + " -o " + (tmp / "np.jsonl"), &log) == 0, log);
            auto got = batch_results(tmp / "np.jsonl");
            size_t compared = compare_batched(one, got, !mixture && !pass_dependent), total = 0;
            for (const auto& [line, r] : one) total += r["completion_ids"].size();
            MESSAGE(dir, " ", run.flags, ": ", compared, " of ", total, " tokens compared before a near-tie");
            if (!(pass_dependent && run.flags.find("batch-tokens") != std::string::npos))  // (32-token chunks: other frequencies)
                CHECK(compared * 2 >= total);
            CHECK(log.find(run.expect) != std::string::npos);
            if (run.flags.find("kv-blocks") != std::string::npos) CHECK(log.find(", 0 preemptions") == std::string::npos);
            const bool running_state = engine.find("/lfm2") != std::string::npos;
            if (run.flags.find("batch-tokens") != std::string::npos)
                CHECK((log.find("prefix cache 0 of") == std::string::npos) != (running_state || pass_dependent));
        }
    }
}

// FP8 and INT4 weights in the batched core (the shipped model, quantized at load): decode steps of more than a few
// sequences run ops/quant_rows.cuh, one sequence the GEMV; each line gets its -np 1 tokens up to the first near-tie.
TEST_CASE("batched core over FP8 and INT4 weights: 16 and 64 sequences give each line its -np 1 tokens") {
    const std::string dir = "models/pycoder-13m", engine = engine_for(dir);
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    TempDir tmp;
    {
        std::ofstream in(tmp / "in.jsonl");
        std::mt19937 rng(11);
        for (int i = 0; i < 64; i++) {
            std::vector<int> ids;
            int n = 1 + (int)(rng() % 60);
            for (int k = 0; k < n; k++) ids.push_back(1 + (int)(rng() % 4000));
            nlohmann::json line = {{"prompt_ids", ids}, {"max_tokens", 8 + (int)(rng() % 24)}, {"return_gaps", true}};
            in << line.dump() << "\n";
        }
    }
    for (std::string dtype : {"fp8", "int4"}) {
    CAPTURE(dtype);
    std::string base = engine + " -m " + dir + " --dtype " + dtype + " --temp 0 -c 256 -i " + (tmp / "in.jsonl"), log;
    REQUIRE_MESSAGE(run_command(base + " -np 1 -o " + (tmp / "np1.jsonl"), &log) == 0, log);
    auto one = batch_results(tmp / "np1.jsonl");
    REQUIRE(one.size() == 64);
    for (std::string flags : {"-np 16", "-np 64"}) {
        CAPTURE(flags);
        REQUIRE_MESSAGE(run_command(base + " " + flags + " -o " + (tmp / "np.jsonl"), &log) == 0, log);
        size_t compared = compare_batched(one, batch_results(tmp / "np.jsonl"), true), total = 0;
        for (const auto& [line, r] : one) total += r["completion_ids"].size();
        MESSAGE(dtype, " ", flags, ": ", compared, " of ", total, " tokens compared before a near-tie");
        CHECK(compared * 3 >= total);  // (the quantized model's ties come sooner: INT4 compared 48-49% on the H200)
    }
    }
}

// A sliding window on every layer (tiny-mistral, 24 positions): the batched core releases the blocks behind each
// sequence's window after every pass (ModelInfo::kv_window, the Scheduler's window) and points their table entries at the
// zeroed padding block. Four sequences (prompts of 40-69 tokens, so blocks go during the prompt) generating far past
// the window in a pool too small to hold them whole: nobody is preempted (each holds at most (24 + 32) / 16 + 1 = 5 of
// the 23 blocks; without the release they would need up to 16 each), and every line gets its -np 1 tokens (a pool
// that holds everything) up to the first near-tie; -np 1 (which releases too) gives the serial path's tokens exactly.
TEST_CASE("batched core with a sliding window: blocks behind the window are released, tokens unchanged") {
    const std::string dir = "tests/data/models/tiny-mistral", engine = engine_for(dir);
    REQUIRE_MESSAGE(access(engine.c_str(), X_OK) == 0, engine, " not built (run make)");
    nlohmann::json cfg = nlohmann::json::parse(file_text(dir + "/config.json"));
    REQUIRE(cfg["sliding_window"].get<int>() == 24);
    TempDir tmp;
    {
        std::ofstream in(tmp / "in.jsonl");
        std::mt19937 rng(3);
        for (int i = 0; i < 8; i++) {
            std::vector<int> ids;
            for (int k = 0, n = 40 + (int)(rng() % 30); k < n; k++) ids.push_back((int)(rng() % 256));  // (released during the prompt)
            nlohmann::json line = {{"prompt_ids", ids}, {"max_tokens", 150 + (int)(rng() % 30)}, {"return_gaps", true}};
            in << line.dump() << "\n";
        }
    }
    std::string base = engine + " -m " + dir + " --temp 0 -c 256 -i " + (tmp / "in.jsonl"), log;
    REQUIRE_MESSAGE(run_command(base + " -o " + (tmp / "serial.jsonl"), &log) == 0, log);
    REQUIRE_MESSAGE(run_command(base + " -np 1 -o " + (tmp / "np1.jsonl"), &log) == 0, log);
    REQUIRE_MESSAGE(run_command(base + " -np 4 --batch-tokens 32 --kv-blocks 24 -o " + (tmp / "np.jsonl"), &log) == 0, log);
    CHECK_MESSAGE(log.find(", 0 preemptions") != std::string::npos, log);
    auto serial = batch_results(tmp / "serial.jsonl"), one = batch_results(tmp / "np1.jsonl");
    REQUIRE(serial.size() == 8);
    REQUIRE(one.size() == 8);
    for (const auto& [line, r] : serial) CHECK(one.at(line)["completion_ids"] == r["completion_ids"]);
    size_t compared = compare_batched(one, batch_results(tmp / "np.jsonl"), true), total = 0;
    for (const auto& [line, r] : one) total += r["completion_ids"].size();
    MESSAGE("tiny-mistral -np 4 --kv-blocks 24: ", compared, " of ", total, " tokens compared before a near-tie");
    CHECK(compared >= 64);  // (long replies of a 256-token vocabulary meet a near tie early: 149 of 1,010 on the H200)
}
