// server/reply_stream.h: a reply streamed token by token must add up to what the whole reply parses to (content,
// reasoning, tool calls), whatever the tokenizer's pieces, with nothing of a tool call sent as content first; stop
// strings end the stream and are not sent.
#include <doctest/doctest.h>

#include <random>

#include "server/reply_stream.h"
#include "tok_test_util.h"

using namespace monocu;

namespace {

struct Streamed {
    std::string content, reasoning;
    std::string early_reasoning;  // what came before finish()
    std::vector<ToolCall> calls;
    bool stopped = false;
};

Streamed stream(const Tokenizer& tok, const std::vector<int>& ids, ReplyStream::Mode mode, ReplyFormat f, bool starts,
                std::vector<std::string> stops = {}) {
    ReplyStream rs(tok, stops, mode, f, starts, 7);
    Streamed s;
    for (int id : ids) {
        ReplyDelta d = rs.push(id);
        CHECK(d.tool_calls.empty());
        s.content += d.content, s.reasoning += d.reasoning;
        if (rs.stopped()) {
            s.stopped = true;
            break;
        }
    }
    s.early_reasoning = s.reasoning;
    ReplyDelta d = rs.finish();
    s.content += d.content, s.reasoning += d.reasoning, s.calls = d.tool_calls;
    CHECK(rs.finish().empty());  // once
    return s;
}

// Replies in every format, awkward ones included (calls that do not parse, tags spelled in pieces by tokenizers
// that do not know them).
const std::vector<std::pair<ReplyFormat, std::string>> kReplies = {
    {ReplyFormat::Plain, "Hello there, how are you?"},
    {ReplyFormat::Plain, "<think>\nLet me think. 2 + 2 = 4.\n</think>\n\nThe answer is 4."},
    {ReplyFormat::Plain, "  <think>cut short"},
    {ReplyFormat::Plain, "Say <think> here </think> too"},
    {ReplyFormat::Hermes, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"}\"}]}}\n</tool_call>"},
    {ReplyFormat::Hermes, "<think>\nweather needed\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_call>"},
    {ReplyFormat::Hermes, "text <tool_call>{\"name\": \"f\", \"arguments\": {}}"},
    {ReplyFormat::Hermes, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call> then <tool_call>bad</tool_call> and text"},
    {ReplyFormat::Hermes, "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n</function>\n</tool_call>"},
    {ReplyFormat::Hermes, "no calls, just <b>text</b> and a < sign <tool"},
    {ReplyFormat::Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}"},
    {ReplyFormat::Llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}"},
    {ReplyFormat::Llama3, "The weather is fine. {\"not\": \"a call\"}"},
    {ReplyFormat::Llama3, "{\"answer\": 42}"},
    {ReplyFormat::Mistral, "I'll look.[TOOL_CALLS]f[ARGS]{\"a\": 1}"},
    {ReplyFormat::Mistral, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"q\": \"[x]\"}, \"id\": \"a1b2c3d4e\"}]"},
    {ReplyFormat::Mistral, "Plain answer with [brackets]."},
    {ReplyFormat::Harmony, "<|channel|>analysis<|message|>Think it over.<|end|><|start|>assistant<|channel|>final<|message|>Hello!"},
    {ReplyFormat::Harmony, "<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{\"id\": 7}"},
    {ReplyFormat::Harmony, "<|channel|>commentary<|message|>Checking first.<|end|><|start|>assistant<|channel|>commentary to=functions.f json<|message|>{oops"},
    {ReplyFormat::Harmony, "<|channel|>final<|message|>Short <|en"},
    {ReplyFormat::Lfm2, "<|tool_call_start|>[get_status(candidate_id=\"12345\", full=True)]<|tool_call_end|>Checking."},
    {ReplyFormat::Lfm2, "Text first, then <|tool_call_start|>[a(x=1)"},
};

}  // namespace

TEST_CASE("reply stream: every format's replies, streamed through real tokenizers, add up to the whole reply parsed") {
    int tokenizers = 0;
    for (const char* name : {"qwen3", "gptoss", "llama3_2", "mistral_v0_3"}) {
        std::string dir = tok_test::have_hf(name) ? tok_test::hf_dir(name) : "tests/data/tokenizers/" + std::string(name);
        if (!std::ifstream(dir + "/tokenizer.json").good()) continue;
        Tokenizer tok = Tokenizer::load(dir);
        tokenizers++;
        for (const auto& [f, text] : kReplies)
            for (bool starts : {false, true}) {
                // (starts: the prompt left the reasoning open, a <think> or, for Harmony, an analysis message)
                std::string reply = !starts ? text : f == ReplyFormat::Harmony ? "plan first<|end|><|start|>assistant" + text : "plan first\n</think>\n\n" + text;
                std::vector<int> ids = tok.encode(reply);
                if (tok.decode(ids) != reply) continue;  // (a normalizer changes it: not this test's concern)
                CAPTURE(name);
                CAPTURE(reply);
                ChatReply whole = parse_reply(reply, f, starts, 7);
                if (starts) CHECK(whole.reasoning.rfind("plan first", 0) == 0);
                Streamed s = stream(tok, ids, ReplyStream::Mode::Chat, f, starts);
                if (starts) CHECK(s.early_reasoning.rfind("plan first", 0) == 0);  // streamed as it came, not at the end
                CHECK(s.content == whole.content);
                CHECK(s.reasoning == whole.reasoning);
                REQUIRE(s.calls.size() == whole.tool_calls.size());
                for (size_t k = 0; k < s.calls.size(); k++) {
                    CHECK(s.calls[k].name == whole.tool_calls[k].name);
                    CHECK(s.calls[k].arguments == whole.tool_calls[k].arguments);
                    CHECK(s.calls[k].id == whole.tool_calls[k].id);
                }
                // Text mode: the raw text, as it is.
                CHECK(stream(tok, ids, ReplyStream::Mode::Text, f, false).content == reply);
            }
        // Harmony, the prompt inside an analysis message, a reply cut short before its <|end|>: all of it reasoning,
        // streamed as it comes (not held until a message header shows up).
        const std::string cut = "Thinking it over, slowly";
        Streamed h = stream(tok, tok.encode(cut), ReplyStream::Mode::Chat, ReplyFormat::Harmony, true);
        CHECK(h.reasoning == cut);
        CHECK(h.content.empty());
        CHECK(h.early_reasoning.rfind("Thinking it over", 0) == 0);
    }
    if (!tokenizers) MESSAGE("skipped: no tokenizer files (tests/fetch_tokenizers.sh)");
}

TEST_CASE("reply stream: stop strings end it where one first appears, across token boundaries, and are not sent") {
    std::string dir = tok_test::have_hf("qwen3") ? tok_test::hf_dir("qwen3") : "tests/data/tokenizers/smollm2";
    if (!std::ifstream(dir + "/tokenizer.json").good()) {
        MESSAGE("skipped: no tokenizer files");
        return;
    }
    Tokenizer tok = Tokenizer::load(dir);
    const std::string text = "Once upon a time, there was a fox. The END of the story.\n\nMore text here, café.";
    std::vector<int> ids = tok.encode(text);
    struct Case {
        std::vector<std::string> stops;
        std::string expect;
        bool stopped;
    } cases[] = {
        {{"END"}, "Once upon a time, there was a fox. The ", true},
        {{"story.\n\n", "fox"}, "Once upon a time, there was a ", true},
        {{"ime, th"}, "Once upon a t", true},  // inside two tokens
        {{"é."}, "Once upon a time, there was a fox. The END of the story.\n\nMore text here, caf", true},
        {{"absent", "fo x"}, text, false},
        {{"."}, "Once upon a time, there was a fox", true},
    };
    for (const Case& c : cases) {
        CAPTURE(c.stops[0]);
        Streamed s = stream(tok, ids, ReplyStream::Mode::Text, ReplyFormat::Plain, false, c.stops);
        CHECK(s.content == c.expect);
        CHECK(s.stopped == c.stopped);
        // Chat mode applies them to the raw text too.
        Streamed t = stream(tok, ids, ReplyStream::Mode::Chat, ReplyFormat::Hermes, false, c.stops);
        ChatReply whole = parse_reply(c.expect, ReplyFormat::Hermes);
        CHECK(t.content == whole.content);
    }
}

TEST_CASE("reply stream: random replies of tags, calls and words, streamed, equal the whole parse") {
    if (!tok_test::have_hf("qwen3")) {
        MESSAGE("skipped: no qwen3 tokenizer (tests/fetch_tokenizers.sh)");
        return;
    }
    Tokenizer tok = Tokenizer::load(tok_test::hf_dir("qwen3"));
    const std::vector<std::string> parts = {"<think>", "</think>", "\n", " ", "Hello", " world", "<tool_call>", "</tool_call>",
                                            "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "{", "}", "<function=f>", "</function>",
                                            "<parameter=x>", "</parameter>", "<", "tool", "_call>", "é", "日本", "{\"name\": \"g\"}"};
    std::mt19937 g(5);
    int compared = 0;
    for (int trial = 0; trial < 400; trial++) {
        std::string text;
        for (int k = 0, n = 1 + (int)(g() % 14); k < n; k++) text += parts[g() % parts.size()];
        std::vector<int> ids = tok.encode(text);
        if (tok.decode(ids) != text) continue;
        for (ReplyFormat f : {ReplyFormat::Hermes, ReplyFormat::Plain, ReplyFormat::Llama3}) {
            CAPTURE(text);
            ChatReply whole = parse_reply(text, f, false, 7);
            Streamed s = stream(tok, ids, ReplyStream::Mode::Chat, f, false);
            CHECK(s.content == whole.content);
            CHECK(s.reasoning == whole.reasoning);
            CHECK(s.calls.size() == whole.tool_calls.size());
            compared++;
        }
    }
    CHECK(compared > 600);
}
