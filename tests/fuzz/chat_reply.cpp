// libFuzzer target: splitting a model's output into content, reasoning and tool calls (tokenizer/chat_reply.h)
// for every format: any bytes parse without a crash, an out-of-bounds read or unbounded recursion, every call
// found has a name and arguments that are a JSON object, and the OpenAI message builds. Built and run by `make fuzz`.
#include <cstdint>
#include <cstdlib>

#include "tokenizer/chat_reply.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    using monocu::ReplyFormat;
    static const ReplyFormat formats[] = {ReplyFormat::Plain, ReplyFormat::Hermes, ReplyFormat::Llama3,
                                          ReplyFormat::Mistral, ReplyFormat::Harmony, ReplyFormat::Lfm2};
    ReplyFormat f = formats[data[0] % 6];
    bool opened = data[0] & 0x80;
    std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    monocu::ChatReply r = monocu::parse_reply(text, f, opened, size);
    (void)monocu::reply_in_reasoning(text, f, opened);
    for (const monocu::ToolCall& c : r.tool_calls) {
        if (c.name.empty() || c.id.empty()) std::abort();
        nlohmann::ordered_json args = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
        if (args.is_discarded() || !args.is_object()) std::abort();
    }
    (void)monocu::reply_message(r).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    (void)monocu::reply_template_message(r, f);
    return 0;
}
