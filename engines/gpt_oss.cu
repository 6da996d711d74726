// gpt_oss.cu — OpenAI's open-weight mixtures of experts in one file: gpt-oss-20b and gpt-oss-120b (model_type gpt_oss),
// their experts read in MXFP4 as published.
//
//   build/sm_90/gpt_oss -m models/gpt-oss-20b -cnv                       (harmony chat; --show-reasoning for analysis)
//   build/sm_90/gpt_oss -m models/gpt-oss-20b -p "Why is the sky blue?" -n 256
//   build/sm_90/gpt_oss -m models/gpt-oss-120b --bench --n-prompt 512 -n 128
//
// transformers' modeling_gpt_oss.py: a pre-norm decoder whose every layer is attention, then a mixture of experts:
//   h = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),  n = input_layernorm(x)
//   x = h + sum over the top k experts e of g_e (down_e(a_e) + bd_e),     m = post_attention_layernorm(h)
//       a_e = glu(gate_up_e(m) + bgu_e), g = softmax over the k largest router logits, logits = router(m) + b
// with its own twists:
//   - attention sinks: each query head has a learned logit that joins the softmax's denominator and nothing else,
//     so a head can attend to "nothing" (attn = sum_j e^(s_j) v_j / (sum_j e^(s_j) + e^(sink)));
//   - sliding-window layers (layer_types; 128 keys) alternate with full ones;
//   - YaRN RoPE (rope_parameters: factor, beta_fast / beta_slow, original_max_position_embeddings), whose attention
//     factor scales cos and sin (host/rope.h); biases on q, k, v and o;
//   - the experts' clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit), glu = g sigmoid(alpha g) (u + 1)
//     (swiglu_limit 7, swiglu_alpha 1.702), with gate and up interleaved in gate_up_proj (2i gate, 2i + 1 up);
//   - experts stored together per layer, and published in MXFP4 (4.25 bits a weight: E2M1 codes with a power-of-two
//     scale per 32), which the expert GEMVs read as they are (ops/gemv.cuh) and prefill dequantizes per expert.
// The residual stream x stays fp32 on the GPU; matmul inputs are bf16; every accumulation is fp32.
// The harmony chat format (analysis / final channels, tool calls) comes from the checkpoint's chat template and the
// kit's reply parser (tokenizer/chat_reply.h); generation stops at <|return|> and <|call|> (generation_config.json).
#include "host/model_types.h"
#include "load/load_linear.cuh"
#include "ops/embed.cuh"
#include "ops/rope.cuh"
#include "runtime/activations.cuh"
#include "runtime/moe_layer.cuh"
#include "runtime/runner.cuh"

using namespace monocu;

// ---- Config ----

struct Config : DecoderDims {    // dim, ffn (each expert's width), n_layers, n_heads, n_kv, head_dim, vocab, q_dim, kv_dim, eps
    ModelConfig hf;                // config.json as read, with GptOssConfig's defaults
    bool attn_bias;                // attention_bias: biases on q, k, v, o
    std::vector<int> window;       // per layer: sliding window, 0 = full attention
    MoeDims experts;               // num_local_experts, num_experts_per_tok, intermediate_size
    MoeRouter router;              // top k of the logits, softmax over those k
    GluAct act;                    // swiglu_alpha, swiglu_limit
};

static Config load_config(const std::string& dir) {
    Config c;
    c.hf = load_checked_config(dir);  // GptOssConfig's defaults; sizes the kernels take (host/model_types.h)
    const ModelConfig& h = c.hf;
    const char* p = h.path.c_str();
    if (h.model_type != "gpt_oss")
        die("%s: model_type is '%s'; this engine runs gpt_oss (build/<arch>/%s runs it)", p, h.model_type.c_str(),
            find_model_type(h.model_type)->engine);
    c.read_dims(h);
    if (h.rope.type != "yarn" && h.rope.type != "default") die("%s: rope type '%s' is not supported (yarn, default)", p, h.rope.type.c_str());
    if (!h.quant.method.empty() && h.quant.method != "mxfp4" && h.quant.method != "monocu")
        die("%s: quantization_config '%s' is not supported (mxfp4 as published, or tools/quantize output)", p, h.quant.method.c_str());
    const nlohmann::json* ab = h.find("attention_bias");
    c.attn_bias = ab ? json_as_bool(p, "attention_bias", *ab) : true;

    // Windows per layer: layer_types, or as GptOssConfig derives it (sliding on even layers, full on odd ones).
    int sw = 0;
    if (const nlohmann::json* v = h.find("sliding_window"); v && !v->is_null()) sw = json_as_int(p, "sliding_window", *v);
    if (sw < 0) die("%s: 'sliding_window' must be positive or null", p);
    const nlohmann::json* lt = h.find("layer_types");
    if (lt && !lt->is_null() && !lt->is_array()) die("%s: 'layer_types' must be a list", p);
    if (lt && lt->is_array() && (int)lt->size() != c.n_layers) die("%s: 'layer_types' has %zu entries for %d layers", p, lt->size(), c.n_layers);
    c.window.assign(c.n_layers, 0);
    for (int l = 0; l < c.n_layers; l++) {
        bool sliding = l % 2 == 0;
        if (lt && lt->is_array()) {
            std::string t = json_as_string(p, "layer_types", (*lt)[l]);
            if (t != "full_attention" && t != "sliding_attention") die("%s: layer_types[%d] '%s' is not supported", p, l, t.c_str());
            sliding = t == "sliding_attention";
        }
        if (sliding && sw <= 0) die("%s: layer %d is sliding_attention but sliding_window is %d", p, l, sw);
        c.window[l] = sliding ? sw : 0;
    }

    // The mixture: experts as wide as intermediate_size; the router's k largest logits, softmax over those k (the same
    // as softmax over all, renormalised over the k).
    c.experts = read_moe_dims(h, {"num_local_experts", "num_experts"}, "intermediate_size");
    c.router.score = MoeScore::Softmax, c.router.norm_topk = true;
    auto num = [&](const char* key) { return json_as_double(p, key, h.require(key)); };
    c.act.alpha = (float)num("swiglu_alpha"), c.act.limit = (float)num("swiglu_limit");
    if (!(c.act.limit > 0) || !std::isfinite(c.act.limit)) die("%s: 'swiglu_limit' = %g must be positive", p, num("swiglu_limit"));
    if (!std::isfinite(c.act.alpha)) die("%s: 'swiglu_alpha' must be a number", p);
    return c;
}

// ---- Weights ----

struct Layer {
    bf16* attn_norm;  // [dim]      input_layernorm
    Linear qkv;       // [q_dim + 2 kv_dim][dim]   q_proj, k_proj, v_proj stacked by rows, with their biases
    Linear o;         // [dim][q_dim]              o_proj (+ bias)
    float* sinks;     // [n_heads]  self_attn.sinks
    bf16* mlp_norm;   // [dim]      post_attention_layernorm
    MoeFfn moe;       // mlp.router [E][dim] + bias; mlp.experts: gate_up_proj [E][2 ffn][dim], down_proj [E][dim][ffn], biases
    AttnLayer attn;   // its RoPE table, window and sinks
};

struct Weights {
    bf16* embed;      // [vocab][dim]   embed_tokens
    std::vector<Layer> layers;
    bf16* final_norm; // [dim]          model.norm
    Linear lm_head;   // [vocab][dim]   lm_head
    RopeTable rope;   // [ctx][head_dim / 2] (cos, sin), YaRN's frequencies and attention factor
};

static void load_weights(Weights& w, const Config& c, const Checkpoint& ck, Runtime& rt) {
    GpuMemory& mem = rt.mem;
    cudaStream_t s = rt.stream;
    w.embed = load_embedding(ck, c.vocab, c.dim, mem, s);
    w.rope = make_rope_table(c.hf.rope, c.head_dim, rt.ctx, mem, s, rt.max_tokens);
    w.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        std::string p = strf("model.layers.%d.", l), a = p + "self_attn.";
        Layer& L = w.layers[l];
        L.attn_norm = load_vector(ck, p + "input_layernorm.weight", c.dim, mem, s);
        L.qkv = load_linear(ck, {{a + "q_proj", a + "k_proj", a + "v_proj"}, {c.q_dim, c.kv_dim, c.kv_dim}, false, c.attn_bias}, c.dim, rt.fmt, mem, s);
        L.o = load_linear(ck, {{a + "o_proj"}, {c.dim}, false, c.attn_bias}, c.q_dim, rt.fmt, mem, s);
        L.sinks = load_vector_f32(ck, a + "sinks", c.n_heads, mem, s);
        L.mlp_norm = load_vector(ck, p + "post_attention_layernorm.weight", c.dim, mem, s);
        L.moe = load_moe_fused(ck, rt, l, p + "mlp.", c.router, c.experts, c.dim, c.act);
        L.attn.rope = &w.rope;
        L.attn.params.window = c.window[l];
        L.attn.params.sinks = L.sinks;
        rt.lin.plan.layer({{&L.qkv}, {&L.o, &L.moe.gate}});  // the order forward() multiplies in (experts: as routed)
    }
    w.final_norm = load_vector(ck, "model.norm.weight", c.dim, mem, s);
    w.lm_head = load_lm_head(ck, c.hf.path, c.vocab, c.dim, c.hf.tie_word_embeddings, rt.fmt, w.embed, mem, s);
    rt.lin.plan.head(&w.lm_head);
}

// ---- State ----

// One pass's activations (runtime/activations.cuh: x, qkv, att, xn, logits; no dense MLP) and the mixture's; the KV
// cache is the kit's (rt.attn), addressed by sequence.
struct State : DecoderActivations {
    MoeScratch moe;  // router logits, choices and the experts' rows (runtime/moe_layer.cuh)
};

// ---- forward ----

struct GptOss {
    static constexpr const char* kName = "gpt_oss";
    Config c;  Weights w;  State s;  // the checkpoint's shape, its weights on the GPU, a pass's activations

    explicit GptOss(const std::string& dir) : c(load_config(dir)) {}  // config.json, checked: before any GPU work
    ModelInfo info() const {
        ModelInfo i = decoder_info(c.vocab, c.dim, c.hf, false);  // vocab, limits
        int sliding = c.n_layers - (int)std::count(c.window.begin(), c.window.end(), 0);
        i.summary = strf("gpt_oss: %d layers (%d with a window of %d), dim %d, %d/%d heads x %d with sinks, vocab %d, rope %s", c.n_layers,
                         sliding, sliding ? *std::max_element(c.window.begin(), c.window.end()) : 0, c.dim, c.n_heads, c.n_kv, c.head_dim,
                         c.vocab, c.hf.rope.type.c_str());
        moe_model_info(i, c.n_layers, c.experts, c.dim, w.layers.empty() ? nullptr : &w.layers[0].moe);  // k of E experts read
        i.kv_window = kv_window_of(c.window);  // all layers windowed (Mistral): the batched core frees blocks behind it
        if (!w.layers.empty()) i.summary += strf(", experts in %s", wformat_name(w.layers[0].moe.experts.down[0].fmt));
        return i;
    }

    void load(Runtime& rt, const Checkpoint& ck) { load_weights(w, c, ck, rt); }
    AttnSpec attn_spec() const { return AttnSpec{c.n_layers, c.n_heads, c.n_kv, c.head_dim}  /* no q/k norm: no eps */; }
    void alloc(Runtime& rt) {
        static_cast<DecoderActivations&>(s) = decoder_activations(rt, c.dim, c.q_dim, c.kv_dim, 0, c.vocab);  // no dense MLP
        s.moe = moe_scratch(rt.max_tokens, c.experts.n_experts, c.experts.k, c.dim, c.experts.ffn, rt.mem);
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
            // q, k, v = q_proj(n) + bq, k_proj(n) + bk, v_proj(n) + bv  with n = input_layernorm(x)
            linear_rmsnorm(L.qkv, s.x, L.attn_norm, c.eps, s.qkv, T, rt.lin, st);
            // a = softmax([rope(q) rope(k)^T / sqrt(head_dim) + causal (and window) mask, sink]) v, the sink's share dropped
            attention(rt.attn, L.attn, l, s.qkv, b, s.att, st);
            // x = x + o_proj(a) + bo
            linear_add(L.o, s.att, s.x, T, rt.lin, st);
            // x = x + sum_e g_e (down_e(glu(gate_up_e(m) + bgu_e)) + bd_e)  over the router's top k for m = post_attention_layernorm(x)
            moe_layer<true>(rt, L.moe, l, s.x, L.mlp_norm, c.eps, b, s.moe);
            rt.taps.f32(strf("layer_%02d", l), s.x, T, c.dim, st);
        }
        // logits = lm_head(norm(x))   for the last n_out tokens
        return decoder_logits(rt, s, b, w.final_norm, w.lm_head, c.dim, c.vocab, c.eps, st);
    }
};

// ---- main ----

int main(int argc, char** argv) { return engine_main<GptOss>(argc, argv); }
