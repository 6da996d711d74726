// OpenAI request bodies (server/openai_request.h): what a client sends is read field by field, and anything wrong is
// one OpenAI-shaped error naming the field.
#include <doctest/doctest.h>

#include <string>

#include "server/openai_request.h"

using namespace monocu;

static ApiError error_of(const std::string& body, ApiEndpoint e = ApiEndpoint::Chat) {
    try {
        parse_api_request(body, e);
    } catch (const ApiError& err) {
        return err;
    }
    ApiError none;
    none.status = 0;
    return none;
}

TEST_CASE("openai requests: a full chat request reads as sent") {
    std::string body = R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": null, "tool_calls": []},
        {"role": "tool", "content": "42", "tool_call_id": "c1"}],
        "max_completion_tokens": 64, "max_tokens": 9, "temperature": 0.2, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7,
        "stop": ["\n\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.5, "logprobs": true, "top_logprobs": 3, "n": 2,
        "stream": true, "stream_options": {"include_usage": true}, "response_format": {"type": "text"},
        "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {}}}}],
        "tool_choice": {"type": "function", "function": {"name": "calc"}}, "user": "ignored", "some_new_field": 1})";
    ApiRequest r = parse_api_request(body, ApiEndpoint::Chat);
    CHECK(r.model == "m");
    CHECK(r.messages.size() == 4);
    CHECK(r.messages[1]["content"][0]["text"] == "hi");
    CHECK(r.max_tokens == 64);  // max_completion_tokens wins
    CHECK(r.temperature == doctest::Approx(0.2));
    CHECK(r.top_p == doctest::Approx(0.9));
    CHECK(r.top_k == 40);
    CHECK(r.min_p == doctest::Approx(0.05));
    CHECK(r.seed_set);
    CHECK(r.seed == 7);
    CHECK(r.stop == std::vector<std::string>{"\n\n", "END"});
    CHECK(r.presence_penalty == 0.5);
    CHECK(r.frequency_penalty == -0.5);
    CHECK(r.logprobs);
    CHECK(r.top_logprobs == 3);
    CHECK(r.n == 2);
    CHECK(r.stream);
    CHECK(r.include_usage);
    CHECK(r.tools.size() == 1);
    CHECK(r.tool_choice == "calc");
    // Defaults: OpenAI's.
    ApiRequest d = parse_api_request(R"({"messages": [{"role": "user", "content": "x"}]})", ApiEndpoint::Chat);
    CHECK(d.max_tokens == -1);
    CHECK(d.temperature == 1.0);
    CHECK(d.top_p == 1.0);
    CHECK(d.n == 1);
    CHECK_FALSE(d.stream);
    CHECK(d.tools.is_null());
    CHECK(d.tool_choice == "auto");
    CHECK(parse_api_request(R"({"messages": [{"role": "user", "content": "x"}], "stop": "###"})", ApiEndpoint::Chat).stop ==
          std::vector<std::string>{"###"});
}

TEST_CASE("openai requests: completions take a string, one string in a list, or token ids") {
    CHECK(parse_api_request(R"({"prompt": "Once"})", ApiEndpoint::Completions).prompt == "Once");
    CHECK(parse_api_request(R"({"prompt": ["Once"]})", ApiEndpoint::Completions).prompt == "Once");
    ApiRequest ids = parse_api_request(R"({"prompt": [1, 2, 3], "logprobs": 2})", ApiEndpoint::Completions);
    CHECK(ids.prompt_is_ids);
    CHECK(ids.prompt_ids == std::vector<int>{1, 2, 3});
    CHECK(ids.logprobs);
    CHECK(ids.top_logprobs == 2);
    CHECK(error_of(R"({"prompt": ["a", "b"]})", ApiEndpoint::Completions).param == "prompt");
    CHECK(error_of(R"({"prompt": ""})", ApiEndpoint::Completions).param == "prompt");
    CHECK(error_of(R"({"prompt": [1, -2]})", ApiEndpoint::Completions).param == "prompt");
    CHECK(error_of(R"({"prompt": [1, 2.5]})", ApiEndpoint::Completions).param == "prompt");
    CHECK(error_of(R"({"max_tokens": 3})", ApiEndpoint::Completions).param == "prompt");
}

TEST_CASE("openai requests: every wrong field is a 400 naming it, in OpenAI's error shape") {
    struct Case {
        const char* body;
        const char* param;
    };
    const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
    const Case cases[] = {
        {"{}", "messages"},
        {R"({"messages": []})", "messages"},
        {R"({"messages": "hi"})", "messages"},
        {R"({"messages": [1]})", "messages[0]"},
        {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
        {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
        {R"({"messages": [{"role": 5, "content": "x"}]})", "messages[0].role"},
        {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})", "messages[0].content[0]"},
        {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text"},
        {R"({"messages": [{"role": "user", "content": [{"type": 7}]}]})", "messages[0].content[0]"},
        {R"({"messages": [{"role": "user", "content": "x", "name": 1}]})", "messages[0].name"},
        {R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": {}}]})", "messages[1].content"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.body);
        ApiError e = error_of(c.body);
        CHECK(e.status == 400);
        CHECK(e.param == c.param);
        CHECK_FALSE(e.message.empty());
    }
    const Case fields[] = {
        {R"("max_tokens": 0)", "max_tokens"},          {R"("max_tokens": "9")", "max_tokens"},
        {R"("max_tokens": 1.5)", "max_tokens"},        {R"("max_completion_tokens": -1)", "max_completion_tokens"},
        {R"("temperature": 2.5)", "temperature"},      {R"("temperature": "hot")", "temperature"},
        {R"("top_p": -0.1)", "top_p"},                 {R"("min_p": 2)", "min_p"},
        {R"("top_k": -1)", "top_k"},                   {R"("presence_penalty": 3)", "presence_penalty"},
        {R"("frequency_penalty": -3)", "frequency_penalty"}, {R"("repetition_penalty": 0)", "repetition_penalty"},
        {R"("seed": -1)", "seed"},                     {R"("seed": 1e300)", "seed"},
        {R"("n": 0)", "n"},                            {R"("n": 1000)", "n"},
        {R"("stream": "yes")", "stream"},              {R"("stream_options": {"include_usage": true})", "stream_options"},
        {R"("stream": true, "stream_options": 1)", "stream_options"},
        {R"("stream": true, "stream_options": {"include_usage": 1})", "stream_options.include_usage"},
        {R"("stop": 5)", "stop"},                      {R"("stop": ["a", 1])", "stop"},
        {R"("stop": ["a", "b", "c", "d", "e"])", "stop"}, {R"("stop": "")", "stop"},
        {R"("logprobs": 1)", "logprobs"},              {R"("top_logprobs": 3)", "top_logprobs"},
        {R"("logprobs": true, "top_logprobs": 21)", "top_logprobs"},
        {R"("response_format": {"type": "json_object"})", "response_format"},
        {R"("response_format": {"type": "json_schema", "json_schema": {}})", "response_format"},
        {R"("response_format": "json")", "response_format"},
        {R"("tools": {})", "tools"},                   {R"("tools": [{"type": "function"}])", "tools[0]"},
        {R"("tools": [{"type": 3, "function": {}}])", "tools[0]"},
        {R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools[0].function.name"},
        {R"("tool_choice": "sometimes")", "tool_choice"}, {R"("tool_choice": "required")", "tool_choice"},
        {R"("tool_choice": {"type": "function", "function": {"name": "nope"}})", "tool_choice"},
        {R"("tool_choice": 1)", "tool_choice"},        {R"("model": 3)", "model"},
    };
    for (const Case& c : fields) {
        std::string body = "{" + m + ", " + c.body + "}";
        CAPTURE(body);
        ApiError e = error_of(body);
        CHECK(e.status == 400);
        CHECK(e.param == c.param);
    }
    // Not JSON, not an object, too deep: no param.
    for (const char* b : {"", "{", "[1, 2]", "null", "\"x\"", "{\"messages\": [}"}) {
        CAPTURE(b);
        ApiError e = error_of(b);
        CHECK(e.status == 400);
        CHECK(e.param.empty());
    }
    CHECK(error_of(std::string(100, '[') + std::string(100, ']')).message.find("64 levels") != std::string::npos);
    CHECK(error_of("{\"a\": \"" + std::string(100, '[') + "\", " + m + "}").status == 0);  // brackets inside a string do not count
    // The error body.
    ApiError e = error_of(R"({"messages": [{"role": "user", "content": "x"}], "n": 0})");
    nlohmann::ordered_json j = api_error_json(e);
    CHECK(j["error"]["type"] == "invalid_request_error");
    CHECK(j["error"]["param"] == "n");
    CHECK(j["error"]["code"].is_null());
    CHECK(j["error"]["message"].get<std::string>().find("between 1 and 128") != std::string::npos);
    CHECK(api_error_json(error_of("{")).dump() ==
          R"({"error":{"message":"the request body is not valid JSON","type":"invalid_request_error","param":null,"code":null}})");
}

// The sampling fields alone (a batch file's line reads them too) and how they lay over the defaults: a field given wins,
// one not given keeps the default's value; the penalties are OpenAI's own (0 unless given); the seed only where given.
TEST_CASE("openai requests: sampling fields over the defaults") {
    SamplingParams d;
    d.temperature = 0.7f, d.top_k = 20, d.top_p = 0.8f, d.min_p = 0.1f, d.repetition_penalty = 1.1f, d.seed = 99;
    d.presence_penalty = 0.3f;  // (a flag's presence penalty: a request that does not give one has OpenAI's 0)
    ApiRequest none;
    parse_sampling_fields(nlohmann::ordered_json::parse(R"({"prompt": "x"})"), none);
    SamplingParams a = request_sampling(none, d);
    CHECK(a.temperature == 0.7f);
    CHECK(a.top_k == 20);
    CHECK(a.top_p == 0.8f);
    CHECK(a.min_p == 0.1f);
    CHECK(a.repetition_penalty == 1.1f);
    CHECK(a.presence_penalty == 0.f);
    CHECK(a.seed == 99);
    CHECK(none.stop.empty());

    ApiRequest all;
    parse_sampling_fields(nlohmann::ordered_json::parse(R"({"temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.2,
        "repetition_penalty": 1.3, "presence_penalty": 1, "frequency_penalty": -1, "seed": 12, "stop": "##"})"), all);
    SamplingParams b = request_sampling(all, d);
    CHECK(b.temperature == 0.f);
    CHECK(b.top_k == 5);
    CHECK(b.top_p == 0.5f);
    CHECK(b.min_p == 0.2f);
    CHECK(b.repetition_penalty == doctest::Approx(1.3f));
    CHECK(b.presence_penalty == 1.f);
    CHECK(b.frequency_penalty == -1.f);
    CHECK(b.seed == 12);
    REQUIRE(all.stop.size() == 1);
    CHECK(all.stop[0] == "##");

    auto message = [](const char* body) {
        ApiRequest r;
        try {
            parse_sampling_fields(nlohmann::ordered_json::parse(body), r);
        } catch (const ApiError& e) {
            return e.param + ": " + e.message;
        }
        return std::string("accepted");
    };
    CHECK(message(R"({"temperature": 3})") == "temperature: 'temperature' must be between 0.0 and 2.0, got 3");
    CHECK(message(R"({"top_k": -1})") == "top_k: 'top_k' must be between 0 and 1073741824, got -1");
    CHECK(message(R"({"seed": "7"})") == "seed: 'seed' must be an integer, not a string");
    CHECK(message(R"({"stop": ["a", ""]})") == "stop: 'stop' strings must not be empty");
    CHECK(message(R"({"stop": ["a", "b", "c", "d", "e"]})") == "stop: 'stop' takes at most 4 strings");
    CHECK(message(R"({"stop": 5})") == "stop: 'stop' must be a string or an array of strings, not a number");
    CHECK(message(R"({"temperature": null, "stop": null})") == "accepted");  // null: not given
}
