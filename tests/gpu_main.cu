// GPU test runner: every tests/*.cu is linked into build/<ARCH>/gpu_tests. Without a usable CUDA
// device it says so and exits 0, so CI (no GPU) passes while the GPU machine runs everything.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>

int main(int argc, char** argv) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        std::printf("GPU tests skipped: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 0;
    }
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    std::printf("GPU tests on %s (sm_%d%d, %d SMs)\n", p.name, p.major, p.minor, p.multiProcessorCount);
    doctest::Context ctx;
    ctx.applyCommandLine(argc, argv);
    return ctx.run();
}
