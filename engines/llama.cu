// llama.cu — the Llama family in one file: Llama 2 / 3.x, Mistral, Qwen2 / Qwen2.5, SmolLM2 / SmolLM3, TinyLlama
// (model_type llama, mistral, qwen2, smollm3), and Mistral's mixture of experts, Mixtral 8x7B / 8x22B (mixtral).
//
//   build/sm_90/llama -m models/Llama-3.2-1B-Instruct -p "Why is the sky blue?" -n 256
//   build/sm_90/llama -m models/Mistral-7B-Instruct-v0.3 -cnv
//   build/sm_90/llama -m models/Mixtral-8x7B-Instruct-v0.1 --dtype int4 -cnv
//
// transformers' modeling_llama.py, and the variations its relatives make (modeling_mistral.py, modeling_qwen2.py,
// modeling_smollm3.py, modeling_mixtral.py), all decided by config.json: one layer is
//   h = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),   n = input_layernorm(x)
//   x = h + down_proj(silu(gate_proj(m)) * up_proj(m)),                  m = post_attention_layernorm(h)
// or, in mixtral, a mixture of experts in every layer instead of the MLP:
//   x = h + sum over the top k experts e of g_e w2_e(silu(w1_e(m)) * w3_e(m)),  g = softmax over the k chosen
//       of the router's logits gate(m) (the same as softmax over all, renormalised over the k)
// with, per family: biases on q/k/v (qwen2), on q/k/v/o (attention_bias) and on the MLP (mlp_bias); a sliding
// window (mistral's sliding_window; qwen2's and smollm3's sliding layers); layers without RoPE (smollm3's
// no_rope_layers); rope scaling (llama3, linear, dynamic); tied or untied output; head_dim from config.
// The residual stream x stays fp32 on the GPU; matmul inputs are bf16; every accumulation is fp32.
#include "host/model_types.h"
#include "load/load_linear.cuh"
#include "ops/embed.cuh"
#include "ops/rope.cuh"
#include "runtime/activations.cuh"
#include "runtime/moe_layer.cuh"
#include "runtime/runner.cuh"

using namespace monocu;

// ---- Config ----

struct Config : DecoderDims {     // dim, ffn, n_layers, n_heads, n_kv, head_dim, vocab, q_dim, kv_dim, eps
    ModelConfig hf;                 // config.json as read, with the family's transformers defaults
    bool qkv_bias, o_bias, mlp_bias;
    std::vector<bool> rope;         // per layer: rotary embedding (false: a NoPE layer)
    std::vector<int> window;        // per layer: sliding window, 0 = full attention
    bool moe = false;               // mixtral: every layer's MLP is a mixture of experts
    MoeDims experts;                // num_local_experts, num_experts_per_tok, intermediate_size
    MoeRouter router;               // softmax, top k, renormalised over the k
};

// A family key as a bool, with the file's errors.
static bool key_bool(const ModelConfig& h, const char* key, bool fallback) {
    const nlohmann::json* v = h.find(key);
    return v ? json_as_bool(h.path, key, *v) : fallback;
}

static Config load_config(const std::string& dir) {
    Config c;
    c.hf = load_checked_config(dir);  // the family's transformers defaults; sizes the kernels take (host/model_types.h)
    const ModelConfig& h = c.hf;
    const std::string& type = h.model_type;
    const char* p = h.path.c_str();
    if (std::strcmp(find_model_type(type)->engine, "llama") != 0)
        die("%s: model_type is '%s'; this engine runs llama, mistral, mixtral, qwen2 and smollm3 (build/<arch>/%s runs it)", p, type.c_str(),
            find_model_type(type)->engine);
    c.read_dims(h);
    const std::string& rt = h.rope.type;
    if (rt != "default" && rt != "linear" && rt != "llama3" && rt != "dynamic")
        die("%s: rope type '%s' is not supported (default, linear, llama3, dynamic)", p, rt.c_str());
    if (const nlohmann::json* f = h.find("partial_rotary_factor"); f && json_as_double(p, "partial_rotary_factor", *f) != 1.0)
        die("%s: partial_rotary_factor %g is not supported (1)", p, json_as_double(p, "partial_rotary_factor", *f));
    if (!h.quant.method.empty() && h.quant.method != "monocu")
        die("%s: quantization_config '%s' is not supported (tools/quantize output)", p, h.quant.method.c_str());

    // Biases: qwen2 always has them on q/k/v (and takes no switch); attention_bias puts them on q/k/v/o.
    bool attention_bias = key_bool(h, "attention_bias", false);
    c.qkv_bias = type == "qwen2" || attention_bias;
    c.o_bias = type != "qwen2" && attention_bias;
    c.mlp_bias = key_bool(h, "mlp_bias", false);
    if (type == "qwen2" && (h.find("attention_bias") || h.find("mlp_bias"))) die("%s: qwen2 takes no attention_bias / mlp_bias keys", p);

    // RoPE per layer: smollm3's no_rope_layers (1 = RoPE, 0 = none) or one every no_rope_layer_interval.
    c.rope.assign(c.n_layers, true);
    if (type == "smollm3") {
        if (const nlohmann::json* nr = h.find("no_rope_layers")) {
            if (!nr->is_array() || (int)nr->size() < c.n_layers) die("%s: 'no_rope_layers' must list at least one 0/1 per layer", p);
            for (int l = 0; l < c.n_layers; l++) c.rope[l] = json_as_int(p, "no_rope_layers", (*nr)[l]) != 0;
        } else {
            int every = json_as_int(p, "no_rope_layer_interval", h.require("no_rope_layer_interval"));
            if (every <= 0) die("%s: 'no_rope_layer_interval' must be positive", p);
            for (int l = 0; l < c.n_layers; l++) c.rope[l] = (l + 1) % every != 0;
        }
    }
    // Sliding window per layer: mistral's on every layer (null: none); qwen2's and smollm3's on their sliding
    // layers (layer_types, or as their configs derive it: qwen2 from max_window_layers, smollm3 its NoPE layers).
    int sw = 0;
    if (const nlohmann::json* v = h.find("sliding_window")) sw = json_as_int(p, "sliding_window", *v);
    if (sw < 0) die("%s: 'sliding_window' must be positive or null", p);
    const bool mistral = type == "mistral" || type == "mixtral";  // a window on every layer when set, no switch
    bool use_sw = mistral ? sw > 0 : key_bool(h, "use_sliding_window", false) && sw > 0;
    int max_window_layers = h.find("max_window_layers") ? json_as_int(p, "max_window_layers", h.require("max_window_layers")) : c.n_layers;
    c.window.assign(c.n_layers, 0);
    const nlohmann::json* lt = h.find("layer_types");
    if (lt && !lt->is_array()) die("%s: 'layer_types' must be a list", p);
    if (lt && (int)lt->size() != c.n_layers) die("%s: 'layer_types' has %zu entries for %d layers", p, lt->size(), c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        bool sliding = mistral ? use_sw : type == "qwen2" ? use_sw && l >= max_window_layers : type == "smollm3" ? use_sw && !c.rope[l] : false;
        if (lt && type != "llama" && !mistral) {
            std::string t = json_as_string(p, "layer_types", (*lt)[l]);
            if (t != "full_attention" && t != "sliding_attention") die("%s: layer_types[%d] '%s' is not supported", p, l, t.c_str());
            sliding = t == "sliding_attention";
            if (sliding && sw <= 0) die("%s: layer_types[%d] is sliding_attention but sliding_window is %d", p, l, sw);
        }
        c.window[l] = sliding ? sw : 0;
    }
    // Mixtral's experts are as wide as intermediate_size; its router renormalises over the k it picks.
    if (type == "mixtral") {
        c.moe = true;
        c.experts = read_moe_dims(h, {"num_local_experts"}, "intermediate_size");
        c.router.score = MoeScore::Softmax, c.router.norm_topk = true;
    }
    return c;
}

// ---- Weights ----

struct Layer {
    bf16* attn_norm;  // [dim]      input_layernorm
    Linear qkv;       // [q_dim + 2 kv_dim][dim]   q_proj, k_proj, v_proj stacked by rows (+ their biases)
    Linear o;         // [dim][q_dim]              o_proj
    bf16* mlp_norm;   // [dim]      post_attention_layernorm
    Linear gate_up;   // [2 ffn][dim]              gate_proj and up_proj, rows interleaved (2i gate, 2i+1 up)
    Linear down;      // [dim][ffn]                down_proj
    MoeFfn moe;       // ... or (mixtral) block_sparse_moe: the router gate [E][dim], experts.e.{w1, w3, w2}
    AttnLayer attn;   // no q/k norm; its RoPE table (or none) and window
};

struct Weights {
    bf16* embed;      // [vocab][dim]   embed_tokens
    std::vector<Layer> layers;
    bf16* final_norm; // [dim]          model.norm
    Linear lm_head;   // [vocab][dim]   lm_head, or embed_tokens when tied
    RopeTable rope;   // [ctx][head_dim / 2] (cos, sin), with the config's scaling
};

static void load_weights(Weights& w, const Config& c, const Checkpoint& ck, Runtime& rt) {
    GpuMemory& mem = rt.mem;
    cudaStream_t s = rt.stream;
    w.embed = load_embedding(ck, c.vocab, c.dim, mem, s);
    w.rope = make_rope_table(c.hf.rope, c.head_dim, rt.ctx, mem, s, rt.max_tokens);
    w.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        std::string p = strf("model.layers.%d.", l), a = p + "self_attn.", m = p + "mlp.";
        Layer& L = w.layers[l];
        L.attn_norm = load_vector(ck, p + "input_layernorm.weight", c.dim, mem, s);
        L.qkv = load_linear(ck, {{a + "q_proj", a + "k_proj", a + "v_proj"}, {c.q_dim, c.kv_dim, c.kv_dim}, false, c.qkv_bias}, c.dim, rt.fmt, mem, s);
        L.o = load_linear(ck, {{a + "o_proj"}, {c.dim}, false, c.o_bias}, c.q_dim, rt.fmt, mem, s);
        L.mlp_norm = load_vector(ck, p + "post_attention_layernorm.weight", c.dim, mem, s);
        L.attn.rope = c.rope[l] ? &w.rope : nullptr;
        L.attn.params.window = c.window[l];
        if (c.moe) {
            L.moe = load_moe(ck, rt, l, p + "block_sparse_moe.", {"w1", "w3", "w2"}, false, c.router, c.experts, c.dim);
            rt.lin.plan.layer({{&L.qkv}, {&L.o, &L.moe.gate}});  // the order forward() multiplies in (experts: as routed)
            continue;
        }
        L.gate_up = load_linear(ck, {{m + "gate_proj", m + "up_proj"}, {c.ffn, c.ffn}, true, c.mlp_bias}, c.dim, rt.fmt, mem, s);
        L.down = load_linear(ck, {{m + "down_proj"}, {c.dim}, false, c.mlp_bias}, c.ffn, rt.fmt, mem, s);
        rt.lin.plan.layer({{&L.qkv}, {&L.o, &L.gate_up, &L.down}});  // the order forward() multiplies in
    }
    w.final_norm = load_vector(ck, "model.norm.weight", c.dim, mem, s);
    w.lm_head = load_lm_head(ck, c.hf.path, c.vocab, c.dim, c.hf.tie_word_embeddings, rt.fmt, w.embed, mem, s);
    rt.lin.plan.head(&w.lm_head);
}

// ---- State ----

// One pass's activations (runtime/activations.cuh: x, qkv, att, h, xn, logits) and the mixture's; the KV cache is the
// kit's (rt.attn), addressed by sequence. A llama keeps nothing else per sequence.
struct State : DecoderActivations {
    MoeScratch moe;  // mixtral: router scores, choices and the experts' rows (runtime/moe_layer.cuh)
};

// ---- forward ----

struct Llama {
    static constexpr const char* kName = "llama";
    Config c;  Weights w;  State s;  // the checkpoint's shape, its weights on the GPU, a pass's activations

    explicit Llama(const std::string& dir) : c(load_config(dir)) {}  // config.json, checked: before any GPU work
    ModelInfo info() const {
        ModelInfo i = decoder_info(c.vocab, c.dim, c.hf, w.lm_head.w == w.embed);  // vocab, limits, unread embedding rows
        int nope = (int)std::count(c.rope.begin(), c.rope.end(), false), sliding = c.n_layers - (int)std::count(c.window.begin(), c.window.end(), 0);
        i.summary = strf("%s: %d layers (%d without RoPE, %d with a window), dim %d, %d/%d heads x %d, ffn %d, vocab %d, rope %s",
                         c.hf.model_type.c_str(), c.n_layers, nope, sliding, c.dim, c.n_heads, c.n_kv, c.head_dim, c.ffn, c.vocab, c.hf.rope.type.c_str());
        if (c.moe) moe_model_info(i, c.n_layers, c.experts, c.dim, w.layers.empty() ? nullptr : &w.layers[0].moe);  // k of E experts read
        i.kv_window = kv_window_of(c.window);  // all layers windowed (Mistral): the batched core frees blocks behind it
        return i;
    }

    void load(Runtime& rt, const Checkpoint& ck) { load_weights(w, c, ck, rt); }
    AttnSpec attn_spec() const { return AttnSpec{c.n_layers, c.n_heads, c.n_kv, c.head_dim}  /* no q/k norm: no eps */; }
    void alloc(Runtime& rt) {
        static_cast<DecoderActivations&>(s) = decoder_activations(rt, c.dim, c.q_dim, c.kv_dim, c.moe ? 0 : c.ffn, c.vocab);  // mixtral: no MLP
        if (c.moe) s.moe = moe_scratch(rt.max_tokens, c.experts.n_experts, c.experts.k, c.dim, c.experts.ffn, rt.mem);
    }

    // Runs the batch's tokens through the model, filling their KV rows; returns the logits of its last n_out.
    const float* forward(Runtime& rt, const Batch& b) {
        const int T = b.n_tokens;
        cudaStream_t st = rt.stream;
        // x = embed_tokens(ids)
        embedding(w.embed, b.ids, s.x, T, c.dim, c.vocab, st);
        rt.taps.f32("embed", s.x, T, c.dim, st);
        for (int l = 0; l < c.n_layers; l++) {
            const Layer& L = w.layers[l];
            // q, k, v = q_proj(n), k_proj(n), v_proj(n)  with n = input_layernorm(x)
            linear_rmsnorm(L.qkv, s.x, L.attn_norm, c.eps, s.qkv, T, rt.lin, st);
            // a = softmax(rope(q) rope(k)^T / sqrt(head_dim) + causal (and window) mask) v, over the cached positions
            attention(rt.attn, L.attn, l, s.qkv, b, s.att, st);
            // x = x + o_proj(a)
            linear_add(L.o, s.att, s.x, T, rt.lin, st);
            if (c.moe) {
                // x = x + sum_e g_e w2_e(silu(w1_e(m)) * w3_e(m))  over the experts the router picks for m = post_attention_layernorm(x)
                moe_layer(rt, L.moe, l, s.x, L.mlp_norm, c.eps, b, s.moe);
            } else {
                // x = x + down_proj(silu(gate_proj(m)) * up_proj(m))  with m = post_attention_layernorm(x)
                linear_rmsnorm_swiglu(L.gate_up, s.x, L.mlp_norm, c.eps, s.h, T, rt.lin, st);
                linear_add(L.down, s.h, s.x, T, rt.lin, st);
            }
            rt.taps.f32(strf("layer_%02d", l), s.x, T, c.dim, st);
        }
        // logits = lm_head(norm(x))   for the last n_out tokens
        return decoder_logits(rt, s, b, w.final_norm, w.lm_head, c.dim, c.vocab, c.eps, st);
    }
};

// ---- main ----

int main(int argc, char** argv) { return engine_main<Llama>(argc, argv); }
