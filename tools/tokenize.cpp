// tokenize — encode, decode or render a chat with a checkpoint's tokenizer.json (common/tokenizer.h).
//
//   build/tools/tokenize -m DIR -p TEXT            ids as one JSON array (HF encode(text, add_special_tokens=False))
//   build/tools/tokenize -m DIR --stdin            the same for all of standard input
//   build/tools/tokenize -m DIR --plain -p TEXT    no added/special token recognised
//   build/tools/tokenize -m DIR --decode "1 2 3"   the text (HF decode, skip_special_tokens=False)
//   build/tools/tokenize -m DIR --chat FILE.json   [{"role":..,"content":..}, ...] -> the rendered prompt with the
//                                                  generation prompt; --no-think for Qwen3, --date YYYY-MM-DD for GPT-OSS
//   build/tools/tokenize -m DIR --bench FILE       load time, and single-threaded encode MB/s over FILE
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat.h"
#include "host/errors.h"
#include "tokenizer/tokenizer.h"

using namespace monocu;

static const char* USAGE =
    "usage: tokenize -m DIR [-p TEXT | --stdin] [--plain] [--decode \"ID ID ...\"] [--chat FILE.json [--no-think] [--date D]]\n"
    "                [--bench FILE]\n";

struct Args {
    std::string model, text, decode, chat, bench, date;
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
        else if (k == "--no-think") a.no_think = true;
        else if (k == "--date") a.date = value();
        else if (k == "--bench") a.bench = value();
        else die_usage("unknown flag '%s'", k.c_str());
    }
    if (a.model.empty()) die_usage("-m DIR is required");
    int modes = int(a.have_text || a.from_stdin) + int(!a.decode.empty()) + int(!a.chat.empty()) + int(!a.bench.empty());
    if (modes != 1) die_usage("give exactly one of -p/--stdin, --decode, --chat, --bench");
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

static std::vector<ChatMessage> read_chat(const std::string& path) {
    std::string text;
    if (!tok_read_file(path, text)) die("%s: cannot read", path.c_str());
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) die("%s: expected a JSON list of {\"role\", \"content\"}", path.c_str());
    std::vector<ChatMessage> msgs;
    for (auto& m : j) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") || !m["content"].is_string())
            die("%s: message %zu is not {\"role\": string, \"content\": string}", path.c_str(), msgs.size());
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    return msgs;
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
        Tokenizer tok = Tokenizer::load(a.model);
        if (!a.decode.empty()) {
            std::string out = tok.decode(parse_ids(a.decode));
            std::fwrite(out.data(), 1, out.size(), stdout);
            std::fputc('\n', stdout);
            return 0;
        }
        if (!a.chat.empty()) {
            ChatOptions o;
            o.enable_thinking = !a.no_think;
            o.date = a.date;
            std::string out = render_chat(tok, read_chat(a.chat), o);
            std::fwrite(out.data(), 1, out.size(), stdout);
            return 0;
        }
        if (a.from_stdin) a.text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
        std::vector<int> ids = a.plain ? tok.encode_plain(a.text) : tok.encode(a.text);
        std::string out = "[";
        for (size_t i = 0; i < ids.size(); i++) out += (i ? ", " : "") + std::to_string(ids[i]);
        std::puts((out + "]").c_str());
        return 0;
    });
}
