// lfm2.cu — LiquidAI's LFM2 in one file: a hybrid decoder whose layers are mostly gated short convolutions, with a
// few GQA attention layers among them (model_type lfm2: LFM2-350M / 700M / 1.2B / 2.6B, LFM2.5-1.2B), and its
// mixture-of-experts form (model_type lfm2_moe: LFM2-8B-A1B, LFM2.5-8B-A1B).
//
//   build/sm_90/lfm2 -m models/LFM2-1.2B -p "What is a convolution?" -n 256
//   build/sm_90/lfm2 -m models/LFM2-8B-A1B --dtype int4 -cnv
//
// transformers' modeling_lfm2.py and modeling_lfm2_moe.py. Which layers attend comes from config.json (layer_types,
// or full_attn_idxs in older configs). One layer, n = operator_norm(x), m = ffn_norm(x):
//   conv layer:       B, C, v = in_proj(n)                      (three chunks of dim)
//                     x = x + out_proj(C * conv(B * v))          conv: causal, depthwise, conv_L_cache taps
//   attention layer:  x = x + out_proj(attn(rope(q_layernorm(q_proj(n))), rope(k_layernorm(k_proj(n))), v_proj(n)))
//   every layer:      x = x + w2(silu(w1(m)) * w3(m))            (lfm2, and lfm2_moe's first num_dense_layers)
//              or     x = x + sum over the top k experts e of g_e w2_e(silu(w1_e(m)) * w3_e(m))   (lfm2_moe)
//                     with s = sigmoid(gate(m)), the k largest s + expert_bias chosen, g = s / sum (norm_topk_prob)
//                     x routed_scaling_factor (runtime/moe_layer.cuh)
// and logits = lm_head(embedding_norm(x)) (the final norm, despite its name). A conv layer's memory of the
// sequence is the last conv_L_cache - 1 values of B * v per channel: a small state per sequence beside the
// attention layers' KV cache (ops/short_conv.cuh). The residual stream x stays fp32 on the GPU; matmul inputs are
// bf16; every accumulation is fp32.
#include "host/model_types.h"
#include "load/load_linear.cuh"
#include "ops/embed.cuh"
#include "ops/rope.cuh"
#include "runtime/conv_layer.cuh"
#include "runtime/activations.cuh"
#include "runtime/moe_layer.cuh"
#include "runtime/runner.cuh"

using namespace monocu;

// ---- Config ----

struct Config : DecoderDims {   // dim, ffn, n_layers, n_heads, n_kv, head_dim, vocab, q_dim, kv_dim, eps (norm_eps)
    ModelConfig hf;               // config.json as read, with transformers' defaults
    std::vector<bool> attn;       // per layer: attention (else a short conv)
    std::vector<int> index;       // per layer: its place among the attention layers (KV cache) or the conv layers (state)
    int n_attn = 0, n_conv = 0;
    int conv_L;                   // conv_L_cache: taps of the convolution
    bool conv_bias;               // biases on in_proj, the conv and out_proj
    // lfm2_moe: layers from n_dense on have a mixture of experts instead of the MLP
    bool moe = false;
    int n_dense = 0;                              // num_dense_layers
    MoeDims experts;                              // num_experts, num_experts_per_tok, moe_intermediate_size
    MoeRouter router;                             // sigmoid scores; norm_topk_prob; routed_scaling_factor
    bool expert_bias = false;                     // use_expert_bias
};

static Config load_config(const std::string& dir) {
    Config c;
    c.hf = load_checked_config(dir);  // transformers' defaults; sizes the kernels take (host/model_types.h)
    const ModelConfig& h = c.hf;
    const char* p = h.path.c_str();
    if (h.model_type != "lfm2" && h.model_type != "lfm2_moe")
        die("%s: model_type is '%s'; this engine runs lfm2 and lfm2_moe (build/<arch>/%s runs it)", p, h.model_type.c_str(),
            find_model_type(h.model_type)->engine);
    c.moe = h.model_type == "lfm2_moe";
    c.read_dims(h);
    if (h.rope.type != "default") die("%s: rope type '%s' is not supported (default)", p, h.rope.type.c_str());
    if (!h.quant.method.empty() && h.quant.method != "monocu")
        die("%s: quantization_config '%s' is not supported (tools/quantize output)", p, h.quant.method.c_str());
    c.conv_L = json_as_int(p, "conv_L_cache", h.require("conv_L_cache"));
    if (c.conv_L < 1 || c.conv_L > kShortConvMaxL) die("%s: 'conv_L_cache' = %d is not supported (1..%d)", p, c.conv_L, kShortConvMaxL);
    c.conv_bias = json_as_bool(p, "conv_bias", h.require("conv_bias"));

    // The MLP's width, as Lfm2MLP derives it from intermediate_size: two thirds, times block_ffn_dim_multiplier,
    // rounded up to a multiple of block_multiple_of (the last two only when the multiplier is set); lfm2_moe's
    // dense layers take intermediate_size as it is.
    if (!c.moe && json_as_bool(p, "block_auto_adjust_ff_dim", h.require("block_auto_adjust_ff_dim"))) {
        c.ffn = (int)(2.0 * c.ffn / 3.0);
        const nlohmann::json* mult = h.find("block_ffn_dim_multiplier");
        if (mult && !mult->is_null()) {
            int multiple = json_as_int(p, "block_multiple_of", h.require("block_multiple_of"));
            if (multiple < 1) die("%s: 'block_multiple_of' must be positive", p);
            c.ffn = (int)(json_as_double(p, "block_ffn_dim_multiplier", *mult) * c.ffn);
            c.ffn = multiple * ((c.ffn + multiple - 1) / multiple);
        }
    }
    if (c.ffn < 8 || c.ffn % 8) die("%s: the MLP's width comes to %d; it must be a positive multiple of 8", p, c.ffn);
    if (c.moe) {
        c.n_dense = json_as_int(p, "num_dense_layers", h.require("num_dense_layers"));
        c.experts = read_moe_dims(h, {"num_experts"}, "moe_intermediate_size");
        c.router.score = MoeScore::Sigmoid;
        c.router.norm_topk = json_as_bool(p, "norm_topk_prob", h.require("norm_topk_prob"));
        c.router.norm_eps = 1e-6f;
        c.router.scale = (float)json_as_double(p, "routed_scaling_factor", h.require("routed_scaling_factor"));
        c.expert_bias = json_as_bool(p, "use_expert_bias", h.require("use_expert_bias"));
        if (c.n_dense < 0 || c.n_dense > c.n_layers) die("%s: 'num_dense_layers' = %d for %d layers", p, c.n_dense, c.n_layers);
    }

    // Which layers attend: layer_types ("full_attention" / "conv"), else full_attn_idxs, else all of them.
    c.attn.assign(c.n_layers, true);
    if (h.find("layer_types")) {
        for (int l = 0; l < c.n_layers; l++) {
            const std::string& t = h.layer_types[l];
            if (t != "full_attention" && t != "conv") die("%s: layer_types[%d] '%s' is not supported (full_attention, conv)", p, l, t.c_str());
            c.attn[l] = t == "full_attention";
        }
    } else if (const nlohmann::json* idx = h.find("full_attn_idxs"); idx && !idx->is_null()) {
        if (!idx->is_array()) die("%s: 'full_attn_idxs' must be a list of layer indices", p);
        c.attn.assign(c.n_layers, false);
        for (const auto& v : *idx) {
            int l = json_as_int(p, "full_attn_idxs", v);
            if (l < 0 || l >= c.n_layers) die("%s: full_attn_idxs holds %d; there are %d layers", p, l, c.n_layers);
            c.attn[l] = true;
        }
    }
    c.index.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; l++) c.index[l] = c.attn[l] ? c.n_attn++ : c.n_conv++;
    if (c.n_attn == 0) die("%s: no layer is full_attention (transformers' LFM2 needs at least one)", p);
    return c;
}

// ---- Weights ----

struct Layer {
    bf16* op_norm;     // [dim]        operator_norm, before the attention or the conv
    // an attention layer
    Linear qkv;        // [q_dim + 2 kv_dim][dim]   q_proj, k_proj, v_proj stacked by rows
    AttnLayer attn;    // q_layernorm, k_layernorm [head_dim]; the RoPE table
    // a conv layer
    Linear in;         // [3 dim][dim]  in_proj: B, C, v (+ bias)
    bf16* conv_w;      // [dim][conv_L] conv.weight
    bf16* conv_b;      // [dim]         conv.bias, or null
    // either
    Linear out;        // [dim][q_dim or dim]       self_attn.out_proj or conv.out_proj
    bf16* ffn_norm;    // [dim]
    Linear gate_up;    // [2 ffn][dim]  w1 and w3, rows interleaved (2i gate, 2i+1 up)
    Linear down;       // [dim][ffn]    w2
    bool is_moe = false;
    MoeFfn moe;        // ... or a mixture: gate [E][dim], expert_bias [E], experts.e.{w1, w3, w2}
};

struct Weights {
    bf16* embed;       // [vocab][dim]  embed_tokens
    std::vector<Layer> layers;
    bf16* final_norm;  // [dim]         embedding_norm
    Linear lm_head;    // [vocab][dim]  lm_head, or embed_tokens when tied
    RopeTable rope;    // [ctx][head_dim / 2] (cos, sin)
};

static void load_weights(Weights& w, const Config& c, const Checkpoint& ck, Runtime& rt) {
    GpuMemory& mem = rt.mem;
    cudaStream_t s = rt.stream;
    w.embed = load_embedding(ck, c.vocab, c.dim, mem, s);
    w.rope = make_rope_table(c.hf.rope, c.head_dim, rt.ctx, mem, s, rt.max_tokens);
    w.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        std::string p = strf("model.layers.%d.", l), f = p + "feed_forward.";
        Layer& L = w.layers[l];
        L.op_norm = load_vector(ck, p + "operator_norm.weight", c.dim, mem, s);
        if (c.attn[l]) {
            std::string a = p + "self_attn.";
            L.qkv = load_linear(ck, {{a + "q_proj", a + "k_proj", a + "v_proj"}, {c.q_dim, c.kv_dim, c.kv_dim}, false, false}, c.dim, rt.fmt, mem, s);
            L.attn.q_norm = load_vector(ck, a + "q_layernorm.weight", c.head_dim, mem, s);
            L.attn.k_norm = load_vector(ck, a + "k_layernorm.weight", c.head_dim, mem, s);
            L.attn.rope = &w.rope;
            L.out = load_linear(ck, {{a + "out_proj"}, {c.dim}, false, false}, c.q_dim, rt.fmt, mem, s);
        } else {
            std::string v = p + "conv.";
            L.in = load_linear(ck, {{v + "in_proj"}, {3 * c.dim}, false, c.conv_bias}, c.dim, rt.fmt, mem, s);
            L.conv_w = mem.alloc<bf16>((size_t)c.dim * c.conv_L, "weights");
            upload_bf16(ck.get(v + "conv.weight", {c.dim, 1, c.conv_L}), L.conv_w, c.conv_L, s);
            L.conv_b = c.conv_bias ? load_vector(ck, v + "conv.bias", c.dim, mem, s) : nullptr;
            L.out = load_linear(ck, {{v + "out_proj"}, {c.dim}, false, c.conv_bias}, c.dim, rt.fmt, mem, s);
        }
        L.ffn_norm = load_vector(ck, p + "ffn_norm.weight", c.dim, mem, s);
        L.is_moe = c.moe && l >= c.n_dense;
        if (!L.is_moe) {
            L.gate_up = load_linear(ck, {{f + "w1", f + "w3"}, {c.ffn, c.ffn}, true, false}, c.dim, rt.fmt, mem, s);
            L.down = load_linear(ck, {{f + "w2"}, {c.dim}, false, false}, c.ffn, rt.fmt, mem, s);
            rt.lin.plan.layer({{c.attn[l] ? &L.qkv : &L.in}, {&L.out, &L.gate_up, &L.down}});  // the order forward() multiplies in
            continue;
        }
        // The router gate [E][dim], expert_bias [E], experts.e.{w1, w3, w2} (runtime/moe_layer.cuh)
        L.moe = load_moe(ck, rt, l, f, {"w1", "w3", "w2"}, c.expert_bias, c.router, c.experts, c.dim);
        rt.lin.plan.layer({{c.attn[l] ? &L.qkv : &L.in}, {&L.out, &L.moe.gate}});  // the experts run as the router says
    }
    w.final_norm = load_vector(ck, "model.embedding_norm.weight", c.dim, mem, s);
    w.lm_head = load_lm_head(ck, c.hf.path, c.vocab, c.dim, c.hf.tie_word_embeddings, rt.fmt, w.embed, mem, s);
    rt.lin.plan.head(&w.lm_head);
}

// ---- State ----

// One pass's activations (runtime/activations.cuh: x, qkv, att, h, xn, logits), the conv layers' own, and what each
// sequence carries through its conv layers; the attention layers' KV cache is the kit's (rt.attn).
struct State : DecoderActivations {
    float* bcx;     // [T][3 dim]  in_proj's output: B, C, v
    bf16* y;        // [T][dim]    C * conv(B * v)
    float* conv;    // [slots][n_conv][conv_L - 1][dim]  B * v of each sequence's last conv_L - 1 positions
    MoeScratch moe; // the mixture's router scores, choices and experts' rows (runtime/moe_layer.cuh)
};

// ---- forward ----

struct Lfm2 {
    static constexpr const char* kName = "lfm2";
    Config c;  Weights w;  State s;  // the checkpoint's shape, its weights on the GPU, a pass's activations

    explicit Lfm2(const std::string& dir) : c(load_config(dir)) {}  // config.json, checked: before any GPU work
    ModelInfo info() const {
        ModelInfo i = decoder_info(c.vocab, c.dim, c.hf, w.lm_head.w == w.embed);  // vocab, limits, unread embedding rows
        i.rewindable = false;  // the conv state only moves forward
        i.summary = strf("%s: %d layers (%d attention, %d conv of %d taps), dim %d, %d/%d heads x %d, ffn %d, vocab %d", c.hf.model_type.c_str(),
                         c.n_layers, c.n_attn, c.n_conv, c.conv_L, c.dim, c.n_heads, c.n_kv, c.head_dim, c.ffn, c.vocab);
        if (c.moe)  // a token reads (and multiplies with) k of the E experts of each mixture layer
            moe_model_info(i, c.n_layers - c.n_dense, c.experts, c.dim, w.layers.empty() ? nullptr : &w.layers.back().moe);
        return i;
    }

    void load(Runtime& rt, const Checkpoint& ck) { load_weights(w, c, ck, rt); }
    AttnSpec attn_spec() const { return AttnSpec{c.n_attn, c.n_heads, c.n_kv, c.head_dim, c.eps}; }
    void alloc(Runtime& rt) {
        static_cast<DecoderActivations&>(s) = decoder_activations(rt, c.dim, c.q_dim, c.kv_dim, c.ffn, c.vocab);
        s.bcx = rt.rows<float>(3 * (size_t)c.dim), s.y = rt.rows<bf16>(c.dim);
        s.conv = rt.mem.alloc<float>((size_t)rt.slots * c.n_conv * (c.conv_L - 1) * c.dim, "conv state");
        if (c.moe) s.moe = moe_scratch(rt.max_tokens, c.experts.n_experts, c.experts.k, c.dim, c.experts.ffn, rt.mem);
    }
    float* conv_state(int slot, int conv_layer) { return s.conv + ((size_t)slot * c.n_conv + conv_layer) * (c.conv_L - 1) * c.dim; }

    // Runs the batch's tokens through the model, filling their KV rows and moving their conv state; returns the
    // logits of its last n_out.
    const float* forward(Runtime& rt, const Batch& b) {
        const int T = b.n_tokens;
        cudaStream_t st = rt.stream;
        // x = embed_tokens(ids)
        embedding(w.embed, b.ids, s.x, T, c.dim, c.vocab, st);
        rt.taps.f32("embed", s.x, T, c.dim, st);
        for (int l = 0; l < c.n_layers; l++) {
            const Layer& L = w.layers[l];
            if (c.attn[l]) {
                // q, k, v = q_proj(n), k_proj(n), v_proj(n)  with n = operator_norm(x)
                linear_rmsnorm(L.qkv, s.x, L.op_norm, c.eps, s.qkv, T, rt.lin, st);
                // a = softmax(q k^T / sqrt(head_dim) + causal_mask) v  with q, k = rope(q_layernorm(q)), rope(k_layernorm(k))
                attention(rt.attn, L.attn, c.index[l], s.qkv, b, s.att, st);
                // x = x + out_proj(a)
                linear_add(L.out, s.att, s.x, T, rt.lin, st);
            } else {
                // B, C, v = in_proj(n)  with n = operator_norm(x)
                linear_rmsnorm(L.in, s.x, L.op_norm, c.eps, s.bcx, T, rt.lin, st);
                // y = C * conv(B * v), the conv reading this sequence's last conv_L - 1 values of B * v
                {
                    OpScope op("short conv", st);
                    short_conv_layer(s.bcx, b, L.conv_w, L.conv_b, conv_state(0, c.index[l]), conv_state(1, 0) - conv_state(0, 0), s.y, c.dim,
                                     c.conv_L, st);
                }
                // x = x + out_proj(y)
                linear_add(L.out, s.y, s.x, T, rt.lin, st);
            }
            if (L.is_moe) {
                // x = x + sum_e g_e w2_e(silu(w1_e(m)) * w3_e(m))  over the experts the router picks for m = ffn_norm(x)
                moe_layer(rt, L.moe, l, s.x, L.ffn_norm, c.eps, b, s.moe);
            } else {
                // x = x + w2(silu(w1(m)) * w3(m))  with m = ffn_norm(x)
                linear_rmsnorm_swiglu(L.gate_up, s.x, L.ffn_norm, c.eps, s.h, T, rt.lin, st);
                linear_add(L.down, s.h, s.x, T, rt.lin, st);
            }
            rt.taps.f32(strf("layer_%02d", l), s.x, T, c.dim, st);
        }
        // logits = lm_head(embedding_norm(x))   for the last n_out tokens
        return decoder_logits(rt, s, b, w.final_norm, w.lm_head, c.dim, c.vocab, c.eps, st);
    }
};

// ---- main ----

int main(int argc, char** argv) { return engine_main<Lfm2>(argc, argv); }
