// tokenize — encode, decode or render a chat with a checkpoint's tokenizer.json (common/tokenizer.h).
//
//   build/tools/tokenize -m DIR -p TEXT            ids as one JSON array (HF encode(text, add_special_tokens=False))
//   build/tools/tokenize -m DIR --stdin            the same for all of standard input
//   build/tools/tokenize -m DIR --plain -p TEXT    no added/special token recognised
//   build/tools/tokenize -m DIR --decode "1 2 3"   the text (HF decode, skip_special_tokens=False)
//   build/tools/tokenize -m DIR --chat FILE.json   the prompt rendered by the checkpoint's chat template, as transformers'
//                                                  apply_chat_template(..., tokenize=False) renders it (common/tokenizer/
//                                                  chat_template.h). FILE.json: a list of messages, or {"messages": [...],
//                                                  "tools": [...], "add_generation_prompt": false, ...kwargs}; the
//                                                  generation prompt is added unless it says false. --no-think sets
//                                                  enable_thinking=false, --date YYYY-MM-DD fixes strftime_now's date,
//                                                  --template-name NAME picks a named template (e.g. tool_use).
//   build/tools/tokenize --template T.jinja --chat FILE.json [--special-tokens S.json | -m DIR]
//                                                  the same with template T.jinja; special tokens ({"bos_token": ..,
//                                                  "eos_token": ..}) from S.json or DIR's tokenizer_config.json, so a
//                                                  template can be checked with no checkpoint at all
//   build/tools/tokenize -m DIR --reply OUT.txt [--chat FILE.json]
//                                                  what a model wrote (OUT.txt, special tokens as text) split as
//                                                  OpenAI returns it: {"format", "message": {"content",
//                                                  "reasoning_content", "tool_calls"}, "warnings"}, by the tool-call
//                                                  format of the checkpoint's (or --template's) chat template
//                                                  (common/tokenizer/chat_reply.h); with --chat, the prompt it
//                                                  answered says whether it began inside <think>
//   build/tools/tokenize -m DIR --bench FILE       load time, and single-threaded encode MB/s over FILE
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat_reply.h"
#include "tokenizer/chat_template.h"
#include "host/errors.h"
#include "tokenizer/tokenizer.h"

using namespace monocu;

static const char* USAGE =
    "usage: tokenize -m DIR [-p TEXT | --stdin] [--plain] [--decode \"ID ID ...\"] [--chat FILE.json [--no-think] [--date D]]\n"
    "                [--bench FILE]\n"
    "       tokenize [-m DIR] --chat FILE.json [--template T.jinja] [--template-name NAME] [--special-tokens S.json]\n"
    "                [--no-think] [--date YYYY-MM-DD]\n"
    "       tokenize [-m DIR | --template T.jinja] --reply OUT.txt [--chat FILE.json]\n";

struct Args {
    std::string model, text, decode, chat, bench, date, tmpl, tmpl_name, special, reply;
    bool have_text = false, from_stdin = false, plain = false, no_think = false;
};

static Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string k = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die_usage("%s needs a value", k.c_str());
            return argv[++i];
        };
        if (k == "-h" || k == "--help") { std::fputs(USAGE, stdout); std::exit(0); }
        else if (k == "-m") a.model = value();
        else if (k == "-p") { a.text = value(); a.have_text = true; }
        else if (k == "--stdin") a.from_stdin = true;
        else if (k == "--plain") a.plain = true;
        else if (k == "--decode") a.decode = value();
        else if (k == "--chat") a.chat = value();
        else if (k == "--reply") a.reply = value();
        else if (k == "--no-think") a.no_think = true;
        else if (k == "--date") a.date = value();
        else if (k == "--bench") a.bench = value();
        else if (k == "--template") a.tmpl = value();
        else if (k == "--template-name") a.tmpl_name = value();
        else if (k == "--special-tokens") a.special = value();
        else die_usage("unknown flag '%s'", k.c_str());
    }
    if (!a.tmpl.empty() || !a.special.empty() || !a.tmpl_name.empty()) {
        if (a.chat.empty() && a.reply.empty()) die_usage("--template, --template-name and --special-tokens go with --chat or --reply");
        if (!a.special.empty() && a.tmpl.empty()) die_usage("--special-tokens goes with --template");
        if (!a.special.empty() && !a.model.empty()) die_usage("give either -m DIR or --special-tokens, not both");
    }
    if (a.model.empty() && a.tmpl.empty()) die_usage("-m DIR is required");
    int y, mo, d;
    char rest;
    if (!a.date.empty() && std::sscanf(a.date.c_str(), "%4d-%2d-%2d%c", &y, &mo, &d, &rest) != 3)
        die_usage("--date '%s' is not YYYY-MM-DD", a.date.c_str());
    int modes = int(a.have_text || a.from_stdin) + int(!a.decode.empty()) + int(!a.chat.empty() && a.reply.empty()) +
                int(!a.bench.empty()) + int(!a.reply.empty());
    if (modes != 1) die_usage("give exactly one of -p/--stdin, --decode, --chat, --reply, --bench");
    return a;
}

static std::vector<int> parse_ids(const std::string& s) {
    std::vector<int> ids;
    std::string clean = s;
    for (char& c : clean) if (c == ',' || c == '[' || c == ']') c = ' ';
    std::istringstream in(clean);
    std::string word;
    while (in >> word) {
        char* end = nullptr;
        long v = std::strtol(word.c_str(), &end, 10);
        if (*end || v < 0 || v > 0x7FFFFFFF) die_usage("--decode: '%s' is not a token id", word.c_str());
        ids.push_back(int(v));
    }
    return ids;
}

// --chat FILE.json: a list of messages, or an object with "messages" and the template's other arguments.
// Key order is kept (ordered_json): tojson in a template prints keys in the order given.
struct ChatInput {
    nlohmann::ordered_json messages, kwargs = nlohmann::ordered_json::object();
};

static ChatInput read_chat_input(const std::string& path) {
    std::string text;
    if (!tok_read_file(path, text)) die("%s: cannot read", path.c_str());
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
    ChatInput in;
    if (!j.is_discarded() && j.is_array()) {
        in.messages = j;
    } else if (!j.is_discarded() && j.is_object() && j.contains("messages") && j["messages"].is_array()) {
        in.messages = j["messages"];
        for (auto it = j.begin(); it != j.end(); ++it) if (it.key() != "messages") in.kwargs[it.key()] = it.value();
    } else {
        die("%s: expected a JSON list of messages or {\"messages\": [...], ...}", path.c_str());
    }
    return in;
}

// The checkpoint's (or --template's) Jinja chat template.
static ChatTemplate load_chat_template(const Args& a) {
    ChatTemplate ct;
    if (!a.tmpl.empty()) {
        std::string text;
        if (!tok_read_file(a.tmpl, text)) die("%s: cannot read", a.tmpl.c_str());
        nlohmann::ordered_json special = nlohmann::ordered_json::object();
        if (!a.special.empty()) {
            std::string s;
            if (!tok_read_file(a.special, s)) die("%s: cannot read", a.special.c_str());
            special = nlohmann::ordered_json::parse(s, nullptr, false);
            if (special.is_discarded() || !special.is_object()) die("%s: expected a JSON object of special tokens", a.special.c_str());
        } else if (!a.model.empty()) {
            special = ChatTemplate::load(a.model).special_tokens();
        }
        ct = ChatTemplate::from_text(text, a.tmpl, special);
    } else {
        ct = ChatTemplate::load(a.model);
    }
    return ct;
}

// --chat: the prompt the template renders; a checkpoint with no template is an error.
static std::string render_chat_file(const Args& a, const ChatTemplate& ct) {
    ChatInput in = read_chat_input(a.chat);
    if (!in.kwargs.contains("add_generation_prompt")) in.kwargs["add_generation_prompt"] = true;
    if (a.no_think) in.kwargs["enable_thinking"] = false;
    if (!a.date.empty()) setenv("CHAT_TEMPLATE_NOW", (a.date + "T00:00:00").c_str(), 1);
    return ct.render(in.messages, in.kwargs, a.tmpl_name);
}

// --reply: a model's output split into content, reasoning and tool calls.
static void split_reply(const Args& a, const ChatTemplate& ct) {
    if (ct.empty()) die("--reply: %s has no chat template to tell its tool-call format by", a.model.c_str());
    std::string text;
    if (!tok_read_file(a.reply, text)) die("%s: cannot read", a.reply.c_str());
    size_t bad = utf8_first_invalid(text);
    if (bad != std::string::npos) die("%s: invalid UTF-8 at byte %zu", a.reply.c_str(), bad);
    ReplyFormat f = reply_format(ct);
    bool opened = !a.chat.empty() && reply_starts_in_reasoning(render_chat_file(a, ct), f);
    ChatReply r = parse_reply(text, f, opened);
    nlohmann::ordered_json out = {{"format", reply_format_name(f)}, {"message", reply_message(r)}, {"warnings", r.warnings}};
    std::puts(out.dump(2).c_str());
}

// Load time, then encode throughput over the file: best of three passes, one thread.
static void bench(const Args& a) {
    Tokenizer tok = Tokenizer::load(a.model);
    std::printf("load: %.1f ms (%s/tokenizer.json, vocab %d)\n", tok.load_ms, a.model.c_str(), tok.vocab_size());
    std::string text;
    if (!tok_read_file(a.bench, text)) die("%s: cannot read", a.bench.c_str());
    double best = 1e30;
    size_t n = 0;
    for (int pass = 0; pass < 3; pass++) {
        auto t0 = std::chrono::steady_clock::now();
        n = tok.encode(text).size();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("encode: %.2f MB in %.3f s = %.2f MB/s, %zu tokens (best of 3, 1 thread)\n", text.size() / 1e6, best,
                text.size() / 1e6 / best, n);
}

int main(int argc, char** argv) {
    return run_main([&] {
        Args a = parse_args(argc, argv);
        if (!a.bench.empty()) { bench(a); return 0; }
        if (!a.reply.empty()) {
            split_reply(a, load_chat_template(a));
            return 0;
        }
        if (!a.chat.empty()) {
            std::string out = render_chat_file(a, load_chat_template(a));
            std::fwrite(out.data(), 1, out.size(), stdout);
            return 0;
        }
        Tokenizer tok = Tokenizer::load(a.model);
        if (!a.decode.empty()) {
            std::vector<int> ids = parse_ids(a.decode);
            for (int id : ids)  // the library skips unknown ids, as HF does; a user asking for one is told
                if (id >= tok.vocab_size() || tok.token_text(id).empty())
                    die("--decode: token id %d is not in %s's vocabulary (%d ids)", id, a.model.c_str(), tok.vocab_size());
            std::string out = tok.decode(ids);
            std::fwrite(out.data(), 1, out.size(), stdout);
            std::fputc('\n', stdout);
            return 0;
        }
        if (a.from_stdin) a.text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
        size_t bad = utf8_first_invalid(a.text);  // HF takes only valid strings: say where, do not substitute U+FFFD
        if (bad != std::string::npos)
            die("%s: invalid UTF-8 at byte %zu (0x%02x)", a.from_stdin ? "standard input" : "-p", bad, (unsigned)(unsigned char)a.text[bad]);
        std::vector<int> ids = a.plain ? tok.encode_plain(a.text) : tok.encode(a.text);
        std::string out = "[";
        for (size_t i = 0; i < ids.size(); i++) out += (i ? ", " : "") + std::to_string(ids[i]);
        std::puts((out + "]").c_str());
        return 0;
    });
}
