// host/prompt.h — reading a prompt from a file, as text or as token ids.
//
// Usage:
//   std::string text = read_text_file("prompt.txt");
//   std::vector<int> ids = read_ids_file("ids.txt", vocab);   // "1 2 3", "1,2,3" or "[1, 2, 3]"
// Errors name the file and the offending entry: not a number, outside [0, vocab), empty.
#pragma once

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "host/errors.h"
#include "host/files.h"

namespace monocu {

inline std::string read_text_file(const std::string& path) { return read_file_bounded(path, kTextMaxBytes); }

// Integers separated by white space or commas, optionally inside one pair of brackets.
inline std::vector<int> parse_ids(const std::string& text, const std::string& label, int vocab) {
    std::vector<int> ids;
    size_t i = 0, n = text.size();
    auto skip = [&] {
        while (i < n && (std::isspace(static_cast<unsigned char>(text[i])) || text[i] == ',')) i++;
    };
    skip();
    bool bracket = i < n && text[i] == '[';
    if (bracket) i++;
    for (skip(); i < n && !(bracket && text[i] == ']'); skip()) {
        size_t b = i;
        if (text[i] == '-' || text[i] == '+') i++;
        while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) i++;
        std::string tok = text.substr(b, i - b);
        if (tok.empty() || tok == "-" || tok == "+" || tok.size() > 11) {
            size_t e = text.find_first_of(" \t\r\n,]", b);
            die("%s: '%s' is not a token id", label.c_str(), text.substr(b, e == std::string::npos ? std::string::npos : e - b).c_str());
        }
        long long v = std::atoll(tok.c_str());
        if (v < 0 || v >= vocab) die("%s: token id %lld is outside the vocabulary [0, %d)", label.c_str(), v, vocab);
        ids.push_back(static_cast<int>(v));
        if (i < n && !std::isspace(static_cast<unsigned char>(text[i])) && text[i] != ',' && text[i] != ']')
            die("%s: unexpected character '%c' after token id %lld", label.c_str(), text[i], v);
    }
    if (bracket) {
        if (i >= n) die("%s: missing ']'", label.c_str());
        i++;
        skip();
        if (i < n) die("%s: text after ']'", label.c_str());
    }
    if (ids.empty()) die("%s: no token ids", label.c_str());
    return ids;
}

inline std::vector<int> read_ids_file(const std::string& path, int vocab) { return parse_ids(read_text_file(path), path, vocab); }

}  // namespace monocu
