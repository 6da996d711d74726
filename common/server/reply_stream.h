// server/reply_stream.h — one choice's generated tokens to what an OpenAI response sends, token by token: text
// through the tokenizer's stream decoder (whole characters only), stop strings cut out, and for chat the reply's
// reasoning, answer and tool calls apart (tokenizer/chat_reply.h). The server runs it on the client's HTTP thread, so
// the GPU's thread only hands over token ids.
//
// Usage:
//   ReplyStream rs(tok, stops, ReplyStream::Mode::Chat, reply_format(ct), prompt_opens_reasoning, id_seed);
//   for each generated token (an end-of-generation id is not text: not pushed):
//       ReplyDelta d = rs.push(id);       // d.content, d.reasoning: what to send now (either may be empty)
//       if (rs.stopped()) break;          // a stop string appeared: end the sequence, finish_reason "stop"
//   ReplyDelta last = rs.finish();        // what was held back, and the tool calls
//
// What a chat stream sends adds up to what the whole reply parses to (parse_reply), piece by piece: at each token the
// text so far is parsed with its unsettled tail held back, and only what extends the content and reasoning already
// sent goes out. Held back: a stop string's possible start (StopStrings), a tool-call opener's possible start, and
// from a tool-call opener on everything (its arguments come whole, with finish()); for Llama 3's format, a reply that
// starts with '{' (its calls are a bare JSON object); for Harmony, a message whose header is not complete or that
// calls a tool. A completion (Mode::Text) sends the text as it is, stop strings cut.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "host/stop_strings.h"
#include "tokenizer/chat_reply.h"
#include "tokenizer/tokenizer.h"

namespace monocu {

struct ReplyDelta {
    std::string content, reasoning;
    std::vector<ToolCall> tool_calls;  // finish() only
    bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class ReplyStream {
public:
    enum class Mode { Text, Chat };

    // format: how the model writes tool calls and reasoning (Plain: reasoning apart only); starts_in_reasoning: the
    // prompt left a <think> (Harmony: an analysis message) open; id_seed: the tool calls' made-up ids (chat_reply.h).
    ReplyStream(const Tokenizer& tok, std::vector<std::string> stops, Mode mode, ReplyFormat format = ReplyFormat::Plain,
                bool starts_in_reasoning = false, uint64_t id_seed = 0)
        : dec_(tok), stop_(std::move(stops)), mode_(mode), f_(format), starts_(starts_in_reasoning), seed_(id_seed) {}

    ReplyDelta push(int id) {
        ReplyDelta d;
        if (stop_.stopped() || finished_) return d;
        std::string piece = stop_.push(dec_.push(id));
        if (mode_ == Mode::Text) {
            d.content = piece;
            return d;
        }
        text_ += piece;
        if (piece.empty()) return d;
        ChatReply v = parse_reply(text_.substr(0, settled(text_)), f_, starts_, seed_);
        extend(v.content, sent_content_, d.content);
        extend(v.reasoning, sent_reasoning_, d.reasoning);
        return d;
    }

    bool stopped() const { return stop_.stopped(); }

    // The end of the reply: the decoder's and the stop strings' held-back text, then (chat) the whole reply parsed.
    ReplyDelta finish() {
        ReplyDelta d;
        if (finished_) return d;
        finished_ = true;
        std::string rest = stop_.stopped() ? "" : stop_.push(dec_.flush());
        rest += stop_.flush();
        if (mode_ == Mode::Text) {
            d.content = rest;
            return d;
        }
        text_ += rest;
        reply_ = parse_reply(text_, f_, starts_, seed_);
        extend(reply_.content, sent_content_, d.content);
        extend(reply_.reasoning, sent_reasoning_, d.reasoning);
        d.tool_calls = reply_.tool_calls;
        return d;
    }

    const std::string& text() const { return text_; }  // chat: the reply's raw text so far (special tokens kept)
    const ChatReply& reply() const { return reply_; }   // chat, after finish(): the whole reply parsed (warnings too)

private:
    StreamDecoder dec_;
    StopStrings stop_;
    Mode mode_;
    ReplyFormat f_;
    bool starts_;
    uint64_t seed_;
    bool finished_ = false;
    std::string text_, sent_content_, sent_reasoning_;
    ChatReply reply_;

    // What extends `sent` in `now` goes out (and into `sent`); a view that does not extend it (the parse changed its
    // mind about text already sent) sends nothing until a later one does.
    static void extend(const std::string& now, std::string& sent, std::string& out) {
        if (now.size() > sent.size() && now.compare(0, sent.size(), sent) == 0) {
            out = now.substr(sent.size());
            sent = now;
        }
    }

    // The length of the text's settled part: what a longer text cannot parse differently.
    size_t settled(const std::string& s) const {
        if (f_ == ReplyFormat::Harmony) {  // (a prompt that ends inside an analysis message: the reply is its body first)
            if (!starts_) return harmony_settled(s);
            const size_t open = std::strlen(kHarmonyOpenAnalysis);
            return std::max(harmony_settled(kHarmonyOpenAnalysis + s), open) - open;
        }
        size_t cut = hold_partial(s, s.size(), {"<think>", "</think>"}, 0);  // (tags a tokenizer may spell in pieces)
        if (f_ == ReplyFormat::Plain || reply_in_reasoning(s, f_, starts_)) return cut;  // tool calls come after the reasoning
        size_t from = 0;  // where the answer starts: after the reasoning's end, when there is one
        if (size_t close = s.find("</think>"); close != std::string::npos) from = close + 8;
        const std::vector<const char*> openers = tool_openers();
        for (const char* o : openers)
            if (size_t at = s.find(o, from); at != std::string::npos) cut = std::min(cut, at);
        if (f_ == ReplyFormat::Llama3) {  // the whole answer may be one JSON call
            size_t k = reply_detail::skip_space(s, from);
            if (k < s.size() && s[k] == '{') cut = std::min(cut, k);
        }
        return hold_partial(s, cut, openers, from);
    }

    // cut moved back over a tail of s[from, cut) that may be one of the markers' beginning.
    static size_t hold_partial(const std::string& s, size_t cut, const std::vector<const char*>& markers, size_t from) {
        size_t keep = 0;
        for (const char* m : markers) {
            const size_t len = std::strlen(m);
            for (size_t n = std::min(len - 1, cut - std::min(cut, from)); n > keep; n--)
                if (s.compare(cut - n, n, m, n) == 0) {
                    keep = n;
                    break;
                }
        }
        return cut - keep;
    }

    std::vector<const char*> tool_openers() const {
        switch (f_) {
            case ReplyFormat::Hermes: return {"<tool_call>", "<function="};
            case ReplyFormat::Llama3: return {"<|python_tag|>"};
            case ReplyFormat::Mistral: return {"[TOOL_CALLS]"};
            case ReplyFormat::Lfm2: return {"<|tool_call_start|>"};
            default: return {};
        }
    }

    // Harmony: complete messages and the body of a message that is not a call are settled; a header still being
    // written, or a call's message before its end, is not.
    static size_t harmony_settled(const std::string& s) {
        size_t i = 0;
        while (i < s.size()) {
            size_t msg = s.find("<|message|>", i);
            if (msg == std::string::npos) return i;
            size_t body = msg + 11, end = s.size();
            for (const char* t : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"}) end = std::min(end, s.find(t, body));
            if (end == s.size())  // the last message, not ended yet: a call waits for its end, a body's tail may be a tag's start
                return s.substr(i, msg - i).find("to=") != std::string::npos
                           ? i : hold_partial(s, s.size(), {"<|end|>", "<|call|>", "<|return|>", "<|start|>"}, body);
            i = end;
            for (const char* t : {"<|end|>", "<|call|>", "<|return|>"})
                if (reply_detail::starts_at(s, i, t)) i += std::strlen(t);
        }
        return s.size();
    }
};

}  // namespace monocu
