// libFuzzer target: the Jinja interpreter (common/tokenizer/jinja.h) must turn any template text into
// output or one UserError, never crash, hang, recurse without end or read out of bounds. Each input is a
// template, parsed and rendered with a small chat context under tight limits (so that a slow input is a
// "too many steps" error within milliseconds, not a timeout). Built and run by `make fuzz-jinja`, seeded
// with the real templates in tests/data/templates.
#include <cstdint>
#include <string>

#include "tokenizer/jinja.h"

using monocu::jinja::ojson;

static const ojson& context() {
    static const ojson ctx = ojson::parse(R"({
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi {{ x }} ü"},
                     {"role": "assistant", "content": "", "reasoning_content": "think",
                      "tool_calls": [{"id": "call12345", "type": "function",
                                      "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 1.5]}}}]},
                     {"role": "tool", "tool_call_id": "call12345", "content": "{\"ok\": 1}"},
                     {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}],
        "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                   "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                  "b": {"type": "array", "items": {"type": ["string", "null"]}}}, "required": ["a"]}}}],
        "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false,
        "documents": null
    })");
    return ctx;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    monocu::jinja::Options o;
    o.max_steps = 200000;
    o.max_output = 1u << 20;
    o.max_list = 100000;
    try {
        std::string text(reinterpret_cast<const char*>(data), size);
        monocu::jinja::Template::parse(text, "fuzz.jinja").render(context(), o);
    } catch (const monocu::UserError&) {
    }
    return 0;
}
