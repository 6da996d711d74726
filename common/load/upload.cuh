// load/upload.cuh — checkpoint tensors onto the GPU as bf16, whatever float type the file holds.
//
// Usage:
//   upload_bf16(ck.get(name, {rows, cols}), w, cols, stream);   // BF16, F16 or F32 source
//   upload_bf16(t, w + 1 * cols, 2 * cols, stream);              // every row of t into every other row of w
//   bf16* norm = load_vector(ck, "model.norm.weight", dim, mem, stream);   // allocate, check the shape, upload
#pragma once

#include <cstring>
#include <vector>

#include "gpu/memory.cuh"
#include "host/bf16.h"
#include "host/safetensors.h"
#include "load/host_upload.cuh"

namespace monocu {

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

// A 1-D tensor of n elements kept in fp32 on the GPU (LFM2's expert_bias, which transformers keeps in float32),
// from an F32, BF16 or F16 tensor.
inline float* load_vector_f32(const Checkpoint& ck, const std::string& name, int n, GpuMemory& mem, cudaStream_t s) {
    const TensorView& t = ck.get(name, {n});
    std::vector<float> v(n);
    for (int i = 0; i < n; i++) {
        if (t.dtype == DType::F32) std::memcpy(&v[i], t.data + 4 * (size_t)i, 4);
        else if (t.dtype == DType::BF16) v[i] = bf16_bits_to_float(reinterpret_cast<const uint16_t*>(t.data)[i]);
        else if (t.dtype == DType::F16) v[i] = f16_bits_to_float(reinterpret_cast<const uint16_t*>(t.data)[i]);
        else die("%s: tensor '%s' has dtype %s; expected F32, BF16 or F16", t.file.c_str(), name.c_str(), dtype_name(t.dtype));
    }
    float* d = mem.alloc<float>(n, "weights");
    CUDA_CHECK(cudaMemcpyAsync(d, v.data(), (size_t)n * 4, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));  // v lives on this stack frame
    return d;
}

// model.embed_tokens.weight [vocab][dim] as bf16 (every decoder's token embedding; a tied lm_head reads it too).
inline bf16* load_embedding(const Checkpoint& ck, int vocab, int dim, GpuMemory& mem, cudaStream_t s) {
    bf16* e = mem.alloc<bf16>((size_t)vocab * dim, "weights");
    upload_bf16(ck.get("model.embed_tokens.weight", {vocab, dim}), e, dim, s);
    return e;
}

// A 1-D tensor of n elements (a norm's weight, a bias) in its own bf16 allocation, shape checked.
inline bf16* load_vector(const Checkpoint& ck, const std::string& name, int n, GpuMemory& mem, cudaStream_t s) {
    bf16* d = mem.alloc<bf16>(n, "weights");
    upload_bf16(ck.get(name, {n}), d, n, s);
    return d;
}

}  // namespace monocu
