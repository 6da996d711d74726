// runtime/taps.cuh — per-layer activation dumps (--dump-dir) under the names the oracle uses.
//
// Usage:
//   Taps taps(opts.dump_dir);                       // disabled when the folder name is empty
//   taps.f32("embed", x, T, dim, stream);           // writes DIR/embed.npy, float32 [T][dim]
//   taps.bf16(strf("layer_%02d", l), p, T, dim, stream);
// Names shared by every engine and by oracle/dump.py: embed, layer_00 .. layer_NN (hidden state after
// each decoder layer), final_norm, logits; ids.npy holds the generated tokens. With --dump-inputs, also
// what each layer's projections multiply (tools/quantize --calib reads them): layer_NN_attn_in (q/k/v_proj),
// layer_NN_o_in, layer_NN_mlp_in (gate/up_proj), layer_NN_down_in, each bf16-valued as the GEMMs read it.
// Each tap synchronises the stream and copies to the host: dumping is for checking, never for speed.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <vector>

#include "host/bf16.h"
#include "gpu/memory.cuh"
#include "host/npy.h"

namespace monocu {

struct Taps {
    std::string dir;
    bool inputs = false;  // also the projection inputs (--dump-inputs): layer_NN_attn_in, _o_in, _mlp_in, _down_in
    explicit Taps(std::string d = "", bool with_inputs = false) : dir(std::move(d)), inputs(with_inputs && !dir.empty()) {
        if (dir.empty()) return;
        if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) die("--dump-dir %s: cannot create (%s)", dir.c_str(), strerror(errno));
    }
    bool on() const { return !dir.empty(); }

    void f32(const std::string& name, const float* d, int rows, int cols, cudaStream_t s) const {
        if (!on()) return;
        std::vector<float> h((size_t)rows * cols);
        CUDA_CHECK(cudaMemcpyAsync(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        npy_write_f32(dir + "/" + name + ".npy", h.data(), {rows, cols});
    }

    void bf16(const std::string& name, const monocu::bf16* d, int rows, int cols, cudaStream_t s) const {
        if (!on()) return;
        std::vector<uint16_t> raw((size_t)rows * cols);
        CUDA_CHECK(cudaMemcpyAsync(raw.data(), d, raw.size() * 2, cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<float> h(raw.size());
        for (size_t i = 0; i < raw.size(); i++) h[i] = bf16_bits_to_float(raw[i]);
        npy_write_f32(dir + "/" + name + ".npy", h.data(), {rows, cols});
    }

    void ids(const std::string& name, const std::vector<int>& v) const {
        if (!on()) return;
        npy_write_i32(dir + "/" + name + ".npy", v.data(), {(int64_t)v.size()});
    }
};

}  // namespace monocu
