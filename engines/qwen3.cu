// qwen3.cu — Qwen3 in one file, top to bottom: the dense decoders (model_type qwen3: Qwen3-0.6B ... Qwen3-32B) and
// their mixture-of-experts form (qwen3_moe: Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B).
//
//   build/sm_90/qwen3 -m models/Qwen3-4B -p "Why is the sky blue?" -n 256
//   build/sm_90/qwen3 -m models/Qwen3-4B -cnv
//   build/sm_90/qwen3 -m models/Qwen3-30B-A3B --dtype int4 -cnv
//   build/sm_90/qwen3 -m models/Qwen3-4B --bench --n-prompt 512 -n 128
//
// Qwen3 (transformers' modeling_qwen3.py, modeling_qwen3_moe.py) is a Llama-style pre-norm decoder with two twists:
// RMSNorm on every query and key head before RoPE (q_norm, k_norm), and no biases. One layer:
//   h = x + o_proj(attn(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n))),  n = input_layernorm(x)
//   x = h + down_proj(silu(gate_proj(m)) * up_proj(m)),                                  m = post_attention_layernorm(h)
// or, in qwen3_moe's sparse layers (every decoder_sparse_step-th, less mlp_only_layers), a mixture of experts:
//   x = h + sum over the top k experts e of g_e down_e(silu(gate_e(m)) * up_e(m))
//   with p = softmax(gate(m)) over all experts, the k largest chosen, g = p, or p / sum of the k (norm_topk_prob)
// The residual stream x stays fp32 on the GPU; matmul inputs are bf16; every accumulation is fp32.
// Everything that is not the model (flags, tokenizer, KV cache, sampling, the decode loop, chat, bench) is the
// kit's runner (common/runtime/runner.cuh); the mixture's routing and expert matmuls are runtime/moe_layer.cuh.
#include "host/model_types.h"
#include "load/load_linear.cuh"
#include "ops/embed.cuh"
#include "ops/rope.cuh"
#include "runtime/activations.cuh"
#include "runtime/moe_layer.cuh"
#include "runtime/runner.cuh"

using namespace monocu;

// ---- Config ----

struct Config : DecoderDims {  // dim, ffn, n_layers, n_heads, n_kv, head_dim, vocab, q_dim, kv_dim, eps (host/model_types.h)
    ModelConfig hf;               // config.json as read, with Qwen3Config's (or Qwen3MoeConfig's) defaults
    // qwen3_moe: which layers have a mixture of experts instead of the MLP, and its shape
    std::vector<bool> sparse;     // per layer
    int n_sparse = 0;
    MoeDims experts;              // num_experts, num_experts_per_tok, moe_intermediate_size
    MoeRouter router;             // softmax over all experts, top k, renormalised if norm_topk_prob
};

static Config load_config(const std::string& dir) {
    Config c;
    c.hf = load_checked_config(dir);  // Qwen3Config's defaults for absent keys; sizes the kernels take (host/model_types.h)
    const ModelConfig& h = c.hf;
    const char* p = h.path.c_str();
    if (h.model_type != "qwen3" && h.model_type != "qwen3_moe")
        die("%s: model_type is '%s'; this engine runs qwen3 and qwen3_moe (build/<arch>/%s runs it)", p, h.model_type.c_str(),
            find_model_type(h.model_type)->engine);
    if (h.attention_bias) die("%s: attention_bias = true is not supported", h.path.c_str());
    if (h.sliding_window > 0) die("%s: use_sliding_window = true is not supported", h.path.c_str());
    if (h.rope.type != "default") die("%s: rope_scaling type '%s' is not supported for qwen3", h.path.c_str(), h.rope.type.c_str());
    if (!h.quant.method.empty() && h.quant.method != "monocu" &&
        !(h.quant.method == "fp8" && h.quant.weight_block_size == std::vector<int>{128, 128}))
        die("%s: quantization_config '%s' is not supported (fp8 with 128x128 blocks, or tools/quantize output)", h.path.c_str(),
            h.quant.method.c_str());
    c.read_dims(h);

    // qwen3_moe's layer plan, as Qwen3MoeDecoderLayer decides it: a mixture where (l + 1) % decoder_sparse_step == 0,
    // unless l is in mlp_only_layers or there are no experts; the other layers keep the MLP of intermediate_size.
    c.sparse.assign(c.n_layers, false);
    // (transformers writes the expert count as num_local_experts; the Hub's configs say num_experts.)
    if (h.model_type == "qwen3_moe" && moe_expert_count(h, {"num_experts", "num_local_experts"}) > 0) {
        c.experts = read_moe_dims(h, {"num_experts", "num_local_experts"}, "moe_intermediate_size");
        c.router.score = MoeScore::Softmax;
        c.router.norm_topk = json_as_bool(p, "norm_topk_prob", h.require("norm_topk_prob"));
        int step = json_as_int(p, "decoder_sparse_step", h.require("decoder_sparse_step"));
        if (step < 1) die("%s: 'decoder_sparse_step' = %d must be positive", p, step);
        std::vector<bool> dense_only(c.n_layers, false);
        if (const nlohmann::json* m = h.find("mlp_only_layers"); m && !m->is_null()) {
            if (!m->is_array()) die("%s: 'mlp_only_layers' must be a list of layer indices", p);
            for (const auto& v : *m) {
                int l = json_as_int(p, "mlp_only_layers", v);
                if (l < 0 || l >= c.n_layers) die("%s: mlp_only_layers holds %d; there are %d layers", p, l, c.n_layers);
                dense_only[l] = true;
            }
        }
        for (int l = 0; l < c.n_layers; l++) c.n_sparse += c.sparse[l] = !dense_only[l] && (l + 1) % step == 0;
    }
    return c;
}

// ---- Weights ----

struct Layer {
    bf16* attn_norm;  // [dim]      input_layernorm
    bf16* q_norm;     // [head_dim]
    bf16* k_norm;     // [head_dim]
    Linear qkv;       // [q_dim + 2 kv_dim][dim]   q_proj, k_proj, v_proj stacked by rows
    Linear o;         // [dim][q_dim]              o_proj
    bf16* mlp_norm;   // [dim]      post_attention_layernorm
    Linear gate_up;   // [2 ffn][dim]              gate_proj and up_proj, rows interleaved (2i gate, 2i+1 up)
    Linear down;      // [dim][ffn]                down_proj
    MoeFfn moe;       // ... or, in a sparse layer: the router gate [E][dim], experts.e.{gate_proj, up_proj, down_proj}
};

struct Weights {
    bf16* embed;      // [vocab][dim]   embed_tokens
    std::vector<Layer> layers;
    bf16* final_norm; // [dim]          model.norm
    Linear lm_head;   // [vocab][dim]   lm_head, or embed_tokens when tied
    RopeTable rope;   // [ctx][head_dim / 2] (cos, sin)
};

static void load_weights(Weights& w, const Config& c, const Checkpoint& ck, Runtime& rt) {
    GpuMemory& mem = rt.mem;
    cudaStream_t s = rt.stream;
    w.embed = load_embedding(ck, c.vocab, c.dim, mem, s);
    w.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        std::string p = strf("model.layers.%d.", l), a = p + "self_attn.", m = p + "mlp.";
        Layer& L = w.layers[l];
        L.attn_norm = load_vector(ck, p + "input_layernorm.weight", c.dim, mem, s);
        L.q_norm = load_vector(ck, a + "q_norm.weight", c.head_dim, mem, s);
        L.k_norm = load_vector(ck, a + "k_norm.weight", c.head_dim, mem, s);
        L.qkv = load_linear(ck, {{a + "q_proj", a + "k_proj", a + "v_proj"}, {c.q_dim, c.kv_dim, c.kv_dim}}, c.dim, rt.fmt, mem, s);
        L.o = load_linear(ck, {{a + "o_proj"}, {c.dim}}, c.q_dim, rt.fmt, mem, s);
        L.mlp_norm = load_vector(ck, p + "post_attention_layernorm.weight", c.dim, mem, s);
        if (c.sparse[l]) {
            L.moe = load_moe(ck, rt, l, m, {"gate_proj", "up_proj", "down_proj"}, false, c.router, c.experts, c.dim);
            rt.lin.plan.layer({{&L.qkv}, {&L.o, &L.moe.gate}});  // the order forward() multiplies in (experts: as routed)
            continue;
        }
        L.gate_up = load_linear(ck, {{m + "gate_proj", m + "up_proj"}, {c.ffn, c.ffn}, true}, c.dim, rt.fmt, mem, s);
        L.down = load_linear(ck, {{m + "down_proj"}, {c.dim}}, c.ffn, rt.fmt, mem, s);
        rt.lin.plan.layer({{&L.qkv}, {&L.o, &L.gate_up, &L.down}});  // the order forward() multiplies in
    }
    w.final_norm = load_vector(ck, "model.norm.weight", c.dim, mem, s);
    w.lm_head = load_lm_head(ck, c.hf.path, c.vocab, c.dim, c.hf.tie_word_embeddings, rt.fmt, w.embed, mem, s);
    rt.lin.plan.head(&w.lm_head);
    w.rope = make_rope_table(c.hf.rope, c.head_dim, rt.ctx, mem, s, rt.max_tokens);
}

// ---- State ----

// One pass's activations (runtime/activations.cuh: x, qkv, att, h, xn, logits) and the mixture's; the KV cache is the
// kit's (rt.attn), addressed by sequence. A qwen3 keeps nothing else per sequence.
struct State : DecoderActivations {
    MoeScratch moe;  // router scores, choices and the experts' rows (runtime/moe_layer.cuh)
};

// ---- forward ----

struct Qwen3 {
    static constexpr const char* kName = "qwen3";
    Config c;  Weights w;  State s;  // the checkpoint's shape, its weights on the GPU, a pass's activations

    explicit Qwen3(const std::string& dir) : c(load_config(dir)) {}  // config.json, checked: before any GPU work
    void load(Runtime& rt, const Checkpoint& ck) { load_weights(w, c, ck, rt); }
    void alloc(Runtime& rt) {
        static_cast<DecoderActivations&>(s) = decoder_activations(rt, c.dim, c.q_dim, c.kv_dim, c.ffn, c.vocab);
        if (c.n_sparse) s.moe = moe_scratch(rt.max_tokens, c.experts.n_experts, c.experts.k, c.dim, c.experts.ffn, rt.mem);
    }
    AttnSpec attn_spec() const { return AttnSpec{c.n_layers, c.n_heads, c.n_kv, c.head_dim, c.eps}; }
    ModelInfo info() const {
        ModelInfo i = decoder_info(c.vocab, c.dim, c.hf, w.lm_head.w == w.embed);  // vocab, limits, unread embedding rows
        i.summary = strf("%s: %d layers, dim %d, %d/%d heads x %d, ffn %d, vocab %d", c.hf.model_type.c_str(), c.n_layers, c.dim, c.n_heads,
                         c.n_kv, c.head_dim, c.ffn, c.vocab);
        const Layer* sparse = nullptr;  // a loaded mixture layer (for its experts' bytes), once loaded
        for (int l = 0; l < (int)w.layers.size() && !sparse; l++)
            if (c.sparse[l]) sparse = &w.layers[l];
        moe_model_info(i, c.n_sparse, c.experts, c.dim, sparse ? &sparse->moe : nullptr);  // a token reads k of E experts
        return i;
    }

    // Runs the batch's tokens through the model, filling their KV rows; returns the logits of its last n_out.
    const float* forward(Runtime& rt, const Batch& b) {
        const int T = b.n_tokens;
        cudaStream_t st = rt.stream;
        Taps& taps = rt.taps;
        // x = embed_tokens(ids)
        embedding(w.embed, b.ids, s.x, T, c.dim, c.vocab, st);
        taps.f32("embed", s.x, T, c.dim, st);
        for (int l = 0; l < c.n_layers; l++) {
            const Layer& L = w.layers[l];
            // q, k, v = q_proj(n), k_proj(n), v_proj(n)  with n = input_layernorm(x)
            linear_rmsnorm(L.qkv, s.x, L.attn_norm, c.eps, s.qkv, T, rt.lin, st);
            // a = softmax(q k^T / sqrt(head_dim) + causal_mask) v  with q, k = rope(q_norm(q)), rope(k_norm(k)),
            //     over every cached position (this batch's keys and values are cached first)
            attention(rt.attn, AttnLayer{L.q_norm, L.k_norm, &w.rope, {}}, l, s.qkv, b, s.att, st);
            // x = x + o_proj(a)
            linear_add(L.o, s.att, s.x, T, rt.lin, st);
            if (c.sparse[l]) {
                // x = x + sum_e g_e down_e(silu(gate_e(m)) * up_e(m))  over the experts the router picks for
                //     m = post_attention_layernorm(x)
                moe_layer(rt, L.moe, l, s.x, L.mlp_norm, c.eps, b, s.moe);
            } else {
                // h = silu(gate_proj(m)) * up_proj(m)  with m = post_attention_layernorm(x)
                linear_rmsnorm_swiglu(L.gate_up, s.x, L.mlp_norm, c.eps, s.h, T, rt.lin, st);
                // x = x + down_proj(h)
                linear_add(L.down, s.h, s.x, T, rt.lin, st);
            }
            taps.f32(strf("layer_%02d", l), s.x, T, c.dim, st);
        }
        // logits = lm_head(norm(x))   for the last n_out tokens
        return decoder_logits(rt, s, b, w.final_norm, w.lm_head, c.dim, c.vocab, c.eps, st);
    }
};

// ---- main ----

int main(int argc, char** argv) { return engine_main<Qwen3>(argc, argv); }
