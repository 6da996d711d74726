// OpenAI response bodies and server-sent events (server/openai_response.h), byte for byte in OpenAI's key order.
#include <doctest/doctest.h>

#include "server/openai_response.h"

using namespace monocu;

TEST_CASE("openai responses: chat completion, its stream and the usage chunk, as OpenAI writes them") {
    ApiResponseHead h{"chatcmpl-1", 1700000000, "m"};
    ojson msg = {{"role", "assistant"}, {"content", "Hi."}};
    CHECK(chat_completion(h, {ApiChoice{msg, "stop"}}, ApiUsage{12, 3}).dump() ==
          R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":)"
          R"({"role":"assistant","content":"Hi."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,)"
          R"("completion_tokens":3,"total_tokens":15}})");
    // n = 2: choices in order, their indices.
    ojson two = chat_completion(h, {ApiChoice{msg, "stop"}, ApiChoice{msg, "length"}}, ApiUsage{1, 2});
    CHECK(two["choices"][1]["index"] == 1);
    CHECK(two["choices"][1]["finish_reason"] == "length");
    CHECK(sse(chat_chunk(h, 0, ojson{{"role", "assistant"}, {"content", ""}}, nullptr)) ==
          "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"index\":0,"
          "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    CHECK(chat_chunk(h, 1, nullptr, "tool_calls").dump() ==
          R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":1,"delta":{},)"
          R"("logprobs":null,"finish_reason":"tool_calls"}]})");
    CHECK(usage_chunk(h, ApiUsage{12, 3}, true).dump() ==
          R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[],"usage":{"prompt_tokens":12,)"
          R"("completion_tokens":3,"total_tokens":15}})");
    CHECK(sse_done() == "data: [DONE]\n\n");
    // Generated text that is not valid UTF-8 (a token cut inside a character) cannot break the stream.
    CHECK(sse(chat_chunk(h, 0, ojson{{"content", std::string("a\xE2\x82")}}, nullptr)).find("a\xEF\xBF\xBD") != std::string::npos);
}

TEST_CASE("openai responses: text completion and its stream") {
    ApiResponseHead h{"cmpl-7", 5, "m"};
    CHECK(text_completion(h, {ApiChoice{"Once upon", "length"}}, ApiUsage{2, 2}).dump() ==
          R"({"id":"cmpl-7","object":"text_completion","created":5,"model":"m","choices":[{"text":"Once upon","index":0,"logprobs":null,)"
          R"("finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}})");
    CHECK(text_chunk(h, 0, " a", nullptr).dump() ==
          R"({"id":"cmpl-7","object":"text_completion","created":5,"model":"m","choices":[{"text":" a","index":0,"logprobs":null,)"
          R"("finish_reason":null}]})");
    CHECK(usage_chunk(h, ApiUsage{2, 2}, false)["object"] == "text_completion");
}
