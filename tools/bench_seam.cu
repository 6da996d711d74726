// bench_seam — what one hand-over between dependent decode steps costs (a microbenchmark, not a test).
//
//   build/sm_90/tools/bench_seam
//
// A decode step is a chain of dependent steps (a layer: qkv, attention, merge, o, gate_up, down), and every
// block of a step needs all of the previous step's output (x). Two ways to hand over, measured here over 400
// steps with 1 or 2 blocks per SM of 256 threads:
//   - a kernel per step, as the engines run (captured in one CUDA graph), with and without programmatic
//     dependent launch (pdl.cuh);
//   - one persistent kernel whose blocks meet at a grid-wide barrier between steps, as a decode "megakernel"
//     would: cooperative groups' grid.sync(), a counter with red.release / ld.acquire (thread 0 polls), and
//     a counter with __threadfence / atomicAdd / a volatile poll (the eighth session's branch exp/gemv-chain).
// Each at K = 0 (the hand-over alone) and with x of K floats moved: every block writes its slice, then after
// the hand-over reads all of x into shared memory (what a GEMV's staging does). Prints microseconds per step.
// What it answered (kb/log.md, thirteenth session): on the H100 a barrier inside a persistent kernel costs
// more than a PDL kernel boundary, so a persistent decode kernel could win only by overlapping weight loads
// with the attention and the hand-overs, not by cheaper hand-overs.
#include <cooperative_groups.h>

#include <cstdio>

#include "pdl.cuh"
#include "timing.cuh"

using namespace monocu;

constexpr int kThreads = 256, kMaxK = 12288, kSteps = 400;

// Every thread's share of this block's slice of x: x[i] = v + i.
__device__ __forceinline__ void write_slice(float* x, int K, float v) {
    int per = (K + gridDim.x - 1) / gridDim.x, begin = blockIdx.x * per, end = min(K, begin + per);
    for (int i = begin + threadIdx.x; i < end; i += kThreads) x[i] = v + i;
}

// All of x into shared memory (16-byte loads through L2, where the other blocks' writes are); one element
// comes back so that nothing is optimised away.
__device__ __forceinline__ float read_all(const float* x, int K, float* sx) {
    for (int i = threadIdx.x * 4; i < K; i += kThreads * 4) *reinterpret_cast<float4*>(sx + i) = __ldcg(reinterpret_cast<const float4*>(x + i));
    __syncthreads();
    return sx[(threadIdx.x * 37) % K];
}

// One step as a kernel of its own: wait for the previous step, read its x, write ours.
__global__ void __launch_bounds__(kThreads) step_kernel(const float* x_prev, float* x_next, int K) {
    __shared__ __align__(16) float sx[kMaxK];
    pdl_launch_dependents();
    pdl_wait();
    if (K == 0) return;
    write_slice(x_next, K, read_all(x_prev, K, sx));
}

enum class Barrier { GridSync, ReleaseAcquire, FenceAtomic };

// All blocks of the grid reach this before any leaves; `count` only grows, across launches too (target = the
// arrivals of every earlier step).
template <Barrier B>
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned target) {
    if constexpr (B == Barrier::GridSync) {
        cooperative_groups::this_grid().sync();
    } else {
        __syncthreads();
        if (threadIdx.x == 0) {
            if constexpr (B == Barrier::ReleaseAcquire) {
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
                unsigned seen = 0;
                do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
                while (seen < target);
            } else {
                __threadfence();
                atomicAdd(count, 1u);
                while (*reinterpret_cast<volatile unsigned*>(count) < target) {
                }
                __threadfence();
            }
        }
        __syncthreads();
    }
}

// Every step in one launch: write our slice, barrier, read all of x.
template <Barrier B>
__global__ void __launch_bounds__(kThreads) persistent_kernel(float* xa, float* xb, int K, int steps, unsigned* count, unsigned base) {
    __shared__ __align__(16) float sx[kMaxK];
    float v = 0.f;
    for (int s = 0; s < steps; s++) {
        float* x = s % 2 ? xb : xa;
        if (K) write_slice(x, K, v);
        grid_barrier<B>(count, base + (unsigned)(s + 1) * gridDim.x);
        if (K) v = read_all(x, K, sx);
        __syncthreads();  // sx is refilled next step
    }
}

struct Buffers {
    float *xa = nullptr, *xb = nullptr;
    unsigned* count = nullptr;
};

// Microseconds per step of a graph of kSteps step kernels.
static float time_kernel_chain(const Buffers& b, int grid, int K, bool pdl, cudaStream_t st) {
    pdl_enabled() = pdl && device_supports_pdl();
    launch(step_kernel, dim3(grid), dim3(kThreads), 0, st, b.xa, b.xb, K);  // eager first: its attribute calls stay out of the capture
    CUDA_CHECK(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int s = 0; s < kSteps; s++) launch(step_kernel, dim3(grid), dim3(kThreads), 0, st, s % 2 ? b.xb : b.xa, s % 2 ? b.xa : b.xb, K);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    float ms = median_ms(st, 1, 7, [&] { CUDA_CHECK(cudaGraphLaunch(exec, st)); });  // the first launch uploads the graph
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return ms * 1000.f / kSteps;
}

// The same in one cooperative launch (all blocks resident), or -1 when `grid` blocks cannot all be resident.
template <Barrier B>
static float time_persistent(const Buffers& b, int grid, int K, cudaStream_t st) {
    int sms = sm_count(), per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel<B>, kThreads, 0));
    if (per_sm * sms < grid) return -1.f;
    float *xa = b.xa, *xb = b.xb;
    unsigned* count = b.count;
    unsigned base = 0;  // arrivals at the counter before each launch
    int k = K, steps = kSteps;
    void* args[] = {&xa, &xb, &k, &steps, &count, &base};
    CUDA_CHECK(cudaMemsetAsync(b.count, 0, sizeof(unsigned), st));
    float ms = median_ms(st, 1, 7, [&] {
        CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel<B>), dim3(grid), dim3(kThreads), args, 0, st));
        base += (unsigned)kSteps * grid;  // args holds &base: read at the launch above, so the next launch sees this
    });
    return ms * 1000.f / kSteps;
}

int main() {
    return run_main([]() -> int {
        require_cuda_device();
        const int sms = sm_count();
        std::printf("device: %s, %d SMs; microseconds per step (%d steps, median of 7 runs)\n", device_name().c_str(), sms, kSteps);
        Buffers b;
        CUDA_CHECK(cudaMalloc(&b.xa, kMaxK * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&b.xb, kMaxK * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&b.count, sizeof(unsigned)));
        CUDA_CHECK(cudaMemset(b.xa, 0, kMaxK * sizeof(float)));
        CUDA_CHECK(cudaMemset(b.xb, 0, kMaxK * sizeof(float)));
        cudaStream_t st;
        CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        const bool pdl_default = pdl_enabled();
        std::printf("%-9s %6s | %9s %9s | %10s %16s %14s\n", "blocks/SM", "K", "kernels", "+PDL", "grid.sync", "release/acquire", "fence+atomic");
        for (int per_sm : {1, 2}) {
            for (int K : {0, 2560, 4096, 9728, 12288}) {
                int grid = per_sm * sms;
                std::printf("%-9d %6d | %9.3f %9.3f | %10.3f %16.3f %14.3f\n", per_sm, K, time_kernel_chain(b, grid, K, false, st),
                            time_kernel_chain(b, grid, K, true, st), time_persistent<Barrier::GridSync>(b, grid, K, st),
                            time_persistent<Barrier::ReleaseAcquire>(b, grid, K, st), time_persistent<Barrier::FenceAtomic>(b, grid, K, st));
            }
        }
        pdl_enabled() = pdl_default;
        CUDA_CHECK(cudaFree(b.xa));
        CUDA_CHECK(cudaFree(b.xb));
        CUDA_CHECK(cudaFree(b.count));
        CUDA_CHECK(cudaStreamDestroy(st));
        return 0;
    });
}
