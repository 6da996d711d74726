// tokenizer/chat_reply.h — what a model wrote, split the way an OpenAI chat completion returns it: the answer
// (content), the reasoning before it (reasoning_content) and the tool calls (id, function name, JSON arguments),
// for the tool-call formats of the families monocu runs.
//
// Usage:
//   ReplyFormat f = reply_format(ct);                         // from the checkpoint's chat template (chat_template.h)
//   bool thinking = reply_starts_in_reasoning(prompt_text, f); // the prompt left a <think> open
//   ChatReply r = parse_reply(text, f, thinking);             // text: decode() of the generated ids, special tokens kept
//   r.content; r.reasoning; r.tool_calls[i].{id, name, arguments}; r.warnings;
//   ojson m = reply_message(r);          // {"role": "assistant", "content", "reasoning_content", "tool_calls"}: OpenAI's
//   ojson t = reply_template_message(r, f);  // the same as chat templates take it (arguments as objects)
//
// The formats (what each family's template teaches its model to write):
//   Hermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block per call: Qwen2.5, Qwen3, QwQ,
//            SmolLM3, Hermes; or the block holding <function=NAME><parameter=KEY>VALUE</parameter>...</function>
//            (Qwen3-Coder)
//   Llama3   the whole reply one JSON object {"name": ..., "parameters": {...}} (or several, ';'-separated), or
//            <|python_tag|> followed by that, by name.call(arg="v", ...) for a built-in tool, or by code for
//            code_interpreter: Llama 3.1 / 3.2
//   Mistral  [TOOL_CALLS] then a JSON list [{"name", "arguments", "id"?}, ...] (v0.3, Nemo), or one
//            name[CALL_ID]id[ARGS]{...} / name[ARGS]{...} per call (Small 3.x, Magistral)
//   Harmony  GPT-OSS messages: <|channel|>analysis (reasoning), final (content), commentary to=functions.NAME
//            (a call; its body the JSON arguments), each ended by <|end|>, <|call|> or <|return|>
//   Lfm2     <|tool_call_start|>[name(arg="v", n=1), ...]<|tool_call_end|> (Python call syntax; a JSON list also)
//   Plain    no tool calls (Llama 2, Llama 3.0, Mistral v0.1, Gemma, ...): only the reasoning split
// Reasoning in every format but Harmony is a leading <think>...</think> (or, when the prompt opened <think>,
// everything up to </think>); an unclosed one is reasoning to the end (a reply cut short). In Harmony it is the
// analysis messages (and, when the prompt ends inside one, the reply up to its <|end|>).
//
// Never trusted: a call that does not parse (bad JSON, no name, arguments that are not an object, a block cut
// short) stays in content as written, with one line in warnings saying what was wrong. Nesting is bounded.
// Ids: a model's own (Mistral's) are kept; the rest are made up from `id_seed` (9 letters and digits for
// Mistral, whose templates require that, else "call_" and 24), so a seed gives the same ids again.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace monocu {

enum class ReplyFormat { Plain, Hermes, Llama3, Mistral, Harmony, Lfm2 };

inline const char* reply_format_name(ReplyFormat f) {
    switch (f) {
        case ReplyFormat::Hermes: return "hermes";
        case ReplyFormat::Llama3: return "llama3";
        case ReplyFormat::Mistral: return "mistral";
        case ReplyFormat::Harmony: return "harmony";
        case ReplyFormat::Lfm2: return "lfm2";
        default: return "plain";
    }
}

struct ToolCall {
    std::string id, name;
    std::string arguments;  // a JSON object, compact (OpenAI's function.arguments)
};

struct ChatReply {
    std::string content, reasoning;
    std::vector<ToolCall> tool_calls;
    std::vector<std::string> warnings;  // one line per call that did not parse (kept in content)
};

// Which format a checkpoint's model writes, from what its chat template renders.
inline ReplyFormat reply_format(const ChatTemplate& ct) {
    if (ct.mentions("<|channel|>")) return ReplyFormat::Harmony;
    if (ct.mentions("<|tool_call_start|>") || ct.mentions("<|tool_list_start|>")) return ReplyFormat::Lfm2;
    if (ct.mentions("[TOOL_CALLS]")) return ReplyFormat::Mistral;
    if (ct.mentions("<tool_call>")) return ReplyFormat::Hermes;
    if (ct.mentions("<|python_tag|>") || (ct.mentions("<|start_header_id|>") && ct.mentions("\"parameters\"")))
        return ReplyFormat::Llama3;
    return ReplyFormat::Plain;
}

// Harmony's analysis header: a prompt that ends with it (and a body so far) leaves the reply inside that message.
constexpr const char* kHarmonyOpenAnalysis = "<|channel|>analysis<|message|>";

// Whether Harmony text ends inside an analysis message's body (its header seen, no end of message after it).
inline bool harmony_in_analysis(const std::string& text) {
    size_t c = text.rfind("<|channel|>");
    if (c == std::string::npos || text.compare(c + 11, 8, "analysis") != 0) return false;
    size_t m = text.find("<|message|>", c);
    if (m == std::string::npos) return false;
    for (const char* t : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"})
        if (text.find(t, m) != std::string::npos) return false;
    return true;
}

// True when the rendered prompt ends inside a <think> block (a template that opens it for the model), or for Harmony
// inside an analysis message (an assistant turn prefilled).
inline bool reply_starts_in_reasoning(const std::string& prompt, ReplyFormat f) {
    if (f == ReplyFormat::Harmony) return harmony_in_analysis(prompt);
    size_t open = prompt.rfind("<think>");
    if (open == std::string::npos) return false;
    size_t close = prompt.rfind("</think>");
    return close == std::string::npos || close < open;
}

namespace reply_detail {
inline size_t skip_space(const std::string& s, size_t i);
}

// While a reply streams: whether its text so far ends inside the reasoning (a terminal shows that part dim).
inline bool reply_in_reasoning(const std::string& text, ReplyFormat f, bool starts_in_reasoning) {
    if (f == ReplyFormat::Harmony)  // inside an analysis message's body (the prompt's open one, or one of its own)
        return harmony_in_analysis(starts_in_reasoning ? kHarmonyOpenAnalysis + text : text);
    if (!starts_in_reasoning && text.compare(reply_detail::skip_space(text, 0), 7, "<think>") != 0) return false;
    return text.find("</think>") == std::string::npos;
}

namespace reply_detail {

using ojson = nlohmann::ordered_json;
constexpr int kMaxDepth = 64;  // JSON and Python-literal nesting in a call

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

inline std::string trim(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && is_space(s[a])) a++;
    while (b > a && is_space(s[b - 1])) b--;
    return s.substr(a, b - a);
}

inline size_t skip_space(const std::string& s, size_t i) {
    while (i < s.size() && is_space(s[i])) i++;
    return i;
}

inline bool starts_at(const std::string& s, size_t i, const char* tag) { return s.compare(i, std::strlen(tag), tag) == 0; }

// Scans s[i, end) skipping strings and counting bracket depth: returns one past the bracket that closes the one at
// s[i] when until_close, else `end`; npos when the nesting goes deeper than kMaxDepth, or (until_close) never closes.
inline size_t json_scan(const std::string& s, size_t i, size_t end, bool until_close) {
    int depth = 0;
    bool in_str = false;
    for (size_t k = i; k < end; k++) {
        char c = s[k];
        if (in_str) {
            if (c == '\\') k++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > kMaxDepth) return std::string::npos;
        } else if ((c == '}' || c == ']') && --depth == 0 && until_close) {
            return k + 1;
        }
    }
    return until_close ? std::string::npos : end;
}

// Where the JSON object or array starting at s[i] ends (one past its closing bracket), or npos when it does not
// close or nests deeper than kMaxDepth. Brackets inside strings do not count.
inline size_t json_end(const std::string& s, size_t i) {
    if (i >= s.size() || (s[i] != '{' && s[i] != '[')) return std::string::npos;
    return json_scan(s, i, s.size(), true);
}

// The JSON value s[i, end), or a discarded value when it is not JSON or nests deeper than kMaxDepth.
inline ojson parse_json(const std::string& s, size_t i, size_t end) {
    if (json_scan(s, i, end, false) == std::string::npos) return ojson(ojson::value_t::discarded);
    return ojson::parse(s.begin() + (long)i, s.begin() + (long)end, nullptr, false);
}

// The JSON object or array that starts at s[i] and closes at or before `stop` (*end: one past it), or a
// discarded value.
inline ojson parse_json_at(const std::string& s, size_t i, size_t stop, size_t* end) {
    *end = json_end(s, i);
    if (*end == std::string::npos || *end > stop) return ojson(ojson::value_t::discarded);
    return parse_json(s, i, *end);
}
inline ojson parse_json(const std::string& s) { return parse_json(s, 0, s.size()); }

// A tool call's arguments as a compact JSON object: an object as given, or a string that holds one.
inline bool arguments_text(const ojson& args, std::string& out) {
    if (args.is_object()) {
        out = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
        return true;
    }
    if (args.is_string()) {
        ojson inner = parse_json(args.get<std::string>());
        if (!inner.is_discarded() && inner.is_object()) return arguments_text(inner, out);
    }
    return false;
}

// {"name": ..., "arguments" or "parameters": {...}} (and an optional "id") as a call; false with why.
inline bool call_from_json(const ojson& j, ToolCall& call, std::string& why) {
    if (!j.is_object()) return why = "not a JSON object", false;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return why = "no \"name\"", false;
    call.name = name->get<std::string>();
    auto args = j.find("arguments");
    if (args == j.end()) args = j.find("parameters");
    if (args == j.end()) call.arguments = "{}";
    else if (!arguments_text(*args, call.arguments)) return why = "the arguments of '" + call.name + "' are not a JSON object", false;
    auto id = j.find("id");
    if (id != j.end() && id->is_string()) call.id = id->get<std::string>();
    return true;
}

// Python call syntax (LFM2, Llama's built-in tools): literals to JSON.
struct PyParser {
    const std::string& s;
    size_t i;
    std::string why;

    bool fail(const std::string& w) {
        if (why.empty()) why = w + " at byte " + std::to_string(i);
        return false;
    }
    void space() { i = skip_space(s, i); }
    bool ident(std::string& out) {
        size_t a = i;
        while (i < s.size() && (std::isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-')) i++;
        out = s.substr(a, i - a);
        return !out.empty() || fail("expected a name");
    }
    bool string_lit(std::string& out) {
        char q = s[i++];
        out.clear();
        while (i < s.size() && s[i] != q) {
            char c = s[i++];
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i >= s.size()) break;
            char e = s[i++];
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '0': out += '\0'; break;
                default: out += e;  // \\ \' \" and the rest as themselves
            }
        }
        if (i >= s.size()) return fail("unterminated string");
        i++;
        return true;
    }
    bool value(ojson& out, int depth) {
        if (depth > kMaxDepth) return fail("nested too deeply");
        space();
        if (i >= s.size()) return fail("expected a value");
        char c = s[i];
        if (c == '"' || c == '\'') {
            std::string v;
            if (!string_lit(v)) return false;
            out = v;
            return true;
        }
        if (c == '[' || c == '(') {
            char close = c == '[' ? ']' : ')';
            i++;
            out = ojson::array();
            space();
            while (i < s.size() && s[i] != close) {
                ojson v;
                if (!value(v, depth + 1)) return false;
                out.push_back(std::move(v));
                space();
                if (i < s.size() && s[i] == ',') i++, space();
                else break;
            }
            if (i >= s.size() || s[i] != close) return fail("unclosed list");
            i++;
            return true;
        }
        if (c == '{') {
            i++;
            out = ojson::object();
            space();
            while (i < s.size() && s[i] != '}') {
                ojson k, v;
                if (!value(k, depth + 1)) return false;
                if (!k.is_string()) return fail("a dict key that is not a string");
                space();
                if (i >= s.size() || s[i] != ':') return fail("expected ':'");
                i++;
                if (!value(v, depth + 1)) return false;
                out[k.get<std::string>()] = std::move(v);
                space();
                if (i < s.size() && s[i] == ',') i++, space();
                else break;
            }
            if (i >= s.size() || s[i] != '}') return fail("unclosed dict");
            i++;
            return true;
        }
        size_t a = i;
        while (i < s.size() && (std::isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '-' || s[i] == '+' || s[i] == '_')) i++;
        std::string w = s.substr(a, i - a);
        if (w == "True" || w == "true") out = true;
        else if (w == "False" || w == "false") out = false;
        else if (w == "None" || w == "null") out = nullptr;
        else {
            ojson n = ojson::parse(w, nullptr, false);
            if (w.empty() || n.is_discarded() || !n.is_number()) return i = a, fail("expected a value");
            out = n;
        }
        return true;
    }
    // name(key=value, ...): positional arguments have no name to give them, so they are refused.
    bool call(ToolCall& c) {
        space();
        if (!ident(c.name)) return false;
        space();
        if (i >= s.size() || s[i] != '(') return fail("expected '(' after " + c.name);
        i++;
        ojson args = ojson::object();
        space();
        while (i < s.size() && s[i] != ')') {
            std::string key;
            if (!ident(key)) return false;
            space();
            if (i >= s.size() || s[i] != '=') return fail("expected '=' after " + key + " (arguments are named)");
            i++;
            ojson v;
            if (!value(v, 1)) return false;
            args[key] = std::move(v);
            space();
            if (i < s.size() && s[i] == ',') i++, space();
            else break;
        }
        if (i >= s.size() || s[i] != ')') return fail("unclosed call");
        i++;
        c.arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
        return true;
    }
};

// A list of calls in Python syntax ("[a(x=1), b()]" or one "a(x=1)") or in JSON ("[{...}]" or "{...}").
inline bool calls_from_list(const std::string& text, std::vector<ToolCall>& out, std::string& why) {
    std::string t = trim(text);
    if (t.empty()) return why = "no call", false;
    size_t j = t[0] == '[' ? skip_space(t, 1) : 0;
    if (j < t.size() && t[j] == '{') {  // JSON
        ojson v = parse_json(t);
        if (v.is_discarded()) return why = "not valid JSON", false;
        if (v.is_object()) v = ojson::array({v});
        for (const ojson& e : v) {
            ToolCall c;
            if (!call_from_json(e, c, why)) return false;
            out.push_back(c);
        }
        return true;
    }
    PyParser p{t, 0, ""};
    bool list = t[0] == '[';
    if (list) p.i = 1;
    while (true) {
        ToolCall c;
        if (!p.call(c)) return why = p.why, false;
        out.push_back(c);
        p.space();
        if (list && p.i < t.size() && t[p.i] == ',') {
            p.i++;
            continue;
        }
        break;
    }
    if (list) {
        if (p.i >= t.size() || t[p.i] != ']') return why = "unclosed list of calls", false;
        p.i++;
    }
    if (skip_space(t, p.i) != t.size()) return why = "text after the calls", false;
    return true;
}

inline std::string make_id(ReplyFormat f, uint64_t& state) {
    static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    auto next = [&state]() {  // splitmix64
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    std::string id = f == ReplyFormat::Mistral ? "" : "call_";
    for (int k = 0, n = f == ReplyFormat::Mistral ? 9 : 24; k < n; k++) id += kAlnum[next() % 62];
    return id;
}

// The leading reasoning: <think>...</think> at the start (or the prompt's open one), then the rest.
inline void split_reasoning(const std::string& text, bool starts_in_reasoning, std::string& reasoning, std::string& rest) {
    size_t from = 0;
    if (!starts_in_reasoning) {
        size_t k = skip_space(text, 0);
        if (!starts_at(text, k, "<think>")) {
            rest = text;
            return;
        }
        from = k + 7;
    }
    size_t close = text.find("</think>", from);
    reasoning += text.substr(from, close == std::string::npos ? std::string::npos : close - from);
    rest = close == std::string::npos ? "" : text.substr(close + 8);
}

struct Builder {
    ChatReply r;
    void call(ToolCall c) { r.tool_calls.push_back(std::move(c)); }
    void bad(const std::string& raw, const std::string& why) {  // a call that does not parse stays as text
        r.content += raw;
        r.warnings.push_back("tool call " + std::to_string(r.tool_calls.size() + r.warnings.size() + 1) + ": " + why + "; kept as text");
    }
};

// Qwen3-Coder's body of a <tool_call>: <function=NAME> then <parameter=KEY>\nVALUE\n</parameter> per argument, then
// </function>. Its template writes strings bare and objects and lists as JSON, so a value that parses as JSON is
// taken as that JSON (a number, true, an object...) and anything else as a string.
inline bool call_from_xml(const std::string& body, ToolCall& call, std::string& why) {
    size_t i = skip_space(body, 0);
    if (!starts_at(body, i, "<function=")) return why = "no <function=NAME>", false;
    size_t gt = body.find('>', i);
    if (gt == std::string::npos) return why = "<function= not closed by '>'", false;
    call.name = trim(body.substr(i + 10, gt - i - 10));
    if (call.name.empty()) return why = "no function name", false;
    ojson args = ojson::object();
    i = skip_space(body, gt + 1);
    while (starts_at(body, i, "<parameter=")) {
        size_t kgt = body.find('>', i), close = body.find("</parameter>", i);
        if (kgt == std::string::npos || close == std::string::npos || close < kgt)
            return why = "a <parameter= without '>' or </parameter>", false;
        std::string key = trim(body.substr(i + 11, kgt - i - 11));
        if (key.empty()) return why = "a parameter without a name", false;
        std::string v = body.substr(kgt + 1, close - kgt - 1);
        if (!v.empty() && v.front() == '\n') v.erase(0, 1);
        if (!v.empty() && v.back() == '\n') v.pop_back();
        ojson j = parse_json(v);
        args[key] = j.is_discarded() ? ojson(v) : j;
        i = skip_space(body, close + 12);
    }
    if (!starts_at(body, i, "</function>")) return why = "no </function> after the parameters", false;
    if (skip_space(body, i + 11) != body.size()) return why = "text after </function>", false;
    call.arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
    return true;
}

// Text with calls in OPEN ... CLOSE blocks (Hermes, LFM2): the text between blocks is content; each block's
// body goes to calls(body, out, why), and a block that does not close or whose body does not parse stays text.
template <class F>
inline void parse_blocks(const std::string& s, const char* open_tag, const char* close_tag, Builder& b, F calls) {
    const size_t no = std::strlen(open_tag), nc = std::strlen(close_tag);
    size_t i = 0;
    while (true) {
        size_t open = s.find(open_tag, i);
        b.r.content += s.substr(i, open == std::string::npos ? std::string::npos : open - i);
        if (open == std::string::npos) return;
        size_t close = s.find(close_tag, open + no), end = close == std::string::npos ? s.size() : close + nc;
        std::vector<ToolCall> found;
        std::string why;
        if (close == std::string::npos) b.bad(s.substr(open), std::string(open_tag) + " without " + close_tag);
        else if (!calls(trim(s.substr(open + no, close - open - no)), found, why)) b.bad(s.substr(open, end - open), why);
        else for (ToolCall& c : found) b.call(c);
        i = end;
    }
}

inline void parse_hermes(const std::string& s, Builder& b) {
    parse_blocks(s, "<tool_call>", "</tool_call>", b, [](const std::string& body, std::vector<ToolCall>& out, std::string& why) {
        ToolCall c;
        if (starts_at(body, 0, "<function=")) {  // Qwen3-Coder
            if (!call_from_xml(body, c, why)) return false;
        } else {
            ojson j = parse_json(body);
            if (j.is_discarded()) return why = "not valid JSON", false;
            if (!call_from_json(j, c, why)) return false;
        }
        out.push_back(c);
        return true;
    });
}

inline void parse_llama3(const std::string& s, Builder& b) {
    std::string t = trim(s);
    bool tagged = starts_at(t, 0, "<|python_tag|>");
    std::string body = tagged ? trim(t.substr(14)) : t;
    if (!body.empty() && body[0] == '{') {  // one or more JSON calls, ';'-separated
        std::vector<ToolCall> calls;
        std::string why;
        size_t i = 0;
        bool ok = true;
        while (ok && i < body.size()) {
            size_t end;
            ToolCall c;
            ojson j = parse_json_at(body, i, body.size(), &end);
            if (j.is_discarded()) ok = false, why = "not valid JSON";
            else if (!call_from_json(j, c, why)) ok = false;
            else calls.push_back(c), i = skip_space(body, end);
            if (ok && i < body.size()) {
                if (body[i] == ';') i = skip_space(body, i + 1);
                else ok = false, why = "text after the call";
            }
        }
        if (ok) {
            for (ToolCall& c : calls) b.call(c);
        } else if (tagged) {
            b.bad(s, why);
        } else {
            b.r.content = s;  // an answer that happens to be JSON
        }
        return;
    }
    if (!tagged) {
        b.r.content = s;
        return;
    }
    size_t dot = body.find(".call(");  // a built-in tool: brave_search.call(query="...")
    size_t name_end = body.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    if (dot != std::string::npos && dot == name_end) {
        std::string call_text = body.substr(0, dot) + body.substr(dot + 5);  // name(args)
        PyParser q{call_text, 0, ""};
        ToolCall c;
        if (q.call(c) && skip_space(call_text, q.i) == call_text.size()) b.call(c);
        else b.bad(s, q.why.empty() ? "text after the call" : q.why);
        return;
    }
    ToolCall c;  // code for code_interpreter
    c.name = "code_interpreter";
    c.arguments = ojson({{"code", body}}).dump(-1, ' ', false, ojson::error_handler_t::replace);
    b.call(c);
}

inline void parse_mistral(const std::string& s, Builder& b) {
    size_t at = s.find("[TOOL_CALLS]");
    b.r.content += s.substr(0, at);
    while (at != std::string::npos) {
        size_t i = skip_space(s, at + 12), next = s.find("[TOOL_CALLS]", i);
        size_t stop = next == std::string::npos ? s.size() : next;
        std::string block = s.substr(at, stop - at), why;
        std::vector<ToolCall> calls;
        bool ok = false;
        if (i < s.size() && s[i] == '[') {  // [{"name": ..., "arguments": ..., "id": ...}, ...]
            size_t end;
            ojson j = parse_json_at(s, i, stop, &end);
            if (j.is_discarded() || !j.is_array()) why = "not a JSON list";
            else {
                ok = true;
                for (const ojson& e : j) {
                    ToolCall c;
                    if (!call_from_json(e, c, why)) {
                        ok = false;
                        break;
                    }
                    calls.push_back(c);
                }
                if (ok && skip_space(s, end) != stop) b.r.content += s.substr(end, stop - end);
            }
        } else {  // name[CALL_ID]id[ARGS]{...}, possibly several in a row
            size_t k = i;
            ok = true;
            while (ok && k < stop) {
                size_t args = s.find("[ARGS]", k);
                if (args == std::string::npos || args >= stop) {
                    ok = false, why = "no [ARGS]";
                    break;
                }
                ToolCall c;
                std::string head = s.substr(k, args - k);
                size_t cid = head.find("[CALL_ID]");
                c.name = trim(head.substr(0, cid));
                if (cid != std::string::npos) c.id = trim(head.substr(cid + 9));
                size_t end;
                ojson j = parse_json_at(s, skip_space(s, args + 6), stop, &end);
                if (c.name.empty() || c.name.find_first_of("[]{} ") != std::string::npos) ok = false, why = "no function name before [ARGS]";
                else if (j.is_discarded() || !arguments_text(j, c.arguments)) ok = false, why = "the arguments of '" + c.name + "' are not a JSON object";
                else calls.push_back(c), k = skip_space(s, end);
            }
        }
        if (ok) for (ToolCall& c : calls) b.call(c);
        else b.bad(block, why);
        at = next;
    }
}

inline void parse_harmony(const std::string& s, Builder& b) {
    size_t i = 0;
    std::vector<std::string> analysis;
    while (i < s.size()) {
        size_t msg = s.find("<|message|>", i);
        if (msg == std::string::npos) {
            std::string rest = trim(s.substr(i));
            if (!rest.empty() && rest != "<|start|>assistant" && rest != "<|start|>") b.bad(rest, "a message header without <|message|>");
            return;
        }
        std::string header = s.substr(i, msg - i);
        size_t body = msg + 11, end = s.size();
        for (const char* t : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"}) end = std::min(end, s.find(t, body));
        std::string text = s.substr(body, end - body);
        std::string channel, recipient;
        if (size_t c = header.find("<|channel|>"); c != std::string::npos) {
            size_t a = c + 11, z = header.find_first_of(" <", a);
            channel = header.substr(a, z == std::string::npos ? std::string::npos : z - a);
        }
        if (size_t t = header.find("to="); t != std::string::npos) {
            size_t a = t + 3, z = header.find_first_of(" <", a);
            recipient = header.substr(a, z == std::string::npos ? std::string::npos : z - a);
        }
        if (!recipient.empty()) {
            ToolCall c;
            c.name = starts_at(recipient, 0, "functions.") ? recipient.substr(10) : recipient;
            ojson j = parse_json(trim(text));
            if (c.name.empty()) b.bad(s.substr(i, end - i), "no function name after to=");
            else if (j.is_discarded() || !arguments_text(j, c.arguments)) b.bad(s.substr(i, end - i), "the arguments of '" + c.name + "' are not a JSON object");
            else b.call(c);
        } else if (channel == "analysis") {
            analysis.push_back(text);
        } else {
            b.r.content += text;  // final, or a commentary preamble
        }
        i = end;
        for (const char* t : {"<|end|>", "<|call|>", "<|return|>"})
            if (starts_at(s, i, t)) i += std::strlen(t);
    }
    for (size_t k = 0; k < analysis.size(); k++) b.r.reasoning += (k ? "\n" : "") + analysis[k];
}

inline void parse_lfm2(const std::string& s, Builder& b) {
    parse_blocks(s, "<|tool_call_start|>", "<|tool_call_end|>", b, calls_from_list);
}

}  // namespace reply_detail

inline ChatReply parse_reply(const std::string& text, ReplyFormat f, bool starts_in_reasoning = false, uint64_t id_seed = 0) {
    using namespace reply_detail;
    Builder b;
    std::string rest;
    if (f == ReplyFormat::Harmony) rest = starts_in_reasoning ? kHarmonyOpenAnalysis + text : text;  // (the open message)
    else split_reasoning(text, starts_in_reasoning, b.r.reasoning, rest);
    switch (f) {
        case ReplyFormat::Hermes: parse_hermes(rest, b); break;
        case ReplyFormat::Llama3: parse_llama3(rest, b); break;
        case ReplyFormat::Mistral: parse_mistral(rest, b); break;
        case ReplyFormat::Harmony: parse_harmony(rest, b); break;
        case ReplyFormat::Lfm2: parse_lfm2(rest, b); break;
        default: b.r.content = rest;
    }
    b.r.content = trim(b.r.content);
    b.r.reasoning = trim(b.r.reasoning);
    for (ToolCall& c : b.r.tool_calls)
        if (c.id.empty()) c.id = make_id(f, id_seed);
    return b.r;
}

// OpenAI's assistant message: content null when there is none beside tool calls; arguments as JSON text.
inline nlohmann::ordered_json reply_message(const ChatReply& r) {
    nlohmann::ordered_json m = {{"role", "assistant"}};
    m["content"] = r.content.empty() && !r.tool_calls.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.content);
    if (!r.reasoning.empty()) m["reasoning_content"] = r.reasoning;
    if (!r.tool_calls.empty()) {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (const ToolCall& c : r.tool_calls)
            calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        m["tool_calls"] = calls;
    }
    return m;
}

// The message as chat templates take it back: arguments as objects (what transformers passes), the reasoning
// under the key the family's template reads (GPT-OSS: thinking; the others: reasoning_content).
inline nlohmann::ordered_json reply_template_message(const ChatReply& r, ReplyFormat f) {
    nlohmann::ordered_json m = {{"role", "assistant"}, {"content", r.content}};
    if (!r.reasoning.empty()) m[f == ReplyFormat::Harmony ? "thinking" : "reasoning_content"] = r.reasoning;
    if (!r.tool_calls.empty()) {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (const ToolCall& c : r.tool_calls)
            calls.push_back({{"id", c.id}, {"type", "function"},
                             {"function", {{"name", c.name}, {"arguments", nlohmann::ordered_json::parse(c.arguments)}}}});
        m["tool_calls"] = calls;
    }
    return m;
}

}  // namespace monocu
