// tokenizer/chat.h — a conversation to the model's prompt ids, through the checkpoint's own chat template
// (chat_template.h, a Jinja engine), with what the user wrote kept as text.
//
// Usage:
//   ChatTemplate ct = ChatTemplate::load(model_dir);
//   std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
//   std::vector<int> ids = encode_chat(tok, ct, msgs);    // the generation prompt added, BOS where the template puts one
//   ids = encode_chat_json(tok, ct, messages_json, o);             // or a JSON list of messages (tool calls and all: the server)
//   std::string text = render_chat(ct, msgs);             // the same prompt as text (apply_chat_template(tokenize=False))
//   ChatOptions o;  o.enable_thinking = false;            // Qwen3 / SmolLM3's switch (passed only when false)
//   o.kwargs["reasoning_effort"] = "high";                // any other template argument
//
// Why message text is encoded plain: a client's message must not open a new turn. transformers encodes
// "<|im_start|>" typed by a user as the control token; encode_chat does not. Before rendering, every added
// token's text inside a message the user authored (every role but assistant) is swapped for a private marker;
// after rendering, each marker is put back as text and its bytes are encoded with no added token recognised
// (Tokenizer::encode_with_plain_ranges), so the rest of the prompt splits exactly as HF would split it. Assistant
// messages are the model's own output and pass through as they are (templates parse their <think> tags). The ids
// equal tok.encode(render_chat(...)) whenever no user message contains an added token's text.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/errors.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace monocu {

struct ChatMessage {
    std::string role, content;
};

struct ChatOptions {
    bool enable_thinking = true;                              // false: passed as enable_thinking=False
    bool add_generation_prompt = true;
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // more template arguments
};

inline nlohmann::ordered_json chat_kwargs(const ChatOptions& o) {
    nlohmann::ordered_json k = o.kwargs;
    k["add_generation_prompt"] = o.add_generation_prompt;
    if (!o.enable_thinking) k["enable_thinking"] = false;
    return k;
}

inline nlohmann::ordered_json chat_messages_json(const std::vector<ChatMessage>& msgs) {
    nlohmann::ordered_json m = nlohmann::ordered_json::array();
    for (const ChatMessage& x : msgs) m.push_back({{"role", x.role}, {"content", x.content}});
    return m;
}

inline std::string render_chat(const ChatTemplate& ct, const std::vector<ChatMessage>& msgs, const ChatOptions& o = ChatOptions()) {
    if (msgs.empty()) die("chat: no messages");
    return ct.render(chat_messages_json(msgs), chat_kwargs(o));
}

namespace chat_detail {

// Markers are U+F0000 <index in decimal> U+F0001 (plane-15 private use: no tokenizer text holds them).
constexpr const char* kOpen = "\xF3\xB0\x80\x80";
constexpr const char* kClose = "\xF3\xB0\x80\x81";

// s with every added token's text (leftmost-longest; whitespace-only layout tokens excepted) replaced by a marker
// whose index is the position of that text in `originals`.
inline std::string neutralize(const std::string& s, const Tokenizer& tok, std::vector<std::string>& originals) {
    if (s.find(kOpen) != std::string::npos || s.find(kClose) != std::string::npos)
        die("chat: a message holds U+F0000 or U+F0001, private-use characters the chat encoding reserves");
    std::string out;
    for (size_t i = 0; i < s.size();) {
        size_t best = 0;
        for (const AddedToken& t : tok.added_tokens()) {
            if (t.layout || t.content.size() <= best || s.compare(i, t.content.size(), t.content) != 0) continue;
            best = t.content.size();
        }
        if (!best) {
            out += s[i++];
            continue;
        }
        out += kOpen + std::to_string(originals.size()) + kClose;
        originals.push_back(s.substr(i, best));
        i += best;
    }
    return out;
}

}  // namespace chat_detail

// The prompt's ids: the template's own text special-aware, the users' added-token texts as plain text. `msgs` is a JSON
// list of messages as a chat template takes them (role, content, and whatever else: tool_calls, tool_call_id, name);
// every string content of a message the user authored (every role but assistant) is kept plain.
inline std::vector<int> encode_chat_json(const Tokenizer& tok, const ChatTemplate& ct, const nlohmann::ordered_json& msgs,
                                    const ChatOptions& o = ChatOptions()) {
    using namespace chat_detail;
    if (!msgs.is_array() || msgs.empty()) die("chat: no messages");
    std::vector<std::string> originals;
    nlohmann::ordered_json safe = msgs;
    for (auto& m : safe)
        if (m.is_object() && m.value("role", "") != "assistant" && m.contains("content") && m["content"].is_string())
            m["content"] = neutralize(utf8_repair(m["content"].get<std::string>()), tok, originals);
    std::string rendered = ct.render(safe, chat_kwargs(o)), text;
    Tokenizer::ByteRanges plain;
    const size_t open_len = std::strlen(kOpen), close_len = std::strlen(kClose);
    for (size_t i = 0; i < rendered.size();) {
        size_t at = rendered.find(kOpen, i);
        if (at == std::string::npos) {
            text.append(rendered, i, std::string::npos);
            break;
        }
        text.append(rendered, i, at - i);
        size_t end = rendered.find(kClose, at + open_len);
        std::string digits = end == std::string::npos ? "" : rendered.substr(at + open_len, end - at - open_len);
        if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos ||
            std::stoul(digits) >= originals.size())
            die("chat: the template cut through a message's text; its added-token text cannot be kept plain");
        const std::string& orig = originals[std::stoul(digits)];
        plain.push_back({text.size(), text.size() + orig.size()});
        text += orig;
        i = end + close_len;
    }
    if (text.find(kClose) != std::string::npos) die("chat: the template cut through a message's text; its added-token text cannot be kept plain");
    return tok.encode_with_plain_ranges(text, plain);
}

inline std::vector<int> encode_chat(const Tokenizer& tok, const ChatTemplate& ct, const std::vector<ChatMessage>& msgs,
                                    const ChatOptions& o = ChatOptions()) {
    if (msgs.empty()) die("chat: no messages");
    return encode_chat_json(tok, ct, chat_messages_json(msgs), o);
}

}  // namespace monocu
