// tokenizer/tokenizer.h — Hugging Face tokenizer.json (BPE) read and applied exactly as HF `tokenizers` does.
//
// Usage:
//   Tokenizer tok = Tokenizer::load("models/qwen3");         // tokenizer.json + tokenizer_config.json
//   std::vector<int> ids = tok.encode("<|im_start|>user\nhi");  // added/special tokens in the text recognised,
//                                                              // no BOS (HF encode(text, add_special_tokens=False))
//   std::vector<int> safe = tok.encode_plain(user_text);       // no added token recognised: the text is text
//   std::string text = tok.decode(ids);                         // HF decode(ids, skip_special_tokens=False)
//   StreamDecoder sd(tok); for (int id : generated) fputs(sd.push(id).c_str(), stdout); fputs(sd.flush().c_str(), stdout);
//   tok.bos_id(), tok.add_bos(), tok.eos_ids(), tok.vocab_size(), tok.token_text(id)
//
// What it reads (anything else is rejected by die() with the file and the unsupported part named):
//   model          BPE only: vocab, merges as "a b" or ["a","b"], ignore_merges, byte_fallback,
//                  unk_token + fuse_unk, continuing_subword_prefix / end_of_word_suffix. (WordPiece,
//                  Unigram, WordLevel: rejected.)
//   normalizer     null, Sequence, NFC, NFD, Replace (String or Regex pattern), Prepend.
//   pre_tokenizer  null, Sequence, Split (String or Regex pattern, all five behaviors, invert),
//                  ByteLevel (add_prefix_space, use_regex with GPT-2's pattern), Digits (individual_digits),
//                  Metaspace (replacement, prepend_scheme always / first / never, split; the older
//                  add_prefix_space form as HF reads it). "first" prefixes only the piece that starts
//                  at the text's offset 0, so not the text after a leading special token.
//   decoder        null, Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip.
//   (WordPiece, Unigram, BertPreTokenizer, Precompiled...: rejected by name, not guessed at.)
//   So SentencePiece-style BPE in both forms transformers writes: Prepend("▁") + Replace(" ", "▁")
//   normalizers (legacy, Llama 2, Mistral v0.1) or a Metaspace pre-tokenizer (Mistral v0.3,
//   legacy=false), with byte fallback <0xNN>. tokenizer_config.json's "legacy" is not read: HF
//   `tokenizers` (the reference) encodes what tokenizer.json says.
//   post_processor not applied (encode adds no BOS/EOS); the token a TemplateProcessing puts first
//                  tells add_bos() (and bos_id() when the config names no bos_token).
//   added_tokens   matched before the model, leftmost-longest, with lstrip / rstrip / single_word /
//                  normalized, exactly in HF's order: non-normalized ones in the raw text, then the
//                  normalizer, then the normalized ones.
//   tokenizer_config.json: bos_token, eos_token, add_bos_token (over the post-processor), chat_template
//                  (or chat_template.jinja); generation_config.json and config.json (if present): eos_token_id.
//
// Regex: Split patterns run on a small backtracking engine (leftmost-first, greedy, like Oniguruma,
// which HF uses) that knows what real checkpoints use: classes with \p{..}, \s \d \w, ranges, negation,
// ?, *, +, {m,n}, (?:..), (?i:..), (?!..), (?=..). Anything else in a pattern is rejected by name.
// Invalid UTF-8 input never crashes: each maximal invalid subsequence becomes U+FFFD first (what a
// client decoding bytes to text would send to HF). Unicode data: unicode_tables.h (version stated there).
// Thread safety: a loaded Tokenizer is immutable; encode/decode may run from many threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/errors.h"
#include "host/files.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace monocu {

// =====================================================================================================
// ---- Hash tables for the vocabulary (string -> id) and the merges ((id, id) -> rank, id) ----
// =====================================================================================================

inline uint64_t tok_hash_bytes(const char* s, size_t n) {  // FNV-1a, then a final mix
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= static_cast<unsigned char>(s[i]); h *= 1099511628211ull; }
    return h ^ (h >> 29);
}

// Open addressing over ids; the strings live in the owner's id -> text table.
struct TokenIndex {
    std::vector<int32_t> slots;  // -1 empty
    uint64_t mask = 0;

    void reserve(size_t n) {
        size_t cap = 16;
        while (cap < n * 2) cap <<= 1;
        slots.assign(cap, -1);
        mask = cap - 1;
    }
    int find(const std::vector<std::string>& texts, const char* s, size_t n) const {
        if (slots.empty()) return -1;
        for (uint64_t h = tok_hash_bytes(s, n) & mask;; h = (h + 1) & mask) {
            int32_t id = slots[h];
            if (id < 0) return -1;
            const std::string& t = texts[size_t(id)];
            if (t.size() == n && std::memcmp(t.data(), s, n) == 0) return id;
        }
    }
    // Returns the id already holding this text, or inserts `id` and returns it.
    int insert(const std::vector<std::string>& texts, int id) {
        const std::string& s = texts[size_t(id)];
        for (uint64_t h = tok_hash_bytes(s.data(), s.size()) & mask;; h = (h + 1) & mask) {
            int32_t cur = slots[h];
            if (cur < 0) { slots[h] = id; return id; }
            if (texts[size_t(cur)] == s) return cur;
        }
    }
};

struct MergeTable {
    struct Slot { uint64_t key; int32_t rank, id; };
    std::vector<Slot> slots;
    uint64_t mask = 0;
    static constexpr uint64_t EMPTY = ~uint64_t(0);

    static uint64_t key(int a, int b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
    static uint64_t mix(uint64_t k) { k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; return k; }
    void reserve(size_t n) {
        size_t cap = 16;
        while (cap < n * 2) cap <<= 1;
        slots.assign(cap, Slot{EMPTY, 0, 0});
        mask = cap - 1;
    }
    void put(int a, int b, int rank, int id) {  // a later duplicate overwrites, as HF's map does
        uint64_t k = key(a, b);
        for (uint64_t h = mix(k) & mask;; h = (h + 1) & mask) {
            if (slots[h].key == EMPTY || slots[h].key == k) { slots[h] = {k, rank, id}; return; }
        }
    }
    const Slot* get(int a, int b) const {
        if (slots.empty()) return nullptr;
        uint64_t k = key(a, b);
        for (uint64_t h = mix(k) & mask;; h = (h + 1) & mask) {
            if (slots[h].key == k) return &slots[h];
            if (slots[h].key == EMPTY) return nullptr;
        }
    }
};

// =====================================================================================================
// ---- GPT-2 byte-level alphabet: every byte maps to a printable code point ----
// =====================================================================================================

struct ByteLevelAlphabet {
    uint32_t byte_to_cp[256];
    std::string byte_to_utf8[256];
    std::unordered_map<uint32_t, uint8_t> cp_to_byte;
    ByteLevelAlphabet() {
        uint32_t next = 256;
        for (int b = 0; b < 256; b++) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            byte_to_cp[b] = printable ? uint32_t(b) : next++;
            utf8_append(byte_to_utf8[b], byte_to_cp[b]);
            cp_to_byte[byte_to_cp[b]] = uint8_t(b);
        }
    }
};
inline const ByteLevelAlphabet& byte_level_alphabet() {
    static const ByteLevelAlphabet a;
    return a;
}

// GPT-2's split pattern, used by ByteLevel with use_regex=true.
static const char* const GPT2_SPLIT_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// =====================================================================================================
// ---- The tokenizer ----
// =====================================================================================================

struct AddedToken {
    int id = -1;
    std::string content;
    bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
    bool layout = false;  // only whitespace or U+2581 (Gemma's "\n\n", "\t\t"): still a token inside plain ranges
    // What decode feeds the decoder for it: the content, or for a normalized token the content after the
    // normalizer (HF does the same: a Llama file's normalized "</s>" decodes as "▁</s>", so " </s>").
    std::string decode_text;
};

// Leftmost-longest matching of many literal strings (HF uses Aho-Corasick with that match kind).
struct LiteralTrie {
    std::vector<std::vector<std::pair<unsigned char, int>>> next{{}};
    std::vector<int> token_at{-1};  // index into the owner's added-token list, -1 if no token ends here
    bool first_byte[256] = {};

    bool empty() const { return next.size() == 1; }
    void add(const std::string& s, int token) {
        if (s.empty()) return;
        int node = 0;
        for (unsigned char c : s) {
            int child = -1;
            for (auto& e : next[size_t(node)]) if (e.first == c) { child = e.second; break; }
            if (child < 0) {
                child = int(next.size());
                next[size_t(node)].push_back({c, child});
                next.emplace_back();
                token_at.push_back(-1);
            }
            node = child;
        }
        if (token_at[size_t(node)] < 0) token_at[size_t(node)] = token;
        first_byte[static_cast<unsigned char>(s[0])] = true;
    }
    // Longest token starting at s[pos]: returns its index and sets len, or -1.
    int longest_at(const std::string& s, size_t pos, size_t& len) const {
        int node = 0, best = -1;
        for (size_t j = pos; j < s.size(); j++) {
            int child = -1;
            for (auto& e : next[size_t(node)]) if (e.first == static_cast<unsigned char>(s[j])) { child = e.second; break; }
            if (child < 0) break;
            node = child;
            if (token_at[size_t(node)] >= 0) { best = token_at[size_t(node)]; len = j + 1 - pos; }
        }
        return best;
    }
};

// One step of the normalizer / pre-tokenizer / decoder pipelines, as read from tokenizer.json.
struct TokStep {
    std::string type;                    // "NFC", "Replace", "Split", "ByteLevel", "Metaspace", "Strip", ...
    std::string str_pattern, content;    // String pattern; Replace content; Prepend text; Strip char;
                                         // Metaspace replacement (one character, "▁" in practice)
    std::shared_ptr<Regex> regex;        // Regex pattern (Split, Replace); GPT-2's for ByteLevel use_regex
    std::string behavior;                // Split
    bool invert = false, add_prefix_space = false;
    int start = 0, stop = 0;             // Strip
    enum Prepend : uint8_t { ALWAYS, FIRST, NEVER } prepend = ALWAYS;  // Metaspace prepend_scheme
    bool split = true;                   // Metaspace: cut before every replacement character
    bool individual_digits = false;      // Digits
};

struct Tokenizer {
    static Tokenizer load(const std::string& model_dir);
    // From text already in memory; `name` is what error messages call the files.
    static Tokenizer from_json_text(const std::string& tokenizer_json, const std::string& config_json,
                                    const std::string& name = "tokenizer.json");

    std::vector<int> encode(const std::string& text) const { return encode_impl(text, false, nullptr); }
    std::vector<int> encode_plain(const std::string& text) const { return encode_impl(text, true, nullptr); }
    // encode(), except that no added token is recognised where it overlaps one of the byte ranges
    // [first, second) (sorted, disjoint): there the text is plain. Layout tokens (whitespace-only
    // added tokens) are the exception: they carry no control meaning and HF's split depends on them.
    // Text and model splitting run over the whole string, so the ids equal encode(text) whenever
    // those ranges hold no non-layout added token.
    // This is how a chat is encoded: template parts special-aware, message contents plain (chat.h).
    // text must be valid UTF-8 (offsets must not move); die() otherwise.
    using ByteRanges = std::vector<std::pair<size_t, size_t>>;
    std::vector<int> encode_with_plain_ranges(const std::string& text, const ByteRanges& plain) const {
        if (!utf8_is_valid(text)) die("encode_with_plain_ranges: text is not valid UTF-8 (repair it first)");
        return encode_impl(text, false, &plain);
    }
    std::string decode(const std::vector<int>& ids) const;

    int bos_id() const { return bos_id_; }
    bool add_bos() const { return add_bos_; }
    std::vector<int> eos_ids() const { return eos_ids_; }
    int vocab_size() const { return int(id_to_text_.size()); }
    std::string token_text(int id) const {
        return id >= 0 && id < vocab_size() ? id_to_text_[size_t(id)] : std::string();
    }
    int token_id(const std::string& text) const;  // -1 if absent (added tokens included)
    bool is_special(int id) const { return id >= 0 && id < vocab_size() && special_[size_t(id)]; }
    const std::string& chat_template() const { return chat_template_; }
    const std::vector<AddedToken>& added_tokens() const { return added_; }

    double load_ms = 0;  // wall time of the last load, for --bench

private:
    // model
    std::vector<std::string> id_to_text_;  // vocab, then added tokens over it; "" for holes
    std::vector<uint8_t> in_model_;        // id is a model (vocab) token
    std::vector<uint8_t> special_;
    TokenIndex model_index_;               // model vocab text -> id
    MergeTable merges_;
    std::vector<int> bmp_cp_id_;                      // one-code-point vocab entries below U+10000 (-1: none)
    std::unordered_map<uint32_t, int> astral_cp_id_;  // ... and above: together the BPE alphabet
    bool ignore_merges_ = false, byte_fallback_ = false, fuse_unk_ = false;
    int unk_id_ = -1;
    std::string subword_prefix_, word_suffix_;
    int byte_fallback_ids_[256];
    // pipeline
    std::vector<TokStep> normalizers_, pre_tokenizers_, decoders_;
    bool has_decoder_ = false;
    std::vector<AddedToken> added_;
    std::unordered_map<int, int> added_by_id_;  // id -> index in added_
    LiteralTrie raw_trie_, normalized_trie_;
    // config
    int bos_id_ = -1;
    bool add_bos_ = false;
    std::vector<int> eos_ids_;
    std::string chat_template_;

    friend struct TokenizerLoader;

    std::vector<int> encode_impl(const std::string& text, bool plain, const ByteRanges* plain_ranges) const;
    std::string normalize(const std::string& s) const;
    struct Segment { size_t start, end; int token; };  // token >= 0: an added token (index into added_)
    void split_added(const std::string& s, const LiteralTrie& trie, std::vector<Segment>& out,
                     const ByteRanges* plain_ranges = nullptr, size_t base = 0) const;
    void pre_tokenize(std::string& buf, std::vector<std::pair<uint32_t, uint32_t>>& spans, bool at_text_start) const;
    void bpe(const char* word, size_t n, std::vector<int>& out) const;
    void bpe_initial_symbols(const char* word, size_t n, std::vector<int>& ids) const;
    std::vector<std::string> decode_chain(std::vector<std::string> tokens) const;
};


// =====================================================================================================
// ---- Encoding ----
// =====================================================================================================

inline std::string tok_replace_all(const std::string& s, const std::string& from, const std::string& to) {
    if (from.empty() || s.find(from) == std::string::npos) return s;
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos);
        out += to;
    }
    out.append(s, pos, std::string::npos);
    return out;
}

inline std::string tok_regex_replace(const Regex& re, const std::string& s, const std::string& to) {
    std::vector<uint32_t> cps, offs;
    utf8_decode_all(s.data(), s.size(), cps, offs);
    std::vector<std::pair<uint32_t, uint32_t>> m;
    re.find_all(cps.data(), cps.size(), m);
    std::string out;
    size_t prev = 0;
    for (auto& r : m) {
        out.append(s, prev, offs[r.first] - prev);
        out += to;
        prev = offs[r.second];
    }
    out.append(s, prev, std::string::npos);
    return out;
}

inline std::string Tokenizer::normalize(const std::string& s) const {
    std::string out = s;
    for (const TokStep& n : normalizers_) {
        if (n.type == "NFC") out = unicode_nfc(out);
        else if (n.type == "NFD") out = unicode_nfd(out);
        else if (n.type == "Prepend") { if (!out.empty()) out = n.content + out; }
        else if (n.type == "Replace") out = n.regex ? tok_regex_replace(*n.regex, out, n.content) : tok_replace_all(out, n.str_pattern, n.content);
    }
    return out;
}

// The code point before / at byte position pos of valid UTF-8 s.
inline uint32_t utf8_cp_before(const std::string& s, size_t pos) {
    size_t r = pos - 1;
    while (r > 0 && (static_cast<unsigned char>(s[r]) & 0xC0) == 0x80) r--;
    return utf8_next(s.data(), s.size(), r);
}
inline size_t utf8_start_before(const std::string& s, size_t pos) {
    size_t r = pos - 1;
    while (r > 0 && (static_cast<unsigned char>(s[r]) & 0xC0) == 0x80) r--;
    return r;
}

// HF's AddedVocabulary::find_matches: leftmost-longest tokens, then single_word / lstrip / rstrip.
inline bool tok_overlaps(const Tokenizer::ByteRanges* ranges, size_t a, size_t b) {
    if (ranges) for (auto& r : *ranges) if (a < r.second && b > r.first) return true;
    return false;
}

// plain_ranges (offset by base, s's position in them) mark where no token may match.
inline void Tokenizer::split_added(const std::string& s, const LiteralTrie& trie, std::vector<Segment>& out,
                                   const ByteRanges* plain_ranges, size_t base) const {
    out.clear();
    size_t start_offset = 0;
    for (size_t pos = 0; !trie.empty() && pos < s.size();) {
        size_t len = 0;
        int k = trie.first_byte[static_cast<unsigned char>(s[pos])] ? trie.longest_at(s, pos, len) : -1;
        if (k < 0 || (!added_[size_t(k)].layout && tok_overlaps(plain_ranges, base + pos, base + pos + len))) { pos++; continue; }
        size_t start = pos, stop = pos + len;
        pos = stop;
        const AddedToken& a = added_[size_t(k)];
        if (a.single_word) {  // only as a whole word: no word character touching either end
            size_t q = stop;
            bool word_before = start > 0 && unicode_is_word_char(utf8_cp_before(s, start));
            bool word_after = stop < s.size() && unicode_is_word_char(utf8_next(s.data(), s.size(), q));
            if (word_before || word_after) continue;
        }
        if (a.lstrip) {  // swallow the whitespace before, but not what an earlier match took
            while (start > 0 && unicode_is_white_space(utf8_cp_before(s, start))) start = utf8_start_before(s, start);
            start = std::max(start, start_offset);
        }
        if (a.rstrip) {
            for (size_t q = stop; stop < s.size() && unicode_is_white_space(utf8_next(s.data(), s.size(), q)); q = stop) stop = q;
        }
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, k});
        start_offset = stop;
    }
    if (start_offset < s.size() || out.empty()) out.push_back({start_offset, s.size(), -1});
}

using TokSpans = std::vector<std::pair<uint32_t, uint32_t>>;  // [start, end) byte ranges in a buffer

// HF's NormalizedString::split: the pattern's matches and the text between them, then the
// behavior decides which become pieces and which are glued to a neighbour.
inline void tok_split_spans(const TokStep& p, const std::string& behavior, const std::string& buf, TokSpans& spans) {
    struct Piece { uint32_t a, b; bool is_match; };
    std::vector<Piece> pieces, merged;
    std::vector<uint32_t> cps, offs;
    TokSpans matches, next;
    for (auto& sp : spans) {
        pieces.clear();
        const char* s = buf.data() + sp.first;
        uint32_t n = sp.second - sp.first, prev = 0;
        auto add_match = [&](uint32_t a, uint32_t b) {
            if (prev != a) pieces.push_back({prev, a, false});
            pieces.push_back({a, b, true});
            prev = b;
        };
        if (p.regex) {
            utf8_decode_all(s, n, cps, offs);
            p.regex->find_all(cps.data(), cps.size(), matches);
            for (auto& m : matches) add_match(offs[m.first], offs[m.second]);
        } else if (!p.str_pattern.empty()) {
            std::string_view v(s, n);
            for (size_t hit = v.find(p.str_pattern); hit != std::string_view::npos; hit = v.find(p.str_pattern, hit + p.str_pattern.size()))
                add_match(uint32_t(hit), uint32_t(hit + p.str_pattern.size()));
        }
        if (prev != n || pieces.empty()) pieces.push_back({prev, n, false});
        if (p.invert) for (auto& pc : pieces) pc.is_match = !pc.is_match;
        merged.clear();
        bool previous_match = false;
        if (behavior == "Isolated") {
            merged = pieces;
        } else if (behavior == "Removed") {
            for (auto& pc : pieces) if (!pc.is_match) merged.push_back(pc);
        } else if (behavior == "Contiguous") {
            for (auto& pc : pieces) {
                if (pc.is_match == previous_match && !merged.empty()) merged.back().b = pc.b;
                else merged.push_back(pc);
                previous_match = pc.is_match;
            }
        } else if (behavior == "MergedWithPrevious") {
            for (auto& pc : pieces) {
                if (pc.is_match && !previous_match && !merged.empty()) merged.back().b = pc.b;
                else merged.push_back(pc);
                previous_match = pc.is_match;
            }
        } else {  // MergedWithNext: the same, walking backwards
            for (size_t k = pieces.size(); k-- > 0;) {
                if (pieces[k].is_match && !previous_match && !merged.empty()) merged.back().a = pieces[k].a;
                else merged.push_back(pieces[k]);
                previous_match = pieces[k].is_match;
            }
            std::reverse(merged.begin(), merged.end());
        }
        for (auto& pc : merged) if (pc.b > pc.a) next.push_back({sp.first + pc.a, sp.first + pc.b});
    }
    spans.swap(next);
}

// ByteLevel: optional prefix space per piece, GPT-2's split, then every byte as its printable stand-in.
inline void tok_byte_level(const TokStep& p, std::string& buf, TokSpans& spans) {
    if (p.add_prefix_space) {
        std::string out;
        TokSpans next;
        for (auto& sp : spans) {
            uint32_t a = uint32_t(out.size());
            if (buf[sp.first] != ' ') out += ' ';
            out.append(buf, sp.first, sp.second - sp.first);
            next.push_back({a, uint32_t(out.size())});
        }
        buf.swap(out);
        spans.swap(next);
    }
    if (p.regex) tok_split_spans(p, "Isolated", buf, spans);
    const ByteLevelAlphabet& bl = byte_level_alphabet();
    std::string out;
    out.reserve(buf.size() * 2);
    for (auto& sp : spans) {
        uint32_t a = uint32_t(out.size());
        for (uint32_t i = sp.first; i < sp.second; i++) out += bl.byte_to_utf8[static_cast<unsigned char>(buf[i])];
        sp = {a, uint32_t(out.size())};
    }
    buf.swap(out);
}

// Metaspace (SentencePiece's view of spaces): every ' ' becomes the replacement character (U+2581),
// a piece that does not start with one gets one in front (prepend_scheme "always"; "first": only the
// piece that starts the input text; "never": none), then with split the piece is cut before every
// replacement character: "Hey  you" -> "▁Hey", "▁", "▁you".
inline void tok_metaspace(const TokStep& p, std::string& buf, TokSpans& spans, bool at_text_start) {
    const std::string& rep = p.content;
    std::string out;
    out.reserve(buf.size() + spans.size() * rep.size() + 16);
    TokSpans next;
    for (auto& sp : spans) {
        size_t a = out.size();
        bool starts_with_rep = buf[sp.first] == ' ' || buf.compare(sp.first, rep.size(), rep) == 0;
        // A span's original offset is 0 only when it is the first piece of the text's first segment.
        bool first_piece = at_text_start && sp.first == 0;
        if (!starts_with_rep && (p.prepend == TokStep::ALWAYS || (p.prepend == TokStep::FIRST && first_piece))) out += rep;
        for (uint32_t i = sp.first; i < sp.second; i++) {
            if (buf[i] == ' ') out += rep;
            else out += buf[i];
        }
        if (!p.split) { next.push_back({uint32_t(a), uint32_t(out.size())}); continue; }
        size_t piece = a;  // cut before each replacement character (HF: split on it, MergedWithNext)
        for (size_t hit = out.find(rep, a + 1); hit != std::string::npos; hit = out.find(rep, hit + rep.size())) {
            next.push_back({uint32_t(piece), uint32_t(hit)});
            piece = hit;
        }
        if (out.size() > piece) next.push_back({uint32_t(piece), uint32_t(out.size())});
    }
    buf.swap(out);
    spans.swap(next);
}

// Digits: numbers apart from the rest; each digit alone with individual_digits, else runs of digits.
// "Digit" is Rust's char::is_numeric: the categories Nd, Nl and No (so "½" and "Ⅻ" too).
inline void tok_digits(const TokStep& p, const std::string& buf, TokSpans& spans) {
    TokSpans next;
    for (auto& sp : spans) {
        uint32_t piece = sp.first;
        int prev_kind = -1;  // 0: other, 1: numeric
        for (size_t i = sp.first; i < sp.second;) {
            size_t at = i;
            bool numeric = ucat_bit(unicode_category(utf8_next(buf.data(), sp.second, i))) & UCAT_N;
            bool cut = at > piece && (numeric ? p.individual_digits || prev_kind != 1 : prev_kind != 0);
            if (cut) { next.push_back({piece, uint32_t(at)}); piece = uint32_t(at); }
            prev_kind = numeric;
        }
        if (sp.second > piece) next.push_back({piece, sp.second});
    }
    spans.swap(next);
}

// Runs the pre-tokenizers over buf; spans are the pieces (non-empty). Split and Digits only cut spans;
// ByteLevel rewrites buf in the byte-level alphabet, Metaspace with its replacement character.
// at_text_start: buf starts at the input text's offset 0 (Metaspace's prepend_scheme "first").
inline void Tokenizer::pre_tokenize(std::string& buf, TokSpans& spans, bool at_text_start) const {
    for (const TokStep& p : pre_tokenizers_) {
        if (p.type == "ByteLevel") tok_byte_level(p, buf, spans);
        else if (p.type == "Metaspace") tok_metaspace(p, buf, spans, at_text_start);
        else if (p.type == "Digits") tok_digits(p, buf, spans);
        else tok_split_spans(p, p.behavior, buf, spans);
    }
}

// The word's characters as model ids (HF BPE::merge_word before merging): vocab entry, else the
// <0xHH> byte tokens when byte_fallback, else unk (runs fused when fuse_unk).
inline void Tokenizer::bpe_initial_symbols(const char* w, size_t n, std::vector<int>& ids) const {
    ids.clear();
    int unk_pending = -1;
    bool plain = subword_prefix_.empty() && word_suffix_.empty();
    std::string s;
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = utf8_next(w, n, i);
        int id = -1;
        if (plain) {
            if (cp < 0x10000) id = cp < bmp_cp_id_.size() ? bmp_cp_id_[cp] : -1;
            else if (auto it = astral_cp_id_.find(cp); it != astral_cp_id_.end()) id = it->second;
            s.assign(w + start, i - start);
        } else {
            s.assign(start > 0 ? subword_prefix_ : std::string());
            s.append(w + start, i - start);
            if (i == n) s += word_suffix_;
            id = model_index_.find(id_to_text_, s.data(), s.size());
        }
        if (id >= 0) {
            if (unk_pending >= 0) { ids.push_back(unk_pending); unk_pending = -1; }
            ids.push_back(id);
            continue;
        }
        if (byte_fallback_) {
            bool all = true;
            for (unsigned char b : s) all = all && byte_fallback_ids_[b] >= 0;
            if (all) {
                if (unk_pending >= 0) { ids.push_back(unk_pending); unk_pending = -1; }
                for (unsigned char b : s) ids.push_back(byte_fallback_ids_[b]);
                continue;
            }
        }
        if (unk_id_ >= 0) {
            if (unk_pending >= 0 && !fuse_unk_) ids.push_back(unk_pending);
            unk_pending = unk_id_;
        }
    }
    if (unk_pending >= 0) ids.push_back(unk_pending);
}

// HF's BPE merge loop: a heap of candidate pairs ordered by (rank, position); stale entries skipped.
inline void Tokenizer::bpe(const char* w, size_t n, std::vector<int>& out) const {
    if (n == 0) return;
    if (ignore_merges_) {
        int id = model_index_.find(id_to_text_, w, n);
        if (id >= 0) { out.push_back(id); return; }
    }
    std::vector<int> ids;
    bpe_initial_symbols(w, n, ids);
    size_t m = ids.size();
    if (m < 2) { out.insert(out.end(), ids.begin(), ids.end()); return; }
    struct Sym { int id, prev, next; };
    std::vector<Sym> sym(m);
    for (size_t i = 0; i < m; i++) sym[i] = {ids[i], int(i) - 1, i + 1 < m ? int(i + 1) : -1};
    struct Cand { int rank, pos, new_id; bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; } };
    std::priority_queue<Cand> heap;
    for (size_t i = 0; i + 1 < m; i++)
        if (const MergeTable::Slot* s = merges_.get(ids[i], ids[i + 1])) heap.push({s->rank, int(i), s->id});
    while (!heap.empty()) {
        Cand c = heap.top();
        heap.pop();
        Sym& left = sym[size_t(c.pos)];
        if (left.id < 0 || left.next < 0) continue;
        Sym& right = sym[size_t(left.next)];
        const MergeTable::Slot* now = merges_.get(left.id, right.id);
        if (!now || now->id != c.new_id) continue;
        left.id = c.new_id;
        right.id = -1;  // removed
        left.next = right.next;
        if (right.next >= 0) sym[size_t(right.next)].prev = c.pos;
        if (left.prev >= 0)
            if (const MergeTable::Slot* s = merges_.get(sym[size_t(left.prev)].id, left.id)) heap.push({s->rank, left.prev, s->id});
        if (left.next >= 0)
            if (const MergeTable::Slot* s = merges_.get(left.id, sym[size_t(left.next)].id)) heap.push({s->rank, c.pos, s->id});
    }
    for (int i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

inline std::vector<int> Tokenizer::encode_impl(const std::string& text, bool plain, const ByteRanges* plain_ranges) const {
    std::string s = utf8_repair(text);
    std::vector<int> out;
    std::vector<Segment> raw, norm;
    if (plain) raw.assign(1, Segment{0, s.size(), -1});
    else split_added(s, raw_trie_, raw, plain_ranges);
    std::unordered_map<std::string, std::vector<int>> cache;  // per call: repeated words cost one lookup
    std::string buf;
    std::vector<std::pair<uint32_t, uint32_t>> spans;
    for (const Segment& seg : raw) {
        if (seg.token >= 0) { out.push_back(added_[size_t(seg.token)].id); continue; }
        std::string normalized;
        ByteRanges norm_plain;  // plain ranges in normalized coordinates
        bool cut = !plain && !normalized_trie_.empty() && tok_overlaps(plain_ranges, seg.start, seg.end);
        if (!cut) {
            normalized = normalize(s.substr(seg.start, seg.end - seg.start));
        } else {  // normalize plain and non-plain stretches apart, to know where the plain text went
            size_t pos = seg.start;
            for (auto& r : *plain_ranges) {
                size_t a = std::max(r.first, seg.start), b = std::min(r.second, seg.end);
                if (a >= b) continue;
                normalized += normalize(s.substr(pos, a - pos));
                size_t na = normalized.size();
                normalized += normalize(s.substr(a, b - a));
                norm_plain.push_back({na, normalized.size()});
                pos = b;
            }
            normalized += normalize(s.substr(pos, seg.end - pos));
        }
        if (plain || normalized_trie_.empty()) norm.assign(1, Segment{0, normalized.size(), -1});
        else split_added(normalized, normalized_trie_, norm, cut ? &norm_plain : nullptr);
        for (const Segment& piece : norm) {
            if (piece.token >= 0) { out.push_back(added_[size_t(piece.token)].id); continue; }
            if (piece.end == piece.start) continue;
            buf.assign(normalized, piece.start, piece.end - piece.start);
            spans.assign(1, {0u, uint32_t(buf.size())});
            pre_tokenize(buf, spans, seg.start == 0 && piece.start == 0);
            for (auto& sp : spans) {
                size_t len = sp.second - sp.first;
                if (len > 256) { bpe(buf.data() + sp.first, len, out); continue; }
                std::string word(buf, sp.first, len);
                auto it = cache.find(word);
                if (it == cache.end()) {
                    std::vector<int> ids;
                    bpe(word.data(), word.size(), ids);
                    it = cache.emplace(std::move(word), std::move(ids)).first;
                }
                out.insert(out.end(), it->second.begin(), it->second.end());
            }
        }
    }
    return out;
}

// =====================================================================================================
// ---- Decoding ----
// =====================================================================================================

inline std::vector<std::string> Tokenizer::decode_chain(std::vector<std::string> tokens) const {
    for (const TokStep& d : decoders_) {
        if (d.type == "ByteLevel") {  // byte-level chars back to bytes; a token with other chars stays as is
            const ByteLevelAlphabet& bl = byte_level_alphabet();
            std::string bytes;
            for (const std::string& t : tokens) {
                size_t mark = bytes.size();
                bool ok = true;
                for (size_t i = 0; i < t.size() && ok;) {
                    auto it = bl.cp_to_byte.find(utf8_next(t.data(), t.size(), i));
                    if (it == bl.cp_to_byte.end()) ok = false; else bytes += char(it->second);
                }
                if (!ok) { bytes.resize(mark); bytes += t; }
            }
            tokens.assign(1, utf8_repair(bytes));
        } else if (d.type == "Replace") {
            for (std::string& t : tokens) t = tok_replace_all(t, d.str_pattern, d.content);
        } else if (d.type == "ByteFallback") {  // runs of <0xHH> become their bytes, or one U+FFFD per byte
            std::vector<std::string> out;
            std::string run;
            size_t run_len = 0;
            auto flush = [&] {
                if (!run_len) return;
                if (utf8_is_valid(run)) out.push_back(run);
                else for (size_t k = 0; k < run_len; k++) out.push_back("\xEF\xBF\xBD");
                run.clear();
                run_len = 0;
            };
            for (std::string& t : tokens) {
                int v = -1;
                if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
                    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
                    int h = hex(t[3]), l = hex(t[4]);
                    if (t[3] == '+' && l >= 0) v = l;  // Rust's from_str_radix accepts a leading '+'
                    else if (h >= 0 && l >= 0) v = h * 16 + l;
                }
                if (v >= 0) { run += char(v); run_len++; continue; }
                flush();
                out.push_back(std::move(t));
            }
            flush();
            tokens.swap(out);
        } else if (d.type == "Metaspace") {  // replacement -> ' '; in the first token it is dropped instead
            for (size_t k = 0; k < tokens.size(); k++)
                tokens[k] = tok_replace_all(tokens[k], d.content, k == 0 && d.prepend != TokStep::NEVER ? "" : " ");
        } else if (d.type == "Fuse") {
            std::string all;
            for (auto& t : tokens) all += t;
            tokens.assign(1, all);
        } else if (d.type == "Strip") {
            for (std::string& t : tokens) {
                size_t a = 0, b = t.size(), cl = d.content.size();
                for (int k = 0; k < d.start && t.compare(a, cl, d.content) == 0 && a + cl <= b; k++) a += cl;
                for (int k = 0; k < d.stop && b >= a + cl && t.compare(b - cl, cl, d.content) == 0; k++) b -= cl;
                t = t.substr(a, b - a);
            }
        }
    }
    return tokens;
}

inline std::string Tokenizer::decode(const std::vector<int>& ids) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int id : ids)
        if (id >= 0 && id < vocab_size()) {
            auto added = added_by_id_.find(id);
            if (added != added_by_id_.end()) tokens.push_back(added_[size_t(added->second)].decode_text);
            else if (in_model_[size_t(id)]) tokens.push_back(id_to_text_[size_t(id)]);
        }
    if (!has_decoder_) {  // HF joins with spaces when there is no decoder
        std::string out;
        for (size_t k = 0; k < tokens.size(); k++) out += (k ? " " : "") + tokens[k];
        return out;
    }
    std::string out;
    for (auto& t : decode_chain(std::move(tokens))) out += t;
    return out;
}

// Streaming decode: emits text only once it is complete. Keeps a short window of ids and emits the
// part of decode(window) beyond decode(prefix) when it does not end in U+FFFD (a partial character,
// or a byte-fallback run not finished yet); then slides the window. Same scheme as HF's DecodeStream,
// so decoder effects that depend on context (a stripped leading space) come out as in decode().
struct StreamDecoder {
    explicit StreamDecoder(const Tokenizer& t) : tok(t) {}
    std::string push(int id) {
        ids.push_back(id);
        std::string text = tok.decode(ids);
        if (text.size() <= prefix.size() || ends_with_replacement(text) || text.compare(0, prefix.size(), prefix) != 0) return "";
        std::string fresh = text.substr(prefix.size());
        ids.erase(ids.begin(), ids.begin() + long(prefix_index));
        prefix = tok.decode(ids);
        prefix_index = ids.size();
        return fresh;
    }
    // Whatever is held back (a truncated character comes out as U+FFFD), and a reset.
    std::string flush() {
        std::string text = tok.decode(ids);
        std::string rest = text.size() > prefix.size() && text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : "";
        ids.clear();
        prefix.clear();
        prefix_index = 0;
        return rest;
    }

private:
    const Tokenizer& tok;
    std::vector<int> ids;
    std::string prefix;
    size_t prefix_index = 0;
    static bool ends_with_replacement(const std::string& s) { return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0; }
};

}  // namespace monocu

// Reading tokenizer.json and tokenizer_config.json: Tokenizer::load and from_json_text.
#include "tokenizer/tokenizer_json.h"
