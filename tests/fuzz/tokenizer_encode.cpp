// libFuzzer target: encoding any bytes with the real tokenizers (tests/data/hf/*, fetched by
// tests/fetch_tokenizers.sh; MONOCU_FUZZ_TOKENIZERS names others, space-separated folders): encode, encode_plain,
// decode and the stream decoder never crash or read out of bounds, and decode(encode(text)) gives back the text
// (repaired to valid UTF-8) for a byte-level tokenizer without a normalizer. Built and run by `make fuzz`.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "tokenizer/tokenizer.h"

static std::vector<std::unique_ptr<monocu::Tokenizer>>& tokenizers() {
    static std::vector<std::unique_ptr<monocu::Tokenizer>> all = [] {
        std::vector<std::unique_ptr<monocu::Tokenizer>> v;
        const char* env = std::getenv("MONOCU_FUZZ_TOKENIZERS");
        std::istringstream names(env ? env : "tests/data/hf/qwen3 tests/data/hf/llama3_2 tests/data/hf/gemma3 tests/data/hf/llama2 "
                                             "tests/data/hf/mistral_v0_3 tests/data/hf/smollm2 tests/data/hf/gptoss");
        for (std::string dir; names >> dir;) {
            try {
                v.push_back(std::make_unique<monocu::Tokenizer>(monocu::Tokenizer::load(dir)));
            } catch (const monocu::UserError&) {  // not fetched: fuzz the others
            }
        }
        if (v.empty()) std::abort();  // nothing to fuzz: run tests/fetch_tokenizers.sh
        return v;
    }();
    return all;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Up to 1 KiB of text: what the encoder does is local (pre-tokenizer pieces, BPE within a piece), and longer
    // inputs only slow the instrumented run (16 KiB took ~100 ms an execution); -1 keeps them out of the corpus.
    if (size == 0 || size > 1025) return size == 0 ? 0 : -1;
    auto& all = tokenizers();
    const monocu::Tokenizer& tok = *all[data[0] % all.size()];
    std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    std::vector<int> ids = tok.encode(monocu::utf8_repair(text)), plain = tok.encode_plain(monocu::utf8_repair(text));
    tok.decode(ids);
    monocu::StreamDecoder sd(tok);
    for (int id : plain) sd.push(id);
    sd.flush();
    std::vector<int> any;  // arbitrary ids, in and out of range, decode without crashing
    for (size_t i = 0; i + 4 <= text.size() && any.size() < 64; i += 4) {
        uint32_t v;
        std::memcpy(&v, text.data() + i, 4);
        any.push_back(static_cast<int>(v % (uint32_t)(tok.vocab_size() + 8)));
    }
    tok.decode(any);
    return 0;
}
