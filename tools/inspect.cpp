// inspect — validate a checkpoint and print what is in it: config summary, every tensor, totals.
//
//   build/tools/inspect MODEL_DIR      (single or sharded safetensors, plus config.json if present)
//   build/tools/inspect FILE.safetensors
//
// A broken checkpoint gets the same one-line error the engines give, and exit code 1.
#include <cstdio>
#include <map>
#include <memory>

#include "host/config.h"
#include "host/model_types.h"
#include "host/errors.h"
#include "host/safetensors.h"

using namespace monocu;

static std::string human_bytes(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, u++;
    return u == 0 ? strf("%.0f %s", b, units[u]) : strf("%.2f %s", b, units[u]);
}

// Prints the config keys that decide size and shape, if the folder has a config.json.
static void print_config_summary(const ModelConfig& c) {
    const std::string& path = c.path;
    const nlohmann::json& j = c.file;
    std::printf("config: %s (model_type %s, run by build/<arch>/%s)\n", path.c_str(), c.model_type.c_str(),
                find_model_type(c.model_type)->engine);
    for (const char* k : {"model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                          "tie_word_embeddings", "dtype", "torch_dtype",
                          // a mixture of experts
                          "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                          "mlp_only_layers", "num_dense_layers", "norm_topk_prob"})
        if (j.contains(k)) std::printf("  %-24s %s\n", k, j[k].dump().c_str());
    if (j.contains("quantization_config")) std::printf("  %-24s %s\n", "quantization_config", j["quantization_config"].dump().c_str());
    // KV-cache cost per token of context, in bf16: what decides whether a long context fits.
    auto num = [&](const char* k) { return j.contains(k) && j[k].is_number_integer() ? j[k].get<long long>() : 0LL; };
    long long layers = num("num_hidden_layers"), heads = num("num_attention_heads");
    long long kv = num("num_key_value_heads") ? num("num_key_value_heads") : heads;
    long long hd = num("head_dim") ? num("head_dim") : (heads ? num("hidden_size") / heads : 0);
    if (layers && kv && hd)
        std::printf("  %-24s %s per token (bf16 K and V)\n", "kv cache", human_bytes(2.0 * layers * kv * hd * 2).c_str());
}

// A mixture's experts: their share of the bytes, what a token reads of them (k of E), and MXFP4 tensors (GPT-OSS's
// `*_blocks` U8 [.., K / 32, 16] with `*_scales` U8 [.., K / 32]: 4.25 bits per weight).
static void print_experts(const Checkpoint& ck, const ModelConfig* cfg) {
    uint64_t expert_bytes = 0, mxfp4_bytes = 0, mxfp4_weights = 0;
    size_t mxfp4_tensors = 0;
    for (const TensorView& t : ck.tensors()) {
        if (t.name.find(".experts.") != std::string::npos || t.name.find(".experts_") != std::string::npos) expert_bytes += t.nbytes();
        const std::string suffix = "_blocks";
        if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
            t.dtype == DType::U8 && !t.shape.empty() && t.shape.back() == 16 &&
            ck.find(t.name.substr(0, t.name.size() - suffix.size()) + "_scales")) {
            mxfp4_tensors++;
            mxfp4_bytes += t.nbytes() + ck.find(t.name.substr(0, t.name.size() - suffix.size()) + "_scales")->nbytes();
            mxfp4_weights += (uint64_t)t.numel() * 2;
        }
    }
    if (mxfp4_tensors)
        std::printf("MXFP4: %zu tensors (+ their scales), %llu weights in %s: %.2f bits per weight\n", mxfp4_tensors,
                    (unsigned long long)mxfp4_weights, human_bytes((double)mxfp4_bytes).c_str(), 8.0 * mxfp4_bytes / mxfp4_weights);
    if (!expert_bytes) return;
    std::printf("experts: %s of %s", human_bytes((double)expert_bytes).c_str(), human_bytes((double)ck.total_bytes()).c_str());
    if (cfg) {
        const nlohmann::json& j = cfg->file;
        auto num = [&](const char* k) { return j.contains(k) && j[k].is_number_integer() ? j[k].get<long long>() : 0LL; };
        long long E = num("num_experts") ? num("num_experts") : num("num_local_experts"), k = num("num_experts_per_tok");
        if (E > 0 && k > 0 && k <= E) {
            double active = (double)(ck.total_bytes() - expert_bytes) + (double)expert_bytes * k / E;
            std::printf("; %lld of %lld experts per token: a token reads about %s of weights", k, E, human_bytes(active).c_str());
        }
    }
    std::printf("\n");
}

static int inspect(const std::string& path) {
    Checkpoint ck = Checkpoint::open(path);
    std::unique_ptr<ModelConfig> cfg;  // checked before anything is printed: what every engine requires
    if (path_is_dir(path) && path_exists(path + "/config.json")) cfg = std::make_unique<ModelConfig>(load_checked_config(path));
    std::printf("checkpoint: %s (%zu file%s)\n", path.c_str(), ck.files().size(), ck.files().size() == 1 ? "" : "s");
    if (cfg) print_config_summary(*cfg);
    std::vector<const TensorView*> sorted;
    for (const TensorView& t : ck.tensors()) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
    std::map<std::string, uint64_t> bytes_by_dtype;
    uint64_t params = 0;
    std::printf("%-64s %-8s %-20s %s\n", "tensor", "dtype", "shape", "bytes");
    for (const TensorView* t : sorted) {
        std::printf("%-64s %-8s %-20s %zu\n", t->name.c_str(), dtype_name(t->dtype), shape_str(t->shape).c_str(), t->nbytes());
        bytes_by_dtype[dtype_name(t->dtype)] += t->nbytes();
        params += static_cast<uint64_t>(t->numel());
    }
    std::printf("%zu tensors, %llu elements, %s", sorted.size(), (unsigned long long)params, human_bytes(ck.total_bytes()).c_str());
    for (const auto& kv : bytes_by_dtype) std::printf("; %s %s", kv.first.c_str(), human_bytes(kv.second).c_str());
    std::printf("\n");
    print_experts(ck, cfg.get());
    for (const auto& kv : ck.metadata()) std::printf("metadata: %s = %s\n", kv.first.c_str(), kv.second.c_str());
    return 0;
}

int main(int argc, char** argv) {
    return run_main([&] {
        if (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
            std::printf("usage: inspect MODEL_DIR | FILE.safetensors\n");
            return 0;
        }
        if (argc != 2) die_usage("usage: inspect MODEL_DIR | FILE.safetensors");
        return inspect(argv[1]);
    });
}
