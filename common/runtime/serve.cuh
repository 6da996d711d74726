// runtime/serve.cuh — --port: the OpenAI-compatible server (server/http_server.h) on the batched core
// (runtime/batched.cuh), for every engine.
//
// Usage (runner.cuh, after the model is loaded and the batched runner built):
//   return serve(br, tok, ct, o, info, eos, sampling_defaults);
//
// Threads. The GPU belongs to one thread, this function's (the scheduler thread): it takes new requests from an
// inbox, drops the ones whose clients left, runs one batched step and hands each sampled token to its request's
// job. HTTP requests run on cpp-httplib's worker threads: each turns its body into prompt ids (the chat template,
// the tokenizer) and puts one request per choice in the inbox; each streaming reply's worker turns its job's tokens
// into text, stop strings, reasoning and tool calls (server/reply_stream.h), so the GPU's thread never decodes
// text. A stop string found there cancels the sequence, which leaves the batch at the next step, as does one whose
// client went away.
//
// Shutdown: SIGINT or SIGTERM stops new requests (503), lets the running ones finish for up to 30 s, ends the rest
// (finish_reason "cancelled"), then stops the HTTP side and returns. A second signal ends them at once.
#pragma once

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>

#include "runtime/batched.cuh"
#include "runtime/prompts.cuh"
#include "server/http_server.h"
#include "server/reply_stream.h"

namespace monocu {

// One choice: the GPU's thread feeds it token ids and its end; the HTTP thread that pops it gets text.
class TokenJob : public GenJob {
public:
    // logprobs: -1 none, else each token's entry with that many of the most likely beside it.
    TokenJob(const Tokenizer& tok, std::vector<std::string> stops, ReplyStream::Mode mode, ReplyFormat f, bool starts_in_reasoning,
             uint64_t id_seed, int prompt_tokens, std::vector<int> eos, int logprobs)
        : tok_(tok), rs_(tok, std::move(stops), mode, f, starts_in_reasoning, id_seed), prompt_tokens_(prompt_tokens), eos_(std::move(eos)),
          logprobs_(logprobs) {}

    // The GPU's thread.
    void feed(int id, const TokenLogprobs* lp) {
        std::lock_guard<std::mutex> lock(m_);
        ids_.push_back(id);
        if (logprobs_ >= 0) lps_.push_back(lp ? *lp : TokenLogprobs());
        cv_.notify_all();
    }
    void end(const std::string& finish) {
        std::lock_guard<std::mutex> lock(m_);
        ended_ = true, finish_ = finish;
        cv_.notify_all();
    }

    // The HTTP thread: the tokens that came since the last call, as text.
    bool pop(GenPiece& p, std::chrono::milliseconds wait) override {
        std::vector<int> ids;
        std::vector<TokenLogprobs> lps;
        bool ended;
        std::string finish;
        {
            std::unique_lock<std::mutex> lock(m_);
            if (done_ || !cv_.wait_for(lock, wait, [&] { return !ids_.empty() || ended_; })) return false;
            ids.swap(ids_), lps.swap(lps_);
            ended = ended_, finish = finish_;
        }
        p = GenPiece();
        if (logprobs_ >= 0) p.logprobs = ojson::array();
        bool stopped = false;
        for (size_t k = 0; k < ids.size(); k++) {
            const int id = ids[k];
            if (std::find(eos_.begin(), eos_.end(), id) != eos_.end()) continue;  // the end of generation is not text
            completion_++;
            if (logprobs_ >= 0) p.logprobs.push_back(entry(id, lps[k]));
            ReplyDelta d = rs_.push(id);
            p.content += d.content, p.reasoning += d.reasoning;
            if (rs_.stopped()) {
                stopped = true;
                cancel();  // the scheduler thread drops the sequence at its next step
                break;
            }
        }
        if (!stopped && !ended) return true;
        ReplyDelta d = rs_.finish();
        p.content += d.content, p.reasoning += d.reasoning;
        p.done = true;
        p.finish_reason = stopped ? "stop" : finish == "context" ? "length" : finish;
        if (!d.tool_calls.empty()) {
            p.tool_calls = ojson::array();
            for (const ToolCall& c : d.tool_calls)
                p.tool_calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
            if (p.finish_reason == "stop") p.finish_reason = "tool_calls";
        }
        p.usage = ApiUsage{prompt_tokens_, completion_};
        std::lock_guard<std::mutex> lock(m_);
        done_ = true;
        return true;
    }

private:
    const Tokenizer& tok_;
    ReplyStream rs_;  // (the HTTP thread's alone)
    int prompt_tokens_, completion_ = 0;
    std::vector<int> eos_;
    int logprobs_;
    std::mutex m_;
    std::condition_variable cv_;
    std::vector<int> ids_;
    std::vector<TokenLogprobs> lps_;  // beside ids_, when logprobs are wanted
    bool ended_ = false, done_ = false;
    std::string finish_;

    // A token as OpenAI's logprobs show it: its text (U+FFFD for a part of a character), log-probability and bytes.
    ojson token_json(int id, float logprob) const {
        const std::string bytes = tok_.decode(std::vector<int>{id});
        ojson b = ojson::array();
        for (unsigned char c : bytes) b.push_back((int)c);
        return ojson{{"token", utf8_repair(bytes)}, {"logprob", logprob}, {"bytes", b}};
    }
    ojson entry(int id, const TokenLogprobs& lp) const {
        ojson e = token_json(id, lp.logprob), top = ojson::array();
        for (const auto& [t, l] : lp.top) top.push_back(token_json(t, l));
        e["top_logprobs"] = top;
        return e;
    }
};

// What the server needs of the checkpoint and the flags.
struct ServeModel {
    const Tokenizer* tok = nullptr;
    const ChatTemplate* ct = nullptr;
    int vocab = 0, ctx = 0;
    std::vector<int> eos;
    SamplingParams defaults;  // the flags' and generation_config.json's: what a request does not set
    bool no_think = false;
};

inline volatile sig_atomic_t& serve_signals() {
    static volatile sig_atomic_t n = 0;
    return n;
}
inline void serve_on_signal(int) { serve_signals() = serve_signals() + 1; }

template <class M>
class EngineBackend : public Backend {
public:
    EngineBackend(BatchedRunner<M>& br, const ServeModel& sm) : br_(br), sm_(sm), rng_(std::random_device{}()) {}

    // An HTTP thread: the request's prompt ids, checked against the context and the pool, into the inbox.
    std::shared_ptr<GenJob> submit(const ApiRequest& r, int choice) override {
        const Tokenizer& tok = *sm_.tok;
        const bool chat = r.endpoint == ApiEndpoint::Chat;
        if (chat && sm_.ct->empty())
            throw ApiError{400, "this model has no chat template; use /v1/completions", "invalid_request_error", "messages", ""};
        std::vector<int> ids;
        ReplyFormat format = ReplyFormat::Plain;
        bool starts = false;
        if (chat) {
            const bool tools = !r.tools.is_null() && r.tool_choice != "none";
            ChatOptions co;
            co.enable_thinking = !sm_.no_think;
            if (tools) co.kwargs["tools"] = offered_tools(r);
            try {
                ids = encode_chat_json(tok, *sm_.ct, template_messages(r.messages), co);
            } catch (const UserError& e) {
                throw ApiError{400, std::string("the chat template refused these messages: ") + e.what(), "invalid_request_error", "messages", ""};
            }
            ReplyFormat f = reply_format(*sm_.ct);
            format = tools || f == ReplyFormat::Harmony ? f : ReplyFormat::Plain;
            starts = prompt_opens_reasoning(tok, ids, format);
        } else if (r.prompt_is_ids) {
            ids = r.prompt_ids;
        } else {
            ids = tokenize(r.prompt, true);
        }
        const char* param = chat ? "messages" : "prompt";
        for (int t : ids)
            if (t < 0 || t >= sm_.vocab)
                throw ApiError{400, "token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(sm_.vocab) + ")", "invalid_request_error", param, ""};
        if (ids.empty()) throw ApiError{400, "the prompt is empty", "invalid_request_error", param, ""};
        const int n = (int)ids.size();
        if (n >= sm_.ctx || (r.max_tokens > 0 && n + r.max_tokens > sm_.ctx))
            throw ApiError{400, "this model's context is " + std::to_string(sm_.ctx) + " tokens; the request asks for " +
                                    std::to_string(n + std::max(r.max_tokens, 1)) + " (" + std::to_string(n) + " in the prompt, " +
                                    std::to_string(std::max(r.max_tokens, 1)) + " to generate)",
                           "invalid_request_error", param, "context_length_exceeded"};
        BatchedRequest q;
        q.prompt = std::move(ids);
        q.max_tokens = r.max_tokens > 0 ? r.max_tokens : sm_.ctx - n;
        q.stop_ids = sm_.eos;
        q.sp = sampling(r, choice);
        const long need = CEIL_DIV((long)n + q.max_tokens, kKvBlockSize);
        if (need > br_.kv_blocks())
            throw ApiError{400, "the request needs " + std::to_string(need * kKvBlockSize) + " positions of KV cache; the pool holds " +
                                    std::to_string((long)br_.kv_blocks() * kKvBlockSize) + " (lower max_tokens)",
                           "invalid_request_error", "max_tokens", "context_length_exceeded"};
        q.logprobs = r.logprobs ? r.top_logprobs : -1;
        auto job = std::make_shared<TokenJob>(tok, r.stop, chat ? ReplyStream::Mode::Chat : ReplyStream::Mode::Text, format, starts,
                                              q.sp.seed ^ 0x9e3779b97f4a7c15ull, n, sm_.eos, q.logprobs);
        std::lock_guard<std::mutex> lock(m_);
        if (draining_) throw ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
        q.id = next_id_++;
        inbox_.push_back({std::move(q), job});
        cv_.notify_all();
        return job;
    }

    int queued() const override {
        std::lock_guard<std::mutex> lock(m_);
        return (int)inbox_.size() + snap_.waiting;
    }
    bool draining() const override {
        std::lock_guard<std::mutex> lock(m_);
        return draining_;
    }
    std::vector<int> tokenize(const std::string& text, bool add_special) override {
        std::vector<int> ids;
        if (add_special && sm_.tok->add_bos() && sm_.tok->bos_id() >= 0) ids.push_back(sm_.tok->bos_id());
        std::vector<int> body = sm_.tok->encode(text);
        ids.insert(ids.end(), body.begin(), body.end());
        return ids;
    }
    std::string detokenize(const std::vector<int>& ids) override {
        for (int t : ids)
            if (t >= sm_.vocab)
                throw ApiError{400, "token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(sm_.vocab) + ")", "invalid_request_error", "tokens", ""};
        return utf8_repair(sm_.tok->decode(ids));
    }
    std::string metrics() override {
        Snapshot s;
        {
            std::lock_guard<std::mutex> lock(m_);
            s = snap_;
            s.waiting += (int)inbox_.size();
        }
        std::string out;
        auto line = [&](const char* name, const char* type, const char* help, double v) {
            out += strf("# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
        };
        line("monocu_requests_running", "gauge", "sequences in the batch", s.running);
        line("monocu_requests_waiting", "gauge", "sequences waiting for room", s.waiting);
        line("monocu_requests_finished_total", "counter", "sequences that ran to their end", (double)s.finished);
        line("monocu_requests_cancelled_total", "counter", "sequences dropped early (client gone, stop string, shutdown)", (double)s.cancelled);
        line("monocu_prompt_tokens_total", "counter", "prompt tokens of the sequences admitted", (double)s.prompt_tokens);
        line("monocu_generated_tokens_total", "counter", "tokens sampled", (double)s.generated);
        line("monocu_kv_blocks_used", "gauge", "KV cache blocks held by running sequences", s.kv_used);
        line("monocu_kv_blocks_total", "gauge", "KV cache blocks in the pool", s.kv_total);
        line("monocu_prefix_cache_hit_blocks_total", "counter", "prompt blocks found in the prefix cache", (double)s.hits);
        line("monocu_prefix_cache_miss_blocks_total", "counter", "prompt blocks computed", (double)s.misses);
        line("monocu_preemptions_total", "counter", "sequences sent back to wait for KV room", (double)s.preemptions);
        out += "# HELP monocu_step_seconds batched forward steps\n# TYPE monocu_step_seconds summary\n";
        out += strf("monocu_step_seconds_sum %.9g\nmonocu_step_seconds_count %ld\n", s.step_s, s.steps);
        return out;
    }

    // The scheduler thread's loop, until a signal has asked it to stop and the running sequences are done (or 30 s).
    void run() {
        std::unordered_map<int, std::shared_ptr<TokenJob>> live;
        double drain_start = 0;
        while (true) {
            std::deque<Pending> in;
            {
                std::unique_lock<std::mutex> lock(m_);
                if (br_.idle() && inbox_.empty() && !serve_signals())
                    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return !inbox_.empty(); });
                in.swap(inbox_);
                if (serve_signals() && !draining_) draining_ = true, drain_start = wall_ms();
            }
            for (Pending& p : in) {
                try {
                    const int id = p.req.id;
                    stats_.prompt_tokens += (long)p.req.prompt.size();
                    br_.add(std::move(p.req));
                    live[id] = p.job;
                } catch (const UserError& e) {  // (submit() checks what add() refuses: not expected)
                    std::fprintf(stderr, "monocu: request refused by the scheduler: %s\n", e.what());
                    p.job->end("error");
                }
            }
            const bool give_up = draining_ && (serve_signals() > 1 || wall_ms() - drain_start > 30000);
            for (auto it = live.begin(); it != live.end();) {
                if (it->second->cancelled() || give_up) {
                    br_.cancel(it->first);
                    it->second->end("cancelled");
                    stats_.cancelled++;
                    it = live.erase(it);
                } else {
                    ++it;
                }
            }
            if (!br_.idle()) {
                const double t0 = wall_ms();
                for (const BatchedResult& r : br_.step([&](int id, int token, const TokenLogprobs* lp) {
                         stats_.generated++;
                         live.at(id)->feed(token, lp);
                     })) {
                    live.at(r.id)->end(r.finish);
                    live.erase(r.id);
                    stats_.finished++;
                }
                stats_.step_s += (wall_ms() - t0) / 1000.0, stats_.steps++;
            }
            {
                std::lock_guard<std::mutex> lock(m_);
                snap_ = stats_;
                snap_.running = br_.running(), snap_.waiting = br_.waiting();
                snap_.kv_used = br_.kv_blocks_used(), snap_.kv_total = br_.kv_blocks();
                const BatchedStats& bs = br_.stats();
                snap_.hits = bs.prefix_hit_blocks, snap_.misses = bs.prefix_miss_blocks, snap_.preemptions = bs.preemptions;
                if (draining_ && br_.idle() && inbox_.empty()) return;
            }
        }
    }

private:
    struct Pending {
        BatchedRequest req;
        std::shared_ptr<TokenJob> job;
    };
    struct Snapshot {
        int running = 0, waiting = 0, kv_used = 0, kv_total = 0;
        long finished = 0, cancelled = 0, prompt_tokens = 0, generated = 0, hits = 0, misses = 0, preemptions = 0, steps = 0;
        double step_s = 0;
    };
    BatchedRunner<M>& br_;
    ServeModel sm_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::deque<Pending> inbox_;
    bool draining_ = false;
    int next_id_ = 0;
    Snapshot stats_, snap_;  // the scheduler thread's counts, and the copy the HTTP threads read
    std::mt19937_64 rng_;

    // The request's sampling: its own fields, the server's defaults for those it does not give; a seed of its own
    // per choice (seed + choice), or a random one.
    SamplingParams sampling(const ApiRequest& r, int choice) {
        SamplingParams p = request_sampling(r, sm_.defaults);
        if (r.seed_set) {
            p.seed = r.seed + (uint64_t)choice;
        } else {
            std::lock_guard<std::mutex> lock(m_);
            p.seed = rng_();
        }
        return p;
    }

    // The tools the template offers: all of them, or the one tool_choice names.
    static ojson offered_tools(const ApiRequest& r) {
        if (r.tool_choice == "auto" || r.tool_choice == "required") return r.tools;
        ojson one = ojson::array();
        for (const auto& t : r.tools)
            if (t["function"]["name"] == r.tool_choice) one.push_back(t);
        return one;
    }

    // Messages as chat templates take them: text parts joined into one string, null content as "", a tool call's
    // arguments (JSON text in OpenAI's API) as the object they spell.
    static ojson template_messages(const ojson& msgs) {
        ojson out = msgs;
        for (auto& m : out) {
            if (m.contains("content") && m["content"].is_null()) m["content"] = "";  // (an assistant turn of tool calls alone:
                                                                                    // templates test it as text)
            if (m.contains("content") && m["content"].is_array()) {
                std::string text;
                for (const auto& part : m["content"]) text += (text.empty() ? "" : "\n") + part["text"].get<std::string>();
                m["content"] = text;
            }
            if (m.contains("tool_calls") && m["tool_calls"].is_array())
                for (auto& c : m["tool_calls"])
                    if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("arguments") &&
                        c["function"]["arguments"].is_string()) {
                        ojson a = ojson::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
                        if (a.is_object()) c["function"]["arguments"] = a;
                    }
        }
        return out;
    }
};

// The server's main loop: listen, serve until SIGINT / SIGTERM, drain, stop.
template <class M>
int serve(BatchedRunner<M>& br, const ServeModel& sm, const Options& o) {
    if (!sm.tok) die("%s: --port needs the checkpoint's tokenizer.json", o.model.c_str());
    EngineBackend<M> backend(br, sm);
    ServerOptions so;
    so.host = o.host, so.port = o.port, so.api_key = o.api_key;
    so.alias = o.alias;
    if (so.alias.empty()) {  // the checkpoint folder's name
        std::string dir = o.model;
        while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        so.alias = dir.substr(dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/') + 1);
    }
    // Requests past the running ones wait in a queue of max_queue; more get 503. Every request in either holds an HTTP
    // thread (a streaming one for its whole reply), so there are threads for all of them, and a few for the rest.
    so.max_queue = std::max(64, o.parallel);
    so.threads = o.parallel + so.max_queue + 32;
    struct sigaction sa = {};
    sa.sa_handler = serve_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not the end of the server
    ApiServer server(so, backend);
    int port = server.start();
    std::fprintf(stderr, "monocu: serving '%s' at http://%s:%d/v1 (%d sequences at once, context %d each); Ctrl-C stops\n", so.alias.c_str(),
                 o.host.c_str(), port, o.parallel, sm.ctx);
    backend.run();
    std::fprintf(stderr, "monocu: stopping: running requests done\n");
    server.stop();
    const BatchedStats& st = br.stats();
    std::fprintf(stderr, "monocu: %ld passes (%ld as CUDA graphs), %ld preemptions, prefix cache %ld of %ld blocks hit\n", st.steps,
                 st.graph_steps, st.preemptions, st.prefix_hit_blocks, st.prefix_hit_blocks + st.prefix_miss_blocks);
    return 0;
}

}  // namespace monocu
