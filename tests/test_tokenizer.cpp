// Tokenizer tests: UTF-8 and NFC building blocks, the split-pattern regex, a tiny tokenizer built
// here (the shape HF's save_pretrained writes for a ByteLevel BPE), hostile tokenizer.json files,
// random bytes, streaming decode, and the six real tokenizers against Hugging Face's own ids.
#include <doctest/doctest.h>

#include <random>

#include <cstdio>
#include <unistd.h>

#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"

using namespace monocu;
using nlohmann::json;
using tok_test::error_of;

static const char* QWEN2_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// ---- building blocks ----

TEST_CASE("utf8_repair replaces each maximal invalid subsequence with one U+FFFD") {
    const std::string R = "\xEF\xBF\xBD";
    CHECK(utf8_repair("plain ascii") == "plain ascii");
    CHECK(utf8_repair("caf\xC3\xA9") == "caf\xC3\xA9");
    CHECK(utf8_repair("\xFF") == R);
    CHECK(utf8_repair("a\xC0\xAF" "b") == "a" + R + R + "b");            // overlong: C0 never valid
    CHECK(utf8_repair("x\xE2\x82") == "x" + R);                           // truncated 3-byte: one U+FFFD
    CHECK(utf8_repair("\xE2\x82" "A") == R + "A");
    CHECK(utf8_repair("\xED\xA0\x80") == R + R + R);                      // surrogate: ED A0 is not a prefix
    CHECK(utf8_repair("\xF4\x90\x80\x80") == R + R + R + R);              // above U+10FFFF
    CHECK(utf8_repair("\xF0\x9F\x98") == R);
    CHECK(utf8_repair(std::string("a\0b", 3)) == std::string("a\0b", 3));  // NUL is valid
}

TEST_CASE("NFC composes, reorders marks, and leaves exclusions and NFC text alone") {
    CHECK(unicode_nfc("e\xCC\x81") == "\xC3\xA9");                                   // e + acute -> é
    CHECK(unicode_nfc("\xE2\x84\xAB") == "\xC3\x85");                                // Angstrom sign -> Å
    CHECK(unicode_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");    // jamo -> 각
    CHECK(unicode_nfc("d\xCC\x87\xCC\xA3") == "\xE1\xB8\x8D\xCC\x87");               // dot below first, then ḍ + dot above
    CHECK(unicode_nfc("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");                // U+0958 is excluded: stays decomposed
    CHECK(unicode_nfc("\xEF\xAC\x81") == "\xEF\xAC\x81");                            // ﬁ: compatibility only
    CHECK(unicode_nfc("already NFC \xC3\xA9") == "already NFC \xC3\xA9");
    CHECK(unicode_nfd("\xC3\xA9") == "e\xCC\x81");
}

static std::vector<std::string> split_with(const char* pattern, const std::string& text) {
    Regex re = Regex::compile(pattern, "test");
    std::vector<uint32_t> cps, offs;
    utf8_decode_all(text.data(), text.size(), cps, offs);
    std::vector<std::pair<uint32_t, uint32_t>> m;
    re.find_all(cps.data(), cps.size(), m);
    std::vector<std::string> out;
    for (auto& r : m) out.push_back(text.substr(offs[r.first], offs[r.second] - offs[r.first]));
    return out;
}

TEST_CASE("the split regex engine follows leftmost-first, greedy backtracking") {
    using V = std::vector<std::string>;
    CHECK(split_with(QWEN2_PATTERN, "Hello world") == V{"Hello", " world"});
    CHECK(split_with(QWEN2_PATTERN, "it'S 42!") == V{"it", "'S", " ", "4", "2", "!"});
    CHECK(split_with(QWEN2_PATTERN, "a   b") == V{"a", "  ", " b"});            // \s+(?!\S) leaves one space
    CHECK(split_with(QWEN2_PATTERN, "x\r\n\r\ny") == V{"x", "\r\n\r\n", "y"});
    CHECK(split_with(QWEN2_PATTERN, "it'\xC5\xBF") == V{"it", "'\xC5\xBF"});     // (?i) 's matches long s
    CHECK(split_with("\\p{N}{1,3}", "12345a6") == V{"123", "45", "6"});
    CHECK(split_with("[\\u4e00-\\u9fa5]+", "ab\xE4\xB8\xAD\xE6\x96\x87" "cd") == V{"\xE4\xB8\xAD\xE6\x96\x87"});
    CHECK(split_with("a(?=b)|c", "abacab") == V{"a", "c", "a"});
    CHECK(split_with("(?:ab)+", "ababab") == V{"ababab"});
}

TEST_CASE("the regex engine rejects what it does not implement, by name") {
    CHECK(error_of([] { Regex::compile("(?<=a)b", "f.json: pre_tokenizer Split"); }).find("unsupported group kind") != std::string::npos);
    CHECK(error_of([] { Regex::compile("\\1", "x"); }).find("unsupported escape") != std::string::npos);
    CHECK(error_of([] { Regex::compile("a*?", "x"); }).find("lazy or possessive") != std::string::npos);
    CHECK(error_of([] { Regex::compile("\\p{Greek}", "x"); }).find("unknown Unicode class \\p{Greek}") != std::string::npos);
    CHECK(error_of([] { Regex::compile("(ab", "x"); }).find("missing )") != std::string::npos);
    CHECK(error_of([] { Regex::compile("^a", "x"); }).find("anchors") != std::string::npos);
    CHECK(error_of([] { Regex::compile("(a?)*", "x"); }).find("can match empty") != std::string::npos);
}

// ---- a tiny tokenizer, as HF's save_pretrained writes one for a ByteLevel BPE ----

static json tiny_tokenizer_json() {
    json vocab = json::object();
    const ByteLevelAlphabet& bl = byte_level_alphabet();
    for (int b = 0; b < 256; b++) vocab[bl.byte_to_utf8[b]] = b;
    std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"\xC4\xA0", "w"}};
    json m = json::array();
    int next = 256;
    for (auto& p : merges) {
        m.push_back({p.first, p.second});
        vocab[p.first + p.second] = next++;
    }
    return json{
        {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
        {"added_tokens", json::array({json{{"id", 261}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                                           {"rstrip", false}, {"normalized", false}, {"special", true}}})},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({
            json{{"type", "Split"}, {"pattern", {{"Regex", QWEN2_PATTERN}}}, {"behavior", "Isolated"}, {"invert", false}},
            json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                   {"vocab", vocab}, {"merges", m}}}};
}

static Tokenizer tiny(const json& j = tiny_tokenizer_json(), const std::string& cfg = "{\"eos_token\": \"<|endoftext|>\"}") {
    return Tokenizer::from_json_text(j.dump(), cfg, "tiny/tokenizer.json");
}

TEST_CASE("a tiny ByteLevel BPE: merges by rank, added tokens, plain text, decode") {
    Tokenizer t = tiny();
    CHECK(t.vocab_size() == 262);
    CHECK(t.encode("hello") == std::vector<int>{259});
    CHECK(t.encode(" hello") == std::vector<int>{' ', 259});             // Ġ is byte 0x20's stand-in, id 32
    CHECK(t.encode(" w") == std::vector<int>{260});
    CHECK(t.encode("hello<|endoftext|>") == std::vector<int>{259, 261});
    CHECK(t.encode_plain("<|endoftext|>").size() == 13);                  // 13 bytes, no merges apply
    CHECK(t.decode({259, 261, 260}) == "hello<|endoftext|> w");
    CHECK(t.eos_ids() == std::vector<int>{261});
    CHECK(t.bos_id() == -1);
    CHECK_FALSE(t.add_bos());
    CHECK(t.decode({-5, 1 << 30, 259}) == "hello");                       // unknown ids are skipped, like HF
    CHECK(t.encode("") .empty());
}

TEST_CASE("merges in the legacy \"a b\" form and ignore_merges") {
    json j = tiny_tokenizer_json();
    json legacy = json::array();
    for (auto& m : j["model"]["merges"]) legacy.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    j["model"]["merges"] = legacy;
    CHECK(tiny(j).encode("hello") == std::vector<int>{259});
    // "hell" + "o" is rank 3; with ignore_merges a word that is itself a vocab entry skips merging.
    j["model"]["vocab"]["hlo"] = 262;
    j["model"]["ignore_merges"] = true;
    CHECK(tiny(j).encode("hlo") == std::vector<int>{262});
    j["model"]["ignore_merges"] = false;
    CHECK(tiny(j).encode("hlo") == std::vector<int>{'h', 'l', 'o'});
}

TEST_CASE("added-token flags: lstrip, rstrip, single_word") {
    json j = tiny_tokenizer_json();
    j["added_tokens"].push_back({{"id", 262}, {"content", "<m>"}, {"single_word", false}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}, {"special", true}});
    j["added_tokens"].push_back({{"id", 263}, {"content", "xy"}, {"single_word", true}, {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", false}});
    Tokenizer t = tiny(j);
    // Expected ids: HF tokenizers 0.23.2 (npm) on this same tokenizer.json.
    using V = std::vector<int>;
    CHECK(t.encode("a  <m>  b") == V{'a', 262, 'b'});       // lstrip/rstrip: the spaces go with the token
    CHECK(t.encode("a\xC2\xA0<m>\xE3\x80\x80" "b") == V{'a', 262, 'b'});  // any Unicode whitespace
    CHECK(t.encode(" <m>") == V{262});
    CHECK(t.encode("<m><m>") == V{262, 262});
    CHECK(t.encode("xy") == V{263});
    CHECK(t.encode("a xy") == V{'a', 32, 263});
    CHECK(t.encode("xy.") == V{263, '.'});
    CHECK(t.encode("<m>xy") == V{262, 263});
    CHECK(t.encode("axy") == V{'a', 'x', 'y'});             // single_word: not inside a word...
    CHECK(t.encode("xy_") == V{'x', 'y', '_'});             // ... '_' counts as a word character
    CHECK(t.encode("_xy") == V{'_', 'x', 'y'});
    CHECK(t.encode("1xy") == V{'1', 'x', 'y'});
    CHECK(t.encode("\xC3\xA9xy") == V{0xC3, 0xA9, 'x', 'y'});
    CHECK(t.decode(t.encode("a  <m>  b")) == "a<m>b");
}

static void write_file(const std::string& path, const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
}

TEST_CASE("load reads a model directory: config, generation_config eos ids, chat_template.jinja") {
    char tmpl[] = "/tmp/monocu_tok_XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    std::string dir = tmpl;
    write_file(dir + "/tokenizer.json", tiny_tokenizer_json().dump());
    write_file(dir + "/tokenizer_config.json", "{\"eos_token\": {\"content\": \"<|endoftext|>\"}, \"chat_template\": \"from config\"}");
    write_file(dir + "/generation_config.json", "{\"eos_token_id\": [261, 259]}");
    write_file(dir + "/config.json", "{\"eos_token_id\": 260}");
    Tokenizer t = Tokenizer::load(dir);
    CHECK(t.eos_ids() == std::vector<int>{261, 259, 260});
    CHECK(t.chat_template() == "from config");
    write_file(dir + "/chat_template.jinja", "from file");
    CHECK(Tokenizer::load(dir + "/").chat_template() == "from file");
    write_file(dir + "/generation_config.json", "{\"eos_token_id\": 99999}");
    CHECK(error_of([&] { Tokenizer::load(dir); }).find("generation_config.json: eos_token_id 99999 is not a token id") != std::string::npos);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json", "chat_template.jinja"})
        std::remove((dir + "/" + f).c_str());
    rmdir(dir.c_str());
}

// ---- hostile tokenizer.json ----

TEST_CASE("hostile tokenizer.json files are rejected with a message naming the problem") {
    auto reject = [](const std::string& text) { return error_of([&] { Tokenizer::from_json_text(text, "", "bad/tokenizer.json"); }); };
    auto reject_json = [&](const json& j) { return reject(j.dump()); };
    auto has = [](const std::string& msg, const char* part) {
        INFO(msg);
        CHECK(msg.find("bad/tokenizer.json") != std::string::npos);
        CHECK(msg.find(part) != std::string::npos);
    };
    has(reject("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}"), "not valid JSON");
    has(reject("[1, 2]"), "top level must be a JSON object");
    has(reject(""), "not valid JSON");

    json j = tiny_tokenizer_json();
    j["model"] = {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}, {"unk_token", "[UNK]"}};
    has(reject_json(j), "model type 'WordPiece' is not supported (only BPE)");
    j["model"] = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", json::array({json::array({"a", -1.0})})}};
    has(reject_json(j), "model type 'Unigram' is not supported (only BPE)");

    j = tiny_tokenizer_json();
    j["pre_tokenizer"] = {{"type", "Whitespace"}};
    has(reject_json(j), "pre_tokenizer 'Whitespace' is not supported");
    j = tiny_tokenizer_json();
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(?<=x)y"}};
    has(reject_json(j), "unsupported group kind");
    j = tiny_tokenizer_json();
    j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
    has(reject_json(j), "behavior 'Sideways'");
    j = tiny_tokenizer_json();
    j["normalizer"] = {{"type", "BertNormalizer"}};
    has(reject_json(j), "normalizer 'BertNormalizer' is not supported");
    j = tiny_tokenizer_json();
    j["decoder"] = {{"type", "WordPiece"}};
    has(reject_json(j), "decoder 'WordPiece' is not supported");

    j = tiny_tokenizer_json();
    j["model"]["merges"].push_back({"h", "zz"});
    has(reject_json(j), "'zz' is not in model.vocab");
    j = tiny_tokenizer_json();
    j["model"]["merges"] = json::array({"nospace"});
    has(reject_json(j), "is not two tokens");
    j = tiny_tokenizer_json();
    j["model"]["merges"] = json::array({json::array({"h", "e", "l"})});
    has(reject_json(j), "expected a pair");
    j = tiny_tokenizer_json();
    j["model"]["vocab"]["x"] = "seven";
    has(reject_json(j), "model.vocab: every value must be a non-negative integer id");
    j = tiny_tokenizer_json();
    j["model"]["vocab"]["x"] = -1;
    has(reject_json(j), "model.vocab: every value must be a non-negative integer id");
    std::string full = tiny_tokenizer_json().dump();
    has(reject(full.substr(0, full.size() / 2)), "not valid JSON");  // truncated file
    j = tiny_tokenizer_json();
    j["model"]["vocab"]["far"] = 50000000;
    has(reject_json(j), "model.vocab ids run to 50000000 for only 262 tokens");
    j = tiny_tokenizer_json();
    j["model"]["vocab"]["dup"] = 5;
    has(reject_json(j), "gives id 5 to both");
    j = tiny_tokenizer_json();
    j["model"].erase("merges");
    has(reject_json(j), "model.merges is missing");
    j = tiny_tokenizer_json();
    j.erase("model");
    has(reject_json(j), "missing \"model\"");
    j = tiny_tokenizer_json();
    j["model"]["dropout"] = 0.1;
    has(reject_json(j), "model.dropout");
    j = tiny_tokenizer_json();
    j["model"]["unk_token"] = "<unk>";
    has(reject_json(j), "unk_token '<unk>' is not in model.vocab");
    j = tiny_tokenizer_json();
    j["added_tokens"][0]["id"] = 259;  // the id of "hello"
    has(reject_json(j), "which model.vocab gives to 'hello'");
    j = tiny_tokenizer_json();
    j["added_tokens"][0]["content"] = "hello";  // in the vocab under another id
    has(reject_json(j), "has id 261 but model.vocab gives it id 259");
    j = tiny_tokenizer_json();
    j["added_tokens"][0]["id"] = "261";
    has(reject_json(j), "\"id\" must be a non-negative integer");
    j = tiny_tokenizer_json();
    j["added_tokens"].push_back(j["added_tokens"][0]);
    j["added_tokens"][1]["content"] = "<|other|>";
    has(reject_json(j), "id 261 appears twice");

    std::string cfg_err = error_of([] { Tokenizer::from_json_text(tiny_tokenizer_json().dump(), "{\"bos_token\": \"<s>\"}", "bad/tokenizer.json"); });
    CHECK(cfg_err.find("bad/tokenizer_config.json: bos_token '<s>' is not a token") != std::string::npos);
    cfg_err = error_of([] { Tokenizer::from_json_text(tiny_tokenizer_json().dump(), "{oops", "bad/tokenizer.json"); });
    CHECK(cfg_err.find("bad/tokenizer_config.json: not a valid JSON object") != std::string::npos);
    CHECK(error_of([] { Tokenizer::load("/nonexistent/dir"); }).find("/nonexistent/dir/tokenizer.json: cannot read") != std::string::npos);
}

// ---- streaming decode ----

static std::string stream_all(const Tokenizer& t, const std::vector<int>& ids, std::vector<std::string>* parts = nullptr) {
    StreamDecoder sd(t);
    std::string out;
    for (int id : ids) {
        std::string s = sd.push(id);
        if (parts) parts->push_back(s);
        out += s;
    }
    std::string rest = sd.flush();
    if (parts) parts->push_back(rest);
    return out + rest;
}

TEST_CASE("the stream decoder holds back a split multi-byte character") {
    Tokenizer t = tiny();
    std::vector<int> ids = t.encode("h\xC3\xA9llo \xF0\x9F\x98\x80!");  // é is 2 byte tokens, 😀 4
    std::vector<std::string> parts;
    CHECK(stream_all(t, ids, &parts) == "h\xC3\xA9llo \xF0\x9F\x98\x80!");
    for (auto& p : parts) CHECK(utf8_is_valid(p));
    CHECK(parts[1].empty());                    // first byte of é: nothing yet
    CHECK(parts[2] == "\xC3\xA9");
    StreamDecoder sd(t);
    CHECK(sd.push(0xF0).empty());
    CHECK(sd.push(0x9F).empty());
    CHECK(sd.flush() == "\xEF\xBF\xBD");        // a truncated character comes out as U+FFFD at the end
    CHECK(sd.push('o') == "o");                 // and the decoder starts afresh
}

TEST_CASE("random bytes never crash encode, decode or the stream decoder") {
    Tokenizer t = tiny();
    std::mt19937 rng(1234);
    const char* pieces[] = {"<|endoftext|>", "<|endof", "\xC3", "\xA9", "\xF0\x9F", " ", "\n", "'s", "hello"};
    for (int iter = 0; iter < 3000; iter++) {
        std::string s;
        int len = int(rng() % 40);
        for (int k = 0; k < len; k++) {
            if (rng() % 4 == 0) s += pieces[rng() % 9];
            else s += char(rng() % 256);
        }
        std::vector<int> ids = t.encode(s);
        std::string back = t.decode(ids);
        REQUIRE(back == utf8_repair(s));        // byte-level BPE without a normalizer is lossless
        REQUIRE(stream_all(t, ids) == back);
        REQUIRE(t.decode(t.encode_plain(s)) == back);
    }
}

// ---- the six real tokenizers against Hugging Face ----

static std::string unhex(const std::string& h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) out += char(std::stoi(h.substr(i, 2), nullptr, 16));
    return out;
}

static void check_goldens(const std::string& name) {
    if (!tok_test::have_hf(name)) {
        MESSAGE("skipped: " << tok_test::hf_dir(name) << "/tokenizer.json absent (run tests/fetch_tokenizers.sh)");
        return;
    }
    std::string corpus_text, golden_text;
    REQUIRE(tok_test::read_text("tests/data/tokenizer/corpus.json", corpus_text));
    REQUIRE(tok_test::read_text("tests/data/tokenizer/goldens/" + name + ".json", golden_text));
    json corpus = json::parse(corpus_text), golden = json::parse(golden_text);
    REQUIRE(corpus.size() == golden["entries"].size());
    Tokenizer t = Tokenizer::load(tok_test::hf_dir(name));
    for (size_t i = 0; i < corpus.size(); i++) {
        const json& c = corpus[i];
        const json& g = golden["entries"][i];
        std::string text = c.contains("hex") ? unhex(c["hex"]) : c["text"].get<std::string>();
        CAPTURE(name);
        CAPTURE(c["name"].get<std::string>());
        CHECK(t.encode(text) == g["ids"].get<std::vector<int>>());
        CHECK(t.encode_plain(text) == g["plain_ids"].get<std::vector<int>>());
        CHECK(t.decode(g["ids"].get<std::vector<int>>()) == g["decoded"].get<std::string>());
        CHECK(t.decode(g["plain_ids"].get<std::vector<int>>()) == g["plain_decoded"].get<std::string>());
        CHECK(stream_all(t, g["ids"].get<std::vector<int>>()) == g["decoded"].get<std::string>());
    }
}

TEST_CASE("qwen3 encodes and decodes the corpus exactly like HF") { check_goldens("qwen3"); }
TEST_CASE("llama3_1 encodes and decodes the corpus exactly like HF") { check_goldens("llama3_1"); }
TEST_CASE("gptoss encodes and decodes the corpus exactly like HF") { check_goldens("gptoss"); }
TEST_CASE("gemma3 encodes and decodes the corpus exactly like HF") { check_goldens("gemma3"); }
TEST_CASE("deepseek_v3 encodes and decodes the corpus exactly like HF") { check_goldens("deepseek_v3"); }
TEST_CASE("llama2 encodes and decodes the corpus exactly like HF") { check_goldens("llama2"); }

TEST_CASE("BOS, add_bos and end-of-generation ids come from the tokenizer files") {
    struct Want { const char* name; int bos; bool add_bos; std::vector<int> eos; };
    const Want wants[] = {
        {"qwen3", -1, false, {151645, 151643}},
        {"llama3_1", 128000, true, {128009, 128001}},
        {"gptoss", 199998, false, {200002, 199999, 200012}},
        {"gemma3", 2, true, {106, 1}},
        {"deepseek_v3", 0, true, {1}},
        {"llama2", 1, true, {2}},
    };
    for (const Want& w : wants) {
        if (!tok_test::have_hf(w.name)) { MESSAGE("skipped: " << std::string(w.name) << " absent (run tests/fetch_tokenizers.sh)"); continue; }
        Tokenizer t = Tokenizer::load(tok_test::hf_dir(w.name));
        std::string name = w.name;
        CAPTURE(name);
        CHECK(t.bos_id() == w.bos);
        CHECK(t.add_bos() == w.add_bos);
        CHECK(t.eos_ids() == w.eos);
    }
}

TEST_CASE("random bytes through real tokenizers never crash and round-trip where HF's would") {
    const char* names[] = {"llama3_1", "gemma3"};
    std::mt19937 rng(99);
    for (const char* name : names) {
        if (!tok_test::have_hf(name)) { MESSAGE("skipped: " << std::string(name) << " absent (run tests/fetch_tokenizers.sh)"); continue; }
        Tokenizer t = Tokenizer::load(tok_test::hf_dir(name));
        for (int iter = 0; iter < 300; iter++) {
            std::string s;
            int len = int(rng() % 64);
            for (int k = 0; k < len; k++) s += char(rng() % 4 ? rng() % 256 : "<|> \n\t"[rng() % 6]);
            std::vector<int> ids = t.encode(s);
            std::string back = t.decode(ids);
            if (std::string(name) == "llama3_1") REQUIRE(back == utf8_repair(s));  // no normalizer: lossless
            REQUIRE(utf8_is_valid(back));
            REQUIRE(stream_all(t, ids) == back);
        }
    }
}
