// ops/gemv.cuh — batch-1 decode matmul, y = W x, for bf16, FP8, INT4 (and MXFP4) weights: the step that decides decode speed.
//
// Usage (L is a Linear from weights.cuh: [N][K] weights in any format, plus scales and an optional bias):
//   gemv(L, x_bf16, y, stream);                            // y[n]  = W[n] . x
//   gemv_add(L, x_bf16, y, stream);                        // y[n] += W[n] . x      (residual add)
//   gemv_rmsnorm(L, x_f32, norm_w, eps, y, stream);        // y[n]  = W[n] . rmsnorm(x)
//   gemv_rmsnorm_swiglu(L, x_f32, norm_w, eps, h, stream); // h[i]  = silu(W[2i] . n) * (W[2i+1] . n), n = rmsnorm(x)
//   gemv_add(L, x, y, stream, l2_ahead(next, after_wait));  // the same, also warming L2 with next's first 8 MB
//   K a multiple of 8 (16 for FP8, 128 for INT4, 32 for MXFP4); rows 16-byte aligned.
//
// Why our own kernel: at batch 1 the whole cost is reading W once, and cuBLAS reaches only 34-61% of HBM
// bandwidth on Qwen3-4B's projection shapes. Layout of the work:
//   - a block stages x in shared memory once, in the form its weights multiply best with, normalising it
//     first when the RMSNorm is fused (every block recomputes the sum of squares: x is 10-16 KB, and the
//     blocks of an SM find it in L1);
//   - each warp owns R consecutive rows (2 for bf16, 4 for FP8 and INT4); each lane reads 16-byte chunks at a
//     stride of 32 chunks, so a warp reads 512 contiguous bytes per row per step; 8 / R steps are issued
//     before any use (8 independent 16-byte loads in flight per lane, and the scales of quantized formats
//     with them), except that compiled INT4 steps each wait for their bf16 scale, converted right after its
//     load (issuing the 8 together measured no faster, 8B slower: kb/log.md "Seventeenth session"); loads
//     stream past L1 (each weight byte is used once);
//     fp32 accumulation across chunks; shuffle reduction at the end;
//   - launched with programmatic dependent launch (pdl.cuh): the first 4 steps' loads are issued while the
//     previous kernel is still finishing, and only then does the block wait for x;
//   - blocks of W warps own W R rows (gemv_warps: 12 for INT4's 2-row kernels, else 8; 24 warps per SM
//     either way); when that makes too few blocks to keep every SM equally busy (a 2560-row bf16
//     projection is 160 blocks of 16 rows on 132 SMs), 2-8 warps (at most 4 of a 12-warp block) share a
//     group of R rows, each summing a slice of K (gemv_layout). Every block stages x once, so the quantized formats, whose rows are 2-4x
//     fewer bytes, take twice the rows per warp where they can: a block then streams about as many weight
//     bytes per staging as a bf16 one (FP8 4B gate_up: 608 row groups instead of 1216). Splitting K across a
//     thread-block cluster is the other way, kept for comparison (tools/bench_gemv);
//   - the 4-row SwiGLU GEMV (FP8 / INT4 gate_up: 2-3 waves of row groups) runs only as many blocks as fit on
//     the GPU at once, each normalising and staging x once and then taking row groups b, b + grid, ... in
//     turn, the next group's first loads issued before the last group's sums are written (4B fp8: 203
//     blocks of 3 groups). Qwen3-4B / 8B decode on the H100 (kb/log.md, fourteenth session): int4 +8.9% /
//     +6.4%, fp8 +2.2% / +0.6%. Every other kernel takes one group per block (gemv_loops says why);
//     the sixth session's loop in every GEMV pushed the others past their occupancy steps and lost.
//     Napkin: Qwen3-4B reads ~8.0 GB of bf16 weights per token; at 3.0 TB/s that is 2.7 ms.
// Per format, what a 16-byte chunk costs (lane instructions, roughly):
//   bf16: 8 weights; x staged bf16; 8 fp32 FMAs after unpacking (~25)
//   fp8:  16 weights; x staged fp16 and pre-scaled by 2^-8; the e4m3 pairs convert to half2 in one
//         instruction and multiply-add as half2 (8 HFMA2), the chunk's half2 sum is widened to fp32 (~22).
//         Pre-scaling keeps |w x| <= 448 * (|x| / 256) far inside fp16 range; the 2^8 comes back at the end.
//   int4: 32 weights; x staged as int8 per chunk of 32 with a scale (max |x| / 127); per 8 weights two
//         masks pick the even and odd nibbles as bytes, two dp4a multiply-add them with the matching 4 x
//         each (~5 per 8 weights); the int32 sum, less 8 x the chunk's sum of x codes, is scaled once
//         (~24; ~58 when it was fp16 HFMA2 on x staged in fp16: Qwen3-4B int4 decode 577 -> 608 tok/s,
//         8B 408 -> 437). The int8 rounding of x is small next to INT4's own error: on the shipped model
//         (numpy, kb/log.md) it alone moves the logits by 0.6%, INT4 by 9.1%, both together by 9.1%.
//   mxfp4: 32 weights and their E8M0 scale; x staged as FP8's; per 4 weights five byte permutes make fp16
//         weights of the E2M1 codes, two HFMA2 multiply-add them (~80).
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <type_traits>

#include "gpu/async_copy.cuh"
#include "gpu/memory.cuh"
#include "gpu/pdl.cuh"
#include "ops/quant.cuh"
#include "gpu/reduce.cuh"
#include "ops/swiglu.cuh"
#include "gpu/trace.cuh"

namespace monocu {

enum class GemvInput { BF16, F32_RMSNORM };
enum class GemvOutput { STORE_F32, ADD_F32, SWIGLU_BF16 };

constexpr int kGemvLoadsInFlight = 8;     // 16-byte weight loads per lane per batch
constexpr size_t kGemvMaxSmem = 128 * 1024;  // dynamic shared memory a GEMV block may ask for

// At most 24 GEMV warps share an SM. With blocks of 8 warps, the bf16 kernels without a fused norm (64
// registers) would let 4 blocks in; held to 3 (by asking for more shared memory than they use), the decode
// step got faster: Qwen3-0.6B bf16 1,247 -> 1,315 tok/s, 8B 175.4 -> 179.5, 4B 310.7 -> 313.4 (H100, sixth
// session; o_proj and down_proj 10-15% faster in the step). Fewer warps lose more: 16 per SM cost 6-27%
// (kb/log.md, fifteenth session).
constexpr int kGemvMaxWarpsPerSm = 24;

// Warps per block of the 4-row kernels, and of the 2-row ones unless the format says otherwise (gemv_warps).
constexpr int kGemvWarps = 8;
constexpr float kFp8XScale = 1.f / 256.f;

// Bytes a GEMV asks L2 to fetch for the projection after it, split evenly over its blocks; empty by default.
// Each block asks before its wait for the previous kernel (while that one still runs), or with after_wait
// once that kernel is done and this block's x is on its way.
struct L2Prefetch {
    const void* p = nullptr;
    size_t bytes = 0;
    bool after_wait = false;
};

// A mixture of experts' batch-1 GEMV: k of E experts' projections, all of one shape and format, in one launch
// (blockIdx.y = j, the j-th expert chosen for the token). The router's choice is read on the device, so the
// launch is captured in the decode graph like any other. Expert e's weights and scales are at w[e], scale[e];
// the j-th launch row reads its input x + j x_stride (bytes: each expert its own row of h, or 0: the same x)
// and writes y + j y_stride (elements).
struct GemvExperts {
    const int* idx = nullptr;             // device [k]: the chosen experts
    const void* const* w = nullptr;       // device [E]
    const void* const* scale = nullptr;   // device [E] (quantized formats)
    const void* const* bias = nullptr;    // device [E] bf16 [N] each (GPT-OSS's expert biases), or null: none
    int k = 1;
    size_t x_stride = 0, y_stride = 0;
    GluAct act;                           // the SwiGLU epilogue's form (swiglu.cuh): plain, or GPT-OSS's clamped one

    GemvExperts() = default;
    GemvExperts(const int* idx_, const void* const* w_, const void* const* scale_, int k_, const void* const* bias_ = nullptr,
                GluAct act_ = {})
        : idx(idx_), w(w_), scale(scale_), bias(bias_), k(k_), act(act_) {}
};

// The start of next's weights, up to kL2AheadBytes. Why: a decode step leaves HBM idle at the seams of its
// kernels (a GEMV's last blocks, the wait for x, the attention); weights fetched into L2 there are read
// from L2 by the next projection. Measured in the engine's step (kb/log.md, fifth session): o_proj
// fetching 8 MB of gate_up after its wait, and gate_up 8 MB of down_proj at its start, raised 4B fp8 from
// 442 to ~460 tok/s and 8B fp8 from 276 to 281 (bf16 +0.5%) on the H100, within noise on the H200 and for
// Qwen3-0.6B; fetching gate_up from o_proj's early start instead slowed the attention kernel beside it (10.5
// -> 13.5 us per layer), and 16 MB or more was slower than 8. (50 MB of L2 on the H100 and H200.)
constexpr size_t kL2AheadBytes = 8u << 20;
inline L2Prefetch l2_ahead(const Linear& next, bool after_wait) {
    if (reinterpret_cast<uintptr_t>(next.w) % 16 != 0) return {};  // the bulk prefetch needs 16-byte alignment
    return L2Prefetch{next.w, std::min(kL2AheadBytes, next.weight_bytes()), after_wait};
}

// The block's share of pf, asked for in 16 KB pieces by the first threads of warp 0 (fire and forget: the
// data lands in L2 and nothing waits for it). Hopper's bulk prefetch; nothing on older GPUs.
__device__ __forceinline__ void l2_prefetch_share(const L2Prefetch& pf) {
#if __CUDA_ARCH__ >= 900
    if (pf.bytes == 0) return;
    constexpr size_t kPiece = 16 * 1024;
    size_t share = (pf.bytes / gridDim.x + 15) & ~size_t(15), begin = share * blockIdx.x;
    size_t end = min(begin + share, pf.bytes & ~size_t(15));
    for (size_t at = begin + threadIdx.x * kPiece; at < end; at += blockDim.x * kPiece) {
        unsigned n = (unsigned)min(kPiece, end - at);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(pf.p) + at), "r"(n) : "memory");
    }
#endif
}

// ---- input staging and output, shared by every format ----

// Lane 0 of a warp owning rows (row0, row0 + 1) writes them: store, residual add (to old[0], old[1], the rows'
// values that gemv_fetch_old put in shared memory), or SwiGLU of the pair.
template <GemvOutput OUT>
__device__ __forceinline__ void gemv_write(float acc0, float acc1, const float* old, int row0, int N, float* y, bf16* y_bf16,
                                           const GluAct& act) {
    if constexpr (OUT == GemvOutput::STORE_F32) {
        y[row0] = acc0;
        if (row0 + 1 < N) y[row0 + 1] = acc1;
    } else if constexpr (OUT == GemvOutput::ADD_F32) {
        y[row0] = old[0] + acc0;
        if (row0 + 1 < N) y[row0 + 1] = old[1] + acc1;
    } else {  // rows (2i, 2i+1) = (gate_i, up_i)
        y_bf16[row0 / 2] = __float2bfloat16_rn(glu(acc0, acc1, act));
    }
}

// The projection's bias for output row r (0 without one), added after the weight scale.
__device__ __forceinline__ float row_bias(const Linear& L, int r) {
    return L.bias ? __bfloat162float(static_cast<const bf16*>(L.bias)[r]) : 0.f;
}

// Residual add: the writing lane asks for its rows of y as soon as the previous kernel is done (a cp.async
// into shared memory, in the group of x's staging copies, so it costs no registers), so that the load's
// latency passes during the staging of x and the dot products; a read-modify-write at the end put an L2 round
// trip on the critical path of every o_proj and down_proj block (kb/log.md, thirteenth session). Nothing
// else writes these rows while this kernel runs. Other outputs read nothing.
template <GemvOutput OUT, int R>
__device__ __forceinline__ void gemv_fetch_old(const float* y, int row0, int N, bool writer, float* old) {
    if constexpr (OUT == GemvOutput::ADD_F32) {
        if (writer)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (row0 + r < N) cp_async_4(old + r, y + row0 + r);
    }
}

// ---- the weight formats: how x is staged, and one 16-byte chunk dotted with it ----

// Each format stages x for its dot product: bf16 and FP8 in place of the bf16 copy (front_bytes 0), INT4 as
// records in front of it (its staged form is smaller than bf16, and converting in place would overwrite
// elements other threads have not read yet).
struct Bf16Weights {
    static constexpr int kPerChunk = 8;  // weights per 16 bytes
    static constexpr int kWideRows = 2;  // rows per warp where a projection has rows to spare (gemv_layout)
    static constexpr int kWarps2Row = kGemvWarps;  // warps per block of its 2-row kernels (gemv_warps)
    static constexpr size_t front_bytes(int) { return 0; }
    // Stores elements i .. i+7 (i a multiple of 8) in the form dot() reads: one 16-byte store.
    static __device__ __forceinline__ void stage8(void* xs, int i, const float* v, unsigned) { static_cast<uint4*>(xs)[i / 8] = float8_to_bf16x8(v); }
    static __device__ __forceinline__ float dot(uint4 w, const void* xs, int chunk) {
        uint4 x = static_cast<const uint4*>(xs)[chunk];
        const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
        const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 a = __bfloat1622float2(wp[k]), b = __bfloat1622float2(xp[k]);
            s = fmaf(a.x, b.x, s);
            s = fmaf(a.y, b.y, s);
        }
        return s;
    }
};

struct Fp8Weights {
    static constexpr int kPerChunk = 16;
    static constexpr int kWideRows = 4;
    static constexpr int kWarps2Row = kGemvWarps;
    static constexpr size_t front_bytes(int) { return 0; }
    static __device__ __forceinline__ void stage8(void* xs, int i, const float* v, unsigned) {
        uint4 r;
        __half2* p = reinterpret_cast<__half2*>(&r);
#pragma unroll
        for (int k = 0; k < 4; k++) p[k] = __floats2half2_rn(v[2 * k] * kFp8XScale, v[2 * k + 1] * kFp8XScale);
        static_cast<uint4*>(xs)[i / 8] = r;
    }
    static __device__ __forceinline__ float dot(uint4 w, const void* xs, int chunk) {
        const __half2* x = static_cast<const __half2*>(xs) + chunk * 8;
        const uint16_t* p = reinterpret_cast<const uint16_t*>(&w);
        __half2 acc = __float2half2_rn(0.f);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(p[k]), __NV_E4M3);
            acc = __hfma2(*reinterpret_cast<__half2*>(&h), x[k], acc);
        }
        float2 f = __half22float2(acc);
        return (f.x + f.y) * (1.f / kFp8XScale);
    }
};

// INT4 multiplies on the integer dot-product units: x is quantized to int8 per chunk of 32 inputs (scale =
// max |x| / 127), and dp4a multiplies 4 nibbles by 4 int8 x at a time (W4A8, as llama.cpp's int4 x q8_1 dot).
// The record of a chunk (48 bytes): its 32 x as int8, ordered per 8 as (x0, x2, x4, x6)(x1, x3, x5, x7), the
// order in which a masked 32-bit word of nibbles holds its even and odd elements; then the scale and the sum
// of the 32 codes (the -8 of the storage offset comes out of the sum: sum (u - 8) x = sum u x - 8 sum x).
struct Int4Weights {
    static constexpr int kPerChunk = 32;
    static constexpr int kWideRows = 4;
    static constexpr int kWarps2Row = 12;  // gemv_warps says why
    static constexpr int kRecord = 48;
    static constexpr size_t front_bytes(int n) { return (size_t)n / 32 * kRecord; }
    // The 4 threads of a chunk (consecutive lanes, elements i .. i + 31, active together: n is a multiple of
    // 32) share its scale and sum by shuffles among the warp's active lanes.
    static __device__ __forceinline__ void stage8(void* xs, int i, const float* v, unsigned lanes) {
        float amax = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
        amax = fmaxf(amax, __shfl_xor_sync(lanes, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(lanes, amax, 2));
        const float inv = amax > 0.f ? 127.f / amax : 0.f;
        int q[8], sum = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = __float2int_rn(v[k] * inv), sum += q[k];
        sum += __shfl_xor_sync(lanes, sum, 1);
        sum += __shfl_xor_sync(lanes, sum, 2);
        unsigned char* rec = static_cast<unsigned char*>(xs) + (size_t)(i / 32) * kRecord;
        auto pack = [](int a, int b, int c, int d) { return (uint32_t)(a & 0xFF) | (uint32_t)(b & 0xFF) << 8 | (uint32_t)(c & 0xFF) << 16 | (uint32_t)(d & 0xFF) << 24; };
        *reinterpret_cast<uint2*>(rec + i % 32) = make_uint2(pack(q[0], q[2], q[4], q[6]), pack(q[1], q[3], q[5], q[7]));
        if (i % 32 == 0) *reinterpret_cast<float2*>(rec + 32) = make_float2(amax / 127.f, (float)sum);
    }
    // Sum over the chunk's 32 weights of (u - 8) x, before the group scale.
    static __device__ __forceinline__ float dot(uint4 w, const void* xs, int chunk) {
        const unsigned char* rec = static_cast<const unsigned char*>(xs) + (size_t)chunk * kRecord;
        uint4 xa = *reinterpret_cast<const uint4*>(rec), xb = *reinterpret_cast<const uint4*>(rec + 16);
        float2 scale_sum = *reinterpret_cast<const float2*>(rec + 32);
        const int x[8] = {(int)xa.x, (int)xa.y, (int)xa.z, (int)xa.w, (int)xb.x, (int)xb.y, (int)xb.z, (int)xb.w};
        const uint32_t* p = reinterpret_cast<const uint32_t*>(&w);
        int acc = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {  // nibbles are 0..15: as signed bytes they are the same numbers
            acc = __dp4a((int)(p[j] & 0x0F0F0F0Fu), x[2 * j], acc);
            acc = __dp4a((int)((p[j] >> 4) & 0x0F0F0F0Fu), x[2 * j + 1], acc);
        }
        return fmaf(-8.f, scale_sum.y, (float)acc) * scale_sum.x;
    }
};

// MXFP4 (GPT-OSS's experts): a chunk of 16 bytes is one MXFP4 block, 32 E2M1 codes and one E8M0 scale. x is staged
// as FP8's is (fp16, pre-scaled by 2^-8), and the codes become fp16 weights: twice a code's value (0, 1, 2, 3, 4, 6, 8,
// 12, and their negatives) is an fp16 number whose low byte is 0, so byte permutes make them: one looks the high bytes
// of 4 magnitudes (code & 7) up among the positive values, one among the negative ones, a third takes each byte from
// the first or the second by the code's sign bit, and two more spread the 4 bytes into two half2 words. Per 4 weights
// 5 permutes and 2 HFMA2; the chunk's scale (chunk_scale: 2^(s - 128), the halving folded in) comes once per chunk.
// Why not INT4's int8 records of x and dp4a (fewer instructions): the int8 rounding of x was the larger error, as the
// MXFP4 weights themselves are exact. On tiny-gpt-oss it moved decode 3.1% away from prefill (which multiplies the
// dequantized weights in bf16) and changed the greedy tokens after 17 (the engine test's bound is 2%).
struct Mxfp4Weights {
    static constexpr int kPerChunk = 32;
    static constexpr int kWideRows = 4;
    static constexpr int kWarps2Row = kGemvWarps;
    static constexpr size_t front_bytes(int) { return 0; }
    static __device__ __forceinline__ void stage8(void* xs, int i, const float* v, unsigned lanes) { Fp8Weights::stage8(xs, i, v, lanes); }
    static __device__ __forceinline__ float dot(uint4 w, const void* xs, int chunk) {
        constexpr uint32_t kPos0 = 0x42403C00u, kPos1 = 0x4A484644u;  // fp16 high bytes of 0, 1, 2, 3 | 4, 6, 8, 12
        constexpr uint32_t kNeg0 = 0xC2C0BC80u, kNeg1 = 0xCAC8C6C4u;  // ... of -0, -1, -2, -3 | -4, -6, -8, -12
        const __half2* x = static_cast<const __half2*>(xs) + chunk * 16;
        const uint32_t* p = reinterpret_cast<const uint32_t*>(&w);
        __half2 acc[2] = {__float2half2_rn(0.f), __float2half2_rn(0.f)};
#pragma unroll
        for (int j = 0; j < 4; j++) {  // word j: elements 8j .. 8j + 7, element 8j + n in nibble n
            const uint32_t mag = p[j] & 0x77777777u, sel = ((p[j] >> 1) & 0x44444444u) | 0x32103210u;
#pragma unroll
            for (int h = 0; h < 2; h++) {  // nibbles 4h .. 4h + 3: the high bytes of 4 fp16 weights
                const uint32_t m = mag >> (16 * h);
                const uint32_t v = __byte_perm(__byte_perm(kPos0, kPos1, m), __byte_perm(kNeg0, kNeg1, m), sel >> (16 * h));
                const uint32_t w01 = __byte_perm(v, 0u, 0x1404u), w23 = __byte_perm(v, 0u, 0x3424u);
                acc[h] = __hfma2(*reinterpret_cast<const __half2*>(&w01), x[4 * j + 2 * h], acc[h]);
                acc[h] = __hfma2(*reinterpret_cast<const __half2*>(&w23), x[4 * j + 2 * h + 1], acc[h]);
            }
        }
        float2 a = __half22float2(acc[0]), b = __half22float2(acc[1]);
        return (a.x + a.y + b.x + b.y) * (1.f / kFp8XScale);
    }
};

// Warps per block of F's kernels of R rows per warp. Every block stages x for its own warps, and INT4's staging
// is arithmetic (x quantized to int8 per 32) that two or three blocks of an SM repeat side by side (0.9-2 us at
// the start of each of its GEMVs; kb/log.md, sixteenth session), so its 2-row kernels (78-80 registers) run 2
// blocks of 12 warps instead of 3 of 8: the same 24 warps per SM, each staging shared by 12. Measured on the H100
// (sixteenth session), 8 -> 12 warps: INT4 Qwen3-4B +4.6%, 8B +0.5%, 0.6B +2.4%; FP8 4B +0.6%, 8B +0.3% but 0.6B
// -8.5% (its small projections then run in too few blocks), and bf16 0 / -0.3%: those keep 8. The 4-row kernels
// (78-124 registers) keep 8 too: one block of 16 or 24 warps per SM leaves no room for the next kernel's blocks to
// start beside it (7-18% slower on 4B; INT4 gate_up at 16: -1%), and 12 warps for FP8's 4-row ones measured +0.3-0.4%.
template <class F>
__host__ __device__ constexpr int gemv_warps(int R) { return R == 2 ? F::kWarps2Row : kGemvWarps; }

// Scale applied to a chunk's partial dot product (per-chunk formats), or 1.
template <class F>
__device__ __forceinline__ float chunk_scale(const Linear& L, int row, int chunk) {
    if constexpr (std::is_same<F, Int4Weights>::value) {
        return __bfloat162float(static_cast<const bf16*>(L.scale)[(size_t)row * (L.K / kInt4Group) + chunk * F::kPerChunk / kInt4Group]);
    } else if constexpr (std::is_same<F, Mxfp4Weights>::value) {  // 2^(s - 127) / 2: the dot's weights are doubled
        uint32_t e = static_cast<const uint8_t*>(L.scale)[(size_t)row * (L.K / 32) + chunk];
        return __uint_as_float(e >= 2 ? (e - 1) << 23 : 0x00200000u << e);
    } else if constexpr (std::is_same<F, Fp8Weights>::value) {
        int n_kb = L.K / L.kblock;
        return n_kb == 1 ? 1.f : static_cast<const float*>(L.scale)[(size_t)row * n_kb + chunk * F::kPerChunk / L.kblock];
    } else {
        return 1.f;
    }
}

// Scale applied once to the finished row (FP8 per channel), or 1.
template <class F>
__device__ __forceinline__ float row_scale(const Linear& L, int row) {
    if constexpr (std::is_same<F, Fp8Weights>::value) return L.kblock == L.K ? static_cast<const float*>(L.scale)[row] : 1.f;
    return 1.f;
}

// Stages x[k0, k0 + n) in shared memory in the form F's dot reads, in two calls by the whole block:
// gemv_stage_x_issue starts the copies, gemv_stage_x_finish waits for them, converts and ends with a barrier
// (the kernel issues its L2 warm-up in between). Each thread issues all its copies at once (cp.async through
// L1, where the SM's earlier blocks left x) and waits once. Loads into registers instead queued behind the block's own weight loads, one round trip per
// 2,048 elements (a decode-step timeline, oracle/trace_report.py: 2-3.6 us per block for the fused RMSNorm
// of 4B's qkv and gate_up); copies that skip L1 (cp.async.cg) were slower still (kb/log.md).
//   BF16 input: copied as is; FP8 then converts each chunk to fp16 in place (the thread that copied a chunk
//     converts it, so no barrier is needed in between), INT4 writes its int8 records in front of the copy.
//   Fused RMSNorm: all of the fp32 x goes to a second area (the sum of squares needs all of it), the norm
//     weights of the part to the staged area; then x / rms * w, rounded to bf16 exactly as the prefill
//     path's rmsnorm kernel rounds it, goes to F's form chunk by chunk.
struct GemvXArea {
    bf16* staged;  // n elements: bf16 as copied, then F's form (INT4: records in front of it)
    float* raw;    // fused RMSNorm: x[0, K) in fp32
    int first, step;  // this thread's chunks of 8 elements: first, first + step, ...
};
template <class F>
__device__ __forceinline__ GemvXArea gemv_x_area(unsigned char* smem, int n) {
    unsigned char* staged = smem + F::front_bytes(n);
    return GemvXArea{reinterpret_cast<bf16*>(staged), reinterpret_cast<float*>(staged + (size_t)n * 2), (int)threadIdx.x * 8, (int)blockDim.x * 8};
}

template <class F, GemvInput IN>
__device__ __forceinline__ void gemv_stage_x_issue(const void* x_in, const bf16* norm_w, int K, int k0, int n, unsigned char* smem) {
    const auto [staged, raw, first, step] = gemv_x_area<F>(smem, n);
    if constexpr (IN == GemvInput::F32_RMSNORM) {
        const float* x = static_cast<const float*>(x_in);
        for (int i = first; i < K; i += step) cp_async_16_ca(raw + i, x + i), cp_async_16_ca(raw + i + 4, x + i + 4);
        for (int i = first; i < n; i += step) cp_async_16_ca(staged + i, norm_w + k0 + i);
    } else {
        for (int i = first; i < n; i += step) cp_async_16_ca(staged + i, static_cast<const bf16*>(x_in) + k0 + i);
    }
    cp_async_commit();
}

template <class F, GemvInput IN>
__device__ __forceinline__ void gemv_stage_x_finish(float eps, int K, int k0, int n, unsigned char* smem) {
    constexpr bool kNorm = IN == GemvInput::F32_RMSNORM;
    const auto [staged, raw, first, step] = gemv_x_area<F>(smem, n);
    cp_async_wait<0>();
    float inv = 1.f;
    if constexpr (kNorm) {
        float ss = 0.f;
        for (int i = first; i < K; i += step) {  // this thread's own copies
            float4 a = *reinterpret_cast<const float4*>(raw + i), b = *reinterpret_cast<const float4*>(raw + i + 4);
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
        }
        inv = rsqrtf(block_sum(ss) / K + eps);  // its barriers also make every thread's copies visible to all
    }
    if (kNorm || !std::is_same<F, Bf16Weights>::value) {
        const int lane8 = (threadIdx.x & 31) * 8;
        for (int i = first; i - lane8 < n; i += step) {  // the same trip count for every lane of a warp
            const unsigned lanes = __ballot_sync(0xffffffffu, i < n);
            if (i >= n) continue;
            float v[8];
            bf16x8_to_float(*reinterpret_cast<const uint4*>(staged + i), v);
            if constexpr (kNorm) {  // two 16-byte reads: 8 scalar ones put 8 lanes on each bank
                float r[8];
                *reinterpret_cast<float4*>(r) = *reinterpret_cast<const float4*>(raw + k0 + i);
                *reinterpret_cast<float4*>(r + 4) = *reinterpret_cast<const float4*>(raw + k0 + i + 4);
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] = __bfloat162float(__float2bfloat16_rn(r[k] * inv * v[k]));
            }
            F::stage8(smem, i, v, lanes);
        }
    }
    __syncthreads();
}

// Shared memory a block needs: x's part in F's form, and for the fused RMSNorm all of x in fp32.
template <class F, GemvInput IN>
constexpr size_t gemv_smem_bytes(int K, int S) {
    return F::front_bytes(K / S) + (size_t)(K / S) * 2 + (IN == GemvInput::F32_RMSNORM ? (size_t)K * 4 : 0);
}

// Work layout: each warp owns R consecutive rows (2, or 4 for FP8 and INT4 where gemv_layout allows: their
// rows are 2-4x fewer bytes, and a block then streams about as many weight bytes as a bf16 one for each
// time it stages x), so a block of W = gemv_warps<F>(R) warps owns W R / KS rows (block b from (b / S) W R / KS)
// and the part b % S of K.
//   KS (1, 2, 4, or 8 where it divides W) warps share each group of R rows, warp w taking slice w % KS of the
//     part's chunks; their sums meet in shared memory. More, smaller blocks for projections with few rows.
//   S (1, 2, 4 or 8, Hopper only, KS = 1) blocks form a thread-block cluster over the parts of K, and block 0
//     of the cluster adds the others' sums out of their shared memory (distributed shared memory).
// Both add partial sums in a fixed order: deterministic, no atomics, no extra launch.

// Whether a kernel's blocks loop over row groups (the layout notes at the top): the SwiGLU GEMV of 4 rows per
// warp (FP8 and INT4 gate_up at 4B and 8B). The loop costs registers (fp8 87 -> 105), which the 4-row kernels
// have to spare at 2 blocks per SM; the 2-row ones do not: fp8's went 72 -> 104, 3 blocks per SM to 2, and
// Qwen3-0.6B fp8 decode (gate_up in one wave of 2-row groups before) 1,447 -> 1,337-1,370 tok/s. bf16 (2 rows)
// measured +0.5% at 4B, -0.7% at 8B with the loop (fourteenth session): left without it.
// The experts' SwiGLU GEMV shares the resident slots among its k launch rows (gemv_resident_grid's ky): before, each
// expert's grid was sized as if it had the GPU alone, and GPT-OSS's short rows (MXFP4: 1.4 KB) made two waves of
// blocks that each staged and normalised x for one 32-row group (gpt-oss-20b gate_up: 720 blocks on 396 slots, 31.0 ->
// 27.9 us; LFM2-8B-A1B int4 14.7 -> 12.2 us). Looping the experts' down_proj as well measured 17.3 -> 18.9 us: not done.
template <GemvOutput OUT, int R>
constexpr bool gemv_loops() {
    return OUT == GemvOutput::SWIGLU_BF16 && R == 4;
}

// Row groups of a projection of N rows: a group is the W / KS warp groups of R rows that one block of W warps
// (or one cluster, S > 1) takes at a time.
__host__ __device__ constexpr int gemv_row_groups(int N, int R, int KS, int W) { return CEIL_DIV(N, W / KS * R); }

// X: the mixture-of-experts form (GemvExperts), a separate instantiation so that the ordinary GEMVs carry none of
// its code (its routing prologue alone raised their registers by up to 20 and added a stack frame).
template <class F, GemvInput IN, GemvOutput OUT, int R, bool X = false>
__global__ void __launch_bounds__(gemv_warps<F>(R) * 32)
    gemv_kernel(Linear L, const void* __restrict__ x_in, const bf16* __restrict__ norm_w, float eps, float* __restrict__ y,
                bf16* __restrict__ y_bf16, int S, int KS, L2Prefetch pf, GemvExperts ex) {
    constexpr int U = kGemvLoadsInFlight / R;  // R rows per warp, U chunks of each per batch
    constexpr int W = gemv_warps<F>(R);
    TRACE_BEGIN();
    extern __shared__ __align__(16) unsigned char gemv_smem[];
    if constexpr (X) {  // this launch row's expert: known once the router's kernel is done
        pdl_wait();
        const int j = blockIdx.y, e = ex.idx[j];
        L.w = const_cast<void*>(ex.w[e]);
        if (ex.scale) L.scale = const_cast<void*>(ex.scale[e]);
        if (ex.bias) L.bias = ex.bias[e];
        x_in = static_cast<const uint8_t*>(x_in) + j * ex.x_stride;
        if (y) y += j * ex.y_stride;
        if (y_bf16) y_bf16 += j * ex.y_stride;
    }
    const int N = L.N, K = L.K;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = warp / KS, slice = warp % KS;
    const int part = blockIdx.x % S;
    const size_t row_bytes = (size_t)K * 16 / F::kPerChunk;
    // A looping kernel (gemv_loops: the 4-row SwiGLU) keeps its blocks resident, each taking row groups
    // blockIdx.x, + gridDim.x, ... after staging x once (gemv_resident_grid sizes the grid); others take one group.
    constexpr bool kLoops = gemv_loops<OUT, R>();
    const int n_groups = gemv_row_groups(N, R, KS, W);
    int rg = blockIdx.x / S, row0 = 0;
    bool active = false;
    int rows[R];  // rows past N compute the last row again; their copies are dropped
    const uint4* w[R];
    auto set_group = [&](int g) {
        row0 = (g * (W / KS) + group) * R;
        active = row0 < N;
#pragma unroll
        for (int r = 0; r < R; r++) {
            rows[r] = active ? min(row0 + r, N - 1) : 0;
            w[r] = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(L.w) + rows[r] * row_bytes);
        }
    };
    set_group(rg);
    const int part_chunks = K / F::kPerChunk / S, slice_chunks = part_chunks / KS;
    const int s0 = slice * slice_chunks, c0 = part * part_chunks + s0;  // first chunk: in the staged part, in the row

    // One batch: U chunks of each of the R rows (8 16-byte loads per lane), with their scales (quantized
    // formats), all issued before any is used. The first batch goes out before the wait for the previous
    // kernel (weights are never written) and before x is staged, so its latency overlaps both.
    uint4 wv[R][U];
    float sc[R][U];
    auto load_batch = [&](int c) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int idx = c + 32 * u;
            if (active && idx < slice_chunks) {
#pragma unroll
                for (int r = 0; r < R; r++) wv[r][u] = __ldcs(w[r] + c0 + idx), sc[r][u] = chunk_scale<F>(L, rows[r], c0 + idx);
            }
        }
    };
    pdl_launch_dependents();
    load_batch(lane);
    if (!pf.after_wait) l2_prefetch_share(pf);
    pdl_wait();  // x was written by the previous kernel, and y may still be read by it
    TRACE_MARK(1);
    __shared__ float old_y[W][R];  // residual add: the writers' rows of y, landed with x
    gemv_fetch_old<OUT, R>(y, row0, N, active && part == 0 && slice == 0 && lane == 0, old_y[warp]);
    const int xk0 = part * part_chunks * F::kPerChunk, xn = part_chunks * F::kPerChunk;
    gemv_stage_x_issue<F, IN>(x_in, norm_w, K, xk0, xn, gemv_smem);
    if (pf.after_wait) l2_prefetch_share(pf);
    if (kTraceBuild) cp_async_wait<0>();  // the profiling build stamps when thread 0's copies of x have landed
    TRACE_MARK(5);
    gemv_stage_x_finish<F, IN>(eps, K, xk0, xn, gemv_smem);
    TRACE_MARK(2);

    for (;;) {  // one row group, or (kLoops) each of this block's row groups in turn
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
        if (active) {
            for (int c = lane; c < slice_chunks; c += 32 * U) {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int idx = c + 32 * u;
                    if (idx >= slice_chunks) continue;
#pragma unroll
                    for (int r = 0; r < R; r++) acc[r] = fmaf(F::dot(wv[r][u], gemv_smem, s0 + idx), sc[r][u], acc[r]);
                }
                load_batch(c + 32 * U);
            }
        }
        // The next group's first loads go out before this group's sums and write.
        const int done_row0 = row0;
        const bool done_active = active;
        bool more = false;
        if constexpr (kLoops) {
            rg += gridDim.x / S;
            more = rg < n_groups;
            if (more) {
                set_group(rg);
                load_batch(lane);
            }
        }
        if (done_active)
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
        if (KS > 1) {
            __shared__ float slice_sum[W][R];
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < R; r++) slice_sum[warp][r] = acc[r];
            __syncthreads();
            if (slice == 0 && lane == 0)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r] = 0.f;
                    for (int j = 0; j < KS; j++) acc[r] += slice_sum[warp + j][r];
                }
            if (more) __syncthreads();  // read before the next group's sums overwrite them
        }
#if __CUDA_ARCH__ >= 900
        if (S > 1) {
            __shared__ float partial[W][R];
            cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < R; r++) partial[warp][r] = acc[r];
            cluster.sync();
            if (part == 0 && lane == 0)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r] = 0.f;
                    for (int b = 0; b < S; b++) acc[r] += cluster.map_shared_rank(&partial[0][0], b)[warp * R + r];
                }
            cluster.sync();  // the other blocks' shared memory must outlive the reads
        }
#endif
        if (done_active && part == 0 && slice == 0 && lane == 0)
#pragma unroll
            for (int r = 0; r < R; r += 2)
                if (done_row0 + r < N)
                    gemv_write<OUT>(acc[r] * row_scale<F>(L, min(done_row0 + r, N - 1)) + row_bias(L, min(done_row0 + r, N - 1)),
                                    acc[r + 1] * row_scale<F>(L, min(done_row0 + r + 1, N - 1)) + row_bias(L, min(done_row0 + r + 1, N - 1)),
                                    &old_y[warp][r], done_row0 + r, N, y, y_bf16, ex.act);
        if (!more) break;
    }
    TRACE_MARK(3);
    TRACE_BARRIER();
    TRACE_MARK(4);
    TRACE_END(1, N, K);
}

// ---- launch: format dispatch, block size, checks ----

struct GemvDevice {
    int sms = 0;
    bool clusters = false;  // thread-block clusters (compute capability 9.0+)
};
inline const GemvDevice& gemv_device() {
    static GemvDevice d = [] {
        GemvDevice g;
        g.sms = sm_count();
        g.clusters = compute_capability_major() >= 9;
        return g;
    }();
    return d;
}

// How a projection's work is cut: S blocks of a cluster per row group, KS warps per group of R rows.
struct GemvLayout {
    int S = 1, KS = 1, R = 2;
};

// A fixed layout instead of the rule below (0: the rule); tools/bench_gemv and the tests use it.
inline GemvLayout& gemv_forced_layout() {
    static GemvLayout forced{0, 0, 0};
    return forced;
}

// The rule. R: wide row groups (4 rows per warp, FP8 and INT4: x is staged half as often) unless that needs a
// K split leaving fewer than 4 chunks per lane (4B int4 qkv, o and down went 10-50% slower with 4 rows and
// such a split; 8B fp8 qkv, o and down, with 4-12 chunks per lane, 3-5% faster). KS: the fewest warps per row group that make at least 1.5 blocks per SM, so that projections with
// few rows (Qwen3-4B's 2560-row o_proj and down_proj: 160 blocks of 16 rows for 132 SMs) are cut finely
// enough to spread evenly, while every lane keeps at least one 16-byte chunk of its slice. Measured with
// tools/bench_gemv (kb/log.md): 4B's o and down run best at KS = 2 (320 blocks), 8B's (256 blocks) at
// KS = 1, and more blocks than needed cost more staging of x. Clusters (S > 1) only when forced.
template <class F>
inline GemvLayout gemv_layout(int N, int K) {
    const GemvDevice& d = gemv_device();
    const int chunks = K / F::kPerChunk, wide_rows = F::kWideRows;
    auto fits = [&](int s, int ks) { return chunks % (s * ks) == 0 && chunks / (s * ks) >= 32; };
    auto enough_blocks = [&](int rows_per_block) { return 2 * CEIL_DIV(N, rows_per_block) >= 3 * d.sms; };
    auto split_k = [&](GemvLayout l) {
        const int warps = gemv_warps<F>(l.R);
        while (l.KS < 8 && warps % (2 * l.KS) == 0 && !enough_blocks(warps * l.R / l.KS) && fits(1, 2 * l.KS))
            l.KS *= 2;
        return l;
    };
    GemvLayout f = gemv_forced_layout();
    if (f.S || f.KS) {
        GemvLayout l{std::max(f.S, 1), std::max(f.KS, 1), f.R ? std::min(f.R, wide_rows) : 2};
        if (!d.clusters || l.KS > 1) l.S = 1;  // clusters need Hopper, and are not combined with KS
        if (!fits(l.S, l.KS) || gemv_warps<F>(l.R) % l.KS != 0) l.S = l.KS = 1;
        return l;
    }
    if (f.R) return split_k(GemvLayout{1, 1, std::min(f.R, wide_rows)});
    GemvLayout wide = split_k(GemvLayout{1, 1, wide_rows});
    if (wide.KS == 1 || chunks / wide.KS >= 4 * 32) return wide;  // a K split still leaves 4 chunks per lane
    return split_k(GemvLayout{1, 1, 2});
}

// The shared memory to launch kernel (blocks of `warps` warps) with: smem, or more if that is what holds it to
// kGemvMaxWarpsPerSm warps per SM (found once per kernel and size with the occupancy calculator, in 1 KB steps).
template <class Kernel>
inline size_t gemv_capped_smem(Kernel kernel, size_t smem, int warps) {
    static std::map<std::pair<const void*, size_t>, size_t> memo;
    auto key = std::make_pair(reinterpret_cast<const void*>(kernel), smem);
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
    size_t s = smem;
    for (;;) {
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, s));
        if (per_sm * warps <= kGemvMaxWarpsPerSm || s + 1024 > kGemvMaxSmem) break;
        s += 1024;
    }
    return memo[key] = s;
}

// Blocks for a kernel whose blocks loop over row groups: as few as take every group in equal shares of at
// most one resident wave's worth (608 groups on 264 resident slots: 203 blocks of 3 groups). ky: launch rows of the
// grid (the k experts of GemvExperts), which share the resident slots.
template <class Kernel>
inline int gemv_resident_grid(Kernel kernel, size_t smem, int groups, int warps, int ky = 1) {
    static std::map<std::pair<const void*, size_t>, int> resident_memo;
    int& resident = resident_memo[std::make_pair(reinterpret_cast<const void*>(kernel), smem)];
    if (resident == 0) {
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem));
        resident = std::max(per_sm, 1) * gemv_device().sms;
    }
    return CEIL_DIV(groups, CEIL_DIV(groups * ky, resident));
}

template <class F, GemvInput IN, GemvOutput OUT, int R, bool X>
inline void gemv_launch_rows(const Linear& L, const void* x, const bf16* norm_w, float eps, float* y, bf16* y_bf16, GemvLayout lay,
                             L2Prefetch pf, const GemvExperts& ex, cudaStream_t stream) {
    allow_dynamic_smem(gemv_kernel<F, IN, OUT, R, X>, kGemvMaxSmem);  // once per kernel, before any graph capture (eager warm-up)
    prefer_decode_carveout(gemv_kernel<F, IN, OUT, R, X>);
    const int S = lay.S, KS = lay.KS;
    size_t smem = gemv_smem_bytes<F, IN>(L.K, S);
    if (smem > kGemvMaxSmem) die("gemv: K = %d is too large for the shared-memory copy of x", L.K);
    constexpr int W = gemv_warps<F>(R);
    smem = gemv_capped_smem(gemv_kernel<F, IN, OUT, R, X>, smem, W);
    cudaLaunchConfig_t cfg = {};
    int groups = gemv_row_groups(L.N, R, KS, W), grid = groups * S;
    if (gemv_loops<OUT, R>() && S == 1) grid = gemv_resident_grid(gemv_kernel<F, IN, OUT, R, X>, smem, groups, W, X ? ex.k : 1);
    cfg.gridDim = dim3(grid, X ? ex.k : 1);
    cfg.blockDim = dim3(W * 32);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned n_attr = 0;
    if (S > 1) {
        attr[n_attr].id = cudaLaunchAttributeClusterDimension;
        attr[n_attr].val.clusterDim.x = S, attr[n_attr].val.clusterDim.y = 1, attr[n_attr].val.clusterDim.z = 1;
        n_attr++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = add_pdl_attribute(attr, n_attr);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_kernel<F, IN, OUT, R, X>, L, x, norm_w, eps, y, y_bf16, S, KS, pf, ex));
}

template <class F, GemvInput IN, GemvOutput OUT, bool X>
inline void gemv_launch_format(const Linear& L, const void* x, const bf16* norm_w, float eps, float* y, bf16* y_bf16,
                               L2Prefetch pf, const GemvExperts& ex, cudaStream_t stream) {
    GemvLayout lay = gemv_layout<F>(L.N * (X ? ex.k : 1), L.K);  // the k experts' rows share the GPU
    if constexpr (F::kWideRows == 4) {
        if (lay.R == 4) return gemv_launch_rows<F, IN, OUT, 4, X>(L, x, norm_w, eps, y, y_bf16, lay, pf, ex, stream);
    }
    gemv_launch_rows<F, IN, OUT, 2, X>(L, x, norm_w, eps, y, y_bf16, lay, pf, ex, stream);
}

// MX: MXFP4 weights are compiled in (the expert GEMVs of a family that publishes them: runtime/moe_layer.cuh); every
// other instantiation refuses them, so that engines without MXFP4 do not build its kernels.
template <GemvInput IN, GemvOutput OUT, bool X = false, bool MX = false>
inline void gemv_launch(const Linear& L, const void* x, const bf16* norm_w, float eps, float* y, bf16* y_bf16, cudaStream_t stream,
                        L2Prefetch pf = {}, const GemvExperts& ex = {}) {
    if (L.K % 8 != 0) die("gemv: K = %d must be a multiple of 8 (16-byte rows)", L.K);
    if (norm_w && reinterpret_cast<uintptr_t>(norm_w) % 16 != 0) die("gemv: the norm weights must be 16-byte aligned");
    if ((reinterpret_cast<uintptr_t>(L.w) | reinterpret_cast<uintptr_t>(x)) % 16 != 0) die("gemv: W and x must be 16-byte aligned");
    if (OUT == GemvOutput::SWIGLU_BF16 && L.N % 2 != 0) die("gemv: swiglu needs an even number of rows, got %d", L.N);
    if (L.fmt == WFormat::BF16) return gemv_launch_format<Bf16Weights, IN, OUT, X>(L, x, norm_w, eps, y, y_bf16, pf, ex, stream);
    if (L.fmt == WFormat::FP8) {
        if (L.K % 16 != 0 || L.kblock <= 0 || L.K % L.kblock != 0 || L.kblock % 16 != 0)
            die("gemv: fp8 needs K %% 16 == 0 and K %% kblock == 0 (K %d, kblock %d)", L.K, L.kblock);
        return gemv_launch_format<Fp8Weights, IN, OUT, X>(L, x, norm_w, eps, y, y_bf16, pf, ex, stream);
    }
    if (L.fmt == WFormat::MXFP4) {
        if constexpr (MX) {
            if (L.K % 32 != 0) die("gemv: mxfp4 needs K %% 32 == 0, got %d", L.K);
            return gemv_launch_format<Mxfp4Weights, IN, OUT, X>(L, x, norm_w, eps, y, y_bf16, pf, ex, stream);
        }
        die("gemv: mxfp4 weights in a GEMV built without them ('%s')", L.label);
    }
    if (L.K % kInt4Group != 0) die("gemv: int4 needs K %% 128 == 0, got %d", L.K);
    gemv_launch_format<Int4Weights, IN, OUT, X>(L, x, norm_w, eps, y, y_bf16, pf, ex, stream);
}

inline void gemv(const Linear& L, const bf16* x, float* y, cudaStream_t s) {
    gemv_launch<GemvInput::BF16, GemvOutput::STORE_F32>(L, x, nullptr, 0.f, y, nullptr, s);
}
inline void gemv_add(const Linear& L, const bf16* x, float* y, cudaStream_t s, L2Prefetch pf = {}) {
    gemv_launch<GemvInput::BF16, GemvOutput::ADD_F32>(L, x, nullptr, 0.f, y, nullptr, s, pf);
}
inline void gemv_rmsnorm(const Linear& L, const float* x, const bf16* norm_w, float eps, float* y, cudaStream_t s) {
    gemv_launch<GemvInput::F32_RMSNORM, GemvOutput::STORE_F32>(L, x, norm_w, eps, y, nullptr, s);
}
inline void gemv_rmsnorm_swiglu(const Linear& L, const float* x, const bf16* norm_w, float eps, bf16* h, cudaStream_t s,
                                L2Prefetch pf = {}) {
    gemv_launch<GemvInput::F32_RMSNORM, GemvOutput::SWIGLU_BF16>(L, x, norm_w, eps, nullptr, h, s, pf);
}
}  // namespace monocu
