// bench_attention — prefill attention TFLOP/s and decode attention GB/s (a microbenchmark, not a test).
//
//   build/sm_90/tools/bench_attention [--quick | --decode]   (--quick: the 16k prefill cases and one sequence; --decode: no prefill)
//
// Prefill: causal attention of one pass over T queries (a prompt at position 0 over its own fp16 keys, as a chunk at
// position 0 runs), and a 2048-token chunk at the end of a 16k prompt over a bf16 or FP8 cache (a long prompt's later
// chunks), for Qwen3-8B / Llama-3-8B heads (32 query, 8 KV, head_dim 128) and GPT-OSS's (64 / 8 / 64). Each through
// the portable kernel (attention.cuh) and the Hopper one (attention_sm90.cuh) where built. FLOPs count Q K^T and
// P V over the keys each query sees (4 head_dim per query-key pair and head, FlashAttention's convention for causal
// attention), against the dense bf16 tensor-core peak of the card (989.4 TFLOP/s for an H100 / H200 SXM at boost
// clock) and against a cuBLAS bf16 GEMM measured in the same process.
//
// Decode: Flash-Decoding over 16k and 64k contexts, bf16 and FP8 caches, 1 to 64 sequences in one launch (the
// batched core's paged layout: 16-row blocks, shuffled), Qwen3-8B heads. GB/s counts the K and V bytes (and FP8
// scales) that must be read, against the device copy bandwidth measured in the same process.
// Every input is random; every figure is the median of timed launches after warm-up.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/timing.cuh"
#include "ops/attention.cuh"
#include "ops/flash_decode.cuh"
#include "ops/gemm.cuh"

using namespace monocu;

static __global__ void fill_half_kernel(__half* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2half_rn((hash_unit(i, seed) - 0.5f) * 4.f);
}
static __global__ void fill_bytes_kernel(uint8_t* p, size_t n, uint32_t seed) {  // e4m3 codes of moderate size, no NaN
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint8_t)((uint32_t)(hash_unit(i, seed) * 65536.f) % 0x70) | (i & 1 ? 0x80 : 0);
}
static __global__ void fill_float_kernel(float* p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}

// An FP8 cache's codes (moderate, no NaN) and row scales, n rows of hd per tensor.
static void fill_fp8_cache(const KvLayer& L, size_t rows, int hd, cudaStream_t st) {
    fill_bytes_kernel<<<1024, 256, 0, st>>>(static_cast<uint8_t*>(L.k), rows * hd, 2);
    fill_bytes_kernel<<<1024, 256, 0, st>>>(static_cast<uint8_t*>(L.v), rows * hd, 3);
    fill_float_kernel<<<1024, 256, 0, st>>>(L.k_scale, rows, 0.01f);
    fill_float_kernel<<<1024, 256, 0, st>>>(L.v_scale, rows, 0.01f);
}

struct PrefillCase {
    const char* name;
    int nh, nkv, hd, T, pos0;
    bool fp8 = false;  // an FP8 cache (a chunk past position 0)
};

static void bench_prefill(const PrefillCase& c, double gemm_tflops, cudaStream_t st) {
    GpuMemory mem;
    const int rows = c.pos0 + c.T;  // the cache (or the copy) holds every key the pass sees
    const bool own = c.pos0 == 0;
    const KvType type = own ? KvType::F16 : c.fp8 ? KvType::FP8 : KvType::BF16;
    __half* q = mem.alloc<__half>((size_t)c.T * c.nh * c.hd, "q");
    uint16_t* k = mem.alloc<uint16_t>((size_t)c.nkv * rows * c.hd, "k");
    uint16_t* v = mem.alloc<uint16_t>((size_t)c.nkv * rows * c.hd, "v");
    bf16* out = mem.alloc<bf16>((size_t)c.T * c.nh * c.hd, "out");
    int* d_pos = mem.alloc<int>(1, "pos");
    CUDA_CHECK(cudaMemcpy(d_pos, &c.pos0, sizeof(int), cudaMemcpyHostToDevice));
    fill_half_kernel<<<1024, 256, 0, st>>>(q, (size_t)c.T * c.nh * c.hd, 1);
    KvLayer L;
    L.k = k, L.v = v;
    if (c.fp8) {
        L.k_scale = mem.alloc<float>((size_t)c.nkv * rows, "ks"), L.v_scale = mem.alloc<float>((size_t)c.nkv * rows, "vs");
        fill_fp8_cache(L, (size_t)c.nkv * rows, c.hd, st);
    } else if (own) {
        fill_half_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<__half*>(k), (size_t)c.nkv * rows * c.hd, 2);
        fill_half_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<__half*>(v), (size_t)c.nkv * rows * c.hd, 3);
    } else {
        fill_bf16_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<bf16*>(k), (size_t)c.nkv * rows * c.hd, 2);
        fill_bf16_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<bf16*>(v), (size_t)c.nkv * rows * c.hd, 3);
    }
    LAUNCH_CHECK();
    AttnParams ap;
    const double flop = 4.0 * c.nh * c.hd * c.T * (c.pos0 + (c.T + 1) / 2.0);
    std::printf("%-34s", c.name);
    for (AttnKernel kern : {AttnKernel::Portable, AttnKernel::Hopper}) {
        if (kern == AttnKernel::Hopper && !prefill_attention_sm90_fits(type, c.hd, ap, rows, L)) {
            std::printf(" | %8s %7s %6s %6s", "-", "-", "-", "-");
            continue;
        }
        float ms = median_ms(st, 3, 10, [&] {
            prefill_attention(q, type, L, d_pos, out, c.T, c.nh, c.nkv, c.hd, rows, ap, st, nullptr, rows, 0, kern);
        });
        const double tf = flop / (ms * 1e-3) / 1e12;
        std::printf(" | %8.3f %7.1f %5.1f%% %5.1f%%", ms, tf, 100.0 * tf / 989.4, 100.0 * tf / gemm_tflops);
    }
    std::printf("\n");
}

#ifdef MONOCU_TRACE
// Profiling build (nvcc -DMONOCU_TRACE): where one launch pair's time goes. Three launches back to back are traced;
// the second one's blocks are summarised, in us from its first split block's start.
static void trace_decode(const std::function<void()>& once, cudaStream_t st) {
    once();
    CUDA_CHECK(cudaStreamSynchronize(st));
    trace_enable(true);
    for (int i = 0; i < 3; i++) once();
    CUDA_CHECK(cudaStreamSynchronize(st));
    trace_enable(false);
    unsigned n = 0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&n, g_trace_count, sizeof n));
    std::vector<TraceRecord> r(std::min(n, kTraceCapacity));
    CUDA_CHECK(cudaMemcpyFromSymbol(r.data(), g_trace, r.size() * sizeof(TraceRecord)));
    std::vector<TraceRecord> split, merge;
    for (const TraceRecord& x : r) (x.kind == 2 ? split : merge).push_back(x);
    auto by_start = [](const TraceRecord& a, const TraceRecord& b) { return a.t[0] < b.t[0]; };
    std::sort(split.begin(), split.end(), by_start), std::sort(merge.begin(), merge.end(), by_start);
    const size_t ns = split.size() / 3, nm = merge.size() / 3;
    if (ns == 0 || nm == 0) return;
    std::vector<TraceRecord> s(split.begin() + ns, split.begin() + 2 * ns), m(merge.begin() + nm, merge.begin() + 2 * nm);
    const double t0 = (double)s[0].t[0];
    auto us = [&](unsigned long long t) { return ((double)t - t0) / 1e3; };
    auto stat = [&](const std::vector<TraceRecord>& v, int k, const char* what) {
        std::vector<double> x;
        for (const TraceRecord& e : v)
            if (e.t[k]) x.push_back(us(e.t[k]));
        std::sort(x.begin(), x.end());
        if (!x.empty()) std::printf("  %-22s min %6.2f  median %6.2f  max %6.2f\n", what, x.front(), x[x.size() / 2], x.back());
    };
    std::printf("  trace of one launch pair (%zu split blocks, %zu merge blocks), us from the first split block's start:\n", ns, nm);
    std::printf("  previous merge's last end %6.2f\n", us(std::max_element(merge.begin(), merge.begin() + nm, [](auto& a, auto& b) {
                                                            return a.t[4] < b.t[4];
                                                        })->t[4]));
    stat(s, 0, "split start");
    stat(s, 1, "split after wait");
    stat(s, 3, "split keys done");
    stat(s, 4, "split written");
    stat(m, 0, "merge start");
    stat(m, 1, "merge after wait");
    stat(m, 4, "merge done");
    std::printf("  next split's first start %6.2f\n", us(split[2 * ns].t[0]));
}
#endif

// n sequences of len keys each, in 16-row blocks scattered over one pool.
static void bench_decode(KvType type, int len, int n, double copy_gbs, cudaStream_t st) {
    const int nh = 32, nkv = 8, hd = 128, bs = 16, blocks_per = CEIL_DIV(len, bs), pool = n * blocks_per;
    GpuMemory mem;
    const size_t eb = type == KvType::FP8 ? 1 : 2, rows = (size_t)pool * bs;
    uint8_t* k = mem.alloc<uint8_t>(nkv * rows * hd * eb, "k");
    uint8_t* v = mem.alloc<uint8_t>(nkv * rows * hd * eb, "v");
    KvLayer L;
    L.k = k, L.v = v;
    if (type == KvType::FP8) {
        L.k_scale = mem.alloc<float>(nkv * rows, "ks"), L.v_scale = mem.alloc<float>(nkv * rows, "vs");
        fill_fp8_cache(L, nkv * rows, hd, st);
    } else {
        fill_bf16_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<bf16*>(k), nkv * rows * hd, 4);
        fill_bf16_kernel<<<1024, 256, 0, st>>>(reinterpret_cast<bf16*>(v), nkv * rows * hd, 5);
    }
    std::vector<int> order(pool), tables((size_t)n * blocks_per), pos(n, len - 1);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(7));
    for (size_t i = 0; i < tables.size(); i++) tables[i] = order[i];
    int* d_tables = mem.alloc<int>(tables.size(), "tables");
    int* d_pos = mem.alloc<int>(n, "pos");
    CUDA_CHECK(cudaMemcpy(d_tables, tables.data(), tables.size() * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_pos, pos.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    bf16* q = mem.alloc<bf16>((size_t)n * nh * hd, "q");
    bf16* out = mem.alloc<bf16>((size_t)n * nh * hd, "out");
    fill_bf16_kernel<<<1024, 256, 0, st>>>(q, (size_t)n * nh * hd, 6);
    LAUNCH_CHECK();
    if (n > 1) L.pages = d_tables, L.page_shift = 4, L.pages_stride = blocks_per;
    FlashDecode fd = n > 1 ? flash_decode_plan(nh, nkv, hd, (int)rows, mem, n, len) : flash_decode_plan(nh, nkv, hd, (int)rows, mem);
    const int reps = 20;
    float ms = median_ms(st, 2, 7, [&] {
                   for (int r = 0; r < reps; r++) flash_decode(fd, q, type, L, d_pos, out, st, AttnParams{}, n);
               }) / reps;
    const double bytes = (double)n * len * nkv * 2 * (hd * eb + (type == KvType::FP8 ? 4 : 0));
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("decode %-4s ctx %6d  seqs %3d%s | %8.1f us | %7.1f GB/s | %5.1f%% of copy | %5.2fx the bytes' time",
                type == KvType::FP8 ? "fp8" : "bf16", len, n, n > 1 ? " (paged)" : "        ", ms * 1e3, gbs, 100.0 * gbs / copy_gbs,
                copy_gbs / gbs);
#ifdef MONOCU_TRACE
    std::printf("\n");
    trace_decode([&] { flash_decode(fd, q, type, L, d_pos, out, st, AttnParams{}, n); }, st);
#endif
    if (n == 1) {  // the plan's split count against more: where the one-sequence time goes
        for (int mult : {2, 4}) {
            FlashDecode more = fd;
            more.n_splits = std::min(fd.n_splits * mult, kFdMaxSplits);
            more.part_o = mem.alloc<float>((size_t)nh * more.n_splits * hd, "parts");
            more.part_ml = mem.alloc<float2>((size_t)nh * more.n_splits, "parts");
            float m2 = median_ms(st, 2, 7, [&] {
                           for (int r = 0; r < reps; r++) flash_decode(more, q, type, L, d_pos, out, st, AttnParams{}, 1);
                       }) / reps;
            std::printf(" | %d splits %.1f us", more.n_splits, m2 * 1e3);
        }
    }
    std::printf("\n");
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    const bool decode_only = argc > 1 && std::strcmp(argv[1], "--decode") == 0;  // skip prefill (comparing decode builds)
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    const double copy_gbs = measure_copy_bandwidth(st);
    Gemm g;
    const double gemm_tflops = measure_gemm_tflops(g, 8192, 8192, 8192, st);
    std::printf("%s (sm_%d%d, %d SMs): copy %.1f GB/s, cuBLAS bf16 GEMM 8192^3 %.1f TFLOP/s (%.1f%% of 989.4)\n\n", p.name, p.major, p.minor,
                p.multiProcessorCount, copy_gbs, gemm_tflops, 100.0 * gemm_tflops / 989.4);
    std::printf("%-34s | %-29s | %-29s\n", "", "portable (mma.sync)", "Hopper (wgmma + TMA)");
    std::printf("%-34s | %8s %7s %6s %6s | %8s %7s %6s %6s\n", "prefill attention, causal", "ms", "TFLOP/s", "peak", "GEMM", "ms", "TFLOP/s",
                "peak", "GEMM");
    std::vector<PrefillCase> cases = {
        {"qwen3-8b heads, T 1024 at 0", 32, 8, 128, 1024, 0},  {"qwen3-8b heads, T 2048 at 0", 32, 8, 128, 2048, 0},
        {"qwen3-8b heads, T 4096 at 0", 32, 8, 128, 4096, 0},  {"qwen3-8b heads, T 8192 at 0", 32, 8, 128, 8192, 0},
        {"qwen3-8b heads, T 16384 at 0", 32, 8, 128, 16384, 0}, {"qwen3-8b heads, T 2048 at 14336", 32, 8, 128, 2048, 14336},
        {"qwen3-8b heads, ... fp8 cache", 32, 8, 128, 2048, 14336, true}, {"gpt-oss heads (64/8/64), T 16384", 64, 8, 64, 16384, 0},
        {"gpt-oss heads, T 2048 at 14336", 64, 8, 64, 2048, 14336},
    };
    for (const PrefillCase& c : cases)
        if (!decode_only && (!quick || c.T == 16384 || c.pos0 == 14336)) bench_prefill(c, gemm_tflops, st);
    std::printf("\n");
    for (KvType t : {KvType::BF16, KvType::FP8})
        for (int len : {1024, 16384, 65536})
            for (int n : {1, 4, 16, 64}) {
                if ((quick || len == 1024) && n > 1) continue;  // 1k: what a launch pair costs beside its bytes
                if ((size_t)len * n > (size_t)16384 * 64 * 2) continue;  // up to 2M keys per layer (64 x 64k bf16: 32 GB)
                bench_decode(t, len, n, copy_gbs, st);
            }
    return 0;
}
