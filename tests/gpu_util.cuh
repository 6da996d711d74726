// gpu_util.cuh — helpers for the GPU tests: device vectors, random bf16 data, poisoning, error norms.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "host/bf16.h"
#include "gpu/memory.cuh"

namespace monocu_test {

using monocu::bf16;

// A device buffer of n elements, filled with NaN bytes (0xFF) until something writes it.
template <class T>
struct DeviceVec {
    T* p = nullptr;
    size_t n = 0;
    explicit DeviceVec(size_t count) : n(count) {
        CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
        poison();
    }
    DeviceVec(const std::vector<T>& h) : DeviceVec(h.size()) { upload(h); }
    ~DeviceVec() { cudaFree(p); }
    DeviceVec(const DeviceVec&) = delete;
    DeviceVec& operator=(const DeviceVec&) = delete;
    void poison() { CUDA_CHECK(cudaMemset(p, 0xFF, (n ? n : 1) * sizeof(T))); }
    void upload(const std::vector<T>& h) { CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
    static T download_one(const T* dev) {
        T v;
        CUDA_CHECK(cudaMemcpy(&v, dev, sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
    std::vector<T> download() const {
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<T> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

struct Rng {
    std::mt19937_64 g;
    explicit Rng(uint64_t seed) : g(seed) {}
    float normal(float sd = 1.f) { return std::normal_distribution<float>(0.f, sd)(g); }
    int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
};

// n normal values, already rounded to bf16 so that the CPU reference sees exactly what the GPU sees.
inline std::vector<float> random_bf16_values(size_t n, Rng& r, float sd = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = monocu::round_to_bf16(r.normal(sd));
    return v;
}
inline std::vector<float> random_floats(size_t n, Rng& r, float sd = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = r.normal(sd);
    return v;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    for (size_t i = 0; i < v.size(); i++) {
        __nv_bfloat16_raw raw;
        raw.x = monocu::float_to_bf16_bits(v[i]);
        out[i] = bf16(raw);
    }
    return out;
}
inline std::vector<float> from_bf16(const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); i++) {
        out[i] = monocu::bf16_bits_to_float(static_cast<__nv_bfloat16_raw>(v[i]).x);
    }
    return out;
}

inline std::vector<__half> to_half(const std::vector<float>& v) {
    std::vector<__half> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = __float2half_rn(v[i]);
    return out;
}
inline std::vector<float> from_half(const std::vector<__half>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = monocu::f16_bits_to_float(static_cast<__half_raw>(v[i]).x);
    return out;
}
// Each value rounded to fp16, as the GPU would hold it.
inline std::vector<float> round_to_half(const std::vector<float>& v) { return from_half(to_half(v)); }

struct ErrorStats {
    double rel_l2 = 0, max_abs = 0;
    size_t non_finite = 0;
};

// ||out - ref|| / ||ref|| and max |out - ref| over [0, n); any NaN/Inf in out is counted (unwritten output).
inline ErrorStats compare(const std::vector<float>& out, const std::vector<double>& ref) {
    ErrorStats e;
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(out[i])) {
            e.non_finite++;
            continue;
        }
        double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        e.max_abs = std::max(e.max_abs, std::fabs(d));
    }
    e.rel_l2 = std::sqrt(num / std::max(den, 1e-300));
    return e;
}

#define CHECK_CLOSE(stats, bound)                                                                          \
    do {                                                                                                   \
        const auto& s_ = (stats);                                                                          \
        CHECK_MESSAGE(s_.non_finite == 0, "non-finite outputs: ", s_.non_finite);                         \
        CHECK_MESSAGE(s_.rel_l2 < (bound), "rel_l2 ", s_.rel_l2, " max_abs ", s_.max_abs, " bound ", (bound)); \
    } while (0)

}  // namespace monocu_test
