// runtime/batch_file.cuh — -i prompts -o results.jsonl: many prompts in one run, for any engine.
//
// Usage (runner.cuh):  return batch_file(gen, tok, opts, vocab, eos);
//
// Input, line by line: a JSON object ({"prompt": "..."}, {"messages": [{"role": ..., "content": ...}, ...]} or
// {"prompt_ids": [1, 2, ...]},
// optionally with "max_tokens", "tools" (a list of OpenAI function schemas for the template, else --tools's), "stop"
// (up to 4 strings: the text ends before the first that appears, finish_reason "stop") and the sampling fields of an
// OpenAI request: "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
// "repetition_penalty", "seed"; a field a line does not give is the flags' (or generation_config.json's))
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
// (batched.cuh), their results still written in input order, and a shared prefix (a system prompt) is computed once
// and then taken from the prefix cache. A line that samples does so with its own "seed", else --seed plus its line
// number, on either path.
#pragma once

#include <sstream>

#include <nlohmann/json.hpp>

#include "host/stop_strings.h"
#include "runtime/batched.cuh"
#include "runtime/generate.cuh"
#include "runtime/prompts.cuh"
#include "server/openai_request.h"

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

// What a line asks for: its prompt ids, its own max_tokens (or -1), its sampling and stop strings, whether it went
// through the chat template, and whether it wants its greedy tokens' gaps ("return_gaps": true: --parallel's results
// then hold its "completion_ids" and each greedy token's top-1 minus top-2 logit, "gaps": how near a tie the choice
// was, for comparisons that allow near ties).
struct LineRequest {
    std::vector<int> ids;
    int max_tokens = -1;
    SamplingParams sp;
    std::vector<std::string> stop;
    bool chat = false, gaps = false;
};

// The line's request; die()s with what is wrong. defaults: the flags' sampling, whose seed plus the line's number
// seeds a line that gives none.
inline LineRequest batch_line_request(const BatchLine& line, const Options& o, int vocab, const Tokenizer* tok, const ChatTemplate& ct,
                                      const SamplingParams& defaults) {
    LineRequest q;
    q.sp = defaults;
    q.sp.seed = defaults.seed + (uint64_t)line.number;
    q.chat = tok && !o.raw && !ct.empty();
    if (line.text[line.text.find_first_not_of(" \t")] != '{') {
        q.ids = prompt_ids(o, line.text, vocab, tok, ct);
        return q;
    }
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line.text, nullptr, false);  // tool schemas keep their key order
    if (j.is_discarded() || !j.is_object()) die("not a valid JSON object");
    if (j.contains("max_tokens")) {
        if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<long long>() < 0 || j["max_tokens"].get<long long>() > 1 << 30)
            die("\"max_tokens\" must be a non-negative integer");
        q.max_tokens = j["max_tokens"].get<int>();
    }
    try {
        ApiRequest r;
        parse_sampling_fields(j, r);
        q.sp = request_sampling(r, q.sp);
        q.stop = r.stop;
    } catch (const ApiError& e) {
        die("%s", e.message.c_str());
    }
    if (!q.stop.empty() && !tok) die("\"stop\" strings need tokenizer.json");
    if (j.contains("tools") && !j["tools"].is_array()) die("\"tools\" must be a list of tool schemas");
    if (j.contains("return_gaps")) {
        if (!j["return_gaps"].is_boolean()) die("\"return_gaps\" must be true or false");
        q.gaps = j["return_gaps"].get<bool>();
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
        q.chat = false;
        q.ids = std::move(ids);
        return q;
    }
    if (has_prompt) {
        if (!j["prompt"].is_string()) die("\"prompt\" must be a string");
        if (j.contains("tools")) die("\"tools\" go with \"messages\"");
        q.ids = prompt_ids(o, j["prompt"].get<std::string>(), vocab, tok, ct);
        return q;
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
    q.chat = true;
    q.ids = chat_prompt_ids(o, msgs, vocab, *tok, ct, j.contains("tools") ? &j["tools"] : nullptr);  // else --tools
    return q;
}

// A line's output as it is generated: the text through the tokenizer's stream decoder and the line's stop strings
// (text from the first stop string on is dropped), and every generated id.
struct LineOutput {
    std::unique_ptr<StreamDecoder> dec;
    StopStrings stops;
    std::string text;
    std::vector<int> ids;
    LineOutput(const Tokenizer* tok, std::vector<std::string> stop)
        : dec(tok ? std::make_unique<StreamDecoder>(*tok) : nullptr), stops(std::move(stop)) {}
    // false: a stop string appeared, and generation ends here.
    bool push(int id) {
        ids.push_back(id);
        if (dec) text += stops.push(dec->push(id));
        return !stops.stopped();
    }
    void flush() {
        if (!dec) return;
        text += stops.push(dec->flush());  // (before the held text: two statements, as operands of + are unordered)
        text += stops.flush();
    }
};

// A line's result: its text (or, without a tokenizer, its ids), token counts, finish reason ("stop" also where a stop
// string ended it), and through a chat template the reply's parts. Returns the completion tokens (an
// end-of-generation id not counted).
// generated: the tokens generated, an end-of-generation id included (the serial path's on_token does not hear it).
inline int batch_record(nlohmann::ordered_json& rec, const Tokenizer* tok, const ChatTemplate& ct, const Options& o, const BatchLine& line,
                        const std::vector<int>& prompt, bool chat, const LineOutput& out, int prompt_tokens, int generated,
                        std::string finish) {
    const std::string& text = out.text;
    rec["text"] = tok ? nlohmann::ordered_json(utf8_repair(text)) : nlohmann::ordered_json(out.ids);
    rec["prompt_tokens"] = prompt_tokens;
    int completion = generated - (finish == "stop" && !out.stops.stopped() ? 1 : 0);
    if (out.stops.stopped()) finish = "stop";
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
    const SamplingParams defaults = g.sampling();
    for (size_t i = 0; i < lines.size(); i++) {
        const BatchLine& line = lines[i];
        nlohmann::ordered_json rec = {{"line", line.number}};  // keys in this order, "line" first
        try {
            LineRequest q = batch_line_request(line, o, vocab, tok, ct, defaults);
            g.forget();
            g.set_sampling(q.sp);
            g.restart_rng();  // (as the batched core starts each sequence's draws)
            LineOutput reply(tok, q.stop);
            Generation r = g.run(q.ids, q.max_tokens >= 0 ? q.max_tokens : o.n_predict, eos, [&](int id) { return reply.push(id); });
            reply.flush();
            tokens += batch_record(rec, tok, ct, o, line, q.ids, q.chat, reply, r.prompt_tokens, (int)r.tokens.size(), r.finish);
            if (q.gaps) rec["completion_ids"] = r.tokens;  // (the gaps themselves come with --parallel)
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
        LineRequest q;
        std::unique_ptr<LineOutput> reply;
        bool done = false;
    };
    std::vector<Job> jobs(lines.size());
    int failed = 0;
    for (size_t i = 0; i < lines.size(); i++) {
        Job& j = jobs[i];
        j.rec = {{"line", lines[i].number}};
        try {
            j.q = batch_line_request(lines[i], o, vocab, tok, ct, sp);
            j.reply = std::make_unique<LineOutput>(tok, j.q.stop);
            BatchedRequest r{(int)i, j.q.ids, j.q.max_tokens >= 0 ? j.q.max_tokens : o.n_predict >= 0 ? o.n_predict : 1 << 30, eos, j.q.sp};
            if (r.max_tokens == 0) {  // nothing to generate: the result is there already
                batch_record(j.rec, tok, ct, o, lines[i], j.q.ids, j.q.chat, *j.reply, (int)j.q.ids.size(), 0, "length");
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
        for (; written < jobs.size() && jobs[written].done; written++) write_record(out, jobs[written].rec), jobs[written].reply.reset();
    };
    auto finish = [&](int id, int prompt_tokens, const std::string& reason, const std::vector<float>* gaps) {
        Job& j = jobs[id];
        j.reply->flush();
        tokens += batch_record(j.rec, tok, ct, o, lines[id], j.q.ids, j.q.chat, *j.reply, prompt_tokens, (int)j.reply->ids.size(), reason);
        if (j.q.gaps) {
            j.rec["completion_ids"] = j.reply->ids;
            if (gaps) j.rec["gaps"] = *gaps;
        }
        j.done = true, finished++;
    };
    flush_ready();
    std::vector<int> stopped;  // ended by a stop string this step
    while (!br.idle()) {
        stopped.clear();
        for (const BatchedResult& r : br.step([&](int id, int token, const TokenLogprobs*) {
                 if (!jobs[id].reply->push(token)) stopped.push_back(id);
             }))
            finish(r.id, r.prompt_tokens, r.finish, &r.gaps);
        for (int id : stopped)
            if (br.cancel(id)) finish(id, (int)jobs[id].q.ids.size(), "stop", nullptr);  // (else it finished in the step)
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
