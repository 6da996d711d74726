// The paged KV cache's bookkeeping (host/kv_blocks.h): allocation, sharing through the prefix cache, eviction,
// windows, preemption, and a randomized soak that checks every invariant and what shared blocks hold.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "host/kv_blocks.h"

using namespace monocu;

static std::vector<int> seq_of(int n, int base) {
    std::vector<int> v(n);
    for (int i = 0; i < n; i++) v[i] = base + i;
    return v;
}

TEST_CASE("kv blocks: a sequence takes blocks as it grows; full blocks stay cached after it ends") {
    KvBlockManager m(8, 4);
    std::vector<int> p = seq_of(10, 100);
    CHECK(m.start(1, p) == 0);
    CHECK(m.misses == 2);  // two full blocks could have been reused (the third holds the last token)
    REQUIRE(m.reserve(1, 10));
    CHECK(m.table(1).size() == 3);
    CHECK(m.free_blocks() == 5);
    m.commit(1, p.data(), 10);
    REQUIRE(m.reserve(1, 1));  // the 11th token still fits the third block
    CHECK(m.table(1).size() == 3);
    int t = 110;
    m.commit(1, &t, 1);
    REQUIRE(m.reserve(1, 2));  // the 12th and 13th: a fourth block
    CHECK(m.table(1).size() == 4);
    CHECK_THROWS_AS(m.commit(1, seq_of(6, 0).data(), 6), UserError);  // past the reservation
    m.check();
    m.finish(1);
    CHECK(m.free_blocks() == 8);
    m.check();
    CHECK_THROWS_AS(m.finish(1), UserError);
    CHECK_THROWS_AS(m.reserve(9, 1), UserError);
}

TEST_CASE("kv blocks: a new sequence shares the longest cached prefix, whole blocks only, never its last token") {
    KvBlockManager m(16, 4);
    std::vector<int> a = seq_of(12, 0);
    m.start(1, a);
    REQUIRE(m.reserve(1, 12));
    m.commit(1, a.data(), 12);  // three full blocks, published
    std::vector<int> b = a;
    b.resize(10);
    b.push_back(7), b.push_back(8);  // the first 10 tokens agree: two whole blocks
    m.hits = m.misses = 0;
    CHECK(m.start(2, b) == 8);
    CHECK(m.hits == 2);
    CHECK(m.table(2)[0] == m.table(1)[0]);
    CHECK(m.table(2)[1] == m.table(1)[1]);
    // The whole of a's 12 tokens: the last block is not taken (its last token's logits must be computed).
    CHECK(m.start(3, a) == 8);
    // A different first block: nothing.
    std::vector<int> c = a;
    c[1] = -5;
    CHECK(m.start(4, c) == 0);
    // A sequence that started from shared blocks appends into its own.
    REQUIRE(m.reserve(2, 4));
    CHECK(m.table(2).size() == 3);
    CHECK(m.table(2)[2] != m.table(1)[2]);
    m.commit(2, b.data() + 8, 4);
    m.check();
    // Ending the first sequence keeps the shared blocks held by the second.
    m.finish(1);
    m.check();
    for (int s : {2, 3, 4}) m.finish(s);
    m.check();
    CHECK(m.free_blocks() == 16);
}

TEST_CASE("kv blocks: with sharing off (a model with a running state) nothing is published or reused") {
    KvBlockManager m(16, 4);
    m.share = false;
    std::vector<int> a = seq_of(12, 0);
    m.start(1, a);
    REQUIRE(m.reserve(1, 12));
    m.commit(1, a.data(), 12);
    m.finish(1);
    m.check();
    m.hits = m.misses = 0;
    CHECK(m.start(2, a) == 0);  // the same prompt again: computed from its start
    CHECK(m.hits == 0);
    REQUIRE(m.reserve(2, 12));
    m.commit(2, a.data(), 12);
    std::vector<int> t = m.table(2);
    m.finish(2);
    m.check();
    CHECK(m.free_blocks() == 16);
    m.share = true;  // and the blocks it left are clean, not cached: a sharing start finds nothing either
    CHECK(m.start(3, a) == 0);
    m.finish(3);
}

TEST_CASE("kv blocks: eviction takes the least recently used cached block; reserve is all or nothing") {
    KvBlockManager m(4, 2);
    std::vector<int> a = seq_of(8, 0);
    m.start(1, a);
    REQUIRE(m.reserve(1, 8));
    CHECK_FALSE(m.reserve(1, 9));  // a fifth block: the pool is out, nothing taken
    CHECK(m.table(1).size() == 4);
    m.commit(1, a.data(), 8);
    m.finish(1);  // four cached blocks, oldest first: a's blocks in order
    // Touch a's first block (a hit refreshes it), then end that sequence: it becomes the most recently used.
    CHECK(m.start(2, {0, 1, 99}) == 2);
    m.finish(2);
    // A different sequence needs two blocks: the two least recently used go, a's blocks 1 and 2.
    std::vector<int> b = seq_of(4, 50);
    m.start(3, b);
    REQUIRE(m.reserve(3, 4));
    m.commit(3, b.data(), 4);
    m.finish(3);
    m.check();
    CHECK(m.start(4, {0, 1, 2, 3, 4, 5, 6}) == 2);  // a's first block is still there, its second is gone
    m.finish(4);
    CHECK(m.start(5, {50, 51, 52, 53, 0}) == 4);    // b's two blocks were published
    m.finish(5);
    m.check();
}

TEST_CASE("kv blocks: a sliding window releases the blocks wholly before it") {
    KvBlockManager m(8, 4);
    std::vector<int> a = seq_of(14, 0);
    m.start(1, a);
    REQUIRE(m.reserve(1, 14));
    m.commit(1, a.data(), 14);
    m.release_before(1, 9);  // positions 0..8 not needed: blocks 0 and 1 (0..7) go, block 2 (8..11) stays
    CHECK(m.table(1)[0] == -1);
    CHECK(m.table(1)[1] == -1);
    CHECK(m.table(1)[2] >= 0);
    CHECK(m.free_blocks() == 8 - 2);
    m.check();
    m.release_before(1, 9);  // idempotent
    m.check();
    m.finish(1);
    CHECK(m.free_blocks() == 8);
    m.check();
}

TEST_CASE("kv blocks: randomized soak: starts, growth, preemption and ends; no leak, shared blocks hold their prefix") {
    std::mt19937 g(11);
    const int bs = 4, n_blocks = 40;
    KvBlockManager m(n_blocks, bs);
    std::vector<std::vector<int>> rows(n_blocks, std::vector<int>(bs, -1));  // what each block "holds" on the GPU
    std::vector<std::vector<int>> prefixes;                                    // shared starts (system prompts)
    for (int i = 0; i < 5; i++) prefixes.push_back(seq_of(4 + (int)(g() % 20), 1000 * i));
    struct Live {
        std::vector<int> all;  // prompt then generated tokens
        int written = 0;       // tokens whose rows are written
    };
    std::map<int, Live> live;
    int next_id = 0;
    long preempted = 0, finished = 0, reused_tokens = 0;
    auto write = [&](int id, Live& s, int n) {  // a forward pass: rows for tokens written .. written + n - 1
        for (int i = 0; i < n; i++) {
            int pos = s.written + i, b = m.table(id)[pos / bs];
            REQUIRE(b >= 0);
            rows[b][pos % bs] = s.all[pos];
        }
        m.commit(id, s.all.data() + s.written, n);
        s.written += n;
    };
    auto start = [&](int id, Live& s) {
        int reused = m.start(id, s.all);
        for (int pos = 0; pos < reused; pos++) REQUIRE(rows[m.table(id)[pos / bs]][pos % bs] == s.all[pos]);  // the shared rows
        reused_tokens += reused;
        s.written = reused;
    };
    for (int step = 0; step < 4000; step++) {
        int op = (int)(g() % 10);
        if (op < 3 && live.size() < 12) {  // a new sequence: a shared prefix (or none) and its own tokens
            Live s;
            if (g() % 4) s.all = prefixes[g() % prefixes.size()];
            std::vector<int> own = seq_of(1 + (int)(g() % 10), (int)(g() % 1000000));
            s.all.insert(s.all.end(), own.begin(), own.end());
            int id = next_id++;
            start(id, s);
            live[id] = s;
        } else if (op < 8 && !live.empty()) {  // a pass for one sequence: its prompt's rest, or one generated token
            auto it = live.begin();
            std::advance(it, g() % live.size());
            Live& s = it->second;
            if (s.written == (int)s.all.size()) s.all.push_back((int)(g() % 1000000));
            int n = (int)s.all.size() - s.written;
            if (!m.reserve(it->first, n)) {  // out of blocks: preempt the newest other sequence, or this one
                int victim = live.rbegin()->first;
                m.finish(victim);
                preempted++;
                if (victim == it->first) {
                    Live again = s;  // restarted later from what the prefix cache still holds
                    live.erase(it);
                    int id = next_id++;
                    start(id, again);
                    live[id] = again;
                    m.check();
                    continue;
                }
                live.erase(victim);
                if (!m.reserve(it->first, n)) {
                    m.check();
                    continue;
                }
            }
            write(it->first, s, n);
        } else if (!live.empty()) {  // one ends
            auto it = live.begin();
            std::advance(it, g() % live.size());
            m.finish(it->first);
            live.erase(it);
            finished++;
        }
        m.check();
    }
    for (auto& kv : live) m.finish(kv.first);
    m.check();
    CHECK(m.free_blocks() == n_blocks);
    MESSAGE("soak: ", next_id, " sequences, ", finished, " finished, ", preempted, " preempted, ", reused_tokens,
            " prompt tokens reused; prefix cache ", m.hits, " hits, ", m.misses, " misses");
    CHECK(preempted > 0);
    CHECK(m.hits > 100);
}
