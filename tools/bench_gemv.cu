// bench_gemv — decode GEMV bandwidth per projection shape and weight format (a microbenchmark, not a test).
//
//   build/sm_90/tools/bench_gemv            Qwen3-0.6B, 4B and 8B projection shapes, bf16 / fp8 / int4, by work layout
//   build/sm_90/tools/bench_gemv --rows     a pass of 1-64 rows over Qwen3-8B's FP8 / INT4 projections: a GEMV per row,
//                                           the tensor-core rows kernel (ops/quant_rows.cuh), dequantize + cuBLAS GEMM
//
// Each shape runs on enough copies of its weights (rotated) that they never fit in L2, on random data,
// timed with CUDA events over 200 back-to-back launches (each may overlap the previous one's tail through
// programmatic dependent launch, as in the engine; one column turns that off); GB/s counts the bytes the
// kernel must read (weights + scales). The 'as engine' column makes each projection's own call: qkv with the fused
// RMSNorm, gate_up with the RMSNorm and the SwiGLU epilogue, o and down with the residual add.
// The same shapes through cuBLAS (bf16 GEMM with one column) are printed for comparison, with the device
// copy bandwidth measured in the same process as the ceiling.
#include <cstdio>
#include <string>
#include <vector>

#include "ops/gemm.cuh"
#include "ops/gemv.cuh"
#include "ops/quant.cuh"
#include "ops/quant_rows.cuh"
#include "gpu/timing.cuh"

using namespace monocu;

struct GemvShape {
    const char* model;
    const char* name;
    int N, K;
};

static void fill_random_bytes(void* p, size_t n) {
    fill_pattern_kernel<<<1024, 256>>>(static_cast<uint32_t*>(p), n / 4);
    LAUNCH_CHECK();
}

// Scales must be sane numbers (random bytes would be NaN/huge floats): fill with small positive values.
static __global__ void fill_scales_kernel(float* f, bf16* b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (f) f[i] = 1e-3f * (1 + (i % 7));
        if (b) b[i] = __float2bfloat16_rn(1e-2f * (1 + (i % 5)));
    }
}

static Linear make(WFormat fmt, int N, int K, int kblock, GpuMemory& mem) {
    Linear L;
    L.N = N, L.K = K, L.fmt = fmt, L.kblock = kblock;
    size_t n = (size_t)N * K;
    if (fmt == WFormat::BF16) {
        L.w = mem.alloc<bf16>(n, "w");
        fill_bf16_kernel<<<1024, 256>>>((bf16*)L.w, n, 7);
    } else if (fmt == WFormat::FP8) {
        L.w = mem.alloc<uint8_t>(n, "w");
        fill_random_bytes(L.w, n);
        size_t ns = (size_t)N * (K / kblock);
        L.scale = mem.alloc<float>(ns, "s");
        fill_scales_kernel<<<256, 256>>>((float*)L.scale, nullptr, ns);
    } else {
        L.w = mem.alloc<uint8_t>(n / 2, "w");
        fill_random_bytes(L.w, n / 2);
        size_t ns = n / kInt4Group;
        L.scale = mem.alloc<bf16>(ns, "s");
        fill_scales_kernel<<<256, 256>>>(nullptr, (bf16*)L.scale, ns);
    }
    LAUNCH_CHECK();
    return L;
}

// --rows: microseconds for a pass of T rows (the batched core's decode steps) over one FP8 or INT4 projection, by each
// path, and the weight bytes' GB/s of the rows kernel; weights rotated over copies that do not fit in L2.
static void bench_rows(double copy, const cudaDeviceProp& prop, cudaStream_t st) {
    struct Shape { const char* name; int N, K; };
    const Shape shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}};
    Gemm gemm;
    for (WFormat fmt : {WFormat::FP8, WFormat::INT4}) {
        std::printf("\nQwen3-8B %s projections, a pass of T rows: us per pass | per-row GEMVs, tensor-core rows, "
                    "dequantize + GEMM | weight GB/s of the rows kernel (%% of copy)\n", wformat_name(fmt));
        for (const Shape& sh : shapes) {
            GpuMemory mem;
            Linear probe;
            probe.N = sh.N, probe.K = sh.K, probe.fmt = fmt, probe.kblock = 128;
            const int copies = (int)std::max<size_t>(2, CEIL_DIV((size_t)4 * prop.l2CacheSize, probe.bytes()));
            std::vector<Linear> Ls;
            for (int i = 0; i < copies; i++) Ls.push_back(make(fmt, sh.N, sh.K, 128, mem));
            bf16* x = mem.alloc<bf16>((size_t)64 * sh.K, "x");
            fill_bf16_kernel<<<256, 256>>>(x, (size_t)64 * sh.K, 3);
            float* y = mem.alloc<float>((size_t)64 * sh.N, "y");
            bf16* deq = mem.alloc<bf16>((size_t)sh.N * sh.K, "deq");
            LAUNCH_CHECK();
            for (int T : {1, 2, 4, 8, 16, 32, 64}) {
                const int iters = 40;
                auto time = [&](auto&& one) {
                    return median_ms(st, 1, 5, [&] {
                               for (int i = 0; i < iters; i++) one(Ls[i % copies]);
                           }) * 1e3 / iters;
                };
                float us_gemv = time([&](const Linear& L) {
                    for (int t = 0; t < T; t++) gemv(L, x + (size_t)t * sh.K, y + (size_t)t * sh.N, st);
                });
                float us_rows = time([&](const Linear& L) { quant_rows(L, x, T, y, false, st); });
                float us_gemm = time([&](const Linear& L) {
                    dequant_to_bf16(L, deq, st);
                    gemm_bf16(gemm, x, deq, y, T, sh.N, sh.K, false, st);
                });
                double gbs = probe.bytes() / (us_rows * 1e-6) / 1e9;
                std::printf("  %-8s T %2d | %8.1f %8.1f %8.1f | %6.0f (%3.0f%%)\n", sh.name, T, us_gemv, us_rows, us_gemm, gbs, 100 * gbs / copy);
            }
        }
    }
}

int main(int argc, char** argv) {
    const bool rows = argc > 1 && std::string(argv[1]) == "--rows";
    return run_main([rows]() -> int {
        require_cuda_device();
        cudaStream_t st = 0;
        double copy = measure_copy_bandwidth(st);
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::printf("device: %s, copy bandwidth %.1f GB/s, L2 %d MB\n", prop.name, copy, prop.l2CacheSize >> 20);
        if (rows) {
            bench_rows(copy, prop, st);
            return 0;
        }
        std::vector<GemvShape> shapes = {
            {"0.6B", "qkv", 4096, 1024},  {"0.6B", "o", 1024, 2048},    {"0.6B", "gate_up", 6144, 1024}, {"0.6B", "down", 1024, 3072},
            {"4B", "qkv", 6144, 2560},    {"4B", "o", 2560, 4096},      {"4B", "gate_up", 19456, 2560},
            {"4B", "down", 2560, 9728},   {"4B", "lm_head", 151936, 2560}, {"8B", "qkv", 6144, 4096},
            {"8B", "o", 4096, 4096},      {"8B", "gate_up", 24576, 4096}, {"8B", "down", 4096, 12288},
            {"8B", "lm_head", 151936, 4096},
        };
        struct Fmt { const char* name; WFormat f; };
        std::vector<Fmt> fmts = {{"bf16", WFormat::BF16}, {"fp8", WFormat::FP8}, {"int4", WFormat::INT4}};
        // layout {0, 0, 0}: the engine's rule (R 0: the rule's rows per warp). as_engine: the call the engine makes for
        // this projection (qkv: fused RMSNorm; gate_up: fused RMSNorm and SwiGLU, whose 4-row blocks loop over row
        // groups; o and down: residual add; lm_head: plain); otherwise a plain y = W x.
        struct Variant { GemvLayout layout; bool pdl, as_engine; };
        const Variant variants[] = {{{0, 0, 0}, true, false}, {{0, 0, 0}, false, false}, {{0, 0, 0}, true, true}, {{1, 1, 0}, true, false},
                                    {{1, 2, 0}, true, false}, {{1, 4, 0}, true, false}, {{1, 8, 0}, true, false}, {{2, 1, 0}, true, false},
                                    {{4, 1, 0}, true, false}};
        const bool pdl_default = pdl_enabled();
        Gemm gemm;
        for (const Fmt& f : fmts) {
            std::printf("\n%s weights: GB/s (%% of copy) by layout (KS warps per row group, S blocks per cluster); 'auto' is what the "
                        "engines use\n", f.name);
            std::printf("%-4s %-8s %7s %6s | %11s %11s %11s %11s %11s %11s %11s %11s %11s |%s\n", "", "shape", "N", "K", "auto", "auto no-pdl", "as engine",
                        "KS 1", "KS 2", "KS 4", "KS 8", "S 2", "S 4",
                        f.f == WFormat::BF16 ? " cuBLAS" : "");
            for (const GemvShape& sh : shapes) {
                std::printf("%-4s %-8s %7d %6d |", sh.model, sh.name, sh.N, sh.K);
                float* y = nullptr;
                bf16* x = nullptr;
                CUDA_CHECK(cudaMalloc(&y, (size_t)sh.N * 4));
                CUDA_CHECK(cudaMalloc(&x, (size_t)sh.K * 2));
                fill_bf16_kernel<<<64, 256>>>(x, sh.K, 3);
                // The fused-RMSNorm input (the engine's qkv and gate_up): float x and bf16 norm weights; h, gate_up's output.
                float* xf = nullptr;
                bf16* norm_w = nullptr;
                CUDA_CHECK(cudaMalloc(&xf, (size_t)sh.K * 4));
                CUDA_CHECK(cudaMalloc(&norm_w, (size_t)sh.K * 2));
                fill_scales_kernel<<<64, 256>>>(xf, norm_w, sh.K);
                bf16* h = nullptr;
                CUDA_CHECK(cudaMalloc(&h, (size_t)sh.N));  // N / 2 bf16
                // the engine's call for this projection, chosen once, outside the timed loop
                enum class Call { PLAIN, RMSNORM, RMSNORM_SWIGLU, ADD };
                const std::string proj = sh.name;
                const Call engine_call = proj == "qkv"       ? Call::RMSNORM
                                         : proj == "gate_up" ? Call::RMSNORM_SWIGLU
                                         : proj == "lm_head" ? Call::PLAIN
                                                             : Call::ADD;  // o, down
                GpuMemory mem;
                Linear probe;
                probe.N = sh.N, probe.K = sh.K, probe.fmt = f.f, probe.kblock = fp8_kblock(sh.K);
                int copies = (int)std::max<size_t>(1, CEIL_DIV((size_t)4 * prop.l2CacheSize, probe.bytes()));
                std::vector<Linear> Ls;
                for (int i = 0; i < copies; i++) Ls.push_back(make(f.f, sh.N, sh.K, probe.kblock, mem));
                const int iters = 200;
                GpuTimer t(st);
                for (const Variant& v : variants) {
                    gemv_forced_layout() = v.layout;
                    pdl_enabled() = pdl_default && v.pdl;
                    auto run = [&](const Linear& L) {
                        switch (v.as_engine ? engine_call : Call::PLAIN) {
                            case Call::PLAIN: return gemv(L, x, y, st);
                            case Call::RMSNORM: return gemv_rmsnorm(L, xf, norm_w, 1e-6f, y, st);
                            case Call::RMSNORM_SWIGLU: return gemv_rmsnorm_swiglu(L, xf, norm_w, 1e-6f, h, st);
                            case Call::ADD: return gemv_add(L, x, y, st);
                        }
                    };
                    for (int i = 0; i < 3; i++) run(Ls[i % copies]);
                    t.start();
                    for (int i = 0; i < iters; i++) run(Ls[i % copies]);
                    float ms = t.stop();
                    double gbs = probe.bytes() * (double)iters / (ms * 1e-3) / 1e9;
                    std::printf(" %5.0f (%3.0f%%)", gbs, 100 * gbs / copy);
                }
                gemv_forced_layout() = GemvLayout{0, 0, 0};
                pdl_enabled() = pdl_default;
                if (f.f == WFormat::BF16) {  // cuBLAS on the same bf16 copies
                    t.start();
                    for (int i = 0; i < iters; i++) gemm_bf16(gemm, x, (const bf16*)Ls[i % copies].w, y, 1, sh.N, sh.K, false, st);
                    float cms = t.stop();
                    double gbs = probe.bytes() * (double)iters / (cms * 1e-3) / 1e9;
                    std::printf(" | %5.0f (%2.0f%%)", gbs, 100 * gbs / copy);
                }
                std::printf("\n");
                CUDA_CHECK(cudaFree(y));
                CUDA_CHECK(cudaFree(x));
                CUDA_CHECK(cudaFree(xf));
                CUDA_CHECK(cudaFree(norm_w));
                CUDA_CHECK(cudaFree(h));
            }
        }
        return 0;
    });
}
