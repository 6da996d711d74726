// hostile_safetensors.h — a set of broken safetensors files, each with the message it must produce.
// Used by tests/test_safetensors.cpp (parser and build/tools/inspect) and as the fuzzer's seed corpus.
#pragma once

#include <string>
#include <vector>

#include "test_util.h"

namespace monocu_test {

struct HostileFile {
    const char* name;      // file name, also the test's label
    std::string bytes;     // file content
    const char* expected;  // substring the error message must contain
};

// Two valid tensors: "a" F32 [2, 3] at [0, 24) and "b" BF16 [4] at [24, 32).
inline std::string valid_header() {
    return R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
           R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";
}
inline std::string valid_safetensors() { return safetensors_bytes(valid_header(), random_bytes(32, 1)); }

inline std::vector<HostileFile> hostile_safetensors() {
    std::vector<HostileFile> v;
    const std::string data32 = random_bytes(32, 2);
    auto one = [](const std::string& entry) { return std::string(R"({"t":)") + entry + "}"; };
    std::string valid = valid_safetensors();

    v.push_back({"empty.safetensors", "", "too short for the 8-byte header length"});
    v.push_back({"short.safetensors", std::string("\x05\x00\x00", 3), "too short for the 8-byte header length"});
    v.push_back({"truncated.safetensors", valid.substr(0, valid.size() - 5), "past the 27-byte data region"});
    {
        std::string s = valid;
        s[0] = static_cast<char>(0xF0);  // claims a header far longer than the file
        s[1] = static_cast<char>(0x0F);
        v.push_back({"header_past_eof.safetensors", s, "runs past the end"});
    }
    {
        std::string s(8, '\0');
        s[4] = 0x10;  // 2^36 bytes
        v.push_back({"header_too_large.safetensors", s + "{}", "exceeds the 100 MB limit"});
    }
    v.push_back({"header_not_object.safetensors", safetensors_bytes("[1, 2, 3]", ""), "does not start with '{'"});
    v.push_back({"header_bad_json.safetensors", safetensors_bytes(R"({"a": {"dtype": )", ""), "not valid JSON"});
    v.push_back({"header_bad_utf8.safetensors", safetensors_bytes("{\"\xC3\x28\":1}", ""), "not valid UTF-8"});
    v.push_back({"offsets_out_of_range.safetensors",
                 safetensors_bytes(one(R"({"dtype":"U8","shape":[64],"data_offsets":[0,64]})"), data32),
                 "past the 32-byte data region"});
    v.push_back({"overlap.safetensors",
                 safetensors_bytes(R"({"a":{"dtype":"U8","shape":[24],"data_offsets":[0,24]},)"
                                   R"("b":{"dtype":"U8","shape":[16],"data_offsets":[16,32]}})",
                                   data32),
                 "overlaps the tensor before it"});
    v.push_back({"gap.safetensors",
                 safetensors_bytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                   R"("b":{"dtype":"U8","shape":[16],"data_offsets":[16,32]}})",
                                   data32),
                 "gap of 8 unclaimed bytes"});
    v.push_back({"trailing_bytes.safetensors",
                 safetensors_bytes(one(R"({"dtype":"U8","shape":[16],"data_offsets":[0,16]})"), data32),
                 "16 bytes after the last tensor"});
    v.push_back({"shape_overflow.safetensors",
                 safetensors_bytes(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,32]})"), data32),
                 "overflows a 64-bit element count"});
    v.push_back({"bytes_overflow.safetensors",
                 safetensors_bytes(one(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,32]})"), data32),
                 "byte size of shape"});
    v.push_back({"size_mismatch.safetensors",
                 safetensors_bytes(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,32]})"), data32),
                 "needs 16 bytes but data_offsets span 32"});
    v.push_back({"unknown_dtype.safetensors",
                 safetensors_bytes(one(R"({"dtype":"Q4_K","shape":[32],"data_offsets":[0,32]})"), data32),
                 "unknown dtype 'Q4_K'"});
    v.push_back({"duplicate_name.safetensors",
                 safetensors_bytes(R"({"t":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                                   R"("t":{"dtype":"U8","shape":[16],"data_offsets":[16,32]}})",
                                   data32),
                 "appears twice"});
    v.push_back({"negative_shape.safetensors",
                 safetensors_bytes(one(R"({"dtype":"U8","shape":[-32],"data_offsets":[0,32]})"), data32),
                 "must be a non-negative integer"});
    v.push_back({"float_offset.safetensors",
                 safetensors_bytes(one(R"({"dtype":"U8","shape":[32],"data_offsets":[0,32.5]})"), data32),
                 "must be a non-negative integer"});
    v.push_back({"reversed_offsets.safetensors",
                 safetensors_bytes(one(R"({"dtype":"U8","shape":[0],"data_offsets":[32,0]})"), data32),
                 "is before begin"});
    v.push_back({"missing_offsets.safetensors", safetensors_bytes(one(R"({"dtype":"U8","shape":[32]})"), data32),
                 "missing 'data_offsets'"});
    v.push_back({"entry_not_object.safetensors", safetensors_bytes(one("17"), data32), "entry is not a JSON object"});
    v.push_back({"metadata_not_strings.safetensors",
                 safetensors_bytes(R"({"__metadata__":{"n":3},"t":{"dtype":"U8","shape":[32],"data_offsets":[0,32]}})", data32),
                 "__metadata__ value for 'n' is not a string"});
    return v;
}

}  // namespace monocu_test
