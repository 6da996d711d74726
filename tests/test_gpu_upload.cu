// host_upload.cuh against cudaMemcpy2D's contract, on random bytes: every destination byte the copy covers holds
// its source byte, and every other byte keeps its poison.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_util.cuh"
#include "load/host_upload.cuh"

using namespace monocu;
using namespace monocu_test;

namespace {

struct Copy2d {
    size_t width, rows, src_pitch, dst_pitch;
};

// Runs c through up on fresh random source bytes (overwritten as soon as the call returns: the uploader must
// have taken them by then), and checks the whole destination buffer against the CPU's copy.
void check_copy(HostUploader& up, const Copy2d& c, std::mt19937_64& g) {
    const size_t src_bytes = (c.rows - 1) * c.src_pitch + c.width, dst_bytes = (c.rows - 1) * c.dst_pitch + c.width + 64;
    std::vector<uint8_t> src(src_bytes);
    for (auto& b : src) b = (uint8_t)g();
    std::vector<uint8_t> want(dst_bytes, 0xFF);
    for (size_t r = 0; r < c.rows; r++) std::memcpy(&want[r * c.dst_pitch], &src[r * c.src_pitch], c.width);
    DeviceVec<uint8_t> dst(dst_bytes);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    up.copy_2d(dst.p, c.dst_pitch, src.data(), c.src_pitch, c.width, c.rows, s);
    std::fill(src.begin(), src.end(), 0x5A);
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaStreamDestroy(s));
    std::vector<uint8_t> got = dst.download();
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < dst_bytes; i++)
        if (got[i] != want[i] && bad++ == 0) first = i;
    INFO("width " << c.width << ", rows " << c.rows << ", pitches " << c.src_pitch << " / " << c.dst_pitch << ": first bad byte " << first);
    CHECK(bad == 0);
}

}  // namespace

TEST_CASE("host uploads through pinned buffers: the bytes cudaMemcpy2D would write, at every size, pitch and buffer turn") {
    std::mt19937_64 g(11);
    // Buffers of 4 KB, two of them taking turns, copies below 1 KB direct: every path runs on small data.
    HostUploader up(4096, 2, 1024);
    up.begin(kPinnedUploadMinBytes);
    const Copy2d fixed[] = {
        {100, 3, 100, 100},       // below the direct size
        {1000, 50, 1100, 2000},   // 4 rows per buffer, 13 buffer turns, gaps on both sides
        {10000, 3, 10010, 20000}, // rows wider than a buffer: each row in 3 pieces
        {50001, 1, 50001, 50001}, // one contiguous range over 13 buffers
        {777, 33, 777, 1554},     // every other destination row (load_linear's interleave)
        {4096, 5, 4096, 4096},    // exactly one row per buffer
        {4097, 2, 5000, 4097},    // one byte wider than a buffer
    };
    for (const Copy2d& c : fixed) check_copy(up, c, g);
    CHECK(up.pinned_bytes() == 2 * 4096);
    for (int i = 0; i < 40; i++) {
        size_t width = 1 + g() % 9000, rows = 1 + g() % 40;
        check_copy(up, {width, rows, width + g() % 3 * (g() % 500), width + g() % 3 * (g() % 500)}, g);
    }
    up.release();
    CHECK(up.pinned_bytes() == 0);
    check_copy(up, {3000, 7, 3000, 3000}, g);  // after a release: the driver's copies
    CHECK(up.pinned_bytes() == 0);
    up.begin(kPinnedUploadMinBytes);
    check_copy(up, {3000, 7, 3000, 3000}, g);  // and the buffers again after a begin
    up.begin(kPinnedUploadMinBytes - 1);       // a small load: the driver's copies, with the buffers still there
    check_copy(up, {1000, 50, 1100, 2000}, g);
}

TEST_CASE("host uploads where memory cannot be pinned: the driver's copies, the same bytes, no error left behind") {
    std::mt19937_64 g(12);
    HostUploader up(size_t(1) << 42, 2, 1024);  // 4 TB buffers: no machine pins that
    up.begin(kPinnedUploadMinBytes);
    check_copy(up, {1000, 50, 1100, 2000}, g);
    check_copy(up, {50001, 1, 50001, 50001}, g);
    CHECK(up.pinned_bytes() == 0);
    CHECK(cudaGetLastError() == cudaSuccess);
}
