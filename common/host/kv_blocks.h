// host/kv_blocks.h — the paged KV cache's bookkeeping (host only): a pool of fixed-size blocks, a block table per
// sequence, and the prefix cache that lets a new sequence start from blocks another one already filled.
//
// Usage (the batched core's scheduler drives it; the GPU side only sees each sequence's block table):
//   KvBlockManager m(n_blocks, block_size);
//   int reused = m.start(seq, prompt);          // tokens whose KV rows already sit in cached blocks (whole blocks,
//                                               // and never the prompt's last token: its logits are needed)
//   if (!m.reserve(seq, n)) ...                 // room for n more tokens, or false: the pool is out (preempt someone)
//   m.commit(seq, tokens, n);                   // their rows are written: full blocks become shareable
//   m.table(seq)                                // block ids, one per block_size positions (-1: released, below)
//   m.release_before(seq, pos);                 // a sliding window no longer needs blocks wholly before pos
//   m.finish(seq);                              // its blocks go back (full ones stay cached until evicted)
//
// Blocks. Each has a reference count (the sequences whose tables hold it). A block with no reference is free: either
// clean, or cached (it holds a full block of some token prefix and can be reused as is until it is evicted, least
// recently used first, when a clean one is wanted and none is left).
//
// Prefix cache. A full block is keyed by a hash of every token from position 0 through its last one (the previous
// block's key and its own tokens), so equal keys mean equal prefixes. The key's tokens and parent key are kept and
// compared on a hit, so a hash collision is a miss, never someone else's rows. Only full blocks are shared, and they
// are never written again: a sequence appends into blocks of its own.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "host/errors.h"

namespace monocu {

class KvBlockManager {
public:
    KvBlockManager(int n_blocks, int block_size) : bs_(block_size), blocks_(n_blocks) {
        if (n_blocks < 1 || block_size < 1) die("kv blocks: %d blocks of %d tokens", n_blocks, block_size);
        for (Block& b : blocks_) b.lru = lru_.end();  // (a list's end stays valid as it changes)
        for (int b = n_blocks - 1; b >= 0; b--) clean_.push_back(b);
    }

    int block_size() const { return bs_; }
    // Off: nothing is shared (a model whose sequences keep a running state besides their KV rows, which a cached
    // prefix cannot restore): start() reuses no block and commit() publishes none.
    bool share = true;
    int n_blocks() const { return (int)blocks_.size(); }
    int free_blocks() const { return (int)clean_.size() + (int)lru_.size(); }  // clean or evictable
    long hits = 0, misses = 0;                                                  // prefix-cache lookups, in blocks

    // A new sequence: takes the longest run of cached full blocks that equals the prompt's start, at most up to the
    // block before the one holding the prompt's last token. Returns the tokens it covers (a multiple of block_size).
    int start(int seq, const std::vector<int>& prompt) {
        if (seqs_.count(seq)) die("kv blocks: sequence %d started twice", seq);
        Seq& s = seqs_[seq];
        uint64_t key = kRootKey;
        int reusable = prompt.empty() || !share ? 0 : (int)(prompt.size() - 1) / bs_;
        for (int i = 0; i < reusable; i++) {
            const int* t = prompt.data() + (size_t)i * bs_;
            uint64_t k = chain(key, t);
            int b = find(k, key, t);
            if (b < 0) {
                misses += reusable - i;
                break;
            }
            hits++;
            take(b);
            s.table.push_back(b);
            s.tokens.insert(s.tokens.end(), t, t + bs_);
            key = k;
        }
        s.key = key;
        return (int)s.tokens.size();
    }

    // Room for n more tokens: blocks for positions up to tokens + n - 1. All or nothing: false (and nothing taken)
    // when the pool cannot supply them.
    bool reserve(int seq, int n) {
        Seq& s = get(seq);
        int need = blocks_for((int)s.tokens.size() + n) - (int)s.table.size();
        if (need > free_blocks()) return false;
        for (int i = 0; i < need; i++) s.table.push_back(alloc());
        return true;
    }

    // n tokens whose KV rows the last pass wrote at the sequence's next positions (reserved before). Each block they
    // fill is published to the prefix cache (unless an equal block is cached already: then it stays private).
    void commit(int seq, const int* tokens, int n) {
        Seq& s = get(seq);
        if (blocks_for((int)s.tokens.size() + n) > (int)s.table.size()) die("kv blocks: sequence %d committed past its reservation", seq);
        for (int i = 0; i < n; i++) {
            s.tokens.push_back(tokens[i]);
            if (s.tokens.size() % bs_ != 0) continue;
            int blk = (int)s.tokens.size() / bs_ - 1;
            const int* t = s.tokens.data() + (size_t)blk * bs_;
            uint64_t k = chain(s.key, t);
            int b = s.table[blk];
            if (b >= 0 && share && !by_key_.count(k)) publish(b, k, s.key, t);
            s.key = k;
        }
    }

    // A sliding window needs no block wholly before position pos: those leave the table (as -1) and are released.
    void release_before(int seq, int pos) {
        Seq& s = get(seq);
        for (int i = 0; i < (int)s.table.size() && (i + 1) * bs_ <= pos; i++)
            if (s.table[i] >= 0) release(s.table[i]), s.table[i] = -1;
    }

    // The sequence is done (or preempted: the caller restarts it later, from the prefix cache where it can).
    void finish(int seq) {
        Seq& s = get(seq);
        for (int b : s.table)
            if (b >= 0) release(b);
        seqs_.erase(seq);
    }

    const std::vector<int>& table(int seq) const { return get(seq).table; }
    int tokens(int seq) const { return (int)get(seq).tokens.size(); }
    bool has(int seq) const { return seqs_.count(seq) != 0; }

    // Every invariant, for the tests: reference counts equal the tables' holdings, each block is in exactly one of
    // {held, clean, cached-free}, and the prefix map points at blocks that hold their keys.
    void check() const {
        std::vector<int> held(blocks_.size(), 0);
        for (const auto& kv : seqs_)
            for (int b : kv.second.table)
                if (b >= 0) held[b]++;
        std::vector<int> where(blocks_.size(), 0);
        for (int b : clean_) where[b]++;
        for (int b : lru_) where[b]++;
        for (size_t b = 0; b < blocks_.size(); b++) {
            const Block& k = blocks_[b];
            if (k.ref != held[b]) die("kv blocks: block %zu has %d references, %d tables hold it", b, k.ref, held[b]);
            if ((k.ref > 0) + where[b] != 1) die("kv blocks: block %zu is held %d times and free-listed %d times", b, k.ref, where[b]);
            if (k.ref == 0 && k.cached != (k.lru != lru_.end())) die("kv blocks: free block %zu is cached but not evictable", b);
            if (k.ref > 0 && k.lru != lru_.end()) die("kv blocks: held block %zu is on the eviction list", b);
            if (k.cached && (by_key_.count(k.key) == 0 || by_key_.at(k.key) != (int)b)) die("kv blocks: cached block %zu not in the map", b);
        }
        for (const auto& kv : by_key_)
            if (!blocks_[kv.second].cached || blocks_[kv.second].key != kv.first) die("kv blocks: the map points at block %d wrongly", kv.second);
    }

private:
    static constexpr uint64_t kRootKey = 0x9E3779B97F4A7C15ull;
    struct Block {
        int ref = 0;
        bool cached = false;         // holds a published full block (key, parent, tokens valid)
        uint64_t key = 0, parent = 0;
        std::vector<int> tokens;     // its block_size tokens, compared on a hit
        std::list<int>::iterator lru;
    };
    struct Seq {
        std::vector<int> table;      // block per block_size positions
        std::vector<int> tokens;     // tokens whose rows are written
        uint64_t key = kRootKey;     // key of the last full block (or the root)
    };

    int bs_;
    std::vector<Block> blocks_;
    std::vector<int> clean_;                    // free, holding nothing reusable (a stack)
    std::list<int> lru_;                        // free but cached: least recently used first
    std::unordered_map<uint64_t, int> by_key_;  // prefix key -> cached block
    std::unordered_map<int, Seq> seqs_;

    int blocks_for(int n_tokens) const { return (n_tokens + bs_ - 1) / bs_; }
    Seq& get(int seq) {
        auto it = seqs_.find(seq);
        if (it == seqs_.end()) die("kv blocks: no sequence %d", seq);
        return it->second;
    }
    const Seq& get(int seq) const { return const_cast<KvBlockManager*>(this)->get(seq); }

    // The key of a block: the previous key and the block's tokens (splitmix64 steps).
    uint64_t chain(uint64_t prev, const int* t) const {
        uint64_t h = prev;
        for (int i = 0; i < bs_; i++) {
            h += 0x9E3779B97F4A7C15ull + (uint32_t)t[i];
            h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
            h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
            h ^= h >> 31;
        }
        return h;
    }
    int find(uint64_t key, uint64_t parent, const int* t) const {
        auto it = by_key_.find(key);
        if (it == by_key_.end()) return -1;
        const Block& b = blocks_[it->second];
        if (b.parent != parent) return -1;
        for (int i = 0; i < bs_; i++)
            if (b.tokens[i] != t[i]) return -1;
        return it->second;
    }
    void take(int b) {  // one more reference (a cached block leaves the evictable list)
        Block& k = blocks_[b];
        if (k.ref++ == 0 && k.lru != lru_.end()) lru_.erase(k.lru), k.lru = lru_.end();
    }
    int alloc() {  // a block for new rows: clean first, else the least recently used cached one (forgetting it)
        int b;
        if (!clean_.empty()) {
            b = clean_.back();
            clean_.pop_back();
        } else {
            b = lru_.front();
            lru_.pop_front();
            Block& k = blocks_[b];
            by_key_.erase(k.key);
            k.cached = false, k.tokens.clear();
        }
        blocks_[b].lru = lru_.end();
        blocks_[b].ref = 1;
        return b;
    }
    void release(int b) {
        Block& k = blocks_[b];
        if (k.ref <= 0) die("kv blocks: block %d released more often than taken", b);
        if (--k.ref > 0) return;
        if (k.cached) k.lru = lru_.insert(lru_.end(), b);  // most recently used last
        else clean_.push_back(b);
    }
    void publish(int b, uint64_t key, uint64_t parent, const int* t) {
        Block& k = blocks_[b];
        k.cached = true, k.key = key, k.parent = parent, k.tokens.assign(t, t + bs_);
        by_key_[key] = b;
    }
};

}  // namespace monocu
