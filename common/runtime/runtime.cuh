// runtime/runtime.cuh — what an engine is to the kit's runner, and what the runner lends an engine.
//
// An engine (engines/<family>.cu) is a struct with:
//   static constexpr const char* kName = "qwen3";            // the binary's name in messages
//   explicit Engine(const std::string& model_dir);           // config.json -> Config, validated (host only,
//                                                            // before any GPU is touched)
//   ModelInfo info() const;                                  // after configure
//   AttnSpec attn_spec() const;                              // its attention: the runner allocates the KV cache
//   void load(Runtime& rt, const Checkpoint& ck);            // Weights onto the GPU (rt.fmt), their order into
//                                                            // rt.lin.plan; then the rope tables for rt.ctx
//   void alloc(Runtime& rt);                                 // State: activations for rt.max_tokens rows
//   const float* forward(Runtime& rt, const Batch& b);       // logits [b.n_out][vocab] (device, fp32)
// and main() is `return engine_main<Engine>(argc, argv);` (runner.cuh). The runner owns everything else: flags,
// tokenizer, chat templates, prompts, the KV cache, sampling, the decode loop and its CUDA graph, chat mode,
// batch files, --bench and dumps.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "gpu/memory.cuh"
#include "host/config.h"
#include "ops/linear.cuh"
#include "runtime/attention_layer.cuh"
#include "runtime/batch.cuh"
#include "runtime/taps.cuh"

namespace monocu {

// What an engine tells the runner about its model.
struct ModelInfo {
    int vocab = 0;
    int max_position = 0;            // max_position_embeddings: the default context is min(4096, this)
    std::vector<int> eos_ids;        // config.json's eos_token_id (generation_config and tokenizer add theirs)
    size_t unread_bytes = 0;         // weights a decode step does not read: the embedding table but one row,
                                     // unless the output projection shares (and so reads) it
    std::string summary;             // one line for -v and --bench: layers, dims
    bool rewindable = true;          // a sequence's state is its KV rows alone, so a cached prefix can be cut short
                                     // anywhere; false when it also holds a running state (LFM2's conv layers), which
                                     // only moves forward: a new prompt then reuses the cache only if it extends it
    bool share_prefix = true;        // a cached prefix block holds the rows this sequence would compute itself; false for
                                     // "dynamic" RoPE, whose rows depend on the length of the pass that wrote them
    bool batch_graphs = true;        // a batched decode step (several tokens) may be captured as a CUDA graph: false
                                     // when such a pass waits on the host (a mixture's routing)
    int kv_window = 0;               // every attention layer's sliding window, when all have one (kv_window_of): the
                                     // batched core then releases the KV blocks behind it; 0 when any layer sees all
    // Filled by the runner after load (model_stats):
    size_t decode_bytes = 0;         // bytes one decode step reads besides the KV cache: every weight but unread_bytes
    double matmul_params = 0;        // weights a prefill token multiplies with: the planned projections but the head
    double extra_matmul_params = 0;  // ... and those outside the plan it meets (a mixture's k experts), set by the engine
};

// ModelInfo::kv_window from the layers' windows (0: full attention): the largest, when no layer attends to everything.
inline int kv_window_of(const std::vector<int>& windows) {
    if (windows.empty() || std::count(windows.begin(), windows.end(), 0)) return 0;
    return *std::max_element(windows.begin(), windows.end());
}

// The fields every decoder fills alike: vocabulary, context limit and end ids from config.json, and the embedding
// rows a decode step does not read (all but one, unless the output projection shares the table: head_reads_embedding).
inline ModelInfo decoder_info(int vocab, int dim, const ModelConfig& hf, bool head_reads_embedding) {
    ModelInfo i;
    i.vocab = vocab, i.max_position = hf.max_position_embeddings, i.eos_ids = hf.eos_token_ids;
    i.unread_bytes = head_reads_embedding ? 0 : (size_t)(vocab - 1) * dim * 2;
    i.share_prefix = hf.rope.type != "dynamic";
    return i;
}

// What the runner lends an engine: memory, stream, the shared projection scratch, the attention state, taps.
struct Runtime {
    GpuMemory mem;
    cudaStream_t stream = nullptr;
    WFormat fmt = WFormat::BF16;  // the weight format of the layer projections (--dtype, or what the file holds)
    int ctx = 0;                  // KV-cache length in tokens, per sequence
    int max_tokens = 0;           // rows of the largest forward pass (a prefill chunk)
    int slots = 1;                // sequences the KV cache (and any per-sequence state) holds: Batch::slot < slots
    int max_out = 1;              // logit rows one pass may want (the batched core's: a row per sequence)
    Linears lin;                  // the projections' plan and prefill scratch (ops/linear.cuh)
    Attention attn;               // KV cache and attention scratch (attention_layer.cuh)
    Taps taps;                    // --dump-dir
    std::string force_routing;    // --force-routing DIR: a mixture's expert choices from the oracle (ops/moe.cuh)

    Runtime() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
    // An activation buffer of max_tokens rows of `cols` (the engines' State).
    template <class T>
    T* rows(size_t cols) { return mem.alloc<T>((size_t)max_tokens * cols, "activations"); }
    // The logits: max_out rows (one, but for the batched core), or max_tokens rows when dumping every position's.
    float* logit_rows(size_t vocab) { return mem.alloc<float>((taps.dir.empty() ? (size_t)max_out : (size_t)max_tokens) * vocab, "activations"); }
    ~Runtime() {
        if (stream) cudaStreamDestroy(stream);
    }
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;
};

// The roofline's inputs, from what the engine loaded and planned.
inline void model_stats(ModelInfo& info, const Runtime& rt) {
    info.decode_bytes = rt.mem.bytes("weights") - info.unread_bytes;
    info.matmul_params = info.extra_matmul_params;
    for (const Linear* L : rt.lin.plan.order)
        if (L != rt.lin.plan.head_) info.matmul_params += (double)L->N * L->K;
}

}  // namespace monocu
