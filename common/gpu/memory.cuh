// gpu/memory.cuh — device allocations counted by purpose.
//
// Usage:
//   GpuMemory mem;
//   bf16* w = mem.alloc<bf16>(n, "weights");           // freed when mem goes away
//   mem.report()                                       // "weights 7490.00 MiB, kv cache 1120.00 MiB, ..."
//
// Every allocation is filled with 0xFF bytes (NaN in bf16 and fp32) so that a kernel reading
// memory nothing wrote shows up as NaN instead of a plausible zero.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/types.cuh"
#include "host/errors.h"

namespace monocu {

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

}  // namespace monocu
