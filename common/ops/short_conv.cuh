// ops/short_conv.cuh — the gated short convolution of LFM2's conv layers: y = C * conv(B * x), where conv is a
// causal depthwise convolution of length L along the sequence (each channel its own L taps), and the state it
// carries between passes: the last L - 1 values of B * x of each channel.
//
// Usage:
//   short_conv(bcx, T, pos, w, bias, state, y, dim, L, stream);
//   short_conv_rows(bcx, n, pos, slots, w, bias, states, slot_stride, y, dim, L, stream);   // n sequences' decode
//     tokens in one launch, each with its own state (states + slots[r] * slot_stride)
//     bcx    float [T][3 dim]   in_proj's output: B, C and x, in that order along each row
//     pos    device [T]         the tokens' positions; pos[0] == 0 starts a sequence (the state counts as zeros)
//     w      bf16 [dim][L]      conv.weight ([dim][1][L] in the checkpoint); tap L - 1 meets the newest input
//     bias   bf16 [dim] or null conv.bias (conv_bias)
//     state  float [L - 1][dim] B * x of the L - 1 positions before this pass, oldest first; on return, of the
//                               last L - 1 positions of this pass (the sequence's conv state: one per sequence)
//     y      bf16 [T][dim]      the input of out_proj
//
// For token t: conv[t] = sum_k w[k] (B x)[t - (L - 1) + k] (+ bias), reading the state for positions before
// the pass: the same as transformers' Conv1d with padding L - 1 over a whole prompt, and its decode update.
// Threads own one channel and a run of tokens, so every B * x is read from bcx at most L times; the threads of
// the first run also move the state, after reading the old one (nobody else reads it), so one launch does both.
#pragma once

#include "gpu/memory.cuh"

namespace monocu {

constexpr int kShortConvMaxL = 8;      // conv_L_cache is 3 in every LFM2
constexpr int kShortConvTokens = 32;   // tokens per thread

static __global__ void short_conv_kernel(const float* __restrict__ bcx, int T, const int* __restrict__ pos, const bf16* __restrict__ w,
                                         const bf16* __restrict__ bias, float* __restrict__ state, bf16* __restrict__ y, int dim, int L) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dim) return;
    const int t0 = blockIdx.y * kShortConvTokens, t1 = min(T, t0 + kShortConvTokens);
    const bool fresh = pos[0] == 0;
    const size_t row = 3 * (size_t)dim;
    auto bx = [&](int t) { return bcx[(size_t)t * row + d] * bcx[(size_t)t * row + 2 * dim + d]; };  // B * x
    float taps[kShortConvMaxL], win[kShortConvMaxL];  // win[k]: B * x at t - (L - 1) + k
    for (int k = 0; k < L; k++) taps[k] = __bfloat162float(w[(size_t)d * L + k]);
    const float b0 = bias ? __bfloat162float(bias[d]) : 0.f;
    float old[kShortConvMaxL];  // the state before this pass (zeros for a new sequence)
    for (int j = 0; j < L - 1; j++) old[j] = fresh ? 0.f : state[(size_t)j * dim + d];
    for (int k = 0; k < L - 1; k++) {
        int t = t0 - (L - 1) + k;
        win[k] = t >= 0 ? bx(t) : old[L - 1 + t];
    }
    for (int t = t0; t < t1; t++) {
        win[L - 1] = bx(t);
        float acc = b0;
        for (int k = 0; k < L; k++) acc += taps[k] * win[k];
        y[(size_t)t * dim + d] = __float2bfloat16(bcx[(size_t)t * row + dim + d] * acc);  // C * conv
        for (int k = 0; k + 1 < L; k++) win[k] = win[k + 1];
    }
    if (blockIdx.y == 0)  // the new state: positions T - (L - 1) .. T - 1 of this pass
        for (int j = 0; j < L - 1; j++) {
            int t = T - (L - 1) + j;
            state[(size_t)j * dim + d] = t >= 0 ? bx(t) : old[T + j];
        }
}

inline void short_conv(const float* bcx, int T, const int* pos, const bf16* w, const bf16* bias, float* state, bf16* y, int dim, int L,
                       cudaStream_t stream) {
    if (L < 1 || L > kShortConvMaxL) die("short_conv: kernel length %d is not supported (1..%d)", L, kShortConvMaxL);
    if (T <= 0) return;
    dim3 grid((dim + 127) / 128, (T + kShortConvTokens - 1) / kShortConvTokens);
    short_conv_kernel<<<grid, 128, 0, stream>>>(bcx, T, pos, w, bias, state, y, dim, L);
    LAUNCH_CHECK();
}

// n one-token steps of as many sequences (the batched core's decode rows): row r is sequence slots[r]'s token at pos[r],
// its state at states + slots[r] * slot_stride. The same arithmetic as short_conv with T = 1.
static __global__ void short_conv_rows_kernel(const float* __restrict__ bcx, const int* __restrict__ pos, const int* __restrict__ slots,
                                              const bf16* __restrict__ w, const bf16* __restrict__ bias, float* __restrict__ states,
                                              size_t slot_stride, bf16* __restrict__ y, int dim, int L) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (d >= dim) return;
    float* state = states + (size_t)slots[r] * slot_stride;
    const bool fresh = pos[r] == 0;
    const float* row = bcx + (size_t)r * 3 * dim;
    float win[kShortConvMaxL];
    for (int k = 0; k < L - 1; k++) win[k] = fresh ? 0.f : state[(size_t)k * dim + d];
    win[L - 1] = row[d] * row[2 * dim + d];  // B * x
    float acc = bias ? __bfloat162float(bias[d]) : 0.f;
    for (int k = 0; k < L; k++) acc += __bfloat162float(w[(size_t)d * L + k]) * win[k];
    y[(size_t)r * dim + d] = __float2bfloat16(row[dim + d] * acc);
    for (int k = 0; k < L - 1; k++) state[(size_t)k * dim + d] = win[k + 1];
}

inline void short_conv_rows(const float* bcx, int n, const int* pos, const int* slots, const bf16* w, const bf16* bias, float* states,
                            size_t slot_stride, bf16* y, int dim, int L, cudaStream_t stream) {
    if (L < 1 || L > kShortConvMaxL) die("short_conv: kernel length %d is not supported (1..%d)", L, kShortConvMaxL);
    if (n <= 0) return;
    short_conv_rows_kernel<<<dim3((dim + 127) / 128, n), 128, 0, stream>>>(bcx, pos, slots, w, bias, states, slot_stride, y, dim, L);
    LAUNCH_CHECK();
}

}  // namespace monocu
