// ops/h2o.cuh — KV-cache eviction by accumulated attention: H2O (Zhang et al., "H2O: Heavy-Hitter Oracle for
// Efficient Generative Inference of Large Language Models", 2023). Off unless --kv-budget is given.
//
// Usage (runtime/attention_layer.cuh does this; engines see nothing of it):
//   H2o h = h2o_create(KvEviction{budget, window}, layers, slots, n_heads, n_kv, rows, max_tokens, mem);
//   attention with AttnParams kv_budget = budget, h2o_scores = h.scores, h2o_stats = h.stats, then
//   h2o_after_decode(h, layer, slot, kv_type, kv, rows, d_pos, stream);                  // a decode step
//   h2o_after_prefill(h, layer, slot, q, keys_type, keys, keys_stride, kv_type, kv, rows, d_pos, pos0, T, stream);
//     q      fp16 [T][n_heads][head_dim], the pass's queries as the prefill attention took them
//     keys   where that attention read its keys: the cache, or the chunk's fp16 copy (attention_layer.cuh)
//
// What it keeps. Each KV head of each attention layer holds at most `budget` tokens between passes: the `window`
// newest, and of the older ones those with the most attention accumulated so far (summed over every query that
// has attended to them and over the query heads that share the KV head). A pass writes its T new rows after
// those, attends, adds its queries' attention to every row's sum, then evicts back to `budget`: the rows out of
// the window with the least sum go first (ties: the lower row). A decode step so evicts one older token.
//
// Where rows live. The cache has budget + max_tokens rows per head. Eviction fills each evicted row below
// `budget` with a kept row from above it, so before a pass whose first token is at position p the rows in use
// are exactly 0 .. min(p, budget) - 1 (kv_row, attn_params.cuh), in no particular order: decode attends to all
// of them, and a prefill pass's causal mask concerns only its own rows, which come after them. Each row's
// position (row_pos) is kept for the window rule; its key carries its RoPE already.
//
// What it costs. Decode: the split kernel stores each key's score (4 bytes per key and query head beside the
// 2 head_dim bytes or more of K and V it reads), the merge each head's softmax (max, sum), and one launch per
// layer turns them into probabilities, adds them to the rows' sums and moves the evicted row (a minimum over
// the rows). Prefill: the probabilities of the pass's queries over its keys are computed again
// (h2o_prefill_accumulate: as many dot products as the attention's Q K^T, on CUDA cores), then the pass's
// extra rows are selected (a radix select) and moved.
#pragma once

#include "ops/attention.cuh"

namespace monocu {

struct KvEviction {
    int budget = 0;  // tokens each head keeps between passes (0: no eviction)
    int window = 0;  // of which the newest `window` always
};

struct H2o {
    int budget = 0, window = 0;
    int layers = 0, slots = 1, n_heads = 0, n_kv = 0, rows = 0, max_tokens = 0;
    float* acc = nullptr;     // [layers][slots][n_kv][rows] each row's accumulated attention
    int* row_pos = nullptr;   // [layers][slots][n_kv][rows] each row's position
    float* scores = nullptr;  // [n_heads][rows] a decode step's scores (log2 units), written by the split kernel
    float2* stats = nullptr;  // [max_tokens][n_heads] each query's softmax (max, sum)
    int* pairs = nullptr;     // [n_kv][2][max_tokens] the rows an eviction empties and the rows that fill them
    __host__ __device__ bool on() const { return budget > 0; }
    __host__ __device__ size_t head(int layer, int slot, int kvh) const { return (((size_t)layer * slots + slot) * n_kv + kvh) * rows; }
};

inline H2o h2o_create(const KvEviction& ev, int layers, int slots, int n_heads, int n_kv, int rows, int max_tokens, GpuMemory& mem) {
    if (ev.budget < 1 || ev.window < 1 || ev.window > ev.budget)
        die("h2o: budget %d and window %d (need 1 <= window <= budget)", ev.budget, ev.window);
    if (rows < ev.budget + 1 || n_heads % n_kv != 0 || n_heads / n_kv > 8) die("h2o: %d rows for a budget of %d, %d/%d heads", rows, ev.budget, n_heads, n_kv);
    H2o h;
    h.budget = ev.budget, h.window = ev.window, h.layers = layers, h.slots = slots, h.n_heads = n_heads, h.n_kv = n_kv, h.rows = rows;
    h.max_tokens = max_tokens;
    size_t cells = (size_t)layers * slots * n_kv * rows;
    h.acc = mem.alloc<float>(cells, "kv cache");
    h.row_pos = mem.alloc<int>(cells, "kv cache");
    h.scores = mem.alloc<float>((size_t)n_heads * rows, "workspace");
    h.stats = mem.alloc<float2>((size_t)max_tokens * n_heads, "workspace");
    h.pairs = mem.alloc<int>((size_t)n_kv * 2 * max_tokens, "workspace");
    return h;
}

constexpr int kH2oThreads = 256;

// Eviction order of a row: by accumulated attention, least first, ties to the lower row (the row in the low
// bits makes every key distinct); rows in the window (position past last_eligible) never (all ones).
__device__ __forceinline__ unsigned long long h2o_key(float acc, int pos, int last_eligible, int row) {
    if (pos > last_eligible) return ~0ull;
    unsigned u = __float_as_uint(acc);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // float order as unsigned order
    return ((unsigned long long)u << 32) | (unsigned)row;
}

// Block-wide: how many threads before this one have `flag`, and (total) how many in the block.
__device__ __forceinline__ int h2o_block_rank(bool flag, int* warp_counts, int& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned bal = __ballot_sync(0xffffffffu, flag);
    if (lane == 0) warp_counts[warp] = __popc(bal);
    __syncthreads();
    int before = 0;
    total = 0;
    for (int w = 0; w < kH2oThreads / 32; w++) {
        before += w < warp ? warp_counts[w] : 0;
        total += warp_counts[w];
    }
    __syncthreads();  // warp_counts is reused by the next call
    return before + __popc(bal & ((1u << lane) - 1));
}

// The e-th smallest key (1-based) of rows 0 .. n-1: for e = 1 a minimum, else a radix select, 8 bits a pass.
template <class Key>
__device__ unsigned long long h2o_select(Key key, int n, int e) {
    __shared__ unsigned long long s_min[kH2oThreads / 32];
    __shared__ unsigned hist[256];
    __shared__ int s_digit, s_left;
    const int tid = threadIdx.x;
    if (e == 1) {
        unsigned long long m = ~0ull;
        for (int r = tid; r < n; r += kH2oThreads) m = min(m, key(r));
        for (int o = 16; o > 0; o >>= 1) m = min(m, __shfl_xor_sync(0xffffffffu, m, o));
        if ((tid & 31) == 0) s_min[tid >> 5] = m;
        __syncthreads();
        m = s_min[0];
        for (int w = 1; w < kH2oThreads / 32; w++) m = min(m, s_min[w]);
        __syncthreads();
        return m;
    }
    unsigned long long prefix = 0;
    int left = e;  // rank wanted among the keys that share `prefix`
    for (int shift = 56; shift >= 0; shift -= 8) {
        const unsigned long long high = shift == 56 ? 0ull : ~0ull << (shift + 8);
        for (int i = tid; i < 256; i += kH2oThreads) hist[i] = 0;
        __syncthreads();
        for (int r = tid; r < n; r += kH2oThreads) {
            unsigned long long k = key(r);
            if ((k & high) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int below = 0, d = 0;
            while (d < 255 && below + (int)hist[d] < left) below += hist[d++];
            s_digit = d, s_left = left - below;
        }
        __syncthreads();
        prefix |= (unsigned long long)s_digit << shift;
        left = s_left;
        __syncthreads();
    }
    return prefix;
}

// One block per KV head. Decode (scores given): first adds the step's probabilities to every row's sum (the new
// row's starts at 0) and records the new row's position. Then, past the budget, evicts the n - budget rows of
// least eviction key and moves the kept rows above the budget into the emptied rows below it (K, V, FP8
// scales, sum and position).
static __global__ void __launch_bounds__(kH2oThreads)
    h2o_evict_kernel(H2o h, int layer, int slot, KvLayer kv, int row_bytes, int kv_rows, const int* __restrict__ d_pos, int T, bool decode) {
    __shared__ int warp_counts[kH2oThreads / 32];
    const int kvh = blockIdx.x, G = h.n_heads / h.n_kv, tid = threadIdx.x;
    const int p0 = *d_pos, row0 = kv_row(h.budget, p0), n = row0 + T, last = p0 + T - 1;
    float* acc = h.acc + h.head(layer, slot, kvh);
    int* rpos = h.row_pos + h.head(layer, slot, kvh);
    if (decode) {
        float2 st[8];
        for (int g = 0; g < G; g++) st[g] = h.stats[kvh * G + g];
        for (int r = tid; r < n; r += kH2oThreads) {
            float a = r == row0 ? 0.f : acc[r];
            for (int g = 0; g < G; g++) a += exp2f(h.scores[(size_t)(kvh * G + g) * kv_rows + r] - st[g].x) / st[g].y;
            acc[r] = a;
            if (r == row0) rpos[r] = p0;
        }
        __syncthreads();
    }
    if (n <= h.budget) return;
    const int last_eligible = last - h.window;
    auto key = [&](int r) { return h2o_key(acc[r], rpos[r], last_eligible, r); };
    const unsigned long long kth = h2o_select(key, n, n - h.budget);  // victims: key <= kth
    int* holes = h.pairs + (size_t)kvh * 2 * h.max_tokens;
    int* fillers = holes + h.max_tokens;
    int n_holes = 0, n_fill = 0, total;
    for (int base = 0; base < h.budget; base += kH2oThreads) {
        int r = base + tid;
        bool f = r < h.budget && key(r) <= kth;
        int i = h2o_block_rank(f, warp_counts, total);
        if (f) holes[n_holes + i] = r;
        n_holes += total;
    }
    for (int base = h.budget; base < n; base += kH2oThreads) {
        int r = base + tid;
        bool f = r < n && key(r) > kth;
        int i = h2o_block_rank(f, warp_counts, total);
        if (f) fillers[n_fill + i] = r;
        n_fill += total;
    }
    __syncthreads();  // the lists, and every key read, before any row moves
    const int chunks = row_bytes / 16;
    for (int i = tid; i < n_holes * 2 * chunks; i += kH2oThreads) {
        int pair = i / (2 * chunks), c = i % (2 * chunks), which = c / chunks, cc = c % chunks;
        uint8_t* base = static_cast<uint8_t*>(which ? kv.v : kv.k) + (size_t)kvh * kv_rows * row_bytes;
        *reinterpret_cast<uint4*>(base + (size_t)holes[pair] * row_bytes + cc * 16) =
            *reinterpret_cast<const uint4*>(base + (size_t)fillers[pair] * row_bytes + cc * 16);
    }
    for (int i = tid; i < n_holes; i += kH2oThreads) {
        int to = holes[i], from = fillers[i];
        acc[to] = acc[from], rpos[to] = rpos[from];
        if (kv.k_scale) {
            size_t at = (size_t)kvh * kv_rows;
            kv.k_scale[at + to] = kv.k_scale[at + from], kv.v_scale[at + to] = kv.v_scale[at + from];
        }
    }
}

// Grid (key tiles of 32, KV heads), 8 warps. Each lane owns one key row; the warps take the pass's queries in
// turn (the G heads of each), compute q.k in fp32 over the key tile in shared memory, and sum the probability
// 2^(s - max) / sum where the query sees the key (rows before the pass, and the pass's own up to the query's).
// The new rows' sums start at 0 and their positions are recorded.
template <int HD, KvType KV>
__global__ void __launch_bounds__(256)
    h2o_prefill_accumulate_kernel(H2o h, int layer, int slot, const __half* __restrict__ q, KvLayer keys, int key_stride,
                                  const int* __restrict__ d_pos, int T, float scale_log2) {
    constexpr int kKeys = 32, kWarps = 8, LD = HD + 1;  // padded rows: lane r reads row r, column d, conflict-free
    __shared__ float ks[kKeys][LD];
    __shared__ float qs[kWarps][HD];
    __shared__ float part[kWarps][kKeys];
    const int kvh = blockIdx.y, G = h.n_heads / h.n_kv, nh = h.n_heads, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int p0 = *d_pos, row0 = kv_row(h.budget, p0), n = row0 + T, r0 = blockIdx.x * kKeys;
    if (r0 >= n) return;
    for (int c = tid; c < kKeys * HD / 8; c += 256) {
        int r = c / (HD / 8), col = (c % (HD / 8)) * 8;
        float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r0 + r < n) {
            uint4 raw = kv_chunk_16<KV>(keys.k, keys.k_scale, (size_t)kvh * key_stride + r0 + r, HD, col);
            const uint32_t* w = reinterpret_cast<const uint32_t*>(&raw);
            for (int k = 0; k < 4; k++) {
                float2 x;
                if constexpr (KV == KvType::BF16) x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]));
                else x = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
                f[2 * k] = x.x, f[2 * k + 1] = x.y;
            }
        }
        for (int k = 0; k < 8; k++) ks[r][col + k] = f[k];
    }
    __syncthreads();
    const int r = r0 + lane;
    float sum = 0.f;
    for (int t = max(0, r0 - row0) + warp; t < T; t += kWarps) {  // earlier queries see none of these keys
        for (int g = 0; g < G; g++) {
            const int hq = kvh * G + g;
            for (int d = lane; d < HD; d += 32) qs[warp][d] = __half2float(q[((size_t)t * nh + hq) * HD + d]);
            __syncwarp();
            float dot = 0.f;
#pragma unroll 16
            for (int d = 0; d < HD; d++) dot = fmaf(qs[warp][d], ks[lane][d], dot);
            __syncwarp();
            float2 st = h.stats[(size_t)t * nh + hq];
            if (r < n && r <= row0 + t) sum += exp2f(dot * scale_log2 - st.x) / st.y;
        }
    }
    part[warp][lane] = sum;
    __syncthreads();
    if (warp == 0 && r < n) {
        float total = 0.f;
        for (int w = 0; w < kWarps; w++) total += part[w][lane];
        float* acc = h.acc + h.head(layer, slot, kvh);
        int* rpos = h.row_pos + h.head(layer, slot, kvh);
        acc[r] = (r >= row0 ? 0.f : acc[r]) + total;
        if (r >= row0) rpos[r] = p0 + (r - row0);
    }
}

inline void h2o_after_decode(const H2o& h, int layer, int slot, KvType kv_type, const KvLayer& kv, int head_dim, int kv_rows,
                             const int* d_pos, cudaStream_t st) {
    int row_bytes = head_dim * (kv_type == KvType::FP8 ? 1 : 2);
    h2o_evict_kernel<<<h.n_kv, kH2oThreads, 0, st>>>(h, layer, slot, kv, row_bytes, kv_rows, d_pos, 1, true);
    LAUNCH_CHECK();
}

template <int HD>
inline void h2o_prefill_accumulate_launch(const H2o& h, int layer, int slot, const __half* q, KvType keys_type, const KvLayer& keys,
                                          int key_stride, const int* d_pos, int n, int T, cudaStream_t st) {
    dim3 grid(CEIL_DIV(n, 32), h.n_kv);
    float scale_log2 = 1.4426950408889634f / sqrtf((float)HD);
    switch (keys_type) {
        case KvType::BF16: h2o_prefill_accumulate_kernel<HD, KvType::BF16><<<grid, 256, 0, st>>>(h, layer, slot, q, keys, key_stride, d_pos, T, scale_log2); break;
        case KvType::FP8: h2o_prefill_accumulate_kernel<HD, KvType::FP8><<<grid, 256, 0, st>>>(h, layer, slot, q, keys, key_stride, d_pos, T, scale_log2); break;
        case KvType::F16: h2o_prefill_accumulate_kernel<HD, KvType::F16><<<grid, 256, 0, st>>>(h, layer, slot, q, keys, key_stride, d_pos, T, scale_log2); break;
    }
    LAUNCH_CHECK();
}

// pos0: the pass's first position (the host knows it for a prefill pass), for the grid's size.
inline void h2o_after_prefill(const H2o& h, int layer, int slot, const __half* q, KvType keys_type, const KvLayer& keys, int key_stride,
                              KvType kv_type, const KvLayer& kv, int head_dim, int kv_rows, const int* d_pos, int pos0, int T, cudaStream_t st) {
    if (T > h.max_tokens) die("h2o: a pass of %d tokens is larger than the %d planned", T, h.max_tokens);
    int n = kv_row(h.budget, pos0) + T;
    if (head_dim == 64) h2o_prefill_accumulate_launch<64>(h, layer, slot, q, keys_type, keys, key_stride, d_pos, n, T, st);
    else if (head_dim == 128) h2o_prefill_accumulate_launch<128>(h, layer, slot, q, keys_type, keys, key_stride, d_pos, n, T, st);
    else die("h2o: head_dim %d is not supported (64, 128)", head_dim);
    int row_bytes = head_dim * (kv_type == KvType::FP8 ? 1 : 2);
    h2o_evict_kernel<<<h.n_kv, kH2oThreads, 0, st>>>(h, layer, slot, kv, row_bytes, kv_rows, d_pos, T, false);
    LAUNCH_CHECK();
}

}  // namespace monocu
