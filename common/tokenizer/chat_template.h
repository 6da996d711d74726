// tokenizer/chat_template.h — a checkpoint's chat template(s), rendered with tokenizer/jinja.h exactly as
// transformers' tokenizer.apply_chat_template(messages, tokenize=False, ...) renders them.
//
// Usage:
//   ChatTemplate ct = ChatTemplate::load(model_dir);        // chat_template.jinja, else tokenizer_config.json's
//   if (ct.empty()) ...                                      // chat_template (a string or a list of {name, template})
//   ojson msgs = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
//   std::string prompt = ct.render(msgs, {{"add_generation_prompt", true}});
//   ct.render(msgs, {{"add_generation_prompt", true}, {"tools", tools}, {"enable_thinking", false}});
//   ChatTemplate t = ChatTemplate::from_text(text, "my.jinja", {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
//
// What the template sees, as in transformers: `messages` (contents as strings or lists of parts, passed
// through untouched), `tools` (the OpenAI function schemas given, else none), `documents` (likewise),
// `add_generation_prompt` (default false), the special tokens (bos_token, eos_token, unk_token,
// pad_token, sep_token, cls_token, mask_token, additional_special_tokens: strings, also where the config
// writes them as {"content": ...} objects; null ones are left out), and every other key of kwargs
// (enable_thinking, reasoning_effort, builtin_tools, date_string, ...), which win over a special token of
// the same name. Key order is kept (ordered_json), since tojson prints keys in the order given.
// Named templates: `which` picks one by name; by default "tool_use" when tools are given and the
// checkpoint has one, else "default", as transformers' get_chat_template does.
// Errors (no template, a syntax error, raise_exception, an unknown filter) are one line through die(),
// naming the template file (and line, for template errors).
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/errors.h"
#include "host/files.h"
#include "tokenizer/jinja.h"

namespace monocu {

class ChatTemplate {
public:
    using ojson = nlohmann::ordered_json;

    // The template of a checkpoint folder: chat_template.jinja when present (transformers lets it override
    // the config's), else tokenizer_config.json's chat_template; special tokens from tokenizer_config.json,
    // overridden by special_tokens_map.json where that file exists (transformers' order). A folder with no
    // template gives an empty() ChatTemplate; a malformed config is an error.
    // template_file: a template of the user's instead of the checkpoint's (--chat-template-file), with the checkpoint's
    // special tokens.
    static ChatTemplate load(const std::string& model_dir, const std::string& template_file = "") {
        ChatTemplate ct;
        std::string config_path = model_dir + "/tokenizer_config.json", text;
        ojson config = ojson::object();
        if (read(config_path, text)) {
            config = ojson::parse(text, nullptr, false);
            if (config.is_discarded() || !config.is_object()) die("%s: not a JSON object", config_path.c_str());
        }
        ct.special_ = special_tokens_of(config, config_path);
        std::string map_path = model_dir + "/special_tokens_map.json";
        if (read(map_path, text)) {
            ojson m = ojson::parse(text, nullptr, false);
            if (m.is_discarded() || !m.is_object()) die("%s: not a JSON object", map_path.c_str());
            ojson overrides = special_tokens_of(m, map_path);
            for (auto& kv : overrides.items()) ct.special_[kv.key()] = kv.value();
        }
        if (!template_file.empty()) {
            if (!read(template_file, text)) die("--chat-template-file %s: cannot read it", template_file.c_str());
            ct.add("default", text, template_file);
            return ct;
        }
        std::string jinja_path = model_dir + "/chat_template.jinja";
        if (read(jinja_path, text)) {
            ct.add("default", text, jinja_path);
            return ct;
        }
        if (!config.contains("chat_template") || config["chat_template"].is_null()) return ct;
        const ojson& tpl = config["chat_template"];
        if (tpl.is_string()) {
            ct.add("default", tpl.get<std::string>(), config_path + " (chat_template)");
        } else if (tpl.is_array()) {
            for (auto& entry : tpl) {
                if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
                    !entry["template"].is_string())
                    die("%s: chat_template list entries must be {\"name\": string, \"template\": string}", config_path.c_str());
                std::string name = entry["name"].get<std::string>();
                ct.add(name, entry["template"].get<std::string>(), config_path + " (chat_template '" + name + "')");
            }
        } else {
            die("%s: chat_template must be a string or a list of {name, template}", config_path.c_str());
        }
        return ct;
    }

    // One template from text; `special_tokens` as tokenizer_config.json writes them (strings or
    // {"content": ...} objects), e.g. from tokenize's --special-tokens file.
    static ChatTemplate from_text(const std::string& text, const std::string& name, const ojson& special_tokens = ojson::object()) {
        ChatTemplate ct;
        ct.special_ = special_tokens_of(special_tokens, name);
        ct.add("default", text, name);
        return ct;
    }

    bool empty() const { return templates_.empty(); }

    // Whether any of the templates' source text contains `text` (tokenizer/chat_reply.h tells formats apart by it).
    bool mentions(const std::string& text) const {
        for (const std::string& src : sources_)
            if (src.find(text) != std::string::npos) return true;
        return false;
    }

    // The names of the templates, in the order the checkpoint lists them ("default" for a single one).
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (auto& t : templates_) out.push_back(t.first);
        return out;
    }

    // The special tokens the template sees, as strings.
    const ojson& special_tokens() const { return special_; }

    // The template transformers would pick: `which` if given, else "tool_use" when kwargs has tools and
    // that template exists, else "default" (or the only one).
    const jinja::Template& pick(const ojson& kwargs, const std::string& which = "") const {
        if (templates_.empty()) die("this checkpoint has no chat template (tokenizer_config.json has no chat_template, no chat_template.jinja)");
        auto find = [&](const std::string& n) -> const jinja::Template* {
            for (auto& t : templates_) if (t.first == n) return &t.second;
            return nullptr;
        };
        if (!which.empty()) {
            if (const jinja::Template* t = find(which)) return *t;
            die("chat template '%s' not found (have: %s)", which.c_str(), joined_names().c_str());
        }
        if (templates_.size() == 1) return templates_[0].second;
        bool tools = kwargs.is_object() && kwargs.contains("tools") && !kwargs["tools"].is_null();
        if (tools) if (const jinja::Template* t = find("tool_use")) return *t;
        if (const jinja::Template* t = find("default")) return *t;
        die("no default chat template among %s; name one", joined_names().c_str());
    }

    // The prompt for `messages` (a JSON list of {"role", "content", ...}); kwargs as described at the top.
    std::string render(const ojson& messages, const ojson& kwargs = ojson::object(), const std::string& which = "",
                       const jinja::Options& options = jinja::Options()) const {
        if (!messages.is_array()) die("chat: messages must be a JSON list of {\"role\": ..., \"content\": ...}");
        if (!kwargs.is_object()) die("chat: template arguments must be a JSON object");
        const jinja::Template& t = pick(kwargs, which);
        return t.render(context(messages, kwargs), options);
    }

    // The variables a render sees (exposed for tests and tools).
    ojson context(const ojson& messages, const ojson& kwargs) const {
        ojson ctx = special_;
        for (auto it = kwargs.begin(); it != kwargs.end(); ++it) ctx[it.key()] = it.value();
        ctx["messages"] = messages;
        for (const char* k : {"tools", "documents"}) if (!kwargs.contains(k)) ctx[k] = nullptr;
        if (!kwargs.contains("add_generation_prompt")) ctx["add_generation_prompt"] = false;
        return ctx;
    }

private:
    std::vector<std::pair<std::string, jinja::Template>> templates_;
    std::vector<std::string> sources_;  // their text, as read
    ojson special_ = ojson::object();

    void add(const std::string& name, const std::string& text, const std::string& label) {
        templates_.emplace_back(name, jinja::Template::parse(text, label));
        sources_.push_back(text);
    }

    std::string joined_names() const {
        std::string s;
        for (auto& t : templates_) s += (s.empty() ? "" : ", ") + t.first;
        return s;
    }

    // An optional file: false when absent; anything else there is read as a regular file of bounded size.
    static bool read(const std::string& path, std::string& out) {
        struct stat st;
        if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return false;
        out = read_file_bounded(path, kConfigMaxBytes);
        return true;
    }

    // The *_token fields (and additional_special_tokens) of a config as the strings transformers passes.
    static ojson special_tokens_of(const ojson& config, const std::string& label) {
        static const char* const KEYS[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
        auto text_of = [&](const ojson& v, const std::string& key) -> ojson {
            if (v.is_string()) return v;
            if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"];
            if (v.is_null()) return nullptr;
            die("%s: %s must be a string or {\"content\": string}", label.c_str(), key.c_str());
        };
        ojson out = ojson::object();
        if (!config.is_object()) die("%s: special tokens must be a JSON object", label.c_str());
        for (const char* k : KEYS) {
            if (!config.contains(k)) continue;
            ojson v = text_of(config[k], k);
            if (!v.is_null()) out[k] = v;
        }
        if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
            ojson list = ojson::array();
            for (auto& v : config["additional_special_tokens"]) {
                ojson t = text_of(v, "additional_special_tokens");
                if (!t.is_null()) list.push_back(t);
            }
            out["additional_special_tokens"] = list;
        }
        return out;
    }
};

}  // namespace monocu
