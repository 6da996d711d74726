// runtime/moe_layer.cuh — one mixture-of-experts feed-forward layer, for any batch: the router, the routing
// (ops/moe.cuh), the chosen experts' matmuls and their weighted sum into the residual stream.
//
// Usage (an engine's Weights, State and forward):
//   MoeDims d = read_moe_dims(hf, {"num_experts"}, "moe_intermediate_size");   // config.json, checked
//   MoeRouter router{MoeScore::Softmax, 0, true, 0.f, 1.f};                    // (k comes from d)
//   MoeFfn f = load_moe(ck, rt, layer, "model.layers.3.mlp.", {"gate_proj", "up_proj", "down_proj"}, false, router, d, dim);
//   MoeScratch sc = moe_scratch(T_max, d.n_experts, d.k, dim, d.ffn, mem);
//   MoeFfn g = load_moe_fused(ck, rt, layer, "model.layers.3.mlp.", router, d, dim, GluAct{1.702f, 7.f});  // GPT-OSS
//   moe_layer(rt, f, layer, x, norm_w, eps, batch, sc);    // x += the mixture of rmsnorm(x); sc.idx then holds the
//                                                          // choices ([T][k]: the routing_NN tap); moe_ffn is the same
//                                                          // without a Runtime; moe_layer<true> when the experts
//                                                          // may be MXFP4 (its GEMV kernels are built only then)
//
// The experts' matmuls:
//   - a decode step (T = 1): the router's logits and the routing in one launch (moe_router_decode), then one GEMV launch for the
//     k experts' gate_up (RMSNorm and SwiGLU fused) and one for their down_proj (ops/gemv.cuh's GemvExperts: each
//     launch row reads its expert from the routing's output on the device, so the step stays one CUDA graph with
//     no host round trip), and the weighted sum: 4 launches, reading only the chosen experts' weights. (Routing
//     inside every gate_up block instead, one launch fewer, measured slower: 32.5 against 21.4 us for the launch.)
//   - a prefill chunk: the router's GEMM and the routing, then the choices come back to the host, which groups
//     the (token, expert) pairs by expert; the rows each expert takes are gathered, each expert with any runs
//     its GEMMs on them (dequantized first when quantized, as any projection's prefill; MXFP4 experts on Hopper: one
//     grouped GEMM per projection for all experts, over the 4-bit weights, ops/gemm_mxfp4.cuh), and the weighted
//     sum reads each token's k rows back.
#pragma once

#include <vector>

#include "gpu/profile.cuh"
#include "host/moe_groups.h"
#include "host/npy.h"
#include "load/load_linear.cuh"
#include "ops/gemv_mxfp4.cuh"
#include "ops/linear.cuh"
#include "ops/moe.cuh"
#include "runtime/runtime.cuh"

namespace monocu {

// The expert GEMVs (GemvExperts' instantiations of ops/gemv.cuh's kernel live here, with their only users, so that
// engines without a mixture do not compile them).
// L is any one expert's projection (its shape, format and kblock).
//   h[j] = silu(gate) * up of expert idx[j] on rmsnorm(x)         h bf16 [k][N / 2]
// MX: the experts may be MXFP4 (GPT-OSS; only then are its kernels built).
template <bool MX = false>
inline void gemv_experts_rmsnorm_swiglu(const Linear& L, GemvExperts ex, const float* x, const bf16* norm_w, float eps, bf16* h,
                                        cudaStream_t s) {
    ex.x_stride = 0, ex.y_stride = (size_t)L.N / 2;
    gemv_launch<GemvInput::F32_RMSNORM, GemvOutput::SWIGLU_BF16, true, MX>(L, x, norm_w, eps, nullptr, h, s, {}, ex);
}
//   h[j] = silu(gate) * up of expert idx[j] on xn (rmsnorm(x) already made, bf16 [K])
template <bool MX = false>
inline void gemv_experts_swiglu(const Linear& L, GemvExperts ex, const bf16* xn, bf16* h, cudaStream_t s) {
    if constexpr (MX)
        if (mxfp4_stream_fits(L)) return mxfp4_experts_swiglu(L, ex, xn, h, s);  // (Hopper: ops/gemv_mxfp4.cuh)
    ex.x_stride = 0, ex.y_stride = (size_t)L.N / 2;
    gemv_launch<GemvInput::BF16, GemvOutput::SWIGLU_BF16, true, MX>(L, xn, nullptr, 0.f, nullptr, h, s, {}, ex);
}
//   y[j] = W_idx[j] h[j]                                           h bf16 [k][K], y float [k][N]
template <bool MX = false>
inline void gemv_experts(const Linear& L, GemvExperts ex, const bf16* h, float* y, cudaStream_t s) {
    if constexpr (MX)
        if (mxfp4_stream_fits(L)) return mxfp4_experts_store(L, ex, h, y, s);
    ex.x_stride = (size_t)L.K * 2, ex.y_stride = (size_t)L.N;
    gemv_launch<GemvInput::BF16, GemvOutput::STORE_F32, true, MX>(L, h, nullptr, 0.f, y, nullptr, s, {}, ex);
}


// A mixture's sizes from config.json, checked against the kernels' limits: the expert count (the first of
// experts_keys present: families name it differently), experts per token (num_experts_per_tok) and each expert's
// MLP width (ffn_key).
struct MoeDims {
    int n_experts = 0, k = 0, ffn = 0;
};
// The key that holds the expert count: the first of experts_keys the file (or, failing that, the defaults) has.
inline const char* moe_experts_key(const ModelConfig& h, std::initializer_list<const char*> experts_keys) {
    for (const char* key : experts_keys)
        if (h.file.contains(key)) return key;
    for (const char* key : experts_keys)
        if (h.find(key)) return key;
    die("%s: no '%s' (the number of experts)", h.path.c_str(), *experts_keys.begin());
}
inline int moe_expert_count(const ModelConfig& h, std::initializer_list<const char*> experts_keys) {
    const char* ek = moe_experts_key(h, experts_keys);
    return json_as_int(h.path.c_str(), ek, h.require(ek));
}
inline MoeDims read_moe_dims(const ModelConfig& h, std::initializer_list<const char*> experts_keys, const char* ffn_key) {
    const char* p = h.path.c_str();
    MoeDims d;
    const char* ek = moe_experts_key(h, experts_keys);
    d.n_experts = json_as_int(p, ek, h.require(ek));
    d.k = json_as_int(p, "num_experts_per_tok", h.require("num_experts_per_tok"));
    d.ffn = json_as_int(p, ffn_key, h.require(ffn_key));
    if (d.n_experts < 1 || d.n_experts > kMoeMaxExperts) die("%s: '%s' = %d is not supported (1..%d)", p, ek, d.n_experts, kMoeMaxExperts);
    if (d.k < 1 || d.k > std::min(d.n_experts, kMoeMaxK))
        die("%s: 'num_experts_per_tok' = %d is not supported (1..%d)", p, d.k, std::min(d.n_experts, kMoeMaxK));
    if (d.ffn < 8 || d.ffn % 8 || d.ffn > (1 << 20)) die("%s: '%s' = %d must be a positive multiple of 8", p, ffn_key, d.ffn);
    return d;
}

struct MoeFfn {
    MoeRouter router;
    Linear gate;                 // [E][dim] the router's projection (bf16; GPT-OSS's with its bias)
    const float* bias = nullptr; // [E] choice bias (LFM2's expert_bias), or null
    ExpertLinears experts;       // E experts' gate_up [2 f][dim] and down [dim][f] (GPT-OSS: with biases)
    GluAct act;                  // the experts' activation: SwiGLU, or GPT-OSS's clamped form (ops/swiglu.cuh)
    int E = 0;
    MoeForced forced;            // --force-routing: this layer's oracle choices (pos filled per pass), or none
};

// --force-routing DIR: layer `layer`'s choices from DIR/routing_NN.npy ([positions][k], as oracle/dump.py writes them).
inline MoeForced load_forced_routing(const std::string& dir, int layer, int k, GpuMemory& mem) {
    std::string path = dir + strf("/routing_%02d.npy", layer);
    NpyArray a = npy_read(path);
    if (a.shape.size() != 2 || a.shape[1] != k) die("%s: expected [positions][%d] expert choices", path.c_str(), k);
    std::vector<int> v(a.data.begin(), a.data.end());
    MoeForced f;
    f.n = (int)a.shape[0];
    int* d = mem.alloc<int>(v.size(), "weights");
    CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    f.idx = d;
    return f;
}

// The names of an expert's three projections in a family's checkpoints.
struct ExpertNames {
    const char *gate, *up, *down;  // {"gate_proj", "up_proj", "down_proj"} (Qwen3-MoE), {"w1", "w3", "w2"} (LFM2, Mixtral)
};

// A loaded mixture layer's place in the runtime: with --force-routing the oracle's choices for it, and its experts in the
// plan as extras (which of them run is the router's call).
inline void moe_attach(MoeFfn& m, Runtime& rt, int layer) {
    if (!rt.force_routing.empty()) m.forced = load_forced_routing(rt.force_routing, layer, m.router.k, rt.mem);
    for (int e = 0; e < m.E; e++) rt.lin.plan.extra(&m.experts.gate_up[e]), rt.lin.plan.extra(&m.experts.down[e]);
}

// One mixture layer's weights, as every family names them under the layer's block (e.g. "model.layers.3.mlp."): the
// router's projection `gate` (kept bf16: quantizing it moves choices), `expert_bias` when choice_bias (fp32), the
// experts `experts.<e>.<names>` in the runtime's format, and with --force-routing the oracle's choices for this layer.
// The experts join the plan as extras (which of them run is the router's call); the engine lists the layer's other
// projections and the router in its order.
inline MoeFfn load_moe(const Checkpoint& ck, Runtime& rt, int layer, const std::string& block, ExpertNames names, bool choice_bias,
                       const MoeRouter& router, const MoeDims& d, int dim) {
    MoeFfn m;
    m.router = router, m.router.k = d.k, m.E = d.n_experts;
    m.gate = load_linear(ck, {{block + "gate"}, {d.n_experts}, false, false}, dim, WFormat::BF16, rt.mem, rt.stream);
    m.bias = choice_bias ? load_vector_f32(ck, block + "expert_bias", d.n_experts, rt.mem, rt.stream) : nullptr;
    m.experts = load_experts(ck, d.n_experts, d.ffn, dim, [&](int e) {
        std::string x = block + "experts." + std::to_string(e) + ".";
        return std::array<std::string, 3>{x + names.gate, x + names.up, x + names.down};
    }, rt.fmt, rt.mem, rt.stream);
    moe_attach(m, rt, layer);
    return m;
}

// GPT-OSS's mixture layer under `block` ("model.layers.3.mlp."): the router `router` with its bias (logits = W x + b,
// kept bf16), the experts stored together under "experts." (load_fused_experts: MXFP4 as published, or float), and
// their clamped SwiGLU `act`.
inline MoeFfn load_moe_fused(const Checkpoint& ck, Runtime& rt, int layer, const std::string& block, const MoeRouter& router, const MoeDims& d,
                             int dim, GluAct act) {
    MoeFfn m;
    m.router = router, m.router.k = d.k, m.E = d.n_experts, m.act = act;
    m.gate = load_linear(ck, {{block + "router"}, {d.n_experts}, false, true}, dim, WFormat::BF16, rt.mem, rt.stream);
    m.experts = load_fused_experts(ck, block + "experts.", d.n_experts, d.ffn, dim, rt.fmt, rt.mem, rt.stream);
    moe_attach(m, rt, layer);
    return m;
}

// What a mixture changes in the runner's roofline: a token reads (and multiplies with) k of the E experts of each of
// the moe_layers layers. `any` is one loaded mixture layer, or null before loading (then only the products count).
inline void moe_model_info(ModelInfo& i, int moe_layers, const MoeDims& d, int dim, const MoeFfn* any) {
    if (moe_layers <= 0) return;
    i.batch_graphs = false;  // a pass of several tokens brings the routing back to the host (moe_layer)
    if (any) i.unread_bytes += (size_t)moe_layers * (d.n_experts - d.k) * any->experts.expert_bytes();
    i.extra_matmul_params = (double)moe_layers * d.k * 3.0 * d.ffn * dim;
    i.summary += strf("; %d mixture layers of %d experts (ffn %d), top %d", moe_layers, d.n_experts, d.ffn, d.k);
}

// Buffers for up to T_max tokens (allocated once, shared by the layers).
struct MoeScratch {
    float* logits;          // [T][E]
    int* idx;               // [T][k]
    float* weight;          // [T][k]
    bf16* h;                // [T k][f]     silu(gate) * up per (token, expert)
    float* y;               // [T k][dim]   each expert's output
    float* gu;              // [T k][2 f]   prefill: gate_up's output
    bf16* xg;               // [T k][dim]   prefill: the normalised rows in expert order
    int* from;              // [T k]        prefill: the token of each gathered row
    int* rows;              // [T k]        prefill: the gathered row of each (token, j)
    int* expert;            // [T k]        prefill: the expert of each gathered row
    unsigned* counter;      // decode: moe_router_decode's count of finished blocks (zero between launches)
    bf16* xn;               // [dim]        decode: rmsnorm(x), made by the router for the experts' gate_up
    std::vector<int> host_idx;  // prefill: the choices, back on the host
    std::vector<int> host_expert;  // ... and each gathered row's expert
    MxgTile* tiles = nullptr;       // prefill, MXFP4 experts on Hopper: the grouped GEMM's tiles (ops/gemm_mxfp4.cuh)
    std::vector<MxgTile> host_tiles;
    ExpertGroups groups;        // ... grouped by expert (host/moe_groups.h)
};

inline MoeScratch moe_scratch(int T_max, int E, int k, int dim, int ffn, GpuMemory& mem) {
    MoeScratch s;
    size_t tk = (size_t)T_max * k;
    s.logits = mem.alloc<float>((size_t)T_max * E, "activations");
    s.idx = mem.alloc<int>(tk, "activations"), s.weight = mem.alloc<float>(tk, "activations");
    s.h = mem.alloc<bf16>(tk * ffn, "activations"), s.y = mem.alloc<float>(tk * dim, "activations");
    s.counter = mem.alloc<unsigned>(1, "activations");
    s.xn = mem.alloc<bf16>(dim, "activations");
    CUDA_CHECK(cudaMemset(s.counter, 0, sizeof(unsigned)));
    if (T_max > 1) {
        s.gu = mem.alloc<float>(tk * 2 * ffn, "activations"), s.xg = mem.alloc<bf16>(tk * dim, "activations");
        s.from = mem.alloc<int>(tk, "activations"), s.rows = mem.alloc<int>(tk, "activations");
        s.expert = mem.alloc<int>(tk, "activations");
        s.tiles = mem.alloc<MxgTile>(mxfp4_gemm_max_tiles((long)tk, E), "activations");
    }
    return s;
}

// One expert's rows of a prefill chunk: linear(), except that MXFP4 experts (MX) take the GEMM for a single row too
// (the plain GEMVs are built without MXFP4).
template <bool MX>
inline void expert_linear(const Linear& L, const bf16* x, float* y, int n, Linears& lin, cudaStream_t s, bool add = false) {
    if (MX) return prefill_gemm(L, x, y, n, add, lin, s);
    if (add) die("internal: expert_linear adds only for MX experts");
    linear(L, x, y, n, lin, s);
}

// x += sum over the k experts the router picks of weight * down(silu(gate(n)) * up(n)), n = rmsnorm(x) (norm_w, eps);
// the router sees the same n. MX: the experts may be MXFP4.
template <bool MX = false>
inline void moe_ffn(const MoeFfn& f, float* x, const bf16* norm_w, float eps, const int* pos, int T, MoeScratch& sc, Linears& lin,
                    cudaStream_t s) {
    const int k = f.router.k, dim = f.gate.K, ffn = f.experts.down[0].K;
    const ExpertLinears& X = f.experts;
    MoeForced forced = f.forced;
    forced.pos = pos;
    if (T == 1) {
        const bool fused = moe_router_decode_fits(f.gate);
        if (fused) {
            OpScope op("router + route", s);
            moe_router_decode(f.router, f.gate, x, norm_w, eps, f.bias, f.E, forced, sc.logits, sc.idx, sc.weight, sc.counter, s, sc.xn);
        } else {
            {
                OpScope op("gemv router", s);
                gemv_rmsnorm(f.gate, x, norm_w, eps, sc.logits, s);
            }
            OpScope op("route", s);
            moe_route(f.router, sc.logits, f.bias, 1, f.E, sc.idx, sc.weight, s, forced);
        }
        {
            OpScope op("gemv experts gate_up", s);
            GemvExperts ex{sc.idx, X.gate_up_w, X.gate_up_scale, k, X.gate_up_bias, f.act};
            if (fused) gemv_experts_swiglu<MX>(X.gate_up[0], ex, sc.xn, sc.h, s);  // the router normalised x already
            else gemv_experts_rmsnorm_swiglu<MX>(X.gate_up[0], ex, x, norm_w, eps, sc.h, s);
        }
        {
            OpScope op("gemv experts down", s);
            gemv_experts<MX>(X.down[0], GemvExperts{sc.idx, X.down_w, X.down_scale, k, X.down_bias}, sc.h, sc.y, s);
        }
        OpScope op("moe sum", s);
        moe_combine(sc.y, sc.weight, nullptr, 1, k, dim, x, s);
        return;
    }
    bf16* xn = lin.xb;  // [T][dim] rmsnorm(x)
    rmsnorm(x, norm_w, xn, T, dim, eps, s);
    linear(f.gate, xn, sc.logits, T, lin, s);
    {
        OpScope op("route", s);
        moe_route(f.router, sc.logits, f.bias, T, f.E, sc.idx, sc.weight, s, forced);
    }
    // The (token, j) pairs grouped by expert, in token order within each (count[e]: expert e's first gathered row).
    const size_t tk = (size_t)T * k;
    sc.host_idx.resize(tk);
    CUDA_CHECK(cudaMemcpyAsync(sc.host_idx.data(), sc.idx, tk * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    ExpertGroups& g = sc.groups;
    group_by_expert(sc.host_idx, k, f.E, g);
    const std::vector<int>& count = g.first;
    CUDA_CHECK(cudaMemcpyAsync(sc.from, g.token.data(), tk * sizeof(int), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(sc.rows, g.row.data(), tk * sizeof(int), cudaMemcpyHostToDevice, s));
    {
        OpScope op("gather", s);
        gather_rows(xn, sc.from, (int)tk, dim, sc.xg, s);
    }
    // MXFP4 experts on Hopper (unless MONOCU_MXFP4_GEMM=off): one grouped GEMM per projection over the weights as
    // they are, on the tiles of each expert's rows; otherwise a GEMM per expert (over bf16 weights dequantized first
    // when quantized). Every expert's tensors must fit (their alignment), not only the first's.
    int n_tiles = 0;
    if constexpr (MX) {
        bool fit = true;
        for (int e = 0; e < f.E && fit; e++) fit = mxfp4_gemm_used(X.gate_up[e]) && mxfp4_gemm_used(X.down[e]);
        if (fit) {
            n_tiles = mxfp4_gemm_tiles(count, f.E, sc.host_tiles);
            CUDA_CHECK(cudaMemcpyAsync(sc.tiles, sc.host_tiles.data(), n_tiles * sizeof(MxgTile), cudaMemcpyHostToDevice, s));
        }
    }
    // Experts with biases (GPT-OSS), one GEMM per expert: every row's bias first, in one launch per projection, then
    // each expert's GEMM adds onto it (as prefill_gemm does for one projection: y = b, then y += W x).
    const bool gu_bias = MX && X.gate_up_bias, dn_bias = MX && X.down_bias;
    if ((gu_bias || dn_bias) && !n_tiles) {
        sc.host_expert.resize(tk);
        for (int e = 0; e < f.E; e++) std::fill(sc.host_expert.begin() + count[e], sc.host_expert.begin() + count[e + 1], e);
        CUDA_CHECK(cudaMemcpyAsync(sc.expert, sc.host_expert.data(), tk * sizeof(int), cudaMemcpyHostToDevice, s));
    }
    auto experts = [&](const Linear* Ls, const void* const* w, const void* const* scales, const void* const* bias, const bf16* in,
                       int in_dim, float* out, int out_dim) {
        if constexpr (MX) {
            if (n_tiles) {  // (the biases join in the kernel's output)
                OpScope op("gemm mxfp4", s, 2.0 * tk * out_dim * in_dim, Ls[0].label);
                mxfp4_grouped_gemm(Ls[0], w, scales, bias, in, (long)tk, sc.tiles, n_tiles, out, false, s);
                return;
            }
        }
        (void)w, (void)scales;
        if (bias) {
            OpScope op("bias", s);
            expert_bias_rows(out, bias, sc.expert, (int)tk, out_dim, s);
        }
        for (int e = 0; e < f.E; e++) {
            int n = count[e + 1] - count[e];
            if (!n) continue;
            Linear L = Ls[e];
            if (bias) L.bias = nullptr;
            expert_linear<MX>(L, in + (size_t)count[e] * in_dim, out + (size_t)count[e] * out_dim, n, lin, s, bias != nullptr);
        }
    };
    experts(X.gate_up.data(), X.gate_up_w, X.gate_up_scale, gu_bias ? X.gate_up_bias : nullptr, sc.xg, dim, sc.gu, 2 * ffn);
    {
        OpScope op("swiglu", s);
        swiglu_interleaved(sc.gu, sc.h, (int)tk, ffn, s, f.act);
    }
    experts(X.down.data(), X.down_w, X.down_scale, dn_bias ? X.down_bias : nullptr, sc.h, ffn, sc.y, dim);
    OpScope op("moe sum", s);
    moe_combine(sc.y, sc.weight, sc.rows, T, k, dim, x, s);
    // (The uploads above read pageable host memory: copied out before cudaMemcpyAsync returns, so the next layer
    // may rewrite the vectors.)
}

// moe_ffn as one layer of an engine's forward(): the batch's tokens, the runtime's projections and stream, and the
// choices as the routing_NN tap (oracle/compare.py reads them; --force-routing feeds them back).
template <bool MX = false>
inline void moe_layer(Runtime& rt, const MoeFfn& f, int layer, float* x, const bf16* norm_w, float eps, const Batch& b, MoeScratch& sc) {
    moe_ffn<MX>(f, x, norm_w, eps, b.pos, b.n_tokens, sc, rt.lin, rt.stream);
    rt.taps.i32(strf("routing_%02d", layer), sc.idx, b.n_tokens, f.router.k, rt.stream);
}

}  // namespace monocu
