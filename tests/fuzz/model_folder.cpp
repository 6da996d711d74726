// libFuzzer target: a whole model folder as the engines read it before the GPU: config.json, generation_config.json,
// tokenizer.json and model.safetensors (the input, split at NUL bytes, written to a scratch folder), through the
// config check, the generation config, the checkpoint's headers, the tokenizer and the chat template. Any folder is
// one UserError or a loadable one; never a crash or a hang. Built and run by `make fuzz`.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "host/model_types.h"
#include "host/safetensors.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

static void put(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string dir = "/tmp/monocu-fuzz-folder-" + std::to_string(getpid());
    mkdir(dir.c_str(), 0755);
    std::string all(reinterpret_cast<const char*>(data), size), parts[4];
    for (int i = 0, at = 0; i < 4; i++) {
        size_t nul = i < 3 ? all.find('\0', at) : std::string::npos;
        parts[i] = all.substr(at, nul == std::string::npos ? std::string::npos : nul - at);
        if (nul == std::string::npos) break;
        at = (int)nul + 1;
    }
    const char* names[4] = {"config.json", "generation_config.json", "tokenizer.json", "model.safetensors"};
    for (int i = 0; i < 4; i++) put(dir + "/" + names[i], parts[i]);
    try {
        monocu::load_checked_config(dir);
    } catch (const monocu::UserError&) {
    }
    try {
        monocu::load_generation_config(dir);
    } catch (const monocu::UserError&) {
    }
    try {
        monocu::Checkpoint ck = monocu::Checkpoint::open(dir);
        ck.unused();
    } catch (const monocu::UserError&) {
    }
    try {
        monocu::Tokenizer tok = monocu::Tokenizer::load(dir);
        tok.encode("hello world");
    } catch (const monocu::UserError&) {
    }
    try {
        monocu::ChatTemplate::load(dir);
    } catch (const monocu::UserError&) {
    }
    return 0;
}
