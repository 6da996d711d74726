// tok_test_util.h — shared helpers for the tokenizer and chat tests: test data paths, file reading,
// and "the message of the UserError this throws".
#pragma once
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "host/errors.h"
#include "tokenizer/tokenizer.h"

namespace tok_test {

// The fetched HF tokenizer files (tests/fetch_tokenizers.sh); tests run from the repo root.
inline std::string hf_dir(const std::string& name) { return "tests/data/hf/" + name; }
inline bool have_hf(const std::string& name) { return std::ifstream(hf_dir(name) + "/tokenizer.json").good(); }

inline bool read_text(const std::string& path, std::string& out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
}

// The message of the monocu::UserError that f throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const monocu::UserError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace tok_test
