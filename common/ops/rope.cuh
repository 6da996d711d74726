// ops/rope.cuh — rotary position embedding on the GPU: the (cos, sin) table and the per-head rotation.
//
// Usage:
//   RopeTable rope = make_rope_table(cfg.rope, head_dim, ctx, mem, stream);      // once, at load
//   head_norm_rope_8<LPK>(x, norm_w, rope.cos_sin, pos, dl, eps);   // in a kernel: one head's RMSNorm
//                                                          // (norm_w null: none) and rotation (table null: none)
//
// RoPE as transformers applies it (rotate_half, not interleaved pairs): for i < d/2, with angle
// a = pos * inv_freq[i] and inv_freq[i] = theta^(-2i/d) (host/rope.h applies the checkpoint's scaling),
//   out[i] = x[i] cos a - x[i + d/2] sin a,   out[i + d/2] = x[i + d/2] cos a + x[i] sin a.
// The cos/sin table is computed on the host in the same float32 steps as transformers
// (inv_freq in fp32, angle = fp32 product), so long positions round the way the reference does.
#pragma once

#include <cmath>

#include "gpu/memory.cuh"
#include "host/rope.h"

namespace monocu {

struct RopeTable {
    const float2* cos_sin = nullptr;  // [max_pos][head_dim / 2] (cos, sin): row p as a decode step at p rotates
    int max_pos = 0, half = 0;
    // "dynamic" (NTK) rope past max_position_embeddings: a prefill chunk ending at p0 + T rotates all its rows
    // with the frequencies of seq_len p0 + T (transformers recomputes them per pass), not row by row as decode
    // steps do; rope_rows_for() makes those rows in `chunk`.
    bool dynamic = false;
    RopeConfig cfg;
    float2* chunk = nullptr;  // [chunk_rows][half]
    int chunk_rows = 0, chunk_p0 = -1, chunk_T = -1;
};

// max_tokens: the largest prefill chunk (for a "dynamic" table's chunk rows).
inline RopeTable make_rope_table(const RopeConfig& r, int head_dim, int max_pos, GpuMemory& mem, cudaStream_t stream, int max_tokens = 0) {
    if (head_dim % 2 != 0) die("head_dim %d must be even for RoPE", head_dim);
    std::vector<RopeCosSin> host = rope_cos_sin_host(r, head_dim, max_pos);
    static_assert(sizeof(RopeCosSin) == sizeof(float2), "RopeCosSin is a float2");
    float2* dev = mem.alloc<float2>(host.size(), "rope table");
    CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(float2), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    RopeTable t;
    t.cos_sin = dev, t.max_pos = max_pos, t.half = head_dim / 2;
    if (r.type == "dynamic" && max_tokens > 0 && max_pos > r.max_position) {
        t.dynamic = true, t.cfg = r, t.chunk_rows = max_tokens;
        t.chunk = mem.alloc<float2>((size_t)max_tokens * t.half, "rope table");
    }
    return t;
}

// The table a prefill chunk of T tokens at p0 .. p0 + T - 1 indexes by absolute position: the table itself, or
// for a dynamic rope whose pass ends past max_position_embeddings, its own rows (made once per chunk), returned
// as a base pointer that the kernels' (position x half) offsets land inside.
inline const float2* rope_rows_for(RopeTable& t, int p0, int T, cudaStream_t stream) {
    if (!t.dynamic || p0 + T <= t.cfg.max_position) return t.cos_sin;
    if (T > t.chunk_rows) die("rope: a chunk of %d tokens is larger than the %d planned", T, t.chunk_rows);
    if (p0 != t.chunk_p0 || T != t.chunk_T) {
        std::vector<RopeCosSin> rows;
        rope_rows(rope_inv_freq(t.cfg, 2 * t.half, p0 + T), p0, T, rows);
        CUDA_CHECK(cudaMemcpyAsync(t.chunk, rows.data(), rows.size() * sizeof(float2), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));  // rows lives on this stack frame
        t.chunk_p0 = p0, t.chunk_T = T;
    }
    return t.chunk - (ptrdiff_t)p0 * t.half;
}

// The same math for kernels that keep a head spread over lanes (decode attention): lanes dl = 0 .. LPK-1
// of an aligned group hold dims [8 dl, 8 dl + 8) of one head (head_dim = 8 LPK). The head's RMSNorm (w null:
// none), then rotate-half RoPE with the position's (cos, sin) row: the partner of dim i < d/2 is i + d/2,
// held by lane dl ^ LPK/2. Every lane of the warp calls it (shuffles; w null or not for the whole warp); a
// lane with `apply` false (a v head sharing the warp) only takes part and keeps its x.
template <int LPK>
__device__ __forceinline__ void head_norm_rope_8(float* x, const bf16* w, const float2* rope, int pos, int dl, float eps, bool apply = true) {
    constexpr int hd = 8 * LPK, half_lanes = LPK / 2;
    if (w) {
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < 8; j++) ss += x[j] * x[j];
#pragma unroll
        for (int o = LPK / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (apply) {
            float inv = rsqrtf(ss / hd + eps), wv[8];
            bf16x8_to_float(*reinterpret_cast<const uint4*>(w + dl * 8), wv);
#pragma unroll
            for (int j = 0; j < 8; j++) x[j] *= inv * wv[j];
        }
    }
    if (!rope) return;  // a layer without rotary embedding (SmolLM3's NoPE layers)
    const bool first = dl < half_lanes;
    const float2* cs = rope + (size_t)pos * (hd / 2) + (dl % half_lanes) * 8;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float partner = __shfl_xor_sync(0xffffffffu, x[j], half_lanes);
        if (apply) {
            float2 c = cs[j];
            x[j] = first ? x[j] * c.x - partner * c.y : x[j] * c.x + partner * c.y;
        }
    }
}

}  // namespace monocu
