// bench_persistent — can a persistent kernel stream a layer's weights across its hand-overs? (a
// microbenchmark and prototype for issue 6's open option (b); not a test, not used by the engines)
//
//   build/sm_90/tools/bench_persistent [layers]      Qwen3-4B shapes, FP8 weights (1 x 128 scales); Hopper only
//
// The four projections of a Qwen3 decoder layer run in the decode step's order and with its epilogues,
// `layers` times over 8 weight sets (833 MB, so that every weight comes from HBM). Two ways:
//   - the engine's path: gemv.cuh's kernels, chained with programmatic dependent launch in one CUDA graph
//     (qkv with the fused RMSNorm, o_proj adding into the residual, gate_up with RMSNorm and SwiGLU,
//     down_proj adding into the residual; o and gate_up warm L2 as the engine does);
//   - one persistent kernel for all layers, one block per SM. A producer warp copies this SM's rows of
//     every projection, layer after layer, into a ring of shared-memory slots with Hopper's bulk copies
//     (cp.async.bulk, an mbarrier per slot). It never waits for data, only for a free slot, so it can
//     stream on across the hand-overs. Consumer warps dot each slot with x. A hand-over is a counter per
//     projection: each block adds 1 (release) once its rows are written, and thread 0 of the next
//     projection polls it (acquire) until every block has. Then the consumers copy the input vector in.
//     (Or, kFlagsInData, the outputs carry their own flags and the readers poll the data.)
// The eighth session's persistent chain (kb/log.md) met at a grid barrier, and each of its seams cost ~7 us.
// This one asks whether a counter instead of the barrier, and a ring that runs ahead, hide the seams.
// The attention is not in it: the o projection reads a fixed vector (in the step, the attention's output).
//
// What it measured (H100, kb/log.md "Nineteenth session"): no. With 8 consumer warps and gemv.cuh's dot it took
// 57.4 us per layer, against the PDL chain's 44.6. The diagnostic modes (their outputs are wrong) say why:
//   - with the dot products left out, 49.3 us against 34.8 for the bare stream through the ring: 3.6 us per
//     hand-over that the ring does not hide, against the chain's 2.4 with its arithmetic. A release waits
//     until the block's writes have landed, and those writes, the poll and the input copy all queue behind
//     the SM's own weight stream; a deeper ring hides more but delays them as much. Flags inside the data
//     (kFlagsInData, outputs correct) only move the wait from the writer to the reader: 56.3 / 49.0 us;
//   - with no hand-overs, 46.7 us: the consumers set the pace (the producer waits 35 us per layer for a free
//     slot, they wait ~2 us for a full one). More consumer warps are slower, and dot variants 0-2 were all
//     slower than gemv.cuh's own (variant 3).
//
// Prints us per layer, GB/s and % of the copy bandwidth for each way and mode, the producer's and the
// consumers' waits, the largest relative difference between the outputs of the two ways, and where a
// persistent block's time goes at each hand-over (median over blocks and layers, from %globaltimer stamps).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gemv.cuh"
#include "quant.cuh"
#include "timing.cuh"

// The device code needs compute capability 9.0 (bulk copies, mbarrier transactions); below it the kernel is
// empty (main refuses such GPUs), so that `make ARCH=sm_80` still builds every tool.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define SM90_DEVICE_CODE 1
#else
#define SM90_DEVICE_CODE 0
#pragma nv_diag_suppress 177  // the kernel is empty here, so the schedule's helpers go unused
#endif

using namespace monocu;

namespace {

constexpr int kHidden = 2560, kInter = 9728, kQkv = 6144, kAttn = 4096;
constexpr int kSets = 8;           // weight sets, rotated: 8 x 104 MB never fit in the 50 MB L2
constexpr int kOps = 4;            // qkv, o, gate_up, down
constexpr int kMaxSlots = 7;
constexpr int kSlotBytes = 24 * 1024;  // a tile: whole rows of weights, then their scales
constexpr int kMaxK = kInter;          // the widest input (down_proj's)
constexpr int kMaxRowsPerBlock = 160;  // gate_up: 19456 rows / 132 SMs = 148
constexpr int kMaxParts = 16;
constexpr int kMaxConsumerWarps = 24;
constexpr int kStamps = 5;             // per block and projection: start, counter seen, x landed, x staged, tiles done
constexpr float kEps = 1e-6f;

enum Op { QKV = 0, O = 1, GATE_UP = 2, DOWN = 3 };

struct LayerDesc {
    Linear p[kOps];  // FP8, kblock 128: e4m3 [N][K], float scales [N][K / 128]
    const bf16* norm1;  // before qkv
    const bf16* norm2;  // before gate_up
};

struct PersistentArgs {
    LayerDesc sets[kSets];
    int layers, slots;
    float* r;             // residual stream [kHidden], f32
    float* y_qkv;         // [kQkv]
    const bf16* a;        // the o projection's input [kAttn] (the attention's output in the step)
    bf16* h;              // SwiGLU output [kInter]
    unsigned* done;       // [layers * kOps] counters, zeroed before each launch
    unsigned long long* stamps;  // [gridDim.x][layers * kOps][kStamps] or null
    unsigned long long* producer_wait;  // [gridDim.x]: ns the producer spent waiting for a free slot
    unsigned long long* consumer_wait;  // [gridDim.x]: ns consumer warp 0 spent waiting for a full slot
    int mode;  // 0, or diagnostics whose outputs are wrong (bits below), or kFlagsInData
    // kFlagsInData: the residual and the SwiGLU output also go out as 8-byte words {value, flag} (flag_of)
    unsigned long long* r_words;  // [kHidden]: an f32 each
    unsigned long long* h_words;  // [kInter / 2]: a bf16 pair each
    unsigned epoch;               // this launch's number, in every flag it writes
};
// kNoDots: slots are released unread. kNoSeams: no counts, waits or input copies after the first projection.
// kNoWeightReads: every lane reads the same 16 bytes of its row (its dot products otherwise as they are).
// kFlagsInData (correct outputs): the hand-overs into gate_up, down and the next qkv carry their flags inside
// the data, as NCCL's LL protocol does: the writer stores {value, flag} as one 8-byte word with no release,
// and the reader polls the words themselves until every flag is the writer's. This removes the release (which
// waits for the writes to land) and the counter's round trip. The hand-over into o keeps the counter (in the
// step the attention sits there, and o must not overwrite the residual before every qkv has read it).
constexpr int kNoDots = 1, kNoSeams = 2, kNoWeightReads = 4, kFlagsInData = 8;

// The flag projection q of this launch writes (never 0xFFFFFFFF, the fill of a fresh allocation).
__host__ __device__ constexpr unsigned flag_of(unsigned epoch, int q) { return epoch << 10 | (unsigned)(q + 1); }

// ---- Hopper's bulk copies and mbarriers (empty below compute capability 9.0, where main refuses to run) ----

#if SM90_DEVICE_CODE

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n"
        "WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT_%=;\n}" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
// bytes from global to shared memory, completing on bar; 16-byte aligned, a multiple of 16. Weights are
// read once: evict-first in L2, as the GEMVs' loads.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
        : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// 8-byte words whose flag and value travel together (a 64-bit access is single-copy atomic); through L2.
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_relaxed_u64(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// The CW consumer warps only (the producer warp never joins): named barrier 1.
template <int CW>
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(CW * 32) : "memory"); }
#endif

// ---- the static schedule both roles walk ----

// This block's rows of a projection: an even share (for gate_up, groups of 4 rows: two SwiGLU outputs, one
// 8-byte word of kFlagsInData).
struct RowRange {
    int r0, rows;
};
__host__ __device__ constexpr int row_unit(int op) { return op == GATE_UP ? 4 : 1; }
__device__ __forceinline__ RowRange block_rows(int N, int op, int b = blockIdx.x) {
    const int unit = row_unit(op), units = N / unit, G = gridDim.x;
    const int base = units / G, rem = units % G;
    const int u0 = b * base + min(b, rem), nu = base + (b < rem ? 1 : 0);
    return RowRange{u0 * unit, nu * unit};
}
// Warps sharing a row (each a part of K): the fewest that give each of the CW consumer warps a unit of work
// in a slot, while every lane keeps a chunk.
__host__ __device__ constexpr int row_parts(int K, int CW) {
    const int fit = kSlotBytes / (K + K / 128 * 4);
    int p = 1;
    while (p < kMaxParts && fit * p < CW && (K / 16) % (2 * p) == 0 && K / 16 / (2 * p) >= 32) p *= 2;
    return p;
}
// Whole rows per slot, weights and their scales: a multiple of CW / parts where that fits, so that the
// units of a tile (row, part) fall evenly on the warps; even for gate_up's (gate, up) pairs.
__host__ __device__ constexpr int tile_rows(int K, int op, int CW) {
    const int fit = kSlotBytes / (K + K / 128 * 4), step = CW / row_parts(K, CW);
    int r = fit >= step ? fit - fit % step : fit;
    return op == GATE_UP ? r - r % 2 : r;
}

// Projection q (= layer * kOps + op) of the run, as this block takes it: its layer's weights, its rows, and
// its rows per slot. The producer and the consumers walk q = 0, 1, ... in the same order.
struct ProjectionStep {
    const LayerDesc* layer;
    const Linear* P;
    int op, tile_rows;
    RowRange rows;
};
template <int CW>
__device__ __forceinline__ ProjectionStep projection_step(const PersistentArgs& a, int q) {
    const LayerDesc* L = &a.sets[q / kOps % kSets];
    const int op = q % kOps;
    const Linear* P = &L->p[op];
    return ProjectionStep{L, P, op, tile_rows(P->K, op, CW), block_rows(P->N, op)};
}

struct Smem {
    uint64_t full[kMaxSlots], empty[kMaxSlots];
    float partial[kMaxRowsPerBlock][kMaxParts];
    float old[kMaxRowsPerBlock];
    float red[kMaxConsumerWarps];
    alignas(16) unsigned char raw[kMaxK * 2];     // the input as copied: bf16 [K], or f32 [kHidden] for the norm
    alignas(16) bf16 norm_w[kHidden];
    alignas(16) __half staged[kMaxK];             // x as the FP8 dot reads it (staged_index)
    alignas(128) unsigned char ring[kMaxSlots][kSlotBytes];
};

#if SM90_DEVICE_CODE
// ---- producer: every tile of every projection of every layer, in order ----

template <int CW>
__device__ void produce(const PersistentArgs& a, Smem& s) {
    unsigned it = 0;
    unsigned long long waited = 0;
    for (int q = 0; q < a.layers * kOps; q++) {
        const ProjectionStep ps = projection_step<CW>(a, q);
        const int K = ps.P->K, nkb = K / 128;
        const uint8_t* w = static_cast<const uint8_t*>(ps.P->w);
        const float* scale = static_cast<const float*>(ps.P->scale);
        for (int t0 = 0; t0 < ps.rows.rows; t0 += ps.tile_rows, it++) {
            const int slot = it % a.slots, use = it / a.slots, rows = min(ps.tile_rows, ps.rows.rows - t0), row = ps.rows.r0 + t0;
            if (use > 0) {
                const unsigned long long t = global_timer_ns();
                mbar_wait(&s.empty[slot], (use - 1) & 1);
                waited += global_timer_ns() - t;
            }
            const unsigned wbytes = rows * K, sbytes = rows * nkb * 4;
            mbar_expect_tx(&s.full[slot], wbytes + sbytes);
            bulk_copy(s.ring[slot], w + (size_t)row * K, wbytes, &s.full[slot]);
            bulk_copy(s.ring[slot] + wbytes, scale + (size_t)row * nkb, sbytes, &s.full[slot]);
        }
    }
    a.producer_wait[blockIdx.x] = waited;
}

// ---- consumers ----

// kFlagsInData: the input of projection q - 1's writers, in two steps. Warp 0 polls one word per writer block
// (its last row's), all at once and again until each carries the writer's flag; then every thread reads its
// words once, re-reading in batches any whose flag is not there yet (relaxed stores land in any order), and
// puts the values into s.raw as fetch_input would copy them.
template <int CW>
__device__ void fetch_words(const PersistentArgs& a, Smem& s, int q, bool from_h, const bf16* norm_w, unsigned long long* st) {
    constexpr int kMaxPerThread = (kInter / 2 + CW * 32 - 1) / (CW * 32), kMaxWritersPerLane = 8;
    const int t = threadIdx.x, T = CW * 32, n = from_h ? kInter / 2 : kHidden, writer_op = (q - 1) % kOps;
    const int writer_n = from_h ? 2 * kInter : kHidden, rows_per_word = from_h ? 4 : 1;
    const unsigned long long* src = from_h ? a.h_words : a.r_words;
    const unsigned flag = flag_of(a.epoch, q - 1);
    if (norm_w) {
        for (unsigned i = t * 16; i < kHidden * 2; i += T * 16)
            cp_async_16(reinterpret_cast<unsigned char*>(s.norm_w) + i, reinterpret_cast<const unsigned char*>(norm_w) + i);
        cp_async_commit();
    }
    if (t < 32) {
        int idx[kMaxWritersPerLane];
        bool ready[kMaxWritersPerLane];
#pragma unroll
        for (int j = 0; j < kMaxWritersPerLane; j++) {
            const int b = t + 32 * j;
            const RowRange rr = b < (int)gridDim.x ? block_rows(writer_n, writer_op, b) : RowRange{0, 0};
            idx[j] = (rr.r0 + rr.rows) / rows_per_word - 1;
            ready[j] = rr.rows == 0;
        }
        for (;;) {
            unsigned long long w[kMaxWritersPerLane];
#pragma unroll
            for (int j = 0; j < kMaxWritersPerLane; j++)
                if (!ready[j]) w[j] = ld_relaxed_u64(src + idx[j]);
            bool all = true;
#pragma unroll
            for (int j = 0; j < kMaxWritersPerLane; j++)
                if (!ready[j]) ready[j] = (unsigned)(w[j] >> 32) == flag, all = all && ready[j];
            if (__all_sync(0xffffffffu, all)) break;
        }
    }
    consumers_sync<CW>();
    if (st && threadIdx.x == 0) st[1] = global_timer_ns();
    unsigned* raw = reinterpret_cast<unsigned*>(s.raw);
    unsigned long long w[kMaxPerThread];
    bool ready[kMaxPerThread];
#pragma unroll
    for (int j = 0; j < kMaxPerThread; j++) {
        ready[j] = t + j * T >= n;
        if (!ready[j]) w[j] = ld_relaxed_u64(src + t + j * T);
    }
    for (;;) {
        bool all = true;
#pragma unroll
        for (int j = 0; j < kMaxPerThread; j++)
            if (!ready[j]) {
                ready[j] = (unsigned)(w[j] >> 32) == flag;
                if (ready[j]) raw[t + j * T] = (unsigned)w[j];
                all = all && ready[j];
            }
        if (all) break;
#pragma unroll
        for (int j = 0; j < kMaxPerThread; j++)
            if (!ready[j]) w[j] = ld_relaxed_u64(src + t + j * T);
    }
    if (norm_w) cp_async_wait<0>();
    consumers_sync<CW>();
    if (st && threadIdx.x == 0) st[2] = global_timer_ns();
}

// Waits until every block has finished projection q - 1 (thread 0 polls), then copies the projection's input
// into shared memory (and the norm weights where it has a norm): 16-byte cp.async through L2 by every
// consumer thread. (One bulk copy of x queued behind the producer's weight copies in the SM's copy unit:
// ~1 us.) Copies skip L1, which may hold an older x.
template <int CW>
__device__ void fetch_input(const PersistentArgs& a, Smem& s, int q, const void* x, unsigned x_bytes, const bf16* norm_w,
                            unsigned long long* st) {
    if (q > 0 && (a.mode & kNoSeams)) return;
    if (q > 0 && (a.mode & kFlagsInData) && q % kOps != O) return fetch_words<CW>(a, s, q, q % kOps == DOWN, norm_w, st);
    if (threadIdx.x == 0 && q > 0)
        while (ld_acquire(&a.done[q - 1]) < gridDim.x) {
        }
    consumers_sync<CW>();
    if (st && threadIdx.x == 0) st[1] = global_timer_ns();
    const int t = threadIdx.x, T = CW * 32;
    for (unsigned i = t * 16; i < x_bytes; i += T * 16) cp_async_16(s.raw + i, static_cast<const unsigned char*>(x) + i);
    if (norm_w)
        for (unsigned i = t * 16; i < kHidden * 2; i += T * 16)
            cp_async_16(reinterpret_cast<unsigned char*>(s.norm_w) + i, reinterpret_cast<const unsigned char*>(norm_w) + i);
    cp_async_commit();
    cp_async_wait<0>();
    consumers_sync<CW>();
    if (st && threadIdx.x == 0) st[2] = global_timer_ns();
}

// Where element i of x goes in shared memory (in halves), per dot-product variant DV:
//   0: in order (gemv.cuh's layout: a chunk's 16 halves together, so lanes read 32 bytes apart: 2-way
//      bank conflicts for 16-byte reads);
//   1: a chunk's two 16-byte halves in separate rows of 32 chunks, so that 32 lanes reading 32 consecutive
//      chunks read 512 contiguous bytes (no conflicts);
//   2: as 1, and inside each 4 elements in the order (0, 2)(1, 3) that the integer conversion yields;
//   3: as 0, read by gemv.cuh's own Fp8Weights::dot, one chunk per loop step (this prototype's first version).
template <int DV>
__device__ __forceinline__ int staged_index(int i) {
    const int c = i / 16, e = i % 16;
    if (DV == 0 || DV == 3) return i;
    const int pos = DV == 1 ? e : (e / 4) * 4 + (e % 2) * 2 + (e % 4) / 2;  // position inside the chunk's 16
    return ((c / 32) * 64 + (pos / 8) * 32 + c % 32) * 8 + pos % 8;
}

// x into the FP8 dot's form: fp16 (times kFp8XScale for the cvt variants, as gemv.cuh's Fp8Weights::stage8),
// after the RMSNorm rounded to bf16 as gemv.cuh rounds it.
template <int CW, int DV>
__device__ void stage_input(Smem& s, int K, bool norm) {
    const float xs = DV == 2 ? 1.f : kFp8XScale;
    const int t = threadIdx.x, T = CW * 32;
    float inv = 1.f;
    if (norm) {
        const float* x = reinterpret_cast<const float*>(s.raw);
        float ss = 0.f;
        for (int i = t; i < K; i += T) ss += x[i] * x[i];
        ss = warp_sum(ss);
        if ((t & 31) == 0) s.red[t >> 5] = ss;
        consumers_sync<CW>();
        float tot = 0.f;
        for (int w = 0; w < CW; w++) tot += s.red[w];
        inv = rsqrtf(tot / K + kEps);
        for (int i = t; i < K; i += T)
            s.staged[staged_index<DV>(i)] = __float2half_rn(__bfloat162float(__float2bfloat16_rn(x[i] * inv * __bfloat162float(s.norm_w[i]))) * xs);
    } else {
        const bf16* x = reinterpret_cast<const bf16*>(s.raw);
        for (int i = t; i < K; i += T) s.staged[staged_index<DV>(i)] = __float2half_rn(__bfloat162float(x[i]) * xs);
    }
    consumers_sync<CW>();
}

// Fp8Weights::dot with x read as two 16-byte words: its eight 4-byte reads put lanes 32 bytes apart on the
// same banks (8-way conflicts; the eighth session's chain lost 12% to them). Same arithmetic, same order.
// Variant 2 converts with integer operations instead of cvt: an e4m3 byte s.eeee.mmm placed as the high byte
// of a half and its 7 magnitude bits shifted right by one is the half s.0eeee.mmm0000000, which is the e4m3
// value times 2^-8 (exponent bias 15 against 7), subnormals included. x is then staged unscaled, so the
// products are the same numbers as w * (x * 2^-8).
template <int DV>
__device__ __forceinline__ float fp8_dot(uint4 w, const __half* xs, int chunk) {
    uint4 xv[2];
    if (DV == 0) {
        const uint4* xp = reinterpret_cast<const uint4*>(xs + chunk * 16);
        xv[0] = xp[0], xv[1] = xp[1];
    } else {
        const uint4* xp = reinterpret_cast<const uint4*>(xs) + (chunk / 32) * 64 + chunk % 32;
        xv[0] = xp[0], xv[1] = xp[32];
    }
    const __half2* x = reinterpret_cast<const __half2*>(xv);
    __half2 acc = __float2half2_rn(0.f);
    if (DV < 2) {
        const uint16_t* p = reinterpret_cast<const uint16_t*>(&w);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(p[k]), __NV_E4M3);
            acc = __hfma2(*reinterpret_cast<__half2*>(&h), x[k], acc);
        }
    } else {
        const uint32_t* p = reinterpret_cast<const uint32_t*>(&w);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t odd = p[k] & 0xFF00FF00u, even = (p[k] << 8) & 0xFF00FF00u;  // bytes (1, 3) and (0, 2) as high bytes
            const uint32_t he = (even & 0x80008000u) | ((even & 0x7F007F00u) >> 1), ho = (odd & 0x80008000u) | ((odd & 0x7F007F00u) >> 1);
            acc = __hfma2(*reinterpret_cast<const __half2*>(&he), x[2 * k], acc);
            acc = __hfma2(*reinterpret_cast<const __half2*>(&ho), x[2 * k + 1], acc);
        }
    }
    float2 f = __half22float2(acc);
    return (f.x + f.y) * (1.f / kFp8XScale);
}

// One tile: `rows` rows of K e4m3 weights, then their float scales per 128. Unit u = (row, part) to warp
// u % CW; the part's sum goes to s.partial. A lane's chunks are read 4 at a time before they are used
// (variant 3: one at a time, as the first version did).
template <int CW, int DV>
__device__ __forceinline__ void consume_tile(Smem& s, const unsigned char* tile, int rows, int row_in_op, int K, int parts, bool no_weight_reads) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunks = K / 16, pc = chunks / parts, nkb = K / 128;
    const float* scales = reinterpret_cast<const float*>(tile + (size_t)rows * K);
    for (int u = warp; u < rows * parts; u += CW) {
        const int row = u / parts, part = u % parts, end = (part + 1) * pc;
        // kNoWeightReads (diagnostic): every unit reads one 16-byte chunk of its row for all of its chunks
        const uint4* w = reinterpret_cast<const uint4*>(tile + (size_t)row * K);
        const int wmask = no_weight_reads ? 0 : -1;
        float acc = 0.f;
        if (DV == 3) {
            for (int c = part * pc + lane; c < end; c += 32)
                acc = fmaf(Fp8Weights::dot(w[c & wmask], s.staged, c), scales[row * nkb + c / 8], acc);
        } else {
            for (int c = part * pc + lane; c < end; c += 4 * 32) {
                uint4 wv[4];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (c + 32 * j < end) wv[j] = w[(c + 32 * j) & wmask];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (c + 32 * j < end) acc = fmaf(fp8_dot<DV>(wv[j], s.staged, c + 32 * j), scales[row * nkb + (c + 32 * j) / 8], acc);
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) s.partial[row_in_op + row][part] = acc;
    }
}

// The projection's rows out: store, residual add, or SwiGLU of (gate, up) pairs.
template <int CW>
__device__ void write_rows(const PersistentArgs& a, Smem& s, int op, int q, RowRange rr, int parts) {
    const int t = threadIdx.x;
    auto total = [&](int i) {
        float v = 0.f;
        for (int p = 0; p < parts; p++) v += s.partial[i][p];
        return v;
    };
    const bool words = a.mode & kFlagsInData;
    const unsigned long long flag = (unsigned long long)flag_of(a.epoch, q) << 32;
    if (op == QKV) {
        for (int i = t; i < rr.rows; i += CW * 32) a.y_qkv[rr.r0 + i] = total(i);
    } else if (op == GATE_UP) {  // 4 rows (gate, up, gate, up) -> 2 outputs, one word
        for (int i = t; i < rr.rows / 4; i += CW * 32) {
            __nv_bfloat162 hp = __floats2bfloat162_rn(silu(total(4 * i)) * total(4 * i + 1), silu(total(4 * i + 2)) * total(4 * i + 3));
            reinterpret_cast<__nv_bfloat162*>(a.h)[rr.r0 / 4 + i] = hp;
            if (words) st_relaxed_u64(a.h_words + rr.r0 / 4 + i, flag | *reinterpret_cast<const unsigned*>(&hp));
        }
    } else {
        for (int i = t; i < rr.rows; i += CW * 32) {
            const float v = s.old[i] + total(i);
            a.r[rr.r0 + i] = v;  // the block's own rows: it reads them back as the residual's old values
            if (words) st_relaxed_u64(a.r_words + rr.r0 + i, flag | __float_as_uint(v));
        }
    }
}

template <int CW, int DV>
__device__ void consume(const PersistentArgs& a, Smem& s) {
    unsigned it = 0;
    unsigned long long full_waited = 0;
    for (int q = 0; q < a.layers * kOps; q++) {
        unsigned long long* st = a.stamps ? a.stamps + ((size_t)blockIdx.x * a.layers * kOps + q) * kStamps : nullptr;
        if (st && threadIdx.x == 0) st[0] = global_timer_ns();
        const ProjectionStep ps = projection_step<CW>(a, q);
        const int op = ps.op, K = ps.P->K;
        const RowRange rr = ps.rows;
        const bool norm = op == QKV || op == GATE_UP;
        const void* x = norm ? (const void*)a.r : op == O ? (const void*)a.a : (const void*)a.h;
        const unsigned x_bytes = norm ? kHidden * 4 : K * 2;
        fetch_input<CW>(a, s, q, x, x_bytes, op == QKV ? ps.layer->norm1 : op == GATE_UP ? ps.layer->norm2 : nullptr, st);
        if (op == O || op == DOWN)  // the residual's old rows: written two hand-overs ago, so final now
            for (int i = threadIdx.x; i < rr.rows; i += CW * 32) s.old[i] = __ldcg(a.r + rr.r0 + i);
        stage_input<CW, DV>(s, K, norm);
        if (st && threadIdx.x == 0) st[3] = global_timer_ns();
        const int parts = row_parts(K, CW);
        for (int t0 = 0; t0 < rr.rows; t0 += ps.tile_rows, it++) {
            const int slot = it % a.slots, use = it / a.slots;
            const unsigned long long t_wait = threadIdx.x == 0 ? global_timer_ns() : 0;
            mbar_wait(&s.full[slot], use & 1);
            if (threadIdx.x == 0) full_waited += global_timer_ns() - t_wait;
            if (!(a.mode & kNoDots))
                consume_tile<CW, DV>(s, s.ring[slot], min(ps.tile_rows, rr.rows - t0), t0, K, parts, a.mode & kNoWeightReads);
            __syncwarp();
            if ((threadIdx.x & 31) == 0) mbar_arrive(&s.empty[slot]);
        }
        if (st && threadIdx.x == 0) st[4] = global_timer_ns();
        consumers_sync<CW>();  // every part's sum is in s.partial
        write_rows<CW>(a, s, op, q, rr, parts);
        consumers_sync<CW>();  // every row written before the count (the barrier and the release order them)
        if (threadIdx.x == 0 && !(a.mode & kNoSeams) && (op == QKV || !(a.mode & kFlagsInData))) red_release_add(&a.done[q], 1);
    }
    if (threadIdx.x == 0) a.consumer_wait[blockIdx.x] = full_waited;
}

#endif

template <int CW, int DV>
__global__ void __launch_bounds__((CW + 1) * 32, 1) persistent_layers(PersistentArgs a) {
#if SM90_DEVICE_CODE
    extern __shared__ __align__(128) unsigned char smem_raw[];
    Smem& s = *reinterpret_cast<Smem*>(smem_raw);
    if (threadIdx.x == 0) {
        for (int i = 0; i < a.slots; i++) mbar_init(&s.full[i], 1), mbar_init(&s.empty[i], CW);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >> 5 == CW) {
        if ((threadIdx.x & 31) == 0) produce<CW>(a, s);
    } else {
        consume<CW, DV>(a, s);
    }
#endif
}

// ---- host ----

struct Weights {
    Linear qkv, o, gate_up, down;
    bf16 *norm1, *norm2;
};

static Linear make_fp8(int N, int K, uint32_t seed, GpuMemory& mem, bf16* scratch, cudaStream_t st) {
    Linear L;
    L.N = N, L.K = K, L.fmt = WFormat::FP8, L.kblock = 128;
    fill_bf16_kernel<<<1024, 256, 0, st>>>(scratch, (size_t)N * K, seed);
    LAUNCH_CHECK();
    L.w = mem.alloc<uint8_t>((size_t)N * K, "w");
    L.scale = mem.alloc<float>((size_t)N * K / 128, "s");
    quantize_fp8(scratch, (uint8_t*)L.w, (float*)L.scale, N, K, st);
    return L;
}

// p[i] = center + width * (u - 0.5), u in [0, 1) from timing.cuh's hash (the one fill_bf16_kernel uses).
template <class T>
static __global__ void fill_uniform_kernel(T* p, int n, uint32_t seed, float center, float width) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float v = center + width * (hash_unit(i, seed) - 0.5f);
        if constexpr (std::is_same<T, float>::value) p[i] = v;
        else p[i] = __float2bfloat16_rn(v);
    }
}

struct Buffers {
    float *r, *y_qkv;
    bf16 *a, *h;
    float* r0;  // the starting residual, copied into r before each run
};

static void engine_layers(const std::vector<Weights>& W, const Buffers& b, int layers, cudaStream_t st) {
    for (int l = 0; l < layers; l++) {
        const Weights& w = W[l % kSets];
        gemv_rmsnorm(w.qkv, b.r, w.norm1, kEps, b.y_qkv, st);
        gemv_add(w.o, b.a, b.r, st, l2_ahead(w.gate_up, true));
        gemv_rmsnorm_swiglu(w.gate_up, b.r, w.norm2, kEps, b.h, st, l2_ahead(w.down, false));
        gemv_add(w.down, b.h, b.r, st);
    }
}

static double max_rel_diff(const std::vector<float>& x, const std::vector<float>& y) {
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); i++) num = std::max(num, (double)std::fabs(x[i] - y[i])), den = std::max(den, (double)std::fabs(y[i]));
    return num / std::max(den, 1e-30);
}
static std::vector<float> download(const float* p, int n) {
    std::vector<float> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
    return v;
}
static std::vector<float> download_bf16(const bf16* p, int n) {
    std::vector<bf16> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (int i = 0; i < n; i++) f[i] = __bfloat162float(v[i]);
    return f;
}

static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    return run_main([&]() -> int {
        require_cuda_device();
        if (compute_capability_major() < 9) die("bench_persistent: needs a Hopper GPU (bulk copies, mbarrier transactions)");
        const int layers = argc > 1 ? std::atoi(argv[1]) : 32;
        if (layers < 1 || layers > 256) die("bench_persistent: layers must be 1..256, got '%s'", argv[1]);
        cudaStream_t st;
        CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        const double copy = measure_copy_bandwidth(st);
        const int sms = sm_count();
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::printf("device: %s, %d SMs, copy bandwidth %.1f GB/s; Qwen3-4B shapes, fp8 (1 x 128 scales), %d layers over %d weight sets\n",
                    prop.name, sms, copy, layers, kSets);
        const int proj_rows[kOps] = {kQkv, kHidden, 2 * kInter, kHidden};
        for (int op = 0; op < kOps; op++)  // block_rows' largest share
            if (CEIL_DIV(proj_rows[op] / row_unit(op), sms) * row_unit(op) > kMaxRowsPerBlock)
                die("bench_persistent: %d SMs leave more than %d rows per block", sms, kMaxRowsPerBlock);

        GpuMemory mem;
        bf16* scratch = mem.alloc<bf16>((size_t)2 * kInter * kHidden, "scratch");
        std::vector<Weights> W(kSets);
        for (int i = 0; i < kSets; i++) {
            uint32_t s0 = 100 + 10 * i;
            W[i].qkv = make_fp8(kQkv, kHidden, s0 + 1, mem, scratch, st);
            W[i].o = make_fp8(kHidden, kAttn, s0 + 2, mem, scratch, st);
            W[i].gate_up = make_fp8(2 * kInter, kHidden, s0 + 3, mem, scratch, st);
            W[i].down = make_fp8(kHidden, kInter, s0 + 4, mem, scratch, st);
            W[i].norm1 = mem.alloc<bf16>(kHidden, "n1");
            W[i].norm2 = mem.alloc<bf16>(kHidden, "n2");
            fill_uniform_kernel<<<16, 256, 0, st>>>(W[i].norm1, kHidden, s0 + 5, 1.f, 0.2f);
            fill_uniform_kernel<<<16, 256, 0, st>>>(W[i].norm2, kHidden, s0 + 6, 1.f, 0.2f);
            LAUNCH_CHECK();
        }
        const double layer_bytes = (double)(W[0].qkv.bytes() + W[0].o.bytes() + W[0].gate_up.bytes() + W[0].down.bytes());

        Buffers b;
        b.r = mem.alloc<float>(kHidden, "r");
        b.r0 = mem.alloc<float>(kHidden, "r0");
        b.y_qkv = mem.alloc<float>(kQkv, "yqkv");
        b.a = mem.alloc<bf16>(kAttn, "a");
        b.h = mem.alloc<bf16>(kInter, "h");
        fill_uniform_kernel<<<16, 256, 0, st>>>(b.r0, kHidden, 7, 0.f, 2.f);
        fill_bf16_kernel<<<16, 256, 0, st>>>(b.a, kAttn, 9);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaStreamSynchronize(st));

        // The engine's path, captured once per layer count.
        auto capture = [&](int n) {
            cudaGraph_t g;
            cudaGraphExec_t e;
            engine_layers(W, b, 1, st);  // eager first: attributes set outside the capture
            CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            engine_layers(W, b, n, st);
            CUDA_CHECK(cudaStreamEndCapture(st, &g));
            CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
            CUDA_CHECK(cudaGraphDestroy(g));
            return e;
        };

        PersistentArgs pa = {};
        for (int i = 0; i < kSets; i++) {
            pa.sets[i].p[QKV] = W[i].qkv, pa.sets[i].p[O] = W[i].o, pa.sets[i].p[GATE_UP] = W[i].gate_up, pa.sets[i].p[DOWN] = W[i].down;
            pa.sets[i].norm1 = W[i].norm1, pa.sets[i].norm2 = W[i].norm2;
        }
        pa.r = b.r, pa.y_qkv = b.y_qkv, pa.a = b.a, pa.h = b.h;
        pa.done = mem.alloc<unsigned>((size_t)256 * kOps, "done");
        pa.r_words = mem.alloc<unsigned long long>(kHidden, "r_words");  // filled with 0xFF: no flag matches
        pa.h_words = mem.alloc<unsigned long long>(kInter / 2, "h_words");
        pa.producer_wait = mem.alloc<unsigned long long>(sms, "producer_wait");
        pa.consumer_wait = mem.alloc<unsigned long long>(sms, "consumer_wait");
        auto wait_us = [&](const unsigned long long* p) {  // median over blocks, per layer
            std::vector<unsigned long long> w(sms);
            CUDA_CHECK(cudaMemcpy(w.data(), p, sms * 8, cudaMemcpyDeviceToHost));
            std::vector<double> v;
            for (auto x : w) v.push_back(x * 1e-3 / pa.layers);
            return median(v);
        };
        unsigned long long* stamps = mem.alloc<unsigned long long>((size_t)sms * 256 * kOps * kStamps, "stamps");
        const size_t smem = sizeof(Smem);
        constexpr int kKernels = 7;
        void (*kernels[kKernels])(PersistentArgs) = {persistent_layers<8, 0>,  persistent_layers<8, 1>,  persistent_layers<8, 2>, persistent_layers<16, 2>,
                                                     persistent_layers<8, 3>,  persistent_layers<16, 3>, persistent_layers<24, 3>};
        const int kernel_warps[kKernels] = {8, 8, 8, 16, 8, 16, 24}, kernel_dot[kKernels] = {0, 1, 2, 2, 3, 3, 3};
        for (int k = 0; k < kKernels; k++) {
            CUDA_CHECK(cudaFuncSetAttribute(kernels[k], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            int per_sm = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernels[k], (kernel_warps[k] + 1) * 32, smem));
            if (per_sm < 1) die("bench_persistent: %zu bytes of shared memory do not fit on an SM", smem);
        }
        int kind = 0;  // which kernel
        auto persistent = [&](int n, int slots, bool stamp) {  // the counters' reset is timed with it (a 4 KB memset)
            pa.layers = n, pa.slots = slots, pa.stamps = stamp ? stamps : nullptr, pa.epoch++;
            CUDA_CHECK(cudaMemsetAsync(pa.done, 0, (size_t)n * kOps * 4, st));
            void* args[] = {&pa};
            CUDA_CHECK(cudaLaunchCooperativeKernel((void*)kernels[kind], dim3(sms), dim3((kernel_warps[kind] + 1) * 32), args, smem, st));
        };
        auto reset = [&] { CUDA_CHECK(cudaMemcpyAsync(b.r, b.r0, kHidden * 4, cudaMemcpyDeviceToDevice, st)); };

        // Correctness: both paths from the same residual, 1 and 2 layers, each kernel.
        for (kind = 0; kind < kKernels; kind++)
        for (int mode : {0, kFlagsInData})
        for (int n : {1, 2}) {
            if (mode && kernel_dot[kind] != 3) continue;
            pa.mode = mode;
            cudaGraphExec_t e = capture(n);
            reset();
            CUDA_CHECK(cudaGraphLaunch(e, st));
            CUDA_CHECK(cudaStreamSynchronize(st));
            auto r_e = download(b.r, kHidden), y_e = download(b.y_qkv, kQkv), h_e = download_bf16(b.h, kInter);
            reset();
            persistent(n, kMaxSlots, false);
            CUDA_CHECK(cudaStreamSynchronize(st));
            auto r_p = download(b.r, kHidden), y_p = download(b.y_qkv, kQkv), h_p = download_bf16(b.h, kInter);
            std::printf("check, %d consumer warps, dot %d%s, %d layer%s: max |diff| / max |engine|: residual %.2e, qkv %.2e, swiglu %.2e\n",
                        kernel_warps[kind], kernel_dot[kind], mode ? ", flags in data" : "", n, n > 1 ? "s" : "", max_rel_diff(r_p, r_e),
                        max_rel_diff(y_p, y_e), max_rel_diff(h_p, h_e));
            CUDA_CHECK(cudaGraphExecDestroy(e));
        }

        pa.mode = 0;

        // Speed: median of 20 timed runs each.
        auto report = [&](const char* what, float ms) {
            double us = ms * 1e3 / layers, gbs = layer_bytes / (us * 1e-6) / 1e9;
            std::printf("%-44s %8.2f us/layer  %7.1f GB/s  %5.1f%% of copy\n", what, us, gbs, 100 * gbs / copy);
        };
        std::printf("layer weights %.1f MB: %.2f us at the copy bandwidth\n", layer_bytes / 1e6, layer_bytes / copy / 1e3);
        {
            cudaGraphExec_t e = capture(layers);
            report("engine GEMVs, PDL, one graph", median_ms(st, 3, 20, [&] { CUDA_CHECK(cudaGraphLaunch(e, st)); }));
            pdl_enabled() = false;
            cudaGraphExec_t e2 = capture(layers);
            report("engine GEMVs, no PDL", median_ms(st, 3, 20, [&] { CUDA_CHECK(cudaGraphLaunch(e2, st)); }));
            pdl_enabled() = true;
            CUDA_CHECK(cudaGraphExecDestroy(e));
            CUDA_CHECK(cudaGraphExecDestroy(e2));
        }
        const char* mode_names[16] = {"", ", no dots", ", no seams", ", no dots, no seams", ", one weight chunk", "", ", one weight chunk, no seams", "",
                                      ", flags in data", ", flags in data, no dots"};
        for (kind = 0; kind < kKernels; kind++)
            for (int mode : {0, 1, 2, 3, 4, 6, kFlagsInData, kFlagsInData | kNoDots})
                for (int slots : {2, 4, 7}) {
                    if ((mode || kind) && slots != 7) continue;
                    if (kind && mode != 0 && mode != 2 && !(kernel_dot[kind] == 3 && kernel_warps[kind] == 8 && mode >= kFlagsInData)) continue;
                    if (!kind && mode >= kFlagsInData) continue;
                    pa.mode = mode;
                    char name[96];
                    std::snprintf(name, sizeof name, "persistent, %d warps, dot %d, ring %d x %d KB%s", kernel_warps[kind], kernel_dot[kind], slots,
                                  kSlotBytes / 1024, mode_names[mode]);
                    report(name, median_ms(st, 3, 20, [&] { persistent(layers, slots, false); }));
                    std::printf("%44s producer waited for a free slot %.2f, consumer warp 0 for a full one %.2f us/layer (median block)\n", "",
                                wait_us(pa.producer_wait), wait_us(pa.consumer_wait));
                }
        pa.mode = 0;

        // Where a block's time goes around each hand-over (stamps on): each kernel with the ring full size, and the
        // first also without its dot products at rings of 2 and 7 slots.
        struct StampRun { int kind, mode, slots; };
        std::vector<StampRun> stamp_runs;
        for (int k = 0; k < kKernels; k++) stamp_runs.push_back({k, 0, kMaxSlots});
        stamp_runs.push_back({0, kNoDots, 2});
        stamp_runs.push_back({0, kNoDots, kMaxSlots});
        stamp_runs.push_back({4, kFlagsInData, kMaxSlots});
        stamp_runs.push_back({4, kFlagsInData | kNoDots, kMaxSlots});
        for (const StampRun& sr : stamp_runs) {
        kind = sr.kind, pa.mode = sr.mode;
        persistent(layers, sr.slots, true);
        CUDA_CHECK(cudaStreamSynchronize(st));
        std::vector<unsigned long long> h((size_t)sms * layers * kOps * kStamps);
        CUDA_CHECK(cudaMemcpy(h.data(), stamps, h.size() * 8, cudaMemcpyDeviceToHost));
        const char* names[kOps] = {"qkv", "o", "gate_up", "down"};
        std::printf("%d consumer warps, dot %d, ring %d%s, per projection, median over blocks and layers 1..%d, us: wait for counter | input copy | staging | tiles | span (start to next start)\n",
                    kernel_warps[kind], kernel_dot[kind], sr.slots, mode_names[sr.mode], layers - 1);
        for (int op = 0; op < kOps; op++) {
            std::vector<double> wait, copyx, stage, tiles, span;
            for (int blk = 0; blk < sms; blk++)
                for (int l = 1; l < layers; l++) {
                    const unsigned long long* s = &h[((size_t)blk * layers * kOps + l * kOps + op) * kStamps];
                    wait.push_back((s[1] - s[0]) * 1e-3), copyx.push_back((s[2] - s[1]) * 1e-3), stage.push_back((s[3] - s[2]) * 1e-3),
                        tiles.push_back((s[4] - s[3]) * 1e-3);
                    int q = l * kOps + op + 1;
                    if (q < layers * kOps) span.push_back((h[((size_t)blk * layers * kOps + q) * kStamps] - s[0]) * 1e-3);
                }
            std::printf("  %-8s %6.2f | %6.2f | %6.2f | %6.2f | %6.2f\n", names[op], median(wait), median(copyx), median(stage), median(tiles),
                        median(span));
        }
        }
        return 0;
    });
}
