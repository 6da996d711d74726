// tokenizer/chat_reply.h: a model's output split into content, reasoning and tool calls. Two kinds of check:
// each real template of tests/data/templates renders an assistant turn with tool calls (and reasoning) the way
// its model is taught to write it, and the parser must read back the same calls from exactly that text; and
// hand-written outputs per format, awkward and malformed ones included (a call that does not parse stays text).
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_reply.h"

using namespace monocu;
using ojson = nlohmann::ordered_json;

static const std::string TEMPLATES = "tests/data/templates/";

static ChatTemplate load_template(const std::string& name) {
    std::ifstream f(TEMPLATES + name + ".jinja", std::ios::binary);
    REQUIRE_MESSAGE(f.good(), (TEMPLATES + name + ".jinja"));
    std::stringstream ss;
    ss << f.rdbuf();
    std::ifstream t(TEMPLATES + "special_tokens.json");
    ojson tokens = ojson::parse(t)["tokens"];
    return ChatTemplate::from_text(ss.str(), name + ".jinja", tokens.contains(name) ? tokens[name] : ojson::object());
}

static ojson tool_call(const std::string& id, const std::string& name, const ojson& args) {
    return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
}

// What the template makes the model's turn say: the conversation with the assistant turn, less the same
// conversation's generation prompt, less the end-of-turn token (the generator stops on it; it is not output).
// A generation prompt that opens <think> for the model (QwQ) is not a prefix of the finished turn, whose
// reasoning the template drops: there the model's text is its reasoning, </think>, then the turn as rendered.
static const char* kOpenReasoning = "I should call the tool.";
static std::string assistant_text(const ChatTemplate& ct, const ojson& msgs, const ojson& assistant, ojson kwargs, bool* opened = nullptr) {
    kwargs["add_generation_prompt"] = true;
    std::string prompt = ct.render(msgs, kwargs);
    ojson all = msgs;
    all.push_back(assistant);
    kwargs["add_generation_prompt"] = false;
    std::string full = ct.render(all, kwargs), out;
    if (opened) *opened = false;
    if (full.compare(0, prompt.size(), prompt) == 0) {
        out = full.substr(prompt.size());
    } else {
        const std::string think = "<think>\n";
        size_t c = prompt.size() - std::min(prompt.size(), think.size());
        REQUIRE_MESSAGE((prompt.substr(c) == think && full.compare(0, c, prompt, 0, c) == 0), "the generation prompt is not a prefix:\n",
                        prompt, "\n---\n", full);
        REQUIRE(opened);
        REQUIRE(reply_starts_in_reasoning(prompt, reply_format(ct)));
        *opened = true;
        out = std::string(kOpenReasoning) + "\n</think>\n\n" + full.substr(c);
    }
    for (bool cut = true; cut;) {
        cut = false;
        while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back(), cut = true;
        for (const char* end : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|call|>", "<|return|>", "<|end|>"}) {
            size_t n = std::strlen(end);
            if (out.size() >= n && out.compare(out.size() - n, n, end) == 0) out.resize(out.size() - n), cut = true;
        }
    }
    return out;
}

static const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "description": "Search the web",
   "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
])");

TEST_CASE("each family's template is read as the format its model writes") {
    struct Case {
        const char* name;
        ReplyFormat f;
    } cases[] = {
        {"qwen3-0.6b", ReplyFormat::Hermes}, {"qwen2.5-7b-instruct", ReplyFormat::Hermes}, {"qwq-32b", ReplyFormat::Hermes},
        {"hermes-2-pro-llama-3-8b-tool_use", ReplyFormat::Hermes},
        {"smollm3-3b", ReplyFormat::Plain},  // llama.cpp's copy has no tool section (the hub's, with <tool_call>, is Hermes)
        {"llama-3.1-8b-instruct", ReplyFormat::Llama3}, {"llama-3.2-3b-instruct", ReplyFormat::Llama3},
        {"mistral-7b-instruct-v0.3", ReplyFormat::Mistral}, {"mistral-nemo-instruct-2407", ReplyFormat::Mistral},
        {"mistral-small-3.2-24b-instruct-2506", ReplyFormat::Mistral}, {"gpt-oss-120b", ReplyFormat::Harmony},
        {"lfm2-8b-a1b", ReplyFormat::Lfm2}, {"llama-3-8b-instruct", ReplyFormat::Plain}, {"llama-2-7b-chat", ReplyFormat::Plain},
        {"tinyllama-1.1b-chat-v1.0", ReplyFormat::Plain}, {"mistral-7b-instruct-v0.1", ReplyFormat::Plain},
        {"gemma-3-it", ReplyFormat::Plain}, {"qwen3-coder", ReplyFormat::Hermes},
    };
    for (const Case& c : cases) {
        std::string name = c.name;
        CAPTURE(name);
        CHECK(std::string(reply_format_name(reply_format(load_template(c.name)))) == reply_format_name(c.f));
    }
}

TEST_CASE("tool calls as each real template writes them are read back exactly") {
    const ojson user = ojson::array({{{"role", "user"}, {"content", "Weather in Paris, and news about \"Zoë\"?"}}});
    const ojson weather = {{"city", "Paris"}, {"days", 3}, {"units", nullptr}, {"tags", {"a", "b"}}, {"opts", {{"x", 1.5}}}};
    const ojson search = {{"query", "Zoë {\"quoted\"} [x]"}};
    struct Case {
        const char* name;
        bool two_calls;  // the template renders more than one call in a turn
        bool bare = false;  // values written bare (Qwen3-Coder): Python's str(None) cannot be told from a string
    } cases[] = {
        {"qwen3-coder", true, true},
        {"qwen3-0.6b", true}, {"qwen2.5-7b-instruct", true}, {"qwq-32b", true}, {"hermes-2-pro-llama-3-8b-tool_use", true},
        {"llama-3.1-8b-instruct", false}, {"mistral-7b-instruct-v0.3", true}, {"mistral-nemo-instruct-2407", true},
        {"mistral-small-3.2-24b-instruct-2506", true}, {"gpt-oss-120b", false},
    };
    for (const Case& c : cases) {
        std::string name = c.name;
        CAPTURE(name);
        ChatTemplate ct = load_template(c.name);
        ReplyFormat f = reply_format(ct);
        ojson w = weather;
        if (c.bare) w.erase("units");
        ojson calls = ojson::array({tool_call("abcDEF123", "get_weather", w)});
        if (c.two_calls) calls.push_back(tool_call("xyz987UVW", "search", search));
        ojson assistant = {{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}};
        bool opened = false;
        const ojson kwargs = {{"tools", kTools}, {"enable_thinking", true}};  // QwQ's copy closes <think> unless asked
        std::string text = assistant_text(ct, user, assistant, kwargs, &opened);
        CAPTURE(text);
        ChatReply r = parse_reply(text, f, opened, 7);
        CHECK(r.warnings.empty());
        CHECK(r.content.empty());
        CHECK(r.reasoning == (opened ? kOpenReasoning : ""));
        REQUIRE(r.tool_calls.size() == calls.size());
        for (size_t k = 0; k < calls.size(); k++) {
            CHECK(r.tool_calls[k].name == calls[k]["function"]["name"].get<std::string>());
            CHECK(ojson::parse(r.tool_calls[k].arguments) == calls[k]["function"]["arguments"]);
            if (text.find(calls[k]["id"].get<std::string>()) != std::string::npos)  // the model wrote the id
                CHECK(r.tool_calls[k].id == calls[k]["id"].get<std::string>());
            else
                CHECK(r.tool_calls[k].id.size() == (f == ReplyFormat::Mistral ? 9u : 29u));
        }
        // And the parsed message renders back to the same text.
        CHECK(assistant_text(ct, user, reply_template_message(r, f), kwargs, &opened) == text);
    }
}

TEST_CASE("reasoning as Qwen3 and GPT-OSS write it beside a call") {
    const ojson user = ojson::array({{{"role", "user"}, {"content", "Weather?"}}});
    ChatTemplate qwen = load_template("qwen3-0.6b");
    ojson a = {{"role", "assistant"}, {"content", "Let me check."}, {"reasoning_content", "The user wants weather.\nCall the tool."},
               {"tool_calls", {tool_call("i", "get_weather", {{"city", "Oslo"}})}}};
    std::string text = assistant_text(qwen, user, a, {{"tools", kTools}});
    ChatReply r = parse_reply(text, ReplyFormat::Hermes);
    CHECK(r.reasoning == "The user wants weather.\nCall the tool.");
    CHECK(r.content == "Let me check.");
    REQUIRE(r.tool_calls.size() == 1);
    CHECK(r.tool_calls[0].arguments == R"({"city":"Oslo"})");

    ChatTemplate oss = load_template("gpt-oss-120b");
    ojson b = {{"role", "assistant"}, {"thinking", "Need the weather tool."}, {"tool_calls", {tool_call("i", "get_weather", {{"city", "Oslo"}})}}};
    text = assistant_text(oss, user, b, {{"tools", kTools}});
    CAPTURE(text);
    r = parse_reply(text, ReplyFormat::Harmony);
    CHECK(r.warnings.empty());
    CHECK(r.reasoning == "Need the weather tool.");
    CHECK(r.content.empty());
    REQUIRE(r.tool_calls.size() == 1);
    CHECK(r.tool_calls[0].name == "get_weather");
    CHECK(assistant_text(oss, user, reply_template_message(r, ReplyFormat::Harmony), {{"tools", kTools}}) == text);

    // A prompt that opens <think> for the model (Qwen3-Thinking, DeepSeek-R1 distills): the reply starts inside it.
    CHECK(reply_starts_in_reasoning("<|im_start|>assistant\n<think>\n", ReplyFormat::Hermes));
    CHECK_FALSE(reply_starts_in_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", ReplyFormat::Hermes));
    r = parse_reply("plan it\n</think>\n\nThe answer.", ReplyFormat::Hermes, true);
    CHECK(r.reasoning == "plan it");
    CHECK(r.content == "The answer.");
    // Harmony: a prompt that ends inside an analysis message (a prefilled assistant turn) likewise.
    const std::string open = "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>";
    CHECK(reply_starts_in_reasoning(open, ReplyFormat::Harmony));
    CHECK(reply_starts_in_reasoning(open + "Partly planned", ReplyFormat::Harmony));
    CHECK_FALSE(reply_starts_in_reasoning("<|start|>assistant", ReplyFormat::Harmony));
    CHECK_FALSE(reply_starts_in_reasoning(open + "Done.<|end|><|start|>assistant", ReplyFormat::Harmony));
    CHECK_FALSE(reply_starts_in_reasoning("<|start|>assistant<|channel|>final<|message|>", ReplyFormat::Harmony));
    CHECK(reply_in_reasoning("so far", ReplyFormat::Harmony, true));
    CHECK_FALSE(reply_in_reasoning("so far", ReplyFormat::Harmony, false));
    CHECK_FALSE(reply_in_reasoning("plan<|end|>", ReplyFormat::Harmony, true));
    CHECK_FALSE(reply_in_reasoning("plan<|end|><|start|>assistant<|channel|>final<|message|>Hi", ReplyFormat::Harmony, true));
    CHECK(reply_in_reasoning("plan<|end|><|start|>assistant<|channel|>analysis<|message|>more", ReplyFormat::Harmony, true));
    r = parse_reply("Plan it.<|end|><|start|>assistant<|channel|>final<|message|>The answer.", ReplyFormat::Harmony, true);
    CHECK(r.warnings.empty());
    CHECK(r.reasoning == "Plan it.");
    CHECK(r.content == "The answer.");
    r = parse_reply("<think>cut short", ReplyFormat::Plain);  // a reply stopped inside its reasoning
    CHECK(r.reasoning == "cut short");
    CHECK(r.content.empty());
    r = parse_reply("Say <think> here", ReplyFormat::Plain);  // only a leading block is reasoning
    CHECK(r.content == "Say <think> here");
}

TEST_CASE("hand-written outputs per format, awkward and malformed") {
    struct Case {
        ReplyFormat f;
        const char* text;
        const char* content;
        std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
        size_t warnings;
    } cases[] = {
        // Hermes
        {ReplyFormat::Hermes, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"}\"}]}}\n</tool_call>", "Sure.",
         {{"f", R"({"a":[1,{"b":"}"}]})"}}, 0},
        {ReplyFormat::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", "", {{"f", R"({"x":1})"}}, 0},
        {ReplyFormat::Hermes, "<tool_call>{\"name\": \"f\"}</tool_call>", "", {{"f", "{}"}}, 0},
        {ReplyFormat::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}</tool_call>", {}, 1},
        {ReplyFormat::Hermes, "<tool_call>{\"arguments\": {}}</tool_call> ok", "<tool_call>{\"arguments\": {}}</tool_call> ok", {}, 1},
        {ReplyFormat::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", {}, 1},
        {ReplyFormat::Hermes, "text <tool_call>{\"name\": \"f\", \"arguments\": {}}", "text <tool_call>{\"name\": \"f\", \"arguments\": {}}", {}, 1},
        {ReplyFormat::Hermes, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>bad</tool_call>", "<tool_call>bad</tool_call>", {{"a", "{}"}}, 1},
        {ReplyFormat::Hermes, "no calls, just <b>text</b>", "no calls, just <b>text</b>", {}, 0},
        // Hermes, Qwen3-Coder's XML body
        {ReplyFormat::Hermes, "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose, CA\n</parameter>\n"
                              "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"x\": [1]}\n</parameter>\n</function>\n</tool_call>",
         "Let me check.", {{"get_weather", R"({"city":"San Jose, CA","days":3,"opts":{"x":[1]}})"}}, 0},
        {ReplyFormat::Hermes, "<tool_call>\n<function=f>\n<parameter=code>\nif a < b:\n    print('</x>')\n\n</parameter>\n</function>\n</tool_call>", "",
         {{"f", R"({"code":"if a < b:\n    print('</x>')\n"})"}}, 0},
        {ReplyFormat::Hermes, "<tool_call>\n<function=f>\n</function>\n</tool_call>", "", {{"f", "{}"}}, 0},
        {ReplyFormat::Hermes, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
         "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", {}, 1},
        {ReplyFormat::Hermes, "<tool_call><function=>\n</function></tool_call>", "<tool_call><function=>\n</function></tool_call>", {}, 1},
        {ReplyFormat::Hermes, "<tool_call><function=f><parameter=a>1</parameter></tool_call>",
         "<tool_call><function=f><parameter=a>1</parameter></tool_call>", {}, 1},
        // Llama 3.x
        {ReplyFormat::Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", "", {{"get_weather", R"({"city":"Rome"})"}}, 0},
        {ReplyFormat::Llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}", "",
         {{"a", "{}"}, {"b", R"({"n":2})"}}, 0},
        {ReplyFormat::Llama3, "<|python_tag|>brave_search.call(query=\"what's new\", n=3)", "", {{"brave_search", R"({"query":"what's new","n":3})"}}, 0},
        {ReplyFormat::Llama3, "<|python_tag|>import math\nprint(math.pi)", "", {{"code_interpreter", R"j({"code":"import math\nprint(math.pi)"})j"}}, 0},
        {ReplyFormat::Llama3, "{\"answer\": 42}", "{\"answer\": 42}", {}, 0},  // a JSON answer, not a call
        {ReplyFormat::Llama3, "{\"name\": \"f\", \"parameters\": {}} and more", "{\"name\": \"f\", \"parameters\": {}} and more", {}, 0},
        {ReplyFormat::Llama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {", "<|python_tag|>{\"name\": \"f\", \"parameters\": {", {}, 1},
        // Mistral
        {ReplyFormat::Mistral, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"q\": \"[x]\"}, \"id\": \"a1b2c3d4e\"}]", "", {{"f", R"({"q":"[x]"})"}}, 0},
        {ReplyFormat::Mistral, "[TOOL_CALLS]f[ARGS]{\"a\": 1}[TOOL_CALLS]g[CALL_ID]zzzzzzzzz[ARGS]{}", "", {{"f", R"({"a":1})"}, {"g", "{}"}}, 0},
        {ReplyFormat::Mistral, "I'll look.[TOOL_CALLS]f[ARGS]{\"a\": 1}", "I'll look.", {{"f", R"({"a":1})"}}, 0},
        {ReplyFormat::Mistral, "[TOOL_CALLS]f{\"a\": 1}", "[TOOL_CALLS]f{\"a\": 1}", {}, 1},
        {ReplyFormat::Mistral, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}", {}, 1},
        {ReplyFormat::Mistral, "[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS][ARGS]{}", {}, 1},
        // GPT-OSS (harmony): the generation prompt ends in <|start|>assistant
        {ReplyFormat::Harmony, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!", "Hello!", {}, 0},
        {ReplyFormat::Harmony, "<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{\"id\": 7}", "", {{"lookup", R"({"id":7})"}}, 0},
        {ReplyFormat::Harmony, " to=functions.f<|channel|>commentary json<|message|>{\"a\": [1]}", "", {{"f", R"({"a":[1]})"}}, 0},
        {ReplyFormat::Harmony, "<|channel|>commentary to=functions.f json<|message|>{oops", "<|channel|>commentary to=functions.f json<|message|>{oops", {}, 1},
        {ReplyFormat::Harmony, "<|channel|>final", "<|channel|>final", {}, 1},
        // LFM2
        {ReplyFormat::Lfm2, "<|tool_call_start|>[get_status(candidate_id=\"12345\", full=True, tags=['a', \"b\"], n=-1.5, x=None)]<|tool_call_end|>Checking.",
         "Checking.", {{"get_status", R"({"candidate_id":"12345","full":true,"tags":["a","b"],"n":-1.5,"x":null})"}}, 0},
        {ReplyFormat::Lfm2, "<|tool_call_start|>[a(), b(d={'k': [1, 2]})]<|tool_call_end|>", "", {{"a", "{}"}, {"b", R"({"d":{"k":[1,2]}})"}}, 0},
        {ReplyFormat::Lfm2, "<|tool_call_start|>[{\"name\": \"a\", \"arguments\": {\"x\": 1}}]<|tool_call_end|>", "", {{"a", R"({"x":1})"}}, 0},
        {ReplyFormat::Lfm2, "<|tool_call_start|>[a(1)]<|tool_call_end|>", "<|tool_call_start|>[a(1)]<|tool_call_end|>", {}, 1},
        {ReplyFormat::Lfm2, "<|tool_call_start|>[a(x='unterminated)]<|tool_call_end|>", "<|tool_call_start|>[a(x='unterminated)]<|tool_call_end|>", {}, 1},
        {ReplyFormat::Lfm2, "<|tool_call_start|>[a(x=1)", "<|tool_call_start|>[a(x=1)", {}, 1},
        // Plain: tags of other formats are text
        {ReplyFormat::Plain, "<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>", {}, 0},
    };
    for (const Case& c : cases) {
        std::string text = c.text;
        CAPTURE(text);
        ChatReply r = parse_reply(c.text, c.f);
        CHECK(r.content == c.content);
        CHECK(r.warnings.size() == c.warnings);
        REQUIRE(r.tool_calls.size() == c.calls.size());
        for (size_t k = 0; k < c.calls.size(); k++) {
            CHECK(r.tool_calls[k].name == c.calls[k].first);
            CHECK(r.tool_calls[k].arguments == c.calls[k].second);
        }
    }
    ChatReply r = parse_reply("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!", ReplyFormat::Harmony);
    CHECK(r.reasoning == "Think.");
    r = parse_reply("[TOOL_CALLS]g[CALL_ID]zzzzzzzzz[ARGS]{}", ReplyFormat::Mistral);
    CHECK(r.tool_calls.at(0).id == "zzzzzzzzz");
}

TEST_CASE("OpenAI's message shape, ids from the seed, and hostile nesting") {
    ChatReply r = parse_reply("<think>hm</think><tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>", ReplyFormat::Hermes, false, 42);
    ojson m = reply_message(r);
    CHECK(m["content"].is_null());
    CHECK(m["reasoning_content"] == "hm");
    CHECK(m["tool_calls"][0]["type"] == "function");
    CHECK(m["tool_calls"][0]["function"]["arguments"] == R"({"a":1})");  // a string, as OpenAI sends it
    std::string id = m["tool_calls"][0]["id"];
    CHECK(id.rfind("call_", 0) == 0);
    CHECK(parse_reply("<tool_call>{\"name\": \"f\"}</tool_call>", ReplyFormat::Hermes, false, 42).tool_calls[0].id == id);
    CHECK(parse_reply("<tool_call>{\"name\": \"f\"}</tool_call>", ReplyFormat::Hermes, false, 43).tool_calls[0].id != id);
    CHECK(reply_message(parse_reply("Hi", ReplyFormat::Hermes))["content"] == "Hi");

    std::string deep(100000, '[');
    for (ReplyFormat f : {ReplyFormat::Hermes, ReplyFormat::Llama3, ReplyFormat::Mistral, ReplyFormat::Harmony, ReplyFormat::Lfm2}) {
        std::string format = reply_format_name(f);
        CAPTURE(format);
        std::string open = f == ReplyFormat::Hermes ? "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": "
                         : f == ReplyFormat::Llama3 ? "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": "
                         : f == ReplyFormat::Mistral ? "[TOOL_CALLS]f[ARGS]{\"a\": "
                         : f == ReplyFormat::Harmony ? "<|channel|>commentary to=functions.f<|message|>{\"a\": "
                                                     : "<|tool_call_start|>[f(a=";
        ChatReply d = parse_reply(open + deep, f);
        CHECK(d.tool_calls.empty());
        CHECK(d.warnings.size() == 1);
    }
}
