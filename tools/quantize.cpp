// quantize — write a pre-quantized checkpoint that the engines load directly (CPU only, runs anywhere).
//
//   build/tools/quantize IN_DIR OUT_DIR --dtype fp8|int4 [--lm-head fp8|bf16]
//
// Every projection (q/k/v/o/gate/up/down_proj) becomes, under its own name:
//   fp8:  P.weight F8_E4M3 [N][K] + P.weight_scale F32 [N][K/128]   (per 128 inputs of a row, s = max|w| / 448)
//   int4: P.qweight U8 [N][K/2] + P.scales BF16 [N][K/128]           (symmetric groups of 128; quant.h)
// The output projection follows the engines' quantize-on-load: left bf16 with --dtype fp8 (as Qwen's FP8
// releases leave it), FP8 with --dtype int4 (lm_head.weight; from embed_tokens when the model ties them);
// --lm-head overrides. Everything else (embeddings, norms) is copied unchanged. config.json gains
// "quantization_config": {"quant_method": "monocu", "weights": "fp8"|"int4", "lm_head": "fp8"}; the
// tokenizer and generation files are copied. The arithmetic is quant.h's, the same as the GPU's
// quantize-on-load, so an engine gives bit-identical logits either way.
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "bf16.h"
#include "config.h"
#include "errors.h"
#include "quant.h"
#include "safetensors.h"
#include "safetensors_writer.h"

using namespace monocu;

// Row r of a 2-d tensor as floats rounded to bf16 (the GPU path uploads as bf16 before quantizing).
static void row_as_bf16_floats(const TensorView& t, int64_t r, std::vector<float>& out) {
    int64_t K = t.shape[1];
    out.resize(K);
    for (int64_t k = 0; k < K; k++) {
        size_t i = (size_t)(r * K + k);
        float v;
        if (t.dtype == DType::BF16) v = bf16_bits_to_float(reinterpret_cast<const uint16_t*>(t.data)[i]);
        else if (t.dtype == DType::F16) v = round_to_bf16(f16_bits_to_float(reinterpret_cast<const uint16_t*>(t.data)[i]));
        else std::memcpy(&v, t.data + 4 * i, 4), v = round_to_bf16(v);
        out[k] = v;
    }
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
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
        if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 && name.find(std::string(".") + p + ".") != std::string::npos)
            return true;
    return false;
}

static void check_float_matrix(const TensorView& t) {
    if (t.shape.size() != 2) die("%s: tensor '%s' is not a matrix", t.file.c_str(), t.name.c_str());
    if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
        die("%s: tensor '%s' has dtype %s; quantize reads BF16, F16 or F32", t.file.c_str(), t.name.c_str(), dtype_name(t.dtype));
}

static void add_fp8(SafetensorsWriter& wr, const std::string& prefix, const TensorView& t) {
    check_float_matrix(t);
    int64_t N = t.shape[0], K = t.shape[1], n_kb = K / fp8_kblock((int)K);
    auto scales = std::make_shared<std::vector<float>>((size_t)N * n_kb);
    wr.add(prefix + ".weight", DType::F8_E4M3, {N, K}, [&t, scales, N, K, n_kb] {
        std::vector<uint8_t> q((size_t)N * K);
        parallel_rows(N, [&](int64_t r) {
            std::vector<float> row;
            row_as_bf16_floats(t, r, row);
            quantize_fp8_row(row.data(), (int)K, &q[(size_t)r * K], &(*scales)[(size_t)r * n_kb]);
        });
        return q;
    });
    wr.add(prefix + ".weight_scale", DType::F32, {N, n_kb}, [scales] {  // filled by the producer above, written after it
        std::vector<uint8_t> b(scales->size() * 4);
        std::memcpy(b.data(), scales->data(), b.size());
        return b;
    });
}

static void add_int4(SafetensorsWriter& wr, const std::string& prefix, const TensorView& t) {
    check_float_matrix(t);
    int64_t N = t.shape[0], K = t.shape[1];
    if (K % kInt4Group != 0) die("%s: tensor '%s' has %lld columns; int4 needs a multiple of %d", t.file.c_str(), t.name.c_str(), (long long)K, kInt4Group);
    auto scales = std::make_shared<std::vector<uint16_t>>((size_t)N * K / kInt4Group);
    wr.add(prefix + ".qweight", DType::U8, {N, K / 2}, [&t, scales, N, K] {
        std::vector<uint8_t> p((size_t)N * K / 2);
        parallel_rows(N, [&](int64_t r) {
            std::vector<float> row;
            row_as_bf16_floats(t, r, row);
            quantize_int4_row(row.data(), (int)K, &p[(size_t)r * K / 2], &(*scales)[(size_t)r * K / kInt4Group]);
        });
        return p;
    });
    wr.add(prefix + ".scales", DType::BF16, {N, K / kInt4Group}, [scales] {
        std::vector<uint8_t> b(scales->size() * 2);
        std::memcpy(b.data(), scales->data(), b.size());
        return b;
    });
}

static void add_copy(SafetensorsWriter& wr, const TensorView& t) {
    wr.add(t.name, t.dtype, t.shape, [&t] { return std::vector<uint8_t>(t.data, t.data + t.nbytes()); });
}

static void copy_file_if_present(const std::string& from, const std::string& to) {
    std::ifstream in(from, std::ios::binary);
    if (!in) return;
    std::ofstream out(to, std::ios::binary);
    out << in.rdbuf();
    if (!out) die("%s: write failed", to.c_str());
}

static int quantize(const std::string& in, const std::string& out, const std::string& dtype, const std::string& head) {
    Checkpoint ck = Checkpoint::open(in);
    nlohmann::json cfg = read_json_file(in + "/config.json");
    if (cfg.contains("quantization_config")) die("%s/config.json: the checkpoint is quantized already", in.c_str());
    if (mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) die("%s: cannot create (%s)", out.c_str(), strerror(errno));
    SafetensorsWriter wr;
    std::vector<const TensorView*> tensors;
    for (const TensorView& t : ck.tensors()) tensors.push_back(&t);
    std::sort(tensors.begin(), tensors.end(), [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
    int n_proj = 0;
    for (const TensorView* t : tensors) {
        std::string prefix = t->name.substr(0, t->name.size() - 7);
        if (is_projection(t->name)) {
            dtype == "fp8" ? add_fp8(wr, prefix, *t) : add_int4(wr, prefix, *t);
            n_proj++;
        } else if (t->name == "lm_head.weight" && head == "fp8") {
            add_fp8(wr, "lm_head", *t);
        } else {
            add_copy(wr, *t);
        }
    }
    if (n_proj == 0) die("%s: no q/k/v/o/gate/up/down_proj weights to quantize", in.c_str());
    if (!ck.find("lm_head.weight") && head == "fp8") {
        const TensorView* emb = ck.find("model.embed_tokens.weight");
        if (!emb) die("%s: neither lm_head.weight nor model.embed_tokens.weight", in.c_str());
        add_fp8(wr, "lm_head", *emb);  // tied: the output projection gets its own FP8 copy
    }
    wr.write(out + "/model.safetensors", {{"format", "pt"}});
    cfg["quantization_config"] = {{"quant_method", "monocu"}, {"weights", dtype}, {"lm_head", head}};
    std::ofstream(out + "/config.json") << cfg.dump(2) << "\n";
    for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
        copy_file_if_present(in + "/" + f, out + "/" + f);
    Checkpoint check = Checkpoint::open(out);  // what we wrote must pass our own validation
    std::printf("quantize: %d projections to %s (lm_head %s); %s: %zu tensors, %.2f MiB\n", n_proj, dtype.c_str(), head.c_str(),
                out.c_str(), check.tensors().size(), check.total_bytes() / 1048576.0);
    return 0;
}

int main(int argc, char** argv) {
    return run_main([&] {
        std::vector<std::string> pos;
        std::string dtype, head;
        for (int i = 1; i < argc; i++) {
            std::string a = argv[i];
            if (a == "-h" || a == "--help") {
                std::printf("usage: quantize IN_DIR OUT_DIR --dtype fp8|int4 [--lm-head fp8|bf16]\n");
                return 0;
            }
            if (a == "--dtype") {
                if (i + 1 >= argc) die_usage("--dtype needs a value");
                dtype = argv[++i];
                if (dtype != "fp8" && dtype != "int4") die_usage("--dtype: '%s' is not one of fp8, int4", dtype.c_str());
            } else if (a == "--lm-head") {
                if (i + 1 >= argc) die_usage("--lm-head needs a value");
                head = argv[++i];
                if (head != "fp8" && head != "bf16") die_usage("--lm-head: '%s' is not one of fp8, bf16", head.c_str());
            } else if (!a.empty() && a[0] == '-') {
                die_usage("unknown flag '%s'", a.c_str());
            } else {
                pos.push_back(a);
            }
        }
        if (pos.size() != 2 || dtype.empty()) die_usage("usage: quantize IN_DIR OUT_DIR --dtype fp8|int4 [--lm-head fp8|bf16]");
        if (head.empty()) head = dtype == "fp8" ? "bf16" : "fp8";
        return quantize(pos[0], pos[1], dtype, head);
    });
}
