// Jinja tests: real chat templates rendered byte for byte as Python's jinja2 renders them in transformers'
// environment (tests/data/templates/goldens.json, made by oracle/chat_template_goldens.py), the same for
// small snippets that exercise one feature each, hostile templates that must fail with one clean line,
// and ChatTemplate's loading of a checkpoint's template(s) and special tokens.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "test_util.h"
#include "tok_test_util.h"

using namespace monocu;
using ojson = nlohmann::ordered_json;
using tok_test::error_of;

static const std::string TEMPLATES = "tests/data/templates/";

static ojson read_json(const std::string& path) {
    std::string text;
    REQUIRE_MESSAGE(tok_test::read_text(path, text), path);
    return ojson::parse(text);
}

static std::string read_template(const std::string& name) {
    std::string text;
    REQUIRE_MESSAGE(tok_test::read_text(TEMPLATES + name + ".jinja", text), name);
    return text;
}

// The first byte where two renders differ, with a little context, for a readable failure.
static std::string first_difference(const std::string& got, const std::string& want) {
    size_t k = 0;
    while (k < got.size() && k < want.size() && got[k] == want[k]) k++;
    size_t from = k > 40 ? k - 40 : 0;
    return "at byte " + std::to_string(k) + ": got " + ojson(got.substr(from, 80)).dump() + ", want " + ojson(want.substr(from, 80)).dump();
}

// An error message is one line and names the template (file:line).
static bool one_line_naming(const std::string& msg, const std::string& name) {
    return msg.find('\n') == std::string::npos && msg.rfind(name + ":", 0) == 0;
}

// CHAT_TEMPLATE_NOW set for the lifetime of the object (strftime_now's clock in the goldens).
struct FixedNow {
    explicit FixedNow(const std::string& iso) { setenv("CHAT_TEMPLATE_NOW", iso.c_str(), 1); }
    ~FixedNow() { unsetenv("CHAT_TEMPLATE_NOW"); }
};

TEST_CASE("jinja: real chat templates render byte for byte as transformers' jinja2 environment does") {
    ojson goldens = read_json(TEMPLATES + "goldens.json");
    ojson convs = read_json(TEMPLATES + "conversations.json")["conversations"];
    ojson tokens = read_json(TEMPLATES + "special_tokens.json")["tokens"];
    FixedNow now(goldens["now"].get<std::string>());
    int texts = 0, errors = 0, templates = 0;
    for (auto& entry : goldens["renders"].items()) {
        const std::string& name = entry.key();
        CAPTURE(name);
        ChatTemplate ct = ChatTemplate::from_text(read_template(name), name + ".jinja", tokens[name]);
        templates++;
        for (auto& r : entry.value().items()) {
            std::string key = r.key();
            size_t slash = key.rfind('/');
            const ojson& conv = convs[key.substr(0, slash)];
            ojson kwargs = conv.value("kwargs", ojson::object());
            kwargs["add_generation_prompt"] = key.substr(slash + 1) == "gen";
            CAPTURE(key);
            if (r.value().is_object()) {
                std::string err = error_of([&] { ct.render(conv["messages"], kwargs); });
                if (err == "(no error)") FAIL_CHECK("rendered, but jinja2 raised " << r.value()["error"].get<std::string>());
                else if (!one_line_naming(err, name + ".jinja")) FAIL_CHECK("not one line naming the template: " << err);
                errors++;
                continue;
            }
            std::string want = r.value().get<std::string>(), got;
            std::string err = error_of([&] { got = ct.render(conv["messages"], kwargs); });
            if (err != "(no error)") { FAIL_CHECK(err); continue; }
            if (got != want) FAIL_CHECK(first_difference(got, want));
            texts += got == want;
        }
    }
    MESSAGE(templates << " templates: " << texts << " renders identical, " << errors << " expected errors raised");
    CHECK(templates >= 25);
}

TEST_CASE("jinja: feature snippets render as jinja2 renders them, errors included") {
    ojson goldens = read_json(TEMPLATES + "goldens.json");
    ojson doc = read_json(TEMPLATES + "snippets.json");
    FixedNow now(goldens["now"].get<std::string>());
    const ojson& snippets = doc["snippets"];
    REQUIRE(snippets.size() == goldens["snippets"].size());
    int same = 0, errors = 0;
    for (size_t k = 0; k < snippets.size(); k++) {
        std::string text = snippets[k]["template"].get<std::string>();
        ojson ctx = doc["context"];
        if (snippets[k].contains("context")) ctx.update(snippets[k]["context"]);
        const ojson& want = goldens["snippets"][k];
        std::string label = "snippet" + std::to_string(k), got;
        CAPTURE(text);
        std::string err = error_of([&] { got = jinja::Template::parse(text, label).render(ctx); });
        if (want.is_object()) {
            if (err == "(no error)") FAIL_CHECK("rendered " << ojson(got).dump() << ", but jinja2 raised " << want["error"].get<std::string>());
            else if (!one_line_naming(err, label)) FAIL_CHECK("not one line naming the template: " << err);
            else errors++;
            continue;
        }
        if (err != "(no error)") FAIL_CHECK(err);
        else if (got != want.get<std::string>()) FAIL_CHECK(first_difference(got, want.get<std::string>()));
        else same++;
    }
    MESSAGE(snippets.size() << " snippets: " << same << " identical, " << errors << " expected errors raised");
}

TEST_CASE("jinja: hostile templates fail with one line naming the template, quickly") {
    ojson ctx = {{"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}, {"n", 3}};
    jinja::Options tight;  // the fuzzer's limits, so that the slow cases stay fast here
    tight.max_steps = 200000;
    tight.max_output = 1u << 20;
    tight.max_list = 100000;
    struct Case { const char* text; const char* expect; };
    const Case cases[] = {
        {"{{ x", "unexpected end of template"},
        {"{% if x", "unexpected end of template"},
        {"{% if true %}open", "expected 'elif' or 'else' or 'endif'"},
        {"{% for x in [1] %}", "expected 'else' or 'endfor'"},
        {"{# never closed", "missing end of comment tag"},
        {"{% raw %}never closed", "missing end of raw directive"},
        {"{{ 'never closed }}", "unterminated string"},
        {"{{ (1 }}", "unexpected '}'"},
        {"{% endfor %}", "unknown tag 'endfor'"},
        {"{% do x %}", "unknown tag 'do'"},
        {"{% extends 'base' %}", "not supported"},
        {"{{ x | no_such_filter }}", "no filter named 'no_such_filter'"},
        {"{{ x is no_such_test }}", "no test named 'no_such_test'"},
        {"{{ 99999999999999999999 }}", "integer literal too large"},
        {"{{ \"\\N{BULLET}\" }}", "not supported"},
        {"{% break %}", "outside a for loop"},
        {"{{ raise_exception('roles must alternate') }}", "raise_exception: roles must alternate"},
        {"{{ raise_exception('two\nlines') }}", "raise_exception: two lines"},
        {"{{ 'x' * 1000000000000 }}", "text longer than"},
        {"{{ [1, 2] * 1000000000 }}", "list longer than"},
        {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "text longer than"},
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "evaluation steps"},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "deeper than"},
        {"{% macro f(n) %}{{ f(n + 1) ~ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deeper than"},
        {"{{ range(1000000000000) }}", "Range too big"},
        {"{{ 2 ** 64 }}", "beyond 64 bits"},
        {"{{ 9223372036854775807 + 1 }}", "beyond 64 bits"},
        {"{{ [1] | tojson(indent=100000) }}", "indent wider than"},
        {"{{ '{:>999999999}'.format(1) }}", "text longer than"},
        {"{{ 'x' | center(2000000000) }}", "text longer than"},
        {"{{ 'a' | indent(2000000000) }}", "text longer than"},
        {"{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}", "nested deeper than"},
        {"{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested deeper than"},
        {"{% set ns = namespace(d={}) %}{% for i in range(1000) %}{% set ns.d = {'k': ns.d} %}{% endfor %}", "nested deeper than"},
        {"{{ messages.append(1) }}", "SecurityError"},
        {"{{ undefined_thing.attribute }}", "'undefined_thing' is undefined"},
        {"{{ messages[0].content + 1 }}", "can only concatenate str"},
        {"{{ 1 / 0 }}", "division by zero"},
    };
    auto t0 = std::chrono::steady_clock::now();
    for (const Case& c : cases) {
        std::string text = c.text;
        CAPTURE(text);
        std::string err = error_of([&] { jinja::Template::parse(c.text, "hostile.jinja").render(ctx, tight); });
        CHECK(err.rfind("hostile.jinja:1: ", 0) == 0);
        CHECK(err.find('\n') == std::string::npos);
        CHECK_MESSAGE(err.find(c.expect) != std::string::npos, err);
    }
    // Nesting deeper than the parser allows: one error, not a stack overflow.
    std::string nots;
    for (int k = 0; k < 5000; k++) nots += "not ";
    for (const std::string& deep : {std::string(100000, '(') + "1" + std::string(100000, ')'),
                                    std::string(100000, '[') + std::string(100000, ']'), std::string(5000, '-') + "1", nots + "1"}) {
        std::string err = error_of([&] { jinja::Template::parse("{{ " + deep + " }}", "deep.jinja"); });
        CHECK_MESSAGE(err.find("deep.jinja:1: syntax error: nesting deeper than") == 0, err.substr(0, 200));
    }
    std::string blocks;
    for (int k = 0; k < 5000; k++) blocks += "{% if true %}";
    CHECK(error_of([&] { jinja::Template::parse(blocks, "deep.jinja"); }).find("nesting deeper than") != std::string::npos);
    // The default limits stop an endless template too (about a second at most).
    std::string err = error_of([&] {
        jinja::Template::parse("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "slow.jinja").render(ctx);
    });
    CHECK(err.find("evaluation steps") != std::string::npos);
    // A chain of 100000 namespaces, each holding the previous one: built, then freed without recursion,
    // and an error (not a stack overflow) when printed.
    jinja::Options roomy;
    roomy.max_steps = 5000000;
    const char* chain = "{% set o = namespace(c=none) %}{% for i in range(100000) %}{% set o.c = namespace(p=o.c) %}{% endfor %}"
                        "{% set o.c = none %}dropped";
    CHECK(jinja::Template::parse(chain, "chain.jinja").render(ctx, roomy) == "dropped");
    const char* printed = "{% set o = namespace(c=none) %}{% for i in range(300) %}{% set o.c = namespace(p=o.c) %}{% endfor %}{{ o }}";
    err = error_of([&] { jinja::Template::parse(printed, "chain.jinja").render(ctx, roomy); });
    CHECK_MESSAGE(err.find("chain.jinja:1: RecursionError: a value nested deeper than") == 0, err);
    // A runtime error names the line it happened on.
    err = error_of([&] { jinja::Template::parse("line 1\n{% if true %}\n  {{ messages[0].nope.deeper }}\n{% endif %}", "lines.jinja").render(ctx); });
    CHECK_MESSAGE(err.rfind("lines.jinja:3: UndefinedError", 0) == 0, err);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("hostile templates rejected in " << ms << " ms");
}

TEST_CASE("jinja: ChatTemplate loads a checkpoint's templates and special tokens as transformers does") {
    monocu_test::TempDir dir;
    ojson config = {
        {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}}},
        {"eos_token", "</s>"},
        {"pad_token", nullptr},
        {"additional_special_tokens", {"<a>", {{"content", "<b>"}}}},
        {"chat_template", ojson::array({
            {{"name", "default"}, {"template", "D{{ bos_token }}{{ eos_token }}{{ pad_token is defined }}{{ additional_special_tokens }}"
                                               "{{ messages[0].content }}{{ add_generation_prompt }}{{ tools is none }}"}},
            {{"name", "tool_use"}, {"template", "T{{ tools | map(attribute='function.name') | join(',') }}{{ extra }}"}},
            {{"name", "rag"}, {"template", "R{{ documents | length }}"}}})},
    };
    monocu_test::write_file(dir / "tokenizer_config.json", config.dump());
    ChatTemplate ct = ChatTemplate::load(dir.path);
    REQUIRE(!ct.empty());
    CHECK(ct.names() == std::vector<std::string>{"default", "tool_use", "rag"});
    ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
    ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])");
    CHECK(ct.render(msgs) == "D<s></s>False['<a>', '<b>']hiFalseTrue");
    CHECK(ct.render(msgs, {{"add_generation_prompt", true}}) == "D<s></s>False['<a>', '<b>']hiTrueTrue");
    CHECK(ct.render(msgs, {{"tools", tools}, {"extra", 7}}) == "Tf,g7");     // tools given: "tool_use"
    CHECK(ct.render(msgs, {{"tools", nullptr}}).rfind("D", 0) == 0);       // tools=None: "default"
    CHECK(ct.render(msgs, {{"documents", ojson::array({1, 2})}}, "rag") == "R2");
    CHECK(ct.render(msgs, {{"eos_token", "EOS"}}).find("<s>EOS") != std::string::npos);  // kwargs win
    CHECK(error_of([&] { ct.render(msgs, ojson::object(), "nope"); }).find("chat template 'nope' not found") != std::string::npos);

    // special_tokens_map.json overrides tokenizer_config.json; chat_template.jinja overrides its template.
    monocu_test::write_file(dir / "special_tokens_map.json", R"({"bos_token": {"content": "<BOS>"}, "unk_token": "<unk>"})");
    monocu_test::write_file(dir / "chat_template.jinja", "J{{ bos_token }}{{ unk_token }}\n");
    ChatTemplate jt = ChatTemplate::load(dir.path);
    CHECK(jt.names() == std::vector<std::string>{"default"});
    CHECK(jt.render(msgs, {{"tools", tools}}) == "J<BOS><unk>");  // jinja2 drops one trailing newline
    CHECK(jt.special_tokens()["eos_token"] == "</s>");

    // A template error names the file and line.
    monocu_test::write_file(dir / "chat_template.jinja", "ok\n{{ raise_exception('nope') }}");
    std::string err = error_of([&] { ChatTemplate::load(dir.path).render(msgs); });
    CHECK_MESSAGE(err == dir / "chat_template.jinja" + ":2: raise_exception: nope", err);
    monocu_test::write_file(dir / "chat_template.jinja", "{% if %}");
    CHECK(error_of([&] { ChatTemplate::load(dir.path); }).find(dir / "chat_template.jinja:1: syntax error") == 0);

    // No template at all, a malformed config, bad token fields.
    monocu_test::TempDir empty;
    CHECK(ChatTemplate::load(empty.path).empty());
    CHECK(error_of([&] { ChatTemplate::load(empty.path).render(msgs); }).find("no chat template") != std::string::npos);
    monocu_test::write_file(empty / "tokenizer_config.json", "{not json");
    CHECK(error_of([&] { ChatTemplate::load(empty.path); }).find("tokenizer_config.json: not a JSON object") != std::string::npos);
    monocu_test::write_file(empty / "tokenizer_config.json", R"({"chat_template": 5})");
    CHECK(error_of([&] { ChatTemplate::load(empty.path); }).find("must be a string or a list") != std::string::npos);
    monocu_test::write_file(empty / "tokenizer_config.json", R"({"chat_template": [{"name": "default"}]})");
    CHECK(error_of([&] { ChatTemplate::load(empty.path); }).find("list entries must be") != std::string::npos);
    CHECK(error_of([&] { ChatTemplate::from_text("x", "t.jinja", {{"bos_token", 3}}); }).find("bos_token must be a string") != std::string::npos);
    CHECK(error_of([&] { ChatTemplate::from_text("x", "t.jinja").render(ojson::object()); }).find("messages must be a JSON list") != std::string::npos);
}

TEST_CASE("jinja: a real checkpoint's tokenizer_config.json renders as its golden") {
    if (!tok_test::have_hf("qwen3")) { MESSAGE("skipped: tests/data/hf/qwen3 absent (make fetch-tokenizers)"); return; }
    ChatTemplate ct = ChatTemplate::load(tok_test::hf_dir("qwen3"));
    ojson goldens = read_json(TEMPLATES + "goldens.json");
    ojson conv = read_json(TEMPLATES + "conversations.json")["conversations"]["tool_call_and_result"];
    ojson kwargs = conv["kwargs"];
    kwargs["add_generation_prompt"] = true;
    CHECK(ct.special_tokens()["eos_token"] == "<|im_end|>");
    CHECK(ct.render(conv["messages"], kwargs) == goldens["renders"]["qwen3-0.6b"]["tool_call_and_result/gen"].get<std::string>());
}

TEST_CASE("jinja: render time of typical chat templates") {
    ojson convs = read_json(TEMPLATES + "conversations.json")["conversations"];
    ojson tokens = read_json(TEMPLATES + "special_tokens.json")["tokens"];
    FixedNow now("2026-01-15T09:30:00");
    for (std::string name : {"llama-3.1-8b-instruct", "qwen3-0.6b", "qwen2.5-7b-instruct", "gpt-oss-120b"}) {
        ChatTemplate ct = ChatTemplate::from_text(read_template(name), name, tokens[name]);
        for (std::string conv_name : {"system_multi_turn", "tool_call_and_result"}) {
            const ojson& conv = convs[conv_name];
            ojson kwargs = conv.value("kwargs", ojson::object());
            kwargs["add_generation_prompt"] = true;
            std::string out = ct.render(conv["messages"], kwargs);
            REQUIRE(!out.empty());
            double best = 1e30;  // best of 5 batches: the machine may be busy with other work
            for (int batch = 0; batch < 5; batch++) {
                const int n = 40;
                auto t0 = std::chrono::steady_clock::now();
                for (int k = 0; k < n; k++) out = ct.render(conv["messages"], kwargs);
                best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n);
            }
            MESSAGE(name << " / " << conv_name << ": " << best << " us per render (" << out.size() << " bytes, best of 5x40)");
        }
    }
}
