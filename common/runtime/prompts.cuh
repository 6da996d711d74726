// runtime/prompts.cuh — from what a user typed to token ids, and back to text as tokens arrive.
//
// Usage:
//   std::vector<int> ids = prompt_ids(opts, text, vocab, tok, ct);     // -p / -f text, --ids, chat template or raw
//   std::vector<int> ids = chat_prompt_ids(opts, messages, vocab, tok, ct); // a conversation, generation prompt added
//   std::vector<int> eos = end_of_generation_ids(info, gen, tok);     // config, generation_config, tokenizer
//   TokenPrinter out(tok);  out.push(id);  out.finish();               // streams whole UTF-8 characters to stdout
//
// The chat template is the checkpoint's own (tokenizer/chat_template.h, Jinja); user text is encoded as text inside
// it (tokenizer/chat.h), so a message cannot smuggle in control tokens. A raw prompt (--raw, or a checkpoint without
// a chat template) gets the tokenizer's BOS when its tokenizer_config says so.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "host/cli.h"
#include "host/config.h"
#include "host/prompt.h"
#include "runtime/runtime.cuh"
#include "tokenizer/chat.h"
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

inline std::vector<int> chat_prompt_ids(const Options& o, const std::vector<ChatMessage>& msgs, int vocab, const Tokenizer& tok,
                                        const ChatTemplate& ct) {
    for (const ChatMessage& m : msgs) check_prompt_utf8(m.content, "a message");
    ChatOptions co;
    co.enable_thinking = !o.no_think;
    std::vector<int> ids = encode_chat(tok, ct, msgs, co);  // BOS comes from the template where the family has one
    check_ids_in_vocab(ids, vocab);
    return ids;
}

// The prompt as token ids: --ids as given; text through the checkpoint's chat template unless --raw or it has none.
inline std::vector<int> prompt_ids(const Options& o, const std::string& text, int vocab, const Tokenizer* tok, const ChatTemplate& ct) {
    if (!o.ids_file.empty()) return read_ids_file(o.ids_file, vocab);
    if (!tok) die("%s: no tokenizer.json; give the prompt as token ids with --ids", o.model.c_str());
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

}  // namespace monocu
