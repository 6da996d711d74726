// server/http_server.h — the OpenAI-compatible HTTP front (cpp-httplib): routes, API key, limits, errors in OpenAI's
// shape, and streaming, over a generation Backend (host only; the backend that runs an engine comes with the batched
// core, tests use a stand-in).
//
// Usage:
//   MyBackend b;                                    // implements Backend: submit() a request, get a GenJob back
//   ApiServer s(ServerOptions{"127.0.0.1", 8080, api_key, "qwen3-8b"}, b);
//   int port = s.start();                           // binds (port 0: any free one), serves on its own threads
//   ...
//   s.stop();
//
// Endpoints: GET / (a chat page, server/chat_page.h), GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions (streaming or not, n
// choices), POST /tokenize and /detokenize (llama-server's shape), GET /metrics (Prometheus text: the server's request
// counts, then the backend's own lines). A request goes: API key (401), body size (413), JSON and fields (400, server/openai_request.h), model
// name (404), queue room (503 with Retry-After), then the backend, one GenJob per choice. A job is a queue of
// pieces the backend pushes from its own thread; a client that goes away mid-stream cancels its jobs, and the
// backend frees their sequences at its next step.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/errors.h"
#include "server/chat_page.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace monocu {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                 // 0: any free port (tests)
    std::string api_key;             // empty: no key needed
    std::string alias = "model";     // the model's name in /v1/models and in responses
    size_t max_body = 8u << 20;      // bytes; larger bodies get 413
    int max_queue = 64;              // jobs waiting in the backend; more get 503
    int threads = 64;                // HTTP worker threads: a streaming client holds one for its whole reply
};

// One piece of a choice's output, or its end.
struct GenPiece {
    std::string content, reasoning;  // text to add (chat: the answer and the reasoning apart)
    ojson tool_calls;                // chat: complete tool calls, OpenAI's shape (null: none)
    ojson logprobs;                  // with logprobs asked for: one entry per token of this piece (openai_response.h)
    bool done = false;
    std::string finish_reason;       // with done: stop | length | tool_calls
    ApiUsage usage;                  // with done: this choice's token counts
};

// The pieces of one choice, pushed by the backend's thread, popped by the HTTP thread. A backend may derive its own
// (the engine's hands over token ids and turns them into text in pop(), on the HTTP thread).
class GenJob {
public:
    virtual ~GenJob() = default;
    void push(GenPiece p) {
        std::lock_guard<std::mutex> lock(m_);
        q_.push_back(std::move(p));
        cv_.notify_all();
    }
    // The next piece, waiting up to `wait`; false on time-out.
    virtual bool pop(GenPiece& p, std::chrono::milliseconds wait) {
        std::unique_lock<std::mutex> lock(m_);
        if (!cv_.wait_for(lock, wait, [&] { return !q_.empty(); })) return false;
        p = std::move(q_.front());
        q_.pop_front();
        return true;
    }
    void cancel() { cancelled_ = true; }          // the client is gone: the backend stops the sequence
    bool cancelled() const { return cancelled_; }

private:
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<GenPiece> q_;
    std::atomic<bool> cancelled_{false};
};

class Backend {
public:
    virtual ~Backend() = default;
    // Starts one choice of the request (choice = 0 .. n - 1, for n > 1 with their own seeds); throws ApiError for a
    // request it cannot run (a prompt over the context: 400 with the counts).
    virtual std::shared_ptr<GenJob> submit(const ApiRequest& r, int choice) = 0;
    virtual int queued() const = 0;  // jobs not yet running
    // POST /tokenize and /detokenize; a backend without a tokenizer throws ApiError.
    virtual std::vector<int> tokenize(const std::string& text, bool add_special) {
        (void)text, (void)add_special;
        throw ApiError{501, "this server has no tokenizer", "invalid_request_error", "", ""};
    }
    virtual std::string detokenize(const std::vector<int>& ids) {
        (void)ids;
        throw ApiError{501, "this server has no tokenizer", "invalid_request_error", "", ""};
    }
    virtual std::string metrics() { return ""; }  // Prometheus lines of its own (queue, KV blocks, tokens, steps)
    virtual bool draining() const { return false; }  // shutting down: new requests get 503
};

class ApiServer {
public:
    ApiServer(const ServerOptions& o, Backend& b) : o_(o), b_(b) {
        created_ = (long)std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
        routes();
    }
    ~ApiServer() { stop(); }

    // Binds and starts serving; returns the port. A port in use (or a bad host) is one line naming it.
    int start() {
        int port = o_.port == 0 ? http_.bind_to_any_port(o_.host) : (http_.bind_to_port(o_.host, o_.port) ? o_.port : -1);
        if (port < 0) die("--host %s --port %d: cannot listen there (in use, or not this machine's address?)", o_.host.c_str(), o_.port);
        thread_ = std::thread([this] { http_.listen_after_bind(); });
        while (!http_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return port;
    }
    void stop() {
        if (thread_.joinable()) {
            http_.stop();
            thread_.join();
        }
    }

private:
    ServerOptions o_;
    Backend& b_;
    httplib::Server http_;
    std::thread thread_;
    long created_ = 0;
    std::atomic<long> next_id_{1};

    static void send_error(httplib::Response& res, const ApiError& e) {
        res.status = e.status;
        res.set_content(api_error_json(e).dump(), "application/json");
    }
    static ApiError error(int status, const std::string& message, const char* type = "invalid_request_error", const char* code = "",
                          const char* param = "") {
        ApiError e;
        e.status = status, e.message = message, e.type = type, e.code = code, e.param = param;
        return e;
    }

    std::mutex counts_m_;
    std::map<int, long> by_status_;  // responses sent, by HTTP status

    void routes() {
        const int threads = std::max(2, o_.threads);
        http_.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
        http_.set_payload_max_length(o_.max_body);
        http_.set_logger([this](const httplib::Request&, const httplib::Response& res) {
            std::lock_guard<std::mutex> lock(counts_m_);
            by_status_[res.status]++;
        });
        // Statuses httplib sets itself (413, 404 for unknown paths, ...) get OpenAI's error body too.
        http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            if (res.status == 413) send_error(res, error(413, "the request body is larger than the server accepts"));
            else if (res.status == 404) send_error(res, error(404, "no route " + req.method + " " + req.path, "invalid_request_error", "not_found"));
            else send_error(res, error(res.status, "request failed (HTTP " + std::to_string(res.status) + ")"));
        });
        http_.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content(R"({"status":"ok"})", "application/json"); });
        http_.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(chat_page_html(), "text/html; charset=utf-8"); });
        http_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
            if (!authorized(req, res)) return;
            ojson m = {{"id", o_.alias}, {"object", "model"}, {"created", created_}, {"owned_by", "monocu"}};
            res.set_content(ojson{{"object", "list"}, {"data", ojson::array({m})}}.dump(), "application/json");
        });
        http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, ApiEndpoint::Chat); });
        http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, ApiEndpoint::Completions); });
        http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokens(req, res, true); });
        http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { tokens(req, res, false); });
        http_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
            if (!authorized(req, res)) return;
            std::string out = "# HELP monocu_http_responses_total HTTP responses sent, by status\n# TYPE monocu_http_responses_total counter\n";
            {
                std::lock_guard<std::mutex> lock(counts_m_);
                for (const auto& [status, n] : by_status_) out += "monocu_http_responses_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
            }
            res.set_content(out + b_.metrics(), "text/plain; version=0.0.4");
        });
    }

    // POST /tokenize {"content": text, "add_special": bool} -> {"tokens": [...]}; POST /detokenize {"tokens": [...]} ->
    // {"content": text}.
    void tokens(const httplib::Request& req, httplib::Response& res, bool encode) {
        if (!authorized(req, res)) return;
        try {
            ojson j = ojson::parse(req.body, nullptr, false, true);
            if (j.is_discarded() || !j.is_object()) throw error(400, "the request body must be a JSON object");
            if (encode) {
                if (!j.contains("content") || !j["content"].is_string()) throw error(400, "'content' must be a string", "invalid_request_error", "", "content");
                bool special = false;
                if (j.contains("add_special")) {
                    if (!j["add_special"].is_boolean()) throw error(400, "'add_special' must be a boolean", "invalid_request_error", "", "add_special");
                    special = j["add_special"].get<bool>();
                }
                res.set_content(ojson{{"tokens", b_.tokenize(j["content"].get<std::string>(), special)}}.dump(), "application/json");
            } else {
                if (!j.contains("tokens") || !j["tokens"].is_array()) throw error(400, "'tokens' must be an array of token ids", "invalid_request_error", "", "tokens");
                std::vector<int> ids;
                for (const auto& t : j["tokens"]) {
                    if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() > INT32_MAX)
                        throw error(400, "'tokens' must hold token ids (integers >= 0), not " + t.dump(), "invalid_request_error", "", "tokens");
                    ids.push_back((int)t.get<long long>());
                }
                res.set_content(ojson{{"content", b_.detokenize(ids)}}.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
            }
        } catch (const ApiError& e) {
            send_error(res, e);
        }
    }

    bool authorized(const httplib::Request& req, httplib::Response& res) {
        if (o_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + o_.api_key) return true;
        send_error(res, error(401, "a valid API key is needed (Authorization: Bearer ...)", "invalid_request_error", "invalid_api_key"));
        return false;
    }

    void generate(const httplib::Request& req, httplib::Response& res, ApiEndpoint ep) {
        if (!authorized(req, res)) return;
        ApiRequest r;
        std::vector<std::shared_ptr<GenJob>> jobs;
        try {
            r = parse_api_request(req.body, ep);
            if (!r.model.empty() && r.model != o_.alias)
                throw error(404, "model '" + r.model + "' is not served here (this server has '" + o_.alias + "')", "invalid_request_error",
                            "model_not_found", "model");
            if (b_.draining()) throw error(503, "the server is shutting down", "server_error", "shutting_down");
            if (b_.queued() + r.n > o_.max_queue) {
                res.set_header("Retry-After", "1");
                throw error(503, "the server is busy; try again shortly", "server_error", "overloaded");
            }
            for (int i = 0; i < r.n; i++) jobs.push_back(b_.submit(r, i));
        } catch (const ApiError& e) {
            for (auto& j : jobs) j->cancel();
            send_error(res, e);
            return;
        }
        const bool chat = ep == ApiEndpoint::Chat;
        ApiResponseHead head{(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++), created_, o_.alias};
        if (!r.stream) return respond_whole(res, head, jobs, chat, r.logprobs);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider("text/event-stream", [this, r, head, jobs, chat](size_t, httplib::DataSink& sink) {
            return stream(sink, r, head, jobs, chat);  // false: the client went away
        }, [jobs](bool) {  // the response is over, finished or not: nothing may keep running for it
            for (auto& j : jobs) j->cancel();
        });
    }

    // Collects every choice to its end, then one JSON body.
    void respond_whole(httplib::Response& res, const ApiResponseHead& head, const std::vector<std::shared_ptr<GenJob>>& jobs, bool chat,
                       bool logprobs) {
        std::vector<ApiChoice> choices;
        ApiUsage usage;
        for (const auto& j : jobs) {
            std::string content, reasoning;
            ojson calls = ojson::array(), entries = ojson::array();
            GenPiece p;
            while (true) {
                while (!j->pop(p, std::chrono::milliseconds(100))) {}
                content += p.content, reasoning += p.reasoning;
                if (p.logprobs.is_array())
                    for (const auto& e : p.logprobs) entries.push_back(e);
                if (p.tool_calls.is_array())
                    for (const auto& c : p.tool_calls) calls.push_back(c);
                if (p.done) break;
            }
            usage.prompt_tokens = p.usage.prompt_tokens;
            usage.completion_tokens += p.usage.completion_tokens;
            ApiChoice c;
            c.finish_reason = p.finish_reason;
            size_t offset = 0;
            if (logprobs) c.logprobs = chat ? chat_logprobs(entries) : completion_logprobs(entries, offset);
            if (chat) {
                c.message = ojson{{"role", "assistant"}, {"content", content}};
                if (!reasoning.empty()) c.message["reasoning_content"] = reasoning;
                if (!calls.empty()) c.message["tool_calls"] = calls;
            } else {
                c.message = content;
            }
            choices.push_back(c);
        }
        ojson body = chat ? chat_completion(head, choices, usage) : text_completion(head, choices, usage);
        res.set_content(body.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
    }

    // Server-sent events, choices interleaved as their pieces come; a write that fails (the client left) cancels.
    bool stream(httplib::DataSink& sink, const ApiRequest& r, const ApiResponseHead& head, const std::vector<std::shared_ptr<GenJob>>& jobs,
                bool chat) {
        auto send = [&](const std::string& event) { return sink.write(event.data(), event.size()); };
        std::vector<bool> done(jobs.size(), false);
        std::vector<size_t> offsets(jobs.size(), 0);  // completions' logprobs: each choice's text so far
        ApiUsage usage;
        size_t left = jobs.size();
        if (chat)
            for (size_t i = 0; i < jobs.size(); i++)
                if (!send(sse(chat_chunk(head, (int)i, ojson{{"role", "assistant"}, {"content", ""}}, nullptr)))) return cancel_all(jobs);
        while (left > 0) {
            for (size_t i = 0; i < jobs.size(); i++) {
                GenPiece p;
                if (done[i] || !jobs[i]->pop(p, std::chrono::milliseconds(jobs.size() == 1 ? 100 : 5))) {
                    if (!sink.is_writable()) return cancel_all(jobs);
                    continue;
                }
                bool ok = true;
                const bool lp = r.logprobs && p.logprobs.is_array() && !p.logprobs.empty();
                if (chat) {
                    ojson delta = ojson::object();
                    if (!p.reasoning.empty()) delta["reasoning_content"] = p.reasoning;
                    if (!p.content.empty()) delta["content"] = p.content;
                    if (p.tool_calls.is_array() && !p.tool_calls.empty()) {
                        ojson calls = p.tool_calls;
                        for (size_t k = 0; k < calls.size(); k++) calls[k]["index"] = k;
                        delta["tool_calls"] = calls;
                    }
                    if (!delta.empty() || lp) ok = send(sse(chat_chunk(head, (int)i, delta, nullptr, lp ? chat_logprobs(p.logprobs) : ojson())));
                    if (ok && p.done) ok = send(sse(chat_chunk(head, (int)i, nullptr, p.finish_reason.c_str())));
                } else {
                    if (!p.content.empty() || lp)
                        ok = send(sse(text_chunk(head, (int)i, p.content, nullptr, lp ? completion_logprobs(p.logprobs, offsets[i]) : ojson())));
                    if (ok && p.done) ok = send(sse(text_chunk(head, (int)i, "", p.finish_reason.c_str())));
                }
                if (!ok) return cancel_all(jobs);
                if (p.done) {
                    done[i] = true, left--;
                    usage.prompt_tokens = p.usage.prompt_tokens;
                    usage.completion_tokens += p.usage.completion_tokens;
                }
            }
        }
        if (r.include_usage && !send(sse(usage_chunk(head, usage, chat)))) return cancel_all(jobs);
        if (!send(sse_done())) return cancel_all(jobs);
        sink.done();
        return true;
    }

    static bool cancel_all(const std::vector<std::shared_ptr<GenJob>>& jobs) {
        for (auto& j : jobs) j->cancel();
        return false;
    }
};

}  // namespace monocu
