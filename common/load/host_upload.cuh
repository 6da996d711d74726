// load/host_upload.cuh — a checkpoint's bytes from host memory to the GPU at the speed of the PCIe link.
//
// Usage:
//   upload_begin(ck.total_bytes());   // before a load: pinned buffers only if the load is big enough to pay for them
//   upload_2d(dst, dst_pitch, src, src_pitch, width, rows, stream);  // as cudaMemcpy2DAsync(..., HostToDevice)
//   upload_bytes(dst, src, n, stream);                                 // one contiguous range
//   upload_release();   // after the last upload: waits for the copies in flight, frees the pinned buffers
//
// Why: the weights sit in mmap'd, pageable memory. The driver copies pageable memory through a small pinned
// buffer of its own, with the calling thread alone touching the source pages: ~7 GB/s on the H100 machine.
// Here up to 8 threads copy the source into one of three 64 MB pinned buffers while the copy engine moves the
// previous one to the GPU. Qwen3-8B (16.4 GB of bf16 files in the page cache) then loads in 1.24-1.36 s
// instead of 2.57-2.65 s, quantized to fp8 or int4 in 1.30-1.57 s instead of 2.83-3.29 s (H100, kb/log.md,
// twentieth session). A load from a cold disk is bound by the disk either way (~1.5 GB/s there).
// Pinning the three buffers costs ~0.1 s, which smaller loads do not win back: Qwen3-0.6B (1.2 GB) went from
// 0.39-0.48 s to 0.55-0.57 s and the shipped 27 MB model from 0.24-0.33 s to 0.35-0.49 s with them, so below
// kPinnedUploadMinBytes every copy goes the driver's way, as before; Qwen3-4B (8 GB) gains: 1.51-1.90 s -> 0.91-1.25 s.
// The source may be freed or changed as soon as a call returns (its bytes are in a pinned buffer by then);
// the destination is written in stream order, like any async copy.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "gpu/cuda_check.h"

namespace monocu {

constexpr size_t kPinnedUploadMinBytes = size_t(4) << 30;

class HostUploader {
public:
    // slot_bytes: each pinned buffer; slots: how many take turns; direct_bytes: copies below it go straight to
    // cudaMemcpy2DAsync (for them the hand-off costs more than it saves), and no thread copies less than it.
    explicit HostUploader(size_t slot_bytes = 64u << 20, int slots = 3, size_t direct_bytes = 256u << 10)
        : slot_bytes_(slot_bytes), direct_bytes_(std::max<size_t>(direct_bytes, 1)), slots_(std::max(slots, 1)),
          threads_((int)std::clamp(std::thread::hardware_concurrency(), 1u, 8u)) {}
    HostUploader(const HostUploader&) = delete;
    HostUploader& operator=(const HostUploader&) = delete;
    ~HostUploader() { release(); }

    // Whether the next copies use the pinned buffers: a load of expected_bytes in all.
    void begin(size_t expected_bytes) { pinned_ = expected_bytes >= kPinnedUploadMinBytes; }
    size_t pinned_bytes() const { return pool_.size() * slot_bytes_; }

    void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows, cudaStream_t s) {
        if (width == 0 || rows == 0) return;
        if (!pinned_ || width * rows < direct_bytes_ || !have_pool()) {
            CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyHostToDevice, s));
            return;
        }
        auto* d = static_cast<uint8_t*>(dst);
        auto* h = static_cast<const uint8_t*>(src);
        if (width > slot_bytes_) {  // rows wider than a buffer: each row in buffer-sized pieces
            for (size_t r = 0; r < rows; r++)
                for (size_t at = 0; at < width; at += slot_bytes_)
                    send(d + r * dst_pitch + at, dst_pitch, h + r * src_pitch + at, src_pitch, std::min(slot_bytes_, width - at), 1, s);
            return;
        }
        const size_t rows_per_slot = slot_bytes_ / width;
        for (size_t r0 = 0; r0 < rows; r0 += rows_per_slot)
            send(d + r0 * dst_pitch, dst_pitch, h + r0 * src_pitch, src_pitch, width, std::min(rows_per_slot, rows - r0), s);
    }

    // Waits for the copies in flight and frees the pinned buffers; copies go the driver's way until the next begin().
    void release() {
        for (Slot& slot : pool_) {
            cudaEventSynchronize(slot.done);  // no CUDA_CHECK: also runs at exit, when the runtime may be gone
            cudaEventDestroy(slot.done);
            cudaFreeHost(slot.host);
        }
        pool_.clear();
        next_ = 0;
        pinned_ = false;
    }

private:
    struct Slot {
        void* host = nullptr;
        cudaEvent_t done = nullptr;
    };

    // One piece that fits a buffer (width x rows <= slot_bytes_): gathered into the next buffer, then copied out
    // of it with the destination's pitch.
    void send(uint8_t* dst, size_t dst_pitch, const uint8_t* src, size_t src_pitch, size_t width, size_t rows, cudaStream_t s) {
        Slot& slot = take_slot();
        gather_rows(slot.host, src, src_pitch, width, rows);
        CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, slot.host, width, width, rows, cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaEventRecord(slot.done, s));
    }

    // The pinned buffers, made on first use. Where the system will not pin that much memory, every copy goes the
    // driver's way instead (slower, same bytes).
    bool have_pool() {
        if (!pool_.empty()) return true;
        for (int i = 0; i < slots_; i++) {
            Slot slot;
            if (cudaHostAlloc(&slot.host, slot_bytes_, cudaHostAllocDefault) != cudaSuccess) {
                cudaGetLastError();  // clear it: nothing failed that a pageable copy cannot do
                release();  // also turns pinned_ off
                return false;
            }
            CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));  // not recorded yet: complete
            pool_.push_back(slot);
        }
        return true;
    }

    // The next buffer in turn, once the copy that last read it has finished.
    Slot& take_slot() {
        Slot& slot = pool_[next_];
        next_ = (next_ + 1) % slots_;
        CUDA_CHECK(cudaEventSynchronize(slot.done));
        return slot;
    }

    // rows x width bytes from src (rows src_pitch apart) packed into dst, the packed bytes cut into equal spans,
    // one per thread (a span may cross rows).
    void gather_rows(void* dst, const uint8_t* src, size_t src_pitch, size_t width, size_t rows) const {
        const size_t total = width * rows;
        const int t = (int)std::min<size_t>(threads_, std::max<size_t>(1, total / direct_bytes_));
        auto span = [&](int i) {
            size_t begin = total * i / t, end = total * (i + 1) / t;
            while (begin < end) {
                size_t r = begin / width, c = begin % width, len = std::min(width - c, end - begin);
                std::memcpy(static_cast<uint8_t*>(dst) + begin, src + r * src_pitch + c, len);
                begin += len;
            }
        };
        std::vector<std::thread> pool;
        int started = 1;
        try {
            for (; started < t; started++) pool.emplace_back(span, started);
        } catch (const std::system_error&) {  // no thread to be had: this one copies the rest
        }
        for (int i = started; i < t; i++) span(i);
        span(0);
        for (std::thread& th : pool) th.join();
    }

    size_t slot_bytes_, direct_bytes_;
    int slots_, threads_;
    std::vector<Slot> pool_;
    int next_ = 0;
    bool pinned_ = false;  // set by begin(), cleared by release() or by a failed pin
};

// The process's uploader, for the loaders.
inline HostUploader& host_uploader() {
    static HostUploader u;
    return u;
}
inline void upload_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows, cudaStream_t s) {
    host_uploader().copy_2d(dst, dst_pitch, src, src_pitch, width, rows, s);
}
inline void upload_bytes(void* dst, const void* src, size_t n, cudaStream_t s) { upload_2d(dst, n, src, n, n, 1, s); }
inline void upload_begin(size_t expected_bytes) { host_uploader().begin(expected_bytes); }
inline void upload_release() { host_uploader().release(); }

}  // namespace monocu
