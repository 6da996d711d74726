// libFuzzer target: tokenizer.json (+ tokenizer_config.json after a NUL byte) loading, then encoding and decoding
// with whatever loaded (tokenizer/tokenizer.h): one UserError or a working tokenizer; never a crash, a hang or an
// out-of-bounds read. Built and run by `make fuzz`, seeded with tests/fuzz/seeds/tokenizer.
#include <cstdint>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string all(reinterpret_cast<const char*>(data), size);
    size_t nul = all.find('\0');
    std::string json = all.substr(0, nul), config = nul == std::string::npos ? "{}" : all.substr(nul + 1);
    try {
        monocu::Tokenizer tok = monocu::Tokenizer::from_json_text(json, config, "fuzz tokenizer.json");
        for (const std::string& text : {std::string("Hello, world! 123 ñ 日本 \xF0\x9F\x98\x80  x"), monocu::utf8_repair(json.substr(0, 64))}) {
            std::vector<int> ids = tok.encode(text), plain = tok.encode_plain(text);
            tok.decode(ids);
            monocu::StreamDecoder sd(tok);
            for (int id : plain) sd.push(id);
            sd.flush();
        }
    } catch (const monocu::UserError&) {
    }
    return 0;
}
