// runtime/generate.cuh — prompts in, tokens out, for any engine: prefill in chunks, then the decode loop with
// its CUDA graph and one step queued ahead.
//
// Usage (runner.cuh does this):
//   Generator<Model> g(model, rt, opts.cuda_graphs, opts.ubatch);
//   g.set_sampling(params);                              // temperature, top-k, ..., seed (sampling.cuh)
//   Generation r = g.run(prompt_ids, n_predict, eos_ids, [&](int id) { ...; return true; });
//     r.tokens (the last one may be an end-of-generation id), r.finish ("stop", "length", "context",
//     "interrupted"), r.prompt_ms, r.eval_ms, r.reused (prompt tokens whose KV rows were already cached)
//   g.cached()                                           // the tokens whose keys and values the cache holds,
//                                                        // in order: a next run() that starts with them
//                                                        // prefills only the rest (chat turns)
//
// One sequence, slot 0 of the cache. Position and input token live on the device (Batch::pos, the
// sampler's d_token), so a decode step is captured once as a CUDA graph and replayed per token; the host only
// reads the sampled id back, one step behind (TokenPipe).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

#include "gpu/timing.cuh"
#include "host/cli.h"
#include "host/config.h"
#include "ops/sampling.cuh"
#include "runtime/runtime.cuh"

namespace monocu {

static __global__ void advance_pos_kernel(int* pos, int n) { *pos += n; }

// Sampling settings: a flag wins, then generation_config.json, then llama.cpp's defaults.
inline SamplingParams sampling_params(const Options& o, const GenerationConfig& g) {
    SamplingParams p;
    bool gen_greedy = g.present && !g.do_sample;
    p.temperature = (float)(o.temp_set ? o.temp : gen_greedy ? 0.0 : g.present ? g.temperature : o.temp);
    p.top_k = o.top_k_set ? o.top_k : g.present ? g.top_k : o.top_k;
    p.top_p = (float)(o.top_p_set ? o.top_p : g.present ? g.top_p : o.top_p);
    p.min_p = (float)(o.min_p_set ? o.min_p : g.present ? g.min_p : o.min_p);
    p.repetition_penalty = (float)(o.repeat_penalty_set ? o.repeat_penalty : g.present ? g.repetition_penalty : 1.0);
    p.presence_penalty = (float)o.presence_penalty, p.frequency_penalty = (float)o.frequency_penalty;
    p.seed = o.seed_set ? o.seed : (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return p;
}

struct Generation {
    std::vector<int> tokens;   // generated ids, an end-of-generation id included when one ended it
    std::string finish;        // "stop" (end-of-generation id), "length" (-n), "context" (full), "interrupted"
    int prompt_tokens = 0, reused = 0;
    double prompt_ms = 0, eval_ms = 0;
};

struct DecodeGraph {
    bool warmed = false;  // the first step runs eagerly (one-time setup such as kernel attributes)
    cudaGraphExec_t exec = nullptr;
    void clear() {
        if (exec) cudaGraphExecDestroy(exec);
        exec = nullptr, warmed = false;
    }
    ~DecodeGraph() { clear(); }
    // The step: eager the first time, captured the second (the same kernels, replayed with one launch after that).
    template <class Step>
    void run(cudaStream_t s, Step&& eager) {
        if (!warmed) {
            warmed = true;
            return eager();
        }
        if (!exec) {
            cudaGraph_t g;
            CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            eager();
            CUDA_CHECK(cudaStreamEndCapture(s, &g));
            CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
            CUDA_CHECK(cudaGraphDestroy(g));
        }
        CUDA_CHECK(cudaGraphLaunch(exec, s));
    }
};

// Decode with one step queued ahead: step k+1 is launched before token k is read back, so the GPU does not
// idle while the host wakes up, reads the token and launches the next step (10-20 us a token). Each step's
// token is copied to its own pinned slot right after the step, before the next step can overwrite it.
// When generation stops, the step queued ahead has run for nothing; its token is never read.
struct TokenPipe {
    int* host = nullptr;  // pinned [2]: step k's token lands in host[k % 2]
    cudaEvent_t ready[2] = {nullptr, nullptr};
    long queued = 0, read = 0;  // steps launched, tokens read back
    TokenPipe() {
        CUDA_CHECK(cudaMallocHost(&host, 2 * sizeof(int)));
        for (cudaEvent_t& e : ready) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    ~TokenPipe() {
        if (queued > read) cudaEventSynchronize(ready[(queued - 1) % 2]);  // a step queued ahead still writes host[]
        for (cudaEvent_t e : ready) cudaEventDestroy(e);
        cudaFreeHost(host);
    }
    TokenPipe(const TokenPipe&) = delete;
    TokenPipe& operator=(const TokenPipe&) = delete;
    template <class Step>
    void launch(Step&& step, const int* d_token, cudaStream_t st) {
        if (queued - read >= 2) die("internal: more than two decode steps queued");
        step();
        int slot = (int)(queued++ % 2);
        CUDA_CHECK(cudaMemcpyAsync(&host[slot], d_token, sizeof(int), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaEventRecord(ready[slot], st));
    }
    int next_token() {  // the oldest unread step's token; waits for it
        if (read == queued) die("internal: no decode step queued");
        int slot = (int)(read++ % 2);
        CUDA_CHECK(cudaEventSynchronize(ready[slot]));
        return host[slot];
    }
};

template <class M>
class Generator {
public:
    Generator(M& m, Runtime& rt, bool cuda_graphs, int ubatch) : m_(m), rt_(rt), use_graph_(cuda_graphs) {
        chunk_ = std::min(ubatch, rt.max_tokens);
        d_ids_ = rt.mem.alloc<int>(rt.max_tokens, "activations");
        d_pos_ = rt.mem.alloc<int>(rt.max_tokens, "activations");
        sampler_ = sampler_create(m.info().vocab, rt.mem, rt.stream);
    }

    void set_sampling(const SamplingParams& sp) {
        if (graph_.exec && !same_choice(sp, sp_)) graph_.clear();  // the graph holds sp's values (a greedy one no seed)
        sp_ = sp;
    }
    const SamplingParams& sampling() const { return sp_; }
    const std::vector<int>& cached() const { return cached_; }
    void forget() { cached_.clear(); }     // the next run() prefills its whole prompt
    void restart_rng() { sampler_reset(sampler_, rt_.stream); }  // draws from the seed's first on (else they go on)
    Sampler& sampler() { return sampler_; }
    FILE* trace = nullptr;                 // --trace: token, position, ms per decode step

    // Prefill ids[from:] at positions from.. (the cache holds ids[:from] already) in chunks, every row's logits
    // into the taps when they are on; the first generated token is then in the sampler.
    void prefill(const std::vector<int>& ids, int from) {
        sampler_clear_seen(sampler_, rt_.stream);
        for (size_t at = 0; at < ids.size(); at += chunk_) {  // the repetition penalty sees the whole prompt
            int T = (int)std::min<size_t>(chunk_, ids.size() - at);
            CUDA_CHECK(cudaMemcpyAsync(d_ids_, ids.data() + at, T * sizeof(int), cudaMemcpyHostToDevice, rt_.stream));
            sampler_mark_seen(sampler_, d_ids_, T, rt_.stream);
            if ((int)at + T <= from) continue;
            int skip = (int)at < from ? from - (int)at : 0;  // chunk boundaries follow the whole prompt
            forward_chunk(ids, (int)at + skip, T - skip);
        }
        rt_.taps.flush();
        set_pos((int)ids.size());
        sample(sampler_, sp_, last_logits_, rt_.stream);
        cached_.assign(ids.begin(), ids.end());
    }

    // One decode step: the token the sampler chose goes in at the device's position, the next one comes out.
    void decode_step_eager() {
        Batch b;
        b.n_tokens = 1, b.ids = sampler_.d_token, b.pos = d_pos_, b.pos0 = -1;
        rt_.taps.paused = true;  // dumps cover the prompt's positions
        const float* logits = m_.forward(rt_, b);
        rt_.taps.paused = false;
        OpScope op("sample", rt_.stream);
        sample(sampler_, sp_, logits, rt_.stream);
        advance_pos_kernel<<<1, 1, 0, rt_.stream>>>(d_pos_, 1);
        LAUNCH_CHECK();
    }
    void decode_step() {
        if (!use_graph_) return decode_step_eager();
        graph_.run(rt_.stream, [&] { decode_step_eager(); });
    }

    int read_token() {
        int tok;
        CUDA_CHECK(cudaMemcpyAsync(&tok, sampler_.d_token, sizeof(int), cudaMemcpyDeviceToHost, rt_.stream));
        CUDA_CHECK(cudaStreamSynchronize(rt_.stream));
        return tok;
    }

    // Generates after `prompt` until an end-of-generation id, n_predict tokens (-1: no limit), a full context,
    // or on_token returning false. Prompt tokens the cache already holds (a common prefix with cached()) are
    // not run again.
    Generation run(const std::vector<int>& prompt, int n_predict, const std::vector<int>& eos, const std::function<bool(int)>& on_token) {
        Generation r;
        if (prompt.empty()) die("the prompt is empty");
        if ((int)prompt.size() >= rt_.ctx)
            die("the prompt is %zu tokens; the context holds %d (raise -c, up to max_position_embeddings %d)", prompt.size(), rt_.ctx,
                m_.info().max_position);
        size_t reuse = 0;
        while (reuse < cached_.size() && reuse < prompt.size() && cached_[reuse] == prompt[reuse]) reuse++;
        if (reuse == prompt.size()) reuse--;  // the last prompt token runs again: its logits choose the first token
        // A running state (or an evicting KV cache, which has forgotten tokens) cannot go back: start over.
        bool rewindable = m_.info().rewindable && !rt_.attn.h2o.on();
        if (!rewindable && reuse != cached_.size()) reuse = 0;
        r.prompt_tokens = (int)prompt.size(), r.reused = (int)reuse;
        double t0 = wall_ms();
        prefill(prompt, (int)reuse);
        int tok = read_token();
        r.prompt_ms = wall_ms() - t0;

        // The step queued ahead reads token n + 1 at position pos + 1 and makes token n + 2: it may be wanted if
        // pos + 1 is inside the context and n + 1 tokens do not reach -n (whether token n + 1 ends generation is
        // not known yet).
        auto ahead_may_be_wanted = [&](int next_pos, size_t next_n) { return next_pos < rt_.ctx && (n_predict < 0 || (long)next_n < n_predict); };
        TokenPipe pipe;
        auto step = [&] { decode_step(); };
        int pos = (int)prompt.size();  // position of tok, the newest token
        double t1 = wall_ms(), ts = t1;
        while (true) {
            r.tokens.push_back(tok);
            bool is_eos = std::find(eos.begin(), eos.end(), tok) != eos.end();
            if (is_eos) { r.finish = "stop"; break; }
            if (!on_token(tok)) { r.finish = "interrupted"; break; }
            if (n_predict >= 0 && (int)r.tokens.size() >= n_predict) { r.finish = "length"; break; }
            if (pos >= rt_.ctx) { r.finish = "context"; break; }
            if (pipe.queued == pipe.read) pipe.launch(step, sampler_.d_token, rt_.stream);  // the step at pos (first only)
            if (ahead_may_be_wanted(pos + 1, r.tokens.size() + 1)) pipe.launch(step, sampler_.d_token, rt_.stream);
            tok = pipe.next_token();
            pos++;
            if (trace) std::fprintf(trace, "%zu,%d,%.4f\n", r.tokens.size(), pos, wall_ms() - ts);
            ts = wall_ms();
        }
        r.eval_ms = wall_ms() - t1;
        // The cache holds the prompt and every token a launched step consumed: the first `queued` generated ones.
        cached_.insert(cached_.end(), r.tokens.begin(), r.tokens.begin() + std::min<long>(pipe.queued, (long)r.tokens.size()));
        return r;
    }

    // --bench and tests: the decode loop alone, n steps from where prefill left the position, greedy as set.
    double time_decode(int n) {
        double t0 = wall_ms();
        TokenPipe pipe;
        auto step = [&] { decode_step(); };
        pipe.launch(step, sampler_.d_token, rt_.stream);
        for (int i = 0; i < n; i++) {  // as run() does: the next step is queued before a token is read
            if (i + 1 < n) pipe.launch(step, sampler_.d_token, rt_.stream);
            pipe.next_token();
        }
        return wall_ms() - t0;
    }

    // A valid position for the next decode step (bench: profile a step at the end of the context).
    void set_pos(int pos) {
        CUDA_CHECK(cudaMemcpyAsync(d_pos_, &pos, sizeof(int), cudaMemcpyHostToDevice, rt_.stream));
        CUDA_CHECK(cudaStreamSynchronize(rt_.stream));  // pos lives on this stack frame
    }

    // One prefill pass of ids[at .. at + T) at those positions (bench's breakdown, and prefill's chunks).
    void forward_chunk(const std::vector<int>& ids, int at, int T) {
        std::vector<int> pos(T);
        for (int i = 0; i < T; i++) pos[i] = at + i;
        CUDA_CHECK(cudaMemcpyAsync(d_ids_, ids.data() + at, T * sizeof(int), cudaMemcpyHostToDevice, rt_.stream));
        CUDA_CHECK(cudaMemcpyAsync(d_pos_, pos.data(), T * sizeof(int), cudaMemcpyHostToDevice, rt_.stream));
        Batch b;
        b.n_tokens = T, b.ids = d_ids_, b.pos = d_pos_, b.pos0 = at, b.n_out = rt_.taps.on() ? T : 1;
        const float* logits = m_.forward(rt_, b);
        last_logits_ = logits + (size_t)(b.n_out - 1) * m_.info().vocab;
        CUDA_CHECK(cudaStreamSynchronize(rt_.stream));  // pos lives on this stack frame
    }

private:
    M& m_;
    Runtime& rt_;
    bool use_graph_;
    int chunk_ = 0;
    int* d_ids_ = nullptr;
    int* d_pos_ = nullptr;  // [max_tokens] positions of a pass; [0] is the decode step's, advanced on the device
    Sampler sampler_;
    SamplingParams sp_;
    DecodeGraph graph_;
    const float* last_logits_ = nullptr;
    std::vector<int> cached_;
};

}  // namespace monocu
