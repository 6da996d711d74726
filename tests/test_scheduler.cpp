// Continuous batching (host/scheduler.h) over the paged KV bookkeeping, with a stand-in model whose next token is a
// function of the sequence so far: every request must get exactly the tokens it would get alone, whatever the
// batching, chunking, prefix sharing and preemption did to it.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "host/scheduler.h"

using namespace monocu;

// The stand-in model: the token after `seq` (all of it) for request `id`.
static int next_token(const std::vector<int>& seq) {
    uint64_t h = 1469598103934665603ull;
    for (int t : seq) h = (h ^ (uint32_t)t) * 1099511628211ull;
    return (int)(h % 5000);
}

static std::vector<int> alone(const SchedRequest& r) {
    std::vector<int> all = r.prompt, out;
    while ((int)out.size() < r.max_tokens) {
        int t = next_token(all);
        out.push_back(t), all.push_back(t);
        if (std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end()) break;
    }
    return out;
}

// Runs the scheduler to the end; checks each plan against the rules and returns every request's output.
static std::map<int, Finished> run(Scheduler& s, KvBlockManager& kv, int budget, int max_seqs, const std::map<int, SchedRequest>& reqs,
                                   long* preemptions = nullptr, int* steps = nullptr, int window = 0) {
    std::map<int, std::vector<int>> all;  // what each sequence holds so far, as the scheduler's items show it
    for (const auto& kv_ : reqs) all[kv_.first] = kv_.second.prompt;
    std::map<int, Finished> out;
    int n = 0;
    while (!s.idle()) {
        StepPlan p = s.plan();
        REQUIRE(++n < 100000);
        CHECK(p.tokens <= budget);
        CHECK(s.running() <= max_seqs);
        std::set<int> seen;
        bool prefill_seen = false;
        std::vector<int> sampled;
        for (const StepItem& it : p.items) {
            CHECK(seen.insert(it.seq).second);  // a sequence once per pass
            CHECK(it.n >= 1);
            const bool decode = it.n == 1 && it.logits && it.from >= (int)reqs.at(it.seq).prompt.size();
            if (!decode) prefill_seen = true;
            else CHECK_FALSE(prefill_seen);  // decode steps come first... unless preemption reordered: not here
            // The block table covers the item's positions.
            CHECK((int)kv.table(it.seq).size() * kv.block_size() >= it.from + it.n);
            // With a window, every block the item's queries read (from window positions back) is still held.
            if (window > 0)
                for (int b = std::max(0, it.from - window) / kv.block_size(); b * kv.block_size() < it.from + it.n; b++) CHECK(kv.table(it.seq)[b] >= 0);
            std::vector<int> upto(all[it.seq].begin(), all[it.seq].begin() + it.from + it.n);
            sampled.push_back(it.logits ? next_token(upto) : -1);
        }
        if (preemptions) *preemptions += (long)p.preempted.size();
        for (const Finished& f : s.complete(p, sampled)) out[f.id] = f;
        for (size_t i = 0; i < p.items.size(); i++)
            if (p.items[i].logits && !out.count(p.items[i].seq)) all[p.items[i].seq].push_back(sampled[i]);
        kv.check();
    }
    if (steps) *steps = n;
    return out;
}

TEST_CASE("scheduler: every request gets its solo tokens; budget, max_seqs and decode-first hold each step") {
    std::mt19937 g(3);
    KvBlockManager kv(512, 16);
    const int budget = 64, max_seqs = 6;
    Scheduler s(kv, budget, max_seqs);
    std::map<int, SchedRequest> reqs;
    std::vector<int> system(40);
    for (int& t : system) t = (int)(g() % 5000);
    for (int id = 0; id < 30; id++) {
        SchedRequest r;
        r.id = id;
        if (id % 2) r.prompt = system;  // a shared system prompt: prefix hits
        for (int i = 0, n = 1 + (int)(g() % 150); i < n; i++) r.prompt.push_back((int)(g() % 5000));
        r.max_tokens = 1 + (int)(g() % 40);
        if (id % 5 == 0) r.stop_ids = {next_token(r.prompt)};  // stops at its first token
        reqs[id] = r;
        s.add(r);
    }
    int steps = 0;
    auto out = run(s, kv, budget, max_seqs, reqs, nullptr, &steps);
    REQUIRE(out.size() == reqs.size());
    for (const auto& kv_ : reqs) {
        CAPTURE(kv_.first);
        CHECK(out[kv_.first].tokens == alone(kv_.second));
    }
    CHECK(out[0].tokens.size() == 1);  // the stop id ended it
    CHECK(kv.free_blocks() == kv.n_blocks());
    CHECK(kv.hits > 0);
    MESSAGE("30 requests in ", steps, " steps; prefix cache ", kv.hits, " hits");
}

TEST_CASE("scheduler: a prompt longer than the budget runs in chunks; only the last chunk asks for logits") {
    KvBlockManager kv(64, 16);
    Scheduler s(kv, 100, 4);
    SchedRequest r;
    r.id = 7, r.max_tokens = 3;
    for (int i = 0; i < 250; i++) r.prompt.push_back(i);
    s.add(r);
    std::vector<StepItem> seen;
    std::vector<int> all = r.prompt, out;
    while (!s.idle()) {
        StepPlan p = s.plan();
        REQUIRE(p.items.size() == 1);
        seen.push_back(p.items[0]);
        std::vector<int> upto(all.begin(), all.begin() + p.items[0].from + p.items[0].n);
        int t = p.items[0].logits ? next_token(upto) : -1;
        if (p.items[0].logits) all.push_back(t);
        s.complete(p, {t});
    }
    REQUIRE(seen.size() == 3 + 2);  // 100 + 100 + 50, then two decode steps
    CHECK(seen[0].from == 0);
    CHECK(seen[0].n == 100);
    CHECK_FALSE(seen[0].logits);
    CHECK(seen[1].from == 100);
    CHECK(seen[2].from == 200);
    CHECK(seen[2].n == 50);
    CHECK(seen[2].logits);
    CHECK(seen[3].from == 250);
    CHECK(seen[3].n == 1);
    CHECK(seen[4].from == 251);
}

TEST_CASE("scheduler: a pool too small for everyone preempts the newest; all finish with their solo tokens, no block leaks") {
    std::mt19937 g(9);
    for (int pool : {12, 20, 40}) {
        CAPTURE(pool);
        KvBlockManager kv(pool, 8);
        Scheduler s(kv, 48, 8);
        std::map<int, SchedRequest> reqs;
        for (int id = 0; id < 40; id++) {
            SchedRequest r;
            r.id = id;
            for (int i = 0, n = 1 + (int)(g() % 40); i < n; i++) r.prompt.push_back((int)(g() % 5000));
            r.max_tokens = 1 + (int)(g() % 40);
            reqs[id] = r;
            s.add(r);
        }
        long preemptions = 0;
        auto out = run(s, kv, 48, 8, reqs, &preemptions);
        REQUIRE(out.size() == reqs.size());
        for (const auto& kv_ : reqs) CHECK(out[kv_.first].tokens == alone(kv_.second));
        CHECK(kv.free_blocks() == pool);
        MESSAGE("pool of ", pool, " blocks: ", preemptions, " preemptions");
        if (pool == 12) CHECK(preemptions > 0);
    }
}

// Sliding windows: blocks behind every layer's window are released after each pass, so sequences far longer than
// the pool run side by side without preemption, each with its solo tokens; the blocks a query reads stay held (run()
// checks), and at the end nothing leaks.
TEST_CASE("scheduler: a sliding window releases the blocks behind it; long sequences fit a small pool") {
    std::mt19937 g(5);
    const int window = 20, bs = 8, pool = 24, budget = 32, max_seqs = 3;
    KvBlockManager kv(pool, bs);
    Scheduler s(kv, budget, max_seqs, window);
    std::map<int, SchedRequest> reqs;
    for (int id = 0; id < 10; id++) {
        SchedRequest r;
        r.id = id;
        for (int i = 0, n = 1 + (int)(g() % 70); i < n; i++) r.prompt.push_back((int)(g() % 5000));
        r.max_tokens = 200 + (int)(g() % 100);  // 26-47 blocks a sequence without the release; the pool has 24
        reqs[id] = r;
        s.add(r);
    }
    long preemptions = 0;
    auto out = run(s, kv, budget, max_seqs, reqs, &preemptions, nullptr, window);
    REQUIRE(out.size() == reqs.size());
    for (const auto& kv_ : reqs) CHECK(out[kv_.first].tokens == alone(kv_.second));
    CHECK(kv.free_blocks() == pool);
    // A sequence holds at most the blocks spanning its window and a chunk, (20 + 32) / 8 + 1 = 7; three fit 24.
    CHECK(preemptions == 0);
    // Without the window the pool cannot hold any of them whole: refused when added.
    KvBlockManager kv2(pool, bs);
    Scheduler s2(kv2, budget, max_seqs);
    for (const auto& kv_ : reqs) CHECK_THROWS_AS(s2.add(kv_.second), UserError);
}

TEST_CASE("scheduler: requests it can never serve are refused when added") {
    KvBlockManager kv(4, 8);
    Scheduler s(kv, 64, 4);
    CHECK_THROWS_AS(s.add(SchedRequest{1, {}, 4, {}}), UserError);
    CHECK_THROWS_AS(s.add(SchedRequest{2, {1, 2}, 0, {}}), UserError);
    CHECK_THROWS_AS(s.add(SchedRequest{3, std::vector<int>(30, 1), 3, {}}), UserError);  // 33 tokens > 4 blocks of 8
    s.add(SchedRequest{4, std::vector<int>(29, 1), 3, {}});                               // 32 fits
    CHECK(s.waiting() == 1);
    CHECK_THROWS_AS(Scheduler(kv, 0, 1), UserError);
}

TEST_CASE("scheduler: cancelling waiting and running requests between steps leaks no block and leaves the others their solo tokens") {
    std::mt19937 g(21);
    for (int pool : {14, 60}) {
        CAPTURE(pool);
        KvBlockManager kv(pool, 8);
        Scheduler s(kv, 40, 6);
        std::map<int, SchedRequest> reqs;
        std::vector<int> shared(24);
        for (int& t : shared) t = (int)(g() % 5000);
        for (int id = 0; id < 60; id++) {
            SchedRequest r;
            r.id = id;
            if (id % 2) r.prompt = shared;  // prefix hits on blocks a cancelled sequence published
            for (int i = 0, n = 1 + (int)(g() % 30); i < n; i++) r.prompt.push_back((int)(g() % 5000));
            r.max_tokens = 1 + (int)(g() % 30);
            reqs[id] = r;
            s.add(r);
        }
        std::map<int, std::vector<int>> all;
        for (const auto& kv_ : reqs) all[kv_.first] = kv_.second.prompt;
        std::map<int, Finished> out;
        std::set<int> cancelled;
        int steps = 0;
        while (!s.idle()) {
            REQUIRE(++steps < 100000);
            StepPlan p = s.plan();
            std::vector<int> sampled;
            for (const StepItem& it : p.items) {
                std::vector<int> upto(all[it.seq].begin(), all[it.seq].begin() + it.from + it.n);
                sampled.push_back(it.logits ? next_token(upto) : -1);
            }
            for (const Finished& f : s.complete(p, sampled)) out[f.id] = f;
            for (size_t i = 0; i < p.items.size(); i++)
                if (p.items[i].logits && !out.count(p.items[i].seq)) all[p.items[i].seq].push_back(sampled[i]);
            // Cancel a random request now and then: running, waiting, or already finished (false).
            if (g() % 3 == 0) {
                int id = (int)(g() % 60);
                bool live = !out.count(id) && !cancelled.count(id);
                CHECK(s.cancel(id) == live);
                if (live) cancelled.insert(id);
                CHECK_FALSE(s.cancel(id));
            }
            kv.check();
        }
        CHECK(cancelled.size() > 5);
        CHECK(out.size() + cancelled.size() == reqs.size());
        for (const auto& f : out) CHECK(f.second.tokens == alone(reqs.at(f.first)));
        CHECK(kv.free_blocks() == pool);
    }
}
