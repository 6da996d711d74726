// tokenizer/tokenizer_json.h — Tokenizer::load: tokenizer.json (streamed through a SAX reader: the vocab and
// merges run to hundreds of thousands of entries), tokenizer_config.json, and end-of-generation ids from
// generation_config.json / config.json. Included by tokenizer.h; see there for what is read.
#pragma once

#include "tokenizer/tokenizer.h"

namespace monocu {

// =====================================================================================================
// ---- Loading tokenizer.json ----
// =====================================================================================================

using tok_json = nlohmann::json;

// SAX reader for tokenizer.json: model.vocab and model.merges (hundreds of thousands of entries) go
// straight into flat arrays; everything else becomes a small DOM. About 3x faster than a full DOM.
struct TokenizerJsonSax : nlohmann::json_sax<tok_json> {
    const std::string& file;
    tok_json root;
    std::vector<tok_json*> stack;
    std::string key_;
    tok_json* model_obj = nullptr;
    enum Mode { DOM, VOCAB, MERGES, MERGE_PAIR } mode = DOM;
    int pending = 0;  // 1: next container is model.vocab, 2: model.merges
    std::vector<std::pair<std::string, uint64_t>> vocab;
    std::vector<std::string> merges;  // flat: a0, b0, a1, b1, ...
    std::vector<std::string> pair_;
    bool vocab_seen = false, merges_seen = false;

    // text_bytes: the file's size, which bounds how many entries it can hold (a vocab entry takes >= 8 bytes of
    // JSON, a merge >= 6): fewer regrowths for the 100k+ entries of real files, no large reservation for small ones.
    TokenizerJsonSax(const std::string& f, size_t text_bytes) : file(f) {
        vocab.reserve(std::min<size_t>(1 << 17, text_bytes / 8));
        merges.reserve(std::min<size_t>(1 << 18, text_bytes / 6));
    }

    [[noreturn]] void bad(const char* what) { die("%s: %s", file.c_str(), what); }
    tok_json* put(tok_json&& v) {
        if (stack.empty()) { root = std::move(v); return &root; }
        tok_json* top = stack.back();
        if (top->is_array()) { top->push_back(std::move(v)); return &top->back(); }
        tok_json& slot = (*top)[key_];
        slot = std::move(v);
        return &slot;
    }
    bool scalar(tok_json&& v) {
        if (mode == VOCAB) bad("model.vocab: every value must be a non-negative integer id");
        if (mode == MERGES || mode == MERGE_PAIR) bad("model.merges: entries must be \"a b\" strings or [\"a\", \"b\"] pairs");
        pending = 0;
        put(std::move(v));
        return true;
    }
    bool null() override { return scalar(nullptr); }
    bool boolean(bool b) override { return scalar(b); }
    bool number_integer(number_integer_t v) override { return scalar(v); }
    bool number_unsigned(number_unsigned_t v) override {
        if (mode == VOCAB) {
            if (v > 0x7FFFFFF0ull) bad("model.vocab: id too large");
            vocab.emplace_back(std::move(key_), v);
            return true;
        }
        return scalar(v);
    }
    bool number_float(number_float_t v, const string_t&) override { return scalar(v); }
    bool string(string_t& s) override {
        if (mode == MERGES) {
            size_t sp = s.find(' ');
            if (sp == std::string::npos)
                die("%s: model.merges[%zu] \"%s\" is not two tokens separated by a space", file.c_str(), merges.size() / 2, s.c_str());
            merges.push_back(s.substr(0, sp));
            merges.push_back(s.substr(sp + 1));
            return true;
        }
        if (mode == MERGE_PAIR) { pair_.push_back(std::move(s)); return true; }
        return scalar(std::move(s));
    }
    bool binary(binary_t&) override { bad("binary values are not JSON"); }
    bool start_object(std::size_t) override {
        if (mode != DOM) bad(mode == VOCAB ? "model.vocab: every value must be a non-negative integer id"
                                           : "model.merges: entries must be \"a b\" strings or [\"a\", \"b\"] pairs");
        if (pending == 1) { mode = VOCAB; vocab_seen = true; pending = 0; return true; }
        if (pending == 2) bad("model.merges must be an array");
        tok_json* v = put(tok_json::object());
        if (stack.size() == 1 && key_ == "model") model_obj = v;
        stack.push_back(v);
        return true;
    }
    bool key(string_t& k) override {
        if (mode == VOCAB) { key_ = std::move(k); return true; }
        key_ = std::move(k);
        pending = 0;
        if (stack.size() == 2 && stack[1] == model_obj && model_obj) {
            if (key_ == "vocab") pending = 1;
            else if (key_ == "merges") pending = 2;
        }
        return true;
    }
    bool end_object() override {
        if (mode == VOCAB) { mode = DOM; return true; }
        stack.pop_back();
        return true;
    }
    bool start_array(std::size_t) override {
        if (mode == VOCAB) bad("model.vocab: every value must be a non-negative integer id");
        if (mode == MERGE_PAIR) bad("model.merges: a pair must hold two strings");
        if (mode == MERGES) { mode = MERGE_PAIR; pair_.clear(); return true; }
        if (pending == 2) { mode = MERGES; merges_seen = true; pending = 0; return true; }
        pending = 0;  // a list as model.vocab (Unigram's form) goes to the DOM; read_model rejects it by type
        stack.push_back(put(tok_json::array()));
        return true;
    }
    bool end_array() override {
        if (mode == MERGE_PAIR) {
            if (pair_.size() != 2)
                die("%s: model.merges[%zu] has %zu strings, expected a pair", file.c_str(), merges.size() / 2, pair_.size());
            merges.push_back(std::move(pair_[0]));
            merges.push_back(std::move(pair_[1]));
            mode = MERGES;
            return true;
        }
        if (mode == MERGES) { mode = DOM; return true; }
        stack.pop_back();
        return true;
    }
    bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
        die("%s: not valid JSON (byte %zu): %s", file.c_str(), pos, e.what());
    }
};

struct TokenizerLoader {
    Tokenizer& t;
    const std::string& file;     // tokenizer.json, for messages
    const std::string& cfg_file;  // tokenizer_config.json, for messages

    [[noreturn]] void unsupported(const char* where, const std::string& what) {
        die("%s: %s '%s' is not supported", file.c_str(), where, what.c_str());
    }
    static std::string type_of(const tok_json& j) {
        if (!j.is_object()) return "";
        auto it = j.find("type");
        return it != j.end() && it->is_string() ? it->get<std::string>() : "";
    }
    std::string get_string(const tok_json& j, const char* key, const char* where, const char* dflt = nullptr) {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) {
            if (dflt) return dflt;
            die("%s: %s: missing \"%s\"", file.c_str(), where, key);
        }
        if (!it->is_string()) die("%s: %s: \"%s\" must be a string", file.c_str(), where, key);
        return it->get<std::string>();
    }
    bool get_bool(const tok_json& j, const char* key, const char* where, bool dflt) {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) return dflt;
        if (!it->is_boolean()) die("%s: %s: \"%s\" must be true or false", file.c_str(), where, key);
        return it->get<bool>();
    }
    // {"String": "x"} or {"Regex": "..."}
    void read_pattern(const tok_json& j, TokStep& s, const char* where) {
        auto it = j.find("pattern");
        if (it == j.end() || !it->is_object()) die("%s: %s: missing \"pattern\" object", file.c_str(), where);
        if (it->contains("String") && (*it)["String"].is_string()) s.str_pattern = (*it)["String"].get<std::string>();
        else if (it->contains("Regex") && (*it)["Regex"].is_string())
            s.regex = std::make_shared<Regex>(Regex::compile((*it)["Regex"].get<std::string>(), file + ": " + where));
        else die("%s: %s: pattern must be {\"String\": ...} or {\"Regex\": ...}", file.c_str(), where);
    }

    // A "Sequence" step: each member read by `read`. False for any other type.
    template <class F>
    bool read_sequence(const tok_json& j, const char* list, const char* what, F read) {
        if (type_of(j) != "Sequence") return false;
        auto it = j.find(list);
        if (it == j.end() || !it->is_array()) die("%s: %s Sequence: missing \"%s\" array", file.c_str(), what, list);
        for (auto& x : *it) read(x);
        return true;
    }

    void read_normalizer(const tok_json& j) {
        if (j.is_null() || read_sequence(j, "normalizers", "normalizer", [&](const tok_json& x) { read_normalizer(x); })) return;
        std::string type = type_of(j);
        TokStep s;
        s.type = type;
        if (type == "NFC" || type == "NFD") {
        } else if (type == "Replace") {
            read_pattern(j, s, "normalizer Replace");
            s.content = get_string(j, "content", "normalizer Replace");
        } else if (type == "Prepend") {
            s.content = get_string(j, "prepend", "normalizer Prepend");
        } else {
            unsupported("normalizer", type.empty() ? j.dump().substr(0, 60) : type);
        }
        t.normalizers_.push_back(std::move(s));
    }

    void read_pre_tokenizer(const tok_json& j) {
        if (j.is_null() || read_sequence(j, "pretokenizers", "pre_tokenizer", [&](const tok_json& x) { read_pre_tokenizer(x); })) return;
        std::string type = type_of(j);
        TokStep s;
        s.type = type;
        if (type == "Split") {
            read_pattern(j, s, "pre_tokenizer Split");
            s.behavior = get_string(j, "behavior", "pre_tokenizer Split");
            static const char* behaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
            if (std::find_if(std::begin(behaviors), std::end(behaviors), [&](const char* b) { return s.behavior == b; }) == std::end(behaviors))
                die("%s: pre_tokenizer Split: behavior '%s' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                    file.c_str(), s.behavior.c_str());
            s.invert = get_bool(j, "invert", "pre_tokenizer Split", false);
        } else if (type == "ByteLevel") {
            s.add_prefix_space = get_bool(j, "add_prefix_space", "pre_tokenizer ByteLevel", true);
            if (get_bool(j, "use_regex", "pre_tokenizer ByteLevel", true)) s.regex = std::make_shared<Regex>(Regex::compile(GPT2_SPLIT_PATTERN, "ByteLevel"));
        } else if (type == "Metaspace") {
            read_metaspace(j, s, "pre_tokenizer Metaspace");
        } else if (type == "Digits") {
            if (!j.contains("individual_digits")) die("%s: pre_tokenizer Digits: missing \"individual_digits\"", file.c_str());
            s.individual_digits = get_bool(j, "individual_digits", "pre_tokenizer Digits", false);
        } else {
            unsupported("pre_tokenizer", type.empty() ? j.dump().substr(0, 60) : type);
        }
        t.pre_tokenizers_.push_back(std::move(s));
    }

    // Metaspace (pre-tokenizer or decoder): replacement, prepend_scheme (default "always"), split
    // (default true). The older form's add_prefix_space: true changes nothing, false means "never" and,
    // as in HF, contradicts any other prepend_scheme, the default included.
    void read_metaspace(const tok_json& j, TokStep& s, const char* where) {
        s.content = get_string(j, "replacement", where);
        size_t end = 0;
        if (s.content.empty() || !utf8_is_valid(s.content) || (utf8_next(s.content.data(), s.content.size(), end), end != s.content.size()))
            die("%s: %s: replacement must be one character", file.c_str(), where);
        std::string scheme = get_string(j, "prepend_scheme", where, "always");
        if (scheme == "always") s.prepend = TokStep::ALWAYS;
        else if (scheme == "first") s.prepend = TokStep::FIRST;
        else if (scheme == "never") s.prepend = TokStep::NEVER;
        else die("%s: %s: prepend_scheme '%s' is not one of always, first, never", file.c_str(), where, scheme.c_str());
        if (!get_bool(j, "add_prefix_space", where, true)) {
            if (s.prepend != TokStep::NEVER)
                die("%s: %s: add_prefix_space false contradicts prepend_scheme '%s'", file.c_str(), where, scheme.c_str());
        }
        s.split = get_bool(j, "split", where, true);
    }

    void read_decoder(const tok_json& j) {
        if (j.is_null()) return;
        t.has_decoder_ = true;
        if (read_sequence(j, "decoders", "decoder", [&](const tok_json& x) { read_decoder(x); })) return;
        std::string type = type_of(j);
        TokStep s;
        s.type = type;
        if (type == "ByteLevel" || type == "ByteFallback" || type == "Fuse") {
        } else if (type == "Metaspace") {
            read_metaspace(j, s, "decoder Metaspace");
        } else if (type == "Replace") {
            read_pattern(j, s, "decoder Replace");
            if (s.regex) unsupported("decoder Replace with a", "Regex pattern");
            s.content = get_string(j, "content", "decoder Replace");
        } else if (type == "Strip") {
            s.content = get_string(j, "content", "decoder Strip");
            if (utf8_repair(s.content) != s.content || s.content.empty()) die("%s: decoder Strip: content must be one character", file.c_str());
            auto num = [&](const char* k) {
                auto it = j.find(k);
                if (it == j.end() || !it->is_number_unsigned()) die("%s: decoder Strip: \"%s\" must be a non-negative integer", file.c_str(), k);
                return int(std::min<uint64_t>(it->get<uint64_t>(), 1u << 20));
            };
            s.start = num("start");
            s.stop = num("stop");
        } else {
            unsupported("decoder", type.empty() ? j.dump().substr(0, 60) : type);
        }
        t.decoders_.push_back(std::move(s));
    }

    void read_model(const tok_json& model, TokenizerJsonSax& sax) {
        if (!model.is_object()) die("%s: missing \"model\" object", file.c_str());
        std::string type = type_of(model);
        if (type.empty() && model.contains("type")) die("%s: model.type must be a string", file.c_str());
        if (!type.empty() && type != "BPE") die("%s: model type '%s' is not supported (only BPE)", file.c_str(), type.c_str());
        if (!sax.vocab_seen) die("%s: model.vocab is missing or not an object of token -> id", file.c_str());
        if (!sax.merges_seen) die("%s: model.merges is missing (BPE needs its merges)", file.c_str());
        auto dropout = model.find("dropout");
        if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
            die("%s: model.dropout %s is not supported (BPE dropout makes encoding random)", file.c_str(), dropout->dump().c_str());
        t.ignore_merges_ = get_bool(model, "ignore_merges", "model", false);
        t.byte_fallback_ = get_bool(model, "byte_fallback", "model", false);
        t.fuse_unk_ = get_bool(model, "fuse_unk", "model", false);
        t.subword_prefix_ = get_string(model, "continuing_subword_prefix", "model", "");
        t.word_suffix_ = get_string(model, "end_of_word_suffix", "model", "");

        uint64_t max_id = 0;
        for (auto& v : sax.vocab) max_id = std::max(max_id, v.second);
        size_t n = sax.vocab.empty() ? 0 : size_t(max_id) + 1;
        if (n > sax.vocab.size() * 4 + 1024) die("%s: model.vocab ids run to %llu for only %zu tokens", file.c_str(), (unsigned long long)max_id, sax.vocab.size());
        t.id_to_text_.assign(n, std::string());
        t.in_model_.assign(n, 0);
        t.model_index_.reserve(sax.vocab.size());
        t.bmp_cp_id_.clear();  // grown to the largest one-code-point entry below U+10000 (small vocabularies stay small)
        for (auto& v : sax.vocab) {
            size_t id = size_t(v.second);
            if (t.in_model_[id])
                die("%s: model.vocab gives id %zu to both '%s' and '%s'", file.c_str(), id, t.id_to_text_[id].c_str(), v.first.c_str());
            t.id_to_text_[id] = std::move(v.first);
            t.in_model_[id] = 1;
            int prev = t.model_index_.insert(t.id_to_text_, int(id));
            if (prev != int(id)) die("%s: model.vocab lists '%s' twice", file.c_str(), t.id_to_text_[id].c_str());
            uint32_t cp = 0;
            const std::string& s = t.id_to_text_[id];
            size_t pos = 0;
            if (!s.empty() && (cp = utf8_next(s.data(), s.size(), pos), pos == s.size())) {
                if (cp < 0x10000) {
                    if (cp >= t.bmp_cp_id_.size()) t.bmp_cp_id_.resize(std::max<size_t>(cp + 1, std::min<size_t>(2 * t.bmp_cp_id_.size(), 0x10000)), -1);
                    t.bmp_cp_id_[cp] = int(id);
                } else {
                    t.astral_cp_id_[cp] = int(id);
                }
            }
        }
        for (int b = 0; b < 256; b++) {
            static const char kHex[] = "0123456789ABCDEF";
            const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
            t.byte_fallback_ids_[b] = t.model_index_.find(t.id_to_text_, name, 6);
        }
        std::string unk = get_string(model, "unk_token", "model", "");
        if (!unk.empty()) {
            t.unk_id_ = t.model_index_.find(t.id_to_text_, unk.data(), unk.size());
            if (t.unk_id_ < 0) die("%s: model.unk_token '%s' is not in model.vocab", file.c_str(), unk.c_str());
        }
        read_merges(sax.merges);
    }

    void read_merges(const std::vector<std::string>& m) {
        size_t count = m.size() / 2;
        t.merges_.reserve(count);
        std::string joined;
        for (size_t r = 0; r < count; r++) {
            const std::string& a = m[2 * r];
            const std::string& b = m[2 * r + 1];
            int ia = t.model_index_.find(t.id_to_text_, a.data(), a.size());
            int ib = t.model_index_.find(t.id_to_text_, b.data(), b.size());
            joined.assign(a);
            size_t skip = (!t.subword_prefix_.empty() && b.compare(0, t.subword_prefix_.size(), t.subword_prefix_) == 0) ? t.subword_prefix_.size() : 0;
            joined.append(b, skip, std::string::npos);
            int in = t.model_index_.find(t.id_to_text_, joined.data(), joined.size());
            if (ia < 0 || ib < 0 || in < 0)
                die("%s: model.merges[%zu] ('%s' '%s'): '%s' is not in model.vocab", file.c_str(), r, a.c_str(), b.c_str(),
                    (ia < 0 ? a : ib < 0 ? b : joined).c_str());
            t.merges_.put(ia, ib, int(r), in);
        }
    }

    void read_added_tokens(const tok_json& root) {
        auto it = root.find("added_tokens");
        if (it == root.end() || it->is_null()) return;
        if (!it->is_array()) die("%s: \"added_tokens\" must be an array", file.c_str());
        for (auto& a : *it) {
            if (!a.is_object()) die("%s: added_tokens: every entry must be an object", file.c_str());
            AddedToken tok;
            tok.content = get_string(a, "content", "added_tokens entry");
            if (tok.content.empty()) die("%s: added_tokens: empty \"content\"", file.c_str());
            if (!utf8_is_valid(tok.content)) die("%s: added_tokens: content is not valid UTF-8", file.c_str());
            auto id = a.find("id");
            if (id == a.end() || !id->is_number_unsigned() || id->get<uint64_t>() > 0x7FFFFFF0ull)
                die("%s: added token '%s': \"id\" must be a non-negative integer", file.c_str(), tok.content.c_str());
            tok.id = int(id->get<uint64_t>());
            tok.special = get_bool(a, "special", "added_tokens entry", false);
            tok.lstrip = get_bool(a, "lstrip", "added_tokens entry", false);
            tok.rstrip = get_bool(a, "rstrip", "added_tokens entry", false);
            tok.single_word = get_bool(a, "single_word", "added_tokens entry", false);
            tok.normalized = get_bool(a, "normalized", "added_tokens entry", !tok.special);
            tok.layout = true;
            for (size_t i = 0; i < tok.content.size();) {
                uint32_t cp = utf8_next(tok.content.data(), tok.content.size(), i);
                tok.layout = tok.layout && (unicode_is_white_space(cp) || cp == 0x2581);
            }
            int in_vocab = t.model_index_.find(t.id_to_text_, tok.content.data(), tok.content.size());
            if (in_vocab >= 0 && in_vocab != tok.id)
                die("%s: added token '%s' has id %d but model.vocab gives it id %d", file.c_str(), tok.content.c_str(), tok.id, in_vocab);
            if (size_t(tok.id) >= t.id_to_text_.size()) {
                if (size_t(tok.id) > t.id_to_text_.size() + 1000000) die("%s: added token '%s': id %d is far past the vocab", file.c_str(), tok.content.c_str(), tok.id);
                t.id_to_text_.resize(size_t(tok.id) + 1);
                t.in_model_.resize(size_t(tok.id) + 1, 0);
            }
            if (t.in_model_[size_t(tok.id)] && t.id_to_text_[size_t(tok.id)] != tok.content)
                die("%s: added token '%s' has id %d, which model.vocab gives to '%s'", file.c_str(), tok.content.c_str(), tok.id,
                    t.id_to_text_[size_t(tok.id)].c_str());
            if (t.added_by_id_.count(tok.id)) die("%s: added_tokens: id %d appears twice", file.c_str(), tok.id);
            t.id_to_text_[size_t(tok.id)] = tok.content;
            t.added_by_id_[tok.id] = int(t.added_.size());
            t.added_.push_back(tok);
        }
        t.special_.assign(t.id_to_text_.size(), 0);
        for (size_t k = 0; k < t.added_.size(); k++) {
            AddedToken& a = t.added_[k];
            if (a.special) t.special_[size_t(a.id)] = 1;
            a.decode_text = a.normalized ? t.normalize(a.content) : a.content;
            if (a.normalized) t.normalized_trie_.add(a.decode_text, int(k));
            else t.raw_trie_.add(a.content, int(k));
        }
    }

    // bos/eos from tokenizer_config.json ("x" or {"content": "x"}), plus generation config eos ids.
    int config_token(const tok_json& cfg, const char* key) {
        auto it = cfg.find(key);
        if (it == cfg.end() || it->is_null()) return -1;
        std::string text;
        if (it->is_string()) text = it->get<std::string>();
        else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) text = (*it)["content"].get<std::string>();
        else die("%s: \"%s\" must be a string or {\"content\": ...}", cfg_file.c_str(), key);
        int id = t.token_id(text);
        if (id < 0) die("%s: %s '%s' is not a token of %s", cfg_file.c_str(), key, text.c_str(), file.c_str());
        return id;
    }

    void read_config(const tok_json& cfg, const tok_json& root) {
        t.bos_id_ = cfg.is_object() ? config_token(cfg, "bos_token") : -1;
        int eos = cfg.is_object() ? config_token(cfg, "eos_token") : -1;
        if (eos >= 0) t.eos_ids_.push_back(eos);
        // The token HF's post-processor puts first (encode with add_special_tokens): the BOS when the config
        // names none. add_bos: the config's add_bos_token if stated (LlamaTokenizerFast rebuilds its
        // template from it), else whether the post-processor prepends.
        int pp_first = post_processor_first(root.contains("post_processor") ? root["post_processor"] : tok_json());
        if (t.bos_id_ < 0) t.bos_id_ = pp_first;
        auto ab = cfg.is_object() ? cfg.find("add_bos_token") : cfg.end();
        if (cfg.is_object() && ab != cfg.end() && ab->is_boolean()) t.add_bos_ = ab->get<bool>() && t.bos_id_ >= 0;
        else t.add_bos_ = pp_first >= 0 && t.bos_id_ >= 0;
        if (cfg.is_object()) {
            auto ct = cfg.find("chat_template");
            if (ct != cfg.end() && ct->is_string()) t.chat_template_ = ct->get<std::string>();
            else if (ct != cfg.end() && ct->is_array())
                for (auto& e : *ct)
                    if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
                        t.chat_template_ = e["template"].get<std::string>();
        }
        // The turn-end tokens of the chat formats this repo knows: generation stops on any of them.
        static const char* turn_ends[] = {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>",
                                          "<end_of_turn>", "<eos>", "<|return|>", "<|call|>",
                                          "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "</s>"};
        for (const char* te : turn_ends) {
            int id = t.token_id(te);
            if (id >= 0 && t.is_special(id)) add_eos(id);
        }
    }

    void add_eos(int id) {
        if (id >= 0 && std::find(t.eos_ids_.begin(), t.eos_ids_.end(), id) == t.eos_ids_.end()) t.eos_ids_.push_back(id);
    }

    // The id of the special token a TemplateProcessing (alone or in a Sequence) puts before the text
    // ("single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": ...}]), or -1. The id comes from the
    // template's special_tokens map, else from the vocabulary.
    int post_processor_first(const tok_json& pp) {
        std::string type = type_of(pp);
        if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
            for (auto& p : pp["processors"]) if (int id = post_processor_first(p); id >= 0) return id;
            return -1;
        }
        if (type != "TemplateProcessing" || !pp.contains("single") || !pp["single"].is_array() || pp["single"].empty()) return -1;
        const tok_json& first = pp["single"][0];
        if (!first.is_object() || !first.contains("SpecialToken") || !first["SpecialToken"].is_object()) return -1;
        const tok_json& name = first["SpecialToken"].value("id", tok_json());
        if (!name.is_string()) return -1;
        const tok_json& map = pp.value("special_tokens", tok_json());
        auto entry = map.is_object() ? map.find(name.get<std::string>()) : map.end();
        if (entry != map.end() && entry->is_object()) {
            const tok_json& ids = entry->value("ids", tok_json());
            if (ids.is_array() && !ids.empty() && ids[0].is_number_unsigned() && ids[0].get<uint64_t>() < uint64_t(t.vocab_size()))
                return int(ids[0].get<uint64_t>());
        }
        return t.token_id(name.get<std::string>());
    }
};

inline int Tokenizer::token_id(const std::string& text) const {
    for (auto& a : added_) if (a.content == text) return a.id;
    return model_index_.find(id_to_text_, text.data(), text.size());
}

inline Tokenizer Tokenizer::from_json_text(const std::string& json_text, const std::string& config_text, const std::string& name) {
    auto t0 = std::chrono::steady_clock::now();
    Tokenizer t;
    std::string cfg_name = name + " (tokenizer_config.json)";
    size_t slash = name.rfind('/');
    if (slash != std::string::npos) cfg_name = name.substr(0, slash + 1) + "tokenizer_config.json";
    TokenizerJsonSax sax(name, json_text.size());
    tok_json::sax_parse(json_text, &sax);
    if (!sax.root.is_object()) die("%s: the top level must be a JSON object", name.c_str());
    TokenizerLoader L{t, name, cfg_name};
    const tok_json& root = sax.root;
    L.read_model(root.contains("model") ? root["model"] : tok_json(), sax);
    L.read_normalizer(root.contains("normalizer") ? root["normalizer"] : tok_json());
    L.read_pre_tokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : tok_json());
    L.read_decoder(root.contains("decoder") ? root["decoder"] : tok_json());
    L.read_added_tokens(root);
    if (t.special_.size() != t.id_to_text_.size()) t.special_.resize(t.id_to_text_.size(), 0);
    tok_json cfg;
    if (!config_text.empty()) {
        cfg = tok_json::parse(config_text, nullptr, false);
        if (cfg.is_discarded() || !cfg.is_object()) die("%s: not a valid JSON object", cfg_name.c_str());
    }
    L.read_config(cfg, root);
    t.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return t;
}

// false when the file does not exist; otherwise it must be a regular file of bounded size (host/files.h: a folder,
// FIFO or device is one error, never a hang or an allocation failure).
inline bool tok_read_file(const std::string& path, std::string& out) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return false;
    out = read_file_bounded(path, kTokenizerMaxBytes);
    return true;
}

// eos_token_id from generation_config.json / config.json: an int or a list of ints.
inline void tok_add_generation_eos(Tokenizer& t, std::vector<int>& eos, const std::string& path) {
    std::string text;
    if (!tok_read_file(path, text)) return;
    tok_json j = tok_json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) die("%s: not a valid JSON object", path.c_str());
    auto it = j.find("eos_token_id");
    if (it == j.end() || it->is_null()) return;
    std::vector<tok_json> items = it->is_array() ? it->get<std::vector<tok_json>>() : std::vector<tok_json>{*it};
    for (auto& v : items) {
        if (!v.is_number_unsigned() || v.get<uint64_t>() >= uint64_t(t.vocab_size()))
            die("%s: eos_token_id %s is not a token id of this tokenizer", path.c_str(), v.dump().c_str());
        int id = int(v.get<uint64_t>());
        if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
    }
}

inline Tokenizer Tokenizer::load(const std::string& model_dir) {
    auto t0 = std::chrono::steady_clock::now();
    std::string dir = model_dir.empty() || model_dir.back() == '/' ? model_dir : model_dir + "/";
    std::string json_path = dir + "tokenizer.json", cfg_path = dir + "tokenizer_config.json";
    std::string json_text, cfg_text;
    if (!tok_read_file(json_path, json_text)) die("%s: cannot read (missing?)", json_path.c_str());
    tok_read_file(cfg_path, cfg_text);  // optional
    Tokenizer t = from_json_text(json_text, cfg_text, json_path);
    // Newer checkpoints keep the template in its own file, which transformers then prefers.
    std::string tpl;
    if (tok_read_file(dir + "chat_template.jinja", tpl)) t.chat_template_ = tpl;
    tok_add_generation_eos(t, t.eos_ids_, dir + "generation_config.json");
    tok_add_generation_eos(t, t.eos_ids_, dir + "config.json");
    t.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return t;
}

}  // namespace monocu
