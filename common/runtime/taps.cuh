// runtime/taps.cuh — per-layer activation dumps (--dump-dir) under the names the oracle uses.
//
// Usage:
//   Taps taps(opts.dump_dir);                       // disabled when the folder name is empty
//   taps.f32("embed", x, T, dim, stream);           // appends T rows of float32 [dim] to the tap "embed"
//   taps.bf16(strf("layer_%02d", l), p, T, dim, stream);
//   taps.flush();                                   // writes DIR/<name>.npy for every tap, float32 [rows][dim]
// Rows accumulate across forward passes until flush(), so a prompt prefilled in several chunks (or one token at
// a time, -ub 1) dumps every position, as one pass would.
// Names shared by every engine and by oracle/dump.py: embed, layer_00 .. layer_NN (hidden state after each
// decoder layer), final_norm, logits, routing_NN (a mixture layer's expert choices, [T][k]); ids.npy holds the
// generated tokens, prompt_ids.npy the prompt. With
// --dump-inputs, also what each layer's projections multiply (tools/quantize --calib reads them):
// layer_NN_attn_in (q/k/v_proj), layer_NN_o_in, layer_NN_mlp_in (gate/up_proj), layer_NN_down_in, each
// bf16-valued as the GEMMs read it.
// Each tap synchronises the stream and copies to the host: dumping is for checking, never for speed.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "gpu/memory.cuh"
#include "host/bf16.h"
#include "host/npy.h"

namespace monocu {

struct Taps {
    std::string dir;
    bool inputs = false;  // also the projection inputs (--dump-inputs): layer_NN_attn_in, _o_in, _mlp_in, _down_in
    bool paused = false;  // decode steps run with taps paused
    explicit Taps(std::string d = "", bool with_inputs = false) : dir(std::move(d)), inputs(with_inputs && !dir.empty()) {
        if (dir.empty()) return;
        if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) die("--dump-dir %s: cannot create (%s)", dir.c_str(), strerror(errno));
    }
    bool on() const { return !dir.empty() && !paused; }

    void f32(const std::string& name, const float* d, int rows, int cols, cudaStream_t s) {
        if (!on()) return;
        std::vector<float>& h = rows_of(name, cols, rows);
        size_t at = h.size() - (size_t)rows * cols;
        CUDA_CHECK(cudaMemcpyAsync(h.data() + at, d, (size_t)rows * cols * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
    }

    void bf16(const std::string& name, const monocu::bf16* d, int rows, int cols, cudaStream_t s) {
        widen(name, reinterpret_cast<const uint16_t*>(d), rows, cols, s, [](uint16_t b) { return bf16_bits_to_float(b); });
    }

    // int32 values (a mixture's expert choices: routing_NN, [T][k]), stored as float32 like every tap.
    void i32(const std::string& name, const int* d, int rows, int cols, cudaStream_t s) {
        widen(name, d, rows, cols, s, [](int v) { return (float)v; });
    }

    void ids(const std::string& name, const std::vector<int>& v) const {
        if (dir.empty()) return;
        npy_write_i32(dir + "/" + name + ".npy", v.data(), {(int64_t)v.size()});
    }

    void flush() {
        for (auto& t : taps_) {
            int64_t rows = (int64_t)(t.second.data.size() / t.second.cols);
            npy_write_f32(dir + "/" + t.first + ".npy", t.second.data.data(), {rows, (int64_t)t.second.cols});
        }
        taps_.clear();
    }

private:
    // Device values of another type, brought back and appended as float32 rows.
    template <class T, class F>
    void widen(const std::string& name, const T* d, int rows, int cols, cudaStream_t s, F to_float) {
        if (!on()) return;
        std::vector<T> raw((size_t)rows * cols);
        CUDA_CHECK(cudaMemcpyAsync(raw.data(), d, raw.size() * sizeof(T), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<float>& h = rows_of(name, cols, rows);
        size_t at = h.size() - raw.size();
        for (size_t i = 0; i < raw.size(); i++) h[at + i] = to_float(raw[i]);
    }

    struct Tap {
        size_t cols = 0;
        std::vector<float> data;
    };
    std::map<std::string, Tap> taps_;
    // The tap's buffer grown by `rows` rows of `cols` (a tap keeps its width).
    std::vector<float>& rows_of(const std::string& name, int cols, int rows) {
        Tap& t = taps_[name];
        if (t.cols == 0) t.cols = (size_t)cols;
        if (t.cols != (size_t)cols) die("--dump-dir: tap '%s' changes width (%zu, then %d)", name.c_str(), t.cols, cols);
        t.data.resize(t.data.size() + (size_t)rows * cols);
        return t.data;
    }
};

}  // namespace monocu
