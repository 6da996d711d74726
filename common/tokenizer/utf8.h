// tokenizer/utf8.h — UTF-8 decoding and encoding with the replacement rules tokenizers rely on.
//
// Usage:
//   size_t i = 0; uint32_t cp = utf8_next(s, n, i);    // next code point; U+FFFD for an invalid sequence
//   utf8_append(out, cp);  utf8_is_valid(s);  utf8_first_invalid(s);  utf8_repair(s);  utf8_decode_all(s, n, cps, offsets);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// The byte offset of the first invalid sequence, or npos when s is valid UTF-8.
inline size_t utf8_first_invalid(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        size_t start = i;
        if (utf8_next(s.data(), s.size(), i) == 0xFFFD && !(i - start == 3 && s.compare(start, 3, "\xEF\xBF\xBD") == 0)) return start;
    }
    return std::string::npos;
}

inline bool utf8_is_valid(const std::string& s) { return utf8_first_invalid(s) == std::string::npos; }

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

}  // namespace monocu
