// quantize — write a pre-quantized checkpoint that the engines load directly (CPU only, runs anywhere).
//
//   build/tools/quantize IN_DIR OUT_DIR --dtype fp8|int4 [--lm-head fp8|bf16] [--calib DIR[,DIR...] [--damp 0.01]]
//   build/tools/quantize IN_DIR OUT_DIR --dtype mxfp4          (GPT-OSS: the experts as OpenAI publishes them)
//
// Every projection (q/k/v/o/gate/up/down_proj; LFM2's in_proj, out_proj and w1/w2/w3, its experts' too; not a
// mixture's router, which the engines keep bf16) becomes, under its own name:
//   fp8:  P.weight F8_E4M3 [N][K] + P.weight_scale F32 [N][K/128]   (per 128 inputs of a row, s = max|w| / 448)
//   int4: P.qweight U8 [N][K/2] + P.scales BF16 [N][K/128]           (symmetric groups of 128; quant.h)
// The output projection follows the engines' quantize-on-load: left bf16 with --dtype fp8 (as Qwen's FP8
// releases leave it), FP8 with --dtype int4 (lm_head.weight; from embed_tokens when the model ties them);
// --lm-head overrides. Everything else (embeddings, norms) is copied unchanged. config.json gains
// "quantization_config": {"quant_method": "monocu", "weights": "fp8"|"int4", "lm_head": "fp8"}; the
// tokenizer and generation files are copied. The arithmetic is quant.h's, the same as the GPU's
// quantize-on-load, so an engine gives bit-identical logits either way.
//
// --calib quantizes the projections with GPTQ instead (gptq.h), in the same formats: each DIR is the
// --dump-dir of a bf16 engine run with --dump-inputs over calibration text (never the text you evaluate
// on), holding every layer's projection inputs (layer_NN_attn_in / o_in / mlp_in / down_in.npy); the tool
// sums their Gram matrices over all DIRs. An FP8 output projection is GPTQ'd too, from final_norm.npy (its
// input, which every --dump-dir holds); a bf16 one stays as it is. config.json's quantization_config then
// also says "method": "gptq" and the number of calibration tokens.
//
// --dtype mxfp4 writes a GPT-OSS checkpoint's experts (layer.mlp.experts.gate_up_proj [E][K][N] and down_proj, as
// transformers saves them: input-major) in the layout OpenAI publishes: P_blocks U8 [E][N][K/32][16] and P_scales
// U8 [E][N][K/32] (host/mxfp4.h's encoding of each output row), with "quantization_config": {"quant_method": "mxfp4"};
// everything else, biases included, is copied as it is (the engine can still quantize attention with --dtype).
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "host/bf16.h"
#include "host/config.h"
#include "host/errors.h"
#include "host/files.h"
#include "host/gptq.h"
#include "host/mxfp4.h"
#include "host/npy.h"
#include "host/quant.h"
#include "host/safetensors.h"
#include "host/safetensors_writer.h"

using namespace monocu;

// Element i of a BF16, F16 or F32 tensor (checked by the caller) as a float.
static float element(const TensorView& t, size_t i) {
    if (t.dtype == DType::BF16) return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(t.data)[i]);
    if (t.dtype == DType::F16) return f16_bits_to_float(reinterpret_cast<const uint16_t*>(t.data)[i]);
    float v;
    std::memcpy(&v, t.data + 4 * i, 4);
    return v;
}

// Row r of a 2-d tensor as floats rounded to bf16 (the GPU path uploads as bf16 before quantizing).
static void row_as_bf16_floats(const TensorView& t, int64_t r, std::vector<float>& out) {
    int64_t K = t.shape[1];
    out.resize(K);
    for (int64_t k = 0; k < K; k++) out[k] = round_to_bf16(element(t, (size_t)(r * K + k)));
}

// Runs fn(row) for every row on all cores.
static void parallel_rows(int64_t rows, const std::function<void(int64_t)>& fn) {
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < n; t++)
        pool.emplace_back([&, t] {
            for (int64_t r = t; r < rows; r += n) fn(r);
        });
    for (auto& th : pool) th.join();
}

static bool is_projection(const std::string& name) {
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj", "out_proj", "w1", "w2", "w3"})
        if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 && name.find(std::string(".") + p + ".") != std::string::npos)
            return true;
    return false;
}

static void check_float_matrix(const TensorView& t) {
    if (t.shape.size() != 2) die("%s: tensor '%s' is not a matrix", t.file.c_str(), t.name.c_str());
    if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
        die("%s: tensor '%s' has dtype %s; quantize reads BF16, F16 or F32", t.file.c_str(), t.name.c_str(), dtype_name(t.dtype));
}

// gptq: the projection's calibration factor (GPTQ), or null (round to nearest).
static void add_fp8(SafetensorsWriter& wr, const std::string& prefix, const TensorView& t, const GptqFactor* gptq = nullptr) {
    check_float_matrix(t);
    int64_t N = t.shape[0], K = t.shape[1], n_kb = K / fp8_kblock((int)K);
    auto scales = std::make_shared<std::vector<float>>((size_t)N * n_kb);
    wr.add(prefix + ".weight", DType::F8_E4M3, {N, K}, [&t, scales, N, K, n_kb, gptq] {
        std::vector<uint8_t> q((size_t)N * K);
        parallel_rows(N, [&](int64_t r) {
            std::vector<float> row;
            row_as_bf16_floats(t, r, row);
            if (gptq) gptq_fp8_row(row.data(), (int)K, *gptq, &q[(size_t)r * K], &(*scales)[(size_t)r * n_kb]);
            else quantize_fp8_row(row.data(), (int)K, &q[(size_t)r * K], &(*scales)[(size_t)r * n_kb]);
        });
        return q;
    });
    wr.add(prefix + ".weight_scale", DType::F32, {N, n_kb}, [scales] {  // filled by the producer above, written after it
        std::vector<uint8_t> b(scales->size() * 4);
        std::memcpy(b.data(), scales->data(), b.size());
        return b;
    });
}

static void add_int4(SafetensorsWriter& wr, const std::string& prefix, const TensorView& t, const GptqFactor* gptq = nullptr) {
    check_float_matrix(t);
    int64_t N = t.shape[0], K = t.shape[1];
    if (K % kInt4Group != 0) die("%s: tensor '%s' has %lld columns; int4 needs a multiple of %d", t.file.c_str(), t.name.c_str(), (long long)K, kInt4Group);
    auto scales = std::make_shared<std::vector<uint16_t>>((size_t)N * K / kInt4Group);
    wr.add(prefix + ".qweight", DType::U8, {N, K / 2}, [&t, scales, N, K, gptq] {
        std::vector<uint8_t> p((size_t)N * K / 2);
        parallel_rows(N, [&](int64_t r) {
            std::vector<float> row;
            row_as_bf16_floats(t, r, row);
            if (gptq) gptq_int4_row(row.data(), (int)K, *gptq, &p[(size_t)r * K / 2], &(*scales)[(size_t)r * K / kInt4Group]);
            else quantize_int4_row(row.data(), (int)K, &p[(size_t)r * K / 2], &(*scales)[(size_t)r * K / kInt4Group]);
        });
        return p;
    });
    wr.add(prefix + ".scales", DType::BF16, {N, K / kInt4Group}, [scales] {
        std::vector<uint8_t> b(scales->size() * 2);
        std::memcpy(b.data(), scales->data(), b.size());
        return b;
    });
}

static bool is_fused_expert(const std::string& name) {
    for (const char* p : {".mlp.experts.gate_up_proj", ".mlp.experts.down_proj"}) {
        size_t n = std::strlen(p);
        if (name.size() > n && name.compare(name.size() - n, n, p) == 0) return true;
    }
    return false;
}

// A layer's experts P [E][K][N] (input-major) as P_blocks U8 [E][N][K/32][16] and P_scales U8 [E][N][K/32].
static void add_mxfp4_experts(SafetensorsWriter& wr, const TensorView& t) {
    if (t.shape.size() != 3) die("%s: tensor '%s' is not [experts][in][out]", t.file.c_str(), t.name.c_str());
    if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
        die("%s: tensor '%s' has dtype %s; quantize reads BF16, F16 or F32", t.file.c_str(), t.name.c_str(), dtype_name(t.dtype));
    const int64_t E = t.shape[0], K = t.shape[1], N = t.shape[2];
    if (K % kMxfp4Block != 0) die("%s: tensor '%s' has %lld inputs; mxfp4 needs a multiple of 32", t.file.c_str(), t.name.c_str(), (long long)K);
    auto scales = std::make_shared<std::vector<uint8_t>>((size_t)E * N * (K / 32));
    wr.add(t.name + "_blocks", DType::U8, {E, N, K / 32, 16}, [&t, scales, E, K, N] {
        std::vector<uint8_t> blocks((size_t)E * N * (K / 2));
        parallel_rows(E * N, [&](int64_t en) {  // expert e's output row n: column n of its [K][N]
            int64_t e = en / N, n = en % N;
            std::vector<float> row(K);
            for (int64_t k = 0; k < K; k++) row[k] = element(t, (size_t)((e * K + k) * N + n));
            mxfp4_encode_row(row.data(), (int)K, &blocks[(size_t)en * (K / 2)], &(*scales)[(size_t)en * (K / 32)]);
        });
        return blocks;
    });
    wr.add(t.name + "_scales", DType::U8, {E, N, K / 32}, [scales] { return *scales; });  // filled by the producer above
}

static void add_copy(SafetensorsWriter& wr, const TensorView& t) {
    wr.add(t.name, t.dtype, t.shape, [&t] { return std::vector<uint8_t>(t.data, t.data + t.nbytes()); });
}

static void write_file(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) die("%s: cannot open for writing (%s)", path.c_str(), strerror(errno));
    bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) die("%s: write failed (disk full?)", path.c_str());
}

static void copy_file_if_present(const std::string& from, const std::string& to) {
    struct stat st;
    if (::stat(from.c_str(), &st) != 0 && errno == ENOENT) return;
    write_file(to, read_file_bounded(from, kTokenizerMaxBytes));
}

// ---- the output folder: never the input, never half-written ----

// The absolute, symlink-free form of a path that may not exist yet (its parent must).
static std::string resolved(const std::string& path) {
    char buf[PATH_MAX];
    if (realpath(path.c_str(), buf)) return buf;
    std::string parent = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
    std::string base = path.substr(parent.size() + (parent.empty() ? 0 : 1));
    if (parent.empty()) parent = ".";
    if (!realpath(parent.c_str(), buf)) die("%s: its folder %s does not exist", path.c_str(), parent.c_str());
    return std::string(buf) + "/" + base;
}

// Refuses an output that is, or is inside, the input folder, or that already holds files.
static void check_output(const std::string& in, const std::string& out) {
    std::string a = resolved(in), b = resolved(out);
    if (b == a || b.compare(0, a.size() + 1, a + "/") == 0)
        die("%s: the output %s the input folder %s; give another folder", out.c_str(), b == a ? "is" : "is inside", in.c_str());
    if (DIR* d = opendir(out.c_str())) {
        int entries = 0;
        while (dirent* e = readdir(d)) entries += std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
        closedir(d);
        if (entries) die("%s: already exists and is not empty; quantize writes a new folder", out.c_str());
    } else if (path_exists(out)) {
        die("%s: exists and is not a folder", out.c_str());
    }
}

static void remove_tree(const std::string& dir) {
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) std::remove((dir + "/" + e->d_name).c_str());
        closedir(d);
    }
    rmdir(dir.c_str());
}

// ---- calibration (--calib): which dumped input feeds a projection, and the GPTQ factor of each input ----

// "model.layers.3.self_attn.q_proj.weight" -> "layer_03_attn_in": the --dump-inputs tap holding its input.
static std::string calib_input_name(const std::string& tensor) {
    size_t at = tensor.find("layers.");
    if (at == std::string::npos) die("--calib: cannot tell the layer of tensor '%s'", tensor.c_str());
    int layer = std::atoi(tensor.c_str() + at + 7);
    auto has = [&](const char* p) { return tensor.find(std::string(".") + p + ".") != std::string::npos; };
    if (has("experts")) die("--calib: tensor '%s' is an expert's; GPTQ of a mixture's experts is not supported", tensor.c_str());
    // The names the engines' --dump-inputs give each projection's input (ops/linear.cuh's LinearPlan).
    const char* input = has("q_proj") || has("k_proj") || has("v_proj") ? "attn_in"
                        : has("o_proj")                                ? "o_in"
                        : has("down_proj")                             ? "down_in"
                        : has("in_proj")                               ? "in_proj_in"
                        : has("out_proj")                              ? "out_proj_in"
                        : has("w1") || has("w3")                       ? "w1+w3_in"
                        : has("w2")                                    ? "w2_in"
                                                                       : "mlp_in";
    return strf("layer_%02d_%s", layer, input);
}

// The factor of input `name` from DIR/name.npy of every calibration folder; K must match the projection's.
static GptqFactor calib_factor(const std::vector<std::string>& dirs, const std::string& name, int K, double damp, int64_t& tokens) {
    InputGram g(K);
    for (const std::string& d : dirs) {
        std::string path = d + "/" + name + ".npy";
        NpyArray a = npy_read(path);
        if (a.shape.size() != 2 || a.shape[1] != K)
            die("%s: expected [tokens][%d] (the projection's inputs), got a %zu-d array", path.c_str(), K, a.shape.size());
        g.add(a.data.data(), a.shape[0]);
    }
    tokens = g.tokens;
    return gptq_factor(g, damp);
}

// Every projection's factor, keyed by its input (q/k/v share one, gate/up another), computed on all cores.
static std::map<std::string, GptqFactor> calib_factors(const std::vector<const TensorView*>& projections, const std::vector<std::string>& dirs,
                                                       double damp, int64_t& tokens) {
    std::map<std::string, int> inputs;  // name -> K
    for (const TensorView* t : projections) inputs[calib_input_name(t->name)] = (int)t->shape[1];
    std::vector<std::pair<std::string, int>> todo(inputs.begin(), inputs.end());
    std::map<std::string, GptqFactor> out;
    std::mutex mu;
    std::vector<std::string> errors;
    parallel_rows((int64_t)todo.size(), [&](int64_t i) {
        try {  // a bad dump must become one error line, not end a worker thread
            int64_t tok = 0;
            GptqFactor f = calib_factor(dirs, todo[i].first, todo[i].second, damp, tok);
            std::lock_guard<std::mutex> lock(mu);
            out[todo[i].first] = std::move(f);
            tokens = tok;
        } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(mu);
            errors.push_back(e.what());
        }
    });
    if (!errors.empty()) die("%s", errors.front().c_str());
    return out;
}

// Writes the quantized checkpoint into `out`, a fresh folder (quantize() renames it into place when complete).
static int quantize_into(const std::string& in, const std::string& out, const std::string& final_out, const std::string& dtype,
                         const std::string& head, const std::vector<std::string>& calib, double damp) {
    Checkpoint ck = Checkpoint::open(in);
    nlohmann::json cfg = read_json_file(in + "/config.json");
    if (cfg.contains("quantization_config")) die("%s/config.json: the checkpoint is quantized already", in.c_str());
    SafetensorsWriter wr;
    std::vector<const TensorView*> tensors;
    for (const TensorView& t : ck.tensors()) tensors.push_back(&t);
    std::sort(tensors.begin(), tensors.end(), [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
    if (dtype == "mxfp4") {
        if (!calib.empty()) die("--calib: GPTQ is not supported with --dtype mxfp4");
        int n_exp = 0;
        for (const TensorView* t : tensors) {
            if (is_fused_expert(t->name)) add_mxfp4_experts(wr, *t), n_exp++;
            else add_copy(wr, *t);
        }
        if (n_exp == 0) die("%s: no mlp.experts.gate_up_proj / down_proj tensors (GPT-OSS's experts) to write in mxfp4", in.c_str());
        wr.write(out + "/model.safetensors", {{"format", "pt"}});
        cfg["quantization_config"] = {{"quant_method", "mxfp4"},
                                      {"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
        write_file(out + "/config.json", cfg.dump(2) + "\n");
        for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
            copy_file_if_present(in + "/" + f, out + "/" + f);
        Checkpoint check = Checkpoint::open(out);
        std::printf("quantize: %d expert tensors to mxfp4; %s: %zu tensors, %.2f MiB\n", n_exp, final_out.c_str(), check.tensors().size(),
                    check.total_bytes() / 1048576.0);
        return 0;
    }
    std::vector<const TensorView*> projections;
    for (const TensorView* t : tensors)
        if (is_projection(t->name)) check_float_matrix(*t), projections.push_back(t);
    int64_t calib_tokens = 0;
    std::map<std::string, GptqFactor> factors;
    if (!calib.empty()) factors = calib_factors(projections, calib, damp, calib_tokens);
    // An FP8 output projection: lm_head.weight, or embed_tokens when the model ties them (its own FP8 copy).
    // With --calib it is GPTQ'd from the final norm's output, which every calibration dump holds.
    const TensorView* head_src = nullptr;
    std::unique_ptr<GptqFactor> head_factor;
    if (head == "fp8") {
        head_src = ck.find("lm_head.weight") ? ck.find("lm_head.weight") : ck.find("model.embed_tokens.weight");
        if (!head_src) die("%s: neither lm_head.weight nor model.embed_tokens.weight", in.c_str());
        check_float_matrix(*head_src);
        int64_t tok = 0;
        if (!calib.empty()) head_factor = std::make_unique<GptqFactor>(calib_factor(calib, "final_norm", (int)head_src->shape[1], damp, tok));
    }
    int n_proj = 0;
    for (const TensorView* t : tensors) {
        std::string prefix = t->name.substr(0, t->name.size() - 7);
        if (is_projection(t->name)) {
            const GptqFactor* f = calib.empty() ? nullptr : &factors.at(calib_input_name(t->name));
            dtype == "fp8" ? add_fp8(wr, prefix, *t, f) : add_int4(wr, prefix, *t, f);
            n_proj++;
        } else if (!head_src || t->name != "lm_head.weight") {  // an FP8 head is written below
            add_copy(wr, *t);
        }
    }
    if (n_proj == 0) die("%s: no q/k/v/o/gate/up/down_proj weights to quantize", in.c_str());
    if (head_src) add_fp8(wr, "lm_head", *head_src, head_factor.get());
    wr.write(out + "/model.safetensors", {{"format", "pt"}});
    cfg["quantization_config"] = {{"quant_method", "monocu"}, {"weights", dtype}, {"lm_head", head}};
    if (!calib.empty()) cfg["quantization_config"]["method"] = "gptq", cfg["quantization_config"]["calibration_tokens"] = calib_tokens;
    write_file(out + "/config.json", cfg.dump(2) + "\n");
    for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
        copy_file_if_present(in + "/" + f, out + "/" + f);
    Checkpoint check = Checkpoint::open(out);  // what we wrote must pass our own validation
    std::printf("quantize: %d projections to %s%s (lm_head %s%s); %s: %zu tensors, %.2f MiB\n", n_proj, dtype.c_str(),
                calib.empty() ? "" : strf(" by GPTQ over %lld calibration tokens", (long long)calib_tokens).c_str(), head.c_str(),
                head_factor ? " by GPTQ" : "", final_out.c_str(), check.tensors().size(), check.total_bytes() / 1048576.0);
    return 0;
}

// The output is written to OUT.partial-PID beside OUT and renamed to OUT only when complete and valid, so a failed
// run never leaves a folder that looks like a checkpoint, and never touches the input (refused as an output).
static int quantize(const std::string& in, const std::string& out, const std::string& dtype, const std::string& head,
                    const std::vector<std::string>& calib, double damp) {
    if (!path_is_dir(in)) die("%s: not a checkpoint folder", in.c_str());
    std::string target = out;
    while (target.size() > 1 && target.back() == '/') target.pop_back();
    check_output(in, target);
    std::string tmp = target + strf(".partial-%d", (int)getpid());
    if (mkdir(tmp.c_str(), 0755) != 0) die("%s: cannot create (%s)", tmp.c_str(), strerror(errno));
    try {
        quantize_into(in, tmp, target, dtype, head, calib, damp);
    } catch (...) {
        remove_tree(tmp);
        throw;
    }
    if (path_is_dir(target)) rmdir(target.c_str());  // empty (check_output): replaced by the complete one
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
        int e = errno;
        remove_tree(tmp);
        die("%s: cannot move the finished output into place (%s)", target.c_str(), strerror(e));
    }
    return 0;
}

int main(int argc, char** argv) {
    return run_main([&] {
        std::vector<std::string> pos, calib;
        std::string dtype, head;
        double damp = 0.01;
        for (int i = 1; i < argc; i++) {
            std::string a = argv[i];
            if (a == "-h" || a == "--help") {
                std::printf("usage: quantize IN_DIR OUT_DIR --dtype fp8|int4|mxfp4 [--lm-head fp8|bf16] [--calib DIR[,DIR...] [--damp F]]\n"
                            "  mxfp4    GPT-OSS's experts as OpenAI publishes them; everything else unchanged\n"
                            "  --calib  GPTQ over the projection inputs an engine dumped with --dump-dir DIR --dump-inputs\n"
                            "  --damp   fraction of the mean input energy added to the diagonal (default 0.01)\n");
                return 0;
            }
            if (a == "--dtype") {
                if (i + 1 >= argc) die_usage("--dtype needs a value");
                dtype = argv[++i];
                if (dtype != "fp8" && dtype != "int4" && dtype != "mxfp4") die_usage("--dtype: '%s' is not one of fp8, int4, mxfp4", dtype.c_str());
            } else if (a == "--lm-head") {
                if (i + 1 >= argc) die_usage("--lm-head needs a value");
                head = argv[++i];
                if (head != "fp8" && head != "bf16") die_usage("--lm-head: '%s' is not one of fp8, bf16", head.c_str());
            } else if (a == "--calib") {
                if (i + 1 >= argc) die_usage("--calib needs a folder (or a comma-separated list)");
                std::string list = argv[++i];
                for (size_t at = 0; at <= list.size();) {
                    size_t comma = list.find(',', at);
                    if (comma == std::string::npos) comma = list.size();
                    if (comma == at) die_usage("--calib: empty folder name in '%s'", list.c_str());
                    calib.push_back(list.substr(at, comma - at));
                    at = comma + 1;
                }
            } else if (a == "--damp") {
                if (i + 1 >= argc) die_usage("--damp needs a value");
                char* end = nullptr;
                damp = std::strtod(argv[++i], &end);
                if (!end || *end || !(damp > 0.0 && damp <= 1.0)) die_usage("--damp: '%s' is not a number in (0, 1]", argv[i]);
            } else if (!a.empty() && a[0] == '-') {
                die_usage("unknown flag '%s'", a.c_str());
            } else {
                pos.push_back(a);
            }
        }
        if (pos.size() != 2 || dtype.empty()) die_usage("usage: quantize IN_DIR OUT_DIR --dtype fp8|int4 [--lm-head fp8|bf16] [--calib DIR[,DIR...]]");
        if (head.empty()) head = dtype == "fp8" ? "bf16" : "fp8";
        return quantize(pos[0], pos[1], dtype, head, calib, damp);
    });
}
