// runtime/batched.cuh — the batched core on the GPU: many sequences at once, each forward pass taking the decode
// tokens of every running sequence and chunks of waiting prompts, over a paged KV cache (continuous batching).
//
// Usage (runner.cuh builds it for -np / --parallel; batch files and --bench drive it):
//   BatchedRunner<M> br(model, rt, n_blocks, batch_tokens, max_seqs, cuda_graphs);
//   br.add({id, prompt_ids, max_tokens, stop_ids, sampling});     // any time, also while others run
//   while (!br.idle())
//       for (const BatchedResult& r : br.step([&](int id, int token) { ... }))   // each sampled token as it comes
//   br.cancel(id);                                                // between steps: it leaves, its blocks go back
//
// The parts: host/kv_blocks.h hands out 16-position blocks of the pool and keeps the prefix cache;
// host/scheduler.h picks each step's tokens under the token budget and preempts the newest sequence when the pool
// runs out. One step here:
//   1. the plan: every running sequence's pending token, then prompt chunks (new sequences start from the longest
//      prefix the cache already holds);
//   2. the pass's rows: the one-token items first (decode steps: Flash-Decoding takes them all in one launch), then
//      the chunks; each row's token and position, each item's block table, and the rows whose logits are wanted;
//   3. the engine's forward() over all rows at once: every projection reads its weights once for the whole pass;
//   4. one token per item that reached its last row: greedy rows in one launch, sampling rows one by one, each with
//      its own settings, seen tokens and RNG (ops/sampling.cuh's BatchSampler);
//   5. the scheduler commits the rows (full blocks join the prefix cache) and retires finished sequences, whose
//      places the next plan fills.
// A step of decode tokens only, all greedy, is replayed as a CUDA graph captured per bucket of sequence counts
// (1, 2, 4, ... up to max_seqs: bucket()): rows past the live ones are padding (token 0 at position 0 in a scratch
// block of the pool), whose logits nobody reads. Engines whose multi-token pass waits on the host (a mixture's
// routing) run every step eagerly, and so do quantized weights past a few sequences (a pass of more tokens than
// ops/linear.cuh's ring_free_rows dequantizes them on a side stream: FP8 and INT4 past 32).
#pragma once

#include <functional>
#include <map>
#include <unordered_map>

#include "host/logprobs.h"
#include "host/scheduler.h"
#include "ops/sampling.cuh"
#include "runtime/generate.cuh"

namespace monocu {

constexpr int kKvBlockSize = 16;  // positions per block of the paged cache (kb/decisions.md)

struct BatchedRequest {
    int id = 0;
    std::vector<int> prompt;
    int max_tokens = 0;           // tokens to generate, >= 1 (cut to what the context leaves)
    std::vector<int> stop_ids;    // end-of-generation ids: any of them ends the sequence (and is its last token)
    SamplingParams sp;            // temperature 0: greedy
    int logprobs = -1;            // >= 0: each token's log-probability and the `logprobs` most likely (on_token hears them)
};

struct BatchedResult {
    int id = 0;
    std::vector<int> tokens;      // generated, a stop id included when one ended it
    std::vector<float> gaps;      // per token: top-1 minus top-2 logit where it was chosen greedily (NaN: sampled)
    std::string finish;           // "stop", "length" (max_tokens), "context" (the context is full)
    int prompt_tokens = 0, reused = 0, preemptions = 0;
};

struct BatchedStats {
    long steps = 0, graph_steps = 0, preemptions = 0;
    long prefix_hit_blocks = 0, prefix_miss_blocks = 0;
    int last_items = 0, last_decode = 0;  // the last step's items and one-token items among them
};

template <class M>
class BatchedRunner {
public:
    // n_blocks: the pool's blocks (one is kept back as the padding rows' scratch).
    BatchedRunner(M& m, Runtime& rt, int n_blocks, int batch_tokens, int max_seqs, bool graphs)
        : m_(m), rt_(rt), kv_(n_blocks - 1, kKvBlockSize), sched_(kv_, batch_tokens, max_seqs, m.info().kv_window), max_seqs_(max_seqs),
          graphs_(graphs && m.info().batch_graphs), pad_block_(n_blocks - 1) {
        if (rt.attn.page_shift < 0) die("internal: the batched core needs the paged KV cache");
        if (batch_tokens > rt.max_tokens) die("internal: %d batch tokens, activations for %d", batch_tokens, rt.max_tokens);
        if (max_seqs > rt.max_out) die("internal: %d sequences, logits for %d", max_seqs, rt.max_out);
        vocab_ = m.info().vocab;
        max_blocks_ = CEIL_DIV(rt.ctx, kKvBlockSize);
        if (rt.slots <= max_seqs) die("internal: %d state slots for %d sequences and the padding rows", rt.slots, max_seqs);
        ring_free_rows_ = ring_free_rows(rt.lin);
        kv_.share = m.info().rewindable && m.info().share_prefix;  // a running state (LFM2's conv) cannot start from a cached
                                                                    // prefix, nor can a pass-dependent RoPE's rows be reused
        // A pass's inputs in one buffer (one copy per step): ids [rows], positions [rows], logit rows [max_seqs], state
        // slots [max_seqs], then the block tables [max_seqs][max_blocks]; the same layout pinned on the host.
        const int rows = std::max(batch_tokens, max_seqs);
        in_ints_ = 2 * (size_t)rows + 2 * (size_t)max_seqs + (size_t)max_seqs * max_blocks_;
        d_ids_ = rt.mem.alloc<int>(in_ints_, "activations");
        d_pos_ = d_ids_ + rows, d_out_ = d_pos_ + rows, d_slots_ = d_out_ + max_seqs, d_tables_ = d_slots_ + max_seqs;
        d_start_ = rt.mem.alloc<int>(rt.ctx, "activations");
        CUDA_CHECK(cudaMallocHost(&h_ids_, in_ints_ * sizeof(int)));
        h_pos_ = h_ids_ + rows, h_out_ = h_pos_ + rows, h_slots_ = h_out_ + max_seqs, h_tables_ = h_slots_ + max_seqs;
        CUDA_CHECK(cudaMallocHost(&h_tokens_, 2 * max_seqs * sizeof(int)));  // tokens, then gaps (as BatchSampler keeps them)
        sampler_ = batch_sampler_create(vocab_, max_seqs, max_seqs, rt.mem, rt.stream);
        for (int s = max_seqs - 1; s >= 0; s--) free_slots_.push_back(s);
        // Sliding windows on every layer: blocks behind the window go back to the pool after each pass (the scheduler
        // releases them); their table entries then point at the padding block, zeroed here, so a kernel that reads a
        // whole tile across the window's edge (and masks what is outside) reads finite rows that belong to no one.
        kv_cache_zero_rows(rt.attn.kv, pad_block_ * kKvBlockSize, kKvBlockSize, rt.stream);
    }
    ~BatchedRunner() {
        cudaStreamSynchronize(rt_.stream);
        cudaFreeHost(h_ids_);
        cudaFreeHost(h_tokens_);
        if (h_logits_) cudaFreeHost(h_logits_);
    }
    BatchedRunner(const BatchedRunner&) = delete;
    BatchedRunner& operator=(const BatchedRunner&) = delete;

    // A new sequence. Its prompt must leave room in the context for one token; max_tokens is cut to what is left.
    void add(BatchedRequest r) {
        if (seqs_.count(r.id)) die("batched: request %d added twice", r.id);
        if (r.prompt.empty()) die("request %d: the prompt is empty", r.id);
        if ((int)r.prompt.size() >= rt_.ctx)
            die("request %d: the prompt is %zu tokens; the context holds %d (raise -c)", r.id, r.prompt.size(), rt_.ctx);
        for (int t : r.prompt)
            if (t < 0 || t >= vocab_) die("request %d: token id %d is outside the vocabulary (%d)", r.id, t, vocab_);
        Seq s;
        s.req = r;
        s.context_cut = r.max_tokens > rt_.ctx - (int)r.prompt.size();
        s.req.max_tokens = std::max(1, std::min(r.max_tokens, rt_.ctx - (int)r.prompt.size()));
        s.all = r.prompt;
        sched_.add(SchedRequest{r.id, r.prompt, s.req.max_tokens, r.stop_ids});
        seqs_[r.id] = std::move(s);
    }

    // Between steps: a sequence nobody waits for leaves now (the server's client went away, a stop string ended it).
    // false: no such sequence (it finished already).
    bool cancel(int id) {
        if (!seqs_.count(id)) return false;
        if (!sched_.cancel(id)) die("internal: sequence %d is not in the scheduler", id);
        release_slot(id);
        seqs_.erase(id);
        return true;
    }

    bool idle() const { return sched_.idle(); }
    int running() const { return sched_.running(); }
    int waiting() const { return sched_.waiting(); }
    const BatchedStats& stats() const { return stats_; }
    int kv_blocks() const { return kv_.n_blocks(); }
    int kv_blocks_used() const { return kv_.n_blocks() - kv_.free_blocks(); }  // held by running sequences
    bool eager = false;  // no CUDA graphs (--bench's profile: each operation timed alone)

    // One pass. on_token(id, token, logprobs) hears every sampled token (the finishing ones too) in the order of the
    // pass; logprobs is null unless the request asked for them.
    using OnToken = std::function<void(int, int, const TokenLogprobs*)>;
    std::vector<BatchedResult> step(const OnToken& on_token = {}) {
        StepPlan p = sched_.plan();
        for (int id : p.preempted) release_slot(id), seqs_.at(id).preemptions++, stats_.preemptions++;
        if (p.items.empty()) {
            if (!sched_.idle()) die("internal: the scheduler planned nothing for %d waiting sequences", sched_.waiting());
            return {};
        }
        // The rows: one-token items first (the decode launch), then the chunks.
        std::vector<int> order;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < (int)p.items.size(); i++)
                if ((p.items[i].n == 1) == (pass == 0)) order.push_back(i);
        int n_dec = 0;
        while (n_dec < (int)order.size() && p.items[order[n_dec]].n == 1) n_dec++;
        bool all_plain = true, all_out = true;
        for (const StepItem& it : p.items) {
            const Seq& s = seqs_.at(it.seq);
            all_plain = all_plain && plain_greedy(s.req.sp) && s.req.logprobs < 0;
            all_out = all_out && it.logits;
        }
        // (a pass of several rows over quantized weights dequantizes them on a side stream: not in a graph)
        const bool graph = graphs_ && !eager && n_dec == (int)order.size() && all_plain && all_out &&
                           bucket(n_dec) <= ring_free_rows_;
        const int n_items = graph ? bucket(n_dec) : (int)order.size();

        std::vector<int> lp_rows;  // logits rows copied back for logprobs (their index in out_items)
        std::vector<BatchSeq> bseqs(n_items);
        std::vector<int> out_items;  // plan index of each logits row, in row order
        int row = 0;
        for (int k = 0; k < (int)order.size(); k++) {
            const StepItem& it = p.items[order[k]];
            Seq& s = seqs_.at(it.seq);
            if (s.slot < 0) start_slot(it.seq, s, it.from);
            bseqs[k] = BatchSeq{row, it.n, it.from, s.slot};
            h_slots_[k] = s.slot;
            for (int j = 0; j < it.n; j++) h_ids_[row + j] = s.all[it.from + j], h_pos_[row + j] = it.from + j;
            const std::vector<int>& table = kv_.table(it.seq);
            if ((int)table.size() > max_blocks_) die("internal: sequence %d holds %zu blocks, at most %d", it.seq, table.size(), max_blocks_);
            int* t = h_tables_ + (size_t)k * max_blocks_;
            for (size_t j = 0; j < table.size(); j++) t[j] = table[j] < 0 ? pad_block_ : table[j];  // (released: -1)
            std::fill(t + table.size(), t + max_blocks_, pad_block_);
            if (it.logits) h_out_[out_items.size()] = row + it.n - 1, out_items.push_back(order[k]);
            row += it.n;
        }
        const int n_live_out = (int)out_items.size();
        for (int k = (int)order.size(); k < n_items; k++) {  // graph padding: decode rows nobody reads
            bseqs[k] = BatchSeq{row, 1, 0, max_seqs_};  // (the state slot past the sequences': scratch)
            h_slots_[k] = max_seqs_;
            h_ids_[row] = 0, h_pos_[row] = 0;
            std::fill(h_tables_ + (size_t)k * max_blocks_, h_tables_ + (size_t)(k + 1) * max_blocks_, pad_block_);
            h_out_[k] = row++;
        }
        const int n_rows = row, n_out = graph ? n_items : n_live_out;
        cudaStream_t st = rt_.stream;
        const size_t in_used = (size_t)(h_tables_ - h_ids_) + (size_t)n_items * max_blocks_;  // through the last table
        CUDA_CHECK(cudaMemcpyAsync(d_ids_, h_ids_, in_used * sizeof(int), cudaMemcpyHostToDevice, st));

        Batch b;
        b.n_tokens = n_rows, b.ids = d_ids_, b.pos = d_pos_, b.n_seqs = n_items, b.pos0 = -1;
        b.seqs = bseqs.data(), b.n_decode = graph ? n_items : n_dec;
        b.tables = d_tables_, b.table_stride = max_blocks_;
        b.out_rows = d_out_, b.n_out = n_out, b.slots = d_slots_;
        if (graph) {
            run_graph(b);
            stats_.graph_steps++;
        } else {
            const float* logits = n_rows ? m_.forward(rt_, b) : nullptr;
            copy_logprob_rows(logits, out_items, p, lp_rows);  // (raw logits: before any sampler settings touch them)
            if (n_out) sample_rows(logits, out_items, p);
        }
        if (n_live_out) CUDA_CHECK(cudaMemcpyAsync(h_tokens_, sampler_.tokens, 2 * max_seqs_ * sizeof(int), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        stats_.steps++, stats_.last_items = (int)order.size(), stats_.last_decode = n_dec;

        std::vector<int> sampled(p.items.size(), -1);
        std::vector<float> gap(p.items.size());
        const float* h_gaps = reinterpret_cast<const float*>(h_tokens_ + max_seqs_);
        for (int j = 0; j < n_live_out; j++) sampled[out_items[j]] = h_tokens_[j], gap[out_items[j]] = h_gaps[j];
        std::vector<TokenLogprobs> lps(p.items.size());
        std::vector<bool> has_lp(p.items.size(), false);
        for (size_t k = 0; k < lp_rows.size(); k++) {
            const int i = out_items[lp_rows[k]];
            lps[i] = token_logprobs(h_logits_ + k * (size_t)vocab_, vocab_, sampled[i], seqs_.at(p.items[i].seq).req.logprobs);
            has_lp[i] = true;
        }
        for (size_t i = 0; i < p.items.size(); i++) {
            if (sampled[i] < 0) continue;
            Seq& s = seqs_.at(p.items[i].seq);
            s.all.push_back(sampled[i]);
            s.gaps.push_back(plain_greedy(s.req.sp) ? gap[i] : NAN);
            if (on_token) on_token(p.items[i].seq, sampled[i], has_lp[i] ? &lps[i] : nullptr);
        }
        std::vector<BatchedResult> done;
        for (const Finished& f : sched_.complete(p, sampled)) {
            Seq& s = seqs_.at(f.id);
            BatchedResult r;
            r.id = f.id, r.tokens = f.tokens, r.gaps = s.gaps, r.prompt_tokens = (int)s.req.prompt.size(), r.reused = s.reused, r.preemptions = s.preemptions;
            bool stop = !f.tokens.empty() &&
                        std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), f.tokens.back()) != s.req.stop_ids.end();
            r.finish = stop ? "stop" : s.context_cut ? "context" : "length";
            release_slot(f.id);
            seqs_.erase(f.id);
            done.push_back(std::move(r));
        }
        stats_.prefix_hit_blocks = kv_.hits, stats_.prefix_miss_blocks = kv_.misses;
        return done;
    }

private:
    struct Seq {
        BatchedRequest req;
        std::vector<int> all;      // prompt, then the generated tokens
        std::vector<float> gaps;   // per generated token (BatchedResult::gaps)
        int slot = -1;             // its row of the sampler's state while it runs (-1: waiting)
        int reused = 0;            // prompt tokens the prefix cache gave it when it (last) started
        int preemptions = 0;
        bool context_cut = false;  // max_tokens was cut to the context
    };
    M& m_;
    Runtime& rt_;
    KvBlockManager kv_;
    Scheduler sched_;
    int max_seqs_;
    bool graphs_;
    int pad_block_;
    int vocab_ = 0, max_blocks_ = 0;
    int ring_free_rows_ = 1;  // passes of up to this many rows never dequantize on the side stream (graph-safe)
    size_t in_ints_ = 0;
    int *d_ids_ = nullptr, *d_pos_ = nullptr, *d_tables_ = nullptr, *d_out_ = nullptr, *d_slots_ = nullptr, *d_start_ = nullptr;
    int *h_ids_ = nullptr, *h_pos_ = nullptr, *h_tables_ = nullptr, *h_out_ = nullptr, *h_slots_ = nullptr, *h_tokens_ = nullptr;  // pinned
    float* h_logits_ = nullptr;  // pinned: logits rows of the sequences that want logprobs
    int logits_rows_ = 0;
    BatchSampler sampler_;
    std::vector<int> free_slots_;
    std::unordered_map<int, Seq> seqs_;
    std::map<int, DecodeGraph> graphs_by_size_;
    BatchedStats stats_;

    static bool plain_greedy(const SamplingParams& sp) { return sp.temperature <= 0.f && !sp.penalised(); }
    // The graph a step of n decode rows replays: the next power of two (capped at max_seqs). Rows past n are padding,
    // which costs (Qwen3-8B, H200: a step of 33 rows 6.49 ms, 64 rows 7.74); finer buckets (multiples of 8) lost 2.9%
    // end to end on a batch file, since each bucket's first two steps run eagerly and capture (kb/decisions.md).
    int bucket(int n) const {
        int b = 1;
        while (b < n) b *= 2;
        return std::min(b, max_seqs_);
    }

    // The sequence's first pass since it (re)started: a slot (the sampler's row, and any per-sequence state); its seen tokens (all it has so far: a restarted
    // sequence keeps its generated ones) and RNG draws where sampling needs them.
    void start_slot(int id, Seq& s, int from) {
        if (free_slots_.empty()) die("internal: no sampler slot for sequence %d", id);
        s.slot = free_slots_.back();
        free_slots_.pop_back();
        if (from > 0 && s.all.size() == s.req.prompt.size()) s.reused = from;
        if (plain_greedy(s.req.sp)) return;
        CUDA_CHECK(cudaStreamSynchronize(rt_.stream));  // d_start_ may still be read by an earlier start
        CUDA_CHECK(cudaMemcpy(d_start_, s.all.data(), s.all.size() * sizeof(int), cudaMemcpyHostToDevice));
        batch_sampler_start(sampler_, s.slot, d_start_, (int)s.all.size(), (long)(s.all.size() - s.req.prompt.size()), rt_.stream);
    }
    void release_slot(int id) {
        Seq& s = seqs_.at(id);
        if (s.slot >= 0) free_slots_.push_back(s.slot);
        s.slot = -1;  // (a preempted sequence keeps its tokens: the scheduler restarts it from them)
    }

    // Row j's token into sampler_.tokens[j]: greedy rows all at once, the others with their own settings.
    void sample_rows(const float* logits, const std::vector<int>& out_items, const StepPlan& p) {
        OpScope op("sample", rt_.stream);
        argmax_rows(sampler_, logits, (int)out_items.size(), rt_.stream);
        for (int j = 0; j < (int)out_items.size(); j++) {
            const Seq& s = seqs_.at(p.items[out_items[j]].seq);
            if (plain_greedy(s.req.sp)) continue;
            Sampler smp = batch_sampler_row(sampler_, s.slot, j);
            sample(smp, s.req.sp, logits + (size_t)j * vocab_, rt_.stream);
        }
    }

    // The logits rows of the items that asked for logprobs, to the host (their log-softmax is taken there).
    void copy_logprob_rows(const float* logits, const std::vector<int>& out_items, const StepPlan& p, std::vector<int>& rows) {
        for (int j = 0; j < (int)out_items.size(); j++)
            if (seqs_.at(p.items[out_items[j]].seq).req.logprobs >= 0) rows.push_back(j);
        if (rows.empty()) return;
        if ((int)rows.size() > logits_rows_) {  // (the stream has no copy into the old buffer in flight: each step ends synchronized)
            if (h_logits_) CUDA_CHECK(cudaFreeHost(h_logits_));
            logits_rows_ = std::max((int)rows.size(), 2 * logits_rows_);
            CUDA_CHECK(cudaMallocHost(&h_logits_, (size_t)logits_rows_ * vocab_ * sizeof(float)));
        }
        for (size_t k = 0; k < rows.size(); k++)
            CUDA_CHECK(cudaMemcpyAsync(h_logits_ + k * (size_t)vocab_, logits + (size_t)rows[k] * vocab_, (size_t)vocab_ * sizeof(float),
                                       cudaMemcpyDeviceToHost, rt_.stream));
    }

    // A decode-only, all-greedy step of b.n_seqs rows (a bucket): eager the first time, captured the second, replayed after.
    void run_graph(const Batch& b) {
        graphs_by_size_[b.n_seqs].run(rt_.stream, [&] {
            const float* logits = m_.forward(rt_, b);
            OpScope op("sample", rt_.stream);
            argmax_rows(sampler_, logits, b.n_out, rt_.stream);
        });
    }
};

}  // namespace monocu
