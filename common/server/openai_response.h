// server/openai_response.h — the OpenAI API's response bodies and server-sent events, in the shapes and key order
// OpenAI sends them (host only; the server puts them on the wire).
//
// Usage:
//   ApiResponseHead h{"chatcmpl-...", created_unix_seconds, "model-name"};
//   chat_completion(h, {ApiChoice{message, "stop"}}, ApiUsage{12, 40})          // "chat.completion"
//   sse(chat_chunk(h, 0, delta, nullptr)) ... sse(chat_chunk(h, 0, {}, "stop"))  // "chat.completion.chunk" events
//   sse(usage_chunk(h, ApiUsage{12, 40}, true)) + sse_done()                     // stream_options.include_usage; "data: [DONE]"
//   text_completion(h, {ApiChoice{"text", "length"}}, usage), text_chunk(h, 0, "text", nullptr)   // /v1/completions
// A chat message or delta is built by the caller (tokenizer/chat_reply.h's reply_message gives role, content,
// reasoning_content and tool_calls); a choice's logprobs object, when asked for, likewise.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace monocu {

using ojson = nlohmann::ordered_json;

struct ApiResponseHead {
    std::string id;      // "chatcmpl-..." / "cmpl-..."
    long created = 0;    // unix seconds
    std::string model;
};

struct ApiUsage {
    int prompt_tokens = 0, completion_tokens = 0;
};

struct ApiChoice {
    ojson message;                   // chat: the assistant message; completions: the text (a string)
    std::string finish_reason;       // stop | length | tool_calls | content_filter
    ojson logprobs = nullptr;        // null unless asked for
};

inline ojson usage_json(const ApiUsage& u) {
    return ojson{{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens}, {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

inline ojson response_head(const ApiResponseHead& h, const char* object) {
    return ojson{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

inline ojson chat_completion(const ApiResponseHead& h, const std::vector<ApiChoice>& choices, const ApiUsage& u) {
    ojson r = response_head(h, "chat.completion");
    r["choices"] = ojson::array();
    for (size_t i = 0; i < choices.size(); i++)
        r["choices"].push_back(ojson{{"index", i}, {"message", choices[i].message}, {"logprobs", choices[i].logprobs},
                                     {"finish_reason", choices[i].finish_reason}});
    r["usage"] = usage_json(u);
    return r;
}

// One streamed piece of choice `index`: its delta (role on the first, then content / reasoning_content / tool_calls),
// and on the last an empty delta with the finish reason (finish_reason null until then).
inline ojson chat_chunk(const ApiResponseHead& h, int index, const ojson& delta, const char* finish_reason, const ojson& logprobs = nullptr) {
    ojson r = response_head(h, "chat.completion.chunk");
    r["choices"] = ojson::array({ojson{{"index", index}, {"delta", delta.is_null() ? ojson::object() : delta}, {"logprobs", logprobs},
                                       {"finish_reason", finish_reason ? ojson(finish_reason) : ojson()}}});
    return r;
}

// With stream_options.include_usage: the last chunk before [DONE], no choices, the usage; every other chunk then
// carries "usage": null (chat only: OpenAI's completions stream has the field the same way).
inline ojson usage_chunk(const ApiResponseHead& h, const ApiUsage& u, bool chat) {
    ojson r = response_head(h, chat ? "chat.completion.chunk" : "text_completion");
    r["choices"] = ojson::array();
    r["usage"] = usage_json(u);
    return r;
}

inline ojson text_completion(const ApiResponseHead& h, const std::vector<ApiChoice>& choices, const ApiUsage& u) {
    ojson r = response_head(h, "text_completion");
    r["choices"] = ojson::array();
    for (size_t i = 0; i < choices.size(); i++)
        r["choices"].push_back(ojson{{"text", choices[i].message}, {"index", i}, {"logprobs", choices[i].logprobs},
                                     {"finish_reason", choices[i].finish_reason}});
    r["usage"] = usage_json(u);
    return r;
}

inline ojson text_chunk(const ApiResponseHead& h, int index, const std::string& text, const char* finish_reason, const ojson& logprobs = nullptr) {
    ojson r = response_head(h, "text_completion");
    r["choices"] = ojson::array({ojson{{"text", text}, {"index", index}, {"logprobs", logprobs},
                                       {"finish_reason", finish_reason ? ojson(finish_reason) : ojson()}}});
    return r;
}

// Logprobs. The server keeps each token's in chat's shape, {"token", "logprob", "bytes", "top_logprobs": [{"token",
// "logprob", "bytes"}]}; chat returns them as {"content": [...], "refusal": null}, completions in the legacy shape
// below: the tokens, their logprobs, a {token: logprob} object per position and each token's offset in the text
// (`offset`: the text's length before these tokens; moved past them).
inline ojson chat_logprobs(const ojson& entries) { return ojson{{"content", entries}, {"refusal", nullptr}}; }

inline ojson completion_logprobs(const ojson& entries, size_t& offset) {
    ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
    for (const auto& e : entries) {
        tokens.push_back(e["token"]);
        lps.push_back(e["logprob"]);
        ojson top = ojson::object();
        for (const auto& t : e["top_logprobs"]) top[t["token"].get<std::string>()] = t["logprob"];
        tops.push_back(top);
        offsets.push_back(offset);
        offset += e["bytes"].size();
    }
    return ojson{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// One server-sent event carrying a JSON body (invalid UTF-8 in generated text becomes U+FFFD rather than an
// exception), and the stream's end.
inline std::string sse(const ojson& body) {
    return "data: " + body.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}
inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace monocu
