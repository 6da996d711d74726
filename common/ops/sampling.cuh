// ops/sampling.cuh — the next token, chosen on the GPU: greedy argmax, or temperature / top-k / top-p /
// min-p sampling with transformers' repetition penalty, seeded and reproducible.
//
// Usage:
//   Sampler s = sampler_create(vocab, mem);
//   sampler_mark_seen(s, d_prompt_ids, n, stream);    // the prompt counts for the repetition penalty
//   sample(s, params, d_logits, stream);              // writes *s.d_token, marks it seen, advances the RNG
// Everything stays on the device (CUDA-graph friendly): the only host traffic per token is reading
// *s.d_token.
//
// Semantics, in transformers' order (generation/logits_process.py):
//   1. repetition penalty over every token seen so far: logit > 0 ? logit / p : logit * p; then OpenAI's presence and
//      frequency penalties over the generated tokens (as vLLM applies them): logit - presence - frequency x count
//   2. temperature: logit / T (T == 0 means greedy: argmax, lowest index on ties, as torch.argmax)
//   3. top-k: keep the k largest (exactly k; transformers also keeps ties with the k-th value)
//   4. top-p: keep the shortest prefix, in descending probability, whose mass reaches p (a token is kept
//      when the mass strictly before it is < p), probabilities taken over the top-k survivors
//   5. min-p: keep tokens whose probability is >= min_p x the top probability
// then draw from the survivors, renormalised. The draw uses a counter-based RNG: splitmix64 of
// (seed, step), so a seed reproduces a run exactly and no RNG state lives on the host.
// Cost: a full radix sort of the vocabulary (cub) per sampled token, ~tens of microseconds at 152k.
// Many sequences (BatchSampler): each its own seen tokens and RNG counter; greedy rows in one launch (argmax_rows),
// the others through sample() one row at a time (batch_sampler_row).
#pragma once

#include <algorithm>

#include <cub/cub.cuh>

#include "gpu/memory.cuh"
#include "gpu/pdl.cuh"
#include "gpu/reduce.cuh"
#include "host/sampling_params.h"

namespace monocu {

struct Sampler {
    int vocab = 0;
    float* work = nullptr;           // [vocab] processed logits
    float* sorted = nullptr;         // [vocab] processed logits, descending
    int* ids = nullptr;              // [vocab] 0..vocab-1
    int* sorted_ids = nullptr;       // [vocab]
    float* cum = nullptr;            // [vocab] running sum of 2^(sorted - max) in sorted order
    unsigned char* seen = nullptr;   // [vocab] 0: not seen; 1: in the prompt only; 1 + k: generated k times (k <= 254)
    float2* partial = nullptr;       // [kArgmaxBlocks] (value, index) per argmax block
    void* cub_temp = nullptr;
    size_t cub_temp_bytes = 0;
    int* d_token = nullptr;          // the chosen token
    int* d_kept = nullptr;           // how many tokens survived the filters (for tests)
    unsigned long long* d_step = nullptr;  // RNG counter
};

constexpr int kArgmaxBlocks = 64, kArgmaxThreads = 1024, kPickThreads = 1024;
constexpr int kArgmaxRowSplits = 32;  // the most pieces argmax_rows cuts a row into

static __global__ void iota_kernel(int* ids, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) ids[i] = i;
}
static __global__ void mark_seen_kernel(const int* ids, int n, unsigned char* seen, int vocab) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (ids[i] >= 0 && ids[i] < vocab && seen[ids[i]] == 0) seen[ids[i]] = 1;  // (a generated token keeps its count)
}
// A generated token: one more in its count (the prompt's mark becomes a count of 1).
__device__ __forceinline__ void seen_generated(unsigned char* seen, int token) {
    unsigned c = seen[token];
    seen[token] = (unsigned char)min(255u, max(c, 1u) + 1u);
}
static __global__ void reset_sampler_kernel(unsigned char* seen, int vocab, unsigned long long* step) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) seen[i] = 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) *step = 0;
}

inline Sampler sampler_create(int vocab, GpuMemory& mem, cudaStream_t stream) {
    Sampler s;
    s.vocab = vocab;
    s.work = mem.alloc<float>(vocab, "workspace");
    s.sorted = mem.alloc<float>(vocab, "workspace");
    s.ids = mem.alloc<int>(vocab, "workspace");
    s.sorted_ids = mem.alloc<int>(vocab, "workspace");
    s.cum = mem.alloc<float>(vocab, "workspace");
    s.seen = mem.alloc<unsigned char>(vocab, "workspace");
    s.partial = mem.alloc<float2>(kArgmaxBlocks, "workspace");
    s.d_token = mem.alloc<int>(1, "workspace");
    s.d_kept = mem.alloc<int>(1, "workspace");
    s.d_step = mem.alloc<unsigned long long>(1, "workspace");
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, s.cub_temp_bytes, s.work, s.sorted, s.ids, s.sorted_ids, vocab));
    s.cub_temp = mem.alloc<unsigned char>(s.cub_temp_bytes, "workspace");
    iota_kernel<<<CEIL_DIV(vocab, 256), 256, 0, stream>>>(s.ids, vocab);
    LAUNCH_CHECK();
    reset_sampler_kernel<<<CEIL_DIV(vocab, 256), 256, 0, stream>>>(s.seen, vocab, s.d_step);
    LAUNCH_CHECK();
    return s;
}

// Forget the seen tokens and restart the RNG counter (a new generation).
inline void sampler_reset(Sampler& s, cudaStream_t stream) {
    reset_sampler_kernel<<<CEIL_DIV(s.vocab, 256), 256, 0, stream>>>(s.seen, s.vocab, s.d_step);
    LAUNCH_CHECK();
}

// Forget the seen tokens only (a new prompt in the same generation: the RNG counter goes on).
static __global__ void clear_seen_kernel(unsigned char* seen, int vocab) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) seen[i] = 0;
}
inline void sampler_clear_seen(Sampler& s, cudaStream_t stream) {
    clear_seen_kernel<<<CEIL_DIV(s.vocab, 256), 256, 0, stream>>>(s.seen, s.vocab);
    LAUNCH_CHECK();
}

inline void sampler_mark_seen(Sampler& s, const int* d_ids, int n, cudaStream_t stream) {
    if (n <= 0) return;
    mark_seen_kernel<<<CEIL_DIV(n, 256), 256, 0, stream>>>(d_ids, n, s.seen, s.vocab);
    LAUNCH_CHECK();
}

// ---- greedy ----

// Larger value wins; on equal values the lower index wins (torch.argmax returns the first maximum).
__device__ __forceinline__ void argmax_merge(float& v, int& i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i) || (v != v && v2 == v2)) v = v2, i = i2;
}

__device__ __forceinline__ void block_argmax(float& v, int& i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    for (int o = 16; o > 0; o >>= 1) argmax_merge(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sv[lane] : -INFINITY;
        i = lane < (int)(blockDim.x >> 5) ? si[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) argmax_merge(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    }
}

static __global__ void argmax_partial_kernel(const float* __restrict__ x, int n, float2* __restrict__ partial) {
    pdl_launch_dependents();
    pdl_wait();
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) argmax_merge(v, idx, x[i], i);
    block_argmax(v, idx);
    if (threadIdx.x == 0) partial[blockIdx.x] = make_float2(v, __int_as_float(idx));
}

static __global__ void argmax_final_kernel(const float2* __restrict__ partial, int* token, unsigned char* seen, int* kept) {
    pdl_launch_dependents();
    pdl_wait();
    float v = -INFINITY;
    int idx = 0x7fffffff;
    if (threadIdx.x < kArgmaxBlocks) v = partial[threadIdx.x].x, idx = __float_as_int(partial[threadIdx.x].y);
    block_argmax(v, idx);
    if (threadIdx.x == 0) {
        *token = idx;
        seen_generated(seen, idx);
        *kept = 1;
    }
}

// ---- sampling ----

static __global__ void penalty_temperature_kernel(const float* __restrict__ logits, const unsigned char* __restrict__ seen,
                                                  float penalty, float presence, float frequency, float inv_temp,
                                                  float* __restrict__ out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float l = logits[i];
        const int c = seen[i];
        if (penalty != 1.f && c) l = l > 0.f ? l / penalty : l * penalty;
        if (c > 1) l -= presence + frequency * (float)(c - 1);
        out[i] = l * inv_temp;
    }
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// First index in cum[0, n) whose value is >= target (n if none).
__device__ __forceinline__ int lower_bound(const float* cum, int n, float target) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (cum[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// One block: running sums over the sorted survivors, the three cut-offs, then the draw.
static __global__ void __launch_bounds__(kPickThreads)
    sample_pick_kernel(const float* __restrict__ sorted, const int* __restrict__ sorted_ids, float* __restrict__ cum, int vocab,
                       int top_k, float top_p, float min_p, uint64_t seed, unsigned long long* step, int* token,
                       unsigned char* seen, int* kept) {
    __shared__ float warp_tot[32];
    __shared__ float carry;
    __shared__ int n_minp;
    const int K = top_k > 0 ? min(top_k, vocab) : vocab;
    const float mx = sorted[0];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) carry = 0.f, n_minp = K;
    __syncthreads();
    // Inclusive scan of p_i = e^(s_i - max) over the top-k survivors, 1024 at a time; the first p_i below
    // min_p (relative to the top token, whose p is 1) ends the min-p survivors.
    for (int base = 0; base < K; base += kPickThreads) {
        int i = base + threadIdx.x;
        float p = i < K ? __expf(sorted[i] - mx) : 0.f;
        if (i < K && p < min_p) atomicMin(&n_minp, i);
        float x = p;
        for (int o = 1; o < 32; o <<= 1) {
            float y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        if (lane == 31) warp_tot[warp] = x;
        __syncthreads();
        if (warp == 0) {
            float w = warp_tot[lane];
            for (int o = 1; o < 32; o <<= 1) {
                float y = __shfl_up_sync(0xffffffffu, w, o);
                if (lane >= o) w += y;
            }
            warp_tot[lane] = w;
        }
        __syncthreads();
        float before = carry + (warp > 0 ? warp_tot[warp - 1] : 0.f);
        if (i < K) cum[i] = before + x;
        __syncthreads();
        if (threadIdx.x == 0) carry += warp_tot[31];
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    float Z = cum[K - 1];
    // top-p: token r survives when the mass before it is < top_p, i.e. r <= first index whose cum >= top_p Z.
    int n_topp = top_p >= 1.f ? K : min(K, lower_bound(cum, K, top_p * Z) + 1);
    int n = max(1, min(K, min(n_topp, n_minp)));
    uint64_t r = splitmix64(seed ^ splitmix64(*step));
    float u = (float)(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    int pick = min(n - 1, lower_bound(cum, n, u * cum[n - 1]));  // first token whose running sum reaches u S
    *token = sorted_ids[pick];
    seen_generated(seen, *token);
    *kept = n;
    *step += 1;
}

inline void sample(Sampler& s, const SamplingParams& p, const float* logits, cudaStream_t stream) {
    if (p.temperature <= 0.f) {
        const float* src = logits;
        if (p.penalised()) {
            penalty_temperature_kernel<<<CEIL_DIV(s.vocab, 256), 256, 0, stream>>>(logits, s.seen, p.repetition_penalty, p.presence_penalty,
                                                                                  p.frequency_penalty, 1.f, s.work, s.vocab);
            LAUNCH_CHECK();
            src = s.work;
        }
        launch(argmax_partial_kernel, kArgmaxBlocks, kArgmaxThreads, 0, stream, src, s.vocab, s.partial);
        launch(argmax_final_kernel, 1, kArgmaxThreads, 0, stream, s.partial, s.d_token, s.seen, s.d_kept);
        return;
    }
    penalty_temperature_kernel<<<CEIL_DIV(s.vocab, 256), 256, 0, stream>>>(logits, s.seen, p.repetition_penalty, p.presence_penalty,
                                                                          p.frequency_penalty, 1.f / p.temperature, s.work, s.vocab);
    LAUNCH_CHECK();
    size_t bytes = s.cub_temp_bytes;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(s.cub_temp, bytes, s.work, s.sorted, s.ids, s.sorted_ids, s.vocab, 0,
                                                         32, stream));
    sample_pick_kernel<<<1, kPickThreads, 0, stream>>>(s.sorted, s.sorted_ids, s.cum, s.vocab, p.top_k, p.top_p, p.min_p,
                                                       p.seed, s.d_step, s.d_token, s.seen, s.d_kept);
    LAUNCH_CHECK();
}

// ---- many sequences (the batched core) ----

// Each sequence's own sampling state (its seen tokens and RNG counter), one row per slot, and the tokens of a pass.
// The sort scratch of a Sampler is shared: rows that sample (or penalise repetition) run sample() one after another
// with that sequence's state; greedy rows without a penalty all take one launch (argmax_rows).
struct BatchSampler {
    Sampler scratch;                   // the buffers sample() sorts in; its seen / step / token are redirected per row
    int vocab = 0, slots = 0, rows = 0;
    unsigned char* seen = nullptr;     // [slots][vocab]
    unsigned long long* steps = nullptr;  // [slots] draws made so far
    int* tokens = nullptr;             // [rows] the pass's sampled tokens
    int* kept = nullptr;               // [rows]
    float* gaps = nullptr;             // [rows] greedy rows: top-1 minus top-2 logit (how near a tie the choice was), right
                                       // after tokens
    float4* partial = nullptr;         // [rows][kArgmaxRowSplits] argmax_rows' pieces of a row: (best, index, runner-up)
    int sms = 1;                       // the device's SMs (argmax_rows fills them)
};

inline BatchSampler batch_sampler_create(int vocab, int slots, int rows, GpuMemory& mem, cudaStream_t stream) {
    BatchSampler b;
    b.scratch = sampler_create(vocab, mem, stream);
    b.vocab = vocab, b.slots = slots, b.rows = rows;
    b.seen = mem.alloc<unsigned char>((size_t)slots * vocab, "workspace");
    b.steps = mem.alloc<unsigned long long>(slots, "workspace");
    b.tokens = mem.alloc<int>(2 * (size_t)rows, "workspace");  // tokens, then gaps: one copy brings both back
    b.gaps = reinterpret_cast<float*>(b.tokens + rows);
    b.kept = mem.alloc<int>(rows, "workspace");
    b.partial = mem.alloc<float4>((size_t)rows * kArgmaxRowSplits, "workspace");
    b.sms = sm_count();
    return b;
}

// The Sampler that sample() takes for a sequence in `slot` whose token goes to row `row`.
inline Sampler batch_sampler_row(const BatchSampler& b, int slot, int row) {
    if (slot < 0 || slot >= b.slots || row < 0 || row >= b.rows) die("sampler: slot %d, row %d of %d, %d", slot, row, b.slots, b.rows);
    Sampler s = b.scratch;
    s.seen = b.seen + (size_t)slot * b.vocab, s.d_step = b.steps + slot, s.d_token = b.tokens + row, s.d_kept = b.kept + row;
    return s;
}

// A sequence starts in `slot`: its seen tokens are ids[0, n) (device), of which the last `draws` were generated (a
// sequence restarted after preemption: they count for the presence and frequency penalties, and its RNG goes on
// where it was).
static __global__ void batch_sampler_start_kernel(unsigned char* seen, unsigned long long* step, const int* ids, int n, int vocab,
                                                  unsigned long long draws) {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) seen[i] = 0;
    __syncthreads();
    const int prompt = n - (int)draws;
    for (int i = threadIdx.x; i < prompt; i += blockDim.x)
        if (ids[i] >= 0 && ids[i] < vocab) seen[ids[i]] = 1;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = max(prompt, 0); i < n; i++)  // (in order, one thread: a token may repeat)
            if (ids[i] >= 0 && ids[i] < vocab) seen_generated(seen, ids[i]);
        *step = draws;
    }
}
inline void batch_sampler_start(BatchSampler& b, int slot, const int* d_ids, int n, long draws, cudaStream_t stream) {
    Sampler s = batch_sampler_row(b, slot, 0);
    batch_sampler_start_kernel<<<1, 1024, 0, stream>>>(s.seen, s.d_step, d_ids, n, b.vocab, (unsigned long long)draws);
    LAUNCH_CHECK();
}

// The block's best of x[begin, end) (lowest index on ties) and the best of the rest (its runner-up), in thread 0.
__device__ __forceinline__ void block_top2(const float* __restrict__ x, int begin, int end, float& best, int& best_idx, float& runner) {
    float v = -INFINITY, second = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = begin + (int)threadIdx.x; i < end; i += blockDim.x) {
        float xi = x[i];
        second = fmaxf(second, fminf(v, xi));
        argmax_merge(v, idx, xi, i);
    }
    // The runner-up over the block: every thread's second best, and the best of each thread but the winner's.
    best = v, best_idx = idx;
    block_argmax(best, best_idx);  // (thread 0 of warp 0 ends with the block's)
    __shared__ int winner;
    if (threadIdx.x == 0) winner = best_idx;
    __syncthreads();
    float cand = idx == winner ? second : v;
    for (int o = 16; o > 0; o >>= 1) cand = fmaxf(cand, __shfl_xor_sync(0xffffffffu, cand, o));
    __shared__ float warp_cand[32];
    if ((threadIdx.x & 31) == 0) warp_cand[threadIdx.x >> 5] = cand;
    __syncthreads();
    if (threadIdx.x == 0) {
        runner = -INFINITY;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) runner = fmaxf(runner, warp_cand[w]);
    }
}

// Greedy tokens of rows [0, n) of logits [n][vocab], lowest index on ties (as sample()), and the gap to the
// runner-up's logit (0 on an exact tie). Each row is cut into `splits` pieces, a block each, so that a few rows still
// fill the GPU (one block scanning Qwen3's 151,936 logits took 44 us of a 2.9 ms step); a piece keeps its best, its
// index and its runner-up, and a second launch merges a row's pieces (one piece: the first launch writes the row).
// Grid (splits, n): piece blockIdx.x of row blockIdx.y.
static __global__ void __launch_bounds__(1024) argmax_rows_kernel(const float* __restrict__ logits, int vocab, int splits, float4* __restrict__ partial,
                                                                  int* __restrict__ tokens, float* __restrict__ gaps) {
    pdl_launch_dependents();
    pdl_wait();
    const float* x = logits + (size_t)blockIdx.y * vocab;
    const int per = CEIL_DIV(vocab, splits), begin = min(vocab, (int)blockIdx.x * per), end = min(vocab, begin + per);
    float best, runner;
    int idx;
    block_top2(x, begin, end, best, idx, runner);
    if (threadIdx.x != 0) return;
    if (splits == 1) {
        tokens[blockIdx.y] = idx;
        gaps[blockIdx.y] = x[idx] - runner;  // (+inf for a vocabulary of one)
    } else {
        partial[(size_t)blockIdx.y * splits + blockIdx.x] = make_float4(best, __int_as_float(idx), runner, 0.f);
    }
}

// A warp per row: the best of its pieces (lowest index on ties), and the runner-up: the winning piece's runner-up or
// another piece's best. (An empty piece holds -inf and index 0x7fffffff: it never wins.)
static __global__ void argmax_rows_merge_kernel(const float4* __restrict__ partial, int splits, int* __restrict__ tokens, float* __restrict__ gaps) {
    pdl_launch_dependents();
    pdl_wait();
    const float4* p = partial + (size_t)blockIdx.x * splits;
    const int lane = threadIdx.x;
    float v = -INFINITY, second = -INFINITY;
    int idx = 0x7fffffff;
    if (lane < splits) v = p[lane].x, idx = __float_as_int(p[lane].y), second = p[lane].z;
    float best = v;
    int best_idx = idx;
    for (int o = 16; o > 0; o >>= 1) argmax_merge(best, best_idx, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, best_idx, o));
    float cand = idx == best_idx ? second : v;
    for (int o = 16; o > 0; o >>= 1) cand = fmaxf(cand, __shfl_xor_sync(0xffffffffu, cand, o));
    if (lane == 0) tokens[blockIdx.x] = best_idx, gaps[blockIdx.x] = best - cand;
}

inline void argmax_rows(BatchSampler& b, const float* logits, int n, cudaStream_t stream) {
    if (n < 1 || n > b.rows) die("sampler: %d rows, %d planned", n, b.rows);
    // Pieces per row: enough blocks for the SMs, at least 4,096 logits a piece, at most kArgmaxRowSplits.
    const int splits = std::max(1, std::min({kArgmaxRowSplits, CEIL_DIV(b.sms, n), CEIL_DIV(b.vocab, 4096)}));
    launch(argmax_rows_kernel, dim3(splits, n), 1024, 0, stream, logits, b.vocab, splits, b.partial, b.tokens, b.gaps);
    if (splits > 1) launch(argmax_rows_merge_kernel, n, 32, 0, stream, b.partial, splits, b.tokens, b.gaps);
}

}  // namespace monocu
