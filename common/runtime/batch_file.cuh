// runtime/batch_file.cuh — -i prompts -o results.jsonl: many prompts in one run, for any engine.
//
// Usage (runner.cuh):  return batch_file(gen, tok, opts, vocab, eos);
//
// Input, line by line: a JSON object ({"prompt": "..."}, {"messages": [{"role": ..., "content": ...}, ...]} or
// {"prompt_ids": [1, 2, ...]},
// optionally with "max_tokens" and "tools", a list of OpenAI function schemas for the template, else --tools's)
// or any other line as a prompt's text (with the chat template unless --raw, like -p). Output, one JSON line per
// input line, in order:
//   {"line": 3, "text": "...", "prompt_tokens": 12, "completion_tokens": 40, "finish_reason": "stop"}
// and where a reply through the chat template holds reasoning or tool calls (tokenizer/chat_reply.h), also its
// parts as OpenAI returns them: "content", "reasoning_content", "tool_calls" (and "warnings" for calls that did
// not parse), with "finish_reason": "tool_calls" when it stopped after calls.
// or, for a line that cannot be run, {"line": 3, "error": "..."}: the error is also said on stderr with the
// line's number, and the run goes on. Empty lines are skipped. Progress on stderr: done/total and tok/s.
// Each prompt starts a fresh sequence (no reuse of an earlier line's cache: results do not depend on order), one
// after another; with --parallel N (batch_file_parallel) up to N of them run together through the batched core
// (batched.cuh), their results still written in input order. There each line samples with its own seed, --seed
// plus its line number, and a shared prefix (a system prompt) is computed once and then taken from the prefix cache.
#pragma once

#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/batched.cuh"
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
// gaps (where given): the line asks for "return_gaps": true (--parallel's results then hold its "completion_ids" and
// each greedy token's top-1 minus top-2 logit, "gaps": how near a tie the choice was, for comparisons that allow
// near ties).
inline std::vector<int> batch_line_ids(const BatchLine& line, const Options& o, int vocab, const Tokenizer* tok, const ChatTemplate& ct,
                                       int* max_tokens, bool* chat, bool* gaps = nullptr) {
    *max_tokens = -1;
    *chat = tok && !o.raw && !ct.empty();
    if (gaps) *gaps = false;
    if (line.text[line.text.find_first_not_of(" \t")] != '{') return prompt_ids(o, line.text, vocab, tok, ct);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line.text, nullptr, false);  // tool schemas keep their key order
    if (j.is_discarded() || !j.is_object()) die("not a valid JSON object");
    if (j.contains("max_tokens")) {
        if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<long long>() < 0 || j["max_tokens"].get<long long>() > 1 << 30)
            die("\"max_tokens\" must be a non-negative integer");
        *max_tokens = j["max_tokens"].get<int>();
    }
    if (j.contains("tools") && !j["tools"].is_array()) die("\"tools\" must be a list of tool schemas");
    if (j.contains("return_gaps")) {
        if (!j["return_gaps"].is_boolean()) die("\"return_gaps\" must be true or false");
        if (gaps) *gaps = j["return_gaps"].get<bool>();
    }
    bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages"), has_ids = j.contains("prompt_ids");
    if (has_prompt + has_messages + has_ids != 1) die("give exactly one of \"prompt\", \"messages\" and \"prompt_ids\"");
    if (has_ids) {  // token ids as they are (a checkpoint without tokenizer.json, or a test)
        if (j.contains("tools")) die("\"tools\" go with \"messages\"");
        const auto& a = j["prompt_ids"];
        if (!a.is_array() || a.empty()) die("\"prompt_ids\" must be a non-empty list of token ids");
        std::vector<int> ids;
        for (const auto& v : a) {
            if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() >= vocab)
                die("\"prompt_ids\" holds %s; token ids are integers in [0, %d)", v.dump().c_str(), vocab);
            ids.push_back(v.get<int>());
        }
        *chat = false;
        return ids;
    }
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

// A line's result: its text (or, without a tokenizer, its ids), token counts, finish reason, and through a chat
// template the reply's parts. Returns the completion tokens (an end-of-generation id not counted).
inline int batch_record(nlohmann::ordered_json& rec, const Tokenizer* tok, const ChatTemplate& ct, const Options& o, const BatchLine& line,
                        const std::vector<int>& prompt, bool chat, const std::string& text, const std::vector<int>& gen_ids, int prompt_tokens,
                        int generated, const std::string& finish) {
    rec["text"] = tok ? nlohmann::ordered_json(utf8_repair(text)) : nlohmann::ordered_json(gen_ids);
    rec["prompt_tokens"] = prompt_tokens;
    int completion = generated - (finish == "stop" ? 1 : 0);
    rec["completion_tokens"] = completion;
    rec["finish_reason"] = finish;
    if (chat) {  // the reply's parts, where it has more than an answer
        ReplyFormat f = reply_format(ct);
        ChatReply parts = parse_reply(utf8_repair(text), f, prompt_opens_reasoning(*tok, prompt, f), o.seed + (uint64_t)line.number);
        if (!parts.reasoning.empty() || !parts.tool_calls.empty() || !parts.warnings.empty()) {
            nlohmann::ordered_json m = reply_message(parts);
            for (const char* k : {"content", "reasoning_content", "tool_calls"})
                if (m.contains(k)) rec[k] = m[k];
            if (!parts.warnings.empty()) rec["warnings"] = parts.warnings;
            if (!parts.tool_calls.empty() && finish == "stop") rec["finish_reason"] = "tool_calls";
        }
    }
    return completion;
}

inline void write_record(FILE* out, const nlohmann::ordered_json& rec) {
    std::fprintf(out, "%s\n", rec.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    std::fflush(out);
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
            bool chat, gaps;
            std::vector<int> ids = batch_line_ids(line, o, vocab, tok, ct, &max_tokens, &chat, &gaps);
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
            tokens += batch_record(rec, tok, ct, o, line, ids, chat, text, gen_ids, r.prompt_tokens, (int)r.tokens.size(), r.finish);
            if (gaps) rec["completion_ids"] = r.tokens;  // (the gaps themselves come with --parallel)
        } catch (const UserError& e) {
            std::fprintf(stderr, "%s:%d: %s (skipped)\n", o.in_file.c_str(), line.number, e.what());
            rec["error"] = e.what();
            failed++;
        }
        write_record(out, rec);
        double s = (wall_ms() - t0) / 1000.0;
        if (!o.quiet) std::fprintf(stderr, "\rmonocu: %zu/%zu prompts, %ld tokens, %.1f tok/s ", i + 1, lines.size(), tokens, s > 0 ? tokens / s : 0.0);
    }
    if (!o.quiet) std::fprintf(stderr, "\n");
    if (std::fclose(out) != 0) die("-o %s: write failed", o.out_file.c_str());
    if (failed) std::fprintf(stderr, "monocu: %d of %zu lines could not be run (see above and their \"error\")\n", failed, lines.size());
    return 0;
}

// -i/-o through the batched core: every line queued at once, up to --parallel running; results in input order.
template <class M>
int batch_file_parallel(BatchedRunner<M>& br, const Tokenizer* tok, const ChatTemplate& ct, const Options& o, int vocab,
                        const std::vector<int>& eos, const SamplingParams& sp) {
    std::vector<BatchLine> lines = read_batch_lines(o.in_file);
    FILE* out = std::fopen(o.out_file.c_str(), "w");
    if (!out) die("-o %s: cannot open for writing", o.out_file.c_str());
    struct Job {
        nlohmann::ordered_json rec;
        std::vector<int> ids;
        bool chat = false, done = false, gaps = false;
    };
    std::vector<Job> jobs(lines.size());
    int failed = 0;
    for (size_t i = 0; i < lines.size(); i++) {
        Job& j = jobs[i];
        j.rec = {{"line", lines[i].number}};
        try {
            int max_tokens;
            j.ids = batch_line_ids(lines[i], o, vocab, tok, ct, &max_tokens, &j.chat, &j.gaps);
            BatchedRequest r{(int)i, j.ids, max_tokens >= 0 ? max_tokens : o.n_predict >= 0 ? o.n_predict : 1 << 30, eos, sp};
            r.sp.seed = sp.seed + (uint64_t)lines[i].number;
            if (r.max_tokens == 0) {  // nothing to generate: the result is there already
                batch_record(j.rec, tok, ct, o, lines[i], j.ids, j.chat, "", {}, (int)j.ids.size(), 0, "length");
                j.done = true;
                continue;
            }
            br.add(r);
        } catch (const UserError& e) {
            std::fprintf(stderr, "%s:%d: %s (skipped)\n", o.in_file.c_str(), lines[i].number, e.what());
            j.rec["error"] = e.what();
            j.done = true;
            failed++;
        }
    }
    double t0 = wall_ms();
    long tokens = 0;
    size_t written = 0, finished = 0;
    auto flush_ready = [&] {  // results go out in input order, as soon as every earlier line has its own
        for (; written < jobs.size() && jobs[written].done; written++) write_record(out, jobs[written].rec);
    };
    flush_ready();
    while (!br.idle()) {
        for (const BatchedResult& r : br.step()) {
            Job& j = jobs[r.id];
            const std::string text = tok ? tok->decode(r.tokens) : "";  // (what the serial path's stream adds up to)
            tokens += batch_record(j.rec, tok, ct, o, lines[r.id], j.ids, j.chat, text, tok ? std::vector<int>{} : r.tokens, r.prompt_tokens,
                                   (int)r.tokens.size(), r.finish);
            if (j.gaps) j.rec["completion_ids"] = r.tokens, j.rec["gaps"] = r.gaps;
            j.done = true, finished++;
        }
        flush_ready();
        double s = (wall_ms() - t0) / 1000.0;
        if (!o.quiet)
            std::fprintf(stderr, "\rmonocu: %zu/%zu prompts, %d running, %ld tokens, %.1f tok/s ", finished + failed, lines.size(), br.running(),
                         tokens, s > 0 ? tokens / s : 0.0);
    }
    flush_ready();
    if (!o.quiet) {
        const BatchedStats& st = br.stats();
        std::fprintf(stderr, "\nmonocu: %ld passes (%ld as CUDA graphs), %ld preemptions, prefix cache %ld of %ld blocks hit\n", st.steps,
                     st.graph_steps, st.preemptions, st.prefix_hit_blocks, st.prefix_hit_blocks + st.prefix_miss_blocks);
    }
    if (std::fclose(out) != 0) die("-o %s: write failed", o.out_file.c_str());
    if (failed) std::fprintf(stderr, "monocu: %d of %zu lines could not be run (see above and their \"error\")\n", failed, lines.size());
    return 0;
}

}  // namespace monocu
