// ops/moe.cuh — mixture-of-experts routing and the weighted sum of the chosen experts' outputs.
//
// Usage:
//   MoeRouter r{MoeScore::Sigmoid, k, /*norm_topk=*/true, /*norm_eps=*/1e-6f, /*scale=*/1.f};
//   moe_route(r, logits, bias, T, E, idx, weight, stream);  // logits float [T][E] (the router's projection),
//                                                          // bias float [E] or null; idx int [T][k], weight float [T][k]
//   moe_combine(y, weight, rows, T, k, dim, x, stream);    // x[t] += sum_j weight[t][j] y[row(t, j)]   (y float [..][dim];
//                                                          // row(t, j) = rows[t k + j], or t k + j without rows)
//   gather_rows(src, from, rows, n, dst, stream);          // dst[r] = src[from[r]] (bf16 rows of n)
//   expert_bias_rows(y, bias, expert, rows, n, stream);    // y[r] = bias[expert[r]] (float rows of n; bf16 biases)
//   moe_router_decode(r, gate, x, norm_w, eps, bias, E, forced, logits, idx, weight, counter, stream);
//                                                          // one token: the router's projection of rmsnorm(x) and the
//                                                          // routing in one launch (gate: bf16 [E][dim] + its bias)
// A layer's mixture, built from these and the expert GEMVs (ops/gemv.cuh), is runtime/moe_layer.cuh.
//
// Routing, per token, as transformers' routers do it:
//   scores  Sigmoid: s_e = sigmoid(logit_e) (LFM2, DeepSeek-V3);  Softmax: s = softmax(logits) over all experts
//           (Qwen3-MoE, Mixtral; GPT-OSS's softmax over the top k logits is the same as Softmax with norm_topk)
//   choice  the k largest s_e + bias_e (the bias, LFM2's expert_bias, steers the choice only), largest first;
//           equal scores go to the lower expert index first (what torch.topk returns for ties, as the kit's
//           greedy sampler does)
//   weights w_j = s of the chosen expert; with norm_topk, w_j / (sum of the k + norm_eps); then times scale
// One warp per token, each lane holding the scores of experts lane, lane + 32, ...: at most 256 experts, k <= 16.
#pragma once

#include "gpu/memory.cuh"
#include "gpu/pdl.cuh"
#include "gpu/mma.cuh"
#include "gpu/reduce.cuh"
#include "ops/weights.cuh"

namespace monocu {

enum class MoeScore { Sigmoid, Softmax };

struct MoeRouter {
    MoeScore score = MoeScore::Softmax;
    int k = 1;                // experts per token (num_experts_per_tok)
    bool norm_topk = false;   // renormalise the k weights (norm_topk_prob)
    float norm_eps = 0.f;     // added to their sum first (LFM2: 1e-6)
    float scale = 1.f;        // routed_scaling_factor
};

constexpr int kMoeMaxExperts = 256, kMoeMaxK = 16;

// Checking only (--force-routing): the oracle's expert choices [n][k] for positions 0 .. n - 1, taken instead of
// the router's own at those positions (pos: the tokens' positions); the weights still come from our scores.
struct MoeForced {
    const int* idx = nullptr;
    int n = 0;
    const int* pos = nullptr;
};

// One token's routing by one warp: logits l [E]; lane 0 gets the k choices and weights in idx[], weight[] (the
// other lanes' copies are not written). forced_row: the oracle's k choices for this token, or null.
__device__ __forceinline__ void moe_route_warp(const MoeRouter& r, const float* __restrict__ l, const float* __restrict__ bias, int E,
                                               const int* forced_row, int* idx, float* weight) {
    constexpr int P = kMoeMaxExperts / 32;  // experts per lane
    const int lane = threadIdx.x & 31;
    float s[P], c[P];
    float mx = -INFINITY;
#pragma unroll
    for (int p = 0; p < P; p++) {
        int e = lane + 32 * p;
        s[p] = e < E ? l[e] : -INFINITY;
        mx = fmaxf(mx, s[p]);
    }
    if (r.score == MoeScore::Softmax) {
        for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.f;
#pragma unroll
        for (int p = 0; p < P; p++) {
            s[p] = lane + 32 * p < E ? expf(s[p] - mx) : 0.f;
            sum += s[p];
        }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
        for (int p = 0; p < P; p++) s[p] /= sum;
    } else {
#pragma unroll
        for (int p = 0; p < P; p++) s[p] = 1.f / (1.f + expf(-s[p]));
    }
#pragma unroll
    for (int p = 0; p < P; p++) {
        int e = lane + 32 * p;
        c[p] = e < E ? s[p] + (bias ? bias[e] : 0.f) : -INFINITY;
    }
    float w[kMoeMaxK];
    int chosen[kMoeMaxK];
    float total = 0.f;
    if (forced_row)  // the oracle's choice for this position, with our own scores as weights
        for (int j = 0; j < r.k; j++) {
            int e = min(max(forced_row[j], 0), E - 1);
            float se = 0.f;
#pragma unroll
            for (int p = 0; p < P; p++) se = p == e / 32 ? __shfl_sync(0xffffffffu, s[p], e % 32) : se;
            chosen[j] = e, w[j] = se, total += se;
        }
    else
        for (int j = 0; j < r.k; j++) {
            // this lane's best unchosen expert (lowest index among equals), then the warp's
            float best = -INFINITY, best_s = 0.f;
            int best_e = 1 << 30;
#pragma unroll
            for (int p = 0; p < P; p++) {
                int e = lane + 32 * p;
                if (e < E && (c[p] > best || (c[p] == best && e < best_e))) best = c[p], best_e = e, best_s = s[p];
            }
            for (int o = 16; o; o >>= 1) {
                float ob = __shfl_xor_sync(0xffffffffu, best, o), os = __shfl_xor_sync(0xffffffffu, best_s, o);
                int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
                if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe, best_s = os;
            }
            if (best_e >= E) best_e = 0, best_s = 0.f;  // only NaN scores left: a valid index all the same
            chosen[j] = best_e, w[j] = best_s, total += best_s;
#pragma unroll
            for (int p = 0; p < P; p++)
                if (lane + 32 * p == best_e) c[p] = -INFINITY;  // taken (a NaN score can never be chosen twice either)
        }
    if (lane == 0)
        for (int j = 0; j < r.k; j++) {
            float v = r.norm_topk ? w[j] / (total + r.norm_eps) : w[j];
            idx[j] = chosen[j];
            weight[j] = v * r.scale;
        }
}

// The oracle's choices for token t (MoeForced), or null.
__device__ __forceinline__ const int* moe_forced_row(const MoeForced& f, int k, int t) {
    const int pos = f.idx ? f.pos[t] : -1;
    return pos >= 0 && pos < f.n ? f.idx + (size_t)pos * k : nullptr;
}

static __global__ void moe_route_kernel(MoeRouter r, const float* __restrict__ logits, const float* __restrict__ bias, int T, int E,
                                        MoeForced forced, int* __restrict__ idx, float* __restrict__ weight) {
    const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (t >= T) return;
    moe_route_warp(r, logits + (size_t)t * E, bias, E, moe_forced_row(forced, r.k, t), idx + (size_t)t * r.k, weight + (size_t)t * r.k);
}

inline void moe_route(const MoeRouter& r, const float* logits, const float* bias, int T, int E, int* idx, float* weight, cudaStream_t stream,
                      MoeForced forced = {}) {
    if (E < 1 || E > kMoeMaxExperts) die("moe: %d experts (1..%d are supported)", E, kMoeMaxExperts);
    if (r.k < 1 || r.k > kMoeMaxK || r.k > E) die("moe: %d experts per token of %d (1..%d)", r.k, E, kMoeMaxK);
    const int warps = 4;
    moe_route_kernel<<<CEIL_DIV(T, warps), warps * 32, 0, stream>>>(r, logits, bias, T, E, forced, idx, weight);
    LAUNCH_CHECK();
}

// A decode step's router in one launch: the logits of rmsnorm(x) (as a GEMV with the norm fused stages it: rounded to
// bf16) and the routing, instead of a GEMV launch and a routing launch (6-7 us each on their own: gpt-oss-20b, H200).
// One block per expert: each thread loads its chunks of the expert's row before waiting for the previous kernel
// (weights are never written), then reads the same elements of x, and two block sums give the norm and the logit;
// the block that finishes last (a counter, which it resets for the next step) routes the token from all E logits, and
// block 0 writes the normalised x (xn) for the experts' gate_up GEMV. Deterministic: fixed-order sums, one warp routes. (A first version with a warp per row and 8 rows per block
// streamed each row in ~11 dependent steps and measured 18 us: slower than the two launches.)
constexpr int kRouterThreads = 256;
constexpr int kRouterChunks = 4;  // 8-element chunks per thread: dim <= 8192; wider models take the two launches

static __global__ void __launch_bounds__(kRouterThreads)
    moe_router_decode_kernel(MoeRouter r, Linear gate, const float* __restrict__ x, const bf16* __restrict__ norm_w, float eps,
                             const float* __restrict__ bias, int E, MoeForced forced, float* __restrict__ logits, int* __restrict__ idx,
                             float* __restrict__ weight, unsigned* __restrict__ counter, bf16* __restrict__ xn) {
    __shared__ float ls[kMoeMaxExperts];
    __shared__ bool last;
    const int dim = gate.K, chunks = dim / 8, e = blockIdx.x, tid = threadIdx.x;
    const uint4* w = reinterpret_cast<const uint4*>(static_cast<const bf16*>(gate.w) + (size_t)e * dim);
    uint4 wv[kRouterChunks];
#pragma unroll
    for (int j = 0; j < kRouterChunks; j++)
        if (tid + j * kRouterThreads < chunks) wv[j] = __ldcs(w + tid + j * kRouterThreads);
    pdl_launch_dependents();
    pdl_wait();  // x was just written
    float xv[kRouterChunks][8], ss = 0.f;
#pragma unroll
    for (int j = 0; j < kRouterChunks; j++) {
        const int c = tid + j * kRouterThreads;
        if (c >= chunks) continue;
        float4 a = *reinterpret_cast<const float4*>(x + 8 * c), b = *reinterpret_cast<const float4*>(x + 8 * c + 4);
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int k = 0; k < 8; k++) xv[j][k] = v[k], ss += v[k] * v[k];
    }
    const float inv = rsqrtf(block_sum(ss) / dim + eps);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kRouterChunks; j++) {
        const int c = tid + j * kRouterThreads;
        if (c >= chunks) continue;
        float nw[8];
        bf16x8_to_float(*reinterpret_cast<const uint4*>(norm_w + 8 * c), nw);
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&wv[j]);
        uint32_t n2[4];  // rmsnorm(x) in bf16, as the experts' GEMV multiplies it
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(p[k]);
            n2[k] = pack_bf16x2(xv[j][2 * k] * inv * nw[2 * k], xv[j][2 * k + 1] * inv * nw[2 * k + 1]);
            float2 n = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&n2[k]));
            acc = fmaf(f.x, n.x, acc);
            acc = fmaf(f.y, n.y, acc);
        }
        if (xn && e == 0) *reinterpret_cast<uint4*>(xn + 8 * c) = make_uint4(n2[0], n2[1], n2[2], n2[3]);
    }
    acc = block_sum(acc);
    if (tid == 0) {
        logits[e] = acc + (gate.bias ? __bfloat162float(static_cast<const bf16*>(gate.bias)[e]) : 0.f);
        __threadfence();  // the logit reaches the last block
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last || tid >= 32) return;
    __threadfence();
    for (int j = tid; j < E; j += 32) ls[j] = __ldcg(logits + j);  // past L1: other blocks wrote them
    __syncwarp();
    moe_route_warp(r, ls, bias, E, moe_forced_row(forced, r.k, 0), idx, weight);
    if (tid == 0) *counter = 0;
}

// Whether moe_router_decode takes this router (bf16, x fits in shared memory).
inline bool moe_router_decode_fits(const Linear& gate) {
    return gate.fmt == WFormat::BF16 && gate.K <= 8 * kRouterThreads * kRouterChunks && gate.K % 8 == 0;
}

// counter: a device word, zero before the first launch (each launch leaves it zero).
// xn: if not null, rmsnorm(x) in bf16 [dim] is written there too (the experts' gate_up GEMV then stages it as is).
inline void moe_router_decode(const MoeRouter& r, const Linear& gate, const float* x, const bf16* norm_w, float eps, const float* bias, int E,
                              const MoeForced& forced, float* logits, int* idx, float* weight, unsigned* counter, cudaStream_t stream,
                              bf16* xn = nullptr) {
    if (!moe_router_decode_fits(gate))
        die("moe: the fused decode router needs a bf16 router of at most %d inputs (a multiple of 8)", 8 * kRouterThreads * kRouterChunks);
    if (E < 1 || E > kMoeMaxExperts || gate.N != E) die("moe: %d experts (1..%d are supported)", E, kMoeMaxExperts);
    if (r.k < 1 || r.k > kMoeMaxK || r.k > E) die("moe: %d experts per token of %d (1..%d)", r.k, E, kMoeMaxK);
    launch(moe_router_decode_kernel, dim3(E), dim3(kRouterThreads), 0, stream, r, gate, x, norm_w, eps, bias, E, forced, logits, idx, weight,
           counter, xn);
}

static __global__ void moe_combine_kernel(const float* __restrict__ y, const float* __restrict__ weight, const int* __restrict__ rows,
                                          int T, int k, int dim, float* __restrict__ x) {
    pdl_launch_dependents();  // the next layer's first GEMV may start fetching its weights
    pdl_wait();               // the experts' outputs were just written
    const size_t n = (size_t)T * dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / dim, d = i % dim;
        float acc = 0.f;
        for (int j = 0; j < k; j++) {  // a fixed order: deterministic
            size_t r = rows ? (size_t)rows[t * k + j] : t * k + j;
            acc += weight[t * k + j] * y[r * dim + d];
        }
        x[i] += acc;
    }
}

inline void moe_combine(const float* y, const float* weight, const int* rows, int T, int k, int dim, float* x, cudaStream_t stream) {
    size_t n = (size_t)T * dim;
    int grid = (int)std::min<size_t>(CEIL_DIV(n, 256), 4096);
    launch(moe_combine_kernel, dim3(grid), dim3(256), 0, stream, y, weight, rows, T, k, dim, x);
}

// y[r][c] = bias[expert[r]][c]: each gathered row's expert bias at once (bias: device [E] pointers to bf16 [n]), so that
// the experts' GEMMs then accumulate onto it; one launch for a layer's rows instead of one per expert.
static __global__ void expert_bias_rows_kernel(float* __restrict__ y, const void* const* __restrict__ bias, const int* __restrict__ expert,
                                               int rows, int n) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {  // (a row per block: no division per element)
        const bf16* b = static_cast<const bf16*>(bias[expert[r]]);  // (null: an expert without one)
        float* yr = y + (size_t)r * n;
        for (int c = threadIdx.x; c < n; c += blockDim.x) yr[c] = b ? __bfloat162float(b[c]) : 0.f;
    }
}
inline void expert_bias_rows(float* y, const void* const* bias, const int* expert, int rows, int n, cudaStream_t stream) {
    launch(expert_bias_rows_kernel, dim3((unsigned)std::min(rows, 8192)), dim3(256), 0, stream, y, bias, expert, rows, n);
}

// dst[r] = src[from[r]], rows of n bf16 (the prefill's rows in expert order).
static __global__ void gather_rows_kernel(const bf16* __restrict__ src, const int* __restrict__ from, int rows, int n, bf16* __restrict__ dst) {
    const size_t total = (size_t)rows * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[(size_t)from[i / n] * n + i % n];
}

inline void gather_rows(const bf16* src, const int* from, int rows, int n, bf16* dst, cudaStream_t stream) {
    size_t total = (size_t)rows * n;
    gather_rows_kernel<<<(unsigned)std::min<size_t>(CEIL_DIV(total, 256), 4096), 256, 0, stream>>>(src, from, rows, n, dst);
    LAUNCH_CHECK();
}

}  // namespace monocu
