// bench_loaded_latency — how long one dependent memory round trip takes while other SMs stream weights
// (a microbenchmark, not a test).
//
//   build/sm_90/tools/bench_loaded_latency
//
// Why: at short context a decode step's attention is a chain of dependent round trips (read the projections,
// norm and rotate, score, merge), during which HBM idles. A persistent decode kernel would stream the next
// projections' weights on the other SMs meanwhile; that pays only if the chain does not stretch by more than
// the streaming saves. Earlier sessions saw it stretch (kb/log.md: o_proj's early loads beside the attention,
// queries ready 1.1 -> 3.1 us). This measures the physics directly, at several streaming rates.
//
// One launch per row: `streamers` blocks read a 2 GiB buffer over and over with 16-byte loads that skip L1 (8 in
// flight per thread, evict-first, as the GEMVs load weights) until told to stop; one probe block's thread 0 walks
// two random cycles of dependent loads, one per 128-byte line, each load's address the value of the one before:
// over 512 KB that stays in L2 (an L2 hit per hop), and over 256 MB that does not (an HBM round trip per hop; every
// walk starts on a fresh stretch of the cycle). With one block per SM the probe's SM streams nothing; with two, the
// block beside the probe streams too. Prints each row's streaming bandwidth and the median hop of each walk.
// What it answered (H100, kb/log.md, fifteenth session): with the other 131 SMs streaming at 2.8 TB/s, an L2 hit
// took 181 ns against 141 idle and an HBM round trip 510 ns against 349; with a streaming block on the probe's own
// SM, 282 and 680 ns. A chain of round trips (the attention at short context) stretches by a quarter to a half
// when the rest of the GPU streams, and doubles when its own SM does.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_check.h"
#include "errors.h"
#include "gpu_memory.cuh"
#include "timing.cuh"

using namespace monocu;

constexpr int kThreads = 256, kHops = 512, kRounds = 9, kInFlight = 8;  // kInFlight: 16-byte loads per streaming thread
constexpr size_t kStreamBytes = size_t(2) << 30, kL2Bytes = 512 << 10, kHbmBytes = size_t(256) << 20, kLine = 128;
constexpr size_t kSmemOnePerSm = 160 << 10, kSmemTwoPerSm = 100 << 10;  // shared memory that holds 1 or 2 blocks per SM

// Nanoseconds per hop over `hops` dependent loads (ld.global.cg: L2, never L1) of a walk: next[line * 32] is the
// line after `line`, a random cycle over the walk's lines (make_walk).
__device__ float walk_ns(const unsigned* next, unsigned start, int hops, unsigned* sink) {
    unsigned line = start;
    unsigned long long t0 = global_timer_ns();
    for (int h = 0; h < hops; h++) line = __ldcg(next + (size_t)line * (kLine / 4));
    unsigned long long t1 = global_timer_ns();
    *sink += line;  // keeps the chain
    return float(t1 - t0) / hops;
}

struct Result {
    float l2_ns[kRounds], hbm_ns[kRounds];
    unsigned long long stream_bytes, first_ns, last_ns;
    unsigned sink;
};

// The probe (thread 0 of one block): warms the small walk into L2, gives the streamers 20 us to reach full rate,
// then times kRounds walks of each kind and tells the streamers to stop.
__device__ void probe(const unsigned* l2, const unsigned* hbm, unsigned l2_lines, unsigned hbm_lines, unsigned row, volatile int* done, Result* out) {
    unsigned sink = 0;
    walk_ns(l2, 0, (int)l2_lines, &sink);
    unsigned long long t = global_timer_ns();
    while (global_timer_ns() - t < 20000) {
    }
    for (int r = 0; r < kRounds; r++) {
        out->l2_ns[r] = walk_ns(l2, (r * 977u) % l2_lines, kHops, &sink);
        // a fresh stretch of the big cycle for every walk of every row: lines walked before would be in L2
        out->hbm_ns[r] = walk_ns(hbm, (unsigned)(((row * kRounds + r) * 104729ull) % hbm_lines), kHops, &sink);
    }
    out->sink = sink;
    __threadfence();
    *done = 1;
}

// Streamer block b of `streamers`: reads 4 KB chunks b, b + streamers, ... of the buffer (256 threads x 16 bytes,
// kInFlight chunks in flight), wrapping around, until the probe is done; adds its bytes and time span to out.
__device__ void stream_until_done(const uint4* stream, size_t stream_n, int b, int streamers, volatile int* done, Result* out) {
    const size_t chunks = stream_n / kThreads;
    uint4 acc = make_uint4(0, 0, 0, 0);
    unsigned long long n = 0, t0 = global_timer_ns();
    for (size_t c = b;; c += (size_t)streamers * kInFlight) {
        uint4 v[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; u++) v[u] = __ldcs(stream + ((c + (size_t)u * streamers) % chunks) * kThreads + threadIdx.x);
#pragma unroll
        for (int u = 0; u < kInFlight; u++) acc.x ^= v[u].x, acc.y ^= v[u].y, acc.z ^= v[u].z, acc.w ^= v[u].w;
        n += kInFlight;
        if (*done) break;
    }
    unsigned long long t1 = global_timer_ns();
    if (acc.x == 0x12345678u && acc.y == 0x9abcdefu) out->sink ^= 1;  // keeps the loads
    if (threadIdx.x == 0) {
        atomicAdd(&out->stream_bytes, n * kThreads * 16);
        atomicMin(&out->first_ns, t0);
        atomicMax(&out->last_ns, t1);
    }
}

// Blocks 0 .. streamers-1 stream; the last block probes; the rest return at once.
__global__ void __launch_bounds__(kThreads) loaded_latency_kernel(const uint4* stream, size_t stream_n, const unsigned* l2, const unsigned* hbm, unsigned l2_lines,
                                                                  unsigned hbm_lines, int streamers, unsigned row, volatile int* done, Result* out) {
    extern __shared__ unsigned char smem_unused[];  // only sets how many blocks share an SM
    const int b = blockIdx.x;
    if (b == gridDim.x - 1) {
        if (threadIdx.x == 0) probe(l2, hbm, l2_lines, hbm_lines, row, done, out);
    } else if (b < streamers) {
        stream_until_done(stream, stream_n, b, streamers, done, out);
    }
}

// A random cycle over `lines` 128-byte lines of a buffer (Sattolo's shuffle), as the walk reads it.
static unsigned* make_walk(size_t bytes, unsigned seed, GpuMemory& mem) {
    const unsigned lines = (unsigned)(bytes / kLine);
    std::vector<unsigned> order(lines);
    std::iota(order.begin(), order.end(), 0u);
    std::mt19937 rng(seed);
    for (unsigned i = lines - 1; i > 0; i--) std::swap(order[i], order[std::uniform_int_distribution<unsigned>(0, i - 1)(rng)]);
    std::vector<unsigned> host(bytes / 4, 0);
    for (unsigned i = 0; i < lines; i++) host[(size_t)order[i] * (kLine / 4)] = order[(i + 1) % lines];
    unsigned* dev = mem.alloc<unsigned>(bytes / 4, "walk");
    CUDA_CHECK(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice));
    return dev;
}

static float median(float* v, int n) {
    std::sort(v, v + n);
    return v[n / 2];
}

int main() {
    return run_main([]() -> int {
        require_cuda_device();
        const int sms = sm_count();
        CUDA_CHECK(cudaFuncSetAttribute(loaded_latency_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemOnePerSm));
        for (auto [smem, want] : {std::pair<size_t, int>{kSmemOnePerSm, 1}, std::pair<size_t, int>{kSmemTwoPerSm, 2}}) {
            int per_sm = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, loaded_latency_kernel, kThreads, smem));
            if (per_sm != want) die("bench_loaded_latency: expected %d blocks per SM with %zu bytes, the occupancy calculator says %d", want, smem, per_sm);
        }
        GpuMemory mem;  // (alloc fills with 0xFF: the streamed bytes need no other value)
        const uint4* stream = mem.alloc<uint4>(kStreamBytes / 16, "stream");
        const unsigned* l2 = make_walk(kL2Bytes, 1, mem);
        const unsigned* hbm = make_walk(kHbmBytes, 2, mem);
        Result* res = mem.alloc<Result>(1, "result");
        int* done = mem.alloc<int>(1, "flag");
        cudaStream_t st;
        CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        const double copy_gbs = measure_copy_bandwidth(st);
        std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write); hops: median of %d walks of %d\n", device_name().c_str(), sms,
                    copy_gbs, kRounds, kHops);
        auto measure = [&](int grid, size_t smem, int streamers, unsigned row) {
            Result h = {};
            h.first_ns = ~0ull;
            CUDA_CHECK(cudaMemcpyAsync(res, &h, sizeof(Result), cudaMemcpyHostToDevice, st));
            CUDA_CHECK(cudaMemsetAsync(done, 0, sizeof(int), st));
            loaded_latency_kernel<<<grid, kThreads, smem, st>>>(stream, kStreamBytes / 16, l2, hbm, (unsigned)(kL2Bytes / kLine),
                                                                (unsigned)(kHbmBytes / kLine), streamers, row, done, res);
            LAUNCH_CHECK();
            CUDA_CHECK(cudaMemcpyAsync(&h, res, sizeof(Result), cudaMemcpyDeviceToHost, st));
            CUDA_CHECK(cudaStreamSynchronize(st));
            double gbs = streamers ? h.stream_bytes / double(h.last_ns - h.first_ns) : 0.0;
            std::printf("%20d %14.0f %12.0f %13.0f\n", streamers, gbs, median(h.l2_ns, kRounds), median(h.hbm_ns, kRounds));
        };
        unsigned row = 0;
        std::printf("one block per SM, the probe's SM streams nothing:\n%20s %14s %12s %13s\n", "streaming blocks", "stream GB/s", "L2 hit, ns",
                    "HBM miss, ns");
        for (int streamers : {0, 8, 16, 33, 66, 99, sms - 1, 0}) measure(sms, kSmemOnePerSm, streamers, ++row);
        std::printf("two blocks per SM, every other block streaming (so does the one beside the probe):\n");
        measure(2 * sms, kSmemTwoPerSm, 2 * sms - 1, ++row);
        CUDA_CHECK(cudaStreamDestroy(st));
        return 0;
    });
}
