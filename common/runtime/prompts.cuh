// runtime/prompts.cuh — from what a user typed to token ids, and back to text as tokens arrive.
//
// Usage:
//   std::vector<int> ids = prompt_ids(opts, text, vocab, tok, ct);     // -p / -f text, --ids, chat template or raw
//   std::vector<int> ids = chat_prompt_ids(opts, messages, vocab, tok, ct); // a conversation, generation prompt added
//   std::vector<int> eos = end_of_generation_ids(info, gen, tok);     // config, generation_config, tokenizer
//   TokenPrinter out(tok);  out.push(id);  out.finish();               // streams whole UTF-8 characters to stdout
//   ReplyPrinter rp(tok, ct, ids);  rp.push(id);  ChatReply r = rp.finish(seed);  // ... a chat reply, its parts apart
//   std::string tools = read_tools_file(path);                         // --tools, checked
//
// The chat template is the checkpoint's own (tokenizer/chat_template.h, Jinja); user text is encoded as text inside
// it (tokenizer/chat.h), so a message cannot smuggle in control tokens. A raw prompt (--raw, or a checkpoint without
// a chat template) gets the tokenizer's BOS when its tokenizer_config says so.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "host/cli.h"
#include "host/config.h"
#include "host/prompt.h"
#include "runtime/runtime.cuh"
#include "tokenizer/chat.h"
#include "tokenizer/chat_reply.h"
#include "tokenizer/tokenizer.h"

namespace monocu {

// A prompt must be valid UTF-8 (kb/decisions.md: an error, not a silent U+FFFD); the error says where.
inline void check_prompt_utf8(const std::string& text, const char* what) {
    size_t at = utf8_first_invalid(text);
    if (at != std::string::npos) die("%s: invalid UTF-8 at byte %zu (0x%02x)", what, at, (unsigned)(unsigned char)text[at]);
}

inline void check_ids_in_vocab(const std::vector<int>& ids, int vocab) {
    for (int id : ids)
        if (id < 0 || id >= vocab) die("tokenizer produced id %d outside the model's vocabulary (%d)", id, vocab);
}

// --tools FILE: a JSON list of tool schemas ({"type": "function", "function": {"name", ...}}), checked here.
inline std::string read_tools_file(const std::string& path) {
    std::string text = read_text_file(path);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) die("--tools %s: not a JSON list of tools", path.c_str());
    for (size_t i = 0; i < j.size(); i++) {
        const auto& t = j[i];
        const auto* f = t.is_object() && t.contains("function") ? &t["function"] : &t;
        if (!f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
            die("--tools %s: tool %zu has no function name ({\"type\": \"function\", \"function\": {\"name\": ...}})", path.c_str(), i);
    }
    return j.dump();
}

// `tools`: a JSON list for the template (a batch line's own), else --tools's, else none.
inline std::vector<int> chat_prompt_ids(const Options& o, const std::vector<ChatMessage>& msgs, int vocab, const Tokenizer& tok,
                                        const ChatTemplate& ct, const nlohmann::ordered_json* tools = nullptr) {
    for (const ChatMessage& m : msgs) check_prompt_utf8(m.content, "a message");
    ChatOptions co;
    co.enable_thinking = !o.no_think;
    if (tools) co.kwargs["tools"] = *tools;
    else if (!o.tools_json.empty()) co.kwargs["tools"] = nlohmann::ordered_json::parse(o.tools_json);
    std::vector<int> ids = encode_chat(tok, ct, msgs, co);  // BOS comes from the template where the family has one
    check_ids_in_vocab(ids, vocab);
    return ids;
}

// The prompt as token ids: --ids as given; text through the checkpoint's chat template unless --raw or it has none.
inline std::vector<int> prompt_ids(const Options& o, const std::string& text, int vocab, const Tokenizer* tok, const ChatTemplate& ct) {
    if (!o.ids_file.empty()) return read_ids_file(o.ids_file, vocab);
    if (!tok) die("%s: no tokenizer.json; give the prompt as token ids (--ids, or \"prompt_ids\" in a batch file)", o.model.c_str());
    check_prompt_utf8(text, o.prompt_file.empty() ? "the prompt" : o.prompt_file.c_str());
    if (!o.raw && !ct.empty()) {
        std::vector<ChatMessage> msgs;
        if (!o.system.empty()) msgs.push_back({"system", o.system});
        msgs.push_back({"user", text});
        return chat_prompt_ids(o, msgs, vocab, *tok, ct);
    }
    std::vector<int> ids;
    if (tok->add_bos() && tok->bos_id() >= 0) ids.push_back(tok->bos_id());
    std::vector<int> body = tok->encode_plain(text);
    ids.insert(ids.end(), body.begin(), body.end());
    if (ids.empty()) die("the prompt is empty");
    check_ids_in_vocab(ids, vocab);
    return ids;
}

inline std::vector<int> end_of_generation_ids(const ModelInfo& info, const GenerationConfig& g, const Tokenizer* tok) {
    std::vector<int> eos = info.eos_ids;
    eos.insert(eos.end(), g.eos_token_ids.begin(), g.eos_token_ids.end());
    if (tok) {
        std::vector<int> t = tok->eos_ids();
        eos.insert(eos.end(), t.begin(), t.end());
    }
    return eos;
}

// Generated ids to stdout as they come: text through the tokenizer (whole UTF-8 characters only), or the ids
// themselves when there is no tokenizer.
class TokenPrinter {
public:
    explicit TokenPrinter(const Tokenizer* tok) : dec_(tok ? std::make_unique<StreamDecoder>(*tok) : nullptr) {}
    void push(int id) {
        std::string piece = dec_ ? dec_->push(id) : strf("%d ", id);
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
    }
    void finish() {
        if (dec_) std::fputs(dec_->flush().c_str(), stdout);
        std::fflush(stdout);
    }

private:
    std::unique_ptr<StreamDecoder> dec_;
};

// Whether a chat prompt leaves a <think> open for the model (its last tokens as text; tokenizer/chat_reply.h).
inline bool prompt_opens_reasoning(const Tokenizer& tok, const std::vector<int>& ids, ReplyFormat f) {
    size_t from = ids.size() > 16 ? ids.size() - 16 : 0;
    return reply_starts_in_reasoning(tok.decode(std::vector<int>(ids.begin() + (long)from, ids.end())), f);
}

// A chat reply streamed to stdout with its parts shown apart (tokenizer/chat_reply.h): on a terminal the
// reasoning is dim while it is written (or, show_reasoning false, not printed: decoded pieces while the reply is in
// its reasoning are skipped); finish() reads the whole reply, prints each tool call on a line of its own
// ("[tool call] NAME ARGUMENTS") and each call that did not parse as a warning on stderr, and returns it.
class ReplyPrinter {
public:
    ReplyPrinter(const Tokenizer& tok, const ChatTemplate& ct, const std::vector<int>& prompt_ids, bool show_reasoning = true)
        : dec_(tok), format_(reply_format(ct)), tty_(isatty(fileno(stdout)) != 0), show_(show_reasoning),
          starts_(prompt_opens_reasoning(tok, prompt_ids, format_)) {}
    void push(int id) { print(dec_.push(id)); }
    ChatReply finish(uint64_t id_seed) {
        print(dec_.flush());
        if (dim_) std::fputs("\x1b[0m", stdout);
        dim_ = false;
        ChatReply r = parse_reply(text_, format_, starts_, id_seed);
        for (const ToolCall& c : r.tool_calls) std::printf("\n[tool call] %s %s", c.name.c_str(), c.arguments.c_str());
        std::fflush(stdout);
        for (const std::string& w : r.warnings) std::fprintf(stderr, "\nwarning: %s", w.c_str());
        return r;
    }
    const std::string& text() const { return text_; }
    ~ReplyPrinter() {
        if (dim_) std::fputs("\x1b[0m", stdout);  // a reply cut off by an error
    }

private:
    StreamDecoder dec_;
    ReplyFormat format_;
    bool tty_, show_, starts_, dim_ = false;
    std::string text_;

    void print(const std::string& piece) {
        if (piece.empty()) return;
        text_ += piece;
        const bool reasoning = reply_in_reasoning(text_, format_, starts_);
        if (reasoning && !show_) return;
        bool dim = tty_ && reasoning;
        if (dim != dim_) std::fputs(dim ? "\x1b[2m" : "\x1b[0m", stdout);
        dim_ = dim;
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
    }
};

}  // namespace monocu
