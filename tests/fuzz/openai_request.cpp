// libFuzzer target: an OpenAI API request body (server/openai_request.h) for both endpoints: any bytes give a request
// or an ApiError with a status and a message, never a crash, an out-of-bounds read, another exception or deep
// recursion. Built and run by `make fuzz`.
#include <cstdint>
#include <cstdlib>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string body(reinterpret_cast<const char*>(data), size);
    for (monocu::ApiEndpoint e : {monocu::ApiEndpoint::Chat, monocu::ApiEndpoint::Completions}) {
        try {
            monocu::ApiRequest r = monocu::parse_api_request(body, e);
            if (r.n < 1 || r.stop.size() > 4) std::abort();
            (void)r.messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        } catch (const monocu::ApiError& err) {
            if (err.status != 400 || err.message.empty()) std::abort();
            (void)monocu::api_error_json(err).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        }
    }
    return 0;
}
