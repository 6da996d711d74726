// libFuzzer target: config.json and generation_config.json (host/config.h, host/model_types.h): any bytes are
// either a config every engine may read, within limits, or one UserError; never a crash or a giant allocation.
// The input is split at its first NUL: config.json before it, generation_config.json after. Built and run by
// `make fuzz`.
#include <cstdint>
#include <cstring>

#include "host/model_types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string all(reinterpret_cast<const char*>(data), size);
    size_t nul = all.find('\0');
    std::string cfg = all.substr(0, nul), gen = nul == std::string::npos ? "" : all.substr(nul + 1);
    try {
        nlohmann::json f = nlohmann::json::parse(cfg, nullptr, false);
        if (!f.is_discarded() && f.is_object()) {
            const monocu::ModelType* t = f.contains("model_type") && f["model_type"].is_string()
                                             ? monocu::find_model_type(f["model_type"].get<std::string>()) : nullptr;
            monocu::ModelConfig c =
                monocu::parse_model_config("config.json", f, t ? nlohmann::json::parse(t->defaults) : nlohmann::json::object());
            monocu::check_model_config(c);
        }
    } catch (const monocu::UserError&) {
    }
    try {
        nlohmann::json g = nlohmann::json::parse(gen, nullptr, false);
        if (!g.is_discarded()) monocu::parse_generation_config("generation_config.json", g);
    } catch (const monocu::UserError&) {
    }
    return 0;
}
