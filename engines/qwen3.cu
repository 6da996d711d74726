// qwen3.cu — the Qwen3 dense decoder (Qwen3-0.6B ... Qwen3-32B) in one file, top to bottom.
//
//   build/sm_90/qwen3 -m models/Qwen3-4B -p "Why is the sky blue?" -n 256
//   build/sm_90/qwen3 -m models/Qwen3-4B -cnv
//   build/sm_90/qwen3 -m models/Qwen3-4B --bench --n-prompt 512 -n 128
//
// Qwen3 (transformers' modeling_qwen3.py) is a Llama-style pre-norm decoder with two twists: RMSNorm on
// every query and key head before RoPE (q_norm, k_norm), and no biases. One layer:
//   h = x + o_proj(attn(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n))),  n = input_layernorm(x)
//   x = h + down_proj(silu(gate_proj(m)) * up_proj(m)),                                  m = post_attention_layernorm(h)
// The residual stream x stays fp32 on the GPU; matmul inputs are bf16; every accumulation is fp32.
// Everything that is not the model (flags, tokenizer, KV cache, sampling, the decode loop, chat, bench) is the
// kit's runner (common/runtime/runner.cuh).
#include "host/model_types.h"
#include "load/load_linear.cuh"
#include "ops/embed.cuh"
#include "ops/rope.cuh"
#include "runtime/activations.cuh"
#include "runtime/runner.cuh"

using namespace monocu;

// ---- Config ----

struct Config : DecoderDims {  // dim, ffn, n_layers, n_heads, n_kv, head_dim, vocab, q_dim, kv_dim, eps (host/model_types.h)
    ModelConfig hf;               // config.json as read, with Qwen3Config's defaults
};

static Config load_config(const std::string& dir) {
    Config c;
    c.hf = load_checked_config(dir);  // Qwen3Config's defaults for absent keys; sizes the kernels take (host/model_types.h)
    const ModelConfig& h = c.hf;
    if (h.model_type != "qwen3")
        die("%s: model_type is '%s'; this engine runs 'qwen3' checkpoints (build/<arch>/%s runs it)", h.path.c_str(),
            h.model_type.c_str(), find_model_type(h.model_type)->engine);
    if (h.attention_bias) die("%s: attention_bias = true is not supported", h.path.c_str());
    if (h.sliding_window > 0) die("%s: use_sliding_window = true is not supported", h.path.c_str());
    if (h.rope.type != "default") die("%s: rope_scaling type '%s' is not supported for qwen3", h.path.c_str(), h.rope.type.c_str());
    if (!h.quant.method.empty() && h.quant.method != "monocu" &&
        !(h.quant.method == "fp8" && h.quant.weight_block_size == std::vector<int>{128, 128}))
        die("%s: quantization_config '%s' is not supported (fp8 with 128x128 blocks, or tools/quantize output)", h.path.c_str(),
            h.quant.method.c_str());
    c.read_dims(h);
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

// One pass's activations (runtime/activations.cuh: x, qkv, att, h, xn, logits); the KV cache is the kit's
// (rt.attn), addressed by sequence. A qwen3 keeps nothing else per sequence.
using State = DecoderActivations;

// ---- forward ----

struct Qwen3 {
    static constexpr const char* kName = "qwen3";
    Config c;  Weights w;  State s;  // the checkpoint's shape, its weights on the GPU, a pass's activations

    explicit Qwen3(const std::string& dir) : c(load_config(dir)) {}  // config.json, checked: before any GPU work
    void load(Runtime& rt, const Checkpoint& ck) { load_weights(w, c, ck, rt); }
    void alloc(Runtime& rt) { s = decoder_activations(rt, c.dim, c.q_dim, c.kv_dim, c.ffn, c.vocab); }
    AttnSpec attn_spec() const { return AttnSpec{c.n_layers, c.n_heads, c.n_kv, c.head_dim, c.eps}; }
    ModelInfo info() const {
        ModelInfo i = decoder_info(c.vocab, c.dim, c.hf, w.lm_head.w == w.embed);  // vocab, limits, unread embedding rows
        i.summary = strf("%d layers, dim %d, %d/%d heads x %d, ffn %d, vocab %d", c.n_layers, c.dim, c.n_heads, c.n_kv, c.head_dim, c.ffn, c.vocab);
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
            // h = silu(gate_proj(m)) * up_proj(m)  with m = post_attention_layernorm(x)
            linear_rmsnorm_swiglu(L.gate_up, s.x, L.mlp_norm, c.eps, s.h, T, rt.lin, st);
            // x = x + down_proj(h)
            linear_add(L.down, s.h, s.x, T, rt.lin, st);
            taps.f32(strf("layer_%02d", l), s.x, T, c.dim, st);
        }
        // logits = lm_head(norm(x))   for the last n_out tokens
        return decoder_logits(rt, s, b, w.final_norm, w.lm_head, c.dim, c.vocab, c.eps, st);
    }
};

// ---- main ----

int main(int argc, char** argv) { return engine_main<Qwen3>(argc, argv); }
