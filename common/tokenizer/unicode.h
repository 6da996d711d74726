// tokenizer/unicode.h — Unicode general categories, white space and NFC/NFD normalization (data from
// unicode_tables.h), as the tokenizer's regexes and normalizers need them.
//
// Usage:
//   unicode_category(cp), unicode_is_white_space(cp), unicode_is_word_char(cp)
//   std::string n = unicode_nfc(s);  std::string d = unicode_nfd(s);
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace monocu {

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

}  // namespace monocu
