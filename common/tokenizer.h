// tokenizer.h — Hugging Face tokenizer.json (BPE) read and applied exactly as HF `tokenizers` does.
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
//                  ByteLevel (add_prefix_space, use_regex with GPT-2's pattern).
//   decoder        null, Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip.
//   (Metaspace, WordPiece, Unigram...: rejected by name, not guessed at.)
//   post_processor not applied (encode adds no BOS/EOS); TemplateProcessing tells add_bos().
//   added_tokens   matched before the model, leftmost-longest, with lstrip / rstrip / single_word /
//                  normalized, exactly in HF's order: non-normalized ones in the raw text, then the
//                  normalizer, then the normalized ones.
//   tokenizer_config.json: bos_token, eos_token, add_bos_token, chat_template (or chat_template.jinja); generation_config.json
//                  and config.json (if present): eos_token_id.
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

#include "errors.h"
#include "unicode_tables.h"

namespace monocu {

// =====================================================================================================
// ---- UTF-8 ----
// =====================================================================================================

// Decodes the code point at s[i] (i < n) and advances i. An invalid sequence yields U+FFFD and
// advances past its maximal valid prefix only (Unicode's "maximal subpart" rule, which Rust's
// from_utf8_lossy and every browser follow), so "\xE2\x82A" gives U+FFFD then 'A'.
inline uint32_t utf8_next(const char* s, size_t n, size_t& i) {
    const unsigned char* u = reinterpret_cast<const unsigned char*>(s);
    unsigned char b0 = u[i];
    if (b0 < 0x80) { i += 1; return b0; }
    int len; uint32_t cp; unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) { len = 2; cp = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3; cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;  // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4; cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else { i += 1; return 0xFFFD; }
    size_t j = i + 1;
    for (int k = 1; k < len; k++, j++) {
        if (j >= n || u[j] < lo || u[j] > hi) { i = j; return 0xFFFD; }
        cp = (cp << 6) | (u[j] & 0x3F);
        lo = 0x80; hi = 0xBF;
    }
    i = j;
    return cp;
}

inline void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) { out += char(cp); }
    else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F));
    }
}

inline bool utf8_is_valid(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        size_t start = i;
        if (utf8_next(s.data(), s.size(), i) == 0xFFFD &&
            !(i - start == 3 && s.compare(start, 3, "\xEF\xBF\xBD") == 0)) return false;
    }
    return true;
}

// Valid UTF-8 unchanged; otherwise each maximal invalid subsequence replaced by U+FFFD.
inline std::string utf8_repair(const std::string& s) {
    if (utf8_is_valid(s)) return s;
    std::string out;
    out.reserve(s.size() + 8);
    for (size_t i = 0; i < s.size();) utf8_append(out, utf8_next(s.data(), s.size(), i));
    return out;
}

// Code points of valid UTF-8 s, with the byte offset of each (offs has one more entry: s.size()).
inline void utf8_decode_all(const char* s, size_t n, std::vector<uint32_t>& cps, std::vector<uint32_t>& offs) {
    cps.clear(); offs.clear();
    for (size_t i = 0; i < n;) { offs.push_back(uint32_t(i)); cps.push_back(utf8_next(s, n, i)); }
    offs.push_back(uint32_t(n));
}

// =====================================================================================================
// ---- Unicode properties (from unicode_tables.h) ----
// =====================================================================================================

enum UnicodeCategory : uint8_t {
    UC_Cn, UC_Lu, UC_Ll, UC_Lt, UC_Lm, UC_Lo, UC_Mn, UC_Mc, UC_Me, UC_Nd, UC_Nl, UC_No,
    UC_Pc, UC_Pd, UC_Ps, UC_Pe, UC_Pi, UC_Pf, UC_Po, UC_Sm, UC_Sc, UC_Sk, UC_So,
    UC_Zs, UC_Zl, UC_Zp, UC_Cc, UC_Cf, UC_Cs, UC_Co, UC_COUNT
};
constexpr uint32_t ucat_bit(UnicodeCategory c) { return 1u << c; }
constexpr uint32_t UCAT_L = ucat_bit(UC_Lu) | ucat_bit(UC_Ll) | ucat_bit(UC_Lt) | ucat_bit(UC_Lm) | ucat_bit(UC_Lo);
constexpr uint32_t UCAT_M = ucat_bit(UC_Mn) | ucat_bit(UC_Mc) | ucat_bit(UC_Me);
constexpr uint32_t UCAT_N = ucat_bit(UC_Nd) | ucat_bit(UC_Nl) | ucat_bit(UC_No);
constexpr uint32_t UCAT_P = ucat_bit(UC_Pc) | ucat_bit(UC_Pd) | ucat_bit(UC_Ps) | ucat_bit(UC_Pe) |
                            ucat_bit(UC_Pi) | ucat_bit(UC_Pf) | ucat_bit(UC_Po);
constexpr uint32_t UCAT_S = ucat_bit(UC_Sm) | ucat_bit(UC_Sc) | ucat_bit(UC_Sk) | ucat_bit(UC_So);
constexpr uint32_t UCAT_Z = ucat_bit(UC_Zs) | ucat_bit(UC_Zl) | ucat_bit(UC_Zp);
constexpr uint32_t UCAT_C = ucat_bit(UC_Cn) | ucat_bit(UC_Cc) | ucat_bit(UC_Cf) | ucat_bit(UC_Cs) | ucat_bit(UC_Co);

// One byte per code point: category in the low 5 bits, then White_Space and Alphabetic flags.
// Built once (1.1 MB, about a millisecond) on first use; thread-safe by C++11 static init.
constexpr uint8_t UINFO_WHITE_SPACE = 0x20, UINFO_ALPHABETIC = 0x40;
inline const uint8_t* unicode_info_table() {
    static const std::unique_ptr<uint8_t[]> table = [] {
        std::unique_ptr<uint8_t[]> t(new uint8_t[0x110000]());
        for (int i = 0; i < unicode_category_ranges_count; i++)
            for (uint32_t c = unicode_category_ranges[i][0]; c <= unicode_category_ranges[i][1]; c++)
                t[c] = uint8_t(unicode_category_ranges[i][2]);
        for (int i = 0; i < unicode_white_space_count; i++)
            for (uint32_t c = unicode_white_space[i][0]; c <= unicode_white_space[i][1]; c++) t[c] |= UINFO_WHITE_SPACE;
        for (int i = 0; i < unicode_alphabetic_count; i++)
            for (uint32_t c = unicode_alphabetic[i][0]; c <= unicode_alphabetic[i][1]; c++) t[c] |= UINFO_ALPHABETIC;
        return t;
    }();
    return table.get();
}
inline UnicodeCategory unicode_category(uint32_t cp) {
    return cp < 0x110000 ? UnicodeCategory(unicode_info_table()[cp] & 0x1F) : UC_Cn;
}
inline bool unicode_is_white_space(uint32_t cp) {
    return cp < 0x110000 && (unicode_info_table()[cp] & UINFO_WHITE_SPACE);
}
// Rust's char::is_alphanumeric (Alphabetic or a numeric category), plus '_': HF's single_word test.
inline bool unicode_is_word_char(uint32_t cp) {
    if (cp >= 0x110000) return false;
    return cp == '_' || (unicode_info_table()[cp] & UINFO_ALPHABETIC) || (ucat_bit(unicode_category(cp)) & UCAT_N);
}

// =====================================================================================================
// ---- NFC normalization (canonical decomposition, reordering, composition; Hangul by formula) ----
// =====================================================================================================

struct NfcData {
    std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> decomp;  // cp -> (first, second or 0)
    std::unordered_map<uint64_t, uint32_t> compose;                     // (first << 21 | second) -> cp
    std::unordered_map<uint32_t, uint8_t> ccc;                           // non-zero combining classes
    std::vector<uint8_t> quick_check_fails;                              // bitmap: NFC_QC is No or Maybe
};

inline const NfcData& nfc_data() {
    static const NfcData data = [] {
        NfcData d;
        auto in_ranges = [](const uint32_t (*r)[2], int n, uint32_t cp) {
            for (int i = 0; i < n; i++) if (cp >= r[i][0] && cp <= r[i][1]) return true;
            return false;
        };
        for (int i = 0; i < unicode_canonical_decomp_count; i++) {
            const uint32_t* e = unicode_canonical_decomp[i];
            d.decomp[e[0]] = {e[1], e[2]};
            if (e[2] && !in_ranges(unicode_comp_exclusion, unicode_comp_exclusion_count, e[0]))
                d.compose[(uint64_t(e[1]) << 21) | e[2]] = e[0];
        }
        for (int i = 0; i < unicode_combining_class_count; i++)
            for (uint32_t c = unicode_combining_class[i][0]; c <= unicode_combining_class[i][1]; c++)
                d.ccc[c] = uint8_t(unicode_combining_class[i][2]);
        d.quick_check_fails.assign(0x110000 / 8, 0);
        for (int i = 0; i < unicode_nfc_quick_check_count; i++)
            for (uint32_t c = unicode_nfc_quick_check[i][0]; c <= unicode_nfc_quick_check[i][1]; c++)
                d.quick_check_fails[c >> 3] |= uint8_t(1 << (c & 7));
        return d;
    }();
    return data;
}

constexpr uint32_t HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7;
constexpr uint32_t HANGUL_VCOUNT = 21, HANGUL_TCOUNT = 28, HANGUL_SCOUNT = 11172;

inline uint8_t nfc_combining_class(const NfcData& d, uint32_t cp) {
    if (cp < 0x300) return 0;
    auto it = d.ccc.find(cp);
    return it == d.ccc.end() ? 0 : it->second;
}

inline void nfc_decompose(const NfcData& d, uint32_t cp, std::vector<uint32_t>& out) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SCOUNT) {
        uint32_t s = cp - HANGUL_S;
        out.push_back(HANGUL_L + s / (HANGUL_VCOUNT * HANGUL_TCOUNT));
        out.push_back(HANGUL_V + (s % (HANGUL_VCOUNT * HANGUL_TCOUNT)) / HANGUL_TCOUNT);
        if (s % HANGUL_TCOUNT) out.push_back(HANGUL_T + s % HANGUL_TCOUNT);
        return;
    }
    auto it = d.decomp.find(cp);
    if (it == d.decomp.end()) { out.push_back(cp); return; }
    nfc_decompose(d, it->second.first, out);
    if (it->second.second) nfc_decompose(d, it->second.second, out);
}

inline uint32_t nfc_compose_pair(const NfcData& d, uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + 19 && b >= HANGUL_V && b < HANGUL_V + HANGUL_VCOUNT)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VCOUNT + (b - HANGUL_V)) * HANGUL_TCOUNT;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SCOUNT && (a - HANGUL_S) % HANGUL_TCOUNT == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_TCOUNT)
        return a + (b - HANGUL_T);
    auto it = d.compose.find((uint64_t(a) << 21) | b);
    return it == d.compose.end() ? 0 : it->second;
}

// True when s (valid UTF-8) is certainly NFC already: no NFC_QC No/Maybe code point, no marks out of order.
inline bool nfc_quick_check(const NfcData& d, const std::string& s) {
    uint8_t last_ccc = 0;
    for (size_t i = 0; i < s.size();) {
        if (static_cast<unsigned char>(s[i]) < 0x80) { i++; last_ccc = 0; continue; }
        uint32_t cp = utf8_next(s.data(), s.size(), i);
        if (d.quick_check_fails[cp >> 3] & (1 << (cp & 7))) return false;
        uint8_t c = nfc_combining_class(d, cp);
        if (c && c < last_ccc) return false;
        last_ccc = c;
    }
    return true;
}

// Canonical decomposition (recursive, Hangul by formula), then canonical ordering: each run of
// non-starters stably sorted by combining class.
inline std::vector<uint32_t> nfd_code_points(const NfcData& d, const std::string& s) {
    std::vector<uint32_t> cps;
    for (size_t i = 0; i < s.size();) nfc_decompose(d, utf8_next(s.data(), s.size(), i), cps);
    for (size_t i = 1; i < cps.size(); i++) {
        uint8_t c = nfc_combining_class(d, cps[i]);
        for (size_t j = i; c && j > 0 && nfc_combining_class(d, cps[j - 1]) > c; j--) std::swap(cps[j - 1], cps[j]);
    }
    return cps;
}

inline std::string unicode_nfd(const std::string& s) {
    std::string out;
    for (uint32_t cp : nfd_code_points(nfc_data(), s)) utf8_append(out, cp);
    return out;
}

inline std::string unicode_nfc(const std::string& s) {
    const NfcData& d = nfc_data();
    if (nfc_quick_check(d, s)) return s;
    std::vector<uint32_t> cps = nfd_code_points(d, s);
    if (cps.empty()) return std::string();
    // Canonical composition: each character joins the last starter unless a character in between
    // blocks it. last_class == 0 means the previous character is that starter: adjacent, never blocked.
    std::vector<uint32_t> res{cps[0]};
    size_t starter = 0;
    int last_class = nfc_combining_class(d, cps[0]) ? 256 : 0;
    for (size_t i = 1; i < cps.size(); i++) {
        uint32_t ch = cps[i];
        int cls = nfc_combining_class(d, ch);
        uint32_t comp = nfc_compose_pair(d, res[starter], ch);
        if (comp && (last_class < cls || last_class == 0)) {
            res[starter] = comp;
            continue;
        }
        if (cls == 0) starter = res.size();
        last_class = cls;
        res.push_back(ch);
    }
    std::string out;
    for (uint32_t cp : res) utf8_append(out, cp);
    return out;
}

// =====================================================================================================
// ---- Regex: a small backtracking engine for pre-tokenizer split patterns ----
// =====================================================================================================

// A set of code points: an exact 128-bit answer for ASCII, and for the rest a union of general
// categories, White_Space, and explicit ranges; negated as a whole.
struct RegexClass {
    uint64_t ascii[2] = {0, 0};
    uint32_t categories = 0;
    bool white_space = false, not_white_space = false, negated = false;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;

    bool contains_raw(uint32_t cp) const {
        if (ucat_bit(unicode_category(cp)) & categories) return true;
        bool ws = unicode_is_white_space(cp);
        if ((white_space && ws) || (not_white_space && !ws)) return true;
        for (auto& r : ranges) if (cp >= r.first && cp <= r.second) return true;
        return false;
    }
    void finish() {  // precompute the ASCII answer, negation included
        for (uint32_t c = 0; c < 128; c++)
            if (contains_raw(c) != negated) ascii[c >> 6] |= uint64_t(1) << (c & 63);
    }
    bool matches(uint32_t cp) const {
        if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
        return contains_raw(cp) != negated;
    }
};

struct Regex {
    enum Op : uint8_t { CLASS, REPEAT_CLASS, SPLIT, JMP, LOOK, MATCH };
    struct Inst { Op op; int a = 0, b = 0, c = 0; };  // CLASS a=class; REPEAT_CLASS a=class b=min c=max(-1 inf)
                                                      // SPLIT a=first b=second; JMP a; LOOK a=negated b=continue-at
    std::vector<Inst> prog;
    std::vector<RegexClass> classes;
    std::string source;

    // Parses and compiles; die()s naming `where` and the construct it does not support.
    static Regex compile(const std::string& pattern, const std::string& where);

    // All non-overlapping leftmost matches in cps[0..n), as [start, end) code point index pairs.
    void find_all(const uint32_t* cps, size_t n, std::vector<std::pair<uint32_t, uint32_t>>& out) const;

private:
    struct Frame { int pc; size_t pos; int count; };  // count >= 0: retry a REPEAT_CLASS with one fewer
    bool run(int pc, const uint32_t* s, size_t n, size_t pos, size_t& end, std::vector<Frame>& stack) const;
};

namespace regex_detail {

// Parse tree of a pattern; compiled to Regex::prog.
struct Node {
    enum Kind { CLASS, CONCAT, ALT, REPEAT, LOOK } kind;
    int cls = -1, min = 0, max = 0;  // REPEAT bounds (max -1: unbounded); LOOK: min = negated
    std::vector<Node> kids;
};

struct Parser {
    const std::string& p;
    const std::string& where;
    std::vector<RegexClass>& classes;
    size_t i = 0;
    bool icase = false;

    [[noreturn]] void fail(const char* what) const {
        die("%s: regex /%s/: %s at offset %zu (supported: classes, \\p{..}, \\s \\d \\w, ?, *, +, {m,n}, "
            "(?:), (?i:), (?!), (?=))", where.c_str(), p.c_str(), what, i);
    }
    bool done() const { return i >= p.size(); }
    uint32_t next_cp() { if (done()) fail("unexpected end"); return utf8_next(p.data(), p.size(), i); }

    int add_class(RegexClass c) { c.finish(); classes.push_back(std::move(c)); return int(classes.size()) - 1; }

    static uint32_t category_mask(const std::string& name) {
        static const std::pair<const char*, uint32_t> groups[] = {
            {"L", UCAT_L}, {"M", UCAT_M}, {"N", UCAT_N}, {"P", UCAT_P}, {"S", UCAT_S}, {"Z", UCAT_Z}, {"C", UCAT_C},
            {"Letter", UCAT_L}, {"Mark", UCAT_M}, {"Number", UCAT_N}, {"Punctuation", UCAT_P},
            {"Symbol", UCAT_S}, {"Separator", UCAT_Z}, {"Other", UCAT_C}};
        for (auto& g : groups) if (name == g.first) return g.second;
        for (int c = 0; c < UC_COUNT; c++) if (name == UNICODE_CATEGORY_NAMES[c]) return 1u << c;
        return 0;
    }

    // After a backslash: fills `cls` for class escapes (returns true) or sets `lit` for a literal.
    bool parse_escape(RegexClass& cls, uint32_t& lit, bool inside_brackets) {
        uint32_t e = next_cp();
        switch (e) {
            case 's': cls.white_space = true; return true;
            case 'S': if (inside_brackets) cls.not_white_space = true; else { cls.white_space = true; cls.negated = true; } return true;
            case 'd': cls.categories |= ucat_bit(UC_Nd); return true;
            case 'w': cls.categories |= UCAT_L | UCAT_M | ucat_bit(UC_Nd) | ucat_bit(UC_Pc); cls.ranges.push_back({'_', '_'}); return true;
            case 'D': case 'W':
                if (inside_brackets) fail("\\D or \\W inside brackets");
                if (e == 'D') cls.categories |= ucat_bit(UC_Nd);
                else { cls.categories |= UCAT_L | UCAT_M | ucat_bit(UC_Nd) | ucat_bit(UC_Pc); cls.ranges.push_back({'_', '_'}); }
                cls.negated = true; return true;
            case 'p': case 'P': {
                if (e == 'P' && inside_brackets) fail("\\P inside brackets");
                std::string name;
                if (!done() && p[i] == '{') {
                    size_t close = p.find('}', i);
                    if (close == std::string::npos) fail("unterminated \\p{");
                    name = p.substr(i + 1, close - i - 1);
                    i = close + 1;
                } else {
                    name = std::string(1, char(next_cp()));
                }
                if (!name.empty() && name[0] == '^') fail("\\p{^..}");
                uint32_t mask = category_mask(name);
                if (!mask) fail(("unknown Unicode class \\p{" + name + "}").c_str());
                cls.categories |= mask;
                if (e == 'P') cls.negated = true;
                return true;
            }
            case 'r': lit = '\r'; return false;
            case 'n': lit = '\n'; return false;
            case 't': lit = '\t'; return false;
            case 'f': lit = '\f'; return false;
            case 'v': lit = '\v'; return false;
            case 'u': case 'x': {
                size_t len = e == 'u' ? 4 : 2;
                bool braces = !done() && p[i] == '{';
                if (braces) { size_t c = p.find('}', i); if (c == std::string::npos) fail("bad \\x{"); len = c - i - 1; i++; }
                if (i + len > p.size() || len == 0 || len > 6) fail("bad hex escape");
                lit = 0;
                for (size_t k = 0; k < len; k++) {
                    char h = p[i + k];
                    int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (v < 0) fail("bad hex escape");
                    lit = lit * 16 + uint32_t(v);
                }
                i += len + (braces ? 1 : 0);
                return false;
            }
            default:
                if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                    fail("unsupported escape (anchors, backreferences, \\b...)");
                lit = e;  // escaped punctuation stands for itself
                return false;
        }
    }

    // A literal under (?i): itself plus its ASCII case partner and the characters Unicode case folding
    // maps onto it (U+017F long s folds to s, U+212A Kelvin sign to k), as Oniguruma matches them.
    void add_literal(RegexClass& c, uint32_t cp) const {
        c.ranges.push_back({cp, cp});
        if (!icase) return;
        if (cp >= 0x80 && cp != 0x17F && cp != 0x212A) fail("(?i) on a non-ASCII literal");
        uint32_t lower = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        if (lower >= 'a' && lower <= 'z') { c.ranges.push_back({lower, lower}); c.ranges.push_back({lower - 32, lower - 32}); }
        if (lower == 's') c.ranges.push_back({0x17F, 0x17F});
        if (lower == 'k') c.ranges.push_back({0x212A, 0x212A});
    }

    Node parse_bracket() {  // after '['
        RegexClass c;
        if (!done() && p[i] == '^') { c.negated = true; i++; }
        bool first = true;
        while (true) {
            if (done()) fail("unterminated [");
            if (p[i] == ']' && !first) { i++; break; }
            if (p[i] == '[') fail("nested [ or POSIX class");
            first = false;
            uint32_t lo;
            if (p[i] == '\\') {
                i++;
                if (parse_escape(c, lo, true)) continue;
            } else {
                lo = next_cp();
            }
            if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
                i++;
                uint32_t hi;
                if (p[i] == '\\') { i++; RegexClass tmp; if (parse_escape(tmp, hi, true)) fail("class escape as a range end"); }
                else hi = next_cp();
                if (hi < lo) fail("range out of order");
                if (icase && (lo < 0x80 || hi < 0x80)) fail("(?i) on a range");
                c.ranges.push_back({lo, hi});
            } else {
                add_literal(c, lo);
            }
        }
        Node n{Node::CLASS, add_class(std::move(c)), 0, 0, {}};
        return n;
    }

    Node parse_atom() {
        char ch = p[i];
        if (ch == '(') {
            i++;
            bool saved_icase = icase;
            Node::Kind kind = Node::CONCAT;
            int negated = 0;
            if (!done() && p[i] == '?') {
                i++;
                if (done()) fail("bad group");
                if (p[i] == ':') { i++; }
                else if (p[i] == '!' || p[i] == '=') { kind = Node::LOOK; negated = p[i] == '!'; i++; }
                else if (p[i] == 'i' && i + 1 < p.size() && p[i + 1] == ':') { icase = true; i += 2; }
                else fail("unsupported group kind (lookbehind, atomic, named, flags other than (?i:)");
            }
            Node inner = parse_alt();
            if (done() || p[i] != ')') fail("missing )");
            i++;
            icase = saved_icase;
            if (kind == Node::LOOK) return Node{Node::LOOK, -1, negated, 0, {std::move(inner)}};
            return inner;
        }
        if (ch == '[') { i++; return parse_bracket(); }
        RegexClass c;
        if (ch == '.') { i++; c.ranges.push_back({'\n', '\n'}); c.negated = true; return Node{Node::CLASS, add_class(std::move(c)), 0, 0, {}}; }
        if (ch == '^' || ch == '$') fail("anchors");
        if (ch == ')' || ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == '|') fail("misplaced operator");
        uint32_t lit;
        if (ch == '\\') {
            i++;
            if (parse_escape(c, lit, false)) return Node{Node::CLASS, add_class(std::move(c)), 0, 0, {}};
        } else {
            lit = next_cp();
        }
        add_literal(c, lit);
        return Node{Node::CLASS, add_class(std::move(c)), 0, 0, {}};
    }

    bool parse_count(int& min, int& max) {  // at '{': {m}, {m,}, {m,n}; false if not a counted repeat
        size_t j = i + 1;
        auto number = [&](int& v) {
            size_t s = j; v = 0;
            while (j < p.size() && p[j] >= '0' && p[j] <= '9') { v = v * 10 + (p[j] - '0'); if (v > 1000) fail("repeat count over 1000"); j++; }
            return j > s;
        };
        if (!number(min)) return false;
        max = min;
        if (j < p.size() && p[j] == ',') { j++; if (!number(max)) max = -1; }
        if (j >= p.size() || p[j] != '}') fail("bad {m,n}");
        if (max != -1 && max < min) fail("{m,n} with n < m");
        i = j + 1;
        return true;
    }

    Node parse_repeat() {
        Node atom = parse_atom();
        while (!done()) {
            int min, max;
            char ch = p[i];
            if (ch == '?') { min = 0; max = 1; i++; }
            else if (ch == '*') { min = 0; max = -1; i++; }
            else if (ch == '+') { min = 1; max = -1; i++; }
            else if (ch == '{') { if (!parse_count(min, max)) fail("literal { (escape it)"); }
            else break;
            if (!done() && (p[i] == '?' || p[i] == '+')) fail("lazy or possessive quantifier");
            if (atom.kind == Node::LOOK) fail("quantified lookaround");
            atom = Node{Node::REPEAT, -1, min, max, {std::move(atom)}};
        }
        return atom;
    }

    Node parse_concat() {
        Node n{Node::CONCAT, -1, 0, 0, {}};
        while (!done() && p[i] != '|' && p[i] != ')') n.kids.push_back(parse_repeat());
        return n;
    }

    Node parse_alt() {
        Node n{Node::ALT, -1, 0, 0, {}};
        n.kids.push_back(parse_concat());
        while (!done() && p[i] == '|') { i++; n.kids.push_back(parse_concat()); }
        return n.kids.size() == 1 ? std::move(n.kids[0]) : std::move(n);
    }
};

inline bool can_match_empty(const Node& n) {
    switch (n.kind) {
        case Node::CLASS: return false;
        case Node::LOOK: return true;
        case Node::REPEAT: return n.min == 0 || can_match_empty(n.kids[0]);
        case Node::CONCAT: for (auto& k : n.kids) if (!can_match_empty(k)) return false; return true;
        case Node::ALT: for (auto& k : n.kids) if (can_match_empty(k)) return true; return false;
    }
    return true;
}

struct Compiler {
    std::vector<Regex::Inst>& prog;
    const std::string& where;
    const std::string& pattern;
    int emit(Regex::Op op, int a = 0, int b = 0, int c = 0) { prog.push_back({op, a, b, c}); return int(prog.size()) - 1; }

    void node(const Node& n) {
        switch (n.kind) {
            case Node::CLASS: emit(Regex::CLASS, n.cls); break;
            case Node::CONCAT: for (auto& k : n.kids) node(k); break;
            case Node::ALT: {
                std::vector<int> jumps;
                for (size_t k = 0; k < n.kids.size(); k++) {
                    int split = -1;
                    if (k + 1 < n.kids.size()) split = emit(Regex::SPLIT);
                    if (split >= 0) prog[split].a = int(prog.size());
                    node(n.kids[k]);
                    if (k + 1 < n.kids.size()) jumps.push_back(emit(Regex::JMP));
                    if (split >= 0) prog[split].b = int(prog.size());
                }
                for (int j : jumps) prog[j].a = int(prog.size());
                break;
            }
            case Node::LOOK: {
                int look = emit(Regex::LOOK, n.min);
                node(n.kids[0]);
                emit(Regex::MATCH);
                prog[look].b = int(prog.size());
                break;
            }
            case Node::REPEAT: repeat(n); break;
        }
    }

    void repeat(const Node& n) {
        const Node& body = n.kids[0];
        if (body.kind == Node::CLASS) { emit(Regex::REPEAT_CLASS, body.cls, n.min, n.max); return; }
        if (n.max == -1 && can_match_empty(body))
            die("%s: regex /%s/: unbounded repeat of a sub-pattern that can match empty", where.c_str(), pattern.c_str());
        for (int k = 0; k < n.min; k++) node(body);
        if (n.max == -1) {  // L: SPLIT body, end; body; JMP L
            int split = emit(Regex::SPLIT);
            prog[split].a = int(prog.size());
            node(body);
            emit(Regex::JMP, split);
            prog[split].b = int(prog.size());
            return;
        }
        std::vector<int> splits;  // x{0,k} as nested optionals: every failure goes to the end
        for (int k = n.min; k < n.max; k++) {
            int split = emit(Regex::SPLIT);
            prog[split].a = int(prog.size());
            splits.push_back(split);
            node(body);
        }
        for (int s : splits) prog[s].b = int(prog.size());
    }
};

}  // namespace regex_detail

inline Regex Regex::compile(const std::string& pattern, const std::string& where) {
    Regex r;
    r.source = pattern;
    regex_detail::Parser parser{pattern, where, r.classes};
    regex_detail::Node root = parser.parse_alt();
    if (!parser.done()) parser.fail("unbalanced )");
    regex_detail::Compiler comp{r.prog, where, pattern};
    comp.node(root);
    comp.emit(MATCH);
    return r;
}

inline bool Regex::run(int pc, const uint32_t* s, size_t n, size_t pos, size_t& end, std::vector<Frame>& stack) const {
    const size_t base = stack.size();
    while (true) {
        const Inst& in = prog[size_t(pc)];
        bool ok = true;
        switch (in.op) {
            case CLASS:
                if (pos < n && classes[size_t(in.a)].matches(s[pos])) { pos++; pc++; } else ok = false;
                break;
            case REPEAT_CLASS: {
                const RegexClass& c = classes[size_t(in.a)];
                size_t limit = in.c < 0 ? n - pos : std::min(n - pos, size_t(in.c));
                size_t k = 0;
                while (k < limit && c.matches(s[pos + k])) k++;
                if (k < size_t(in.b)) { ok = false; break; }
                if (k > size_t(in.b)) stack.push_back({pc + 1, pos, int(k)});
                pos += k; pc++;
                break;
            }
            case SPLIT: stack.push_back({in.b, pos, -1}); pc = in.a; break;
            case JMP: pc = in.a; break;
            case LOOK: {
                size_t ignored;
                bool m = run(pc + 1, s, n, pos, ignored, stack);
                if (m != bool(in.a)) pc = in.b; else ok = false;
                break;
            }
            case MATCH: end = pos; stack.resize(base); return true;
        }
        if (ok) continue;
        if (stack.size() == base) return false;
        Frame f = stack.back();
        stack.pop_back();
        pc = f.pc;
        pos = f.pos;
        if (f.count >= 0) {  // give back one character of a greedy class repeat
            int k = f.count - 1;
            if (k > prog[size_t(f.pc - 1)].b) stack.push_back({f.pc, f.pos, k});
            pos = f.pos + size_t(k);
        }
    }
}

inline void Regex::find_all(const uint32_t* cps, size_t n, std::vector<std::pair<uint32_t, uint32_t>>& out) const {
    out.clear();
    std::vector<Frame> stack;
    stack.reserve(64);
    size_t pos = 0;
    while (pos < n) {
        size_t end;
        if (run(0, cps, n, pos, end, stack)) {
            out.push_back({uint32_t(pos), uint32_t(end)});
            pos = end > pos ? end : pos + 1;
        } else {
            pos++;
        }
    }
}

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
    std::string type;                    // "NFC", "Replace", "Split", "ByteLevel", "Strip", ...
    std::string str_pattern, content;    // String pattern; Replace content; Prepend text; Strip char
    std::shared_ptr<Regex> regex;        // Regex pattern (Split, Replace); GPT-2's for ByteLevel use_regex
    std::string behavior;                // Split
    bool invert = false, add_prefix_space = false;
    int start = 0, stop = 0;             // Strip
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
    void pre_tokenize(std::string& buf, std::vector<std::pair<uint32_t, uint32_t>>& spans) const;
    void bpe(const char* word, size_t n, std::vector<int>& out) const;
    void bpe_initial_symbols(const char* word, size_t n, std::vector<int>& ids) const;
    std::vector<std::string> decode_chain(std::vector<std::string> tokens) const;
};

// =====================================================================================================
// ---- Loading tokenizer.json ----
// =====================================================================================================

using tok_json = nlohmann::json;

// SAX reader for tokenizer.json: model.vocab and model.merges (hundreds of thousands of entries) go
// straight into flat arrays; everything else becomes a small DOM. About 3x faster than a full DOM.
struct TokenizerJsonSax : nlohmann::json_sax<tok_json> {
    const std::string& file;
    tok_json root;
    std::vector<tok_json*> stack;
    std::string key_;
    tok_json* model_obj = nullptr;
    enum Mode { DOM, VOCAB, MERGES, MERGE_PAIR } mode = DOM;
    int pending = 0;  // 1: next container is model.vocab, 2: model.merges
    std::vector<std::pair<std::string, uint64_t>> vocab;
    std::vector<std::string> merges;  // flat: a0, b0, a1, b1, ...
    std::vector<std::string> pair_;
    bool vocab_seen = false, merges_seen = false;

    explicit TokenizerJsonSax(const std::string& f) : file(f) {
        vocab.reserve(1 << 17);  // typical sizes: fewer regrowths of 100k+ strings
        merges.reserve(1 << 18);
    }

    [[noreturn]] void bad(const char* what) { die("%s: %s", file.c_str(), what); }
    tok_json* put(tok_json&& v) {
        if (stack.empty()) { root = std::move(v); return &root; }
        tok_json* top = stack.back();
        if (top->is_array()) { top->push_back(std::move(v)); return &top->back(); }
        tok_json& slot = (*top)[key_];
        slot = std::move(v);
        return &slot;
    }
    bool scalar(tok_json&& v) {
        if (mode == VOCAB) bad("model.vocab: every value must be a non-negative integer id");
        if (mode == MERGES || mode == MERGE_PAIR) bad("model.merges: entries must be \"a b\" strings or [\"a\", \"b\"] pairs");
        pending = 0;
        put(std::move(v));
        return true;
    }
    bool null() override { return scalar(nullptr); }
    bool boolean(bool b) override { return scalar(b); }
    bool number_integer(number_integer_t v) override { return scalar(v); }
    bool number_unsigned(number_unsigned_t v) override {
        if (mode == VOCAB) {
            if (v > 0x7FFFFFF0ull) bad("model.vocab: id too large");
            vocab.emplace_back(std::move(key_), v);
            return true;
        }
        return scalar(v);
    }
    bool number_float(number_float_t v, const string_t&) override { return scalar(v); }
    bool string(string_t& s) override {
        if (mode == MERGES) {
            size_t sp = s.find(' ');
            if (sp == std::string::npos)
                die("%s: model.merges[%zu] \"%s\" is not two tokens separated by a space", file.c_str(), merges.size() / 2, s.c_str());
            merges.push_back(s.substr(0, sp));
            merges.push_back(s.substr(sp + 1));
            return true;
        }
        if (mode == MERGE_PAIR) { pair_.push_back(std::move(s)); return true; }
        return scalar(std::move(s));
    }
    bool binary(binary_t&) override { bad("binary values are not JSON"); }
    bool start_object(std::size_t) override {
        if (mode != DOM) bad(mode == VOCAB ? "model.vocab: every value must be a non-negative integer id"
                                           : "model.merges: entries must be \"a b\" strings or [\"a\", \"b\"] pairs");
        if (pending == 1) { mode = VOCAB; vocab_seen = true; pending = 0; return true; }
        if (pending == 2) bad("model.merges must be an array");
        tok_json* v = put(tok_json::object());
        if (stack.size() == 1 && key_ == "model") model_obj = v;
        stack.push_back(v);
        return true;
    }
    bool key(string_t& k) override {
        if (mode == VOCAB) { key_ = std::move(k); return true; }
        key_ = std::move(k);
        pending = 0;
        if (stack.size() == 2 && stack[1] == model_obj && model_obj) {
            if (key_ == "vocab") pending = 1;
            else if (key_ == "merges") pending = 2;
        }
        return true;
    }
    bool end_object() override {
        if (mode == VOCAB) { mode = DOM; return true; }
        stack.pop_back();
        return true;
    }
    bool start_array(std::size_t) override {
        if (mode == VOCAB) bad("model.vocab: every value must be a non-negative integer id");
        if (mode == MERGE_PAIR) bad("model.merges: a pair must hold two strings");
        if (mode == MERGES) { mode = MERGE_PAIR; pair_.clear(); return true; }
        if (pending == 2) { mode = MERGES; merges_seen = true; pending = 0; return true; }
        pending = 0;  // a list as model.vocab (Unigram's form) goes to the DOM; read_model rejects it by type
        stack.push_back(put(tok_json::array()));
        return true;
    }
    bool end_array() override {
        if (mode == MERGE_PAIR) {
            if (pair_.size() != 2)
                die("%s: model.merges[%zu] has %zu strings, expected a pair", file.c_str(), merges.size() / 2, pair_.size());
            merges.push_back(std::move(pair_[0]));
            merges.push_back(std::move(pair_[1]));
            mode = MERGES;
            return true;
        }
        if (mode == MERGES) { mode = DOM; return true; }
        stack.pop_back();
        return true;
    }
    bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
        die("%s: not valid JSON (byte %zu): %s", file.c_str(), pos, e.what());
    }
};

struct TokenizerLoader {
    Tokenizer& t;
    const std::string& file;     // tokenizer.json, for messages
    const std::string& cfg_file;  // tokenizer_config.json, for messages

    [[noreturn]] void unsupported(const char* where, const std::string& what) {
        die("%s: %s '%s' is not supported", file.c_str(), where, what.c_str());
    }
    static std::string type_of(const tok_json& j) {
        if (!j.is_object()) return "";
        auto it = j.find("type");
        return it != j.end() && it->is_string() ? it->get<std::string>() : "";
    }
    std::string get_string(const tok_json& j, const char* key, const char* where, const char* dflt = nullptr) {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) {
            if (dflt) return dflt;
            die("%s: %s: missing \"%s\"", file.c_str(), where, key);
        }
        if (!it->is_string()) die("%s: %s: \"%s\" must be a string", file.c_str(), where, key);
        return it->get<std::string>();
    }
    bool get_bool(const tok_json& j, const char* key, const char* where, bool dflt) {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) return dflt;
        if (!it->is_boolean()) die("%s: %s: \"%s\" must be true or false", file.c_str(), where, key);
        return it->get<bool>();
    }
    // {"String": "x"} or {"Regex": "..."}
    void read_pattern(const tok_json& j, TokStep& s, const char* where) {
        auto it = j.find("pattern");
        if (it == j.end() || !it->is_object()) die("%s: %s: missing \"pattern\" object", file.c_str(), where);
        if (it->contains("String") && (*it)["String"].is_string()) s.str_pattern = (*it)["String"].get<std::string>();
        else if (it->contains("Regex") && (*it)["Regex"].is_string())
            s.regex = std::make_shared<Regex>(Regex::compile((*it)["Regex"].get<std::string>(), file + ": " + where));
        else die("%s: %s: pattern must be {\"String\": ...} or {\"Regex\": ...}", file.c_str(), where);
    }

    // A "Sequence" step: each member read by `read`. False for any other type.
    template <class F>
    bool read_sequence(const tok_json& j, const char* list, const char* what, F read) {
        if (type_of(j) != "Sequence") return false;
        auto it = j.find(list);
        if (it == j.end() || !it->is_array()) die("%s: %s Sequence: missing \"%s\" array", file.c_str(), what, list);
        for (auto& x : *it) read(x);
        return true;
    }

    void read_normalizer(const tok_json& j) {
        if (j.is_null() || read_sequence(j, "normalizers", "normalizer", [&](const tok_json& x) { read_normalizer(x); })) return;
        std::string type = type_of(j);
        TokStep s;
        s.type = type;
        if (type == "NFC" || type == "NFD") {
        } else if (type == "Replace") {
            read_pattern(j, s, "normalizer Replace");
            s.content = get_string(j, "content", "normalizer Replace");
        } else if (type == "Prepend") {
            s.content = get_string(j, "prepend", "normalizer Prepend");
        } else {
            unsupported("normalizer", type.empty() ? j.dump().substr(0, 60) : type);
        }
        t.normalizers_.push_back(std::move(s));
    }

    void read_pre_tokenizer(const tok_json& j) {
        if (j.is_null() || read_sequence(j, "pretokenizers", "pre_tokenizer", [&](const tok_json& x) { read_pre_tokenizer(x); })) return;
        std::string type = type_of(j);
        TokStep s;
        s.type = type;
        if (type == "Split") {
            read_pattern(j, s, "pre_tokenizer Split");
            s.behavior = get_string(j, "behavior", "pre_tokenizer Split");
            static const char* behaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
            if (std::find_if(std::begin(behaviors), std::end(behaviors), [&](const char* b) { return s.behavior == b; }) == std::end(behaviors))
                die("%s: pre_tokenizer Split: behavior '%s' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                    file.c_str(), s.behavior.c_str());
            s.invert = get_bool(j, "invert", "pre_tokenizer Split", false);
        } else if (type == "ByteLevel") {
            s.add_prefix_space = get_bool(j, "add_prefix_space", "pre_tokenizer ByteLevel", true);
            if (get_bool(j, "use_regex", "pre_tokenizer ByteLevel", true)) s.regex = std::make_shared<Regex>(Regex::compile(GPT2_SPLIT_PATTERN, "ByteLevel"));
        } else {
            unsupported("pre_tokenizer", type.empty() ? j.dump().substr(0, 60) : type);
        }
        t.pre_tokenizers_.push_back(std::move(s));
    }

    void read_decoder(const tok_json& j) {
        if (j.is_null()) return;
        t.has_decoder_ = true;
        if (read_sequence(j, "decoders", "decoder", [&](const tok_json& x) { read_decoder(x); })) return;
        std::string type = type_of(j);
        TokStep s;
        s.type = type;
        if (type == "ByteLevel" || type == "ByteFallback" || type == "Fuse") {
        } else if (type == "Replace") {
            read_pattern(j, s, "decoder Replace");
            if (s.regex) unsupported("decoder Replace with a", "Regex pattern");
            s.content = get_string(j, "content", "decoder Replace");
        } else if (type == "Strip") {
            s.content = get_string(j, "content", "decoder Strip");
            if (utf8_repair(s.content) != s.content || s.content.empty()) die("%s: decoder Strip: content must be one character", file.c_str());
            auto num = [&](const char* k) {
                auto it = j.find(k);
                if (it == j.end() || !it->is_number_unsigned()) die("%s: decoder Strip: \"%s\" must be a non-negative integer", file.c_str(), k);
                return int(std::min<uint64_t>(it->get<uint64_t>(), 1u << 20));
            };
            s.start = num("start");
            s.stop = num("stop");
        } else {
            unsupported("decoder", type.empty() ? j.dump().substr(0, 60) : type);
        }
        t.decoders_.push_back(std::move(s));
    }

    void read_model(const tok_json& model, TokenizerJsonSax& sax) {
        if (!model.is_object()) die("%s: missing \"model\" object", file.c_str());
        std::string type = type_of(model);
        if (type.empty() && model.contains("type")) die("%s: model.type must be a string", file.c_str());
        if (!type.empty() && type != "BPE") die("%s: model type '%s' is not supported (only BPE)", file.c_str(), type.c_str());
        if (!sax.vocab_seen) die("%s: model.vocab is missing or not an object of token -> id", file.c_str());
        if (!sax.merges_seen) die("%s: model.merges is missing (BPE needs its merges)", file.c_str());
        auto dropout = model.find("dropout");
        if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
            die("%s: model.dropout %s is not supported (BPE dropout makes encoding random)", file.c_str(), dropout->dump().c_str());
        t.ignore_merges_ = get_bool(model, "ignore_merges", "model", false);
        t.byte_fallback_ = get_bool(model, "byte_fallback", "model", false);
        t.fuse_unk_ = get_bool(model, "fuse_unk", "model", false);
        t.subword_prefix_ = get_string(model, "continuing_subword_prefix", "model", "");
        t.word_suffix_ = get_string(model, "end_of_word_suffix", "model", "");

        uint64_t max_id = 0;
        for (auto& v : sax.vocab) max_id = std::max(max_id, v.second);
        size_t n = sax.vocab.empty() ? 0 : size_t(max_id) + 1;
        if (n > sax.vocab.size() * 4 + 1024) die("%s: model.vocab ids run to %llu for only %zu tokens", file.c_str(), (unsigned long long)max_id, sax.vocab.size());
        t.id_to_text_.assign(n, std::string());
        t.in_model_.assign(n, 0);
        t.model_index_.reserve(sax.vocab.size());
        t.bmp_cp_id_.assign(0x10000, -1);
        for (auto& v : sax.vocab) {
            size_t id = size_t(v.second);
            if (t.in_model_[id])
                die("%s: model.vocab gives id %zu to both '%s' and '%s'", file.c_str(), id, t.id_to_text_[id].c_str(), v.first.c_str());
            t.id_to_text_[id] = std::move(v.first);
            t.in_model_[id] = 1;
            int prev = t.model_index_.insert(t.id_to_text_, int(id));
            if (prev != int(id)) die("%s: model.vocab lists '%s' twice", file.c_str(), t.id_to_text_[id].c_str());
            uint32_t cp = 0;
            const std::string& s = t.id_to_text_[id];
            size_t pos = 0;
            if (!s.empty() && (cp = utf8_next(s.data(), s.size(), pos), pos == s.size())) {
                if (cp < 0x10000) t.bmp_cp_id_[cp] = int(id); else t.astral_cp_id_[cp] = int(id);
            }
        }
        for (int b = 0; b < 256; b++) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            t.byte_fallback_ids_[b] = t.model_index_.find(t.id_to_text_, name, 6);
        }
        std::string unk = get_string(model, "unk_token", "model", "");
        if (!unk.empty()) {
            t.unk_id_ = t.model_index_.find(t.id_to_text_, unk.data(), unk.size());
            if (t.unk_id_ < 0) die("%s: model.unk_token '%s' is not in model.vocab", file.c_str(), unk.c_str());
        }
        read_merges(sax.merges);
    }

    void read_merges(const std::vector<std::string>& m) {
        size_t count = m.size() / 2;
        t.merges_.reserve(count);
        std::string joined;
        for (size_t r = 0; r < count; r++) {
            const std::string& a = m[2 * r];
            const std::string& b = m[2 * r + 1];
            int ia = t.model_index_.find(t.id_to_text_, a.data(), a.size());
            int ib = t.model_index_.find(t.id_to_text_, b.data(), b.size());
            joined.assign(a);
            size_t skip = (!t.subword_prefix_.empty() && b.compare(0, t.subword_prefix_.size(), t.subword_prefix_) == 0) ? t.subword_prefix_.size() : 0;
            joined.append(b, skip, std::string::npos);
            int in = t.model_index_.find(t.id_to_text_, joined.data(), joined.size());
            if (ia < 0 || ib < 0 || in < 0)
                die("%s: model.merges[%zu] ('%s' '%s'): '%s' is not in model.vocab", file.c_str(), r, a.c_str(), b.c_str(),
                    (ia < 0 ? a : ib < 0 ? b : joined).c_str());
            t.merges_.put(ia, ib, int(r), in);
        }
    }

    void read_added_tokens(const tok_json& root) {
        auto it = root.find("added_tokens");
        if (it == root.end() || it->is_null()) return;
        if (!it->is_array()) die("%s: \"added_tokens\" must be an array", file.c_str());
        for (auto& a : *it) {
            if (!a.is_object()) die("%s: added_tokens: every entry must be an object", file.c_str());
            AddedToken tok;
            tok.content = get_string(a, "content", "added_tokens entry");
            if (tok.content.empty()) die("%s: added_tokens: empty \"content\"", file.c_str());
            if (!utf8_is_valid(tok.content)) die("%s: added_tokens: content is not valid UTF-8", file.c_str());
            auto id = a.find("id");
            if (id == a.end() || !id->is_number_unsigned() || id->get<uint64_t>() > 0x7FFFFFF0ull)
                die("%s: added token '%s': \"id\" must be a non-negative integer", file.c_str(), tok.content.c_str());
            tok.id = int(id->get<uint64_t>());
            tok.special = get_bool(a, "special", "added_tokens entry", false);
            tok.lstrip = get_bool(a, "lstrip", "added_tokens entry", false);
            tok.rstrip = get_bool(a, "rstrip", "added_tokens entry", false);
            tok.single_word = get_bool(a, "single_word", "added_tokens entry", false);
            tok.normalized = get_bool(a, "normalized", "added_tokens entry", !tok.special);
            tok.layout = true;
            for (size_t i = 0; i < tok.content.size();) {
                uint32_t cp = utf8_next(tok.content.data(), tok.content.size(), i);
                tok.layout = tok.layout && (unicode_is_white_space(cp) || cp == 0x2581);
            }
            int in_vocab = t.model_index_.find(t.id_to_text_, tok.content.data(), tok.content.size());
            if (in_vocab >= 0 && in_vocab != tok.id)
                die("%s: added token '%s' has id %d but model.vocab gives it id %d", file.c_str(), tok.content.c_str(), tok.id, in_vocab);
            if (size_t(tok.id) >= t.id_to_text_.size()) {
                if (size_t(tok.id) > t.id_to_text_.size() + 1000000) die("%s: added token '%s': id %d is far past the vocab", file.c_str(), tok.content.c_str(), tok.id);
                t.id_to_text_.resize(size_t(tok.id) + 1);
                t.in_model_.resize(size_t(tok.id) + 1, 0);
            }
            if (t.in_model_[size_t(tok.id)] && t.id_to_text_[size_t(tok.id)] != tok.content)
                die("%s: added token '%s' has id %d, which model.vocab gives to '%s'", file.c_str(), tok.content.c_str(), tok.id,
                    t.id_to_text_[size_t(tok.id)].c_str());
            if (t.added_by_id_.count(tok.id)) die("%s: added_tokens: id %d appears twice", file.c_str(), tok.id);
            t.id_to_text_[size_t(tok.id)] = tok.content;
            t.added_by_id_[tok.id] = int(t.added_.size());
            t.added_.push_back(tok);
        }
        t.special_.assign(t.id_to_text_.size(), 0);
        for (size_t k = 0; k < t.added_.size(); k++) {
            const AddedToken& a = t.added_[k];
            if (a.special) t.special_[size_t(a.id)] = 1;
            if (a.normalized) t.normalized_trie_.add(t.normalize(a.content), int(k));
            else t.raw_trie_.add(a.content, int(k));
        }
    }

    // bos/eos from tokenizer_config.json ("x" or {"content": "x"}), plus generation config eos ids.
    int config_token(const tok_json& cfg, const char* key) {
        auto it = cfg.find(key);
        if (it == cfg.end() || it->is_null()) return -1;
        std::string text;
        if (it->is_string()) text = it->get<std::string>();
        else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) text = (*it)["content"].get<std::string>();
        else die("%s: \"%s\" must be a string or {\"content\": ...}", cfg_file.c_str(), key);
        int id = t.token_id(text);
        if (id < 0) die("%s: %s '%s' is not a token of %s", cfg_file.c_str(), key, text.c_str(), file.c_str());
        return id;
    }

    void read_config(const tok_json& cfg, const tok_json& root) {
        t.bos_id_ = cfg.is_object() ? config_token(cfg, "bos_token") : -1;
        int eos = cfg.is_object() ? config_token(cfg, "eos_token") : -1;
        if (eos >= 0) t.eos_ids_.push_back(eos);
        // add_bos: the config's add_bos_token if stated, else whether HF's post-processor prepends a token.
        auto ab = cfg.is_object() ? cfg.find("add_bos_token") : cfg.end();
        if (cfg.is_object() && ab != cfg.end() && ab->is_boolean()) t.add_bos_ = ab->get<bool>() && t.bos_id_ >= 0;
        else t.add_bos_ = post_processor_prepends(root.contains("post_processor") ? root["post_processor"] : tok_json()) && t.bos_id_ >= 0;
        if (cfg.is_object()) {
            auto ct = cfg.find("chat_template");
            if (ct != cfg.end() && ct->is_string()) t.chat_template_ = ct->get<std::string>();
            else if (ct != cfg.end() && ct->is_array())
                for (auto& e : *ct)
                    if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
                        t.chat_template_ = e["template"].get<std::string>();
        }
        // The turn-end tokens of the chat formats this repo knows: generation stops on any of them.
        static const char* turn_ends[] = {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>",
                                          "<end_of_turn>", "<eos>", "<|return|>", "<|call|>",
                                          "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "</s>"};
        for (const char* te : turn_ends) {
            int id = t.token_id(te);
            if (id >= 0 && t.is_special(id)) add_eos(id);
        }
    }

    void add_eos(int id) {
        if (id >= 0 && std::find(t.eos_ids_.begin(), t.eos_ids_.end(), id) == t.eos_ids_.end()) t.eos_ids_.push_back(id);
    }

    bool post_processor_prepends(const tok_json& pp) {
        std::string type = type_of(pp);
        if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
            for (auto& p : pp["processors"]) if (post_processor_prepends(p)) return true;
            return false;
        }
        if (type == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array() && !pp["single"].empty())
            return pp["single"][0].is_object() && pp["single"][0].contains("SpecialToken");
        return false;
    }
};

inline int Tokenizer::token_id(const std::string& text) const {
    for (auto& a : added_) if (a.content == text) return a.id;
    return model_index_.find(id_to_text_, text.data(), text.size());
}

inline Tokenizer Tokenizer::from_json_text(const std::string& json_text, const std::string& config_text, const std::string& name) {
    auto t0 = std::chrono::steady_clock::now();
    Tokenizer t;
    std::string cfg_name = name + " (tokenizer_config.json)";
    size_t slash = name.rfind('/');
    if (slash != std::string::npos) cfg_name = name.substr(0, slash + 1) + "tokenizer_config.json";
    TokenizerJsonSax sax(name);
    tok_json::sax_parse(json_text, &sax);
    if (!sax.root.is_object()) die("%s: the top level must be a JSON object", name.c_str());
    TokenizerLoader L{t, name, cfg_name};
    const tok_json& root = sax.root;
    L.read_model(root.contains("model") ? root["model"] : tok_json(), sax);
    L.read_normalizer(root.contains("normalizer") ? root["normalizer"] : tok_json());
    L.read_pre_tokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : tok_json());
    L.read_decoder(root.contains("decoder") ? root["decoder"] : tok_json());
    L.read_added_tokens(root);
    if (t.special_.size() != t.id_to_text_.size()) t.special_.resize(t.id_to_text_.size(), 0);
    tok_json cfg;
    if (!config_text.empty()) {
        cfg = tok_json::parse(config_text, nullptr, false);
        if (cfg.is_discarded() || !cfg.is_object()) die("%s: not a valid JSON object", cfg_name.c_str());
    }
    L.read_config(cfg, root);
    t.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return t;
}

inline bool tok_read_file(const std::string& path, std::string& out) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    out.resize(size > 0 ? size_t(size) : 0);
    size_t got = out.empty() ? 0 : std::fread(&out[0], 1, out.size(), f);
    std::fclose(f);
    out.resize(got);
    return true;
}

// eos_token_id from generation_config.json / config.json: an int or a list of ints.
inline void tok_add_generation_eos(Tokenizer& t, std::vector<int>& eos, const std::string& path) {
    std::string text;
    if (!tok_read_file(path, text)) return;
    tok_json j = tok_json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) die("%s: not a valid JSON object", path.c_str());
    auto it = j.find("eos_token_id");
    if (it == j.end() || it->is_null()) return;
    std::vector<tok_json> items = it->is_array() ? it->get<std::vector<tok_json>>() : std::vector<tok_json>{*it};
    for (auto& v : items) {
        if (!v.is_number_unsigned() || v.get<uint64_t>() >= uint64_t(t.vocab_size()))
            die("%s: eos_token_id %s is not a token id of this tokenizer", path.c_str(), v.dump().c_str());
        int id = int(v.get<uint64_t>());
        if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
    }
}

inline Tokenizer Tokenizer::load(const std::string& model_dir) {
    auto t0 = std::chrono::steady_clock::now();
    std::string dir = model_dir.empty() || model_dir.back() == '/' ? model_dir : model_dir + "/";
    std::string json_path = dir + "tokenizer.json", cfg_path = dir + "tokenizer_config.json";
    std::string json_text, cfg_text;
    if (!tok_read_file(json_path, json_text)) die("%s: cannot read (missing?)", json_path.c_str());
    tok_read_file(cfg_path, cfg_text);  // optional
    Tokenizer t = from_json_text(json_text, cfg_text, json_path);
    // Newer checkpoints keep the template in its own file, which transformers then prefers.
    std::string tpl;
    if (tok_read_file(dir + "chat_template.jinja", tpl)) t.chat_template_ = tpl;
    tok_add_generation_eos(t, t.eos_ids_, dir + "generation_config.json");
    tok_add_generation_eos(t, t.eos_ids_, dir + "config.json");
    t.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return t;
}

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

// Runs the pre-tokenizers over buf; spans are the pieces (non-empty). Split only cuts spans; ByteLevel
// rewrites buf in the byte-level alphabet.
inline void Tokenizer::pre_tokenize(std::string& buf, TokSpans& spans) const {
    for (const TokStep& p : pre_tokenizers_) {
        if (p.type == "ByteLevel") tok_byte_level(p, buf, spans);
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
            if (cp < 0x10000) id = bmp_cp_id_[cp];
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
            pre_tokenize(buf, spans);
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
        if (id >= 0 && id < vocab_size() && (in_model_[size_t(id)] || added_by_id_.count(id))) tokens.push_back(id_to_text_[size_t(id)]);
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
