// server/openai_request.h — an OpenAI API request body, checked field by field, as the server's handlers take it
// (host only; the HTTP layer and the batched core come with the server issue).
//
// Usage:
//   try {
//       ApiRequest r = parse_api_request(body, ApiEndpoint::Chat);      // /v1/chat/completions (or Completions)
//       ... r.messages, r.max_tokens, r.sampling ..., r.stop, r.stream ...
//   } catch (const ApiError& e) {
//       reply(e.status, api_error_json(e));                             // {"error": {"message", "type", "param", "code"}}
//   }
//
// What is refused, in OpenAI's words where it has them: a body that is not a JSON object (400), a field of the wrong
// type or out of its range (400, `param` naming it), a request for what the server does not do (`response_format`
// json_object / json_schema, several prompts in one completions request, parts other than text: 400 with the field
// named). Unknown fields are ignored, as OpenAI's API ignores fields it does not know. Nesting deeper than 64 levels
// is refused before parsing.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/sampling_params.h"
#include "tokenizer/chat_reply.h"

namespace monocu {

enum class ApiEndpoint { Chat, Completions };

struct ApiError {
    int status = 400;
    std::string message, type = "invalid_request_error", param, code;
};

// OpenAI's error body; param and code are null when empty.
inline nlohmann::ordered_json api_error_json(const ApiError& e) {
    nlohmann::ordered_json err;
    err["message"] = e.message;
    err["type"] = e.type;
    err["param"] = e.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.param);
    err["code"] = e.code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.code);
    return nlohmann::ordered_json{{"error", err}};
}

struct ApiRequest {
    ApiEndpoint endpoint = ApiEndpoint::Chat;
    std::string model;                      // may be empty: the one model served
    nlohmann::ordered_json messages;        // chat: the messages as sent (the chat template reads them)
    std::string prompt;                     // completions: text ...
    std::vector<int> prompt_ids;            // ... or token ids
    bool prompt_is_ids = false;
    int max_tokens = -1;                    // max_tokens / max_completion_tokens; -1: up to the context
    double temperature = 1.0, top_p = 1.0, min_p = 0.0;
    int top_k = 0;                          // 0: off (an extension, as llama-server takes it)
    double presence_penalty = 0.0, frequency_penalty = 0.0, repetition_penalty = 1.0;
    // Which sampling fields the request gave (the server takes its own defaults, the checkpoint's generation_config,
    // for the others).
    bool temperature_set = false, top_p_set = false, min_p_set = false, top_k_set = false, repetition_penalty_set = false;
    uint64_t seed = 0;
    bool seed_set = false;
    std::vector<std::string> stop;          // up to 4, none empty
    bool logprobs = false;
    int top_logprobs = 0;                   // 0 .. 20 (chat); completions' logprobs is the count itself
    int n = 1;
    bool stream = false, include_usage = false;
    nlohmann::ordered_json tools;           // chat: function schemas, as sent (null when none)
    std::string tool_choice = "auto";       // auto | none | required | a function's name
};

namespace api_detail {

[[noreturn]] inline void bad(const std::string& param, const std::string& message, int status = 400) {
    ApiError e;
    e.status = status, e.param = param, e.message = message;
    throw e;
}

inline const char* type_name(const nlohmann::ordered_json& v) {
    return v.is_null() ? "null" : v.is_boolean() ? "a boolean" : v.is_number() ? "a number" : v.is_string() ? "a string"
                                  : v.is_array() ? "an array" : "an object";
}

inline double number(const nlohmann::ordered_json& v, const char* param, double lo, double hi) {
    if (!v.is_number()) bad(param, std::string("'") + param + "' must be a number, not " + type_name(v));
    double x = v.get<double>();
    if (!(x >= lo && x <= hi))
        bad(param, std::string("'") + param + "' must be between " + nlohmann::json(lo).dump() + " and " + nlohmann::json(hi).dump() +
                       ", got " + v.dump());
    return x;
}

inline long integer(const nlohmann::ordered_json& v, const char* param, long lo, long hi) {
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 9e15))
        bad(param, std::string("'") + param + "' must be an integer, not " + (v.is_number() ? v.dump() : type_name(v)));
    double x = v.get<double>();
    if (!(x >= (double)lo && x <= (double)hi))
        bad(param, std::string("'") + param + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v.dump());
    return (long)x;
}

inline bool boolean(const nlohmann::ordered_json& v, const char* param) {
    if (!v.is_boolean()) bad(param, std::string("'") + param + "' must be a boolean, not " + type_name(v));
    return v.get<bool>();
}

inline std::string string(const nlohmann::ordered_json& v, const char* param) {
    if (!v.is_string()) bad(param, std::string("'") + param + "' must be a string, not " + type_name(v));
    return v.get<std::string>();
}

// A chat message: an object with a known role, and content that is a string, an array of text parts, or null (an
// assistant turn that only calls tools).
inline void check_message(const nlohmann::ordered_json& m, size_t i) {
    std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(at, "'" + at + "' must be an object, not " + type_name(m));
    if (!m.contains("role")) bad(at + ".role", "'" + at + "' has no 'role'");
    std::string role = string(m["role"], (at + ".role").c_str());
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
        bad(at + ".role", "'" + at + ".role' must be one of system, developer, user, assistant, tool; got '" + role + "'");
    if (m.contains("content")) {
        const auto& c = m["content"];
        if (c.is_array()) {
            for (size_t j = 0; j < c.size(); j++) {
                std::string pj = at + ".content[" + std::to_string(j) + "]";
                if (!c[j].is_object() || !c[j].contains("type") || !c[j]["type"].is_string())
                    bad(pj, "'" + pj + "' must be an object with a 'type'");
                if (c[j]["type"] != "text") bad(pj, "'" + pj + "': only text parts are supported, not '" + c[j]["type"].get<std::string>() + "'");
                if (!c[j].contains("text") || !c[j]["text"].is_string()) bad(pj + ".text", "'" + pj + ".text' must be a string");
            }
        } else if (!c.is_string() && !c.is_null()) {
            bad(at + ".content", "'" + at + ".content' must be a string, an array of text parts or null, not " + type_name(c));
        }
    } else if (role != "assistant") {
        bad(at + ".content", "'" + at + "' has no 'content'");
    }
    if (m.contains("name") && !m["name"].is_string()) bad(at + ".name", "'" + at + ".name' must be a string");
    if (m.contains("tool_calls") && !m["tool_calls"].is_array()) bad(at + ".tool_calls", "'" + at + ".tool_calls' must be an array");
}

}  // namespace api_detail

// The fields that choose tokens, as a request or a batch file's line gives them (throws ApiError): temperature, top_p,
// min_p, top_k, the three penalties, seed, stop.
inline void parse_sampling_fields(const nlohmann::ordered_json& j, ApiRequest& r) {
    using namespace api_detail;
    auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
    if (has("temperature")) r.temperature = number(j["temperature"], "temperature", 0, 2), r.temperature_set = true;
    if (has("top_p")) r.top_p = number(j["top_p"], "top_p", 0, 1), r.top_p_set = true;
    if (has("min_p")) r.min_p = number(j["min_p"], "min_p", 0, 1), r.min_p_set = true;
    if (has("top_k")) r.top_k = (int)integer(j["top_k"], "top_k", 0, 1 << 30), r.top_k_set = true;
    if (has("presence_penalty")) r.presence_penalty = number(j["presence_penalty"], "presence_penalty", -2, 2);
    if (has("frequency_penalty")) r.frequency_penalty = number(j["frequency_penalty"], "frequency_penalty", -2, 2);
    if (has("repetition_penalty"))
        r.repetition_penalty = number(j["repetition_penalty"], "repetition_penalty", 0.001, 100), r.repetition_penalty_set = true;
    if (has("seed")) r.seed = (uint64_t)integer(j["seed"], "seed", 0, (1L << 53)), r.seed_set = true;
    if (has("stop")) {
        const auto& s = j["stop"];
        if (s.is_string()) r.stop.push_back(s.get<std::string>());
        else if (s.is_array()) {
            if (s.size() > 4) bad("stop", "'stop' takes at most 4 strings");
            for (const auto& x : s) r.stop.push_back(string(x, "stop"));
        } else bad("stop", std::string("'stop' must be a string or an array of strings, not ") + type_name(s));
        for (const std::string& x : r.stop)
            if (x.empty()) bad("stop", "'stop' strings must not be empty");
    }
}

// The request's settings over the defaults (the flags' and generation_config.json's) for the fields it does not give;
// its seed where it gives one (else the caller's).
inline SamplingParams request_sampling(const ApiRequest& r, SamplingParams p) {
    if (r.temperature_set) p.temperature = (float)r.temperature;
    if (r.top_p_set) p.top_p = (float)r.top_p;
    if (r.top_k_set) p.top_k = r.top_k;
    if (r.min_p_set) p.min_p = (float)r.min_p;
    if (r.repetition_penalty_set) p.repetition_penalty = (float)r.repetition_penalty;
    p.presence_penalty = (float)r.presence_penalty, p.frequency_penalty = (float)r.frequency_penalty;
    if (r.seed_set) p.seed = r.seed;
    return p;
}

inline ApiRequest parse_api_request(const std::string& body, ApiEndpoint endpoint) {
    using namespace api_detail;
    if (reply_detail::json_scan(body, 0, body.size(), false) == std::string::npos)  // bracket depth outside strings
        bad("", "the request body is nested more than " + std::to_string(reply_detail::kMaxDepth) + " levels deep");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (j.is_discarded()) bad("", "the request body is not valid JSON");
    if (!j.is_object()) bad("", std::string("the request body must be a JSON object, not ") + type_name(j));
    ApiRequest r;
    r.endpoint = endpoint;
    auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
    if (has("model")) r.model = string(j["model"], "model");
    if (endpoint == ApiEndpoint::Chat) {
        if (!has("messages")) bad("messages", "'messages' is required");
        if (!j["messages"].is_array() || j["messages"].empty()) bad("messages", "'messages' must be a non-empty array");
        for (size_t i = 0; i < j["messages"].size(); i++) check_message(j["messages"][i], i);
        r.messages = j["messages"];
    } else {
        if (!has("prompt")) bad("prompt", "'prompt' is required");
        const auto& p = j["prompt"];
        if (p.is_string()) {
            r.prompt = p.get<std::string>();
        } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
            r.prompt = p[0].get<std::string>();
        } else if (p.is_array() && !p.empty() && p[0].is_number()) {
            r.prompt_is_ids = true;
            for (const auto& t : p) r.prompt_ids.push_back((int)integer(t, "prompt", 0, (1 << 30)));
        } else {
            bad("prompt", "'prompt' must be a string, a one-string array or an array of token ids (several prompts in one request are not supported)");
        }
        if (!r.prompt_is_ids && r.prompt.empty()) bad("prompt", "'prompt' is empty");
    }
    if (has("max_completion_tokens")) r.max_tokens = (int)integer(j["max_completion_tokens"], "max_completion_tokens", 1, 1 << 30);
    else if (has("max_tokens")) r.max_tokens = (int)integer(j["max_tokens"], "max_tokens", 1, 1 << 30);
    parse_sampling_fields(j, r);
    if (has("n")) r.n = (int)integer(j["n"], "n", 1, 128);
    if (has("stream")) r.stream = boolean(j["stream"], "stream");
    if (has("stream_options")) {
        const auto& so = j["stream_options"];
        if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
        if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
        if (so.contains("include_usage") && !so["include_usage"].is_null()) r.include_usage = boolean(so["include_usage"], "stream_options.include_usage");
    }
    if (endpoint == ApiEndpoint::Chat) {
        if (has("logprobs")) r.logprobs = boolean(j["logprobs"], "logprobs");
        if (has("top_logprobs")) {
            r.top_logprobs = (int)integer(j["top_logprobs"], "top_logprobs", 0, 20);
            if (!r.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        }
    } else if (has("logprobs")) {
        r.top_logprobs = (int)integer(j["logprobs"], "logprobs", 0, 5);
        r.logprobs = true;
    }
    if (has("response_format")) {
        const auto& f = j["response_format"];
        if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) bad("response_format", "'response_format' must be an object with a 'type'");
        std::string t = f["type"].get<std::string>();
        if (t != "text") bad("response_format", "'response_format' type '" + t + "' is not supported (constrained decoding is not built); use 'text'");
    }
    if (endpoint == ApiEndpoint::Chat && has("tools")) {
        const auto& t = j["tools"];
        if (!t.is_array()) bad("tools", "'tools' must be an array");
        for (size_t i = 0; i < t.size(); i++) {
            std::string at = "tools[" + std::to_string(i) + "]";
            if (!t[i].is_object() || !t[i].contains("type") || t[i]["type"] != "function" || !t[i].contains("function") ||
                !t[i]["function"].is_object())
                bad(at, "'" + at + "' must be {\"type\": \"function\", \"function\": {...}}");
            const auto& fn = t[i]["function"];
            if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
                bad(at + ".function.name", "'" + at + ".function.name' must be a non-empty string");
        }
        if (!t.empty()) r.tools = t;
    }
    if (endpoint == ApiEndpoint::Chat && has("tool_choice")) {
        const auto& c = j["tool_choice"];
        if (c.is_string()) {
            r.tool_choice = c.get<std::string>();
            if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
                bad("tool_choice", "'tool_choice' must be auto, none, required or a function, got '" + r.tool_choice + "'");
        } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
                   c["function"]["name"].is_string()) {
            r.tool_choice = c["function"]["name"].get<std::string>();
            bool known = false;
            for (const auto& t : r.tools)
                if (t["function"]["name"] == r.tool_choice) known = true;
            if (!known) bad("tool_choice", "'tool_choice' names function '" + r.tool_choice + "', which is not in 'tools'");
        } else {
            bad("tool_choice", "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if (r.tool_choice == "required" && r.tools.is_null()) bad("tool_choice", "'tool_choice' is 'required' but there are no 'tools'");
    }
    return r;
}

}  // namespace monocu
