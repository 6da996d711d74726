// The OpenAI HTTP front (server/http_server.h) over a stand-in backend that "generates" the last message reversed, a
// few characters a piece: routes, the API key, limits, OpenAI-shaped errors, whole and streamed responses, n choices,
// usage, and a client that leaves mid-stream.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <sstream>
#include <thread>

#include "server/http_server.h"

using namespace monocu;

namespace {

struct EchoBackend : Backend {
    std::atomic<int> cancelled{0}, submitted{0};
    int delay_ms = 0;        // per piece
    int pretend_queued = 0;  // what queued() reports
    std::vector<std::thread> threads;
    ~EchoBackend() override {
        for (auto& t : threads) t.join();
    }
    std::shared_ptr<GenJob> submit(const ApiRequest& r, int choice) override {
        submitted++;
        std::string text = r.endpoint == ApiEndpoint::Chat ? r.messages.back()["content"].get<std::string>() : r.prompt;
        if (text == "too long") throw ApiError{400, "the prompt is 9000 tokens; the context holds 8192", "invalid_request_error", "messages", ""};
        std::reverse(text.begin(), text.end());
        text += std::to_string(choice);
        auto job = std::make_shared<GenJob>();
        int max = r.max_tokens > 0 ? r.max_tokens : 1 << 30, prompt = (int)text.size();
        threads.emplace_back([this, job, text, max, prompt] {
            int n = 0;
            for (size_t at = 0; at < text.size() && n < max; at += 3) {
                if (job->cancelled()) {
                    cancelled++;
                    return;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
                GenPiece p;
                p.content = text.substr(at, std::min<size_t>(3, (size_t)(max - n)));
                n += (int)p.content.size();
                job->push(p);
            }
            GenPiece end;
            end.done = true, end.finish_reason = n >= max ? "length" : "stop", end.usage = ApiUsage{prompt, n};
            job->push(end);
        });
        return job;
    }
    int queued() const override { return pretend_queued; }
};

std::vector<ojson> sse_events(const std::string& body, bool* done) {
    std::vector<ojson> out;
    std::istringstream in(body);
    std::string line;
    *done = false;
    while (std::getline(in, line)) {
        if (line.rfind("data: ", 0) != 0) continue;
        std::string data = line.substr(6);
        if (data == "[DONE]") *done = true;
        else out.push_back(ojson::parse(data));
    }
    return out;
}

}  // namespace

TEST_CASE("http: health, models, a whole chat completion and a completion with n choices") {
    EchoBackend b;
    ApiServer s(ServerOptions{"127.0.0.1", 0, "", "tiny"}, b);
    int port = s.start();
    httplib::Client c("127.0.0.1", port);
    auto h = c.Get("/health");
    REQUIRE(h);
    CHECK(h->status == 200);
    auto m = c.Get("/v1/models");
    REQUIRE(m);
    CHECK(ojson::parse(m->body)["data"][0]["id"] == "tiny");
    auto r = c.Post("/v1/chat/completions", R"({"model": "tiny", "messages": [{"role": "user", "content": "hello"}]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    ojson j = ojson::parse(r->body);
    CHECK(j["object"] == "chat.completion");
    CHECK(j["choices"][0]["message"]["content"] == "olleh0");
    CHECK(j["choices"][0]["finish_reason"] == "stop");
    CHECK(j["usage"]["completion_tokens"] == 6);
    CHECK(j["usage"]["total_tokens"] == 12);
    auto t = c.Post("/v1/completions", R"({"prompt": "abcdef", "max_tokens": 4, "n": 2})", "application/json");
    REQUIRE(t);
    ojson k = ojson::parse(t->body);
    CHECK(k["object"] == "text_completion");
    CHECK(k["choices"].size() == 2);
    CHECK(k["choices"][0]["text"] == "fedc");
    CHECK(k["choices"][1]["index"] == 1);
    CHECK(k["choices"][1]["finish_reason"] == "length");
    CHECK(k["usage"]["completion_tokens"] == 8);
    s.stop();
}

TEST_CASE("http: streaming chat as OpenAI sends it: role first, content pieces, finish, usage, [DONE]") {
    EchoBackend b;
    ApiServer s(ServerOptions{"127.0.0.1", 0, "", "tiny"}, b);
    int port = s.start();
    httplib::Client c("127.0.0.1", port);
    auto r = c.Post("/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": "streaming"}], "stream": true, "stream_options": {"include_usage": true}})",
                    "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == "text/event-stream");
    bool done;
    std::vector<ojson> ev = sse_events(r->body, &done);
    CHECK(done);
    REQUIRE(ev.size() >= 4);
    CHECK(ev[0]["choices"][0]["delta"]["role"] == "assistant");
    std::string text;
    for (size_t i = 1; i + 2 < ev.size(); i++) text += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
    CHECK(text == "gnimaerts0");
    CHECK(ev[ev.size() - 2]["choices"][0]["finish_reason"] == "stop");
    CHECK(ev.back()["choices"].empty());
    CHECK(ev.back()["usage"]["completion_tokens"] == 10);
    for (const ojson& e : ev) CHECK(e["id"] == ev[0]["id"]);
    s.stop();
}

TEST_CASE("http: every refusal is OpenAI-shaped: key, size, JSON, fields, model, busy, backend, route") {
    EchoBackend b;
    ApiServer s(ServerOptions{"127.0.0.1", 0, "sekret", "tiny", 4096, 4}, b);
    int port = s.start();
    httplib::Client c("127.0.0.1", port);
    const std::string ok = R"({"messages": [{"role": "user", "content": "x"}]})";
    auto status_of = [&](const httplib::Result& r, int want, const char* code = nullptr, const char* param = nullptr) {
        REQUIRE(r);
        CHECK(r->status == want);
        ojson e = ojson::parse(r->body)["error"];
        CHECK(e["message"].is_string());
        if (code) CHECK(e["code"] == code);
        if (param) CHECK(e["param"] == param);
    };
    status_of(c.Post("/v1/chat/completions", ok, "application/json"), 401, "invalid_api_key");
    status_of(c.Get("/v1/models"), 401, "invalid_api_key");
    httplib::Headers key = {{"Authorization", "Bearer sekret"}};
    auto good = c.Post("/v1/chat/completions", key, ok, "application/json");
    REQUIRE(good);
    CHECK(good->status == 200);
    status_of(c.Post("/v1/chat/completions", key, std::string(5000, ' ') + ok, "application/json"), 413);
    status_of(c.Post("/v1/chat/completions", key, "{", "application/json"), 400);
    status_of(c.Post("/v1/chat/completions", key, R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "application/json"), 400, nullptr, "n");
    status_of(c.Post("/v1/chat/completions", key, R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})", "application/json"), 404,
              "model_not_found", "model");
    status_of(c.Post("/v1/chat/completions", key, R"({"messages": [{"role": "user", "content": "too long"}]})", "application/json"), 400, nullptr,
              "messages");
    b.pretend_queued = 4;
    auto busy = c.Post("/v1/chat/completions", key, ok, "application/json");
    status_of(busy, 503, "overloaded");
    CHECK(busy->get_header_value("Retry-After") == "1");
    b.pretend_queued = 0;
    status_of(c.Get("/v1/nothing", key), 404);
    s.stop();
}

TEST_CASE("http: a client that leaves mid-stream cancels its job") {
    EchoBackend b;
    b.delay_ms = 20;
    ApiServer s(ServerOptions{"127.0.0.1", 0, "", "tiny"}, b);
    int port = s.start();
    httplib::Client c("127.0.0.1", port);
    std::string long_text(300, 'a');
    int chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = R"({"messages": [{"role": "user", "content": ")" + long_text + R"("}], "stream": true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // leave after 3 chunks
    auto r = c.send(req);
    CHECK_FALSE(r);  // the client cut it short
    for (int i = 0; i < 200 && b.cancelled == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(b.cancelled == 1);
    s.stop();
}

TEST_CASE("http: tokenize, detokenize, metrics and a draining server") {
    struct Tok : EchoBackend {
        bool drain = false;
        std::vector<int> tokenize(const std::string& text, bool add_special) override {
            std::vector<int> ids;
            if (add_special) ids.push_back(1);
            for (unsigned char ch : text) ids.push_back(ch);
            return ids;
        }
        std::string detokenize(const std::vector<int>& ids) override {
            std::string s;
            for (int id : ids) {
                if (id > 255) throw ApiError{400, "token id " + std::to_string(id) + " is outside the vocabulary (256)", "invalid_request_error", "tokens", ""};
                s += (char)id;
            }
            return s;
        }
        std::string metrics() override { return "monocu_kv_blocks_used 3\n"; }
        bool draining() const override { return drain; }
    } b;
    ApiServer s(ServerOptions{"127.0.0.1", 0, "", "tiny"}, b);
    int port = s.start();
    httplib::Client c("127.0.0.1", port);
    auto t = c.Post("/tokenize", R"({"content": "hi", "add_special": true})", "application/json");
    REQUIRE(t);
    CHECK(t->status == 200);
    CHECK(ojson::parse(t->body)["tokens"] == ojson::parse("[1, 104, 105]"));
    auto d = c.Post("/detokenize", R"({"tokens": [104, 105]})", "application/json");
    REQUIRE(d);
    CHECK(ojson::parse(d->body)["content"] == "hi");
    for (const char* bad : {R"({"content": 5})", R"({"tokens": [1, -2]})", "[1]", R"({"tokens": [300]})", R"({"tokens": [1.5]})"}) {
        CAPTURE(bad);
        auto r = c.Post(bad[2] == 'c' ? "/tokenize" : "/detokenize", bad, "application/json");
        REQUIRE(r);
        CHECK(r->status == 400);
        CHECK(ojson::parse(r->body)["error"]["message"].is_string());
    }
    EchoBackend plain;  // a backend without a tokenizer
    ApiServer s2(ServerOptions{"127.0.0.1", 0, "", "tiny"}, plain);
    httplib::Client c2("127.0.0.1", s2.start());
    auto none = c2.Post("/tokenize", R"({"content": "hi"})", "application/json");
    REQUIRE(none);
    CHECK(none->status == 501);
    s2.stop();
    auto m = c.Get("/metrics");
    REQUIRE(m);
    CHECK(m->body.find("monocu_http_responses_total{status=\"200\"} 2") != std::string::npos);
    CHECK(m->body.find("monocu_http_responses_total{status=\"400\"} 5") != std::string::npos);
    CHECK(m->body.find("monocu_kv_blocks_used 3\n") != std::string::npos);
    b.drain = true;
    auto r = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(ojson::parse(r->body)["error"]["code"] == "shutting_down");
    s.stop();
}

// The page at / in headless Chromium (Debian's chromium-headless-shell, driven by tests/server/page_check.mjs over the
// DevTools protocol; skipped without it or node): /?prompt= sends a message on load; the streamed reply, its folded
// reasoning and the token rate must be in the page once the reply has ended (waited for in real time, up to 30 s).
TEST_CASE("http: the chat page streams a reply, reasoning folded, tokens per second shown (headless Chromium)") {
    const char* browser = "/usr/bin/chromium-headless-shell";
    if (!std::ifstream(browser).good() || std::system("node --version > /dev/null 2>&1") != 0) {
        MESSAGE("skipped: no ", browser, " or no node (apt-get install chromium-headless-shell nodejs)");
        return;
    }
    struct Thinker : EchoBackend {
        std::shared_ptr<GenJob> submit(const ApiRequest& r, int) override {
            submitted++;
            auto job = std::make_shared<GenJob>();
            std::string said = r.messages.back()["content"].get<std::string>();
            threads.emplace_back([job, said] {
                const char* thoughts[] = {"The user ", "says ", said.c_str()};
                const char* words[] = {"Hello ", "from ", "the ", "page."};
                for (const char* t : thoughts) {  // a piece every 20 ms: the page shows them as they come
                    GenPiece p;
                    p.reasoning = t;
                    job->push(p);
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                }
                for (const char* w : words) {
                    GenPiece p;
                    p.content = w;
                    job->push(p);
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                }
                GenPiece end;
                end.done = true, end.finish_reason = "stop", end.usage = ApiUsage{9, 7};
                job->push(end);
            });
            return job;
        }
    } b;
    ApiServer s(ServerOptions{"127.0.0.1", 0, "", "page-model"}, b);
    int port = s.start();
    httplib::Client c("127.0.0.1", port);
    auto page = c.Get("/");
    REQUIRE(page);
    CHECK(page->status == 200);
    CHECK(page->get_header_value("Content-Type").find("text/html") == 0);
    std::string cmd = "node tests/server/page_check.mjs 'http://127.0.0.1:" + std::to_string(port) + "/?prompt=knock%20knock' '(stop)' 30000 " +
                      browser + " 2>/dev/null";
    FILE* f = popen(cmd.c_str(), "r");
    REQUIRE(f);
    std::string dom;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) dom.append(buf, n);
    pclose(f);
    CAPTURE(dom.substr(dom.find("<div id=\"log\">") == std::string::npos ? 0 : dom.find("<div id=\"log\">"), 1500));
    CHECK(dom.find("<div class=\"msg user\">knock knock</div>") != std::string::npos);  // the message
    CHECK(dom.find("Hello from the page.") != std::string::npos);                       // the reply, streamed
    CHECK(dom.find("<summary>reasoning</summary><div>The user says knock knock</div>") != std::string::npos);  // folded
    CHECK(dom.find("7 tokens") != std::string::npos);                                   // usage from the stream
    CHECK(dom.find("tok/s") != std::string::npos);
    CHECK(dom.find("(stop)") != std::string::npos);
    CHECK(dom.find("page-model") != std::string::npos);                                 // /v1/models
    CHECK(b.submitted == 1);
    s.stop();
}
