// ops/linear.cuh — one call per projection, whatever the number of tokens or the weight format.
//
// Usage:
//   Linears lin;                                       // the scratch and the plan below, one per model
//   lin.plan.layer({{&L.qkv}, {&L.o, &L.gate_up, &L.down}});   // at load: each layer's projections in the order
//   lin.plan.head(&w.lm_head);                         // forward() calls them, attention between the groups
//   linears_alloc(lin, T_max, dumping, mem);           // buffers sized from the plan (prefill of T_max rows)
//   linear_rmsnorm(L.qkv, x, norm_w, eps, qkv, T, lin, stream);          // qkv = W rmsnorm(x) (+ bias)
//   linear_rmsnorm_swiglu(L.gate_up, x, norm_w, eps, h, T, lin, stream); // h = silu(gate) * up of rmsnorm(x)
//   linear_add(L.o, att, x, T, lin, stream);                             // x += W att
//   linear(L.lm_head, xb, logits, T, lin, stream);                       // logits = W xb
//
// Decode (T == 1) runs our GEMV (gemv.cuh) in the weights' own format, with the RMSNorm fused into its
// input staging and the SwiGLU into its epilogue: 4 matmul launches per layer. Prefill (T > 1) normalises
// into xb and runs one cuBLAS GEMM per projection (beta = 1 adds the residual; a bias is written into the
// output first); quantized weights are first dequantized into a bf16 buffer, then multiplied on the tensor
// cores. Dequantization only reads and writes memory while a 2k-token GEMM is bound by the tensor cores, so
// the two overlap: each projection's weights are turned to bf16 on a side stream while the GEMM before it
// runs (DequantRing).
// The plan is what lets the model's forward() read as the math alone: from the order of the projections the
// kit knows, at each call, which projection comes next, and fetches it early:
//   - prefill: the next projection (in the layer, or the next layer's first) is dequantized during this GEMM;
//   - decode: in a group after an attention, each GEMV asks L2 for the first 8 MB of the next one in its group,
//     the group's first only after its wait (its blocks sit beside the attention kernel: l2_ahead, gemv.cuh).
//     So o_proj warms gate_up and gate_up warms down_proj; qkv (before the attention) and the group's last
//     warm nothing: both were measured no faster or slower (kb/log.md, fifth and fourteenth sessions).
#pragma once

#include <functional>
#include <string>
#include <unordered_map>

#include "gpu/profile.cuh"
#include "ops/gemm.cuh"
#include "ops/gemm_mxfp4.cuh"
#include "ops/gemv.cuh"
#include "ops/quant.cuh"
#include "ops/rmsnorm.cuh"
#include "ops/quant_rows.cuh"
#include "ops/swiglu.cuh"

namespace monocu {

// Two bf16 buffers for dequantized weights, filled in turn: start() dequantizes a projection into the next
// buffer on a side stream once the last GEMM that read that buffer is done; acquire() hands a GEMM the buffer
// that holds its projection (the GEMM's stream waits for the dequantization), or dequantizes it there and
// then; release() marks the buffer free once that GEMM is done. Events carry every dependency, so the
// streams never wait on the host. (Prefill only: decode multiplies the quantized weights directly.)
struct DequantRing {
    cudaStream_t side = nullptr;
    bf16* buf[2] = {};
    size_t cap[2] = {};                   // elements each buffer holds
    const Linear* held[2] = {};           // what buffer k holds or is being filled with (null: nothing in use)
    cudaEvent_t ready[2] = {}, freed[2] = {};
    int turn = 0;                          // the buffer the next fill goes to

    void init(bf16* b0, size_t n0, bf16* b1, size_t n1) {
        buf[0] = b0, buf[1] = b1, cap[0] = n0, cap[1] = n1;
        CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        for (int k = 0; k < 2; k++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&ready[k], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&freed[k], cudaEventDisableTiming));
        }
    }
    // The buffer for a projection of n elements: the one whose turn it is, unless only the other is large enough.
    int pick(size_t n) {
        int k = cap[turn] >= n ? turn : cap[turn ^ 1] >= n ? turn ^ 1 : -1;
        if (k >= 0) turn = k ^ 1;
        return k;
    }
    void start(const Linear& L) {
        int k = pick((size_t)L.N * L.K);
        if (k < 0) return;  // too large to dequantize ahead: acquire() will say so
        CUDA_CHECK(cudaStreamWaitEvent(side, freed[k], 0));
        dequant_to_bf16(L, buf[k], side);
        CUDA_CHECK(cudaEventRecord(ready[k], side));
        held[k] = &L;
    }
    int acquire(const Linear& L, cudaStream_t s) {
        for (int k = 0; k < 2; k++)
            if (held[k] == &L) {
                CUDA_CHECK(cudaStreamWaitEvent(s, ready[k], 0));
                return k;
            }
        int k = pick((size_t)L.N * L.K);
        if (k < 0) die("prefill: no dequantization scratch for a %d x %d %s projection", L.N, L.K, wformat_name(L.fmt));
        CUDA_CHECK(cudaStreamWaitEvent(s, ready[k], 0));  // a fill started into k and never used must end first
        dequant_to_bf16(L, buf[k], s);
        held[k] = &L;
        return k;
    }
    void release(int k, cudaStream_t s) {
        CUDA_CHECK(cudaEventRecord(freed[k], s));
        held[k] = nullptr;
    }
};

// The order a model's forward() multiplies in (see the top of this file).
struct LinearPlan {
    struct Entry {
        const Linear* next = nullptr;  // the projection after this one (prefill: dequantized ahead)
        L2Prefetch l2;                 // what this one's decode GEMV warms in L2
        std::string input_tap;         // --dump-inputs: "layer_03_o_in", the name tools/quantize --calib reads
    };
    std::unordered_map<const Linear*, Entry> at;
    std::vector<const Linear*> order;  // every projection, in call order (the head last)
    const Linear* head_ = nullptr;

    // One layer's projections: groups in call order, each group's projections in call order; an attention
    // (or another operation that reads all of a group's output) separates the groups.
    void layer(std::initializer_list<std::initializer_list<const Linear*>> groups) {
        bool after_attention = false;
        for (const auto& g : groups) {
            std::vector<const Linear*> v(g);
            for (size_t i = 0; i < v.size(); i++) {
                add(v[i]);
                if (after_attention && i + 1 < v.size()) at[v[i]].l2 = l2_ahead(*v[i + 1], i == 0);
                at[v[i]].input_tap = strf("layer_%02d_%s_in", layers, input_role(v[i]->label).c_str());
            }
            after_attention = true;
        }
        layers++;
    }
    // The output projection (lm_head): last in the order; its prefill scratch is needed only when dumping.
    // (Nothing dequantizes it ahead: a prefill multiplies with it as a GEMM only when dumping every row.)
    void head(const Linear* h) {
        if (at.count(h)) die("linear plan: projection '%s' listed twice", h->label);
        at[h];
        order.push_back(h), head_ = h;
    }

    // A projection called outside the order (a mixture's experts: which run depends on the router): only its size
    // counts, for the prefill buffers.
    void extra(const Linear* L) { extras.push_back(L); }
    std::vector<const Linear*> extras;

    const Entry* find(const Linear& L) const {
        auto it = at.find(&L);
        return it == at.end() ? nullptr : &it->second;
    }

private:
    int layers = 0;
    // The calibration names tools/quantize --calib reads for the dense layer's projections; others by label.
    static std::string input_role(const std::string& label) {
        if (label == "q_proj+k_proj+v_proj") return "attn";
        if (label == "o_proj") return "o";
        if (label == "gate_proj+up_proj") return "mlp";
        if (label == "down_proj") return "down";
        return label;
    }
    void add(const Linear* L) {
        if (at.count(L)) die("linear plan: projection '%s' listed twice", L->label);
        if (!order.empty()) at[order.back()].next = L;
        at[L];
        order.push_back(L);
    }
};

// Everything the projections of one model share: the plan, the cuBLAS handle and the prefill buffers.
struct Linears {
    LinearPlan plan;
    Gemm gemm;
    bf16* xb = nullptr;  // [T_max][K_max] normalised input (prefill)
    float* f = nullptr;  // [T_max][N_max] GEMM output before SwiGLU (prefill)
    DequantRing ring;    // two bf16 buffers for dequantized weights (prefill of FP8/INT4 weights), or none
    bool has_ring = false;
    bool ahead = true;   // dequantize the next projection during this GEMM (false: each just before its GEMM)
    // --dump-inputs: called with each planned projection's input as its GEMM multiplies it (bf16 rows).
    std::function<void(const std::string& name, const bf16* x, int rows, int cols, cudaStream_t)> on_input;
};

// Sizes the prefill buffers for T_max rows from the plan: xb for the widest input, f for the widest SwiGLU
// projection, and the dequantization ring for the largest quantized projection (the head only when dumping
// every row's logits).
inline void linears_alloc(Linears& lin, int T_max, bool dumping, GpuMemory& mem) {
    size_t k_max = 0, n_max = 0, deq = 0, deq_layer = 0;
    std::vector<const Linear*> all = lin.plan.order;
    all.insert(all.end(), lin.plan.extras.begin(), lin.plan.extras.end());
    for (const Linear* L : all) {
        bool head = L == lin.plan.head_;
        if (!head) k_max = std::max(k_max, (size_t)L->K), n_max = std::max(n_max, (size_t)L->N);
        if (L->fmt == WFormat::BF16 || (head && !dumping) || mxfp4_gemm_used(*L)) continue;  // (MXFP4 experts: read as they are)
        deq = std::max(deq, (size_t)L->N * L->K);
        if (!head) deq_layer = std::max(deq_layer, (size_t)L->N * L->K);
    }
    lin.xb = mem.alloc<bf16>((size_t)T_max * k_max, "activations");
    lin.f = mem.alloc<float>((size_t)T_max * n_max, "activations");
    if (deq) {
        lin.ring.init(mem.alloc<bf16>(deq, "workspace"), deq, mem.alloc<bf16>(std::max<size_t>(deq_layer, 1), "workspace"), deq_layer);
        lin.has_ring = true;
    }
}

// y[r] = b (or y[r] += b) for each of T rows of N: a row per block, no division per element (a 64-bit modulo per
// element made this 2-3x the time of its writes).
static __global__ void bias_rows_kernel(float* __restrict__ y, const bf16* __restrict__ b, int N, int T, bool add) {
    for (int r = blockIdx.x; r < T; r += gridDim.x) {
        float* yr = y + (size_t)r * N;
        for (int c = threadIdx.x; c < N; c += blockDim.x) {
            float v = __bfloat162float(b[c]);
            yr[c] = add ? yr[c] + v : v;
        }
    }
}

// A pass of a few rows over FP8 / INT4 weights runs a GEMV per row, each reading the quantized weights once, instead of
// dequantizing the whole projection for a GEMM (5 and 4.5 bytes moved a weight, plus the GEMM): FP8 and INT4 for up to
// 2 rows (INT4 kept 6 until the thirty-first session: the rows kernel is faster from 3, kb/status.md). Past those, up
// to kQuantRowsPassMax rows run
// ops/quant_rows.cuh: the tensor cores on the weights as stored, each read once per 16 rows (Qwen3-8B's FP8
// projections on the H200, tools/bench_gemv --rows: faster than a GEMV per row from 3 or 4 rows, than dequantizing for
// a GEMM up to 32; at 64 it ties or loses; kb/status.md). No side stream either, so the batched core's steps of that many sequences
// run as CUDA graphs.
constexpr int kQuantRowsPassMax = 32;
inline int row_gemv_max(WFormat f) { return f == WFormat::FP8 || f == WFormat::INT4 ? 2 : 1; }
inline bool by_gemv(const Linear& L, int T) { return T <= row_gemv_max(L.fmt); }  // (one row: always)
inline bool by_quant_rows(const Linear& L, int T) { return !by_gemv(L, T) && T <= kQuantRowsPassMax && quant_rows_fit(L, T); }
// Whether a pass of T rows over L needs no dequantized copy of its weights.
inline bool without_dequant(const Linear& L, int T) { return L.fmt == WFormat::BF16 || by_gemv(L, T) || by_quant_rows(L, T); }

// The most rows a pass may have while every planned projection runs GEMVs, quant_rows or a bf16 GEMM, never the
// dequantization ring's side stream (so that the pass can be captured as a CUDA graph): for each quantized projection
// the most rows without_dequant allows (1 for a format without row GEMVs).
inline int ring_free_rows(const Linears& lin) {
    int rows = INT32_MAX;
    for (const std::vector<const Linear*>* list : {&lin.plan.order, &lin.plan.extras})
        for (const Linear* L : *list)
            if (L->fmt != WFormat::BF16 && !mxfp4_gemm_used(*L)) rows = std::min(rows, without_dequant(*L, kQuantRowsPassMax) ? kQuantRowsPassMax : row_gemv_max(L->fmt));
    return rows;
}

// y (+)= W x + b for T > 1 rows: a few rows over quantized weights on ops/quant_rows.cuh; otherwise the GEMM on L's
// bf16 weights (dequantized first when quantized), then the next projection's dequantization is started on the side
// stream.
inline void prefill_gemm(const Linear& L, const bf16* x, float* y, int T, bool add, Linears& lin, cudaStream_t s) {
    if (by_quant_rows(L, T)) {
        OpScope op("rows", s, 2.0 * T * L.N * L.K, L.label);
        return quant_rows(L, x, T, y, add, s);
    }
    const LinearPlan::Entry* e = lin.plan.find(L);
    int slot = -1;
    const bf16* w = static_cast<const bf16*>(L.w);
    if (L.fmt != WFormat::BF16) {
        if (!lin.has_ring) die("prefill: no dequantization scratch for the %d x %d %s projection '%s'", L.N, L.K, wformat_name(L.fmt), L.label);
        OpScope op("dequantize", s);
        slot = lin.ring.acquire(L, s);
        w = lin.ring.buf[slot];
    }
    if (L.bias) {  // y = b (or y += b), then y += W x
        OpScope op("bias", s);
        bias_rows_kernel<<<(unsigned)std::min(T, 8192), 256, 0, s>>>(y, static_cast<const bf16*>(L.bias), L.N, T, add);
        LAUNCH_CHECK();
    }
    {
        OpScope op("gemm", s, 2.0 * T * L.N * L.K, L.label);
        gemm_bf16(lin.gemm, x, w, y, T, L.N, L.K, add || L.bias, s);
    }
    if (slot >= 0) lin.ring.release(slot, s);
    // While this GEMM runs, the next projection's weights turn to bf16 (not while profiling: each op alone).
    if (e && e->next && !without_dequant(*e->next, T) && lin.has_ring && lin.ahead && !op_profile().on())
        lin.ring.start(*e->next);
}

// The decode GEMV's L2 warm-up for L, from the plan.
inline L2Prefetch plan_l2(const Linear& L, const Linears& lin) {
    const LinearPlan::Entry* e = lin.plan.find(L);
    return e ? e->l2 : L2Prefetch{};
}

// --dump-inputs: hands L's input (bf16 rows) to lin.on_input under the plan's name for it.
inline void dump_input(const Linear& L, const bf16* x, int T, Linears& lin, cudaStream_t s) {
    const LinearPlan::Entry* e = lin.plan.find(L);
    if (lin.on_input && e && !e->input_tap.empty()) lin.on_input(e->input_tap, x, T, L.K, s);
}
// ... of a projection whose input is rmsnorm(x), made here for the dump (a decode step's GEMV normalises in
// its staging and never writes the rows out).
inline void dump_normed_input(const Linear& L, const float* x, const bf16* norm_w, float eps, int T, Linears& lin, cudaStream_t s) {
    if (!lin.on_input) return;
    rmsnorm(x, norm_w, lin.xb, T, L.K, eps, s);
    dump_input(L, lin.xb, T, lin, s);
}

inline void linear(const Linear& L, const bf16* x, float* y, int T, Linears& lin, cudaStream_t s) {
    if (by_gemv(L, T)) {
        OpScope op("gemv", s, 0, L.label);
        for (int t = 0; t < T; t++) gemv(L, x + (size_t)t * L.K, y + (size_t)t * L.N, s);
        return;
    }
    prefill_gemm(L, x, y, T, false, lin, s);
}

inline void linear_add(const Linear& L, const bf16* x, float* y, int T, Linears& lin, cudaStream_t s) {
    dump_input(L, x, T, lin, s);
    if (by_gemv(L, T)) {
        OpScope op("gemv", s, 0, L.label);
        for (int t = 0; t < T; t++) gemv_add(L, x + (size_t)t * L.K, y + (size_t)t * L.N, s, T == 1 ? plan_l2(L, lin) : L2Prefetch{});
        return;
    }
    prefill_gemm(L, x, y, T, true, lin, s);
}

inline void linear_rmsnorm(const Linear& L, const float* x, const bf16* norm_w, float eps, float* y, int T, Linears& lin,
                           cudaStream_t s) {
    dump_normed_input(L, x, norm_w, eps, T, lin, s);
    if (by_gemv(L, T)) {
        OpScope op("gemv", s, 0, L.label);
        for (int t = 0; t < T; t++) gemv_rmsnorm(L, x + (size_t)t * L.K, norm_w, eps, y + (size_t)t * L.N, s);
        return;
    }
    rmsnorm(x, norm_w, lin.xb, T, L.K, eps, s);
    prefill_gemm(L, lin.xb, y, T, false, lin, s);
}

// L holds gate_proj and up_proj interleaved by rows (2i = gate_i, 2i+1 = up_i); h is bf16 [T][N / 2].
inline void linear_rmsnorm_swiglu(const Linear& L, const float* x, const bf16* norm_w, float eps, bf16* h, int T, Linears& lin,
                                  cudaStream_t s) {
    dump_normed_input(L, x, norm_w, eps, T, lin, s);
    if (by_gemv(L, T)) {
        OpScope op("gemv", s, 0, L.label);
        for (int t = 0; t < T; t++)
            gemv_rmsnorm_swiglu(L, x + (size_t)t * L.K, norm_w, eps, h + (size_t)t * (L.N / 2), s, T == 1 ? plan_l2(L, lin) : L2Prefetch{});
        return;
    }
    rmsnorm(x, norm_w, lin.xb, T, L.K, eps, s);
    prefill_gemm(L, lin.xb, lin.f, T, false, lin, s);
    OpScope op("swiglu", s);
    swiglu_interleaved(lin.f, h, T, L.N / 2, s);
}

}  // namespace monocu
