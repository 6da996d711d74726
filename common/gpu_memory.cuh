// gpu_memory.cuh — device allocations counted by purpose, and checkpoint tensors uploaded as bf16.
//
// Usage:
//   GpuMemory mem;
//   bf16* w = mem.alloc<bf16>(n, "weights");           // freed when mem goes away
//   upload_bf16(ck.get(name, {rows, cols}), w, cols, stream);   // BF16, F16 or F32 source
//   upload_bf16(t, w + 1 * cols, 2 * cols, stream);    // every row of t into every other row of w
//   mem.print_report(stderr);                          // "weights 7.49 GiB, kv 1.12 GiB, ..."
//
// Every allocation is filled with 0xFF bytes (NaN in bf16 and fp32) so that a kernel reading
// memory nothing wrote shows up as NaN instead of a plausible zero.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <map>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "host_upload.cuh"
#include "safetensors.h"

namespace monocu {

using bf16 = __nv_bfloat16;

class GpuMemory {
public:
    GpuMemory() = default;
    GpuMemory(const GpuMemory&) = delete;
    GpuMemory& operator=(const GpuMemory&) = delete;
    ~GpuMemory() {
        for (void* p : blocks_) cudaFree(p);
    }

    template <class T>
    T* alloc(size_t n, const std::string& purpose) {
        void* p = nullptr;
        size_t bytes = (n ? n : 1) * sizeof(T);
        cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) {
            size_t free_b = 0, total_b = 0;
            cudaGetLastError();
            cudaMemGetInfo(&free_b, &total_b);
            die("out of GPU memory allocating %.2f GiB for %s (%.2f GiB free of %.2f GiB)", bytes / 1073741824.0,
                purpose.c_str(), free_b / 1073741824.0, total_b / 1073741824.0);
        }
        CUDA_CHECK(e);
        CUDA_CHECK(cudaMemset(p, 0xFF, bytes));
        CUDA_CHECK(cudaDeviceSynchronize());  // the poison lands before any stream writes the buffer
        blocks_.push_back(p);
        bytes_[purpose] += bytes;
        return static_cast<T*>(p);
    }

    size_t bytes(const std::string& purpose) const {
        auto it = bytes_.find(purpose);
        return it == bytes_.end() ? 0 : it->second;
    }
    size_t total_bytes() const {
        size_t s = 0;
        for (const auto& kv : bytes_) s += kv.second;
        return s;
    }
    std::string report() const {
        std::string r;
        for (const auto& kv : bytes_) r += strf("%s%s %.2f MiB", r.empty() ? "" : ", ", kv.first.c_str(), kv.second / 1048576.0);
        return r + strf(" (total %.2f MiB)", total_bytes() / 1048576.0);
    }

private:
    std::vector<void*> blocks_;
    std::map<std::string, size_t> bytes_;
};

// 8 bf16 (one 16-byte load) widened to float.
__device__ __forceinline__ void bf16x8_to_float(uint4 v, float* f) {
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 t = __bfloat1622float2(p[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

// 8 floats rounded to bf16 (round to nearest even), as one 16-byte value: the reverse of bf16x8_to_float.
__device__ __forceinline__ uint4 float8_to_bf16x8(const float* f) {
    uint4 v;
    __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    return v;
}

// 8 floats rounded to fp16 as one 16-byte value, clamped to fp16's largest finite value (65504) so that an
// out-of-range activation saturates instead of becoming inf (a NaN stays NaN). fp16 keeps 3 more mantissa
// bits than bf16; the prefill attention computes in it (attention.cuh).
__device__ __forceinline__ float clamp_to_half_range(float x) {
    constexpr float kMax = 65504.f;
    return x > kMax ? kMax : x < -kMax ? -kMax : x;
}
__device__ __forceinline__ uint4 float8_to_half8_sat(const float* f) {
    uint4 v;
    __half2* p = reinterpret_cast<__half2*>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = __floats2half2_rn(clamp_to_half_range(f[2 * k]), clamp_to_half_range(f[2 * k + 1]));
    return v;
}

// 8 floats from a 16-byte aligned address (two 16-byte loads).
__device__ __forceinline__ void load_float8(const float* p, float* x) {
    float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// ---- checkpoint tensors to bf16 on the device ----

static __global__ void f32_to_bf16_kernel(const float* __restrict__ in, bf16* __restrict__ out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(in[i]);
}
static __global__ void f16_to_bf16_kernel(const __half* __restrict__ in, bf16* __restrict__ out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(__half2float(in[i]));
}

// Copies tensor t (BF16, F16 or F32; viewed as rows of its last dimension) into dst as bf16, with
// consecutive rows dst_pitch elements apart (dst_pitch == row length for a plain copy).
inline void upload_bf16(const TensorView& t, bf16* dst, size_t dst_pitch, cudaStream_t stream) {
    if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
        die("%s: tensor '%s' has dtype %s; this engine reads BF16, F16 or F32 weights", t.file.c_str(), t.name.c_str(),
            dtype_name(t.dtype));
    size_t cols = t.shape.empty() ? 1 : static_cast<size_t>(t.shape.back());
    size_t n = static_cast<size_t>(t.numel()), rows = cols ? n / cols : 0;
    if (n == 0) return;
    if (t.dtype == DType::BF16) {
        upload_2d(dst, dst_pitch * 2, t.data, cols * 2, cols * 2, rows, stream);
        return;
    }
    // Stage the raw bytes, convert on the device, then place the rows.
    void* raw = nullptr;
    bf16* conv = nullptr;
    CUDA_CHECK(cudaMallocAsync(&raw, t.nbytes(), stream));
    CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&conv), n * 2, stream));
    upload_bytes(raw, t.data, t.nbytes(), stream);
    int grid = static_cast<int>(std::min<size_t>(CEIL_DIV(n, 256), 65535));
    if (t.dtype == DType::F32) f32_to_bf16_kernel<<<grid, 256, 0, stream>>>(static_cast<const float*>(raw), conv, n);
    else f16_to_bf16_kernel<<<grid, 256, 0, stream>>>(static_cast<const __half*>(raw), conv, n);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch * 2, conv, cols * 2, cols * 2, rows, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaFreeAsync(raw, stream));
    CUDA_CHECK(cudaFreeAsync(conv, stream));
}

}  // namespace monocu
