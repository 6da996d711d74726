// ops/gemv_mxfp4.cuh — the chosen experts' batch-1 GEMV over MXFP4 weights on Hopper: the weights stream through
// shared memory by bulk copies, so that memory never waits on the arithmetic.
//
// Usage (runtime/moe_layer.cuh, for GPT-OSS's experts; the same arguments as ops/gemv.cuh's GemvExperts launches):
//   if (mxfp4_stream_fits(L)) mxfp4_experts_swiglu(L, ex, xn, h, stream);   // h[j] = glu of expert idx[j]'s rows on xn
//   if (mxfp4_stream_fits(L)) mxfp4_experts_store(L, ex, h, y, stream);     // y[j] = W_idx[j] h[j]
//
// Why a kernel of its own: GPT-OSS's expert rows are short (2,880 inputs: 1,440 bytes and 90 scales), and the GEMV of
// ops/gemv.cuh, where each warp loads its rows' chunks into registers and then converts and multiplies them, spends
// about as long on the arithmetic (five byte permutes and two HFMA2 per 4 weights) as on the loads, one after the
// other in every warp: gpt-oss-20b's gate_up read its 35 MB at 1.3 TB/s, down_proj its 18 MB at 1.0 TB/s (H200).
// Here one thread of each block is a producer: it copies whole items (16 rows of one expert, weights then scales,
// contiguous in memory) into a ring of shared-memory stages, each completing on its barrier, as far ahead as the ring
// allows; the 8 other warps multiply one stage while the next ones load. A warp owns 2 rows of a stage (gate and up
// for the SwiGLU), its lanes 16-byte chunks lane, lane + 32, ... of both.
//   - Work: the k experts' row groups of 16, in one list; block b takes a contiguous run of it (so that it
//     changes expert, and stages that expert's x, as rarely as possible), the grid as many blocks as are resident.
//   - x: staged in shared memory in fp16, times a power of two that puts its largest |x| in [1024, 2048), chunk c's
//     16 pairs as 4 quarters [q][c] (so that 32 lanes reading the same quarter of consecutive chunks touch every bank
//     once).
//   - Arithmetic (mx_dot): the codes become fp16 numbers by a shift and a mask, their signs flip x's; HFMA2 over a
//     block, fp32 across blocks (chunks lane, lane + 32, ..., then the warp's sum).
// Measured on gpt-oss-20b (H200, in the decode step from the previous kernel's end, kb/status.md): gate_up 22.9 -> 18.5
// us, down 15.0 -> 12.9 us with this arithmetic; the same kernel with ops/gemv.cuh's byte-permute lookup took as long as ops/gemv.cuh's own kernel,
// and with no arithmetic at all 12.9 and 9.1 us: what is left is the memory's start and the wait for the router.
// Shapes it takes (mxfp4_stream_fits): Hopper, rows a multiple of 16, K a multiple of 32 (an item's scales are then
// K / 2 bytes, a multiple of 16 as the copies need), weights and scales 16-byte aligned, at least two stages in the
// block's shared memory (K up to ~4,300; gpt-oss's 2,880 gets three). Others go to ops/gemv.cuh.
#pragma once

#include "gpu/tma.cuh"
#include "ops/gemv.cuh"

namespace monocu {

constexpr int kMxRows = 16;                 // rows per item (one stage of the ring)
constexpr int kMxWarps = 8;                 // multiplying warps; one more warp holds the producer
constexpr int kMxMaxStages = 4;
constexpr size_t kMxBlockSmem = 80 * 1024;  // two blocks per SM under the decode carveout (gpu/pdl.cuh: 164 KB)

// For the tests: off sends every shape to ops/gemv.cuh's kernel; blocks > 0 fixes the grid (a small
// grid makes each block go round its ring several times).
struct Mxfp4Stream {
    bool on = true;
    int blocks = 0;
};
inline Mxfp4Stream& mxfp4_stream() {
    static Mxfp4Stream s;
    return s;
}

struct MxLayout {
    int stage_w = 0, stage_bytes = 0, stage_stride = 0, stages = 0;
    size_t smem = 0;
};
__host__ __device__ inline MxLayout mx_layout(int K) {
    MxLayout l;
    l.stage_w = kMxRows * K / 2;
    l.stage_bytes = l.stage_w + kMxRows * K / 32;
    l.stage_stride = (l.stage_bytes + 127) / 128 * 128;
    const size_t x_bytes = (size_t)K * 2;
    l.stages = x_bytes >= kMxBlockSmem ? 0 : (int)std::min<size_t>(kMxMaxStages, (kMxBlockSmem - x_bytes) / l.stage_stride);
    l.smem = (size_t)l.stages * l.stage_stride + x_bytes;
    return l;
}

// x staged: chunk c's 32 values as 4 quarters [q][c] of 16 bytes, quarter q holding elements 8q .. 8q + 7 as the fp16
// pairs (8q + i, 8q + i + 4), i = 0 .. 3, times x_scale (a power of two: mx_x_scale).
__device__ __forceinline__ void mx_stage_quarter(uint4* dst, const bf16* x8, float x_scale) {
    float v[8];
    bf16x8_to_float(*reinterpret_cast<const uint4*>(x8), v);
    uint4 r;
    __half2* p = reinterpret_cast<__half2*>(&r);
#pragma unroll
    for (int i = 0; i < 4; i++) p[i] = __floats2half2_rn(v[i] * x_scale, v[i + 4] * x_scale);
    *dst = r;
}

// The power of two that brings the largest |x| into [1024, 2048): products (at most 6 x 2^-14 x 2048) and a block's
// sums stay far from fp16's overflow (65,504) however large x is, and ordinary values of x stay in its normal range.
__device__ __forceinline__ float mx_x_scale(float amax) {
    if (!(amax > 0.f) || !isfinite(amax)) return 1.f;
    const int e = (int)((__float_as_uint(amax) >> 23) & 0xFF) - 127;  // amax in [2^e, 2^(e + 1)) (normal floats)
    return exp2f((float)max(-126, min(127, 10 - e)));
}

// One MXFP4 block (32 E2M1 codes, element 8j + n in nibble n of word j) dotted with its staged x: the sum of code x
// x_scale x 2^-14. Why the 2^-14: a code's 3 magnitude bits (e1 e0 m), moved to bits 9-11 of an fp16 number, are its
// exponent's two low bits and its mantissa's top bit, and that number is the code's value (0, 0.5, 1, 1.5, 2, 3, 4, 6)
// times 2^-14 exactly, subnormals (e = 0) included. One shift and one mask place the magnitudes of nibbles i and i + 4
// (bits 4i .. and 4i + 16 ..) in both halves of a word at once; their signs flip x's instead (one shift, then a mask
// and an xor in one instruction). Per 8 weights: ~15 integer instructions and 4 HFMA2, against ~20 (10 byte permutes,
// which issue at a lower rate) for ops/gemv.cuh's lookup: gpt-oss-20b decode 509 -> 551 tok/s (H200).
__device__ __forceinline__ float mx_dot(uint4 w, const uint4* xq) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(&w);
    const uint32_t* xv = reinterpret_cast<const uint32_t*>(xq);
    __half2 acc[2] = {__float2half2_rn(0.f), __float2half2_rn(0.f)};
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t mag = (i < 3 ? p[j] << (9 - 4 * i) : p[j] >> 3) & 0x0E000E00u;
            const uint32_t xs = xv[4 * j + i] ^ ((i < 3 ? p[j] << (12 - 4 * i) : p[j]) & 0x80008000u);
            acc[i & 1] = __hfma2(*reinterpret_cast<const __half2*>(&mag), *reinterpret_cast<const __half2*>(&xs), acc[i & 1]);
        }
    const float2 a = __half22float2(acc[0]), b = __half22float2(acc[1]);
    return (a.x + a.y) + (b.x + b.y);
}

// E8M0: 2^(e - 127) (e = 255, NaN in the format, is read as 2^128 = inf).
__device__ __forceinline__ float mx_block_scale(uint32_t e) { return e ? __uint_as_float(e << 23) : __uint_as_float(0x00400000u); }

template <GemvOutput OUT>
__global__ void __launch_bounds__((kMxWarps + 1) * 32)
    mxfp4_experts_kernel(int N, int K, const bf16* __restrict__ x_in, float* __restrict__ y, bf16* __restrict__ y_bf16, GemvExperts ex) {
#if __CUDA_ARCH__ >= 900
    TRACE_BEGIN();
    extern __shared__ __align__(128) unsigned char mx_smem[];
    __shared__ uint64_t full[kMxMaxStages], empty[kMxMaxStages];
    const MxLayout lay = mx_layout(K);
    const int chunks = K / 32, row_bytes = K / 2, groups = N / kMxRows;
    uint4* xs = reinterpret_cast<uint4*>(mx_smem + (size_t)lay.stages * lay.stage_stride);  // [4][chunks]
    const int items = ex.k * groups;
    const int begin = (int)((long)items * blockIdx.x / gridDim.x), end = (int)((long)items * (blockIdx.x + 1) / gridDim.x);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < lay.stages; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], kMxWarps);
        mbar_init_fence();
    }
    __syncthreads();
    pdl_launch_dependents();
    pdl_wait();  // the router's choice, and x, come from the kernels before
    TRACE_MARK(1);

    if (warp == kMxWarps) {  // the producer: item after item into the ring, as soon as a stage is free
        if (lane == 0)
            for (int t = begin; t < end; t++) {
                const int i = t - begin, s = i % lay.stages, j = t / groups, g = t % groups, e = ex.idx[j];
                mbar_wait(&empty[s], ((i / lay.stages) & 1) ^ 1);
                unsigned char* dst = mx_smem + (size_t)s * lay.stage_stride;
                mbar_expect_tx(&full[s], lay.stage_bytes);
                bulk_load(dst, static_cast<const uint8_t*>(ex.w[e]) + (size_t)g * lay.stage_w, lay.stage_w, &full[s]);
                bulk_load(dst + lay.stage_w, static_cast<const uint8_t*>(ex.scale[e]) + (size_t)g * (lay.stage_bytes - lay.stage_w),
                          lay.stage_bytes - lay.stage_w, &full[s]);
            }
        return;
    }

    const int r0 = 2 * warp;  // this warp's two rows of each item
    __shared__ float x_max[kMxWarps];
    int cur_j = -1;
    float x_back = 1.f;
    const bf16* bias = nullptr;
    for (int t = begin; t < end; t++) {
        const int i = t - begin, s = i % lay.stages, j = t / groups, g = t % groups;
        if (j != cur_j) {  // this expert's x, once the warps are done with the last one's: its largest |x|, then x
            const bf16* xj = reinterpret_cast<const bf16*>(reinterpret_cast<const uint8_t*>(x_in) + j * ex.x_stride);
            float amax = 0.f;
            for (int c = threadIdx.x; c < K / 8; c += kMxWarps * 32) {
                float v[8];
                bf16x8_to_float(*reinterpret_cast<const uint4*>(xj + 8 * c), v);
#pragma unroll
                for (int n = 0; n < 8; n++) amax = fmaxf(amax, fabsf(v[n]));
            }
            amax = warp_max(amax);
            if (cur_j >= 0) named_barrier(1, kMxWarps * 32);
            if (lane == 0) x_max[warp] = amax;
            named_barrier(1, kMxWarps * 32);
            amax = x_max[0];
            for (int w = 1; w < kMxWarps; w++) amax = fmaxf(amax, x_max[w]);
            const float x_scale = mx_x_scale(amax);
            x_back = 16384.f / x_scale;  // (x_scale 2^-14 undone: a power of two, exact)
            for (int c = threadIdx.x; c < chunks; c += kMxWarps * 32)
#pragma unroll
                for (int q = 0; q < 4; q++) mx_stage_quarter(xs + (size_t)q * chunks + c, xj + 32 * c + 8 * q, x_scale);
            named_barrier(1, kMxWarps * 32);
            cur_j = j;
            bias = ex.bias ? static_cast<const bf16*>(ex.bias[ex.idx[j]]) : nullptr;
        }
        mbar_wait(&full[s], (i / lay.stages) & 1);
        const unsigned char* st = mx_smem + (size_t)s * lay.stage_stride;
        const uint4* w0 = reinterpret_cast<const uint4*>(st + r0 * row_bytes);
        const uint4* w1 = reinterpret_cast<const uint4*>(st + (r0 + 1) * row_bytes);
        const uint8_t* sc = st + lay.stage_w + r0 * chunks;
        float acc0 = 0.f, acc1 = 0.f;
        for (int c = lane; c < chunks; c += 32) {
            uint4 xq[4];
#pragma unroll
            for (int q = 0; q < 4; q++) xq[q] = xs[(size_t)q * chunks + c];
            acc0 = fmaf(mx_dot(w0[c], xq), mx_block_scale(sc[c]), acc0);
            acc1 = fmaf(mx_dot(w1[c], xq), mx_block_scale(sc[chunks + c]), acc1);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);  // (every lane's reads of the stage are done: their sums are in)
        acc0 = warp_sum(acc0) * x_back, acc1 = warp_sum(acc1) * x_back;
        if (lane == 0) {
            const int row = g * kMxRows + r0;
            const float a0 = acc0 + (bias ? __bfloat162float(bias[row]) : 0.f), a1 = acc1 + (bias ? __bfloat162float(bias[row + 1]) : 0.f);
            if constexpr (OUT == GemvOutput::SWIGLU_BF16) {
                y_bf16[j * ex.y_stride + row / 2] = __float2bfloat16_rn(glu(a0, a1, ex.act));
            } else {
                y[j * ex.y_stride + row] = a0, y[j * ex.y_stride + row + 1] = a1;
            }
        }
    }
    TRACE_MARK(3);
    TRACE_MARK(4);  // (thread 0's rows: the producer warp is gone, so no barrier of the block's warps)
    TRACE_END(1, N * ex.k, K);
#endif
}

// Whether L's shape (any one expert's) runs here: Hopper, whole items, 16-byte runs of weights and of scales.
inline bool mxfp4_stream_fits(const Linear& L) {
    if (!mxfp4_stream().on || L.fmt != WFormat::MXFP4 || !gemv_device().clusters) return false;
    if (L.N % kMxRows != 0 || L.K % 32 != 0) return false;
    if ((reinterpret_cast<uintptr_t>(L.w) | reinterpret_cast<uintptr_t>(L.scale)) % 16 != 0) return false;
    return mx_layout(L.K).stages >= 2;
}

template <GemvOutput OUT>
inline void mxfp4_experts_launch(const Linear& L, const GemvExperts& ex, const bf16* x, float* y, bf16* y_bf16, cudaStream_t stream) {
    if (!mxfp4_stream_fits(L)) die("internal: mxfp4_experts_launch on a shape it does not take (N %d, K %d)", L.N, L.K);
    const MxLayout lay = mx_layout(L.K);
    auto kernel = mxfp4_experts_kernel<OUT>;
    allow_dynamic_smem(kernel, lay.smem);
    prefer_decode_carveout(kernel);  // (before the occupancy is asked for)
    const int items = ex.k * (L.N / kMxRows);
    int grid = gemv_resident_grid(kernel, lay.smem, items, kMxWarps + 1);  // equal runs of items, one resident wave
    if (mxfp4_stream().blocks > 0) grid = std::min(items, mxfp4_stream().blocks);
    launch(kernel, dim3(grid), dim3((kMxWarps + 1) * 32), lay.smem, stream, L.N, L.K, x, y, y_bf16, ex);
}

//   h[j] = glu(gate, up) of expert idx[j]'s rows (2i, 2i + 1) on xn       xn bf16 [K], h bf16 [k][N / 2]
inline void mxfp4_experts_swiglu(const Linear& L, GemvExperts ex, const bf16* xn, bf16* h, cudaStream_t s) {
    ex.x_stride = 0, ex.y_stride = (size_t)L.N / 2;
    mxfp4_experts_launch<GemvOutput::SWIGLU_BF16>(L, ex, xn, nullptr, h, s);
}
//   y[j] = W_idx[j] h[j]                                                   h bf16 [k][K], y float [k][N]
inline void mxfp4_experts_store(const Linear& L, GemvExperts ex, const bf16* h, float* y, cudaStream_t s) {
    ex.x_stride = (size_t)L.K * 2, ex.y_stride = (size_t)L.N;
    mxfp4_experts_launch<GemvOutput::STORE_F32>(L, ex, h, y, nullptr, s);
}

}  // namespace monocu
