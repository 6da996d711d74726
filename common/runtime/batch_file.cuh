// runtime/batch_file.cuh — -i prompts -o results.jsonl: many prompts in one run, for any engine.
//
// Usage (runner.cuh):  return batch_file(gen, tok, opts, vocab, eos);
//
// Input, line by line: a JSON object ({"prompt": "..."} or {"messages": [{"role": ..., "content": ...}, ...]},
// optionally with "max_tokens" and "tools", a list of OpenAI function schemas for the template, else --tools's)
// or any other line as a prompt's text (with the chat template unless --raw, like -p). Output, one JSON line per
// input line, in order:
//   {"line": 3, "text": "...", "prompt_tokens": 12, "completion_tokens": 40, "finish_reason": "stop"}
// and where a reply through the chat template holds reasoning or tool calls (tokenizer/chat_reply.h), also its
// parts as OpenAI returns them: "content", "reasoning_content", "tool_calls" (and "warnings" for calls that did
// not parse), with "finish_reason": "tool_calls" when it stopped after calls.
// or, for a line that cannot be run, {"line": 3, "error": "..."}: the error is also said on stderr with the
// line's number, and the run goes on. Empty lines are skipped. Progress on stderr: done/total and tok/s.
// Each prompt starts a fresh sequence (no reuse of an earlier line's cache: results do not depend on order);
// until the batched core lands the prompts run one after another.
#pragma once

#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/generate.cuh"
#include "runtime/prompts.cuh"

namespace monocu {

struct BatchLine {
    int number = 0;  // 1-based line number in the input
    std::string text;
};

inline std::vector<BatchLine> read_batch_lines(const std::string& path) {
    std::istringstream f(read_text_file(path));  // a regular file of bounded size (host/files.h)
    std::vector<BatchLine> lines;
    std::string s;
    for (int n = 1; std::getline(f, s); n++) {
        if (!s.empty() && s.back() == '\r') s.pop_back();
        if (s.find_first_not_of(" \t") == std::string::npos) continue;
        lines.push_back({n, s});
    }
    if (lines.empty()) die("-i %s: no prompts", path.c_str());
    return lines;
}

// The line's prompt ids, its own max_tokens (or -1) and whether it went through the chat template; die()s with
// what is wrong.
inline std::vector<int> batch_line_ids(const BatchLine& line, const Options& o, int vocab, const Tokenizer* tok, const ChatTemplate& ct,
                                       int* max_tokens, bool* chat) {
    *max_tokens = -1;
    *chat = tok && !o.raw && !ct.empty();
    if (line.text[line.text.find_first_not_of(" \t")] != '{') return prompt_ids(o, line.text, vocab, tok, ct);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line.text, nullptr, false);  // tool schemas keep their key order
    if (j.is_discarded() || !j.is_object()) die("not a valid JSON object");
    if (j.contains("max_tokens")) {
        if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<long long>() < 0 || j["max_tokens"].get<long long>() > 1 << 30)
            die("\"max_tokens\" must be a non-negative integer");
        *max_tokens = j["max_tokens"].get<int>();
    }
    if (j.contains("tools") && !j["tools"].is_array()) die("\"tools\" must be a list of tool schemas");
    bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages");
    if (has_prompt == has_messages) die("give exactly one of \"prompt\" and \"messages\"");
    if (has_prompt) {
        if (!j["prompt"].is_string()) die("\"prompt\" must be a string");
        if (j.contains("tools")) die("\"tools\" go with \"messages\"");
        return prompt_ids(o, j["prompt"].get<std::string>(), vocab, tok, ct);
    }
    if (!tok) die("\"messages\" needs tokenizer.json");
    if (!j["messages"].is_array() || j["messages"].empty()) die("\"messages\" must be a non-empty list");
    std::vector<ChatMessage> msgs;
    for (const auto& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() || !m["content"].is_string())
            die("each message must be {\"role\": string, \"content\": string}");
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    if (ct.empty()) die("\"messages\" needs a chat template (this checkpoint has none)");
    *chat = true;
    return chat_prompt_ids(o, msgs, vocab, *tok, ct, j.contains("tools") ? &j["tools"] : nullptr);  // else --tools
}

template <class M>
int batch_file(Generator<M>& g, const Tokenizer* tok, const ChatTemplate& ct, const Options& o, int vocab, const std::vector<int>& eos) {
    std::vector<BatchLine> lines = read_batch_lines(o.in_file);
    FILE* out = std::fopen(o.out_file.c_str(), "w");
    if (!out) die("-o %s: cannot open for writing", o.out_file.c_str());
    double t0 = wall_ms();
    long tokens = 0;
    int failed = 0;
    for (size_t i = 0; i < lines.size(); i++) {
        const BatchLine& line = lines[i];
        nlohmann::ordered_json rec = {{"line", line.number}};  // keys in this order, "line" first
        try {
            int max_tokens;
            bool chat;
            std::vector<int> ids = batch_line_ids(line, o, vocab, tok, ct, &max_tokens, &chat);
            g.forget();
            std::unique_ptr<StreamDecoder> dec = tok ? std::make_unique<StreamDecoder>(*tok) : nullptr;
            std::string text;
            std::vector<int> gen_ids;
            Generation r = g.run(ids, max_tokens >= 0 ? max_tokens : o.n_predict, eos, [&](int id) {
                if (dec) text += dec->push(id);
                else gen_ids.push_back(id);
                return true;
            });
            if (dec) text += dec->flush();
            rec["text"] = tok ? nlohmann::ordered_json(utf8_repair(text)) : nlohmann::ordered_json(gen_ids);
            rec["prompt_tokens"] = r.prompt_tokens;
            int completion = (int)r.tokens.size() - (r.finish == "stop" ? 1 : 0);
            rec["completion_tokens"] = completion;
            rec["finish_reason"] = r.finish;
            tokens += completion;
            if (chat) {  // the reply's parts, where it has more than an answer
                ReplyFormat f = reply_format(ct);
                ChatReply parts = parse_reply(utf8_repair(text), f, prompt_opens_reasoning(*tok, ids, f), o.seed + (uint64_t)line.number);
                if (!parts.reasoning.empty() || !parts.tool_calls.empty() || !parts.warnings.empty()) {
                    nlohmann::ordered_json m = reply_message(parts);
                    for (const char* k : {"content", "reasoning_content", "tool_calls"})
                        if (m.contains(k)) rec[k] = m[k];
                    if (!parts.warnings.empty()) rec["warnings"] = parts.warnings;
                    if (!parts.tool_calls.empty() && r.finish == "stop") rec["finish_reason"] = "tool_calls";
                }
            }
        } catch (const UserError& e) {
            std::fprintf(stderr, "%s:%d: %s (skipped)\n", o.in_file.c_str(), line.number, e.what());
            rec["error"] = e.what();
            failed++;
        }
        std::fprintf(out, "%s\n", rec.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
        std::fflush(out);
        double s = (wall_ms() - t0) / 1000.0;
        if (!o.quiet) std::fprintf(stderr, "\rmonocu: %zu/%zu prompts, %ld tokens, %.1f tok/s ", i + 1, lines.size(), tokens, s > 0 ? tokens / s : 0.0);
    }
    if (!o.quiet) std::fprintf(stderr, "\n");
    if (std::fclose(out) != 0) die("-o %s: write failed", o.out_file.c_str());
    if (failed) std::fprintf(stderr, "monocu: %d of %zu lines could not be run (see above and their \"error\")\n", failed, lines.size());
    return 0;
}

}  // namespace monocu
