// tokenizer/jinja.h — a Jinja interpreter that renders Hugging Face chat templates byte for byte as
// transformers' apply_chat_template does (Python jinja2 in transformers' sandboxed environment).
//
// Usage:
//   jinja::Template t = jinja::Template::parse(text, "qwen3.jinja");   // syntax errors: die() naming file:line
//   nlohmann::ordered_json ctx = {{"messages", msgs}, {"add_generation_prompt", true}, {"bos_token", "<s>"}};
//   std::string out = t.render(ctx);                                    // template errors: die() naming file:line
//   jinja::Options o; o.max_steps = 200000; t.render(ctx, o);           // tighter limits (the fuzzer's)
//
// The reference is jinja2 3.1 as transformers configures it (chat_template_utils.py): an immutable
// sandbox, trim_blocks and lstrip_blocks on, loop controls ({% break %}, {% continue %}), a
// {% generation %} tag that renders its body, globals raise_exception and strftime_now, and tojson =
// json.dumps(ensure_ascii=False): non-ASCII kept, key order kept (hence ordered_json everywhere).
// tests/test_jinja.cpp checks it byte for byte against jinja2 on 35 real templates and ~160 snippets.
// Values follow Python: str() of a list is its repr (['a', 1.0, None]), floats print as repr does
// (1e-05, 1.0), `in`, `==`, `+`, `//`, `%`, slicing and truthiness are Python's, strings are indexed by
// code point. Undefined is jinja2's default Undefined: it prints as "", iterates as empty, is falsy, and
// attribute access, arithmetic or calling on it fails. Mutating methods (list.append, dict.update, ...)
// fail as the immutable sandbox makes them fail. A |safe or |escape string is a Markup, and `+`, `%`,
// join and format escape the plain strings combined with it (real templates trip over this). Scoping
// is jinja2's: a {% set %} inside a loop body or macro stays there; a name the top level sets before
// reading it starts undefined there even if the caller passed it (RootNames). strftime_now reads the
// time from the environment variable CHAT_TEMPLATE_NOW (ISO 8601, e.g. 2026-01-15T09:30:00) when set,
// else the local clock.
//
// Supported: {{ }}, {% if/elif/else %}, {% for %} (tuple targets, `if` filter, else, loop.index/index0/
// revindex/revindex0/first/last/length/previtem/nextitem/cycle/changed/depth), {% set %} (names,
// namespace attributes, tuples, block set with filters), {% macro %} with defaults, varargs, kwargs
// and caller, {% call %}, {% filter %}, {% with %}, {% raw %}, {% break %}, {% continue %},
// {% generation %}, comments, whitespace control ({%- -%} {%+ +%}), the filters and tests in
// FILTER_NAMES / TEST_NAMES below, the str/dict/list methods in call_method(), str.format with format
// specs and printf-style `%`. Knowingly left out: template inheritance and inclusion (extends, block,
// include, import: transformers renders from_string, so they cannot load anything either), recursive for
// loops, autoescape, and the filters no chat template uses (groupby, slice, random, pprint, urlize,
// urlencode, wordwrap, xmlattr, striptags, filesizeformat): a template naming one does not parse.
// Case mapping (lower, upper, title) covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other
// scripts pass through unchanged. Integers are 64-bit (Python's are unbounded): overflow is an error,
// never a wrong number.
//
// Hostile templates: every error is one line "name:line: message" through die(). Parsing nests at most
// PARSE_DEPTH_MAX levels; rendering is bounded by Options (evaluation steps, nesting depth, macro call
// depth, output and string size), so a template cannot hang, recurse without end or allocate without
// bound (tests/fuzz/jinja.cpp, `make fuzz-jinja`).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/errors.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace monocu {
namespace jinja {

using ojson = nlohmann::ordered_json;

// Limits on one render. The defaults are far above what any real chat template needs (a typical one
// takes a few thousand steps) and low enough that a hostile template stops within about a second.
struct Options {
    uint64_t max_steps = 10000000;       // expression evaluations, loop iterations, elements built
    int max_depth = 400;                 // nested evaluation (expressions within statements within calls)
    int max_call_depth = 100;            // nested macro calls (jinja2 hits Python's recursion limit too)
    size_t max_output = 16u << 20;       // bytes of rendered text, and of any one string or JSON text
    size_t max_list = 1u << 20;          // elements of any one list built by the template
};

// How deep the parser lets expressions and blocks nest (jinja2, a recursive-descent parser in Python,
// fails with RecursionError a little deeper than this; real templates nest fewer than 20 levels).
static const int PARSE_DEPTH_MAX = 150;

// How deep lists and dicts may nest inside each other. Printing, comparing and freeing a value recurse
// through it, so a template that nests a list in itself in a loop must stop long before the stack does
// (JSON input and tojson have the same bound).
static const int VALUE_DEPTH_MAX = 200;

// Thrown where a value would nest deeper than VALUE_DEPTH_MAX; Template::render turns it into die().
struct DeepValue {};

// =====================================================================================================
// ---- values ----
// =====================================================================================================

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable, Loop };

// What kind of Python sequence a List value stands for: it changes printing, len() and indexing.
enum class Seq : uint8_t { List, Tuple, Generator, DictKeys, DictValues, DictItems, Range };

struct Object;
struct Value {
    Kind kind = Kind::Undefined;
    bool unsafe = false;             // Undefined from a blocked attribute (list.append): calling it is a SecurityError
    bool markup = false;             // String: a markupsafe.Markup (from |safe or |escape): `+`, `%`, join and
                                     // format escape the plain strings combined with it, as in jinja2
    union { bool b; int64_t i; double f; };
    std::string s;                   // String: the text (UTF-8); Undefined: what was undefined, for errors
    std::shared_ptr<Object> obj;     // List, Dict, Namespace, Callable, Loop

    Value() : i(0) {}
    static Value undefined(std::string hint = "") { Value v; v.s = std::move(hint); return v; }
    static Value none() { Value v; v.kind = Kind::None; return v; }
    static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
    static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
    static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
    static Value string(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }

    bool is_undefined() const { return kind == Kind::Undefined; }
    bool is_none() const { return kind == Kind::None; }
    bool is_string() const { return kind == Kind::String; }
    bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }  // Python: bool is an int
    bool is_number() const { return is_int() || kind == Kind::Float; }
    int64_t as_int() const { return kind == Kind::Bool ? int64_t(b) : i; }
    double as_double() const { return kind == Kind::Float ? f : double(as_int()); }
};

struct Object {
    virtual ~Object() = default;
};

// Freeing without recursion. A template can chain objects 100000 deep (a namespace holding the previous
// one, built in a loop); freeing the head would run 100000 nested destructors and overflow the stack. So
// each destructor hands the objects it holds the last reference to over to a queue, and the outermost
// destructor frees the queue one object at a time.
struct Reaper {
    std::vector<std::shared_ptr<void>> pending;
    bool draining = false;
};
inline Reaper& reaper() {
    static thread_local Reaper r;
    return r;
}
template <class X>
inline void reap(std::shared_ptr<X>& p) {
    if (p && p.use_count() == 1) reaper().pending.push_back(std::move(p));
    else p.reset();
}
inline void reap(Value& v);
inline void drain() {
    Reaper& r = reaper();
    if (r.draining) return;
    r.draining = true;
    while (!r.pending.empty()) {
        std::shared_ptr<void> last = std::move(r.pending.back());
        r.pending.pop_back();
        last.reset();  // may queue more
    }
    r.draining = false;
}

struct ListObj : Object {
    std::vector<Value> items;
    int depth = 1;  // containers nested in it, itself included (VALUE_DEPTH_MAX)
    Seq seq = Seq::List;
    int64_t range_start = 0, range_stop = 0, range_step = 1;  // Seq::Range, for its repr
    ~ListObj() override {
        for (auto& x : items) reap(x);
        drain();
    }
};

// A Python dict: insertion order kept; keys compared with Python's == (1, 1.0 and True are one key).
// String keys (nearly all of them) are found through a hash index once the dict has a few entries.
struct DictObj : Object {
    std::vector<std::pair<Value, Value>> items;
    int depth = 1;  // as ListObj's; a namespace counts as depth 1 in its container (it is mutable)
    std::unordered_map<std::string, size_t> index;  // string key -> position, when items.size() > 8
    const Value* find(const Value& key) const;
    void set(const Value& key, Value v);
    DictObj() = default;
    DictObj(const DictObj&) = default;
    ~DictObj() override {
        for (auto& kv : items) { reap(kv.first); reap(kv.second); }
        drain();
    }
};

struct Stmt;
struct Scope;
enum class Builtin : uint8_t { Range, Namespace, Dict, RaiseException, StrftimeNow, Method, Macro, LoopCycle, LoopChanged };

// Something callable: a global function, a bound str/list/dict method, a macro (or a call block's
// caller), or loop.cycle / loop.changed.
struct CallableObj : Object {
    Builtin what;
    std::string name;                  // method or macro name
    Value self;                        // Method: the object the method is bound to
    const Stmt* macro = nullptr;       // Macro: its definition
    std::shared_ptr<Scope> closure;    // Macro: the scope it was defined in (names resolve there)
    std::shared_ptr<Object> loop;      // LoopCycle / LoopChanged: the loop
    ~CallableObj() override {
        reap(self);
        reap(closure);
        reap(loop);
        drain();
    }
};

// The `loop` variable of one for loop; attributes are computed from the position.
struct LoopObj : Object {
    std::shared_ptr<ListObj> items;
    size_t index0 = 0;
    bool has_changed_value = false;
    Value changed_value;
    ~LoopObj() override {
        reap(items);
        reap(changed_value);
        drain();
    }
};

inline void reap(Value& v) { reap(v.obj); }

inline int depth_of(const Value& v);

inline Value make_list(std::vector<Value> items, Seq seq = Seq::List) {
    auto l = std::make_shared<ListObj>();
    for (auto& x : items) l->depth = std::max(l->depth, 1 + depth_of(x));
    if (l->depth > VALUE_DEPTH_MAX) throw DeepValue{};
    l->items = std::move(items);
    l->seq = seq;
    Value v;
    v.kind = Kind::List;
    v.obj = std::move(l);
    return v;
}

inline Value make_dict(std::shared_ptr<DictObj> d, Kind kind = Kind::Dict) {
    for (auto& kv : d->items) d->depth = std::max({d->depth, 1 + depth_of(kv.first), 1 + depth_of(kv.second)});
    if (d->depth > VALUE_DEPTH_MAX) throw DeepValue{};
    Value v;
    v.kind = kind;
    v.obj = std::move(d);
    return v;
}

inline ListObj& list_of(const Value& v) { return static_cast<ListObj&>(*v.obj); }
inline DictObj& dict_of(const Value& v) { return static_cast<DictObj&>(*v.obj); }
inline CallableObj& callable_of(const Value& v) { return static_cast<CallableObj&>(*v.obj); }
inline LoopObj& loop_of(const Value& v) { return static_cast<LoopObj&>(*v.obj); }

inline int depth_of(const Value& v) {
    if (v.kind == Kind::List) return list_of(v).depth;
    if (v.kind == Kind::Dict) return dict_of(v).depth;
    return v.kind == Kind::Namespace ? 1 : 0;
}

// Python's type(x).__name__, for error messages.
inline const char* type_name(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::List:
            switch (list_of(v).seq) {
                case Seq::List: return "list";
                case Seq::Tuple: return "tuple";
                case Seq::Generator: return "generator";
                case Seq::DictKeys: return "dict_keys";
                case Seq::DictValues: return "dict_values";
                case Seq::DictItems: return "dict_items";
                case Seq::Range: return "range";
            }
            return "list";
        case Kind::Dict: return "dict";
        case Kind::Namespace: return "Namespace";
        case Kind::Callable: return callable_of(v).what == Builtin::Macro ? "Macro" : "builtin_function_or_method";
        case Kind::Loop: return "LoopContext";
    }
    return "object";
}

// ---- Python equality, truthiness, ordering ----

inline bool py_equal(const Value& a, const Value& b);

// Whether Python could hash it (a dict key, a set member): no lists, dicts or namespaces, also inside tuples.
inline bool py_hashable(const Value& v) {
    if (v.kind == Kind::Dict || v.kind == Kind::Namespace) return false;
    if (v.kind != Kind::List || list_of(v).seq == Seq::Range || list_of(v).seq == Seq::Generator) return true;
    if (list_of(v).seq != Seq::Tuple) return false;
    for (auto& x : list_of(v).items) if (!py_hashable(x)) return false;
    return true;
}

inline bool py_truthy(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: case Kind::None: return false;
        case Kind::Bool: return v.b;
        case Kind::Int: return v.i != 0;
        case Kind::Float: return v.f != 0.0;
        case Kind::String: return !v.s.empty();
        case Kind::List: return list_of(v).seq == Seq::Generator || !list_of(v).items.empty();
        case Kind::Dict: return !dict_of(v).items.empty();
        default: return true;
    }
}

inline bool py_equal(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Kind::Undefined: case Kind::None: return true;
        case Kind::String: return a.s == b.s;
        case Kind::List: {
            const ListObj &x = list_of(a), &y = list_of(b);
            if (x.seq == Seq::Generator || y.seq == Seq::Generator) return a.obj == b.obj;
            bool x_tuple = x.seq == Seq::Tuple, y_tuple = y.seq == Seq::Tuple;
            if (x_tuple != y_tuple || x.items.size() != y.items.size()) return false;
            for (size_t k = 0; k < x.items.size(); k++) if (!py_equal(x.items[k], y.items[k])) return false;
            return true;
        }
        case Kind::Dict: {
            const DictObj &x = dict_of(a), &y = dict_of(b);
            if (x.items.size() != y.items.size()) return false;
            for (auto& kv : x.items) {
                const Value* other = y.find(kv.first);
                if (!other || !py_equal(kv.second, *other)) return false;
            }
            return true;
        }
        default: return a.obj == b.obj;
    }
}

inline const Value* DictObj::find(const Value& key) const {
    if (key.is_string() && !index.empty()) {
        auto it = index.find(key.s);
        return it == index.end() ? nullptr : &items[it->second].second;
    }
    for (auto& kv : items) if (py_equal(kv.first, key)) return &kv.second;
    return nullptr;
}

inline void DictObj::set(const Value& key, Value v) {
    if (key.is_string() && !index.empty()) {
        auto it = index.find(key.s);
        if (it != index.end()) { items[it->second].second = std::move(v); return; }
    } else {
        for (auto& kv : items)
            if (py_equal(kv.first, key)) { kv.second = std::move(v); return; }
    }
    items.emplace_back(key, std::move(v));
    if (items.size() <= 8) return;
    if (index.empty()) {
        for (size_t k = 0; k < items.size(); k++)
            if (items[k].first.is_string()) index.emplace(items[k].first.s, k);
    } else if (key.is_string()) {
        index.emplace(key.s, items.size() - 1);
    }
}

// =====================================================================================================
// ---- Python text: str(), repr(), float repr, whitespace, case ----
// =====================================================================================================

// Python's str.isspace() for one code point (str.split() and str.strip() use it).
inline bool py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

inline std::vector<uint32_t> code_points(const std::string& s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size();) out.push_back(utf8_next(s.data(), s.size(), k));
    return out;
}

inline std::string from_code_points(const std::vector<uint32_t>& cps, size_t a = 0, size_t b = SIZE_MAX) {
    std::string out;
    for (size_t k = a; k < cps.size() && k < b; k++) utf8_append(out, cps[k]);
    return out;
}

// The start of the code point that ends just before byte `end`.
inline size_t utf8_back(const std::string& s, size_t end) {
    size_t k = end - 1;
    for (int n = 0; k > 0 && n < 3 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80; n++) k--;
    return k;
}

inline bool is_ascii(const std::string& s) {
    for (unsigned char c : s) if (c >= 0x80) return false;
    return true;
}

// Length in code points, as Python's len(str).
inline size_t py_len(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// Simple case mapping for the scripts chat templates meet in role names and keywords; other code
// points are unchanged (see the header comment).
inline uint32_t case_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
        bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        if (odd_upper ? (c & 1) : !(c & 1)) return c + 1;
        return c;
    }
    if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

inline uint32_t case_upper(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
        bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        if (odd_upper ? !(c & 1) : (c & 1)) return c - 1;
        return c;
    }
    if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

inline bool is_cased_letter(uint32_t c) { return case_lower(c) != c || case_upper(c) != c; }

template <class F>
std::string map_code_points(const std::string& s, F f) {
    std::string out;
    out.reserve(s.size());
    if (is_ascii(s)) {
        for (char c : s) out += char(f(uint32_t(c)));
        return out;
    }
    for (size_t k = 0; k < s.size();) utf8_append(out, f(utf8_next(s.data(), s.size(), k)));
    return out;
}

inline std::string py_lower(const std::string& s) { return map_code_points(s, case_lower); }
inline std::string py_upper(const std::string& s) {
    std::string r = map_code_points(s, case_upper);
    for (size_t at = r.find("\xC3\x9F"); at != std::string::npos; at = r.find("\xC3\x9F", at)) r.replace(at, 2, "SS");  // ß
    return r;
}

// str.capitalize(): first character upper, the rest lower.
inline std::string py_capitalize(const std::string& s) {
    std::vector<uint32_t> cps = code_points(s);
    for (size_t k = 0; k < cps.size(); k++) cps[k] = k == 0 ? case_upper(cps[k]) : case_lower(cps[k]);
    return from_code_points(cps);
}

// str.title(): a cased letter after an uncased character starts a word.
inline std::string py_title(const std::string& s) {
    std::vector<uint32_t> cps = code_points(s);
    bool prev_cased = false;
    for (uint32_t& c : cps) {
        bool cased = is_cased_letter(c);
        c = cased ? (prev_cased ? case_lower(c) : case_upper(c)) : c;
        prev_cased = cased;
    }
    return from_code_points(cps);
}

// Python's repr(float): the shortest digits that read back to the same double; exponent form below
// 1e-4 and from 1e16 on (1e-05, 1e+16), otherwise positional with at least one decimal (1.0).
inline std::string py_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (std::strtod(buf, nullptr) == d) break;
    }
    std::string t = buf, digits;
    bool neg = t[0] == '-';
    size_t e_pos = t.find('e');
    for (size_t k = neg ? 1 : 0; k < e_pos; k++) if (t[k] != '.') digits += t[k];
    int exp10 = std::atoi(t.c_str() + e_pos + 1);
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    std::string out = neg ? "-" : "";
    int n = int(digits.size());
    if (exp10 < -4 || exp10 >= 16) {
        out += digits[0];
        if (n > 1) out += "." + digits.substr(1);
        char e[16];
        std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
        return out + e;
    }
    int point = exp10 + 1;  // digits before the decimal point
    if (point <= 0) return out + "0." + std::string(size_t(-point), '0') + digits;
    if (point >= n) return out + digits + std::string(size_t(point - n), '0') + ".0";
    return out + digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
}

// Python's str.isprintable() for one code point: what repr() leaves unescaped.
inline bool py_printable(uint32_t c) {
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    if (c == 0xAD) return false;
    UnicodeCategory cat = unicode_category(c);
    return !(ucat_bit(cat) & (UCAT_C | UCAT_Z));
}

inline std::string py_repr_string(const std::string& s) {
    char quote = '\'';
    if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
    std::string out(1, quote);
    for (size_t k = 0; k < s.size();) {
        uint32_t c = utf8_next(s.data(), s.size(), k);
        char buf[16];
        if (c == uint32_t(quote) || c == '\\') { out += '\\'; out += char(c); }
        else if (c == '\t') out += "\\t";
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (py_printable(c)) utf8_append(out, c);
        else {
            if (c <= 0xFF) std::snprintf(buf, sizeof buf, "\\x%02x", c);
            else if (c <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04x", c);
            else std::snprintf(buf, sizeof buf, "\\U%08x", c);
            out += buf;
        }
    }
    return out + quote;
}

// markupsafe.escape: what a plain string combined with a Markup one turns into.
inline std::string html_escape(const std::string& s) {
    std::string r;
    r.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': r += "&amp;"; break;
            case '<': r += "&lt;"; break;
            case '>': r += "&gt;"; break;
            case '"': r += "&#34;"; break;
            case '\'': r += "&#39;"; break;
            default: r += c;
        }
    }
    return r;
}

inline std::string py_str(const Value& v);

inline std::string py_repr(const Value& v) {
    switch (v.kind) {
        case Kind::String: return v.markup ? "Markup(" + py_repr_string(v.s) + ")" : py_repr_string(v.s);
        case Kind::Undefined: return "Undefined";
        default: return py_str(v);
    }
}

// Python's str(): what {{ }} prints. Lists and dicts are bounded in depth; a namespace may hold itself,
// so the recursion is counted (Python prints such a cycle as {...}; here it is an error).
inline std::string py_str(const Value& v) {
    static thread_local int depth = 0;
    struct Guard {
        Guard() { if (++depth > VALUE_DEPTH_MAX + 8) { depth = 0; throw DeepValue{}; } }
        ~Guard() { if (depth > 0) depth--; }
    } guard;
    switch (v.kind) {
        case Kind::Undefined: return "";
        case Kind::None: return "None";
        case Kind::Bool: return v.b ? "True" : "False";
        case Kind::Int: return std::to_string(v.i);
        case Kind::Float: return py_float_repr(v.f);
        case Kind::String: return v.s;
        case Kind::List: {
            const ListObj& l = list_of(v);
            if (l.seq == Seq::Generator) return "<generator object at 0x0>";
            if (l.seq == Seq::Range) {
                std::string r = "range(" + std::to_string(l.range_start) + ", " + std::to_string(l.range_stop);
                return r + (l.range_step != 1 ? ", " + std::to_string(l.range_step) : "") + ")";
            }
            std::string out = l.seq == Seq::Tuple ? "(" : "[";
            for (size_t k = 0; k < l.items.size(); k++) out += (k ? ", " : "") + py_repr(l.items[k]);
            if (l.seq == Seq::Tuple) return out + (l.items.size() == 1 ? ",)" : ")");
            out += "]";
            if (l.seq == Seq::DictKeys) return "dict_keys(" + out + ")";
            if (l.seq == Seq::DictValues) return "dict_values(" + out + ")";
            if (l.seq == Seq::DictItems) return "dict_items(" + out + ")";
            return out;
        }
        case Kind::Dict: case Kind::Namespace: {
            std::string out = "{";
            const DictObj& d = dict_of(v);
            for (size_t k = 0; k < d.items.size(); k++)
                out += (k ? ", " : "") + py_repr(d.items[k].first) + ": " + py_repr(d.items[k].second);
            out += "}";
            return v.kind == Kind::Namespace ? "<Namespace " + out + ">" : out;
        }
        case Kind::Callable: {
            const CallableObj& c = callable_of(v);
            if (c.what == Builtin::Macro) return "<Macro '" + c.name + "'>";
            return "<built-in method " + c.name + ">";
        }
        case Kind::Loop: return "<LoopContext>";
    }
    return "";
}

// =====================================================================================================
// ---- JSON (the tojson filter: Python's json.dumps) ----
// =====================================================================================================

struct JsonStyle {
    bool ensure_ascii = false;
    bool sort_keys = false;
    bool indent_set = false;
    std::string indent;                          // json.dumps(indent=N) puts N spaces (or this string) per level
    std::string item_sep = ", ", key_sep = ": ";
    size_t max_size = SIZE_MAX;
};

struct JsonError {
    std::string message;
};

inline void json_escape_into(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    for (size_t k = 0; k < s.size();) {
        unsigned char b = static_cast<unsigned char>(s[k]);
        if (b >= 0x20 && b != '"' && b != '\\' && (b < 0x80 || !ensure_ascii)) { out += char(b); k++; continue; }
        uint32_t c = b < 0x80 ? (k++, b) : utf8_next(s.data(), s.size(), k);
        char buf[16];
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c > 0xFFFF) {
                    uint32_t v = c - 0x10000;
                    std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                }
                out += buf;
        }
    }
    out += '"';
}

inline std::string json_float(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    return py_float_repr(d);
}

inline void json_dump_into(std::string& out, const Value& v, const JsonStyle& st, int level) {
    if (out.size() > st.max_size) throw JsonError{"JSON text longer than the output limit"};
    if (level > 200) throw JsonError{"JSON nesting deeper than 200"};
    auto newline = [&](int lv) {
        if (!st.indent_set) return;
        out += '\n';
        for (int k = 0; k < lv; k++) out += st.indent;
        if (out.size() > st.max_size) throw JsonError{"JSON text longer than the output limit"};
    };
    switch (v.kind) {
        case Kind::None: out += "null"; return;
        case Kind::Bool: out += v.b ? "true" : "false"; return;
        case Kind::Int: out += std::to_string(v.i); return;
        case Kind::Float: out += json_float(v.f); return;
        case Kind::String: json_escape_into(out, v.s, st.ensure_ascii); return;
        case Kind::List: {
            const ListObj& l = list_of(v);
            if (l.seq != Seq::List && l.seq != Seq::Tuple)
                throw JsonError{std::string("Object of type ") + type_name(v) + " is not JSON serializable"};
            if (l.items.empty()) { out += "[]"; return; }
            out += '[';
            for (size_t k = 0; k < l.items.size(); k++) {
                if (k) out += st.item_sep;
                newline(level + 1);
                json_dump_into(out, l.items[k], st, level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        case Kind::Dict: {
            const DictObj& d = dict_of(v);
            if (d.items.empty()) { out += "{}"; return; }
            std::vector<std::pair<std::string, const Value*>> entries;
            for (auto& kv : d.items) {
                const Value& key = kv.first;
                std::string k;
                switch (key.kind) {
                    case Kind::String: k = key.s; break;
                    case Kind::Int: k = std::to_string(key.i); break;
                    case Kind::Bool: k = key.b ? "true" : "false"; break;
                    case Kind::Float: k = json_float(key.f); break;
                    case Kind::None: k = "null"; break;
                    default: throw JsonError{std::string("keys must be str, int, float, bool or None, not ") + type_name(key)};
                }
                entries.emplace_back(std::move(k), &kv.second);
            }
            if (st.sort_keys)
                std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
            out += '{';
            for (size_t k = 0; k < entries.size(); k++) {
                if (k) out += st.item_sep;
                newline(level + 1);
                json_escape_into(out, entries[k].first, st.ensure_ascii);
                out += st.key_sep;
                json_dump_into(out, *entries[k].second, st, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        default:
            throw JsonError{std::string("Object of type ") + type_name(v) + " is not JSON serializable"};
    }
}

// Values from JSON input (messages, tools, kwargs): objects keep their key order.
inline Value from_json(const ojson& j) {
    switch (j.type()) {
        case ojson::value_t::null: return Value::none();
        case ojson::value_t::boolean: return Value::boolean(j.get<bool>());
        case ojson::value_t::number_integer: return Value::integer(j.get<int64_t>());
        case ojson::value_t::number_unsigned: {
            uint64_t u = j.get<uint64_t>();
            return u <= uint64_t(INT64_MAX) ? Value::integer(int64_t(u)) : Value::number(double(u));
        }
        case ojson::value_t::number_float: return Value::number(j.get<double>());
        case ojson::value_t::string: return Value::string(j.get<std::string>());
        case ojson::value_t::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (auto& e : j) items.push_back(from_json(e));
            return make_list(std::move(items));
        }
        case ojson::value_t::object: {
            auto d = std::make_shared<DictObj>();
            for (auto it = j.begin(); it != j.end(); ++it) d->set(Value::string(it.key()), from_json(it.value()));
            return make_dict(std::move(d));
        }
        default: return Value::none();
    }
}

// =====================================================================================================
// ---- lexer: jinja2's, with trim_blocks and lstrip_blocks on ----
// =====================================================================================================
//
// The source is cut into text and tags the way jinja2's lexer does it: newlines normalised to "\n" and
// one trailing newline dropped (keep_trailing_newline=False); "{%-" / "{{-" / "{#-" strip all whitespace
// before the tag and "-%}" / "-}}" / "-#}" all whitespace after; trim_blocks drops the first newline
// after "%}" and "#}" ("+%}" keeps it); lstrip_blocks drops the spaces and tabs that precede "{%" or "{#"
// on their line ("{%+" keeps them).

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
    Tok type;
    int line;
    std::string text;  // Data, Name, String (decoded), Op
    int64_t i = 0;
    double f = 0;
};

struct Lexer {
    const std::string& name;
    std::string src;
    size_t pos = 0;
    int line = 1;
    size_t line_pos = 0;        // src position up to which `line` is counted
    bool line_starting = true;  // the last thing consumed ended a line (lstrip_blocks at a line's start)
    std::vector<Token> out;

    Lexer(const std::string& text, const std::string& template_name) : name(template_name) {
        src.reserve(text.size());
        for (size_t k = 0; k < text.size(); k++) {
            if (text[k] == '\r') {
                src += '\n';
                if (k + 1 < text.size() && text[k + 1] == '\n') k++;
            } else {
                src += text[k];
            }
        }
        if (!src.empty() && src.back() == '\n') src.pop_back();
    }

    int line_at(size_t p) {
        if (p < line_pos) { line = 1; line_pos = 0; }
        for (; line_pos < p && line_pos < src.size(); line_pos++) line += src[line_pos] == '\n';
        return line;
    }

    [[noreturn]] void fail(size_t p, const std::string& msg) {
        die("%s:%d: syntax error: %s", name.c_str(), line_at(p), msg.c_str());
    }

    bool at(size_t p, const char* s) const { return src.compare(p, std::strlen(s), s) == 0; }
    // The length of the whitespace character at p (Python's \s: Unicode whitespace too), or 0.
    size_t ws_at(size_t p) const {
        if (p >= src.size()) return 0;
        size_t q = p;
        return py_isspace(utf8_next(src.data(), src.size(), q)) ? q - p : 0;
    }
    size_t skip_ws(size_t p) const {
        while (size_t n = ws_at(p)) p += n;
        return p;
    }

    // Python's str.rstrip(): all trailing whitespace, Unicode's included.
    static std::string rstrip_ws(const std::string& t) {
        size_t end = t.size();
        while (end > 0) {
            size_t start = utf8_back(t, end);
            size_t q = start;
            if (!py_isspace(utf8_next(t.data(), t.size(), q))) break;
            end = start;
        }
        return t.substr(0, end);
    }

    // lstrip_blocks: the text before "{%" or "{#" loses a last line made of whitespace only.
    std::string lstrip_line(const std::string& text) const {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos == 0 && !line_starting) return text;
        if (l_pos == text.size()) return text;
        for (size_t k = l_pos; k < text.size();) {
            size_t q = k;
            if (!py_isspace(utf8_next(text.data(), text.size(), q))) return text;
            k = q;
        }
        return text.substr(0, l_pos);
    }

    void emit_data(std::string text, size_t p) {
        if (text.empty()) return;
        out.push_back({Tok::Data, line_at(p), std::move(text)});
    }

    // After a tag's closing characters: "-X}" eats all whitespace, "+X}" nothing, plain "X}" one newline
    // (trim_blocks, for blocks and comments only).
    void after_end(char sign, bool trim) {
        if (sign == '-') pos = skip_ws(pos);
        else if (sign != '+' && trim && pos < src.size() && src[pos] == '\n') pos++;
        line_starting = pos > 0 && src[pos - 1] == '\n';
    }

    // Matches "{%[-+]? raw %}" / "{%[-+]? endraw [-+]?%}" at p; returns the position after it, or 0.
    size_t match_raw_tag(size_t p, const char* word, char* end_sign) const {
        if (!at(p, "{%")) return 0;
        p += 2;
        if (p < src.size() && (src[p] == '-' || src[p] == '+')) p++;
        p = skip_ws(p);
        if (!at(p, word)) return 0;
        p = skip_ws(p + std::strlen(word));
        *end_sign = 0;
        if (p < src.size() && (src[p] == '-' || src[p] == '+')) *end_sign = src[p++];
        if (!at(p, "%}")) return 0;
        return p + 2;
    }

    std::vector<Token> run() {
        while (pos < src.size()) {
            size_t start = pos;
            while (true) {
                start = src.find('{', start);
                if (start == std::string::npos || start + 1 >= src.size()) { start = std::string::npos; break; }
                char c = src[start + 1];
                if (c == '{' || c == '%' || c == '#') break;
                start++;
            }
            if (start == std::string::npos) { emit_data(src.substr(pos), pos); break; }
            std::string text = src.substr(pos, start - pos);
            char kind = src[start + 1];
            char sign = start + 2 < src.size() && (src[start + 2] == '-' || src[start + 2] == '+') ? src[start + 2] : 0;
            if (sign == '-') text = rstrip_ws(text);
            else if (sign != '+' && kind != '{') text = lstrip_line(text);
            emit_data(std::move(text), pos);
            size_t body = start + 2 + (sign ? 1 : 0);
            char raw_sign = 0;
            size_t raw_end = kind == '%' ? match_raw_tag(start, "raw", &raw_sign) : 0;
            if (raw_end && raw_sign != '+') lex_raw(start, raw_end, raw_sign);
            else if (kind == '#') lex_comment(start, body);
            else lex_tag(start, body, kind == '{');
        }
        out.push_back({Tok::Eof, line_at(src.size()), ""});
        return std::move(out);
    }

    void lex_raw(size_t start, size_t after_begin, char begin_sign) {
        pos = after_begin;
        if (begin_sign == '-') pos = skip_ws(pos);
        line_starting = pos > 0 && src[pos - 1] == '\n';
        for (size_t p = pos;; p++) {
            p = src.find("{%", p);
            if (p == std::string::npos) fail(start, "missing end of raw directive");
            char end_sign = 0;
            size_t end = match_raw_tag(p, "endraw", &end_sign);
            if (!end) continue;
            std::string text = src.substr(pos, p - pos);
            char open_sign = src[p + 2] == '-' || src[p + 2] == '+' ? src[p + 2] : 0;
            if (open_sign == '-') text = rstrip_ws(text);
            else if (open_sign != '+') text = lstrip_line(text);
            emit_data(std::move(text), pos);
            pos = end;
            after_end(end_sign, true);
            return;
        }
    }

    void lex_comment(size_t start, size_t body) {
        size_t end = src.find("#}", body);
        if (end == std::string::npos) fail(start, "missing end of comment tag");
        char sign = end > body && (src[end - 1] == '-' || src[end - 1] == '+') ? src[end - 1] : 0;
        pos = end + 2;
        after_end(sign, true);
    }

    void lex_tag(size_t start, size_t body, bool variable) {
        out.push_back({variable ? Tok::VarBegin : Tok::BlockBegin, line_at(start), ""});
        pos = body;
        std::vector<char> brackets;  // "}}" and "%}" end the tag only outside brackets, as in jinja2
        while (true) {
            if (pos >= src.size()) fail(start, std::string("unexpected end of template inside ") + (variable ? "{{ }}" : "{% %}"));
            if (brackets.empty()) {
                const char* close = variable ? "}}" : "%}";
                char sign = src[pos] == '-' || (src[pos] == '+' && !variable) ? src[pos] : 0;
                if (at(pos + (sign ? 1 : 0), close)) {
                    out.push_back({variable ? Tok::VarEnd : Tok::BlockEnd, line_at(pos), ""});
                    pos += 2 + (sign ? 1 : 0);
                    after_end(sign, !variable);
                    return;
                }
            }
            char c = src[pos];
            if (size_t n = ws_at(pos)) { pos += n; continue; }
            if (std::isdigit(static_cast<unsigned char>(c))) { lex_number(!(pos > 0 && src[pos - 1] == '.')); continue; }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t e = pos;
                while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) e++;
                out.push_back({Tok::Name, line_at(pos), src.substr(pos, e - pos)});
                pos = e;
                continue;
            }
            if (c == '\'' || c == '"') { lex_string(); continue; }
            static const char* const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                              "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
            const char* op = nullptr;
            for (const char* o : OPS) if (at(pos, o)) { op = o; break; }
            if (!op) fail(pos, std::string("unexpected character '") + c + "'");
            if (*op == '(' || *op == '[' || *op == '{') brackets.push_back(*op);
            if (*op == ')' || *op == ']' || *op == '}') {
                char want = *op == ')' ? '(' : *op == ']' ? '[' : '{';
                if (brackets.empty() || brackets.back() != want) fail(pos, std::string("unexpected '") + op + "'");
                brackets.pop_back();
            }
            out.push_back({Tok::Op, line_at(pos), op});
            pos += std::strlen(op);
        }
    }

    // Integers (with _ separators, 0b/0o/0x) and floats (1.5, 1e5, 1.5e-3), as jinja2's regexes read them;
    // right after a '.' only an integer (x.0.1 is x[0][1]).
    void lex_number(bool allow_float) {
        size_t p = pos;
        auto digits = [&](size_t q, int base) {
            size_t s = q;
            while (q < src.size()) {
                char c = char(std::tolower(static_cast<unsigned char>(src[q])));
                bool ok = base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) : (c >= '0' && c < char('0' + base));
                if (ok || (c == '_' && q > s && q + 1 < src.size() && src[q + 1] != '_')) q++;
                else break;
            }
            while (q > s && src[q - 1] == '_') q--;
            return q;
        };
        auto clean = [](std::string t) { t.erase(std::remove(t.begin(), t.end(), '_'), t.end()); return t; };
        char x = p + 1 < src.size() ? char(std::tolower(static_cast<unsigned char>(src[p + 1]))) : 0;
        if (src[p] == '0' && (x == 'b' || x == 'o' || x == 'x')) {
            int base = x == 'b' ? 2 : x == 'o' ? 8 : 16;
            size_t q = p + 2;
            if (q < src.size() && src[q] == '_') q++;
            size_t e = digits(q, base);
            if (e == q) fail(p, "malformed number literal");
            std::string t = clean(src.substr(q, e - q));
            errno = 0;
            unsigned long long v = std::strtoull(t.c_str(), nullptr, base);
            if (errno || v > uint64_t(INT64_MAX)) fail(p, "integer literal too large (64-bit integers)");
            Token tk{Tok::Int, line_at(p), src.substr(p, e - p)};
            tk.i = int64_t(v);
            out.push_back(tk);
            pos = e;
            return;
        }
        size_t e = digits(p, 10);
        bool is_float = false;
        if (allow_float && e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
            e = digits(e + 1, 10);
            is_float = true;
        }
        if (allow_float && e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
            size_t q = e + 1;
            if (q < src.size() && (src[q] == '+' || src[q] == '-')) q++;
            if (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) { e = digits(q, 10); is_float = true; }
        }
        std::string t = clean(src.substr(p, e - p));
        Token tk{is_float ? Tok::Float : Tok::Int, line_at(p), src.substr(p, e - p)};
        if (is_float) {
            tk.f = std::strtod(t.c_str(), nullptr);
        } else {
            if (t.size() > 1 && t[0] == '0' && t.find_first_not_of('0') != std::string::npos) fail(p, "leading zeros in a decimal integer");
            errno = 0;
            unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
            if (errno || v > uint64_t(INT64_MAX)) fail(p, "integer literal too large (64-bit integers)");
            tk.i = int64_t(v);
        }
        out.push_back(tk);
        pos = e;
    }

    // A quoted string with Python's escapes (\n \t \\ \' \" \xhh \uhhhh \Uhhhhhhhh \ooo, backslash-newline);
    // an unknown escape keeps its backslash, as Python's unicode-escape does.
    void lex_string() {
        char quote = src[pos];
        size_t start = pos;
        std::string s;
        size_t p = pos + 1;
        auto hex = [&](size_t q, int n) -> uint32_t {
            uint32_t v = 0;
            for (int k = 0; k < n; k++, q++) {
                if (q >= src.size() || !std::isxdigit(static_cast<unsigned char>(src[q]))) fail(q, "truncated \\x, \\u or \\U escape");
                char c = src[q];
                v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
            }
            return v;
        };
        while (true) {
            if (p >= src.size()) fail(start, std::string("unterminated string (missing ") + quote + ")");
            char c = src[p];
            if (c == quote) { p++; break; }
            if (c != '\\') { s += c; p++; continue; }
            if (p + 1 >= src.size()) fail(start, "unterminated string");
            char e = src[p + 1];
            p += 2;
            switch (e) {
                case '\n': break;
                case '\\': s += '\\'; break;
                case '\'': s += '\''; break;
                case '"': s += '"'; break;
                case 'a': s += '\a'; break;
                case 'b': s += '\b'; break;
                case 'f': s += '\f'; break;
                case 'n': s += '\n'; break;
                case 'r': s += '\r'; break;
                case 't': s += '\t'; break;
                case 'v': s += '\v'; break;
                case 'x': utf8_append(s, hex(p, 2)); p += 2; break;
                case 'u': utf8_append(s, hex(p, 4)); p += 4; break;
                case 'U': {
                    uint32_t v = hex(p, 8);
                    if (v > 0x10FFFF) fail(p, "\\U escape beyond U+10FFFF");
                    utf8_append(s, v);
                    p += 8;
                    break;
                }
                case 'N': fail(p, "\\N{...} escapes are not supported");
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t v = uint32_t(e - '0');
                        for (int k = 0; k < 2 && p < src.size() && src[p] >= '0' && src[p] <= '7'; k++, p++) v = v * 8 + uint32_t(src[p] - '0');
                        utf8_append(s, v);
                    } else {
                        s += '\\';
                        s += e;
                    }
            }
        }
        out.push_back({Tok::String, line_at(start), std::move(s)});
        pos = p;
    }
};

// =====================================================================================================
// ---- syntax tree ----
// =====================================================================================================

enum class Op : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat, Eq, Ne, Lt, Le, Gt, Ge, In, NotIn, Neg, Pos, Not, And, Or };

enum class EK : uint8_t { Const, Name, List, Tuple, Dict, GetAttr, GetItem, Slice, Call, Filter, Test, Unary, Binary, Compare, Cond };

// The filters and tests this interpreter knows; a template naming another one does not parse (jinja2
// also checks filter and test names when it compiles a template).
enum class F : uint8_t {
    Abs, Attr, Batch, Capitalize, Center, Count, Default, Dictsort, Escape, First, Float, Format, Indent, Int,
    Items, Join, Last, Length, List, Lower, Map, Max, Min, Reject, Rejectattr, Replace, Reverse, Round, Safe,
    Select, Selectattr, Sort, String, Sum, Title, Tojson, Trim, Truncate, Unique, Upper, Wordcount
};
static const std::pair<const char*, F> FILTER_NAMES[] = {
    {"abs", F::Abs}, {"attr", F::Attr}, {"batch", F::Batch}, {"capitalize", F::Capitalize}, {"center", F::Center},
    {"count", F::Count}, {"d", F::Default}, {"default", F::Default}, {"dictsort", F::Dictsort}, {"e", F::Escape},
    {"escape", F::Escape}, {"forceescape", F::Escape}, {"first", F::First}, {"float", F::Float}, {"format", F::Format},
    {"indent", F::Indent}, {"int", F::Int}, {"items", F::Items}, {"join", F::Join}, {"last", F::Last},
    {"length", F::Length}, {"list", F::List}, {"lower", F::Lower}, {"map", F::Map}, {"max", F::Max}, {"min", F::Min},
    {"reject", F::Reject}, {"rejectattr", F::Rejectattr}, {"replace", F::Replace}, {"reverse", F::Reverse},
    {"round", F::Round}, {"safe", F::Safe}, {"select", F::Select}, {"selectattr", F::Selectattr}, {"sort", F::Sort},
    {"string", F::String}, {"sum", F::Sum}, {"title", F::Title}, {"tojson", F::Tojson}, {"trim", F::Trim},
    {"truncate", F::Truncate}, {"unique", F::Unique}, {"upper", F::Upper}, {"wordcount", F::Wordcount},
};

enum class T : uint8_t {
    Boolean, Callable, Defined, Divisibleby, Eq, Escaped, Even, False, Filter, Float, Ge, Gt, In, Integer, Iterable,
    Le, Lower, Lt, Mapping, Ne, None, Number, Odd, Sameas, Sequence, String, Test, True, Undefined, Upper
};
static const std::pair<const char*, T> TEST_NAMES[] = {
    {"boolean", T::Boolean}, {"callable", T::Callable}, {"defined", T::Defined}, {"divisibleby", T::Divisibleby},
    {"eq", T::Eq}, {"equalto", T::Eq}, {"==", T::Eq}, {"escaped", T::Escaped}, {"even", T::Even},
    {"false", T::False}, {"filter", T::Filter}, {"float", T::Float}, {"ge", T::Ge}, {">=", T::Ge}, {"gt", T::Gt},
    {"greaterthan", T::Gt}, {">", T::Gt}, {"in", T::In}, {"integer", T::Integer}, {"iterable", T::Iterable},
    {"le", T::Le}, {"<=", T::Le}, {"lower", T::Lower}, {"lt", T::Lt}, {"lessthan", T::Lt}, {"<", T::Lt},
    {"mapping", T::Mapping}, {"ne", T::Ne}, {"!=", T::Ne}, {"none", T::None}, {"number", T::Number},
    {"odd", T::Odd}, {"sameas", T::Sameas}, {"sequence", T::Sequence}, {"string", T::String}, {"test", T::Test},
    {"true", T::True}, {"undefined", T::Undefined}, {"upper", T::Upper},
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    EK kind;
    int line = 0;
    Op op = Op::Add;                                       // Unary, Binary
    Value value;                                           // Const
    std::string name;                                      // Name, GetAttr attribute, Filter and Test name
    uint8_t id = 0;                                        // Filter: an F, Test: a T
    ExprPtr a, b, c;                                       // operands (Cond: a if b else c; Slice: a[b:c:args[0]])
    std::vector<ExprPtr> args;                             // items, call arguments, Compare operands
    std::vector<std::pair<std::string, ExprPtr>> kwargs;   // call keyword arguments
    std::vector<Op> ops;                                   // Compare: one per operand after the first
    ExprPtr star_args, star_kwargs;                        // f(*x, **y)
    Expr(EK k, int ln) : kind(k), line(ln) {}
};

enum class SK : uint8_t { Text, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue, Generation };

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
    SK kind;
    int line = 0;
    std::string text;                                      // Text
    ExprPtr expr;                                          // Print, Set value, For iterable, CallBlock call
    ExprPtr cond;                                          // For: the `if` filter
    std::vector<std::pair<ExprPtr, Body>> branches;        // If / elif
    Body body, else_body;
    std::vector<std::string> targets;                      // Set / For / SetBlock: names (several: unpack a tuple)
    bool target_tuple = false;
    std::string target_attr;                               // Set: {% set ns.attr = ... %} (targets[0] is ns)
    std::vector<ExprPtr> filters;                          // SetBlock, FilterBlock: Filter exprs without input
    std::string name;                                      // Macro
    std::vector<std::string> params;                       // Macro, CallBlock (the caller's parameters)
    std::vector<ExprPtr> defaults;                         // one per param, null where none
    bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
    std::vector<std::pair<std::string, ExprPtr>> with_vars;  // With
    Stmt(SK k, int ln) : kind(k), line(ln) {}
};

// =====================================================================================================
// ---- parser: jinja2's grammar, recursive descent ----
// =====================================================================================================

struct Parser {
    const std::string& name;
    std::vector<Token> toks;
    size_t p = 0;
    int depth = 0;
    int loop_depth = 0;

    Parser(std::vector<Token> t, const std::string& n) : name(n), toks(std::move(t)) {}

    const Token& cur() const { return toks[p]; }
    const Token& peek(size_t k = 1) const { return toks[std::min(p + k, toks.size() - 1)]; }
    [[noreturn]] void fail(const std::string& msg) const { die("%s:%d: syntax error: %s", name.c_str(), cur().line, msg.c_str()); }
    [[noreturn]] void fail_at(int line, const std::string& msg) const { die("%s:%d: syntax error: %s", name.c_str(), line, msg.c_str()); }

    bool is_op(const char* o) const { return cur().type == Tok::Op && cur().text == o; }
    bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
    bool skip_op(const char* o) { if (is_op(o)) { p++; return true; } return false; }
    bool skip_name(const char* n) { if (is_name(n)) { p++; return true; } return false; }

    static std::string describe(const Token& t) {
        switch (t.type) {
            case Tok::Data: return "template text";
            case Tok::VarBegin: return "'{{'";
            case Tok::VarEnd: return "'}}'";
            case Tok::BlockBegin: return "'{%'";
            case Tok::BlockEnd: return "'%}'";
            case Tok::Name: return "'" + t.text + "'";
            case Tok::String: return "a string";
            case Tok::Int: case Tok::Float: return "a number";
            case Tok::Op: return "'" + t.text + "'";
            case Tok::Eof: return "the end of the template";
        }
        return "?";
    }
    void expect_op(const char* o) { if (!skip_op(o)) fail(std::string("expected '") + o + "', found " + describe(cur())); }
    std::string expect_name() {
        if (cur().type != Tok::Name) fail("expected a name, found " + describe(cur()));
        return toks[p++].text;
    }
    void expect_block_end() { if (cur().type != Tok::BlockEnd) fail("expected '%}', found " + describe(cur())); p++; }

    struct DepthGuard {
        Parser& ps;
        explicit DepthGuard(Parser& x) : ps(x) {
            if (++ps.depth > PARSE_DEPTH_MAX) ps.fail("nesting deeper than " + std::to_string(PARSE_DEPTH_MAX) + " levels");
        }
        ~DepthGuard() { ps.depth--; }
    };

    ExprPtr node(EK k) { return ExprPtr(new Expr(k, cur().line)); }

    // ---- expressions, loosest binding first ----

    ExprPtr parse_expression(bool with_cond = true) { return with_cond ? parse_cond() : parse_or(); }

    ExprPtr parse_cond() {
        DepthGuard g(*this);
        ExprPtr e = parse_or();
        while (is_name("if")) {
            ExprPtr n = node(EK::Cond);
            p++;
            n->b = parse_or();
            if (skip_name("else")) n->c = parse_cond();
            n->a = std::move(e);
            e = std::move(n);
        }
        return e;
    }

    ExprPtr binary(Op op, ExprPtr l, ExprPtr r, int line) {
        ExprPtr n(new Expr(EK::Binary, line));
        n->op = op;
        n->a = std::move(l);
        n->b = std::move(r);
        return n;
    }

    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (is_name("or")) { int ln = cur().line; p++; e = binary(Op::Or, std::move(e), parse_and(), ln); }
        return e;
    }
    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (is_name("and")) { int ln = cur().line; p++; e = binary(Op::And, std::move(e), parse_not(), ln); }
        return e;
    }
    ExprPtr parse_not() {
        DepthGuard g(*this);
        if (is_name("not")) {
            ExprPtr n = node(EK::Unary);
            p++;
            n->op = Op::Not;
            n->a = parse_not();
            return n;
        }
        return parse_compare();
    }
    ExprPtr parse_compare() {
        ExprPtr first = parse_math1();
        ExprPtr cmp;
        while (true) {
            Op op;
            if (is_op("==")) op = Op::Eq;
            else if (is_op("!=")) op = Op::Ne;
            else if (is_op("<")) op = Op::Lt;
            else if (is_op("<=")) op = Op::Le;
            else if (is_op(">")) op = Op::Gt;
            else if (is_op(">=")) op = Op::Ge;
            else if (is_name("in")) op = Op::In;
            else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") { op = Op::NotIn; p++; }
            else break;
            if (!cmp) { cmp = node(EK::Compare); cmp->args.push_back(std::move(first)); }
            p++;
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }
    ExprPtr parse_math1() {
        ExprPtr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            Op op = is_op("+") ? Op::Add : Op::Sub;
            int ln = cur().line;
            p++;
            e = binary(op, std::move(e), parse_concat(), ln);
        }
        return e;
    }
    ExprPtr parse_concat() {
        ExprPtr e = parse_math2();
        while (is_op("~")) { int ln = cur().line; p++; e = binary(Op::Concat, std::move(e), parse_math2(), ln); }
        return e;
    }
    ExprPtr parse_math2() {
        ExprPtr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            Op op = is_op("*") ? Op::Mul : is_op("/") ? Op::Div : is_op("//") ? Op::FloorDiv : Op::Mod;
            int ln = cur().line;
            p++;
            e = binary(op, std::move(e), parse_pow(), ln);
        }
        return e;
    }
    ExprPtr parse_pow() {
        ExprPtr e = parse_unary();
        while (is_op("**")) { int ln = cur().line; p++; e = binary(Op::Pow, std::move(e), parse_unary(), ln); }
        return e;
    }
    ExprPtr parse_unary(bool with_filter = true) {
        DepthGuard g(*this);
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            e = node(EK::Unary);
            e->op = is_op("-") ? Op::Neg : Op::Pos;
            p++;
            e->a = parse_unary(false);
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        if (t.type == Tok::Name) {
            const std::string& n = t.text;
            ExprPtr e = node(EK::Const);
            if (n == "true" || n == "True") e->value = Value::boolean(true);
            else if (n == "false" || n == "False") e->value = Value::boolean(false);
            else if (n == "none" || n == "None") e->value = Value::none();
            else { e->kind = EK::Name; e->name = n; }
            p++;
            return e;
        }
        if (t.type == Tok::String) {
            ExprPtr e = node(EK::Const);
            std::string s;
            while (cur().type == Tok::String) s += toks[p++].text;  // "a" "b" is "ab", as in Python
            e->value = Value::string(std::move(s));
            return e;
        }
        if (t.type == Tok::Int || t.type == Tok::Float) {
            ExprPtr e = node(EK::Const);
            e->value = t.type == Tok::Int ? Value::integer(t.i) : Value::number(t.f);
            p++;
            return e;
        }
        if (is_op("(")) {
            p++;
            ExprPtr e = parse_tuple(true, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            ExprPtr e = node(EK::List);
            p++;
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(parse_expression());
            }
            expect_op("]");
            return e;
        }
        if (is_op("{")) {
            ExprPtr e = node(EK::Dict);
            p++;
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(parse_expression());
                expect_op(":");
                e->args.push_back(parse_expression());
            }
            expect_op("}");
            return e;
        }
        fail("unexpected " + describe(t));
    }

    // A comma-separated list: one item is itself, several (or a trailing comma) a tuple; "()" only in
    // explicit parentheses.
    ExprPtr parse_tuple(bool with_cond = true, bool explicit_parens = false, const char* extra_end = nullptr) {
        int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            bool end = cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") || (extra_end && is_name(extra_end));
            if (end) break;
            items.push_back(parse_expression(with_cond));
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail("expected an expression, found " + describe(cur()));
        }
        ExprPtr t(new Expr(EK::Tuple, line));
        t->args = std::move(items);
        return t;
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
            else if (is_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        while (true) {
            if (is_op("|")) e = parse_filter(std::move(e));
            else if (is_name("is")) e = parse_test(std::move(e));
            else if (is_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    ExprPtr parse_subscript(ExprPtr e) {
        ExprPtr n = node(EK::GetAttr);
        if (skip_op(".")) {
            if (cur().type == Tok::Int) {  // x.0 is x[0]
                n->kind = EK::GetItem;
                n->b = node(EK::Const);
                n->b->value = Value::integer(cur().i);
                p++;
            } else {
                n->name = expect_name();
            }
            n->a = std::move(e);
            return n;
        }
        expect_op("[");
        n->kind = EK::GetItem;
        n->a = std::move(e);
        std::vector<ExprPtr> parts;
        while (!is_op("]")) {
            if (!parts.empty()) expect_op(",");
            if (is_op("]")) break;
            parts.push_back(parse_subscribed());
        }
        expect_op("]");
        if (parts.empty()) fail("expected a subscript");
        if (parts.size() == 1 && parts[0]->kind == EK::Slice) {
            ExprPtr s = std::move(parts[0]);
            s->a = std::move(n->a);
            return s;
        }
        if (parts.size() == 1) { n->b = std::move(parts[0]); return n; }
        ExprPtr t(new Expr(EK::Tuple, n->line));
        t->args = std::move(parts);
        n->b = std::move(t);
        return n;
    }

    // One subscript: an expression or a slice start:stop:step (any part may be missing).
    ExprPtr parse_subscribed() {
        ExprPtr first;
        if (!is_op(":")) {
            first = parse_expression();
            if (!is_op(":")) return first;
        }
        ExprPtr s = node(EK::Slice);
        p++;  // ':'
        s->b = std::move(first);
        if (!is_op("]") && !is_op(",") && !is_op(":")) s->c = parse_expression();
        s->args.emplace_back();
        if (skip_op(":") && !is_op("]") && !is_op(",")) s->args[0] = parse_expression();
        return s;
    }

    void parse_call_args(Expr& call) {
        expect_op("(");
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (is_op(")")) break;
            if (skip_op("**")) { call.star_kwargs = parse_expression(); continue; }
            if (skip_op("*")) { call.star_args = parse_expression(); continue; }
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                std::string key = expect_name();
                p++;
                call.kwargs.emplace_back(key, parse_expression());
                continue;
            }
            if (!call.kwargs.empty() || call.star_args || call.star_kwargs) fail("positional argument after a keyword argument");
            call.args.push_back(parse_expression());
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr callee) {
        ExprPtr n = node(EK::Call);
        n->a = std::move(callee);
        parse_call_args(*n);
        return n;
    }

    ExprPtr parse_filter(ExprPtr input, bool start_inline = false) {
        ExprPtr e = std::move(input);
        do {
            if (!start_inline) expect_op("|");
            start_inline = false;
            ExprPtr f = node(EK::Filter);
            f->name = expect_name();
            while (skip_op(".")) f->name += "." + expect_name();
            bool known = false;
            for (auto& fn : FILTER_NAMES) if (f->name == fn.first) { f->id = uint8_t(fn.second); known = true; }
            if (!known) fail_at(f->line, "no filter named '" + f->name + "'");
            if (is_op("(")) parse_call_args(*f);
            f->a = std::move(e);
            e = std::move(f);
        } while (is_op("|"));
        return e;
    }

    ExprPtr parse_test(ExprPtr input) {
        ExprPtr t = node(EK::Test);
        p++;  // 'is'
        bool negated = skip_name("not");
        if (cur().type == Tok::Name) t->name = expect_name();
        else fail("expected a test name after 'is', found " + describe(cur()));
        while (skip_op(".")) t->name += "." + expect_name();
        bool known = false;
        for (auto& tn : TEST_NAMES) if (t->name == tn.first) { t->id = uint8_t(tn.second); known = true; }
        if (!known) fail_at(t->line, "no test named '" + t->name + "'");
        if (is_op("(")) {
            parse_call_args(*t);
        } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int || cur().type == Tok::Float ||
                    is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail("cannot chain tests with 'is'");
            t->args.push_back(parse_postfix(parse_primary()));
        }
        t->a = std::move(input);
        if (!negated) return t;
        ExprPtr n(new Expr(EK::Unary, t->line));
        n->op = Op::Not;
        n->a = std::move(t);
        return n;
    }

    // ---- statements ----

    // Names (or ns.attr, or a, b) on the left of `=` in set, for and with.
    void parse_target(Stmt& s, bool allow_attr, const char* extra_end) {
        while (true) {
            s.targets.push_back(expect_name());
            if (allow_attr && s.targets.size() == 1 && skip_op(".")) { s.target_attr = expect_name(); return; }
            if (!is_op(",")) break;
            p++;
            s.target_tuple = true;
            if (extra_end && is_name(extra_end)) break;
            if (is_op("=")) break;
        }
        for (auto& t : s.targets)
            if (t == "true" || t == "false" || t == "none" || t == "True" || t == "False" || t == "None")
                fail("cannot assign to '" + t + "'");
    }

    // Statements up to (not including) a block whose tag is one of `ends`; returns that tag's name.
    std::string parse_body(Body& body, std::initializer_list<const char*> ends) {
        DepthGuard g(*this);
        while (true) {
            const Token& t = cur();
            if (t.type == Tok::Eof) {
                if (ends.size() == 0) return "";
                std::string want;
                for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
                fail("unexpected end of template, expected " + want);
            }
            if (t.type == Tok::Data) {
                auto s = std::unique_ptr<Stmt>(new Stmt(SK::Text, t.line));
                s->text = t.text;
                body.push_back(std::move(s));
                p++;
                continue;
            }
            if (t.type == Tok::VarBegin) {
                auto s = std::unique_ptr<Stmt>(new Stmt(SK::Print, t.line));
                p++;
                s->expr = parse_tuple();
                if (cur().type != Tok::VarEnd) fail("expected '}}', found " + describe(cur()));
                p++;
                body.push_back(std::move(s));
                continue;
            }
            if (t.type != Tok::BlockBegin) fail("unexpected " + describe(t));
            const Token& tag = peek();
            if (tag.type != Tok::Name) { p++; fail("expected a tag name after '{%', found " + describe(tag)); }
            for (const char* e : ends) if (tag.text == e) { p += 2; return tag.text; }
            p += 2;
            body.push_back(parse_statement(tag.text, tag.line));
        }
    }

    std::unique_ptr<Stmt> parse_statement(const std::string& tag, int line) {
        auto s = std::unique_ptr<Stmt>(new Stmt(SK::Text, line));
        if (tag == "if") {
            s->kind = SK::If;
            ExprPtr cond = parse_tuple(false);
            while (true) {
                expect_block_end();
                Body b;
                std::string end = parse_body(b, {"elif", "else", "endif"});
                s->branches.emplace_back(std::move(cond), std::move(b));
                if (end == "elif") { cond = parse_tuple(false); continue; }
                if (end == "else") { expect_block_end(); parse_body(s->else_body, {"endif"}); }
                break;
            }
            expect_block_end();
        } else if (tag == "for") {
            s->kind = SK::For;
            parse_target(*s, false, "in");
            if (!skip_name("in")) fail("expected 'in' in a for loop, found " + describe(cur()));
            s->expr = parse_tuple(false, false, "recursive");
            if (skip_name("if")) s->cond = parse_expression();
            if (is_name("recursive")) fail("recursive for loops are not supported");
            expect_block_end();
            loop_depth++;
            std::string end = parse_body(s->body, {"else", "endfor"});
            loop_depth--;
            if (end == "else") { expect_block_end(); parse_body(s->else_body, {"endfor"}); }
            expect_block_end();
        } else if (tag == "set") {
            parse_target(*s, true, nullptr);
            if (skip_op("=")) {
                s->kind = SK::Set;
                s->expr = parse_tuple();
                expect_block_end();
            } else {
                s->kind = SK::SetBlock;
                if (s->target_tuple) fail("a block set assigns one name");
                if (is_op("|")) parse_filter_chain(*s);
                expect_block_end();
                parse_body(s->body, {"endset"});
                expect_block_end();
            }
        } else if (tag == "macro") {
            s->kind = SK::Macro;
            s->name = expect_name();
            parse_params(*s);
            expect_block_end();
            int saved = loop_depth;
            loop_depth = 0;
            parse_body(s->body, {"endmacro"});
            loop_depth = saved;
            expect_block_end();
            scan_special_names(*s);
        } else if (tag == "call") {
            s->kind = SK::CallBlock;
            s->name = "caller";
            if (is_op("(")) parse_params(*s);
            s->expr = parse_expression();
            if (s->expr->kind != EK::Call) fail_at(line, "{% call %} needs a macro call");
            expect_block_end();
            int saved = loop_depth;
            loop_depth = 0;
            parse_body(s->body, {"endcall"});
            loop_depth = saved;
            expect_block_end();
            scan_special_names(*s);
        } else if (tag == "filter") {
            s->kind = SK::FilterBlock;
            parse_filter_chain(*s, true);
            expect_block_end();
            parse_body(s->body, {"endfilter"});
            expect_block_end();
        } else if (tag == "with") {
            s->kind = SK::With;
            while (cur().type != Tok::BlockEnd) {
                if (!s->with_vars.empty()) expect_op(",");
                std::string n = expect_name();
                expect_op("=");
                s->with_vars.emplace_back(n, parse_expression());
            }
            expect_block_end();
            parse_body(s->body, {"endwith"});
            expect_block_end();
        } else if (tag == "generation") {
            s->kind = SK::Generation;  // transformers' extension makes it a call block: a body of its own
            expect_block_end();
            int saved = loop_depth;
            loop_depth = 0;
            parse_body(s->body, {"endgeneration"});
            loop_depth = saved;
            expect_block_end();
        } else if (tag == "break" || tag == "continue") {
            if (loop_depth == 0) fail_at(line, "'" + tag + "' outside a for loop");
            s->kind = tag == "break" ? SK::Break : SK::Continue;
            expect_block_end();
        } else if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" || tag == "block") {
            fail_at(line, "{% " + tag + " %} is not supported (a chat template is rendered on its own)");
        } else {
            fail_at(line, "unknown tag '" + tag + "'");
        }
        return s;
    }

    // `| f(x) | g` after a block set's name, or after {% filter %} (where the first `|` is absent).
    void parse_filter_chain(Stmt& s, bool start_inline = false) {
        ExprPtr chain = parse_filter(nullptr, start_inline);
        // The chain is nested input-first (g(f(x))); keep it flat, innermost first.
        std::vector<ExprPtr> flat;
        while (chain) {
            ExprPtr inner = std::move(chain->a);
            flat.push_back(std::move(chain));
            chain = std::move(inner);
        }
        for (auto it = flat.rbegin(); it != flat.rend(); ++it) s.filters.push_back(std::move(*it));
    }

    void parse_params(Stmt& s) {
        expect_op("(");
        while (!is_op(")")) {
            if (!s.params.empty()) expect_op(",");
            if (is_op(")")) break;
            s.params.push_back(expect_name());
            if (skip_op("=")) s.defaults.push_back(parse_expression());
            else {
                if (!s.defaults.empty() && s.defaults.back()) fail("a parameter without a default follows one with a default");
                s.defaults.emplace_back();
            }
        }
        expect_op(")");
    }

    // jinja2 gives a macro `varargs`, `kwargs` and `caller` only when its body names them.
    static void scan_expr(const Expr* e, Stmt& m) {
        if (!e) return;
        if (e->kind == EK::Name) {
            m.uses_varargs |= e->name == "varargs";
            m.uses_kwargs |= e->name == "kwargs";
            m.uses_caller |= e->name == "caller";
        }
        scan_expr(e->a.get(), m);
        scan_expr(e->b.get(), m);
        scan_expr(e->c.get(), m);
        scan_expr(e->star_args.get(), m);
        scan_expr(e->star_kwargs.get(), m);
        for (auto& x : e->args) scan_expr(x.get(), m);
        for (auto& kv : e->kwargs) scan_expr(kv.second.get(), m);
    }
    static void scan_body(const Body& b, Stmt& m) {
        for (auto& s : b) {
            scan_expr(s->expr.get(), m);
            scan_expr(s->cond.get(), m);
            for (auto& br : s->branches) { scan_expr(br.first.get(), m); scan_body(br.second, m); }
            for (auto& f : s->filters) scan_expr(f.get(), m);
            for (auto& d : s->defaults) scan_expr(d.get(), m);
            for (auto& w : s->with_vars) scan_expr(w.second.get(), m);
            if (s->kind != SK::Macro) { scan_body(s->body, m); scan_body(s->else_body, m); }
        }
    }
    static void scan_special_names(Stmt& m) {
        scan_body(m.body, m);
        for (auto& d : m.defaults) scan_expr(d.get(), m);
    }
};

// The names a template's top level assigns before it reads them. jinja2 compiles the top level into one
// function whose local for such a name starts out undefined rather than as the context's value, so a macro
// or loop body that reads the name before the {% set %} has run sees Undefined even when the caller passed
// a value of that name. A name read first, or set in only some branches of an {% if %}, starts as the
// context's value. Loop, macro, call, filter, with, block-set and generation bodies are frames of their
// own and do not count; this mirrors jinja2's idtracking for the root frame.
struct RootNames {
    std::map<std::string, bool> first_is_store;  // name -> the first thing the top level does with it is a store
    std::set<std::string> stores;

    void load(const std::string& n) { first_is_store.emplace(n, false); }
    void store(const std::string& n) { stores.insert(n); first_is_store.emplace(n, true); }

    void visit(const Expr* e) {
        if (!e) return;
        if (e->kind == EK::Name) load(e->name);
        visit(e->a.get());
        visit(e->b.get());
        visit(e->c.get());
        visit(e->star_args.get());
        visit(e->star_kwargs.get());
        for (auto& x : e->args) visit(x.get());
        for (auto& kv : e->kwargs) visit(kv.second.get());
    }

    // jinja2's Symbols.branch_update (3.1): a name first stored inside an {% if %} branch is read from the
    // context, whichever branches store it.
    void merge(const std::vector<RootNames>& branches) {
        std::set<std::string> new_stores;
        for (auto& b : branches)
            for (auto& n : b.stores) if (!stores.count(n)) new_stores.insert(n);
        for (auto& b : branches) {
            for (auto& kv : b.first_is_store) first_is_store[kv.first] = kv.second;
            stores.insert(b.stores.begin(), b.stores.end());
        }
        for (auto& n : new_stores) first_is_store[n] = false;
    }

    void visit(const Body& body) {
        for (auto& sp : body) {
            const Stmt& st = *sp;
            switch (st.kind) {
                case SK::Print: case SK::For: case SK::CallBlock: visit(st.expr.get()); break;
                case SK::If: {
                    // jinja2's If(test, body, elif_=[If, ...], else_): three branches, the elifs one of them.
                    visit(st.branches[0].first.get());
                    RootNames a = *this, b = *this, c = *this;
                    a.visit(st.branches[0].second);
                    for (size_t k = 1; k < st.branches.size(); k++) {
                        b.visit(st.branches[k].first.get());
                        RootNames x = b, y = b, z = b;
                        x.visit(st.branches[k].second);
                        b.merge({x, y, z});
                    }
                    c.visit(st.else_body);
                    merge({a, b, c});
                    break;
                }
                case SK::Set:
                    visit(st.expr.get());
                    if (!st.target_attr.empty()) load(st.targets[0]);
                    else for (auto& t : st.targets) store(t);
                    break;
                case SK::SetBlock:
                    if (!st.target_attr.empty()) load(st.targets[0]);
                    else store(st.targets[0]);
                    break;
                case SK::Macro: store(st.name); break;
                case SK::FilterBlock: for (auto& f : st.filters) visit(f.get()); break;
                case SK::With: for (auto& kv : st.with_vars) visit(kv.second.get()); break;
                default: break;
            }
        }
    }

    std::vector<std::string> undefined_at_start() const {
        std::vector<std::string> out;
        for (auto& kv : first_is_store) if (kv.second) out.push_back(kv.first);
        return out;
    }
};

// =====================================================================================================
// ---- interpreter ----
// =====================================================================================================

// Variables of one level: the template's top level, one for-loop iteration, one macro call, a with or
// block-set body. jinja2's rules: {% set %} writes the innermost level, so a set inside a loop is gone
// at the next iteration and after the loop; `if` opens no level; a macro sees the level it was defined in.
struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;
    ~Scope() {
        reap(parent);
        for (auto& kv : vars) reap(kv.second);
        drain();
    }
    Value* find(const std::string& n) {
        for (auto& kv : vars) if (kv.first == n) return &kv.second;
        return nullptr;
    }
    void set(const std::string& n, Value v) {
        if (Value* x = find(n)) *x = std::move(v);
        else vars.emplace_back(n, std::move(v));
    }
};
using ScopePtr = std::shared_ptr<Scope>;

struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

// Arguments bound to a Python signature: slot k holds the k-th named parameter if it was given.
struct Bound {
    std::vector<Value> v;
    std::vector<bool> given;
    bool has(size_t k) const { return given[k]; }
    const Value& operator[](size_t k) const { return v[k]; }
};

enum class Flow : uint8_t { Normal, Break, Continue };

static const char* const STR_METHODS[] = {
    "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index", "isalnum", "isalpha",
    "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition",
    "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill"};
static const char* const DICT_METHODS[] = {"copy", "get", "items", "keys", "values"};
static const char* const DICT_UNSAFE[] = {"clear", "pop", "popitem", "setdefault", "update"};
static const char* const LIST_METHODS[] = {"copy", "count", "index"};
static const char* const LIST_UNSAFE[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
inline bool name_in(const std::string& n, const char* const (&names)[N]) {
    for (const char* x : names) if (n == x) return true;
    return false;
}

struct Renderer {
    const std::string& name;
    const Options& opt;
    std::string* out = nullptr;
    uint64_t steps = 0;
    int depth = 0, call_depth = 0, line = 0;

    // Everything a template can mutate (scopes, namespaces, loops) can end up holding itself: a macro
    // keeps the scope it is defined in, which holds the macro; `{% set ns.me = ns %}`. Such cycles of
    // shared_ptrs would leak, so the renderer remembers these objects and empties them when it is done.
    std::vector<std::weak_ptr<Scope>> scopes;
    std::vector<std::weak_ptr<DictObj>> namespaces;
    std::vector<std::weak_ptr<LoopObj>> loops;

    Renderer(const std::string& n, const Options& o) : name(n), opt(o) {}
    Renderer(const Renderer&) = delete;
    Renderer& operator=(const Renderer&) = delete;
    ~Renderer() {
        // Move the contents out before they are destroyed: destroying them may drop the last reference
        // to another tracked object, which must not happen while that object is being cleared.
        std::vector<Value> graveyard;
        for (auto& w : scopes) if (auto sp = w.lock()) { for (auto& kv : sp->vars) graveyard.push_back(std::move(kv.second)); sp->vars.clear(); sp->parent.reset(); }
        for (auto& w : namespaces) if (auto d = w.lock()) { for (auto& kv : d->items) graveyard.push_back(std::move(kv.second)); d->items.clear(); d->index.clear(); }
        for (auto& w : loops) if (auto l = w.lock()) { graveyard.push_back(std::move(l->changed_value)); l->items.reset(); }
    }

    // Tracking costs a weak_ptr per object; the ones already gone are dropped whenever the list doubles.
    template <class X>
    static void track(std::vector<std::weak_ptr<X>>& list, const std::shared_ptr<X>& p) {
        if (list.size() >= 1024 && list.size() == list.capacity())
            list.erase(std::remove_if(list.begin(), list.end(), [](const std::weak_ptr<X>& w) { return w.expired(); }), list.end());
        list.push_back(p);
    }

    ScopePtr new_scope(const ScopePtr& parent) {
        ScopePtr c(new Scope);  // not make_shared: the scope's memory goes when it dies, not with the last weak_ptr
        c->parent = parent;
        track(scopes, c);
        return c;
    }

    // ---- errors and limits ----

    [[noreturn]] void fail(const std::string& msg) const {
        std::string m = msg;
        for (char& c : m) if (c == '\n' || c == '\r') c = ' ';
        die("%s:%d: %s", name.c_str(), line, m.c_str());
    }
    [[noreturn]] void fail_undefined(const Value& u) const {
        if (u.unsafe) fail("SecurityError: " + u.s);
        fail("UndefinedError: " + (u.s.empty() ? std::string("value is undefined") : u.s));
    }
    [[noreturn]] void type_error(const std::string& msg) const { fail("TypeError: " + msg); }

    void tick(uint64_t n = 1) {
        steps += n;
        if (steps > opt.max_steps) fail("the template took more than " + std::to_string(opt.max_steps) + " evaluation steps (an endless loop?)");
    }
    void check_size(size_t n) const {
        if (n > opt.max_output) fail("text longer than " + std::to_string(opt.max_output) + " bytes");
    }
    Value str_value(std::string s) {
        check_size(s.size());
        tick(s.size() / 64);
        return Value::string(std::move(s));
    }
    Value list_value(std::vector<Value> items, Seq seq = Seq::List) {
        if (items.size() > opt.max_list) fail("list longer than " + std::to_string(opt.max_list) + " items");
        tick(items.size());
        return make_list(std::move(items), seq);
    }
    // A string that stays Markup when `src` is one; Markup of a string; a value as Markup would escape it.
    static Value like(const Value& src, std::string s) {
        Value v = Value::string(std::move(s));
        v.markup = src.markup;
        return v;
    }
    static Value markup(std::string s) {
        Value v = Value::string(std::move(s));
        v.markup = true;
        return v;
    }
    static std::string escaped(const Value& v) { return v.is_string() && v.markup ? v.s : html_escape(py_str(v)); }

    void emit(const std::string& s) {
        out->append(s);
        check_size(out->size());
    }

    struct DepthGuard {
        Renderer& r;
        explicit DepthGuard(Renderer& x) : r(x) {
            if (++r.depth > r.opt.max_depth)
                r.fail("RecursionError: evaluation nested deeper than " + std::to_string(r.opt.max_depth) + " levels (runaway recursion?)");
        }
        ~DepthGuard() { r.depth--; }
    };

    // ---- names ----

    Value builtin(Builtin b, const char* n) {
        auto c = std::make_shared<CallableObj>();
        c->what = b;
        c->name = n;
        Value v;
        v.kind = Kind::Callable;
        v.obj = std::move(c);
        return v;
    }

    Value lookup(const std::string& n, Scope* sc) {
        for (Scope* s = sc; s; s = s->parent.get())
            if (Value* v = s->find(n)) return *v;
        if (n == "range") return builtin(Builtin::Range, "range");
        if (n == "namespace") return builtin(Builtin::Namespace, "namespace");
        if (n == "dict") return builtin(Builtin::Dict, "dict");
        if (n == "raise_exception") return builtin(Builtin::RaiseException, "raise_exception");
        if (n == "strftime_now") return builtin(Builtin::StrftimeNow, "strftime_now");
        return Value::undefined("'" + n + "' is undefined");
    }

    // ---- attribute and item access (jinja2's sandboxed getattr / getitem) ----

    Value method(const Value& self, const std::string& n) {
        Value m = builtin(Builtin::Method, n.c_str());
        callable_of(m).self = self;
        return m;
    }
    static Value unsafe(const Value& self, const std::string& n) {
        Value u = Value::undefined("access to attribute '" + n + "' of '" + type_name(self) + "' object is unsafe.");
        u.unsafe = true;
        return u;
    }
    static Value no_attr(const Value& self, const std::string& n) {
        return Value::undefined(std::string("'") + (self.is_none() ? "None" : std::string(type_name(self)) + " object") +
                                "' has no attribute '" + n + "'");
    }

    // obj.name: the attribute (a method), else the item.
    Value get_attr(const Value& obj, const std::string& n) {
        switch (obj.kind) {
            case Kind::Undefined: fail_undefined(obj);
            case Kind::String:
                return name_in(n, STR_METHODS) ? method(obj, n) : no_attr(obj, n);
            case Kind::List:
                if (list_of(obj).seq == Seq::List && name_in(n, LIST_METHODS)) return method(obj, n);
                if (list_of(obj).seq == Seq::List && name_in(n, LIST_UNSAFE)) return unsafe(obj, n);
                if ((list_of(obj).seq == Seq::Tuple || list_of(obj).seq == Seq::Range) && (n == "count" || n == "index")) return method(obj, n);
                return no_attr(obj, n);
            case Kind::Dict: {
                if (name_in(n, DICT_METHODS)) return method(obj, n);
                if (name_in(n, DICT_UNSAFE)) return unsafe(obj, n);
                const Value* v = dict_of(obj).find(Value::string(n));
                return v ? *v : no_attr(obj, n);
            }
            case Kind::Namespace: {
                const Value* v = dict_of(obj).find(Value::string(n));
                return v ? *v : no_attr(obj, n);
            }
            case Kind::Loop: return loop_attr(obj, n);
            case Kind::Bool: case Kind::Int: case Kind::Float:
                if (n == "real") return obj.kind == Kind::Bool ? Value::integer(obj.as_int()) : obj;
                if (n == "imag") return obj.kind == Kind::Float ? Value::number(0.0) : Value::integer(0);
                return no_attr(obj, n);
            default: return no_attr(obj, n);
        }
    }

    // obj[key]: the item, else (for a string key) the attribute.
    Value get_item(const Value& obj, const Value& key) {
        if (obj.is_undefined()) fail_undefined(obj);
        if (obj.kind == Kind::Dict) {
            if (const Value* v = dict_of(obj).find(key)) return *v;
        } else if ((obj.kind == Kind::List || obj.kind == Kind::String) && key.is_int()) {
            if (obj.kind == Kind::List && list_of(obj).seq != Seq::List && list_of(obj).seq != Seq::Tuple && list_of(obj).seq != Seq::Range)
                return Value::undefined("'" + std::string(type_name(obj)) + "' object is not subscriptable");  // generators, dict views
            int64_t k = key.as_int();
            if (obj.kind == Kind::List) {
                const auto& items = list_of(obj).items;
                int64_t n = int64_t(items.size());
                if (k < 0) k += n;
                if (k >= 0 && k < n) return items[size_t(k)];
                return Value::undefined(std::string(type_name(obj)) + " object has no element " + std::to_string(key.as_int()));
            }
            if (is_ascii(obj.s)) {
                int64_t n = int64_t(obj.s.size());
                if (k < 0) k += n;
                if (k >= 0 && k < n) return like(obj, obj.s.substr(size_t(k), 1));
            } else {
                std::vector<uint32_t> cps = code_points(obj.s);
                int64_t n = int64_t(cps.size());
                if (k < 0) k += n;
                if (k >= 0 && k < n) return like(obj, from_code_points(cps, size_t(k), size_t(k) + 1));
            }
            return Value::undefined("str object has no element " + std::to_string(key.as_int()));
        }
        if (key.is_string()) {
            if (obj.kind == Kind::Dict) {
                if (name_in(key.s, DICT_METHODS)) return method(obj, key.s);
                if (name_in(key.s, DICT_UNSAFE)) return unsafe(obj, key.s);
                return no_attr(obj, key.s);
            }
            return get_attr(obj, key.s);
        }
        return Value::undefined(std::string(type_name(obj)) + " object has no element " + py_repr(key));
    }

    Value loop_attr(const Value& lv, const std::string& n) {
        const LoopObj& l = loop_of(lv);
        size_t len = l.items->items.size(), k = l.index0;
        if (n == "index") return Value::integer(int64_t(k + 1));
        if (n == "index0") return Value::integer(int64_t(k));
        if (n == "revindex") return Value::integer(int64_t(len - k));
        if (n == "revindex0") return Value::integer(int64_t(len - k - 1));
        if (n == "first") return Value::boolean(k == 0);
        if (n == "last") return Value::boolean(k + 1 == len);
        if (n == "length") return Value::integer(int64_t(len));
        if (n == "depth") return Value::integer(1);
        if (n == "depth0") return Value::integer(0);
        if (n == "previtem") return k > 0 ? l.items->items[k - 1] : Value::undefined("there is no previous item");
        if (n == "nextitem") return k + 1 < len ? l.items->items[k + 1] : Value::undefined("there is no next item");
        if (n == "cycle" || n == "changed") {
            Value c = builtin(n == "cycle" ? Builtin::LoopCycle : Builtin::LoopChanged, n.c_str());
            callable_of(c).loop = lv.obj;
            return c;
        }
        return no_attr(lv, n);
    }

    // Python's slice.indices and the slice itself, by code point for strings.
    Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
        if (obj.is_undefined()) fail_undefined(obj);
        bool is_str = obj.kind == Kind::String;
        bool is_seq = obj.kind == Kind::List && (list_of(obj).seq == Seq::List || list_of(obj).seq == Seq::Tuple || list_of(obj).seq == Seq::Range);
        if (!is_str && !is_seq) return Value::undefined(std::string(type_name(obj)) + " object cannot be sliced");
        auto index_of = [&](const Value* v, int64_t dflt) -> int64_t {
            if (!v || v->is_none()) return dflt;
            if (v->is_undefined()) fail_undefined(*v);
            if (!v->is_int()) type_error("slice indices must be integers or None");
            return v->as_int();
        };
        int64_t st = index_of(step, 1);
        if (st == 0) fail("ValueError: slice step cannot be zero");
        std::vector<uint32_t> cps;
        bool ascii = is_str && is_ascii(obj.s);
        if (is_str && !ascii) cps = code_points(obj.s);
        int64_t n = is_str ? int64_t(ascii ? obj.s.size() : cps.size()) : int64_t(list_of(obj).items.size());
        auto clamp = [&](int64_t v, bool is_start) {
            if (v < 0) { v += n; if (v < 0) v = st < 0 ? -1 : 0; }
            else if (v >= n) v = st < 0 ? n - 1 : n;
            (void)is_start;
            return v;
        };
        int64_t a = start && !start->is_none() ? clamp(index_of(start, 0), true) : (st < 0 ? n - 1 : 0);
        int64_t b = stop && !stop->is_none() ? clamp(index_of(stop, 0), false) : (st < 0 ? -1 : n);
        if (is_str) {
            std::string r;
            for (int64_t k = a; st > 0 ? k < b : k > b; k += st) {
                if (ascii) r += obj.s[size_t(k)];
                else utf8_append(r, cps[size_t(k)]);
            }
            Value v = str_value(std::move(r));
            v.markup = obj.markup;
            return v;
        }
        std::vector<Value> r;
        for (int64_t k = a; st > 0 ? k < b : k > b; k += st) r.push_back(list_of(obj).items[size_t(k)]);
        return list_value(std::move(r), list_of(obj).seq == Seq::Tuple ? Seq::Tuple : Seq::List);
    }

    // ---- iteration ----

    // The items `for` would see: a list's own items (shared), a dict's keys, a string's characters.
    std::shared_ptr<ListObj> items_of(const Value& v) {
        switch (v.kind) {
            case Kind::List: return std::static_pointer_cast<ListObj>(v.obj);
            case Kind::Undefined: return std::make_shared<ListObj>();
            case Kind::Dict: {
                auto l = std::make_shared<ListObj>();
                for (auto& kv : dict_of(v).items) l->items.push_back(kv.first);
                tick(l->items.size());
                return l;
            }
            case Kind::String: {
                auto l = std::make_shared<ListObj>();
                for (size_t k = 0; k < v.s.size();) {
                    size_t s = k;
                    utf8_next(v.s.data(), v.s.size(), k);
                    l->items.push_back(Value::string(v.s.substr(s, k - s)));  // iterating a Markup gives plain str
                }
                tick(l->items.size());
                return l;
            }
            default: type_error(std::string("'") + type_name(v) + "' object is not iterable");
        }
    }

    // For range-for: keeps the items alive for the whole loop (a temporary shared_ptr in the range
    // expression itself would not be).
    struct Items {
        std::shared_ptr<ListObj> list;
        std::vector<Value>::const_iterator begin() const { return list->items.begin(); }
        std::vector<Value>::const_iterator end() const { return list->items.end(); }
    };
    Items iter(const Value& v) { return Items{items_of(v)}; }

    int64_t length_of(const Value& v) {
        switch (v.kind) {
            case Kind::Undefined: return 0;
            case Kind::String: return int64_t(py_len(v.s));
            case Kind::List:
                if (list_of(v).seq == Seq::Generator) break;
                return int64_t(list_of(v).items.size());
            case Kind::Dict: return int64_t(dict_of(v).items.size());
            default: break;
        }
        type_error(std::string("object of type '") + type_name(v) + "' has no len()");
    }

    // ---- operators ----

    void no_undefined(const Value& a, const Value& b) {
        if (a.is_undefined()) fail_undefined(a);
        if (b.is_undefined()) fail_undefined(b);
    }
    [[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
        type_error(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    }
    // x op y on 64-bit integers, or an OverflowError (Python's integers would simply grow).
    template <class Op2>
    int64_t checked(int64_t x, int64_t y, Op2 op) {
        int64_t r;
        if (op(x, y, &r)) fail("OverflowError: integer result beyond 64 bits");
        return r;
    }
    static bool add_ov(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
    static bool sub_ov(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
    static bool mul_ov(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

    bool py_less(const Value& a, const Value& b, const char* op = "<") {
        no_undefined(a, b);
        if (a.is_number() && b.is_number()) {
            if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
            return a.as_int() < b.as_int();
        }
        if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
        if (a.kind == Kind::List && b.kind == Kind::List && (list_of(a).seq == Seq::Tuple) == (list_of(b).seq == Seq::Tuple) &&
            list_of(a).seq != Seq::Generator && list_of(b).seq != Seq::Generator) {
            const auto &x = list_of(a).items, &y = list_of(b).items;
            for (size_t k = 0; k < x.size() && k < y.size(); k++) {
                if (py_equal(x[k], y[k])) continue;
                return py_less(x[k], y[k], op);
            }
            return x.size() < y.size();
        }
        type_error(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
    }

    bool py_in(const Value& item, const Value& container) {
        switch (container.kind) {
            case Kind::Undefined: return false;
            case Kind::String:
                if (item.is_undefined()) fail_undefined(item);
                if (!item.is_string()) type_error(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
                return container.s.find(item.s) != std::string::npos;
            case Kind::List:
                for (auto& x : list_of(container).items) if (py_equal(x, item)) return true;
                return false;
            case Kind::Dict:
                if (!py_hashable(item)) type_error(std::string("unhashable type: '") + type_name(item) + "'");
                return dict_of(container).find(item) != nullptr;
            default: type_error(std::string("argument of type '") + type_name(container) + "' is not iterable");
        }
    }

    Value repeat(const Value& seq, int64_t n) {
        if (n < 0) n = 0;
        if (seq.is_string()) {
            if (n > 0 && seq.s.size() > opt.max_output / uint64_t(n)) check_size(SIZE_MAX);
            std::string r;
            r.reserve(seq.s.size() * size_t(n));
            for (int64_t k = 0; k < n; k++) r += seq.s;
            Value v = str_value(std::move(r));
            v.markup = seq.markup;
            return v;
        }
        const auto& items = list_of(seq).items;
        if (n > 0 && items.size() > opt.max_list / uint64_t(n)) fail("list longer than " + std::to_string(opt.max_list) + " items");
        std::vector<Value> r;
        for (int64_t k = 0; k < n; k++) r.insert(r.end(), items.begin(), items.end());
        return list_value(std::move(r), list_of(seq).seq == Seq::Tuple ? Seq::Tuple : Seq::List);
    }

    static bool is_plain_seq(const Value& v) {
        return v.kind == Kind::List && (list_of(v).seq == Seq::List || list_of(v).seq == Seq::Tuple);
    }

    Value binop(Op op, const Value& a, const Value& b) {
        if (op == Op::Concat) return str_value(py_str(a) + py_str(b));
        if (op == Op::Mod && a.is_string()) return like(a, percent_format(a.s, b, a.markup));  // str % Undefined works
        no_undefined(a, b);
        bool ints = a.is_int() && b.is_int(), nums = a.is_number() && b.is_number();
        switch (op) {
            case Op::Add:
                if (ints) return Value::integer(checked(a.as_int(), b.as_int(), add_ov));
                if (nums) return Value::number(a.as_double() + b.as_double());
                if (a.is_string() && b.is_string()) {
                    if (!a.markup && !b.markup) return str_value(a.s + b.s);
                    Value r = str_value(escaped(a) + escaped(b));  // Markup + str escapes the str
                    r.markup = true;
                    return r;
                }
                if (is_plain_seq(a) && is_plain_seq(b) && list_of(a).seq == list_of(b).seq) {
                    std::vector<Value> items = list_of(a).items;
                    items.insert(items.end(), list_of(b).items.begin(), list_of(b).items.end());
                    return list_value(std::move(items), list_of(a).seq);
                }
                if (a.is_string()) type_error(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
                if (is_plain_seq(a)) type_error(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
                bad_operands("+", a, b);
            case Op::Sub:
                if (ints) return Value::integer(checked(a.as_int(), b.as_int(), sub_ov));
                if (nums) return Value::number(a.as_double() - b.as_double());
                bad_operands("-", a, b);
            case Op::Mul:
                if (ints) return Value::integer(checked(a.as_int(), b.as_int(), mul_ov));
                if (nums) return Value::number(a.as_double() * b.as_double());
                if ((a.is_string() || is_plain_seq(a)) && b.is_int()) return repeat(a, b.as_int());
                if ((b.is_string() || is_plain_seq(b)) && a.is_int()) return repeat(b, a.as_int());
                bad_operands("*", a, b);
            case Op::Div:
                if (!nums) bad_operands("/", a, b);
                if (b.as_double() == 0) fail("ZeroDivisionError: division by zero");
                return Value::number(a.as_double() / b.as_double());
            case Op::FloorDiv:
                if (!nums) bad_operands("//", a, b);
                if (ints) {
                    int64_t x = a.as_int(), y = b.as_int();
                    if (y == 0) fail("ZeroDivisionError: integer division or modulo by zero");
                    if (x == INT64_MIN && y == -1) fail("OverflowError: integer result beyond 64 bits");
                    int64_t q = x / y;
                    if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                    return Value::integer(q);
                }
                if (b.as_double() == 0) fail("ZeroDivisionError: float floor division by zero");
                return Value::number(std::floor(a.as_double() / b.as_double()));
            case Op::Mod:
                if (!nums) bad_operands("%", a, b);
                if (ints) {
                    int64_t x = a.as_int(), y = b.as_int();
                    if (y == 0) fail("ZeroDivisionError: integer division or modulo by zero");
                    if (y == -1) return Value::integer(0);
                    int64_t m = x % y;
                    if (m != 0 && ((m < 0) != (y < 0))) m += y;
                    return Value::integer(m);
                } else {
                    double x = a.as_double(), y = b.as_double();
                    if (y == 0) fail("ZeroDivisionError: float modulo");
                    double m = std::fmod(x, y);
                    if (m != 0 && ((m < 0) != (y < 0))) m += y;
                    return Value::number(m);
                }
            case Op::Pow:
                if (!nums) bad_operands("** or pow()", a, b);
                if (ints && b.as_int() >= 0) {
                    int64_t base = a.as_int(), e = b.as_int(), acc = 1;
                    while (e > 0) {
                        if (e & 1) acc = checked(acc, base, mul_ov);
                        e >>= 1;
                        if (e) base = checked(base, base, mul_ov);
                    }
                    return Value::integer(acc);
                }
                if (a.as_double() == 0 && b.as_double() < 0) fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
                if (a.as_double() < 0 && std::isfinite(b.as_double()) && b.as_double() != std::floor(b.as_double()))
                    type_error("a negative number to a fractional power is complex in Python (not supported)");
                return Value::number(std::pow(a.as_double(), b.as_double()));
            default: break;
        }
        fail("internal error: bad operator");
    }

    bool compare(Op op, const Value& a, const Value& b) {
        switch (op) {
            case Op::Eq: return py_equal(a, b);
            case Op::Ne: return !py_equal(a, b);
            case Op::Lt: return py_less(a, b, "<");
            case Op::Le: return !py_less(b, a, "<=");
            case Op::Gt: return py_less(b, a, ">");
            case Op::Ge: return !py_less(a, b, ">=");
            case Op::In: return py_in(a, b);
            case Op::NotIn: return !py_in(a, b);
            default: fail("internal error: bad comparison");
        }
    }

    // Python's printf-style "fmt % args": %s %r %d %i %f %e %g %x %o %c %% with flags, width, precision.
    std::string percent_format(const std::string& fmt, const Value& args, bool escape_args) {
        // Python: a tuple gives the arguments; anything else is one argument, and a dict or list (a "mapping"
        // to Python) may also go unused without the "not all arguments converted" error.
        std::vector<Value> list;
        const DictObj* mapping = nullptr;
        bool mapping_like = args.kind == Kind::Dict || args.is_undefined() || (args.kind == Kind::List && list_of(args).seq != Seq::Tuple);
        if (args.kind == Kind::List && list_of(args).seq == Seq::Tuple) list = list_of(args).items;
        else list.push_back(args);
        if (args.kind == Kind::Dict) mapping = &dict_of(args);
        size_t next = 0;
        std::string out;
        for (size_t k = 0; k < fmt.size(); k++) {
            if (fmt[k] != '%') { out += fmt[k]; continue; }
            if (++k >= fmt.size()) fail("ValueError: incomplete format");
            const Value* arg = nullptr;
            if (fmt[k] == '(') {
                size_t e = fmt.find(')', k);
                if (e == std::string::npos || !mapping) fail("ValueError: incomplete format key");
                arg = mapping->find(Value::string(fmt.substr(k + 1, e - k - 1)));
                if (!arg) fail("KeyError: " + fmt.substr(k + 1, e - k - 1));
                k = e + 1;
            }
            std::string spec = "%";
            while (k < fmt.size() && std::strchr("-+ #0", fmt[k])) spec += fmt[k++];
            while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) spec += fmt[k++];
            if (k < fmt.size() && fmt[k] == '.') { spec += fmt[k++]; while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) spec += fmt[k++]; }
            if (k >= fmt.size()) fail("ValueError: incomplete format");
            char conv = fmt[k];
            if (conv == '%') { out += '%'; continue; }
            if (spec.size() > 12) fail("ValueError: format width or precision too large");
            if (!arg) {
                if (next >= list.size()) type_error("not enough arguments for format string");
                arg = &list[next++];
            }
            char buf[512];
            if (conv == 's' || conv == 'r' || conv == 'a') {
                std::string s = conv == 's' ? py_str(*arg) : py_repr(*arg);
                if (escape_args && !(arg->is_string() && arg->markup)) s = html_escape(s);
                std::snprintf(buf, sizeof buf, (spec + "s").c_str(), "");
                size_t width = std::strlen(buf);
                size_t len = py_len(s);
                if (len < width) s = spec.find('-') != std::string::npos ? s + std::string(width - len, ' ') : std::string(width - len, ' ') + s;
                out += s;
            } else if (std::strchr("diouxXc", conv)) {
                if (!arg->is_number()) type_error(std::string("%") + conv + " format: a number is required, not " + type_name(*arg));
                long long v = arg->kind == Kind::Float ? (long long)arg->f : (long long)arg->as_int();
                if (conv == 'c') utf8_append(out, uint32_t(v));
                else { std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), v); out += buf; }
            } else if (std::strchr("eEfFgG", conv)) {
                if (!arg->is_number()) type_error(std::string("must be real number, not ") + type_name(*arg));
                std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg->as_double());
                out += buf;
            } else {
                fail(std::string("ValueError: unsupported format character '") + conv + "'");
            }
            check_size(out.size());
        }
        if (!mapping_like && next < list.size()) type_error("not all arguments converted during string formatting");
        return out;
    }

    // ---- evaluation ----

    Args eval_args(const Expr& e, const ScopePtr& sc) {
        Args a;
        for (auto& x : e.args) a.pos.push_back(eval(*x, sc));
        if (e.star_args) {
            Value v = eval(*e.star_args, sc);
            auto items = items_of(v);
            a.pos.insert(a.pos.end(), items->items.begin(), items->items.end());
        }
        for (auto& kv : e.kwargs) a.kw.emplace_back(kv.first, eval(*kv.second, sc));
        if (e.star_kwargs) {
            Value v = eval(*e.star_kwargs, sc);
            if (v.kind != Kind::Dict) type_error("argument after ** must be a mapping");
            for (auto& kv : dict_of(v).items) {
                if (!kv.first.is_string()) type_error("keywords must be strings");
                a.kw.emplace_back(kv.first.s, kv.second);
            }
        }
        return a;
    }

    Value eval(const Expr& e, const ScopePtr& sc) {
        DepthGuard g(*this);
        tick();
        line = e.line;
        switch (e.kind) {
            case EK::Const: return e.value;
            case EK::Name: return lookup(e.name, sc.get());
            case EK::List: case EK::Tuple: {
                std::vector<Value> items;
                items.reserve(e.args.size());
                for (auto& x : e.args) items.push_back(eval(*x, sc));
                return list_value(std::move(items), e.kind == EK::Tuple ? Seq::Tuple : Seq::List);
            }
            case EK::Dict: {
                auto d = std::make_shared<DictObj>();
                for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
                    Value key = eval(*e.args[k], sc);
                    Value val = eval(*e.args[k + 1], sc);
                    if (!py_hashable(key)) type_error(std::string("unhashable type: '") + type_name(key) + "'");
                    d->set(key, std::move(val));
                }
                tick(d->items.size());
                return make_dict(std::move(d));
            }
            case EK::GetAttr: {
                Value obj = eval(*e.a, sc);
                line = e.line;
                return get_attr(obj, e.name);
            }
            case EK::GetItem: {
                Value obj = eval(*e.a, sc);
                Value key = eval(*e.b, sc);
                line = e.line;
                return get_item(obj, key);
            }
            case EK::Slice: {
                Value obj = eval(*e.a, sc);
                Value start, stop, step;
                if (e.b) start = eval(*e.b, sc);
                if (e.c) stop = eval(*e.c, sc);
                if (e.args[0]) step = eval(*e.args[0], sc);
                line = e.line;
                return slice(obj, e.b ? &start : nullptr, e.c ? &stop : nullptr, e.args[0] ? &step : nullptr);
            }
            case EK::Call: {
                Value f = eval(*e.a, sc);
                Args a = eval_args(e, sc);
                line = e.line;
                return call(f, a);
            }
            case EK::Filter: {
                Value input = eval(*e.a, sc);
                Args a = eval_args(e, sc);
                line = e.line;
                return apply_filter(F(e.id), e.name, input, a, sc);
            }
            case EK::Test: {
                Value v = eval(*e.a, sc);
                Args a = eval_args(e, sc);
                line = e.line;
                return Value::boolean(apply_test(T(e.id), e.name, v, a));
            }
            case EK::Unary: {
                Value v = eval(*e.a, sc);
                line = e.line;
                if (e.op == Op::Not) return Value::boolean(!py_truthy(v));
                if (v.is_undefined()) fail_undefined(v);
                if (v.is_int()) {
                    if (e.op == Op::Pos) return Value::integer(v.as_int());
                    if (v.as_int() == INT64_MIN) fail("OverflowError: integer result beyond 64 bits");
                    return Value::integer(-v.as_int());
                }
                if (v.kind == Kind::Float) return Value::number(e.op == Op::Neg ? -v.f : v.f);
                type_error(std::string("bad operand type for unary ") + (e.op == Op::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
            }
            case EK::Binary: {
                Value a = eval(*e.a, sc);
                if (e.op == Op::And) return py_truthy(a) ? eval(*e.b, sc) : a;
                if (e.op == Op::Or) return py_truthy(a) ? a : eval(*e.b, sc);
                Value b = eval(*e.b, sc);
                line = e.line;
                return binop(e.op, a, b);
            }
            case EK::Compare: {
                Value left = eval(*e.args[0], sc);
                for (size_t k = 0; k < e.ops.size(); k++) {
                    Value right = eval(*e.args[k + 1], sc);
                    line = e.line;
                    if (!compare(e.ops[k], left, right)) return Value::boolean(false);
                    left = std::move(right);
                }
                return Value::boolean(true);
            }
            case EK::Cond:
                if (py_truthy(eval(*e.b, sc))) return eval(*e.a, sc);
                if (e.c) return eval(*e.c, sc);
                return Value::undefined("the condition of an inline if was false and it has no else");
        }
        fail("internal error: bad expression");
    }

    // ---- calls ----

    // Binds positional and keyword arguments to `names` (Python's rules); `what` names the callee in errors.
    Bound bind(const std::string& what, const Args& a, std::initializer_list<const char*> names, size_t required = 0) {
        Bound b;
        size_t n = names.size();
        b.v.resize(n);
        b.given.assign(n, false);
        if (a.pos.size() > n) type_error(what + " takes at most " + std::to_string(n) + " argument(s) (" + std::to_string(a.pos.size()) + " given)");
        for (size_t k = 0; k < a.pos.size(); k++) { b.v[k] = a.pos[k]; b.given[k] = true; }
        for (auto& kv : a.kw) {
            size_t k = 0;
            for (const char* nm : names) { if (kv.first == nm) break; k++; }
            if (k == n) type_error(what + " got an unexpected keyword argument '" + kv.first + "'");
            if (b.given[k]) type_error(what + " got multiple values for argument '" + kv.first + "'");
            b.v[k] = kv.second;
            b.given[k] = true;
        }
        for (size_t k = 0; k < required; k++)
            if (!b.given[k]) type_error(what + " missing required argument '" + *(names.begin() + k) + "'");
        return b;
    }

    int64_t int_arg(const Value& v, const char* what) {
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_int()) type_error(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer (" + what + ")");
        return v.as_int();
    }

    std::string str_arg(const Value& v, const char* what) {
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_string()) type_error(std::string(what) + " must be str, not " + type_name(v));
        return v.s;
    }

    Value call(const Value& f, Args& a) {
        if (f.is_undefined()) fail_undefined(f);
        if (f.kind != Kind::Callable) type_error(std::string("'") + type_name(f) + "' object is not callable");
        const CallableObj& c = callable_of(f);
        switch (c.what) {
            case Builtin::Macro: return call_macro(c, a);
            case Builtin::Method: return call_method(c.self, c.name, a);
            case Builtin::RaiseException: {
                Bound b = bind("raise_exception", a, {"message"}, 1);
                fail("raise_exception: " + py_str(b[0]));
            }
            case Builtin::StrftimeNow: {
                Bound b = bind("strftime_now", a, {"format"}, 1);
                return str_value(strftime_now(str_arg(b[0], "strftime_now() format")));
            }
            case Builtin::Range: return call_range(a);
            case Builtin::Namespace: case Builtin::Dict: {
                std::shared_ptr<DictObj> d(new DictObj);
                if (a.pos.size() > 1) type_error(c.name + " expected at most 1 positional argument");
                if (!a.pos.empty()) {
                    const Value& src = a.pos[0];
                    if (src.kind == Kind::Dict || src.kind == Kind::Namespace) {
                        for (auto& kv : dict_of(src).items) d->set(kv.first, kv.second);
                    } else {
                        for (auto& item : iter(src)) {
                            if (!is_plain_seq(item) || list_of(item).items.size() != 2)
                                fail("ValueError: dictionary update sequence element has the wrong length; 2 is required");
                            d->set(list_of(item).items[0], list_of(item).items[1]);
                        }
                    }
                }
                for (auto& kv : a.kw) d->set(Value::string(kv.first), kv.second);
                tick(d->items.size());
                if (c.what == Builtin::Namespace) track(namespaces, d);
                return make_dict(std::move(d), c.what == Builtin::Namespace ? Kind::Namespace : Kind::Dict);
            }
            case Builtin::LoopCycle: {
                if (a.pos.empty()) type_error("no items for cycling given");
                const LoopObj& l = static_cast<const LoopObj&>(*c.loop);
                return a.pos[l.index0 % a.pos.size()];
            }
            case Builtin::LoopChanged: {
                LoopObj& l = static_cast<LoopObj&>(*c.loop);
                Value now = make_list(a.pos);
                bool changed = !l.has_changed_value || !py_equal(now, l.changed_value);
                l.changed_value = now;
                l.has_changed_value = true;
                return Value::boolean(changed);
            }
        }
        fail("internal error: bad callable");
    }

    Value call_range(const Args& a) {
        if (!a.kw.empty()) type_error("range() takes no keyword arguments");
        if (a.pos.empty() || a.pos.size() > 3) type_error("range expected 1 to 3 arguments");
        int64_t start = 0, stop, step = 1;
        if (a.pos.size() == 1) stop = int_arg(a.pos[0], "range");
        else { start = int_arg(a.pos[0], "range"); stop = int_arg(a.pos[1], "range"); }
        if (a.pos.size() == 3) step = int_arg(a.pos[2], "range");
        if (step == 0) fail("ValueError: range() arg 3 must not be zero");
        // The sandbox's limit: jinja2 refuses ranges of more than 100000 items.
        long double n = step > 0 ? std::ceil((long double)(stop - (long double)start) / step) : std::ceil((long double)(start - (long double)stop) / -step);
        if (n > 100000) fail("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        std::vector<Value> items;
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) items.push_back(Value::integer(k));
        Value v = list_value(std::move(items), Seq::Range);
        list_of(v).range_start = start;
        list_of(v).range_stop = stop;
        list_of(v).range_step = step;
        return v;
    }

    std::string strftime_now(const std::string& fmt) {
        std::tm tm{};
        const char* env = std::getenv("CHAT_TEMPLATE_NOW");
        if (env && *env) {
            int Y = 0, M = 0, D = 0, h = 0, m = 0, s = 0;
            int n = std::sscanf(env, "%4d-%2d-%2d%*1[T ]%2d:%2d:%2d", &Y, &M, &D, &h, &m, &s);
            if (n != 3 && n < 5) fail(std::string("CHAT_TEMPLATE_NOW='") + env + "' is not an ISO 8601 time (2026-01-15T09:30:00)");
            tm.tm_year = Y - 1900; tm.tm_mon = M - 1; tm.tm_mday = D; tm.tm_hour = h; tm.tm_min = m; tm.tm_sec = s;
            time_t t = timegm(&tm);  // normalises the fields and fills in the weekday and day of the year
            gmtime_r(&t, &tm);
        } else {
            time_t t = std::time(nullptr);
            localtime_r(&t, &tm);
        }
        std::string f = fmt + "|";  // strftime cannot tell an empty result from an error without this
        std::vector<char> buf(256);
        while (true) {
            size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
            if (n > 0) return std::string(buf.data(), n - 1);
            if (buf.size() > opt.max_output) fail("strftime_now: result too long");
            buf.resize(buf.size() * 4);
        }
    }

    Value call_macro(const CallableObj& m, const Args& a) {
        const Stmt& def = *m.macro;
        if (call_depth >= opt.max_call_depth)
            fail("RecursionError: macro calls nested deeper than " + std::to_string(opt.max_call_depth));
        struct CallGuard { int& d; explicit CallGuard(int& x) : d(x) { d++; } ~CallGuard() { d--; } } guard(call_depth);
        ScopePtr sc = new_scope(m.closure);
        size_t np = def.params.size();
        std::vector<bool> given(np, false);
        for (size_t k = 0; k < a.pos.size() && k < np; k++) { sc->set(def.params[k], a.pos[k]); given[k] = true; }
        if (a.pos.size() > np && !def.uses_varargs)
            type_error("macro '" + m.name + "' takes not more than " + std::to_string(np) + " argument(s)");
        auto extra_kw = std::make_shared<DictObj>();
        bool have_caller = false;
        for (auto& kv : a.kw) {
            size_t k = 0;
            while (k < np && def.params[k] != kv.first) k++;
            if (k < np) {
                if (given[k]) type_error("macro '" + m.name + "' got multiple values for argument '" + kv.first + "'");
                sc->set(kv.first, kv.second);
                given[k] = true;
            } else if (kv.first == "caller" && def.uses_caller) {
                sc->set("caller", kv.second);
                have_caller = true;
            } else if (def.uses_kwargs) {
                extra_kw->set(Value::string(kv.first), kv.second);
            } else {
                type_error("macro '" + m.name + "' takes no keyword argument '" + kv.first + "'");
            }
        }
        for (size_t k = 0; k < np; k++) {
            if (given[k]) continue;
            if (def.defaults[k]) sc->set(def.params[k], eval(*def.defaults[k], sc));
            else sc->set(def.params[k], Value::undefined("parameter '" + def.params[k] + "' was not provided"));
        }
        if (def.uses_varargs) {
            std::vector<Value> rest;
            for (size_t k = np; k < a.pos.size(); k++) rest.push_back(a.pos[k]);
            sc->set("varargs", make_list(std::move(rest), Seq::Tuple));
        }
        if (def.uses_kwargs) sc->set("kwargs", make_dict(extra_kw));
        if (def.uses_caller && !have_caller) sc->set("caller", Value::undefined("No caller defined"));
        return Value::string(capture(def.body, sc));
    }

    std::string capture(const Body& body, const ScopePtr& sc) {
        std::string buf, *saved = out;
        out = &buf;
        try {
            exec(body, sc);
        } catch (...) {
            out = saved;
            throw;
        }
        out = saved;
        return buf;
    }

    // ---- str, dict and list methods ----

    // Python's str.split(sep, maxsplit) (from the right for rsplit); sep None splits on whitespace runs.
    std::vector<Value> split(const std::string& s, const Value& sep, int64_t maxsplit, bool right) {
        std::vector<std::string> parts;
        if (sep.is_none() || sep.is_undefined()) {
            std::vector<uint32_t> cps = code_points(s);
            std::vector<std::pair<size_t, size_t>> words;  // code point ranges
            size_t k = 0, n = cps.size();
            while (k < n) {
                while (k < n && py_isspace(cps[k])) k++;
                if (k == n) break;
                size_t start = k;
                while (k < n && !py_isspace(cps[k])) k++;
                words.emplace_back(start, k);
            }
            if (maxsplit >= 0 && int64_t(words.size()) > maxsplit + 1) {
                if (!right) {
                    size_t start = words[size_t(maxsplit)].first;
                    size_t end = n;
                    while (end > start && py_isspace(cps[end - 1])) end--;
                    words.resize(size_t(maxsplit));
                    words.emplace_back(start, end);
                } else {
                    size_t keep = words.size() - size_t(maxsplit);
                    size_t start = 0;
                    while (start < n && py_isspace(cps[start])) start++;
                    std::vector<std::pair<size_t, size_t>> w2{{start, words[keep - 1].second}};
                    w2.insert(w2.end(), words.begin() + long(keep), words.end());
                    words = w2;
                }
            }
            std::vector<Value> out_items;
            for (auto& w : words) out_items.push_back(Value::string(from_code_points(cps, w.first, w.second)));
            return out_items;
        }
        std::string d = str_arg(sep, "separator");
        if (d.empty()) fail("ValueError: empty separator");
        if (!right) {
            size_t start = 0;
            while (true) {
                size_t hit = s.find(d, start);
                if (hit == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit)) break;
                parts.push_back(s.substr(start, hit - start));
                start = hit + d.size();
            }
            parts.push_back(s.substr(start));
        } else {
            size_t end = s.size();
            std::vector<std::string> rev;
            while (true) {
                if (end < d.size()) break;
                size_t hit = s.rfind(d, end - d.size());
                if (hit == std::string::npos || (maxsplit >= 0 && int64_t(rev.size()) >= maxsplit)) break;
                rev.push_back(s.substr(hit + d.size(), end - hit - d.size()));
                end = hit;
            }
            rev.push_back(s.substr(0, end));
            parts.assign(rev.rbegin(), rev.rend());
        }
        tick(parts.size());
        std::vector<Value> out_items;
        for (auto& p : parts) out_items.push_back(Value::string(std::move(p)));
        return out_items;
    }

    // Python's str.strip(chars): whitespace, or any of the code points in chars, off either end.
    std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
        std::vector<uint32_t> set;
        bool ws = chars.is_none() || chars.is_undefined();
        if (!ws) set = code_points(str_arg(chars, "strip arg"));
        auto strippable = [&](uint32_t c) { return ws ? py_isspace(c) : std::find(set.begin(), set.end(), c) != set.end(); };
        size_t a = 0, b = s.size();
        while (left && a < b) {
            size_t q = a;
            if (!strippable(utf8_next(s.data(), s.size(), q))) break;
            a = q;
        }
        while (right && b > a) {
            size_t r = utf8_back(s, b);
            size_t q = r;
            if (!strippable(utf8_next(s.data(), s.size(), q)) || q != b) break;
            b = r;
        }
        return s.substr(a, b - a);
    }

    // str.replace(old, new, count): an empty `old` inserts `new` around every character, as Python does.
    std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
        std::string r;
        int64_t done = 0;
        if (from.empty()) {
            size_t k = 0;
            while (true) {
                if (count < 0 || done < count) { r += to; done++; }
                if (k >= s.size()) break;
                size_t q = k;
                utf8_next(s.data(), s.size(), q);
                r.append(s, k, q - k);
                k = q;
                check_size(r.size());
            }
            return r;
        }
        size_t start = 0;
        while (count < 0 || done < count) {
            size_t hit = s.find(from, start);
            if (hit == std::string::npos) break;
            r.append(s, start, hit - start);
            r += to;
            start = hit + from.size();
            done++;
            check_size(r.size());
        }
        r.append(s, start, std::string::npos);
        return r;
    }

    // str.splitlines(): Python's line boundaries (\n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029).
    std::vector<std::string> splitlines(const std::string& s, bool keepends) {
        std::vector<std::string> lines;
        size_t start = 0, k = 0;
        while (k < s.size()) {
            size_t q = k;
            uint32_t c = utf8_next(s.data(), s.size(), q);
            bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 || c == 0x2029;
            if (!brk) { k = q; continue; }
            size_t end = q;
            if (c == '\r' && q < s.size() && s[q] == '\n') end = q + 1;
            lines.push_back(s.substr(start, (keepends ? end : k) - start));
            start = k = end;
        }
        if (start < s.size()) lines.push_back(s.substr(start));
        return lines;
    }

    // format(value, spec): Python's format mini-language [[fill]align][sign][#][0][width][,|_][.prec][type]
    // for str, int and float (what str.format fields need).
    std::string format_spec(const Value& v, const std::string& spec) {
        if (spec.empty()) return py_str(v);
        if (v.is_undefined()) fail_undefined(v);
        size_t k = 0;
        std::string fill = " ";
        char align = 0, sign = '-', type = 0, grouping = 0;
        bool alt = false, zero = false;
        int64_t width = 0, prec = -1;
        auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
        size_t first_len = 1;
        while (first_len < 4 && first_len < spec.size() && (static_cast<unsigned char>(spec[first_len]) & 0xC0) == 0x80) first_len++;
        if (spec.size() > first_len && is_align(spec[first_len])) { fill = spec.substr(0, first_len); align = spec[first_len]; k = first_len + 1; }
        else if (is_align(spec[0])) { align = spec[0]; k = 1; }
        if (k < spec.size() && (spec[k] == '+' || spec[k] == '-' || spec[k] == ' ')) sign = spec[k++];
        if (k < spec.size() && spec[k] == '#') { alt = true; k++; }
        if (k < spec.size() && spec[k] == '0') { zero = true; k++; }
        while (k < spec.size() && std::isdigit(static_cast<unsigned char>(spec[k]))) width = std::min<int64_t>(width * 10 + (spec[k++] - '0'), INT32_MAX);
        if (k < spec.size() && (spec[k] == ',' || spec[k] == '_')) grouping = spec[k++];
        if (k < spec.size() && spec[k] == '.') {
            prec = 0;
            k++;
            while (k < spec.size() && std::isdigit(static_cast<unsigned char>(spec[k]))) prec = std::min<int64_t>(prec * 10 + (spec[k++] - '0'), INT32_MAX);
        }
        if (k < spec.size()) type = spec[k++];
        if (k != spec.size()) fail("ValueError: Invalid format specifier '" + spec + "'");
        if (width > int64_t(opt.max_output)) check_size(SIZE_MAX);
        if (prec > 1000 && v.kind == Kind::Float) fail("ValueError: precision too big");
        std::string body, prefix;
        bool numeric = false;
        if (v.is_string() && (type == 0 || type == 's')) {
            body = v.s;
            if (prec >= 0) body = from_code_points(code_points(body), 0, size_t(prec));
        } else if (v.is_int() && (type == 0 || std::strchr("dxXobcn", type))) {
            numeric = true;
            int64_t x = v.as_int();
            uint64_t mag = x < 0 ? uint64_t(0) - uint64_t(x) : uint64_t(x);
            if (x < 0) prefix = "-";
            else if (sign != '-') prefix = std::string(1, sign);
            char buf[80];
            if (type == 'c') { body.clear(); utf8_append(body, uint32_t(x)); numeric = false; prefix.clear(); }
            else if (type == 'x' || type == 'X' || type == 'o') {
                std::snprintf(buf, sizeof buf, type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", (unsigned long long)mag);
                body = buf;
                if (alt) prefix += type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
            } else if (type == 'b') {
                do { body.insert(body.begin(), char('0' + (mag & 1))); mag >>= 1; } while (mag);
                if (alt) prefix += "0b";
            } else {
                body = std::to_string(mag);
            }
            if (grouping && (type == 0 || type == 'd' || type == 'n'))
                for (int64_t at = int64_t(body.size()) - 3; at > 0; at -= 3) body.insert(size_t(at), 1, grouping);
        } else if (v.is_number() && (type == 0 || std::strchr("eEfFgG%", type))) {
            numeric = true;
            double x = v.as_double();
            if (std::signbit(x) && !std::isnan(x)) { prefix = "-"; x = -x; }
            else if (sign != '-') prefix = std::string(1, sign);
            char buf[1400];
            if (type == 0 && prec < 0) body = py_float_repr(x);
            else if (type == '%') { std::snprintf(buf, sizeof buf, "%.*f%%", int(prec < 0 ? 6 : prec), x * 100); body = buf; }
            else {
                std::string f = std::string("%") + (alt ? "#" : "") + ".*" + (type == 0 ? 'g' : type);
                std::snprintf(buf, sizeof buf, f.c_str(), int(prec < 0 ? 6 : prec), x);
                body = buf;
            }
            if (grouping) {
                size_t dot = body.find_first_of(".eE%");
                size_t int_end = dot == std::string::npos ? body.size() : dot;
                for (int64_t at = int64_t(int_end) - 3; at > 0; at -= 3) body.insert(size_t(at), 1, grouping);
            }
        } else {
            type_error(std::string("unsupported format string passed to ") + type_name(v) + ".__format__");
        }
        int64_t len = int64_t(py_len(prefix) + py_len(body));
        if (zero && !align && numeric) { fill = "0"; align = '='; }
        if (!align) align = numeric ? '>' : '<';
        if (len >= width) return prefix + body;
        int64_t pad = width - len, left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
        std::string lpad, rpad;
        for (int64_t q = 0; q < left; q++) lpad += fill;
        for (int64_t q = left; q < pad; q++) rpad += fill;
        if (align == '=') return prefix + lpad + body + rpad;
        return lpad + prefix + body + rpad;
    }

    // str.format: {} / {0} / {name} fields with .attr and [key] lookups, !r / !s, and format specs.
    std::string str_format(const std::string& fmt, const Args& a) {
        std::string r;
        size_t auto_index = 0;
        bool manual = false, automatic = false;
        for (size_t k = 0; k < fmt.size(); k++) {
            char c = fmt[k];
            if (c == '}') {
                if (k + 1 < fmt.size() && fmt[k + 1] == '}') { r += '}'; k++; continue; }
                fail("ValueError: Single '}' encountered in format string");
            }
            if (c != '{') { r += c; continue; }
            if (k + 1 < fmt.size() && fmt[k + 1] == '{') { r += '{'; k++; continue; }
            size_t e = fmt.find('}', k);
            if (e == std::string::npos) fail("ValueError: Single '{' encountered in format string");
            std::string field = fmt.substr(k + 1, e - k - 1), spec;
            size_t colon = field.find(':');
            if (colon != std::string::npos) { spec = field.substr(colon + 1); field = field.substr(0, colon); }
            char conv = 's';
            size_t bang = field.find('!');
            if (bang != std::string::npos) { conv = bang + 1 < field.size() ? field[bang + 1] : 's'; field = field.substr(0, bang); }
            size_t name_end = field.find_first_of(".[");
            std::string arg = field.substr(0, name_end);
            Value v;
            if (arg.empty()) {
                if (manual) fail("ValueError: cannot switch from manual field specification to automatic field numbering");
                automatic = true;
                if (auto_index >= a.pos.size()) fail("IndexError: Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
                v = a.pos[auto_index++];
            } else if (std::all_of(arg.begin(), arg.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; })) {
                if (automatic) fail("ValueError: cannot switch from automatic field numbering to manual field specification");
                manual = true;
                size_t idx = std::strtoul(arg.c_str(), nullptr, 10);
                if (arg.size() > 6 || idx >= a.pos.size()) fail("IndexError: Replacement index " + arg + " out of range for positional args tuple");
                v = a.pos[idx];
            } else {
                bool found = false;
                for (auto& kv : a.kw) if (kv.first == arg) { v = kv.second; found = true; }
                if (!found) fail("KeyError: '" + arg + "'");
            }
            for (size_t q = name_end; q != std::string::npos && q < field.size();) {
                if (field[q] == '.') {
                    size_t nx = field.find_first_of(".[", q + 1);
                    v = get_attr(v, field.substr(q + 1, nx == std::string::npos ? std::string::npos : nx - q - 1));
                    q = nx;
                } else {
                    size_t close = field.find(']', q);
                    if (close == std::string::npos) fail("ValueError: Missing ']' in format string");
                    std::string key = field.substr(q + 1, close - q - 1);
                    bool digits = !key.empty() && key.size() < 18 && std::all_of(key.begin(), key.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
                    v = get_item(v, digits ? Value::integer(std::atoll(key.c_str())) : Value::string(key));
                    q = close + 1;
                }
            }
            if (conv == 'r') v = Value::string(py_repr(v));
            else if (conv == 's' && bang != std::string::npos) v = Value::string(py_str(v));
            r += format_spec(v, spec);
            check_size(r.size());
            k = e;
        }
        return r;
    }

    // A method of a Markup string, as markupsafe wraps them: string arguments escaped (join's and format's
    // items too), string results Markup.
    Value call_markup_method(const Value& self, const std::string& m, const Args& a) {
        static const char* const WRAPPED[] = {"capitalize", "center", "format", "join", "ljust", "lower", "lstrip", "partition",
                                              "replace", "rjust", "rpartition", "rstrip", "strip", "swapcase", "title", "upper", "zfill"};
        Value plain = self;
        plain.markup = false;
        bool wrapped = name_in(m, WRAPPED);
        Args e = a;
        if (wrapped) {
            auto esc = [](Value& v) { if (v.is_string() && !v.markup) v.s = html_escape(v.s); };
            if (m == "join" && !e.pos.empty()) {
                std::vector<Value> items;
                for (auto& x : iter(e.pos[0])) items.push_back(markup(escaped(x)));
                e.pos[0] = make_list(std::move(items));
            } else if (m == "format") {
                for (auto& v : e.pos) if (!(v.is_string() && v.markup)) v = markup(escaped(v));
                for (auto& kv : e.kw) if (!(kv.second.is_string() && kv.second.markup)) kv.second = markup(escaped(kv.second));
            } else {
                for (auto& v : e.pos) esc(v);
                for (auto& kv : e.kw) esc(kv.second);
            }
        }
        Value r = call_method(plain, m, e);
        bool splits = m == "split" || m == "rsplit" || m == "splitlines";
        if ((wrapped || splits) && r.kind == Kind::List)
            for (auto& x : list_of(r).items) x.markup = x.is_string();
        if (wrapped && r.is_string()) r.markup = true;
        return r;
    }

    Value call_method(const Value& self, const std::string& m, const Args& a) {
        if (self.is_string() && self.markup) return call_markup_method(self, m, a);
        std::string what = std::string(type_name(self)) + "." + m + "()";
        if (self.kind == Kind::Dict) {
            const DictObj& d = dict_of(self);
            if (m == "get") {
                Bound b = bind(what, a, {"key", "default"}, 1);
                const Value* v = d.find(b[0]);
                return v ? *v : (b.has(1) ? b[1] : Value::none());
            }
            std::vector<Value> items;
            if (m == "copy") { auto c = std::make_shared<DictObj>(d); return make_dict(c); }
            bind(what, a, {});
            for (auto& kv : d.items) {
                if (m == "keys") items.push_back(kv.first);
                else if (m == "values") items.push_back(kv.second);
                else items.push_back(make_list({kv.first, kv.second}, Seq::Tuple));
            }
            return list_value(std::move(items), m == "keys" ? Seq::DictKeys : m == "values" ? Seq::DictValues : Seq::DictItems);
        }
        if (self.kind == Kind::List) {
            const auto& items = list_of(self).items;
            if (m == "copy") { bind(what, a, {}); return list_value(items); }
            Bound b = bind(what, a, {"value"}, 1);
            if (m == "count") {
                int64_t n = 0;
                for (auto& x : items) n += py_equal(x, b[0]);
                return Value::integer(n);
            }
            for (size_t k = 0; k < items.size(); k++) if (py_equal(items[k], b[0])) return Value::integer(int64_t(k));
            fail("ValueError: " + py_repr(b[0]) + " is not in list");
        }
        const std::string& s = self.s;
        if (m == "format") return str_value(str_format(s, a));
        if (m == "startswith" || m == "endswith") {
            Bound b = bind(what, a, {"prefix"}, 1);
            std::vector<Value> options = is_plain_seq(b[0]) ? list_of(b[0]).items : std::vector<Value>{b[0]};
            for (auto& o : options) {
                std::string p = str_arg(o, (m + " arg").c_str());
                bool hit = m == "startswith" ? s.compare(0, p.size(), p) == 0
                                             : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
                if (hit) return Value::boolean(true);
            }
            return Value::boolean(false);
        }
        if (m == "split" || m == "rsplit") {
            Bound b = bind(what, a, {"sep", "maxsplit"});
            int64_t maxsplit = b.has(1) ? int_arg(b[1], "maxsplit") : -1;
            return list_value(split(s, b.has(0) ? b[0] : Value::none(), maxsplit, m == "rsplit"));
        }
        if (m == "splitlines") {
            Bound b = bind(what, a, {"keepends"});
            std::vector<Value> items;
            for (auto& l : splitlines(s, b.has(0) && py_truthy(b[0]))) items.push_back(Value::string(l));
            return list_value(std::move(items));
        }
        if (m == "strip" || m == "lstrip" || m == "rstrip") {
            Bound b = bind(what, a, {"chars"});
            return Value::string(strip(s, b.has(0) ? b[0] : Value::none(), m != "rstrip", m != "lstrip"));
        }
        if (m == "lower" || m == "casefold") { bind(what, a, {}); return Value::string(py_lower(s)); }
        if (m == "upper") { bind(what, a, {}); return Value::string(py_upper(s)); }
        if (m == "title") { bind(what, a, {}); return Value::string(py_title(s)); }
        if (m == "capitalize") { bind(what, a, {}); return Value::string(py_capitalize(s)); }
        if (m == "swapcase") {
            bind(what, a, {});
            return Value::string(map_code_points(s, [](uint32_t c) { return case_lower(c) != c ? case_lower(c) : case_upper(c); }));
        }
        if (m == "replace") {
            Bound b = bind(what, a, {"old", "new", "count"}, 2);
            return str_value(replace(s, str_arg(b[0], "replace() old"), str_arg(b[1], "replace() new"), b.has(2) ? int_arg(b[2], "count") : -1));
        }
        if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
            Bound b = bind(what, a, {"sub"}, 1);
            std::string sub = str_arg(b[0], "must be str");
            if (m == "count") {
                if (sub.empty()) return Value::integer(int64_t(py_len(s)) + 1);
                int64_t n = 0;
                for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) n++;
                return Value::integer(n);
            }
            size_t at = m[0] == 'r' ? s.rfind(sub) : s.find(sub);
            if (at == std::string::npos) {
                if (m == "index" || m == "rindex") fail("ValueError: substring not found");
                return Value::integer(-1);
            }
            return Value::integer(int64_t(py_len(s.substr(0, at))));
        }
        if (m == "join") {
            Bound b = bind(what, a, {"iterable"}, 1);
            std::string r;
            bool first = true;
            for (auto& x : iter(b[0])) {
                if (!x.is_string()) type_error(std::string("sequence item: expected str instance, ") + type_name(x) + " found");
                if (!first) r += s;
                r += x.s;
                first = false;
                check_size(r.size());
            }
            return str_value(std::move(r));
        }
        if (m == "removeprefix" || m == "removesuffix") {
            Bound b = bind(what, a, {"affix"}, 1);
            std::string p = str_arg(b[0], m.c_str());
            if (m == "removeprefix" && s.compare(0, p.size(), p) == 0) return Value::string(s.substr(p.size()));
            if (m == "removesuffix" && !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
                return Value::string(s.substr(0, s.size() - p.size()));
            return self;
        }
        if (m == "partition" || m == "rpartition") {
            Bound b = bind(what, a, {"sep"}, 1);
            std::string p = str_arg(b[0], m.c_str());
            if (p.empty()) fail("ValueError: empty separator");
            size_t at = m == "partition" ? s.find(p) : s.rfind(p);
            if (at == std::string::npos)
                return m == "partition" ? make_list({self, Value::string(""), Value::string("")}, Seq::Tuple)
                                        : make_list({Value::string(""), Value::string(""), self}, Seq::Tuple);
            return make_list({Value::string(s.substr(0, at)), b[0], Value::string(s.substr(at + p.size()))}, Seq::Tuple);
        }
        if (m == "center" || m == "ljust" || m == "rjust" || m == "zfill") {
            Bound b = bind(what, a, {"width", "fillchar"}, 1);
            int64_t width = int_arg(b[0], "width");
            if (width > int64_t(opt.max_output)) check_size(SIZE_MAX);
            std::string fill = b.has(1) ? str_arg(b[1], "fillchar") : (m == "zfill" ? "0" : " ");
            int64_t len = int64_t(py_len(s));
            if (width <= len) return self;
            int64_t marg = width - len;
            int64_t left = m == "ljust" ? 0 : m == "center" ? marg / 2 + (marg & width & 1) : marg;
            std::string r;
            for (int64_t k = 0; k < left; k++) r += fill;
            if (m == "zfill" && !s.empty() && (s[0] == '-' || s[0] == '+')) r = s.substr(0, 1) + r + s.substr(1);
            else r += s;
            for (int64_t k = left; k < marg; k++) r += fill;
            return str_value(std::move(r));
        }
        // the is...() predicates
        bind(what, a, {});
        std::vector<uint32_t> cps = code_points(s);
        auto all = [&](auto pred) { return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred); };
        auto cat = [](uint32_t c) { return ucat_bit(unicode_category(c)); };
        if (m == "isdigit" || m == "isdecimal" || m == "isnumeric")
            return Value::boolean(all([&](uint32_t c) { return (cat(c) & ucat_bit(UC_Nd)) != 0 || (m == "isnumeric" && (cat(c) & UCAT_N)); }));
        if (m == "isalpha") return Value::boolean(all([&](uint32_t c) { return (cat(c) & UCAT_L) != 0; }));
        if (m == "isalnum") return Value::boolean(all([&](uint32_t c) { return (cat(c) & (UCAT_L | UCAT_N)) != 0; }));
        if (m == "isspace") return Value::boolean(all([](uint32_t c) { return py_isspace(c); }));
        bool any_cased = std::any_of(cps.begin(), cps.end(), [](uint32_t c) { return is_cased_letter(c); });
        if (m == "islower") return Value::boolean(any_cased && py_lower(s) == s);
        if (m == "isupper") return Value::boolean(any_cased && py_upper(s) == s);
        if (m == "istitle") return Value::boolean(any_cased && py_title(s) == s);
        fail("AttributeError: '" + std::string(type_name(self)) + "' object has no attribute '" + m + "'");
    }

    // ---- filters ----

    // item.a.b (or item[0]): jinja2's attribute getter for map, selectattr, sort, unique, sum, join.
    Value attr_path(const Value& item, const Value& path) {
        if (path.is_int()) return get_item(item, path);
        std::string p = str_arg(path, "attribute");
        Value v = item;
        size_t start = 0;
        while (true) {
            size_t dot = p.find('.', start);
            std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
            bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
            v = digits && part.size() < 18 ? get_item(v, Value::integer(std::atoll(part.c_str()))) : get_item(v, Value::string(part));
            if (dot == std::string::npos) return v;
            start = dot + 1;
        }
    }

    // The sort key of jinja2's case-insensitive filters (sort, dictsort, unique, min, max).
    static Value fold_case(const Value& v, bool case_sensitive) {
        return !case_sensitive && v.is_string() ? Value::string(py_lower(v.s)) : v;
    }

    static bool find_filter(const std::string& n, F& f) {
        for (auto& x : FILTER_NAMES) if (n == x.first) { f = x.second; return true; }
        return false;
    }
    static bool find_test(const std::string& n, T& t) {
        for (auto& x : TEST_NAMES) if (n == x.first) { t = x.second; return true; }
        return false;
    }

    // select / reject / selectattr / rejectattr: keep the items whose (attribute's) test passes (fails).
    Value select(const Value& in, const Args& a, bool by_attr, bool keep_when, const std::string& what) {
        if (!py_truthy(in)) return list_value({}, Seq::Generator);  // jinja2: `if value:` before anything else
        size_t off = by_attr ? 1 : 0;
        if (by_attr && a.pos.empty()) fail("FilterArgumentError: Missing parameter for attribute name");
        bool has_test = a.pos.size() > off;
        T test = T::Defined;
        Args targs;
        std::string tname;
        if (has_test) {
            tname = str_arg(a.pos[off], (what + " test name").c_str());
            if (!find_test(tname, test)) fail("TemplateRuntimeError: No test named '" + tname + "'.");
            targs.pos.assign(a.pos.begin() + long(off) + 1, a.pos.end());
            targs.kw = a.kw;
        }
        std::vector<Value> kept;
        for (auto& item : iter(in)) {
            tick();
            Value v = by_attr ? attr_path(item, a.pos[0]) : item;
            bool pass = has_test ? apply_test(test, tname, v, targs) : py_truthy(v);
            if (pass == keep_when) kept.push_back(item);
        }
        return list_value(std::move(kept), Seq::Generator);
    }

    Value map(const Value& in, const Args& a, const ScopePtr& sc) {
        std::vector<Value> out_items;
        if (!py_truthy(in)) return list_value({}, Seq::Generator);  // jinja2: `if value:` before anything else
        if (a.pos.empty()) {
            Value attribute, dflt;
            bool have_attr = false;
            for (auto& kv : a.kw) {
                if (kv.first == "attribute") { attribute = kv.second; have_attr = true; }
                else if (kv.first == "default") dflt = kv.second;
                else fail("FilterArgumentError: Unexpected keyword argument '" + kv.first + "'");
            }
            if (!have_attr) fail("FilterArgumentError: map requires a filter argument");
            for (auto& item : iter(in)) {
                Value v = attr_path(item, attribute);
                out_items.push_back(v.is_undefined() && !dflt.is_undefined() && !dflt.is_none() ? dflt : v);
            }
        } else {
            std::string fname = str_arg(a.pos[0], "map filter name");
            F f;
            if (!find_filter(fname, f)) fail("TemplateRuntimeError: No filter named '" + fname + "'.");
            Args fargs;
            fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
            fargs.kw = a.kw;
            for (auto& item : iter(in)) out_items.push_back(apply_filter(f, fname, item, fargs, sc));
        }
        return list_value(std::move(out_items), Seq::Generator);
    }

    // Python's round(x, n) (half to even on the exact binary value, like CPython) for the round filter.
    Value round_value(const Value& v, int64_t precision, const std::string& method) {
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) type_error(std::string("type ") + type_name(v) + " doesn't define __round__ method");
        if (method == "common") {
            if (v.is_int()) {
                if (precision >= 0) return Value::integer(v.as_int());
                if (precision < -18) return Value::integer(0);
                int64_t p = 1;
                for (int64_t k = 0; k < -precision; k++) p *= 10;
                int64_t x = v.as_int(), q = x / p, r = x % p;
                if (r < 0) { r += p; q--; }
                if (2 * r > p || (2 * r == p && (q & 1))) q++;
                return Value::integer(q * p);
            }
            double x = v.f;
            if (!std::isfinite(x)) return Value::number(x);
            if (precision >= 0) {
                if (precision > 300) return Value::number(x);
                char buf[400];
                std::snprintf(buf, sizeof buf, "%.*f", int(precision), x);
                return Value::number(std::strtod(buf, nullptr));
            }
            double p = std::pow(10.0, double(-precision));
            return Value::number(std::nearbyint(x / p) * p);
        }
        if (method != "ceil" && method != "floor") fail("FilterArgumentError: method must be common, ceil or floor");
        double p = std::pow(10.0, double(precision));
        double x = v.as_double() * p;
        x = method == "ceil" ? std::ceil(x) : std::floor(x);
        return Value::number(x / p);
    }

    // Python's int(str, base), for the int filter; false if the text is not an integer.
    static bool parse_py_int(std::string s, int base, int64_t& out) {
        size_t a = 0, b = s.size();
        while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) a++;
        while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) b--;
        s = s.substr(a, b - a);
        bool neg = false;
        size_t k = 0;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
        if ((base == 16 || base == 8 || base == 2) && k + 1 < s.size() && s[k] == '0' &&
            std::tolower(static_cast<unsigned char>(s[k + 1])) == (base == 16 ? 'x' : base == 8 ? 'o' : 'b'))
            k += 2;
        std::string digits;
        for (; k < s.size(); k++) {
            if (s[k] == '_' && !digits.empty() && k + 1 < s.size() && s[k + 1] != '_') continue;
            digits += s[k];
        }
        if (digits.empty() || base < 2 || base > 36) return false;
        errno = 0;
        char* end = nullptr;
        long long v = std::strtoll(digits.c_str(), &end, base);
        if (*end || errno || !std::isalnum(static_cast<unsigned char>(digits[0]))) return false;
        out = neg ? -v : v;
        return true;
    }

    // Python's float(str): decimal, exponent, inf and nan spellings; false otherwise.
    static bool parse_py_float(std::string s, double& out) {
        size_t a = 0, b = s.size();
        while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) a++;
        while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) b--;
        s = s.substr(a, b - a);
        if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return false;
        std::string t;
        for (size_t k = 0; k < s.size(); k++) {
            if (s[k] == '_') {
                if (k == 0 || k + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[k - 1])) || !std::isdigit(static_cast<unsigned char>(s[k + 1]))) return false;
                continue;
            }
            t += s[k];
        }
        std::string low = py_lower(t);
        size_t sign = (low[0] == '+' || low[0] == '-') ? 1 : 0;
        std::string word = low.substr(sign);
        if (word == "inf" || word == "infinity" || word == "nan") {
            out = word == "nan" ? NAN : INFINITY;
            if (low[0] == '-') out = -out;
            return true;
        }
        char* end = nullptr;
        out = std::strtod(t.c_str(), &end);
        return *end == 0 && word.find_first_not_of("0123456789.e+-") == std::string::npos;
    }

    std::string indent(const std::string& s0, const Value& width, bool first, bool blank) {
        std::string ind;
        if (width.is_string()) ind = width.s;
        else {
            int64_t w = int_arg(width, "indent width");
            if (w > int64_t(opt.max_output)) check_size(SIZE_MAX);
            ind.assign(size_t(std::max<int64_t>(w, 0)), ' ');
        }
        std::vector<std::string> lines = splitlines(s0 + "\n", false);
        std::string r;
        for (size_t k = 0; k < lines.size(); k++) {
            if (k > 0) r += blank || !lines[k].empty() ? "\n" + ind : "\n";
            r += lines[k];
            check_size(r.size());
        }
        if (first) r = ind + r;
        return r;
    }

    Value apply_filter(F f, const std::string& fname, const Value& in, const Args& a, const ScopePtr& sc) {
        tick();
        std::string what = "filter '" + fname + "'";
        switch (f) {
            case F::Abs: {
                bind(what, a, {});
                if (in.is_undefined()) fail_undefined(in);
                if (in.is_int()) {
                    if (in.as_int() == INT64_MIN) fail("OverflowError: integer result beyond 64 bits");
                    return Value::integer(std::llabs(in.as_int()));
                }
                if (in.kind == Kind::Float) return Value::number(std::fabs(in.f));
                type_error(std::string("bad operand type for abs(): '") + type_name(in) + "'");
            }
            case F::Attr: {
                Bound b = bind(what, a, {"name"}, 1);
                std::string n = py_str(b[0]);
                if (in.kind == Kind::Dict) {
                    if (name_in(n, DICT_METHODS)) return method(in, n);
                    if (name_in(n, DICT_UNSAFE)) return unsafe(in, n);
                    return no_attr(in, n);
                }
                return get_attr(in, n);
            }
            case F::Batch: {
                Bound b = bind(what, a, {"linecount", "fill_with"}, 1);
                int64_t n = int_arg(b[0], "batch linecount");
                if (n <= 0) fail("ValueError: batch size must be positive");
                std::vector<Value> rows, row;
                for (auto& item : iter(in)) {
                    row.push_back(item);
                    if (int64_t(row.size()) == n) { rows.push_back(make_list(std::move(row))); row.clear(); }
                }
                if (!row.empty()) {
                    if (b.has(1) && !b[1].is_none()) while (int64_t(row.size()) < n) row.push_back(b[1]);
                    rows.push_back(make_list(std::move(row)));
                }
                return list_value(std::move(rows), Seq::Generator);
            }
            case F::Capitalize: bind(what, a, {}); return like(in, py_capitalize(py_str(in)));
            case F::Center: {
                Bound b = bind(what, a, {"width"});
                Args ca;
                ca.pos.push_back(b.has(0) ? b[0] : Value::integer(80));
                return call_method(like(in, py_str(in)), "center", ca);
            }
            case F::Count: case F::Length: bind(what, a, {}); return Value::integer(length_of(in));
            case F::Default: {
                Bound b = bind(what, a, {"default_value", "boolean"});
                bool use_default = in.is_undefined() || (b.has(1) && py_truthy(b[1]) && !py_truthy(in));
                return use_default ? (b.has(0) ? b[0] : Value::string("")) : in;
            }
            case F::Dictsort: {
                Bound b = bind(what, a, {"case_sensitive", "by", "reverse"});
                if (in.is_undefined()) fail_undefined(in);
                if (in.kind != Kind::Dict) fail(std::string("AttributeError: '") + type_name(in) + "' object has no attribute 'items'");
                bool cs = b.has(0) && py_truthy(b[0]), rev = b.has(2) && py_truthy(b[2]);
                std::string by = b.has(1) ? str_arg(b[1], "dictsort by") : "key";
                if (by != "key" && by != "value") fail("FilterArgumentError: You can only sort by either 'key' or 'value'");
                auto items = dict_of(in).items;
                size_t pos = by == "key" ? 0 : 1;
                std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
                    const Value& kx = pos == 0 ? x.first : x.second;
                    const Value& ky = pos == 0 ? y.first : y.second;
                    return rev ? py_less(fold_case(ky, cs), fold_case(kx, cs)) : py_less(fold_case(kx, cs), fold_case(ky, cs));
                });
                std::vector<Value> out_items;
                for (auto& kv : items) out_items.push_back(make_list({kv.first, kv.second}, Seq::Tuple));
                return list_value(std::move(out_items));
            }
            case F::Escape:
                bind(what, a, {});
                if (in.is_string() && in.markup && fname != "forceescape") return in;
                return markup(html_escape(py_str(in)));
            case F::First: {
                bind(what, a, {});
                auto items = items_of(in);
                return items->items.empty() ? Value::undefined("No first item, sequence was empty.") : items->items.front();
            }
            case F::Last: {
                bind(what, a, {});
                if (in.kind == Kind::List && list_of(in).seq == Seq::Generator) type_error("'generator' object is not reversible");
                auto items = items_of(in);
                return items->items.empty() ? Value::undefined("No last item, sequence was empty.") : items->items.back();
            }
            case F::Float: {
                Bound b = bind(what, a, {"default"});
                Value dflt = b.has(0) ? b[0] : Value::number(0.0);
                double d;
                if (in.is_undefined()) fail_undefined(in);  // float(Undefined) raises, before the default applies
                if (in.is_number()) return Value::number(in.as_double());
                if (in.is_string() && parse_py_float(in.s, d)) return Value::number(d);
                return dflt;
            }
            case F::Format: {
                Value args;
                if (!a.kw.empty()) {
                    auto d = std::make_shared<DictObj>();
                    for (auto& kv : a.kw) d->set(Value::string(kv.first), kv.second);
                    args = make_dict(d);
                } else {
                    args = make_list(a.pos, Seq::Tuple);
                }
                return like(in, percent_format(py_str(in), args, in.markup));
            }
            case F::Indent: {
                Bound b = bind(what, a, {"width", "first", "blank"});
                if (in.is_undefined()) fail_undefined(in);
                if (!in.is_string()) type_error(std::string("unsupported operand type(s) for +=: '") + type_name(in) + "' and 'str'");
                return like(in, indent(py_str(in), b.has(0) ? b[0] : Value::integer(4), b.has(1) && py_truthy(b[1]), b.has(2) && py_truthy(b[2])));
            }
            case F::Int: {
                Bound b = bind(what, a, {"default", "base"});
                Value dflt = b.has(0) ? b[0] : Value::integer(0);
                if (in.is_undefined()) fail_undefined(in);  // int(Undefined) raises, before the default applies
                int64_t base = b.has(1) ? int_arg(b[1], "int base") : 10, r;
                double d;
                if (in.is_int()) return Value::integer(in.as_int());
                auto from_double = [&](double x) {
                    if (!std::isfinite(x)) return dflt;  // int(nan) and int(inf) fail: the default
                    if (std::fabs(x) >= 9.2e18) fail("OverflowError: integer beyond 64 bits (Python's int would grow)");
                    return Value::integer(int64_t(x));
                };
                if (in.kind == Kind::Float) return from_double(in.f);
                if (in.is_string()) {
                    if (parse_py_int(in.s, int(base), r)) return Value::integer(r);
                    if (parse_py_float(in.s, d)) return from_double(d);
                }
                return dflt;
            }
            case F::Items: {
                bind(what, a, {});
                if (in.is_undefined()) return list_value({}, Seq::Generator);
                if (in.kind != Kind::Dict) type_error("Can only get item pairs from a mapping.");
                std::vector<Value> out_items;
                for (auto& kv : dict_of(in).items) out_items.push_back(make_list({kv.first, kv.second}, Seq::Tuple));
                return list_value(std::move(out_items), Seq::Generator);
            }
            case F::Join: {
                Bound b = bind(what, a, {"d", "attribute"});
                std::string sep = b.has(0) ? py_str(b[0]) : "";
                std::string r;
                bool first = true;
                for (auto& item : iter(in)) {
                    if (!first) r += sep;
                    first = false;
                    r += py_str(b.has(1) && !b[1].is_none() ? attr_path(item, b[1]) : item);
                    check_size(r.size());
                }
                return str_value(std::move(r));
            }
            case F::List: bind(what, a, {}); return list_value(items_of(in)->items);
            case F::Lower: bind(what, a, {}); return like(in, py_lower(py_str(in)));
            case F::Upper: bind(what, a, {}); return like(in, py_upper(py_str(in)));
            case F::Map: return map(in, a, sc);
            case F::Max: case F::Min: {
                Bound b = bind(what, a, {"case_sensitive", "attribute"});
                bool cs = b.has(0) && py_truthy(b[0]);
                const Value* best = nullptr;
                Value best_key;
                auto items = items_of(in);
                for (auto& item : items->items) {
                    Value key = fold_case(b.has(1) && !b[1].is_none() ? attr_path(item, b[1]) : item, cs);
                    if (!best || (f == F::Max ? py_less(best_key, key) : py_less(key, best_key))) { best = &item; best_key = key; }
                }
                return best ? *best : Value::undefined("No aggregated item, sequence was empty.");
            }
            case F::Reject: return select(in, a, false, false, what);
            case F::Rejectattr: return select(in, a, true, false, what);
            case F::Select: return select(in, a, false, true, what);
            case F::Selectattr: return select(in, a, true, true, what);
            case F::Replace: {
                Bound b = bind(what, a, {"old", "new", "count"}, 2);
                int64_t count = b.has(2) && !b[2].is_none() ? int_arg(b[2], "replace count") : -1;
                return str_value(replace(py_str(in), py_str(b[0]), py_str(b[1]), count));
            }
            case F::Reverse: {
                bind(what, a, {});
                if (in.is_string()) {
                    std::vector<uint32_t> cps = code_points(in.s);
                    std::reverse(cps.begin(), cps.end());
                    return Value::string(from_code_points(cps));
                }
                std::vector<Value> items = items_of(in)->items;
                std::reverse(items.begin(), items.end());
                return list_value(std::move(items), Seq::Generator);
            }
            case F::Round: {
                Bound b = bind(what, a, {"precision", "method"});
                return round_value(in, b.has(0) ? int_arg(b[0], "round precision") : 0, b.has(1) ? str_arg(b[1], "round method") : "common");
            }
            case F::Safe: bind(what, a, {}); return markup(py_str(in));
            case F::Sort: case F::Unique: {
                Bound b = f == F::Sort ? bind(what, a, {"reverse", "case_sensitive", "attribute"})
                                       : bind(what, a, {"case_sensitive", "attribute"});
                size_t off = f == F::Sort ? 1 : 0;
                bool rev = f == F::Sort && b.has(0) && py_truthy(b[0]);
                bool cs = b.has(off) && py_truthy(b[off]);
                bool by_attr = b.has(off + 1) && !b[off + 1].is_none();
                std::vector<Value> items = items_of(in)->items;
                auto key = [&](const Value& item) { return fold_case(by_attr ? attr_path(item, b[off + 1]) : item, cs); };
                if (f == F::Sort) {
                    std::vector<std::pair<Value, Value>> keyed;
                    for (auto& item : items) keyed.emplace_back(key(item), item);
                    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
                        return rev ? py_less(y.first, x.first) : py_less(x.first, y.first);
                    });
                    std::vector<Value> sorted;
                    for (auto& kv : keyed) sorted.push_back(kv.second);
                    return list_value(std::move(sorted));
                }
                std::vector<Value> seen, kept;
                for (auto& item : items) {
                    Value k = key(item);
                    if (!py_hashable(k)) type_error(std::string("unhashable type: '") + type_name(k) + "'");
                    bool dup = false;
                    for (auto& s : seen) if (py_equal(s, k)) { dup = true; break; }
                    tick(seen.size() / 16);
                    if (!dup) { seen.push_back(k); kept.push_back(item); }
                }
                return list_value(std::move(kept), Seq::Generator);
            }
            case F::String: bind(what, a, {}); return in.is_string() ? in : str_value(py_str(in));
            case F::Sum: {
                Bound b = bind(what, a, {"attribute", "start"});
                Value total = b.has(1) ? b[1] : Value::integer(0);
                for (auto& item : iter(in)) total = binop(Op::Add, total, b.has(0) && !b[0].is_none() ? attr_path(item, b[0]) : item);
                return total;
            }
            case F::Title: {
                bind(what, a, {});
                std::string s = py_str(in), r;
                bool prev_sep = true;
                for (size_t k = 0; k < s.size();) {
                    uint32_t c = utf8_next(s.data(), s.size(), k);
                    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
                    utf8_append(r, sep == prev_sep && !(k == 0) ? case_lower(c) : case_upper(c));
                    prev_sep = sep;
                }
                return Value::string(r);
            }
            case F::Tojson: {
                // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
                Bound b = bind(what, a, {"ensure_ascii", "indent", "separators", "sort_keys"});
                JsonStyle st;
                st.max_size = opt.max_output;
                st.ensure_ascii = b.has(0) && py_truthy(b[0]);
                st.sort_keys = b.has(3) && py_truthy(b[3]);
                if (b.has(1) && !b[1].is_none()) {
                    st.indent_set = true;
                    if (b[1].is_string()) st.indent = b[1].s;
                    else {
                        int64_t w = int_arg(b[1], "tojson indent");
                        if (w > 1000) fail("tojson: indent wider than 1000");
                        st.indent.assign(size_t(std::max<int64_t>(w, 0)), ' ');
                    }
                    st.item_sep = ",";
                }
                if (b.has(2) && !b[2].is_none()) {
                    if (!is_plain_seq(b[2]) || list_of(b[2]).items.size() != 2)
                        fail("ValueError: tojson separators must be a pair (item separator, key separator)");
                    st.item_sep = str_arg(list_of(b[2]).items[0], "separator");
                    st.key_sep = str_arg(list_of(b[2]).items[1], "separator");
                }
                std::string r;
                try {
                    json_dump_into(r, in, st, 0);
                } catch (const JsonError& e) {
                    type_error(e.message);
                }
                return str_value(std::move(r));
            }
            case F::Trim: {
                Bound b = bind(what, a, {"chars"});
                return like(in, strip(py_str(in), b.has(0) ? b[0] : Value::none(), true, true));
            }
            case F::Truncate: {
                Bound b = bind(what, a, {"length", "killwords", "end", "leeway"});
                int64_t length = b.has(0) ? int_arg(b[0], "truncate length") : 255;
                bool killwords = b.has(1) && py_truthy(b[1]);
                std::string end = b.has(2) ? str_arg(b[2], "truncate end") : "...";
                int64_t leeway = b.has(3) && !b[3].is_none() ? int_arg(b[3], "truncate leeway") : 5;
                int64_t end_len = int64_t(py_len(end));
                if (length < end_len) fail("AssertionError: expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
                if (leeway < 0) fail("AssertionError: expected leeway >= 0, got " + std::to_string(leeway));
                if (!in.is_string()) {  // jinja2 measures len(s) first, and only strings can be cut
                    if (length_of(in) <= length + leeway) return in;
                    type_error(std::string("'") + type_name(in) + "' object has no attribute 'rsplit'");
                }
                const std::string& s = in.s;
                std::vector<uint32_t> cps = code_points(s);
                if (int64_t(cps.size()) <= length + leeway) return in;
                std::string head = from_code_points(cps, 0, size_t(length - end_len));
                if (killwords) return Value::string(head + end);
                size_t sp = head.rfind(' ');
                return Value::string((sp == std::string::npos ? head : head.substr(0, sp)) + end);
            }
            case F::Wordcount: {
                bind(what, a, {});
                std::string s = py_str(in);
                int64_t n = 0;
                bool in_word = false;
                for (size_t k = 0; k < s.size();) {
                    bool w = unicode_is_word_char(utf8_next(s.data(), s.size(), k));
                    n += w && !in_word;
                    in_word = w;
                }
                return Value::integer(n);
            }
        }
        fail("internal error: bad filter");
    }

    // ---- tests ----

    bool apply_test(T t, const std::string& tname, const Value& v, const Args& a) {
        std::string what = "test '" + tname + "'";
        auto one = [&]() -> Value { return bind(what, a, {"other"}, 1)[0]; };
        switch (t) {
            case T::Defined: bind(what, a, {}); return !v.is_undefined();
            case T::Undefined: bind(what, a, {}); return v.is_undefined();
            case T::None: bind(what, a, {}); return v.is_none();
            case T::Boolean: bind(what, a, {}); return v.kind == Kind::Bool;
            case T::False: bind(what, a, {}); return v.kind == Kind::Bool && !v.b;
            case T::True: bind(what, a, {}); return v.kind == Kind::Bool && v.b;
            case T::Integer: bind(what, a, {}); return v.kind == Kind::Int;
            case T::Float: bind(what, a, {}); return v.kind == Kind::Float;
            case T::Number: bind(what, a, {}); return v.is_number();
            case T::String: bind(what, a, {}); return v.is_string();
            case T::Mapping: bind(what, a, {}); return v.kind == Kind::Dict;
            case T::Iterable: bind(what, a, {}); return v.is_undefined() || v.is_string() || v.kind == Kind::List || v.kind == Kind::Dict;
            case T::Sequence: {
                bind(what, a, {});
                if (v.kind == Kind::List) return list_of(v).seq == Seq::List || list_of(v).seq == Seq::Tuple || list_of(v).seq == Seq::Range;
                return v.is_undefined() || v.is_string() || v.kind == Kind::Dict;
            }
            case T::Callable: bind(what, a, {}); return v.kind == Kind::Callable || v.is_undefined();
            case T::Escaped: bind(what, a, {}); return false;
            case T::Sameas: {
                Value o = one();
                if (v.kind != o.kind) return false;
                if (v.obj || o.obj) return v.obj == o.obj;
                return py_equal(v, o);
            }
            case T::Eq: return py_equal(v, one());
            case T::Ne: return !py_equal(v, one());
            case T::Lt: return py_less(v, one(), "<");
            case T::Le: return !py_less(one(), v, "<=");
            case T::Gt: return py_less(one(), v, ">");
            case T::Ge: return !py_less(v, one(), ">=");
            case T::In: return py_in(v, bind(what, a, {"seq"}, 1)[0]);
            case T::Odd: case T::Even: {
                bind(what, a, {});
                Value m = binop(Op::Mod, v, Value::integer(2));
                return py_equal(m, Value::integer(t == T::Odd ? 1 : 0));
            }
            case T::Divisibleby: {
                Value n = bind(what, a, {"num"}, 1)[0];
                return py_equal(binop(Op::Mod, v, n), Value::integer(0));
            }
            case T::Lower: bind(what, a, {}); { std::string s = py_str(v); return py_lower(s) == s && py_upper(s) != s; }
            case T::Upper: bind(what, a, {}); { std::string s = py_str(v); return py_upper(s) == s && py_lower(s) != s; }
            case T::Filter: case T::Test: {
                bind(what, a, {});
                if (!v.is_string()) return false;
                F f;
                T x;
                return t == T::Filter ? find_filter(v.s, f) : find_test(v.s, x);
            }
        }
        fail("internal error: bad test");
    }

    // ---- statements ----

    void bind_targets(const Stmt& s, const Value& item, Scope& scope) {
        if (!s.target_tuple) { scope.set(s.targets[0], item); return; }
        auto parts = items_of(item);
        size_t want = s.targets.size(), got = parts->items.size();
        if (got < want) fail("ValueError: not enough values to unpack (expected " + std::to_string(want) + ", got " + std::to_string(got) + ")");
        if (got > want) fail("ValueError: too many values to unpack (expected " + std::to_string(want) + ")");
        for (size_t k = 0; k < want; k++) scope.set(s.targets[k], parts->items[k]);
    }

    void assign(const Stmt& s, Value v, const ScopePtr& sc) {
        if (!s.target_attr.empty()) {
            Value ns = lookup(s.targets[0], sc.get());
            if (ns.kind != Kind::Namespace) fail("TemplateRuntimeError: cannot assign attribute on non-namespace object");
            dict_of(ns).set(Value::string(s.target_attr), std::move(v));
            return;
        }
        bind_targets(s, v, *sc);
    }

    Value filter_chain(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& sc) {
        for (auto& f : filters) {
            Args a = eval_args(*f, sc);
            line = f->line;
            v = apply_filter(F(f->id), f->name, v, a, sc);
        }
        return v;
    }

    ScopePtr child(const ScopePtr& sc) { return new_scope(sc); }

    Flow exec_for(const Stmt& s, const ScopePtr& sc) {
        Value iterable = eval(*s.expr, sc);
        line = s.line;
        std::shared_ptr<ListObj> items = items_of(iterable);
        if (s.cond) {
            auto kept = std::make_shared<ListObj>();
            ScopePtr probe = child(sc);
            for (auto& item : items->items) {
                tick();
                probe->vars.clear();
                bind_targets(s, item, *probe);
                if (py_truthy(eval(*s.cond, probe))) kept->items.push_back(item);
            }
            items = kept;
        }
        if (items->items.empty()) return s.else_body.empty() ? Flow::Normal : exec(s.else_body, child(sc));
        std::shared_ptr<LoopObj> loop(new LoopObj);
        track(loops, loop);
        loop->items = items;
        Value loop_value;
        loop_value.kind = Kind::Loop;
        loop_value.obj = loop;
        ScopePtr it;
        for (size_t k = 0; k < items->items.size(); k++) {
            tick();
            loop->index0 = k;
            if (!it || it.use_count() > 1) it = child(sc);  // a macro defined in the body keeps its iteration
            else it->vars.clear();
            bind_targets(s, items->items[k], *it);
            it->set("loop", loop_value);
            if (exec(s.body, it) == Flow::Break) break;
        }
        return Flow::Normal;
    }

    Value make_macro(const Stmt& s, const ScopePtr& sc) {
        auto c = std::make_shared<CallableObj>();
        c->what = Builtin::Macro;
        c->name = s.name;
        c->macro = &s;
        c->closure = sc;
        Value v;
        v.kind = Kind::Callable;
        v.obj = std::move(c);
        return v;
    }

    Flow exec(const Body& body, const ScopePtr& sc) {
        DepthGuard g(*this);
        for (auto& sp : body) {
            const Stmt& s = *sp;
            tick();
            line = s.line;
            Flow flow = Flow::Normal;
            switch (s.kind) {
                case SK::Text: emit(s.text); break;
                case SK::Print: {
                    Value v = eval(*s.expr, sc);
                    if (v.is_string()) emit(v.s);
                    else emit(py_str(v));
                    break;
                }
                case SK::If: {
                    bool done = false;
                    for (auto& br : s.branches) {
                        if (py_truthy(eval(*br.first, sc))) { flow = exec(br.second, sc); done = true; break; }
                    }
                    if (!done) flow = exec(s.else_body, sc);
                    break;
                }
                case SK::For: flow = exec_for(s, sc); break;
                case SK::Set: assign(s, eval(*s.expr, sc), sc); break;
                case SK::SetBlock: {
                    Value v = filter_chain(s.filters, Value::string(capture(s.body, child(sc))), sc);
                    assign(s, std::move(v), sc);
                    break;
                }
                case SK::Macro: sc->set(s.name, make_macro(s, sc)); break;
                case SK::CallBlock: {
                    const Expr& call_expr = *s.expr;
                    Value f = eval(*call_expr.a, sc);
                    Args a = eval_args(call_expr, sc);
                    a.kw.emplace_back("caller", make_macro(s, sc));
                    line = s.line;
                    Value r = call(f, a);
                    emit(py_str(r));
                    break;
                }
                case SK::FilterBlock: emit(py_str(filter_chain(s.filters, Value::string(capture(s.body, child(sc))), sc))); break;
                case SK::With: {
                    ScopePtr w = child(sc);
                    for (auto& kv : s.with_vars) w->set(kv.first, eval(*kv.second, sc));
                    flow = exec(s.body, w);
                    break;
                }
                case SK::Break: return Flow::Break;
                case SK::Continue: return Flow::Continue;
                case SK::Generation: emit(capture(s.body, child(sc))); break;
            }
            if (flow != Flow::Normal) return flow;
        }
        return Flow::Normal;
    }
};

// =====================================================================================================
// ---- Template ----
// =====================================================================================================

class Template {
public:
    // Lexes and parses; a syntax error, an unknown tag, filter or test is a die() naming name:line.
    static Template parse(const std::string& text, const std::string& name) {
        Lexer lexer(text, name);
        Parser parser(lexer.run(), name);
        auto body = std::make_shared<Body>();
        parser.parse_body(*body, {});
        RootNames names;
        names.visit(*body);
        Template t;
        t.name_ = name;
        t.body_ = std::move(body);
        t.set_before_read_ = names.undefined_at_start();
        return t;
    }

    // Renders with the context's keys as top-level variables (messages, add_generation_prompt, ...).
    std::string render(const ojson& context, const Options& options = Options()) const {
        if (!body_) die("jinja: render() on a template that was never parsed");
        if (!context.is_object()) die("%s: the render context must be a JSON object", name_.c_str());
        Renderer r(name_, options);
        std::string out;
        r.out = &out;
        try {
            ScopePtr root = r.new_scope(nullptr);
            for (auto it = context.begin(); it != context.end(); ++it) root->set(it.key(), from_json(it.value()));
            for (auto& n : set_before_read_) root->set(n, Value::undefined("'" + n + "' is undefined"));
            r.exec(*body_, root);
        } catch (const DeepValue&) {
            r.fail("RecursionError: a value nested deeper than " + std::to_string(VALUE_DEPTH_MAX) + " levels");
        }
        return out;
    }

    const std::string& name() const { return name_; }
    bool empty() const { return !body_; }

private:
    std::string name_;
    std::shared_ptr<const Body> body_;
    std::vector<std::string> set_before_read_;  // RootNames: top-level names that start undefined
};

}  // namespace jinja
}  // namespace monocu
