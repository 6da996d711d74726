// host/scheduler.h — continuous batching for the batched core (host only): which tokens of which sequences each
// forward pass runs, under a token budget, with the paged KV cache's blocks (host/kv_blocks.h) reserved for them.
//
// Usage (the batched runner's loop):
//   Scheduler s(kv, batch_tokens, max_seqs, window);  // window: 0, or every layer's sliding window
//   s.add({id, prompt_ids, max_tokens, stop_ids});
//   while (!s.idle()) {
//       StepPlan p = s.plan();                  // every item: a sequence, its tokens [from, from + n), its block table
//       ... one forward pass over p.items; a token sampled for each item with p.items[i].logits ...
//       for (const Finished& f : s.complete(p, sampled)) ...   // sampled[i]: item i's token (ignored without logits)
//   }
//
// One step: first every running sequence's one pending token (decode steps are cheap and someone waits on each),
// then the rest of the prompts already started, then new sequences from the queue (each reusing what the prefix cache
// holds of its prompt), in arrival order, until batch_tokens tokens or max_seqs sequences; a prompt longer than what
// is left of the budget is cut into chunks over several steps. A sequence's logits are wanted when its chunk reaches
// its last token. A finished sequence (max_tokens generated, or a stop id) leaves in complete(), so the next plan() can
// admit another in its place.
//
// Out of blocks: the newest running sequence is preempted (its blocks freed; it goes back to the front of the queue
// with everything it has so far as its prompt, to be recomputed, mostly from the prefix cache) until the item fits;
// nothing is dropped or corrupted. A single sequence that cannot fit the whole pool is refused when added.
//
// Sliding windows (`window` > 0: every layer reads at most that many positions back): after each pass a sequence's
// blocks wholly before its last `window` positions are released (its table holds -1 there), so a long sequence holds
// about window / block_size + 2 blocks, and only the blocks that span a window and a chunk count when it is added.
#pragma once

#include <algorithm>
#include <deque>
#include <vector>

#include "host/kv_blocks.h"

namespace monocu {

struct SchedRequest {
    int id = 0;
    std::vector<int> prompt;
    int max_tokens = 0;             // tokens to generate (>= 1)
    std::vector<int> stop_ids;      // any of these ends it (and is its last token)
};

struct StepItem {
    int seq;       // request id
    int from, n;   // its tokens [from, from + n) run in this pass, at those positions
    bool logits;   // the chunk ends at the sequence's last token: a token is sampled from it
};

struct StepPlan {
    std::vector<StepItem> items;
    int tokens = 0;                 // sum of n
    std::vector<int> preempted;     // request ids sent back to the queue while planning
};

struct Finished {
    int id;
    std::vector<int> tokens;        // the generated tokens (a stop id included when one ended it)
    int preemptions = 0;
};

class Scheduler {
public:
    // window: the positions every layer's queries read back (a sliding window on all of them; 0: all positions).
    Scheduler(KvBlockManager& kv, int batch_tokens, int max_seqs, int window = 0)
        : kv_(kv), budget_(batch_tokens), max_seqs_(max_seqs), window_(window) {
        if (batch_tokens < 1 || max_seqs < 1) die("scheduler: a budget of %d tokens and %d sequences", batch_tokens, max_seqs);
        if (window < 0) die("scheduler: a window of %d positions", window);
    }

    void add(const SchedRequest& r) {
        if (r.prompt.empty()) die("request %d: the prompt is empty", r.id);
        if (r.max_tokens < 1) die("request %d: max_tokens %d", r.id, r.max_tokens);
        const int bs = kv_.block_size();
        long need = ((long)r.prompt.size() + r.max_tokens + bs - 1) / bs;
        if (window_ > 0) need = std::min(need, ((long)window_ + budget_ + bs - 1) / bs + 1);  // a window, a chunk, the seams
        if (need > kv_.n_blocks())
            die("request %d: %zu prompt tokens and %d to generate need %ld KV blocks; the pool has %d", r.id, r.prompt.size(), r.max_tokens,
                need, kv_.n_blocks());
        Seq s;
        s.req = r;
        s.all = r.prompt;
        waiting_.push_back(s);
    }

    // A request leaves now, waiting or running (its blocks go back; full ones stay in the prefix cache). false: no such
    // request (it finished already). Between steps only: a plan's items must all complete.
    bool cancel(int id) {
        auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const Seq& s) { return s.req.id == id; });
        if (w != waiting_.end()) {
            waiting_.erase(w);
            return true;
        }
        auto r = std::find_if(running_.begin(), running_.end(), [&](const Seq& s) { return s.req.id == id; });
        if (r == running_.end()) return false;
        kv_.finish(id);
        running_.erase(r);
        return true;
    }

    bool idle() const { return waiting_.empty() && running_.empty(); }
    int running() const { return (int)running_.size(); }
    int waiting() const { return (int)waiting_.size(); }

    StepPlan plan() {
        StepPlan p;
        int left = budget_;
        // Running sequences in admission order: decode steps first, then unfinished prompts.
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < running_.size() && left > 0; i++) {
                Seq& s = running_[i];
                int pending = (int)s.all.size() - s.written;
                if (pending <= 0 || (pass == 0) != (pending == 1 && s.started_decode)) continue;
                int n = std::min(pending, left);
                if (!reserve(s, n, p)) {  // this one was preempted itself; the list changed
                    i--;
                    continue;
                }
                p.items.push_back(StepItem{s.req.id, s.written, n, s.written + n == (int)s.all.size()});
                left -= n;
            }
        // New sequences while the budget and max_seqs allow.
        while (left > 0 && !waiting_.empty() && (int)running_.size() < max_seqs_) {
            Seq s = waiting_.front();
            waiting_.pop_front();
            s.written = kv_.start(s.req.id, s.all);
            running_.push_back(s);
            Seq& r = running_.back();
            int n = std::min((int)r.all.size() - r.written, left);
            if (!reserve(r, n, p)) break;  // preempted itself: back in the queue, and so is the rest
            p.items.push_back(StepItem{r.req.id, r.written, n, r.written + n == (int)r.all.size()});
            left -= n;
        }
        for (const StepItem& it : p.items) p.tokens += it.n;  // (a preempted sequence's planned items are gone)
        return p;
    }

    // After the pass: the items' rows are written; each item with logits brings its sampled token.
    std::vector<Finished> complete(const StepPlan& p, const std::vector<int>& sampled) {
        if (sampled.size() != p.items.size()) die("scheduler: %zu sampled tokens for %zu items", sampled.size(), p.items.size());
        std::vector<Finished> done;
        for (size_t i = 0; i < p.items.size(); i++) {
            const StepItem& it = p.items[i];
            auto at = std::find_if(running_.begin(), running_.end(), [&](const Seq& s) { return s.req.id == it.seq; });
            if (at == running_.end() || at->written != it.from) die("scheduler: item %zu does not match sequence %d", i, it.seq);
            Seq& s = *at;
            kv_.commit(s.req.id, s.all.data() + it.from, it.n);
            s.written += it.n;
            // The next pass's queries sit at written or later and read back less than `window` positions: what lies
            // wholly before written - window is never read again (one position kept besides, whichever side of the
            // window's edge a family counts).
            if (window_ > 0) kv_.release_before(s.req.id, s.written - window_);
            if (!it.logits) continue;
            int tok = sampled[i];
            s.generated.push_back(tok);
            s.all.push_back(tok);
            s.started_decode = true;
            bool stop = std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), tok) != s.req.stop_ids.end();
            if (stop || (int)s.generated.size() >= s.req.max_tokens) {
                done.push_back(Finished{s.req.id, s.generated, s.preemptions});
                kv_.finish(s.req.id);
                running_.erase(at);
            }
        }
        return done;
    }

private:
    struct Seq {
        SchedRequest req;
        std::vector<int> all;          // prompt, then generated tokens
        std::vector<int> generated;
        int written = 0;               // tokens whose KV rows exist
        bool started_decode = false;   // has sampled at least once (its pending token is a decode step)
        int preemptions = 0;
    };
    KvBlockManager& kv_;
    int budget_, max_seqs_, window_;
    std::deque<Seq> waiting_;
    std::vector<Seq> running_;         // admission order

    // Blocks for s's next n tokens, preempting the newest running sequences while the pool is short. false: s itself
    // was the newest and went back to the queue.
    bool reserve(Seq& s, int n, StepPlan& p) {
        const int id = s.req.id;
        while (!kv_.reserve(id, n)) {
            Seq victim = running_.back();
            running_.pop_back();
            kv_.finish(victim.req.id);
            victim.written = 0;
            victim.preemptions++;
            p.preempted.push_back(victim.req.id);
            // Planned items of the victim are dropped from this pass (its rows would go nowhere).
            for (size_t i = 0; i < p.items.size(); i++)
                if (p.items[i].seq == victim.req.id) p.items.erase(p.items.begin() + i), i--;
            waiting_.push_front(victim);
            if (victim.req.id == id) return false;
        }
        return true;
    }
};

}  // namespace monocu
