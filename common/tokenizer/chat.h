// tokenizer/chat.h — chat prompts rendered byte for byte like each family's Hugging Face chat template.
//
// Usage:
//   std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
//   std::vector<int> ids = encode_chat(tok, msgs);       // what the engine feeds the model: template
//                                                        // tokens recognised, message contents plain text,
//                                                        // BOS included when the template has one (never add another)
//   std::string text = render_chat(tok, msgs);           // the same prompt as text (for --chat, logs, tests)
//   ChatOptions o; o.enable_thinking = false; o.date = "2026-01-15";
//   render_chat(tok, msgs, o);                           // Qwen3 thinking switch; GPT-OSS "Current date"
//
// Every rendering equals transformers' apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
// for the template that ships with the checkpoint (tests/test_chat.cpp compares against goldens
// rendered by transformers). The family is recognised from the tokenizer's special tokens:
//   <|im_start|> + a template mentioning </think>  Qwen3 (ChatML with the thinking switch)
//   <|start_header_id|>                            Llama 3.0; with "Cutting Knowledge Date" in the template
//                                                  Llama 3.1 (fixed date) or, if it calls strftime_now, 3.2
//   <start_of_turn>                                Gemma 3
//   <｜User｜>                                      DeepSeek-V3
//   <|channel|>                                    GPT-OSS (harmony)
// The templates are hand-coded, one small function per family (kb/decisions.md says why, not a
// Jinja interpreter). Roles: system, user, assistant (GPT-OSS also developer). Anything the template
// would reject or that this file does not model (tools, other roles) is a die() naming the problem.
//
// Why contents are encoded plain: a client's message must not be able to open a new turn. Even
// HF encodes "<|im_start|>" typed by a user as the control token; encode_chat does not, for special
// and non-special added tokens alike (DeepSeek's <｜User｜> is not "special"). Whitespace-only added
// tokens (Gemma's newline runs) stay tokens. The ids equal tok.encode(render_chat(...)) whenever no
// message contains the text of another added token.
#pragma once

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "host/errors.h"
#include "tokenizer/tokenizer.h"

namespace monocu {

struct ChatMessage {
    std::string role, content;
};

struct ChatOptions {
    bool enable_thinking = true;              // Qwen3: false appends an empty <think></think>
    std::string date;                         // YYYY-MM-DD for templates that print today's date
                                              // (GPT-OSS, Llama 3.2); empty: today, local time
    std::string reasoning_effort = "medium";  // GPT-OSS
    std::string family;                       // a chat_family_name() to skip detection; empty: detect
};

enum class ChatFamily { Qwen3, Llama3, Llama31, Llama32, Gemma3, DeepSeekV3, GptOss };
static const ChatFamily CHAT_FAMILIES[] = {ChatFamily::Qwen3, ChatFamily::Llama3, ChatFamily::Llama31, ChatFamily::Llama32,
                                           ChatFamily::Gemma3, ChatFamily::DeepSeekV3, ChatFamily::GptOss};

inline const char* chat_family_name(ChatFamily f) {
    switch (f) {
        case ChatFamily::Qwen3: return "qwen3";
        case ChatFamily::Llama3: return "llama3";
        case ChatFamily::Llama31: return "llama3.1";
        case ChatFamily::Llama32: return "llama3.2";
        case ChatFamily::Gemma3: return "gemma3";
        case ChatFamily::DeepSeekV3: return "deepseek_v3";
        case ChatFamily::GptOss: return "gpt-oss";
    }
    return "?";
}

inline ChatFamily chat_family_named(const std::string& name) {
    for (ChatFamily f : CHAT_FAMILIES) if (name == chat_family_name(f)) return f;
    die("chat: unknown chat family '%s' (qwen3, llama3, llama3.1, llama3.2, gemma3, deepseek_v3, gpt-oss)", name.c_str());
}

inline ChatFamily chat_family(const Tokenizer& tok) {
    auto has = [&](const char* t) { return tok.token_id(t) >= 0; };
    if (has("<|im_start|>")) {
        if (tok.chat_template().find("</think>") != std::string::npos) return ChatFamily::Qwen3;
        die("chat: this tokenizer uses ChatML but its chat_template is not Qwen3's (no thinking switch); "
            "no renderer for it");
    }
    if (has("<|start_header_id|>")) {
        const std::string& tpl = tok.chat_template();
        if (tpl.find("Cutting Knowledge Date") == std::string::npos) return ChatFamily::Llama3;
        return tpl.find("strftime_now") != std::string::npos ? ChatFamily::Llama32 : ChatFamily::Llama31;
    }
    if (has("<start_of_turn>")) return ChatFamily::Gemma3;
    if (has("<\xEF\xBD\x9C" "User\xEF\xBD\x9C>")) return ChatFamily::DeepSeekV3;
    if (has("<|channel|>") && has("<|start|>")) return ChatFamily::GptOss;
    die("chat: no chat format known for this tokenizer (no ChatML, Llama 3, Gemma, DeepSeek or harmony tokens)");
}

// A rendered prompt as pieces: template text (special tokens recognised) and message contents (plain).
struct ChatPiece {
    std::string text;
    bool is_content;
};

struct ChatBuilder {
    std::vector<ChatPiece> pieces;
    ChatBuilder& t(const std::string& s) { if (!s.empty()) pieces.push_back({s, false}); return *this; }
    ChatBuilder& c(const std::string& s) { if (!s.empty()) pieces.push_back({utf8_repair(s), true}); return *this; }
};

// ---- helpers with Python's string semantics (the templates are Jinja, i.e. Python) ----

inline bool chat_py_space(uint32_t cp) { return unicode_is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

// Python str.strip() (Jinja's trim): Unicode whitespace off both ends.
inline std::string chat_trim(const std::string& s0) {
    std::string s = utf8_repair(s0);
    size_t a = 0, b = s.size();
    while (a < b) {
        size_t q = a;
        if (!chat_py_space(utf8_next(s.data(), s.size(), q))) break;
        a = q;
    }
    while (b > a) {
        size_t r = utf8_start_before(s, b);
        size_t q = r;
        if (!chat_py_space(utf8_next(s.data(), s.size(), q))) break;
        b = r;
    }
    return s.substr(a, b - a);
}

inline std::string chat_strip_chars(const std::string& s, char ch, bool left, bool right) {
    size_t a = 0, b = s.size();
    while (left && a < b && s[a] == ch) a++;
    while (right && b > a && s[b - 1] == ch) b--;
    return s.substr(a, b - a);
}

inline void chat_check_roles(const std::vector<ChatMessage>& msgs, std::initializer_list<const char*> allowed, ChatFamily f) {
    if (msgs.empty()) die("chat: no messages");
    for (size_t i = 0; i < msgs.size(); i++) {
        bool ok = false;
        for (const char* r : allowed) ok = ok || msgs[i].role == r;
        if (!ok) die("chat: message %zu has role '%s', which the %s renderer does not support", i, msgs[i].role.c_str(), chat_family_name(f));
    }
}

// ---- one renderer per family ----

// Qwen3: ChatML; assistant turns after the last user turn keep their <think> block, earlier ones lose it.
inline void chat_render_qwen3(ChatBuilder& b, const std::vector<ChatMessage>& m, const ChatOptions& o) {
    chat_check_roles(m, {"system", "user", "assistant"}, ChatFamily::Qwen3);
    if (m[0].role == "system") b.t("<|im_start|>system\n").c(m[0].content).t("<|im_end|>\n");
    size_t last_query = m.size() - 1;
    for (size_t i = m.size(); i-- > 0;)
        if (m[i].role == "user") {
            const std::string& c = m[i].content;
            bool tool_response = c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 && c.compare(c.size() - 16, 16, "</tool_response>") == 0;
            if (!tool_response) { last_query = i; break; }
        }
    for (size_t i = 0; i < m.size(); i++) {
        const ChatMessage& msg = m[i];
        if (msg.role == "user" || (msg.role == "system" && i > 0)) {
            b.t("<|im_start|>" + msg.role + "\n").c(msg.content).t("<|im_end|>\n");
            continue;
        }
        if (msg.role != "assistant") continue;
        std::string content = msg.content, reasoning;
        size_t end_think = content.find("</think>");
        if (end_think != std::string::npos) {
            std::string before = content.substr(0, end_think);
            size_t open = before.rfind("<think>");
            reasoning = chat_strip_chars(chat_strip_chars(open == std::string::npos ? before : before.substr(open + 7), '\n', false, true), '\n', true, false);
            content = chat_strip_chars(content.substr(content.rfind("</think>") + 8), '\n', true, false);
        }
        bool last = i + 1 == m.size();
        if (i > last_query && (last || !reasoning.empty()))
            b.t("<|im_start|>assistant\n<think>\n").c(chat_strip_chars(reasoning, '\n', true, true)).t("\n</think>\n\n")
             .c(chat_strip_chars(content, '\n', true, false));
        else
            b.t("<|im_start|>assistant\n").c(content);
        b.t("<|im_end|>\n");
    }
    b.t("<|im_start|>assistant\n");
    if (!o.enable_thinking) b.t("<think>\n\n</think>\n\n");
}

inline void chat_llama_turn(ChatBuilder& b, const std::string& role, const std::string& content) {
    b.t("<|start_header_id|>" + role + "<|end_header_id|>\n\n").c(chat_trim(content)).t("<|eot_id|>");
}

// Llama 3.0: BOS, then header + trimmed content + <|eot_id|> per message.
inline void chat_render_llama3(ChatBuilder& b, const std::vector<ChatMessage>& m, const Tokenizer& tok) {
    chat_check_roles(m, {"system", "user", "assistant"}, ChatFamily::Llama3);
    b.t(tok.token_text(tok.bos_id()));
    for (const ChatMessage& msg : m) chat_llama_turn(b, msg.role, msg.content);
    b.t("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Llama 3.1 / 3.2: a system turn always, opening with the knowledge cutoff and a date ("26 Jul 2024"
// fixed in 3.1, today's in 3.2), then the caller's trimmed system prompt; other turns as in 3.0.
inline void chat_render_llama31(ChatBuilder& b, const std::vector<ChatMessage>& m, const Tokenizer& tok,
                                const std::string& date_string, ChatFamily f) {
    chat_check_roles(m, {"system", "user", "assistant"}, f);
    b.t(tok.token_text(tok.bos_id()));
    b.t("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: " + date_string + "\n\n");
    size_t first = m[0].role == "system" ? 1 : 0;
    if (first) b.c(chat_trim(m[0].content));
    b.t("<|eot_id|>");
    for (size_t i = first; i < m.size(); i++) chat_llama_turn(b, m[i].role, m[i].content);
    b.t("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Gemma 3: the system prompt is glued to the first user turn; roles must alternate; assistant is "model".
inline void chat_render_gemma3(ChatBuilder& b, const std::vector<ChatMessage>& m, const Tokenizer& tok) {
    chat_check_roles(m, {"system", "user", "assistant"}, ChatFamily::Gemma3);
    b.t(tok.token_text(tok.bos_id()));
    size_t first = m[0].role == "system" ? 1 : 0;
    for (size_t i = first; i < m.size(); i++) {
        size_t k = i - first;
        if ((m[i].role == "user") != (k % 2 == 0)) die("chat: Conversation roles must alternate user/assistant/user/assistant/...");
        b.t("<start_of_turn>" + std::string(m[i].role == "assistant" ? "model" : m[i].role) + "\n");
        if (k == 0 && first) b.c(m[0].content).t("\n\n");
        b.c(chat_trim(m[i].content)).t("<end_of_turn>\n");
    }
    b.t("<start_of_turn>model\n");
}

// DeepSeek-V3: BOS + every system prompt (joined by blank lines), then User/Assistant markers.
inline void chat_render_deepseek_v3(ChatBuilder& b, const std::vector<ChatMessage>& m, const Tokenizer& tok) {
    chat_check_roles(m, {"system", "user", "assistant"}, ChatFamily::DeepSeekV3);
    b.t(tok.token_text(tok.bos_id()));
    bool first_system = true;
    for (const ChatMessage& msg : m) {
        if (msg.role != "system") continue;
        if (!first_system) b.t("\n\n");
        b.c(msg.content);
        first_system = false;
    }
    const char* user = "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>";
    const char* assistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";
    const char* end = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
    for (const ChatMessage& msg : m) {
        if (msg.role == "user") b.t(user).c(msg.content);
        else if (msg.role == "assistant") b.t(assistant).c(msg.content).t(end);
    }
    b.t(assistant);
}

// The options' date (YYYY-MM-DD; empty: today, local time) in a strftime format, like the
// templates' strftime_now(format).
inline std::string chat_date(const ChatOptions& o, const char* format) {
    std::tm tm{};
    if (o.date.empty()) {
        std::time_t now = std::time(nullptr);
        localtime_r(&now, &tm);
    } else {
        int y, mo, d;
        char tail;
        if (std::sscanf(o.date.c_str(), "%4d-%2d-%2d%c", &y, &mo, &d, &tail) != 3 || mo < 1 || mo > 12 || d < 1 || d > 31)
            die("chat: date '%s' is not YYYY-MM-DD", o.date.c_str());
        tm.tm_year = y - 1900;
        tm.tm_mon = mo - 1;
        tm.tm_mday = d;
    }
    char buf[64];
    std::strftime(buf, sizeof buf, format, &tm);
    return buf;
}

// GPT-OSS (harmony): a fixed system message, the caller's system prompt as developer instructions,
// then user turns and final-channel assistant turns.
inline void chat_render_gpt_oss(ChatBuilder& b, const std::vector<ChatMessage>& m, const ChatOptions& o) {
    chat_check_roles(m, {"system", "developer", "user", "assistant"}, ChatFamily::GptOss);
    b.t("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: " + chat_date(o, "%Y-%m-%d") + "\n\n"
        "Reasoning: " + o.reasoning_effort + "\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>");
    size_t first = 0;
    if (m[0].role == "system" || m[0].role == "developer") {
        first = 1;
        if (!m[0].content.empty()) b.t("<|start|>developer<|message|># Instructions\n\n").c(m[0].content).t("\n\n<|end|>");
    }
    for (size_t i = first; i < m.size(); i++) {
        const ChatMessage& msg = m[i];
        if (msg.role == "user") {
            b.t("<|start|>user<|message|>").c(msg.content).t("<|end|>");
        } else if (msg.role == "assistant") {
            if (msg.content.find("<|channel|>analysis<|message|>") != std::string::npos ||
                msg.content.find("<|channel|>final<|message|>") != std::string::npos)
                die("chat: You have passed a message containing <|channel|> tags in the content field.");
            b.t("<|start|>assistant<|channel|>final<|message|>").c(msg.content).t("<|end|>");
        }  // a later system/developer message: the template renders nothing for it
    }
    b.t("<|start|>assistant");
}

inline std::vector<ChatPiece> render_chat_pieces(const Tokenizer& tok, const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
    ChatBuilder b;
    ChatFamily f = o.family.empty() ? chat_family(tok) : chat_family_named(o.family);
    switch (f) {
        case ChatFamily::Qwen3: chat_render_qwen3(b, msgs, o); break;
        case ChatFamily::Llama3: chat_render_llama3(b, msgs, tok); break;
        case ChatFamily::Llama31: chat_render_llama31(b, msgs, tok, "26 Jul 2024", f); break;
        case ChatFamily::Llama32: chat_render_llama31(b, msgs, tok, chat_date(o, "%d %b %Y"), f); break;
        case ChatFamily::Gemma3: chat_render_gemma3(b, msgs, tok); break;
        case ChatFamily::DeepSeekV3: chat_render_deepseek_v3(b, msgs, tok); break;
        case ChatFamily::GptOss: chat_render_gpt_oss(b, msgs, o); break;
    }
    return b.pieces;
}

inline std::string render_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
    std::string out;
    for (const ChatPiece& p : render_chat_pieces(tok, msgs, o)) out += p.text;
    return out;
}

inline std::string render_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs, bool enable_thinking = true) {
    ChatOptions o;
    o.enable_thinking = enable_thinking;
    return render_chat(tok, msgs, o);
}

// The prompt's ids: template parts through encode() (their special tokens recognised), message
// contents as plain text, split and merged as one string so boundaries come out as HF's would.
inline std::vector<int> encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs, const ChatOptions& o = ChatOptions()) {
    std::string text;
    Tokenizer::ByteRanges plain;
    for (const ChatPiece& p : render_chat_pieces(tok, msgs, o)) {
        if (p.is_content) plain.push_back({text.size(), text.size() + p.text.size()});
        text += p.text;
    }
    return tok.encode_with_plain_ranges(text, plain);
}

}  // namespace monocu
