// ops/weights.cuh — a projection's weights as the GPU holds them (Linear), in any of the kit's formats.
//
// Usage:
//   Linear L;  L.N, L.K, L.fmt, L.w, L.scale      // filled by load_linear (load/load_linear.cuh)
//   L.bytes()                                     // what one batch-1 GEMV reads: weights, scales, bias
//   wformat_name(L.fmt)                           // "bf16" | "fp8" | "int4" | "mxfp4"
// Formats: BF16 as nn.Linear stores it; FP8 E4M3 with one float scale per row and kblock inputs; INT4
// (two per byte, low nibble first, offset 8) with one bf16 scale per 128 inputs (host/quant.h's layout); MXFP4
// (two E2M1 codes per byte, low nibble first) with one E8M0 scale byte per 32 inputs, as GPT-OSS publishes its
// experts (host/mxfp4.h). MXFP4 is only ever loaded as the checkpoint holds it: nothing quantizes to it on load.
#pragma once

#include <cstddef>

#include "host/quant.h"

namespace monocu {

enum class WFormat { BF16, FP8, INT4, MXFP4 };

inline const char* wformat_name(WFormat f) {
    return f == WFormat::BF16 ? "bf16" : f == WFormat::FP8 ? "fp8" : f == WFormat::INT4 ? "int4" : "mxfp4";
}

// One projection's weights as the GPU holds them: nn.Linear's [out_features][in_features], any format.
struct Linear {
    int N = 0, K = 0;            // out_features, in_features
    WFormat fmt = WFormat::BF16;
    void* w = nullptr;           // BF16: bf16 [N][K]; FP8: e4m3 [N][K]; INT4 and MXFP4: bytes [N][K / 2]
    void* scale = nullptr;       // FP8: float [N][K / kblock]; INT4: bf16 [N][K / 128]; MXFP4: E8M0 bytes [N][K / 32]
    int kblock = 0;              // FP8: weights along K sharing one scale (128; K when K % 128 != 0)
    const void* bias = nullptr;  // bf16 [N], added to every output row (Qwen2's q/k/v), or null
    const char* label = "";      // the checkpoint's name for it, e.g. "q_proj+k_proj+v_proj" (profiles, errors)
    size_t weight_bytes() const {  // w alone
        size_t n = (size_t)N, k = (size_t)K;
        return fmt == WFormat::BF16 ? n * k * 2 : fmt == WFormat::FP8 ? n * k : n * k / 2;
    }
    size_t bytes() const {  // what one GEMV reads: w and the scales
        size_t n = (size_t)N, k = (size_t)K;
        size_t b = bias ? n * 2 : 0;
        if (fmt == WFormat::BF16) return weight_bytes() + b;
        if (fmt == WFormat::FP8) return weight_bytes() + n * (k / kblock) * 4 + b;
        if (fmt == WFormat::MXFP4) return weight_bytes() + n * (k / 32) + b;
        return weight_bytes() + n * (k / kInt4Group) * 2 + b;
    }
};

}  // namespace monocu
