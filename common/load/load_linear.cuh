// load/load_linear.cuh — a checkpoint's projection weights onto the GPU as one Linear, in the format asked for.
//
// Usage:
//   Linear qkv = load_linear(ck, {{pre + "q_proj", pre + "k_proj", pre + "v_proj"}, {q_dim, kv_dim, kv_dim}},
//                            dim, WFormat::FP8, mem, stream);                       // stacked by rows
//   Linear gate_up = load_linear(ck, {{pre + "gate_proj", pre + "up_proj"}, {ffn, ffn}, true}, dim, fmt, mem, s);
//                                                                              // interleaved: 2i gate, 2i+1 up
//   Linear qkv = load_linear(ck, {{...q_proj, ...k_proj, ...v_proj}, {q_dim, kv_dim, kv_dim}, false, true}, ...);
//                                                                              // with each part's bias (Qwen2)
//   WFormat f = checkpoint_weight_format(ck, "model.layers.0.self_attn.q_proj");  // what the file holds
//   ExpertLinears x = load_experts(ck, E, ffn, dim, names, fmt, mem, s);     // a mixture's experts, one tensor each
//   ExpertLinears x = load_fused_experts(ck, "model.layers.0.mlp.experts.", E, ffn, dim, fmt, mem, s);  // GPT-OSS's
//
// What a checkpoint may hold for a projection P (names as transformers writes them):
//   P.weight BF16 / F16 / F32 [N][K]                 plain weights: uploaded, or quantized on the GPU
//   P.weight F8_E4M3 + P.weight_scale_inv [N/128][K/128]   Qwen's / DeepSeek's FP8 releases (128x128 blocks,
//                                                          w = q * scale_inv)
//   P.weight F8_E4M3 + P.weight_scale F32 [N][K/kb]  tools/quantize --dtype fp8 (kb = 128 inputs, or K)
//   P.qweight U8 [N][K/2] + P.scales BF16 [N][K/128] tools/quantize --dtype int4 (quant.h's layout)
// Quantizing on load goes through bf16 first (the weight rounded to bf16, as tools/quantize does), so both
// paths give the same bits. Block scales are expanded to one row of scales per output row, which keeps
// stacking and interleaving of the parts a plain row permutation.
#pragma once

#include <array>
#include <deque>
#include <string>
#include <vector>

#include "gpu/memory.cuh"
#include "load/host_upload.cuh"
#include "load/upload.cuh"
#include "ops/quant.cuh"
#include "host/safetensors.h"

namespace monocu {

struct LinearParts {
    std::vector<std::string> names;  // tensor prefixes, e.g. "model.layers.0.mlp.gate_proj"
    std::vector<int> rows;           // out_features of each part
    bool interleave = false;         // false: stacked by rows; true: row r of part p goes to row r * parts + p
    bool bias = false;               // each part has P.bias [rows] (loaded as bf16, placed like its rows); false:
                                     // none is read (a checkpoint's bias tensors are then an error to the caller)
};

// Destination of part p's rows: first row and stride between consecutive rows.
inline void part_rows(const LinearParts& lp, size_t p, int* row0, int* stride) {
    if (lp.interleave) {
        *row0 = (int)p, *stride = (int)lp.names.size();
    } else {
        *row0 = 0;
        for (size_t i = 0; i < p; i++) *row0 += lp.rows[i];
        *stride = 1;
    }
}

// Copies rows of row_bytes each from the host into dst, row r landing at row0 + r * stride.
inline void upload_rows(const void* src, size_t row_bytes, int rows, void* dst, int row0, int stride, cudaStream_t s) {
    upload_2d(static_cast<uint8_t*>(dst) + (size_t)row0 * row_bytes, row_bytes * stride, src, row_bytes, row_bytes, rows, s);
}

inline WFormat checkpoint_weight_format(const Checkpoint& ck, const std::string& name) {
    if (ck.find(name + ".qweight")) return WFormat::INT4;
    const TensorView* w = ck.find(name + ".weight");
    return w && w->dtype == DType::F8_E4M3 ? WFormat::FP8 : WFormat::BF16;
}

namespace load_detail {

inline void check_parts(const LinearParts& lp) {
    if (lp.names.empty() || lp.names.size() != lp.rows.size()) die("load_linear: parts and row counts disagree");
    if (lp.interleave)
        for (int r : lp.rows)
            if (r != lp.rows[0]) die("load_linear: interleaved parts need equal row counts");
}

// Plain float weights, rounded to bf16, at their destination rows of a bf16 [N][K] buffer.
inline void upload_float_parts(const Checkpoint& ck, const LinearParts& lp, int K, bf16* dst, cudaStream_t s) {
    for (size_t p = 0; p < lp.names.size(); p++) {
        int row0, stride;
        part_rows(lp, p, &row0, &stride);
        upload_bf16(ck.get(lp.names[p] + ".weight", {lp.rows[p], K}), dst + (size_t)row0 * K, (size_t)stride * K, s);
    }
}

// FP8 weights (either scale flavour) into L.w, and one row of float scales [N][K / kblock] per output row.
inline void upload_fp8_parts(const Checkpoint& ck, const LinearParts& lp, int K, Linear& L, bool qwen_blocks, cudaStream_t s) {
    int n_kb = K / L.kblock;
    std::vector<float> scales((size_t)L.N * n_kb);
    for (size_t p = 0; p < lp.names.size(); p++) {
        int row0, stride, n = lp.rows[p];
        part_rows(lp, p, &row0, &stride);
        const std::string& nm = lp.names[p];
        upload_rows(ck.get(nm + ".weight", DType::F8_E4M3, {n, K}).data, (size_t)K, n, L.w, row0, stride, s);
        if (qwen_blocks) {
            int nb = (n + 127) / 128;
            const TensorView& t = ck.get(nm + ".weight_scale_inv", {nb, n_kb});
            for (int r = 0; r < n; r++)
                for (int kb = 0; kb < n_kb; kb++) {
                    size_t i = (size_t)(r / 128) * n_kb + kb;
                    float v;
                    if (t.dtype == DType::F32) std::memcpy(&v, t.data + 4 * i, 4);
                    else if (t.dtype == DType::BF16) v = bf16_bits_to_float(reinterpret_cast<const uint16_t*>(t.data)[i]);
                    else die("%s: tensor '%s.weight_scale_inv' has dtype %s, expected F32 or BF16", t.file.c_str(), nm.c_str(), dtype_name(t.dtype));
                    scales[(size_t)(row0 + r * stride) * n_kb + kb] = v;
                }
        } else {
            const TensorView& t = ck.get(nm + ".weight_scale", DType::F32, {n, n_kb});
            for (int r = 0; r < n; r++) std::memcpy(&scales[(size_t)(row0 + r * stride) * n_kb], t.data + 4 * (size_t)r * n_kb, 4 * n_kb);
        }
    }
    CUDA_CHECK(cudaMemcpyAsync(L.scale, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));  // scales lives on this stack frame
}

inline void upload_int4_parts(const Checkpoint& ck, const LinearParts& lp, int K, Linear& L, cudaStream_t s) {
    for (size_t p = 0; p < lp.names.size(); p++) {
        int row0, stride, n = lp.rows[p];
        part_rows(lp, p, &row0, &stride);
        upload_rows(ck.get(lp.names[p] + ".qweight", DType::U8, {n, K / 2}).data, (size_t)K / 2, n, L.w, row0, stride, s);
        upload_rows(ck.get(lp.names[p] + ".scales", DType::BF16, {n, K / kInt4Group}).data, (size_t)K / kInt4Group * 2, n, L.scale,
                    row0, stride, s);
    }
}

inline void alloc_linear(Linear& L, WFormat fmt, int kblock, GpuMemory& mem) {
    size_t n = (size_t)L.N * L.K;
    L.fmt = fmt;
    if (fmt == WFormat::BF16) {
        L.w = mem.alloc<bf16>(n, "weights");
    } else if (fmt == WFormat::FP8) {
        L.kblock = kblock;
        L.w = mem.alloc<uint8_t>(n, "weights");
        L.scale = mem.alloc<float>((size_t)L.N * (L.K / kblock), "weights");
    } else if (fmt == WFormat::MXFP4) {
        if (L.K % 32 != 0) die("mxfp4 needs in_features divisible by 32; this model has a projection with %d", L.K);
        L.w = mem.alloc<uint8_t>(n / 2, "weights");
        L.scale = mem.alloc<uint8_t>(n / 32, "weights");
    } else {
        if (L.K % kInt4Group != 0) die("int4 needs in_features divisible by %d; this model has a projection with %d", kInt4Group, L.K);
        L.w = mem.alloc<uint8_t>(n / 2, "weights");
        L.scale = mem.alloc<bf16>(n / kInt4Group, "weights");
    }
}

// L (N and K set) allocated in `target` (FP8 or INT4) and filled by quantizing the bf16 [N][K] weights w on the GPU.
inline void quantize_into(Linear& L, const bf16* w, WFormat target, GpuMemory& mem, cudaStream_t s) {
    alloc_linear(L, target, fp8_kblock(L.K), mem);
    if (target == WFormat::FP8) quantize_fp8(w, (uint8_t*)L.w, (float*)L.scale, L.N, L.K, s);
    else if (target == WFormat::INT4) quantize_int4_g128(w, (uint8_t*)L.w, (bf16*)L.scale, L.N, L.K, s);
    else die("load: quantizing to %s on load is not supported", wformat_name(target));
}

}  // namespace load_detail

// The parts' names without their layer prefix, joined: "q_proj+k_proj+v_proj", "lm_head". Interned: Linear keeps
// a plain pointer (it is a kernel argument).
inline const char* linear_label(const LinearParts& lp) {
    static std::deque<std::string> pool;
    std::string label;
    for (const std::string& n : lp.names) {
        size_t dot = n.rfind('.');
        label += (label.empty() ? "" : "+") + (dot == std::string::npos ? n : n.substr(dot + 1));
    }
    for (const std::string& p : pool)
        if (p == label) return p.c_str();
    pool.push_back(label);
    return pool.back().c_str();
}

// Each part's bias into one bf16 [N] vector, rows placed as the weights' rows are.
inline const bf16* load_linear_bias(const Checkpoint& ck, const LinearParts& lp, int N, GpuMemory& mem, cudaStream_t s) {
    bf16* b = mem.alloc<bf16>(N, "weights");
    for (size_t p = 0; p < lp.names.size(); p++) {
        int row0, stride;
        part_rows(lp, p, &row0, &stride);
        TensorView t = ck.get(lp.names[p] + ".bias", {lp.rows[p]});
        t.shape = {lp.rows[p], 1};  // rows of one element, `stride` apart in b
        upload_bf16(t, b + row0, stride, s);
    }
    return b;
}

inline Linear load_linear_weights(const Checkpoint& ck, const LinearParts& lp, int K, WFormat target, GpuMemory& mem, cudaStream_t s);

inline Linear load_linear(const Checkpoint& ck, const LinearParts& lp, int K, WFormat target, GpuMemory& mem, cudaStream_t s) {
    Linear L = load_linear_weights(ck, lp, K, target, mem, s);
    L.label = linear_label(lp);
    if (lp.bias) L.bias = load_linear_bias(ck, lp, L.N, mem, s);
    return L;
}

inline Linear load_linear_weights(const Checkpoint& ck, const LinearParts& lp, int K, WFormat target, GpuMemory& mem, cudaStream_t s) {
    using namespace load_detail;
    check_parts(lp);
    Linear L;
    L.K = K;
    for (int r : lp.rows) L.N += r;
    const std::string& first = lp.names[0];
    WFormat src = checkpoint_weight_format(ck, first);
    bool qwen_blocks = src == WFormat::FP8 && ck.find(first + ".weight_scale_inv");

    if (src == WFormat::BF16) {
        if (target == WFormat::BF16) {
            alloc_linear(L, WFormat::BF16, 0, mem);
            upload_float_parts(ck, lp, K, static_cast<bf16*>(L.w), s);
            return L;
        }
        bf16* tmp = nullptr;  // bf16 staging, then quantize on the GPU
        CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&tmp), (size_t)L.N * K * 2, s));
        upload_float_parts(ck, lp, K, tmp, s);
        quantize_into(L, tmp, target, mem, s);
        CUDA_CHECK(cudaFreeAsync(tmp, s));
        return L;
    }
    if (src == WFormat::INT4) {
        if (target != WFormat::INT4) die("%s: the checkpoint holds int4 weights; run it with --dtype int4", first.c_str());
        alloc_linear(L, WFormat::INT4, 0, mem);
        upload_int4_parts(ck, lp, K, L, s);
        return L;
    }
    // FP8 in the file.
    if (target == WFormat::INT4) die("%s: the checkpoint holds fp8 weights; re-quantizing them to int4 is not supported", first.c_str());
    int kblock = qwen_blocks ? 128 : fp8_kblock(K);
    if (qwen_blocks && K % 128 != 0) die("%s: fp8 block scales need in_features divisible by 128, got %d", first.c_str(), K);
    if (target == WFormat::FP8) {
        alloc_linear(L, WFormat::FP8, kblock, mem);
        upload_fp8_parts(ck, lp, K, L, qwen_blocks, s);
        return L;
    }
    // --dtype bf16 on an FP8 checkpoint: dequantize once at load.
    GpuMemory tmp_mem;
    Linear q = L;
    alloc_linear(q, WFormat::FP8, kblock, tmp_mem);
    upload_fp8_parts(ck, lp, K, q, qwen_blocks, s);
    alloc_linear(L, WFormat::BF16, 0, mem);
    dequant_to_bf16(q, static_cast<bf16*>(L.w), s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    return L;
}

// ---- a model's weight format and output projection ----

// What a checkpoint's projections hold: INT4 if any tensor is an INT4 qweight, FP8 if any weight is e4m3, else
// plain floats (BF16 / F16 / F32).
inline WFormat checkpoint_format(const Checkpoint& ck) {
    WFormat f = WFormat::BF16;
    for (const TensorView& t : ck.tensors()) {
        const std::string& n = t.name;
        if (n.size() > 8 && n.compare(n.size() - 8, 8, ".qweight") == 0) return WFormat::INT4;
        if (t.dtype == DType::F8_E4M3) f = WFormat::FP8;
    }
    return f;
}

// The format the GPU runs the layer projections in: --dtype when given (or on a plain-float checkpoint, where
// its default is bf16); else what a pre-quantized checkpoint holds.
inline WFormat choose_weight_format(const std::string& dtype_flag, bool flag_given, const Checkpoint& ck) {
    WFormat flag = dtype_flag == "fp8" ? WFormat::FP8 : dtype_flag == "int4" ? WFormat::INT4 : WFormat::BF16;
    WFormat file = checkpoint_format(ck);
    return flag_given || file == WFormat::BF16 ? flag : file;
}

// The output projection: lm_head.weight, or embed_tokens when tie_word_embeddings (the table is then shared,
// not copied, when it stays bf16). Quantizing on load leaves it bf16 next to FP8 layers (as Qwen's FP8 releases
// do: it costs FP8 a point of top-1 agreement) and makes it FP8 next to INT4 layers (kb/decisions.md); a
// pre-quantized checkpoint's is used as stored.
inline Linear load_lm_head(const Checkpoint& ck, const std::string& config_path, int vocab, int dim, bool tied, WFormat layers_fmt,
                           const bf16* embed, GpuMemory& mem, cudaStream_t s) {
    bool has_head = ck.find("lm_head.weight") || ck.find("lm_head.qweight");
    if (!has_head && !tied) die("%s: tie_word_embeddings is false but there is no tensor 'lm_head.weight'", config_path.c_str());
    WFormat fmt = layers_fmt == WFormat::INT4 ? WFormat::FP8 : WFormat::BF16;
    if (checkpoint_format(ck) != WFormat::BF16) fmt = has_head ? checkpoint_weight_format(ck, "lm_head") : WFormat::BF16;
    if (!has_head && fmt == WFormat::BF16) {
        Linear h;
        h.N = vocab, h.K = dim, h.w = const_cast<bf16*>(embed), h.label = "lm_head (tied)";
        return h;
    }
    return load_linear(ck, {{has_head ? "lm_head" : "model.embed_tokens"}, {vocab}}, dim, fmt, mem, s);
}

}  // namespace monocu

namespace monocu {

// A mixture's experts: each expert's gate_proj and up_proj (interleaved) and down_proj, as load_linear loads any
// projection (every source format, quantized on load), and device tables of their weight and scale pointers for
// the batch-1 expert GEMV (ops/gemv.cuh's GemvExperts). `names(e)` gives expert e's {gate, up, down} prefixes.
struct ExpertLinears {
    std::vector<Linear> gate_up, down;  // [E]: [2 f][dim] (2i gate, 2i+1 up), [dim][f]
    const void** gate_up_w = nullptr;   // device [E] tables
    const void** gate_up_scale = nullptr;
    const void** down_w = nullptr;
    const void** down_scale = nullptr;
    const void** gate_up_bias = nullptr;  // device [E] tables of the experts' biases (GPT-OSS), or null: none
    const void** down_bias = nullptr;
    size_t expert_bytes() const { return gate_up[0].bytes() + down[0].bytes(); }  // what one expert's GEMVs read

    // The device tables of the loaded gate_up and down (weights, scales and, where any expert has one, biases).
    void make_tables(GpuMemory& mem, cudaStream_t s) {
        const int E = (int)gate_up.size();
        std::vector<const void*> tab[6];
        for (int e = 0; e < E; e++) {
            tab[0].push_back(gate_up[e].w), tab[1].push_back(gate_up[e].scale), tab[2].push_back(down[e].w);
            tab[3].push_back(down[e].scale), tab[4].push_back(gate_up[e].bias), tab[5].push_back(down[e].bias);
        }
        const void*** dst[6] = {&gate_up_w, &gate_up_scale, &down_w, &down_scale, &gate_up_bias, &down_bias};
        for (int t = 0; t < 6; t++) {
            if (t >= 4 && !tab[t][0]) continue;  // no biases
            *dst[t] = const_cast<const void**>(mem.alloc<const void*>(E, "weights"));
            CUDA_CHECK(cudaMemcpyAsync(*dst[t], tab[t].data(), E * sizeof(void*), cudaMemcpyHostToDevice, s));
        }
        CUDA_CHECK(cudaStreamSynchronize(s));  // the tables live on this stack frame
    }
};

template <class Names>
inline ExpertLinears load_experts(const Checkpoint& ck, int E, int ffn, int dim, Names names, WFormat fmt, GpuMemory& mem, cudaStream_t s) {
    ExpertLinears x;
    for (int e = 0; e < E; e++) {
        std::array<std::string, 3> n = names(e);
        x.gate_up.push_back(load_linear(ck, {{n[0], n[1]}, {ffn, ffn}, true, false}, dim, fmt, mem, s));
        x.down.push_back(load_linear(ck, {{n[2]}, {dim}, false, false}, ffn, fmt, mem, s));
    }
    x.make_tables(mem, s);
    return x;
}

static __global__ void transpose_bf16_kernel(const bf16* __restrict__ in, bf16* __restrict__ out, int rows, int cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)rows * cols; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / cols, c = i % cols;  // in [rows][cols] -> out [cols][rows]
        out[c * rows + r] = in[i];
    }
}

// Expert e's part of a tensor holding all E experts along its first dimension, as a tensor of the given shape.
inline TensorView expert_slice(const TensorView& t, int E, int e, const Shape& shape) {
    TensorView v = t;
    const size_t each = t.nbytes() / E;
    v.shape = shape;
    v.data = t.data + each * e, v.begin = t.begin + each * e, v.end = v.begin + each;
    return v;
}

// Experts stored together, all E of a layer in one tensor per projection under `block` (GPT-OSS:
// "model.layers.3.mlp.experts."): P = gate_up_proj ([2 ffn][dim] per expert, rows 2i gate and 2i + 1 up: the kit's
// interleaving already) and down_proj ([dim][ffn]), each with P_bias [E][N]. The weights either as OpenAI publishes
// them, P_blocks U8 [E][N][K / 32][16] and P_scales U8 [E][N][K / 32] (MXFP4, host/mxfp4.h: kept as they are, whatever
// the runtime's format), or as transformers saves a float model, P [E][K][N] (input-major: transposed here, then in the
// runtime's format like any projection).
inline ExpertLinears load_fused_experts(const Checkpoint& ck, const std::string& block, int E, int ffn, int dim, WFormat fmt, GpuMemory& mem,
                                        cudaStream_t s) {
    auto one = [&](const std::string& P, int N, int K, int e) {
        const std::string name = block + P;
        Linear L;
        L.N = N, L.K = K, L.label = linear_label({{name}, {N}});
        if (ck.find(name + "_blocks")) {
            if (K % 32 != 0) die("%s_blocks: mxfp4 needs in_features divisible by 32, got %d", name.c_str(), K);
            const TensorView b = expert_slice(ck.get(name + "_blocks", DType::U8, {E, N, K / 32, 16}), E, e, {N, K / 32, 16});
            const TensorView sc = expert_slice(ck.get(name + "_scales", DType::U8, {E, N, K / 32}), E, e, {N, K / 32});
            load_detail::alloc_linear(L, WFormat::MXFP4, 0, mem);
            upload_bytes(L.w, b.data, b.nbytes(), s);
            upload_bytes(L.scale, sc.data, sc.nbytes(), s);
        } else {
            const TensorView slab = expert_slice(ck.get(name, {E, K, N}), E, e, {K, N});
            bf16 *in = nullptr, *tr = nullptr;
            CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&in), (size_t)K * N * 2, s));
            upload_bf16(slab, in, N, s);
            if (fmt == WFormat::BF16) {
                load_detail::alloc_linear(L, WFormat::BF16, 0, mem);
                tr = static_cast<bf16*>(L.w);
            } else {
                CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&tr), (size_t)K * N * 2, s));
            }
            transpose_bf16_kernel<<<(unsigned)std::min<size_t>(CEIL_DIV((size_t)K * N, 256), 65535), 256, 0, s>>>(in, tr, K, N);
            LAUNCH_CHECK();
            if (fmt != WFormat::BF16) {
                load_detail::quantize_into(L, tr, fmt, mem, s);
                CUDA_CHECK(cudaFreeAsync(tr, s));
            }
            CUDA_CHECK(cudaFreeAsync(in, s));
        }
        bf16* bias = mem.alloc<bf16>(N, "weights");
        upload_bf16(expert_slice(ck.get(name + "_bias", {E, N}), E, e, {N}), bias, N, s);
        L.bias = bias;
        return L;
    };
    ExpertLinears x;
    for (int e = 0; e < E; e++) x.gate_up.push_back(one("gate_up_proj", 2 * ffn, dim, e)), x.down.push_back(one("down_proj", dim, ffn, e));
    x.make_tables(mem, s);
    return x;
}

}  // namespace monocu
