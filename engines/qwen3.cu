// qwen3.cu — the Qwen3 dense decoder (Qwen3-0.6B ... Qwen3-32B) in one file, top to bottom.
//
//   build/sm_90/qwen3 -m models/Qwen3-4B -p "Why is the sky blue?" -n 256
//   build/sm_90/qwen3 -m models/Qwen3-4B --bench --n-prompt 512 -n 128
//
// Qwen3 (transformers' modeling_qwen3.py) is a Llama-style pre-norm decoder with two twists: RMSNorm on
// every query and key head before RoPE (q_norm, k_norm), and no biases. One layer:
//   h = x + o_proj(attn(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n))),  n = input_layernorm(x)
//   x = h + down_proj(silu(gate_proj(m)) * up_proj(m)),                                  m = post_attention_layernorm(h)
// The residual stream x stays fp32 on the GPU; matmul inputs are bf16; every accumulation is fp32.
#include <cstdio>
#include <functional>
#include <random>

#include "ops/attention.cuh"
#include "tokenizer/chat.h"
#include "host/cli.h"
#include "host/config.h"
#include "ops/embed.cuh"
#include "ops/flash_decode.cuh"
#include "ops/kv_cache.cuh"
#include "ops/linear.cuh"
#include "load/load_linear.cuh"
#include "gpu/pdl.cuh"
#include "host/prompt.h"
#include "ops/qk_prep.cuh"
#include "ops/rope.cuh"
#include "host/safetensors.h"
#include "ops/sampling.cuh"
#include "runtime/taps.cuh"
#include "gpu/timing.cuh"
#include "tokenizer/tokenizer.h"

using namespace monocu;

// ---- Config ----

// Qwen3Config's defaults in transformers, for keys a config.json leaves out.
static const char* kQwen3Defaults = R"({
  "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "hidden_act": "silu",
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
  "attention_bias": false, "use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 28})";

constexpr int kPrefillChunk = 2048;  // prompt tokens per prefill pass (bounds the activation buffers)

struct Config {
    ModelConfig hf;
    int dim, ffn, n_layers, n_heads, n_kv, head_dim, vocab;
    int q_dim, kv_dim;  // n_heads * head_dim, n_kv * head_dim
    int ctx;            // KV-cache length in tokens
    float eps;
};

static Config load_config(const std::string& dir, int ctx_flag) {
    Config c;
    c.hf = load_model_config(dir, nlohmann::json::parse(kQwen3Defaults));
    const ModelConfig& h = c.hf;
    if (h.model_type != "qwen3")
        die("%s: model_type is '%s'; this engine runs 'qwen3' checkpoints", h.path.c_str(), h.model_type.c_str());
    if (h.hidden_act != "silu") die("%s: hidden_act '%s' is not supported (silu)", h.path.c_str(), h.hidden_act.c_str());
    if (h.attention_bias) die("%s: attention_bias = true is not supported", h.path.c_str());
    if (h.sliding_window > 0) die("%s: use_sliding_window = true is not supported", h.path.c_str());
    if (!h.quant.method.empty() && h.quant.method != "monocu" &&
        !(h.quant.method == "fp8" && h.quant.weight_block_size == std::vector<int>{128, 128}))
        die("%s: quantization_config '%s' is not supported (fp8 with 128x128 blocks, or tools/quantize output)", h.path.c_str(),
            h.quant.method.c_str());
    c.dim = h.hidden_size, c.ffn = h.intermediate_size, c.n_layers = h.num_hidden_layers;
    c.n_heads = h.num_attention_heads, c.n_kv = h.num_key_value_heads, c.head_dim = h.head_dim, c.vocab = h.vocab_size;
    c.q_dim = c.n_heads * c.head_dim, c.kv_dim = c.n_kv * c.head_dim;
    c.eps = static_cast<float>(h.rms_norm_eps);
    if (c.dim % 8 || c.ffn % 8) die("%s: hidden_size and intermediate_size must be multiples of 8", h.path.c_str());
    if (c.head_dim != 64 && c.head_dim != 128) die("%s: head_dim %d is not supported (64, 128)", h.path.c_str(), c.head_dim);
    if (c.n_heads / c.n_kv > 8) die("%s: %d query heads per KV head is not supported (at most 8)", h.path.c_str(), c.n_heads / c.n_kv);
    c.ctx = ctx_flag > 0 ? ctx_flag : std::min(4096, h.max_position_embeddings);
    if (c.ctx > h.max_position_embeddings)
        std::fprintf(stderr, "warning: -c %d exceeds max_position_embeddings %d; quality past it is unknown\n", c.ctx,
                     h.max_position_embeddings);
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
    size_t decode_bytes = 0;   // bytes one decode step reads
    double matmul_params = 0;  // weights of the layer projections (a prefill token multiplies with each once)
};

// The weight format on the GPU: what --dtype asks for, or what a quantized checkpoint holds.
static WFormat weight_format(const Options& o, const Checkpoint& ck) {
    WFormat file = checkpoint_weight_format(ck, "model.layers.0.self_attn.q_proj");
    WFormat flag = o.dtype == "fp8" ? WFormat::FP8 : o.dtype == "int4" ? WFormat::INT4 : WFormat::BF16;
    return o.dtype_set || file == WFormat::BF16 ? flag : file;
}

static Weights load_weights(const Checkpoint& ck, const Config& c, WFormat fmt, GpuMemory& mem, cudaStream_t s) {
    Weights w;
    w.embed = mem.alloc<bf16>((size_t)c.vocab * c.dim, "weights");
    upload_bf16(ck.get("model.embed_tokens.weight", {c.vocab, c.dim}), w.embed, c.dim, s);
    for (int l = 0; l < c.n_layers; l++) {
        std::string p = strf("model.layers.%d.", l);
        Layer L;
        L.attn_norm = load_vector(ck, p + "input_layernorm.weight", c.dim, mem, s);
        L.q_norm = load_vector(ck, p + "self_attn.q_norm.weight", c.head_dim, mem, s);
        L.k_norm = load_vector(ck, p + "self_attn.k_norm.weight", c.head_dim, mem, s);
        std::string a = p + "self_attn.", m = p + "mlp.";
        L.qkv = load_linear(ck, {{a + "q_proj", a + "k_proj", a + "v_proj"}, {c.q_dim, c.kv_dim, c.kv_dim}}, c.dim, fmt, mem, s);
        L.o = load_linear(ck, {{a + "o_proj"}, {c.dim}}, c.q_dim, fmt, mem, s);
        L.mlp_norm = load_vector(ck, p + "post_attention_layernorm.weight", c.dim, mem, s);
        L.gate_up = load_linear(ck, {{m + "gate_proj", m + "up_proj"}, {c.ffn, c.ffn}, true}, c.dim, fmt, mem, s);
        L.down = load_linear(ck, {{m + "down_proj"}, {c.dim}}, c.ffn, fmt, mem, s);
        w.layers.push_back(L);
        w.decode_bytes += L.qkv.bytes() + L.o.bytes() + L.gate_up.bytes() + L.down.bytes() + (2 * c.dim + 2 * c.head_dim) * 2;
        for (const Linear* p : {&L.qkv, &L.o, &L.gate_up, &L.down}) w.matmul_params += (double)p->N * p->K;
    }
    w.final_norm = load_vector(ck, "model.norm.weight", c.dim, mem, s);
    // The output projection: lm_head.weight, or embed_tokens when tied (Qwen3-0.6B/1.7B/4B). Quantizing on load
    // leaves it bf16 next to FP8 layers (as Qwen's FP8 releases do: it costs FP8 a point of top-1 agreement) and
    // makes it FP8 next to INT4 layers (kb/decisions.md); a pre-quantized checkpoint's is used as stored.
    bool has_head = ck.find("lm_head.weight") || ck.find("lm_head.qweight");
    if (!has_head && !c.hf.tie_word_embeddings)
        die("%s: tie_word_embeddings is false but there is no tensor 'lm_head.weight'", c.hf.path.c_str());
    bool prequantized = checkpoint_weight_format(ck, "model.layers.0.self_attn.q_proj") != WFormat::BF16;
    WFormat head_fmt = fmt == WFormat::INT4 ? WFormat::FP8 : WFormat::BF16;
    if (prequantized) head_fmt = has_head ? checkpoint_weight_format(ck, "lm_head") : WFormat::BF16;
    if (!has_head && head_fmt == WFormat::BF16) {
        w.lm_head.N = c.vocab, w.lm_head.K = c.dim, w.lm_head.w = w.embed;  // shares the table
    } else {
        w.lm_head = load_linear(ck, {{has_head ? "lm_head" : "model.embed_tokens"}, {c.vocab}}, c.dim, head_fmt, mem, s);
    }
    w.decode_bytes += w.lm_head.bytes() + c.dim * 2 /* final norm */ + c.dim * 2 /* one embedding row */;
    CUDA_CHECK(cudaStreamSynchronize(s));
    return w;
}

// Largest projection a prefill must dequantize (0 with bf16 weights); the lm_head only when dumping.
static size_t dequant_scratch_elems(const Weights& w, bool dumping) {
    size_t n = 0;
    for (const Layer& L : w.layers)
        for (const Linear* p : {&L.qkv, &L.o, &L.gate_up, &L.down})
            if (p->fmt != WFormat::BF16) n = std::max(n, (size_t)p->N * p->K);
    if (dumping && w.lm_head.fmt != WFormat::BF16) n = std::max(n, (size_t)w.lm_head.N * w.lm_head.K);
    return n;
}

// ---- State ----

struct State {
    float* x;          // [chunk][dim]               residual stream
    float* qkv;        // [chunk][q_dim + 2 kv_dim]  projections before norm/rope
    __half* q;         // [chunk][q_dim]             queries after q_norm and rope (fp16: attention.cuh)
    bf16* att;         // [chunk][q_dim]             attention output
    bf16* h;           // [chunk][ffn]               silu(gate) * up
    bf16* xb;          // [chunk][dim]               normalised input of a prefill matmul
    float* gu;         // [chunk][2 ffn]             gate/up pairs (prefill)
    float* logits;     // [1 or chunk][vocab]   every prompt row only when dumping
    float* last_logits;  // the last token's row of logits: what the sampler reads
    KvCache kv;        // [n_layers][n_kv][ctx][head_dim], bf16 or FP8 (kv_cache.cuh)
    KvLayer fresh;     // fp16 [n_kv][chunk][head_dim] keys and values of a first prefill chunk (or none:
                       // --kv-prefill-cache)
    bf16* wb;          // [largest quantized projection] its bf16 copy during prefill
    size_t wb_elems;
    DequantRing ring;  // wb and a second buffer: the next projection is dequantized while a GEMM runs
    int* d_ids;        // [chunk] prompt token ids of the current pass
    int* d_pos;        // position of the first token of the current pass
    RopeTable rope;
    FlashDecode fd;
    Sampler sampler;
    Gemm gemm;
    LinearScratch scratch() { return LinearScratch{&gemm, xb, gu, wb, wb_elems, wb ? &ring : nullptr}; }
};

static void alloc_state(State& s, const Config& c, const Weights& w, KvType kv_type, bool prefill_via_cache, bool dumping, GpuMemory& mem,
                        cudaStream_t stream) {
    size_t T = kPrefillChunk;
    int logit_rows = dumping ? kPrefillChunk : 1;
    s.x = mem.alloc<float>(T * c.dim, "activations");
    s.qkv = mem.alloc<float>(T * (c.q_dim + 2 * c.kv_dim), "activations");
    s.q = mem.alloc<__half>(T * c.q_dim, "activations");
    s.att = mem.alloc<bf16>(T * c.q_dim, "activations");
    s.h = mem.alloc<bf16>(T * c.ffn, "activations");
    s.xb = mem.alloc<bf16>(T * c.dim, "activations");
    s.gu = mem.alloc<float>(T * 2 * c.ffn, "activations");
    s.logits = mem.alloc<float>((size_t)logit_rows * c.vocab, "activations");
    s.kv = kv_cache_create(kv_type, c.n_layers, c.n_kv, c.ctx, c.head_dim, mem);
    if (!prefill_via_cache) {
        s.fresh.k = mem.alloc<__half>(T * c.kv_dim, "activations");
        s.fresh.v = mem.alloc<__half>(T * c.kv_dim, "activations");
    }
    s.wb_elems = dequant_scratch_elems(w, dumping);
    s.wb = s.wb_elems ? mem.alloc<bf16>(s.wb_elems, "workspace") : nullptr;
    if (s.wb) {
        size_t layer_elems = dequant_scratch_elems(w, false);
        s.ring.init(s.wb, s.wb_elems, mem.alloc<bf16>(layer_elems, "workspace"), layer_elems);
    }
    s.d_ids = mem.alloc<int>(T, "activations");
    s.d_pos = mem.alloc<int>(1, "activations");
    s.rope = make_rope_table(c.hf.rope, c.head_dim, c.ctx, mem, stream);
    s.fd = flash_decode_plan(c.n_heads, c.n_kv, c.head_dim, c.ctx, mem);
    s.sampler = sampler_create(c.vocab, mem, stream);
}

// ---- forward ----

static __global__ void advance_pos_kernel(int* pos, int n) { *pos += n; }

// The keys and values a prefill chunk's attention reads. The cache, except that a chunk at position 0 (a whole
// prompt of up to kPrefillChunk tokens) reads its own keys and values in fp16, as computed, from s.fresh, which
// the q/k norm kernel fills beside the cache: as transformers attends over a prompt, the cache's rounding (bf16
// or e4m3) then only affects decode. fp16 keeps 3 more bits than a bf16 cache (attention.cuh says why that
// matters), and an FP8 cache's per-tile conversion is skipped (kb/log.md). Later chunks need earlier
// positions, which only the cache holds; so does --kv-prefill-cache (no s.fresh), which oracle/quant_eval.py
// uses to measure the FP8 cache's rounding.
struct PrefillKv {
    KvType type;    // what the attention reads
    KvLayer layer;
    int rows;       // per KV head
    KvLayer copy;   // what the q/k norm kernel writes in fp16 besides the cache (s.fresh), or nothing
};
static PrefillKv prefill_kv(const Config& c, const State& s, int l, bool chunk_at_zero) {
    if (s.fresh.k && chunk_at_zero) return PrefillKv{KvType::F16, s.fresh, kPrefillChunk, s.fresh};
    return PrefillKv{s.kv.type, s.kv.layer(l), c.ctx, KvLayer{}};
}

// Prefill, layer l, T tokens: q = rope(q_norm(q)) into s.q, k = rope(k_norm(k)) and v into the cache (and the
// fp16 copy prefill_kv names), from the projections in s.qkv.
static void prefill_qk_norm_rope_cache(const Config& c, const Layer& L, State& s, int l, int T, bool chunk_at_zero, cudaStream_t st) {
    PrefillKv pk = prefill_kv(c, s, l, chunk_at_zero);
    qk_norm_rope_cache(s.qkv, T, s.d_pos, L.q_norm, L.k_norm, s.rope, s.q, s.kv.type, s.kv.layer(l), c.n_heads, c.n_kv, c.head_dim, c.ctx,
                       c.eps, st, pk.copy, pk.rows);
}

// Prefill, layer l: s.att = causal attention of s.q over the keys and values prefill_kv names.
static void prefill_attend(const Config& c, State& s, int l, int T, bool chunk_at_zero, cudaStream_t st) {
    PrefillKv pk = prefill_kv(c, s, l, chunk_at_zero);
    prefill_attention(s.q, pk.type, pk.layer, s.d_pos, s.att, T, c.n_heads, c.n_kv, c.head_dim, pk.rows, st);
}

// Runs T tokens (ids on the device) at positions *s.d_pos .. + T - 1 through the model, filling the KV
// cache, and leaves the last token's logits at s.last_logits (all T rows in s.logits when taps are on).
static void forward(const Config& c, const Weights& w, State& s, const int* ids, int T, bool chunk_at_zero, const Taps& taps,
                    cudaStream_t st) {
    LinearScratch sc = s.scratch();
    // x = embed_tokens(ids)
    embedding(w.embed, ids, s.x, T, c.dim, c.vocab, st);
    taps.f32("embed", s.x, T, c.dim, st);
    for (int l = 0; l < c.n_layers; l++) {
        const Layer& L = w.layers[l];
        // q, k, v = q_proj(n), k_proj(n), v_proj(n)  with n = input_layernorm(x)
        linear_rmsnorm(L.qkv, s.x, L.attn_norm, c.eps, s.qkv, T, sc, st);
        dequant_ahead(L.o, T, sc);  // (prefill of FP8/INT4 weights: each next projection is dequantized during this GEMM)
        if (taps.inputs) taps.bf16(strf("layer_%02d_attn_in", l), sc.xb, T, c.dim, st);  // (prefill: the normed x is in xb)
        // q, k = rope(q_norm(q)), rope(k_norm(k));  cache[pos : pos + T] = k, v
        // a = softmax(q k^T / sqrt(head_dim) + causal_mask) v   over every cached position
        if (T == 1) {  // decode: both in one launch (flash_decode.cuh)
            DecodeQkv in{s.qkv, L.q_norm, L.k_norm, s.rope.cos_sin, c.eps};
            flash_decode_fused(s.fd, in, s.kv.type, s.kv.layer(l), s.d_pos, s.att, st);
        } else {
            prefill_qk_norm_rope_cache(c, L, s, l, T, chunk_at_zero, st);
            prefill_attend(c, s, l, T, chunk_at_zero, st);
        }
        // x = x + o_proj(a)
        // (in decode, o_proj and gate_up also warm L2 with the next projection's first weights: gemv.cuh,
        // l2_ahead; o_proj only after its wait, as its blocks sit beside the attention kernel)
        if (taps.inputs) taps.bf16(strf("layer_%02d_o_in", l), s.att, T, c.n_heads * c.head_dim, st);
        linear_add(L.o, s.att, s.x, T, sc, st, l2_ahead(L.gate_up, true));
        dequant_ahead(L.gate_up, T, sc);
        // h = silu(gate_proj(m)) * up_proj(m)  with m = post_attention_layernorm(x)
        linear_rmsnorm_swiglu(L.gate_up, s.x, L.mlp_norm, c.eps, s.h, T, sc, st, l2_ahead(L.down, false));
        dequant_ahead(L.down, T, sc);
        if (taps.inputs) {
            taps.bf16(strf("layer_%02d_mlp_in", l), sc.xb, T, c.dim, st);
            taps.bf16(strf("layer_%02d_down_in", l), s.h, T, c.ffn, st);
        }
        // x = x + down_proj(h)
        linear_add(L.down, s.h, s.x, T, sc, st);
        if (l + 1 < c.n_layers) dequant_ahead(w.layers[l + 1].qkv, T, sc);
        if (taps.on()) taps.f32(strf("layer_%02d", l), s.x, T, c.dim, st);
    }
    // logits = lm_head(norm(x))   for the last token, or for every token when dumping
    int rows = taps.on() ? T : 1;
    const float* x_rows = s.x + (size_t)(T - rows) * c.dim;
    rmsnorm(x_rows, w.final_norm, s.xb, rows, c.dim, c.eps, st);
    taps.bf16("final_norm", s.xb, rows, c.dim, st);
    linear(w.lm_head, s.xb, s.logits, rows, sc, st);
    taps.f32("logits", s.logits, rows, c.vocab, st);
    s.last_logits = s.logits + (size_t)(rows - 1) * c.vocab;
}

// ---- generate ----

static void set_pos(State& s, int pos, cudaStream_t st) {
    CUDA_CHECK(cudaMemcpyAsync(s.d_pos, &pos, sizeof(int), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaStreamSynchronize(st));  // pos lives on this stack frame
}

// Prefill: the prompt in chunks of kPrefillChunk tokens, each one batched pass. Leaves the last token's
// logits at s.last_logits and *s.d_pos at the prompt length.
static void prefill(const Config& c, const Weights& w, State& s, const std::vector<int>& ids, const Taps& taps, cudaStream_t st) {
    for (size_t at = 0; at < ids.size(); at += kPrefillChunk) {
        int T = (int)std::min<size_t>(kPrefillChunk, ids.size() - at);
        CUDA_CHECK(cudaMemcpyAsync(s.d_ids, ids.data() + at, T * sizeof(int), cudaMemcpyHostToDevice, st));
        set_pos(s, (int)at, st);
        forward(c, w, s, s.d_ids, T, at == 0, taps, st);
        sampler_mark_seen(s.sampler, s.d_ids, T, st);
    }
    set_pos(s, (int)ids.size(), st);
}

// One decode step: the token the sampler chose goes in, the next token comes out in *sampler.d_token.
// Everything reads its position from the device, so the step can be captured once as a CUDA graph.
static void decode_step(const Config& c, const Weights& w, State& s, const SamplingParams& sp, cudaStream_t st) {
    forward(c, w, s, s.sampler.d_token, 1, false, Taps(), st);
    sample(s.sampler, sp, s.last_logits, st);
    advance_pos_kernel<<<1, 1, 0, st>>>(s.d_pos, 1);
    LAUNCH_CHECK();
}

struct DecodeGraph {
    bool warmed = false;  // the first step runs eagerly (one-time setup such as kernel attributes)
    cudaGraphExec_t exec = nullptr;
    ~DecodeGraph() {
        if (exec) cudaGraphExecDestroy(exec);
    }
};

static void run_decode_step(const Config& c, const Weights& w, State& s, const SamplingParams& sp, DecodeGraph* graph,
                            cudaStream_t st) {
    if (!graph || !graph->warmed) {
        if (graph) graph->warmed = true;
        return decode_step(c, w, s, sp, st);
    }
    if (!graph->exec) {  // capture on first use: the same kernels, replayed with one launch per token
        cudaGraph_t g;
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        decode_step(c, w, s, sp, st);
        CUDA_CHECK(cudaStreamEndCapture(st, &g));
        CUDA_CHECK(cudaGraphInstantiate(&graph->exec, g, 0));
        CUDA_CHECK(cudaGraphDestroy(g));
    }
    CUDA_CHECK(cudaGraphLaunch(graph->exec, st));
}

static int read_token(State& s, cudaStream_t st) {
    int tok;
    CUDA_CHECK(cudaMemcpyAsync(&tok, s.sampler.d_token, sizeof(int), cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    return tok;
}

// Decode with one step queued ahead: step k+1 is launched before token k is read back, so the GPU does not
// idle while the host wakes up, reads the token and launches the next step (10-20 us a token). Each step's
// token is copied to its own pinned slot right after the step, before the next step can overwrite it.
// When generation stops, the step queued ahead has run for nothing; its token is never read.
struct TokenPipe {
    int* host = nullptr;  // pinned [2]: step k's token lands in host[k % 2]
    cudaEvent_t ready[2] = {nullptr, nullptr};
    long queued = 0, read = 0;  // steps launched, tokens read back
    TokenPipe() {
        CUDA_CHECK(cudaMallocHost(&host, 2 * sizeof(int)));
        for (cudaEvent_t& e : ready) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    ~TokenPipe() {
        if (queued > read) cudaEventSynchronize(ready[(queued - 1) % 2]);  // a step queued ahead still writes host[]
        for (cudaEvent_t e : ready) cudaEventDestroy(e);
        cudaFreeHost(host);
    }
    TokenPipe(const TokenPipe&) = delete;
    TokenPipe& operator=(const TokenPipe&) = delete;
    void launch(const Config& c, const Weights& w, State& s, const SamplingParams& sp, DecodeGraph* graph, cudaStream_t st) {
        if (queued - read >= 2) die("internal: more than two decode steps queued");
        run_decode_step(c, w, s, sp, graph, st);
        int slot = (int)(queued++ % 2);
        CUDA_CHECK(cudaMemcpyAsync(&host[slot], s.sampler.d_token, sizeof(int), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaEventRecord(ready[slot], st));
    }
    int next_token() {  // the oldest unread step's token; waits for it
        if (read == queued) die("internal: no decode step queued");
        int slot = (int)(read++ % 2);
        CUDA_CHECK(cudaEventSynchronize(ready[slot]));
        return host[slot];
    }
};

struct Timings {
    double load_ms = 0, prompt_ms = 0, eval_ms = 0;
    int prompt_tokens = 0, eval_tokens = 0;
};

static void print_timings(const Timings& t, double total_ms) {
    auto line = [](const char* what, double ms, int n, const char* unit) {
        std::fprintf(stderr, "monocu: %16s = %10.2f ms / %5d %-6s (%8.2f ms per token, %9.2f tokens per second)\n", what, ms, n,
                     unit, n ? ms / n : 0.0, ms > 0 ? 1000.0 * n / ms : 0.0);
    };
    std::fprintf(stderr, "monocu: %16s = %10.2f ms\n", "load time", t.load_ms);
    line("prompt eval time", t.prompt_ms, t.prompt_tokens, "tokens");
    line("eval time", t.eval_ms, t.eval_tokens, "runs");
    std::fprintf(stderr, "monocu: %16s = %10.2f ms / %5d tokens\n", "total time", total_ms, t.prompt_tokens + t.eval_tokens);
}

// Sampling settings: a flag wins, then generation_config.json, then llama.cpp's defaults.
static SamplingParams sampling_params(const Options& o, const GenerationConfig& g) {
    SamplingParams p;
    bool gen_greedy = g.present && !g.do_sample;
    p.temperature = (float)(o.temp_set ? o.temp : gen_greedy ? 0.0 : g.present ? g.temperature : o.temp);
    p.top_k = o.top_k_set ? o.top_k : g.present ? g.top_k : o.top_k;
    p.top_p = (float)(o.top_p_set ? o.top_p : g.present ? g.top_p : o.top_p);
    p.min_p = (float)(o.min_p_set ? o.min_p : g.present ? g.min_p : o.min_p);
    p.repetition_penalty = (float)(o.repeat_penalty_set ? o.repeat_penalty : g.present ? g.repetition_penalty : 1.0);
    p.seed = o.seed_set ? o.seed : (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return p;
}

// The prompt as token ids: --ids as given; text through the chat template unless --raw or the tokenizer
// has none (user text is encoded as plain text, so it cannot smuggle in special tokens).
static std::string prompt_text(const Options& o) { return o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file); }

static std::vector<int> prompt_ids(const Options& o, const std::string& text, const Config& c, const Tokenizer* tok) {
    if (!o.ids_file.empty()) return read_ids_file(o.ids_file, c.vocab);
    if (!tok) die("%s: no tokenizer.json; give the prompt as token ids with --ids", o.model.c_str());
    std::vector<int> ids;
    if (!o.raw && !tok->chat_template().empty()) {
        std::vector<ChatMessage> msgs;
        if (!o.system.empty()) msgs.push_back({"system", o.system});
        msgs.push_back({"user", text});
        ChatOptions co;
        co.enable_thinking = !o.no_think;
        ids = encode_chat(*tok, msgs, co);  // BOS comes from the template where the family has one
    } else {
        if (tok->add_bos() && tok->bos_id() >= 0) ids.push_back(tok->bos_id());
        std::vector<int> body = tok->encode_plain(text);
        ids.insert(ids.end(), body.begin(), body.end());
    }
    if (ids.empty()) die("the prompt is empty");
    for (int id : ids)
        if (id < 0 || id >= c.vocab) die("tokenizer produced id %d outside the model's vocabulary (%d)", id, c.vocab);
    return ids;
}

static std::vector<int> end_of_generation_ids(const Config& c, const GenerationConfig& g, const Tokenizer* tok) {
    std::vector<int> eos = c.hf.eos_token_ids;
    eos.insert(eos.end(), g.eos_token_ids.begin(), g.eos_token_ids.end());
    if (tok) {
        std::vector<int> t = tok->eos_ids();
        eos.insert(eos.end(), t.begin(), t.end());
    }
    return eos;
}

static int generate(const Options& o, const Config& c, const Weights& w, State& s, const Tokenizer* tok,
                    const GenerationConfig& gen, Timings& tm, cudaStream_t st) {
    std::string text = o.ids_file.empty() ? prompt_text(o) : std::string();  // read once
    std::vector<int> ids = prompt_ids(o, text, c, tok);
    if ((int)ids.size() >= c.ctx)
        die("the prompt is %zu tokens; the context holds %d (raise -c, up to max_position_embeddings %d)", ids.size(), c.ctx,
            c.hf.max_position_embeddings);
    if (!o.dump_dir.empty() && (int)ids.size() > kPrefillChunk)
        die("--dump-dir: the prompt is %zu tokens; dumps cover one prefill pass of at most %d", ids.size(), kPrefillChunk);
    SamplingParams sp = sampling_params(o, gen);
    std::vector<int> eos = end_of_generation_ids(c, gen, tok);
    if (o.verbose)
        std::fprintf(stderr, "sampling: temp %.3g, top_k %d, top_p %.3g, min_p %.3g, repeat_penalty %.3g, seed %llu\n",
                     sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.repetition_penalty, (unsigned long long)sp.seed);
    Taps taps(o.dump_dir, o.dump_inputs);
    taps.ids("prompt_ids", ids);

    // Output: text streamed through the tokenizer (whole UTF-8 characters only), or ids without one.
    std::unique_ptr<StreamDecoder> out = tok ? std::make_unique<StreamDecoder>(*tok) : nullptr;
    auto emit = [&](int id) {
        std::string piece = out ? out->push(id) : strf("%d ", id);
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
    };
    // A raw prompt (no chat template) is a text to continue: print it first so the completion reads on from it.
    bool raw_prompt = o.ids_file.empty() && (o.raw || tok->chat_template().empty());
    if (raw_prompt && !o.quiet) std::fputs(text.c_str(), stdout);
    double t0 = wall_ms();
    prefill(c, w, s, ids, taps, st);
    sample(s.sampler, sp, s.last_logits, st);
    int tok_id = read_token(s, st);
    tm.prompt_ms = wall_ms() - t0, tm.prompt_tokens = (int)ids.size();

    std::vector<int> generated;
    DecodeGraph graph;
    FILE* trace = o.trace_file.empty() ? nullptr : std::fopen(o.trace_file.c_str(), "w");
    if (!o.trace_file.empty() && !trace) die("--trace %s: cannot open for writing", o.trace_file.c_str());
    if (trace) std::fprintf(trace, "token,position,ms\n");
    double t1 = wall_ms();
    // The step queued ahead reads token n + 1 at position pos + 1 and makes token n + 2: it may be wanted if
    // pos + 1 is inside the context and n + 1 tokens do not reach -n (whether token n + 1 ends generation is
    // not known yet).
    auto ahead_may_be_wanted = [&](int next_pos, size_t next_n) {
        return next_pos < c.ctx && (o.n_predict < 0 || (long)next_n < o.n_predict);
    };
    TokenPipe pipe;
    DecodeGraph* g = o.cuda_graphs ? &graph : nullptr;
    int pos = (int)ids.size();  // position of tok_id, the newest token
    double ts = wall_ms();
    while (true) {
        generated.push_back(tok_id);
        bool is_eos = std::find(eos.begin(), eos.end(), tok_id) != eos.end();
        if (!is_eos) emit(tok_id);
        if (is_eos || (o.n_predict >= 0 && (int)generated.size() >= o.n_predict) || pos >= c.ctx) break;
        if (pipe.queued == pipe.read) pipe.launch(c, w, s, sp, g, st);  // the step at pos (first step only)
        if (ahead_may_be_wanted(pos + 1, generated.size() + 1)) pipe.launch(c, w, s, sp, g, st);
        tok_id = pipe.next_token();
        pos++;
        if (trace) std::fprintf(trace, "%zu,%d,%.4f\n", generated.size(), pos, wall_ms() - ts);
        ts = wall_ms();
    }
    if (out) std::fputs(out->flush().c_str(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);  // before the timings on stderr
    if (trace) std::fclose(trace);
    tm.eval_ms = wall_ms() - t1, tm.eval_tokens = (int)generated.size() - 1;
    taps.ids("ids", generated);
    if (pos >= c.ctx && !o.quiet) std::fprintf(stderr, "monocu: stopped at the end of the context (%d tokens)\n", c.ctx);
    return 0;
}

// Where a decode step's time goes: each operation of forward() runs alone, for every layer in turn (distinct
// weights, as in a real step), 5 times over, back to back, at the last position of the context, and prints
// its time per token. The sum against the measured step is what chaining costs. It overwrites the state
// (bench only).
static void print_decode_breakdown(const Config& c, const Weights& w, State& s, double step_ms, cudaStream_t st) {
    LinearScratch sc = s.scratch();
    SamplingParams greedy;
    struct Op {
        const char* name;
        int per_token;  // calls per decode step
        std::function<void(int layer)> run;
    };
    const Op ops[] = {
        {"qkv", c.n_layers, [&](int l) { linear_rmsnorm(w.layers[l].qkv, s.x, w.layers[l].attn_norm, c.eps, s.qkv, 1, sc, st); }},
        {"attention (with q/k norm, rope, cache write)", c.n_layers,
         [&](int l) {
             DecodeQkv in{s.qkv, w.layers[l].q_norm, w.layers[l].k_norm, s.rope.cos_sin, c.eps};
             flash_decode_fused(s.fd, in, s.kv.type, s.kv.layer(l), s.d_pos, s.att, st);
         }},
        {"o", c.n_layers, [&](int l) { linear_add(w.layers[l].o, s.att, s.x, 1, sc, st); }},
        {"gate_up", c.n_layers,
         [&](int l) { linear_rmsnorm_swiglu(w.layers[l].gate_up, s.x, w.layers[l].mlp_norm, c.eps, s.h, 1, sc, st); }},
        {"down", c.n_layers, [&](int l) { linear_add(w.layers[l].down, s.h, s.x, 1, sc, st); }},
        {"final norm", 1, [&](int) { rmsnorm(s.x, w.final_norm, s.xb, 1, c.dim, c.eps, st); }},
        {"lm_head", 1, [&](int) { linear(w.lm_head, s.xb, s.logits, 1, sc, st); }},
        {"sample", 1, [&](int) { sample(s.sampler, greedy, s.logits, st); }},
    };
    set_pos(s, c.ctx - 1, st);  // a valid position (the bench's decode ends at the end of the context)
    double sum_ms = 0;
    std::printf("bench: decode breakdown (each op alone, back to back):");
    for (const Op& op : ops) {
        double ms = time_rounds(st, op.per_token, 5, op.run);
        sum_ms += ms;
        std::printf(" %s %.1f us x %d = %.3f ms;", op.name, 1000.0 * ms / op.per_token, op.per_token, ms);
    }
    std::printf(" sum %.3f ms, step %.3f ms\n", sum_ms, step_ms);
}

// Where a prefill pass of T tokens goes: each piece of forward()'s prefill path (the norms, the dequantization
// of quantized weights, each GEMM, the SwiGLU pass, q/k norm + RoPE + cache write, attention) runs alone for
// every layer, 3 times over, at position 0, and prints milliseconds per pass and the GEMMs' TFLOP/s. The
// sum against the measured pass is what chaining costs. It overwrites the state (bench only).
static void print_prefill_breakdown(const Config& c, const Weights& w, State& s, int T, double pass_ms, cudaStream_t st) {
    LinearScratch sc = s.scratch();
    const bool quantized = w.layers[0].qkv.fmt != WFormat::BF16;
    auto weights = [&](const Linear& L) { return L.fmt == WFormat::BF16 ? static_cast<const bf16*>(L.w) : sc.wb; };
    struct Op {
        const char* name;
        double flops;  // per layer, 0: not a GEMM
        std::function<void(int layer)> run;
    };
    auto gemm_op = [&](const char* name, const Linear Layer::*proj, const bf16* in, float* out, bool add) {
        const Linear& L0 = w.layers[0].*proj;
        return Op{name, 2.0 * T * L0.N * L0.K,
                  [&, proj, in, out, add](int l) {
                      const Linear& L = w.layers[l].*proj;
                      gemm_bf16(*sc.gemm, in, weights(L), out, T, L.N, L.K, add, st);
                  }};
    };
    std::vector<Op> ops = {
        {"rmsnorm x2", 0, [&](int l) {
             rmsnorm(s.x, w.layers[l].attn_norm, sc.xb, T, c.dim, c.eps, st);
             rmsnorm(s.x, w.layers[l].mlp_norm, sc.xb, T, c.dim, c.eps, st);
         }},
        gemm_op("qkv", &Layer::qkv, sc.xb, s.qkv, false),
        {"q/k norm + rope + cache", 0, [&](int l) { prefill_qk_norm_rope_cache(c, w.layers[l], s, l, T, true, st); }},
        {"attention", 4.0 * T * T / 2 * c.q_dim, [&](int l) { prefill_attend(c, s, l, T, true, st); }},
        gemm_op("o", &Layer::o, s.att, s.x, true),
        gemm_op("gate_up", &Layer::gate_up, sc.xb, sc.f, false),
        {"swiglu", 0, [&](int l) { swiglu_interleaved(sc.f, s.h, T, w.layers[l].gate_up.N / 2, st); }},
        gemm_op("down", &Layer::down, s.h, s.x, true),
    };
    if (quantized)
        ops.insert(ops.begin(), Op{"dequantize 4 projections", 0, [&](int l) {
                                       for (const Linear* L : {&w.layers[l].qkv, &w.layers[l].o, &w.layers[l].gate_up, &w.layers[l].down})
                                           dequant_to_bf16(*L, sc.wb, st);
                                   }});
    set_pos(s, 0, st);
    double sum_ms = 0;
    std::printf("bench: prefill breakdown (%d tokens at position 0, each op alone, ms per pass):", T);
    for (const Op& op : ops) {
        double ms = time_rounds(st, c.n_layers, 3, op.run);
        sum_ms += ms;
        std::printf(" %s %.2f", op.name, ms);
        if (op.flops > 0) std::printf(" (%.0f TFLOP/s)", op.flops * c.n_layers / (ms * 1e-3) / 1e12);
        std::printf(";");
    }
    std::printf(" sum %.2f ms, pass %.2f ms\n", sum_ms, pass_ms);
}

// --bench: for each prompt length, a random prompt, a timed prefill, then greedy decode ignoring
// end-of-generation tokens. Prints tok/s, bytes read per token, and both against ceilings measured in
// this process: device copy bandwidth (decode) and a cuBLAS bf16 GEMM at 2048 tokens (prefill).
static int bench(const Options& o, const Config& c, const Weights& w, State& s, cudaStream_t st) {
    int n_gen = o.n_predict > 0 ? o.n_predict : 128;
    if (!o.timeline_file.empty() && !kTraceBuild) die("--timeline: this binary has no tracing; build it with make trace");
    double copy_gbs = measure_copy_bandwidth(st);
    double gemm_tflops = measure_gemm_tflops(s.gemm, kPrefillChunk, 2 * c.ffn, c.dim, st);
    std::printf("bench: ceilings: copy %.1f GB/s, cuBLAS bf16 GEMM %d x %d x %d %.1f TFLOP/s; cuda graphs %s, pdl %s\n", copy_gbs,
                kPrefillChunk, 2 * c.ffn, c.dim, gemm_tflops, o.cuda_graphs ? "on" : "off", pdl_enabled() ? "on" : "off");
    SamplingParams greedy;
    DecodeGraph graph;
    DecodeGraph* g = o.cuda_graphs ? &graph : nullptr;
    std::mt19937 rng(1234);
    for (size_t pi = 0; pi < o.n_prompt.size(); pi++) {
        int n_prompt = o.n_prompt[pi];
        std::vector<int> ids(n_prompt);
        for (int& id : ids) id = (int)(rng() % c.vocab);
        // Warm-up, untimed: a prefill of this very length (cuBLAS loads the kernels of a GEMM shape on its first
        // call: a 2,048-token prefill after a 512-token one measured 25% slower without it), then, the first
        // time, one eager decode step and the capture.
        prefill(c, w, s, ids, Taps(), st);
        sample(s.sampler, greedy, s.last_logits, st);
        if (pi == 0)
            for (int i = 0; i < 2; i++) run_decode_step(c, w, s, greedy, g, st), read_token(s, st);
        GpuTimer timer(st);
        timer.start();
        prefill(c, w, s, ids, Taps(), st);
        sample(s.sampler, greedy, s.last_logits, st);
        float prefill_ms = timer.stop();
        double t0 = wall_ms();
        TokenPipe pipe;
        pipe.launch(c, w, s, greedy, g, st);
        for (int i = 0; i < n_gen; i++) {  // as generate() does: the next step is queued before a token is read
            if (i + 1 < n_gen) pipe.launch(c, w, s, greedy, g, st);
            pipe.next_token();
        }
        double decode_ms = wall_ms() - t0;
        // Prefill work: 2 flops per weight per token, plus causal attention (QK^T and PV: 2 T^2 q_dim per layer).
        double flops = 2.0 * w.matmul_params * n_prompt + 2.0 * c.n_layers * (double)n_prompt * n_prompt * c.q_dim;
        double avg_ctx = n_prompt + (n_gen + 1) / 2.0;
        double kv_bytes = (double)s.kv.bytes_per_token() * avg_ctx;
        double bytes = (double)w.decode_bytes + kv_bytes, tok_s = 1000.0 * n_gen / decode_ms;
        double gbs = bytes * tok_s / 1e9, tflops = flops / (prefill_ms * 1e-3) / 1e12;
        std::printf("bench: prefill %6d tokens: %9.2f ms, %9.1f tok/s, %6.1f TFLOP/s = %5.1f%% of the GEMM ceiling\n", n_prompt,
                    prefill_ms, 1000.0 * n_prompt / prefill_ms, tflops, 100.0 * tflops / gemm_tflops);
        std::printf("bench: decode  %6d tokens at context %d..%d: %.3f ms/tok, %.2f tok/s; read %.3f GB/tok (weights %.3f, kv %.3f); "
                    "%.1f GB/s = %.1f%% of copy bandwidth\n",
                    n_gen, n_prompt, n_prompt + n_gen, decode_ms / n_gen, tok_s, bytes / 1e9, w.decode_bytes / 1e9, kv_bytes / 1e9, gbs,
                    100.0 * gbs / copy_gbs);
        if (!o.timeline_file.empty()) {  // a profiling build's block timestamps of 3 more steps (trace.cuh)
            trace_enable(true);
            for (int i = 0; i < 3; i++) run_decode_step(c, w, s, greedy, g, st);
            CUDA_CHECK(cudaStreamSynchronize(st));
            trace_enable(false);
            trace_save(strf("%s.%d", o.timeline_file.c_str(), n_prompt));
        }
        if (n_prompt == kPrefillChunk) print_prefill_breakdown(c, w, s, n_prompt, prefill_ms, st);
        if (pi + 1 == o.n_prompt.size()) print_decode_breakdown(c, w, s, decode_ms / n_gen, st);
    }
    return 0;
}

// ---- main ----

int main(int argc, char** argv) {
    return run_main([&]() -> int {
        Options o = parse_cli(argc, argv);
        if (o.help) {
            print_usage(stdout, "qwen3");
            return 0;
        }
        double t_start = wall_ms();
        require_cuda_device();
        pdl_enabled() = pdl_enabled() && o.pdl;
        int bench_ctx = *std::max_element(o.n_prompt.begin(), o.n_prompt.end()) + (o.n_predict > 0 ? o.n_predict : 128);
        Config c = load_config(o.model, o.bench ? std::max(o.ctx_size, bench_ctx) : o.ctx_size);
        GenerationConfig gen = load_generation_config(o.model);
        std::unique_ptr<Tokenizer> tok;  // optional with --ids (tiny test models ship none)
        if (!o.bench && (o.ids_file.empty() || path_exists(o.model + "/tokenizer.json")))
            tok = std::make_unique<Tokenizer>(Tokenizer::load(o.model));
        Checkpoint ck = Checkpoint::open(o.model);

        cudaStream_t st;
        CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        GpuMemory mem;
        WFormat fmt = weight_format(o, ck);
        upload_begin(ck.total_bytes());  // pinned staging for big checkpoints (host_upload.cuh)
        Weights w = load_weights(ck, c, fmt, mem, st);
        State s;
        alloc_state(s, c, w, o.kv_type == "fp8" ? KvType::FP8 : KvType::BF16, o.kv_prefill_cache, !o.dump_dir.empty(), mem, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        upload_release();  // the loaders' pinned buffers (host_upload.cuh)
        Timings tm;
        tm.load_ms = wall_ms() - t_start;
        if (o.verbose || o.bench)
            std::fprintf(stderr, "qwen3: %d layers, dim %d, %d/%d heads x %d, ffn %d, vocab %d, ctx %d; weights %s, kv %s; GPU memory: %s\n",
                         c.n_layers, c.dim, c.n_heads, c.n_kv, c.head_dim, c.ffn, c.vocab, c.ctx, wformat_name(fmt),
                         o.kv_type.c_str(), mem.report().c_str());
        if (o.bench) return bench(o, c, w, s, st);
        int rc = generate(o, c, w, s, tok.get(), gen, tm, st);
        if (!o.quiet) {
            print_timings(tm, wall_ms() - t_start);
            std::fprintf(stderr, "monocu: GPU memory: %s\n", mem.report().c_str());
        }
        CUDA_CHECK(cudaStreamDestroy(st));
        return rc;
    });
}
