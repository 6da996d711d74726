// gpu/cuda_check.h — checks for every CUDA and cuBLAS call, and the one-line "no GPU" error.
//
// Usage:
//   CUDA_CHECK(cudaMalloc(&p, bytes));
//   my_kernel<<<grid, block, 0, stream>>>(...); LAUNCH_CHECK();
//   CUBLAS_CHECK(cublasGemmEx(...));
//   require_cuda_device();            // UserError saying what is missing: driver, device, memory, arch
//   compute_capability_major();       // of the current device: 9 for Hopper
//
// A failing CUDA call is a bug or a driver problem, not bad user input: it prints the function,
// file, line and the error's name, then exits with code 3.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/errors.h"

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

namespace monocu {

[[noreturn]] inline void cuda_fail(const char* what, const char* name, const char* desc, const char* func,
                                   const char* file, int line) {
    std::fprintf(stderr, "fatal: %s error %s (%s) in %s at %s:%d\n", what, name, desc, func, file, line);
    std::exit(3);
}

inline const char* cublas_status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

// Throws UserError when no usable CUDA device exists; returns the device count otherwise.
// The GPU this process will use, checked, with a message that says what is missing: no NVIDIA driver at all, a
// driver older than the CUDA runtime this binary was built with, no device, a device busy or out of memory, or a
// compute capability this build has no code for.
inline int require_cuda_device() {
    if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) dlclose(lib);
    else die("no NVIDIA driver: libcuda.so.1 cannot be loaded (%s)", dlerror());
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        int driver = 0, runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        die("the NVIDIA driver supports CUDA %d.%d; this build needs %d.%d (update the driver)", driver / 1000, driver % 1000 / 10,
            runtime / 1000, runtime % 1000 / 10);
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) die("no CUDA device: the driver is loaded but reports no GPU");
    if (e != cudaSuccess) die("no usable CUDA device: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    e = cudaFree(nullptr);  // creates the context: where a busy or full GPU shows
    if (e == cudaErrorDevicesUnavailable) die("the GPU is busy: another process holds it (exclusive compute mode)");
    if (e == cudaErrorMemoryAllocation) die("the GPU is out of memory before loading anything (other processes hold it)");
    if (e != cudaSuccess) die("cannot use the GPU: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
#ifdef __CUDA_ARCH_LIST__
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
        const int built[] = {__CUDA_ARCH_LIST__};
        bool ok = false;
        for (int a : built) ok = ok || a == p.major * 100 + p.minor * 10;
        if (!ok)
            die("the GPU (%s) has compute capability %d.%d; this binary was built for sm_%d only (rebuild with make ARCH=sm_%d%d)",
                p.name, p.major, p.minor, built[0] / 10, p.major, p.minor);
    }
#endif
    return n;
}

}  // namespace monocu

#define CUDA_CHECK(call)                                                                                  \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess)                                                                            \
            ::monocu::cuda_fail("CUDA", cudaGetErrorName(e_), cudaGetErrorString(e_), __func__, __FILE__, \
                                __LINE__);                                                                \
    } while (0)

#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                                     \
    do {                                                                                                       \
        cublasStatus_t s_ = (call);                                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                       \
            ::monocu::cuda_fail("cuBLAS", ::monocu::cublas_status_name(s_), #call, __func__, __FILE__, __LINE__); \
    } while (0)

namespace monocu {

// The current device's compute capability, major part (8 Ampere, 9 Hopper).
inline int compute_capability_major() {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major;
}

// The current device's number of SMs, and its name.
inline int sm_count() {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}
inline std::string device_name() {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    return prop.name;
}

// The GPU's global timer in nanoseconds: one clock for every SM (unlike clock64), so stamps taken by different
// blocks compare directly. (Device code.)
__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

}  // namespace monocu
