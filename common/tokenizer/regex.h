// tokenizer/regex.h — a small backtracking regex engine for tokenizer split patterns (leftmost-first,
// greedy, like Oniguruma, which Hugging Face tokenizers use), over code points.
//
// Usage:
//   Regex re = Regex::compile(pattern, "tokenizer.json pre_tokenizer");   // die()s on what it does not support
//   re.find_all(cps, n, matches);                                        // [start, end) code-point ranges
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/errors.h"
#include "tokenizer/unicode.h"

namespace monocu {

// =====================================================================================================
// ---- Regex: a small backtracking engine for pre-tokenizer split patterns ----
// =====================================================================================================

// A set of code points: an exact 128-bit answer for ASCII, and for the rest a union of general
// categories, White_Space, and explicit ranges; negated as a whole.
struct RegexClass {
    uint64_t ascii[2] = {0, 0};
    uint32_t categories = 0;
    bool white_space = false, not_white_space = false, negated = false;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;

    bool contains_raw(uint32_t cp) const {
        if (ucat_bit(unicode_category(cp)) & categories) return true;
        bool ws = unicode_is_white_space(cp);
        if ((white_space && ws) || (not_white_space && !ws)) return true;
        for (auto& r : ranges) if (cp >= r.first && cp <= r.second) return true;
        return false;
    }
    void finish() {  // precompute the ASCII answer, negation included
        for (uint32_t c = 0; c < 128; c++)
            if (contains_raw(c) != negated) ascii[c >> 6] |= uint64_t(1) << (c & 63);
    }
    bool matches(uint32_t cp) const {
        if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
        return contains_raw(cp) != negated;
    }
};

struct Regex {
    enum Op : uint8_t { CLASS, REPEAT_CLASS, SPLIT, JMP, LOOK, MATCH };
    struct Inst { Op op; int a = 0, b = 0, c = 0; };  // CLASS a=class; REPEAT_CLASS a=class b=min c=max(-1 inf)
                                                      // SPLIT a=first b=second; JMP a; LOOK a=negated b=continue-at
    std::vector<Inst> prog;
    std::vector<RegexClass> classes;
    std::string source;

    // Parses and compiles; die()s naming `where` and the construct it does not support.
    static Regex compile(const std::string& pattern, const std::string& where);

    // All non-overlapping leftmost matches in cps[0..n), as [start, end) code point index pairs.
    void find_all(const uint32_t* cps, size_t n, std::vector<std::pair<uint32_t, uint32_t>>& out) const;

private:
    struct Frame { int pc; size_t pos; int count; };  // count >= 0: retry a REPEAT_CLASS with one fewer
    bool run(int pc, const uint32_t* s, size_t n, size_t pos, size_t& end, std::vector<Frame>& stack) const;
};

namespace regex_detail {

// Parse tree of a pattern; compiled to Regex::prog.
struct Node {
    enum Kind { CLASS, CONCAT, ALT, REPEAT, LOOK } kind;
    int cls = -1, min = 0, max = 0;  // REPEAT bounds (max -1: unbounded); LOOK: min = negated
    std::vector<Node> kids;
};

struct Parser {
    const std::string& p;
    const std::string& where;
    std::vector<RegexClass>& classes;
    size_t i = 0;
    bool icase = false;

    [[noreturn]] void fail(const char* what) const {
        die("%s: regex /%s/: %s at offset %zu (supported: classes, \\p{..}, \\s \\d \\w, ?, *, +, {m,n}, "
            "(?:), (?i:), (?!), (?=))", where.c_str(), p.c_str(), what, i);
    }
    bool done() const { return i >= p.size(); }
    uint32_t next_cp() { if (done()) fail("unexpected end"); return utf8_next(p.data(), p.size(), i); }

    int add_class(RegexClass c) { c.finish(); classes.push_back(std::move(c)); return int(classes.size()) - 1; }

    static uint32_t category_mask(const std::string& name) {
        static const std::pair<const char*, uint32_t> groups[] = {
            {"L", UCAT_L}, {"M", UCAT_M}, {"N", UCAT_N}, {"P", UCAT_P}, {"S", UCAT_S}, {"Z", UCAT_Z}, {"C", UCAT_C},
            {"Letter", UCAT_L}, {"Mark", UCAT_M}, {"Number", UCAT_N}, {"Punctuation", UCAT_P},
            {"Symbol", UCAT_S}, {"Separator", UCAT_Z}, {"Other", UCAT_C}};
        for (auto& g : groups) if (name == g.first) return g.second;
        for (int c = 0; c < UC_COUNT; c++) if (name == UNICODE_CATEGORY_NAMES[c]) return 1u << c;
        return 0;
    }

    // After a backslash: fills `cls` for class escapes (returns true) or sets `lit` for a literal.
    bool parse_escape(RegexClass& cls, uint32_t& lit, bool inside_brackets) {
        uint32_t e = next_cp();
        switch (e) {
            case 's': cls.white_space = true; return true;
            case 'S': if (inside_brackets) cls.not_white_space = true; else { cls.white_space = true; cls.negated = true; } return true;
            case 'd': cls.categories |= ucat_bit(UC_Nd); return true;
            case 'w': cls.categories |= UCAT_L | UCAT_M | ucat_bit(UC_Nd) | ucat_bit(UC_Pc); cls.ranges.push_back({'_', '_'}); return true;
            case 'D': case 'W':
                if (inside_brackets) fail("\\D or \\W inside brackets");
                if (e == 'D') cls.categories |= ucat_bit(UC_Nd);
                else { cls.categories |= UCAT_L | UCAT_M | ucat_bit(UC_Nd) | ucat_bit(UC_Pc); cls.ranges.push_back({'_', '_'}); }
                cls.negated = true; return true;
            case 'p': case 'P': {
                if (e == 'P' && inside_brackets) fail("\\P inside brackets");
                std::string name;
                if (!done() && p[i] == '{') {
                    size_t close = p.find('}', i);
                    if (close == std::string::npos) fail("unterminated \\p{");
                    name = p.substr(i + 1, close - i - 1);
                    i = close + 1;
                } else {
                    name = std::string(1, char(next_cp()));
                }
                if (!name.empty() && name[0] == '^') fail("\\p{^..}");
                uint32_t mask = category_mask(name);
                if (!mask) fail(("unknown Unicode class \\p{" + name + "}").c_str());
                cls.categories |= mask;
                if (e == 'P') cls.negated = true;
                return true;
            }
            case 'r': lit = '\r'; return false;
            case 'n': lit = '\n'; return false;
            case 't': lit = '\t'; return false;
            case 'f': lit = '\f'; return false;
            case 'v': lit = '\v'; return false;
            case 'u': case 'x': {
                size_t len = e == 'u' ? 4 : 2;
                bool braces = !done() && p[i] == '{';
                if (braces) { size_t c = p.find('}', i); if (c == std::string::npos) fail("bad \\x{"); len = c - i - 1; i++; }
                if (i + len > p.size() || len == 0 || len > 6) fail("bad hex escape");
                lit = 0;
                for (size_t k = 0; k < len; k++) {
                    char h = p[i + k];
                    int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (v < 0) fail("bad hex escape");
                    lit = lit * 16 + uint32_t(v);
                }
                i += len + (braces ? 1 : 0);
                return false;
            }
            default:
                if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                    fail("unsupported escape (anchors, backreferences, \\b...)");
                lit = e;  // escaped punctuation stands for itself
                return false;
        }
    }

    // A literal under (?i): itself plus its ASCII case partner and the characters Unicode case folding
    // maps onto it (U+017F long s folds to s, U+212A Kelvin sign to k), as Oniguruma matches them.
    void add_literal(RegexClass& c, uint32_t cp) const {
        c.ranges.push_back({cp, cp});
        if (!icase) return;
        if (cp >= 0x80 && cp != 0x17F && cp != 0x212A) fail("(?i) on a non-ASCII literal");
        uint32_t lower = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        if (lower >= 'a' && lower <= 'z') { c.ranges.push_back({lower, lower}); c.ranges.push_back({lower - 32, lower - 32}); }
        if (lower == 's') c.ranges.push_back({0x17F, 0x17F});
        if (lower == 'k') c.ranges.push_back({0x212A, 0x212A});
    }

    Node parse_bracket() {  // after '['
        RegexClass c;
        if (!done() && p[i] == '^') { c.negated = true; i++; }
        bool first = true;
        while (true) {
            if (done()) fail("unterminated [");
            if (p[i] == ']' && !first) { i++; break; }
            if (p[i] == '[') fail("nested [ or POSIX class");
            first = false;
            uint32_t lo;
            if (p[i] == '\\') {
                i++;
                if (parse_escape(c, lo, true)) continue;
            } else {
                lo = next_cp();
            }
            if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
                i++;
                uint32_t hi;
                if (p[i] == '\\') { i++; RegexClass tmp; if (parse_escape(tmp, hi, true)) fail("class escape as a range end"); }
                else hi = next_cp();
                if (hi < lo) fail("range out of order");
                if (icase && (lo < 0x80 || hi < 0x80)) fail("(?i) on a range");
                c.ranges.push_back({lo, hi});
            } else {
                add_literal(c, lo);
            }
        }
        Node n{Node::CLASS, add_class(std::move(c)), 0, 0, {}};
        return n;
    }

    Node parse_atom() {
        char ch = p[i];
        if (ch == '(') {
            i++;
            bool saved_icase = icase;
            Node::Kind kind = Node::CONCAT;
            int negated = 0;
            if (!done() && p[i] == '?') {
                i++;
                if (done()) fail("bad group");
                if (p[i] == ':') { i++; }
                else if (p[i] == '!' || p[i] == '=') { kind = Node::LOOK; negated = p[i] == '!'; i++; }
                else if (p[i] == 'i' && i + 1 < p.size() && p[i + 1] == ':') { icase = true; i += 2; }
                else fail("unsupported group kind (lookbehind, atomic, named, flags other than (?i:)");
            }
            Node inner = parse_alt();
            if (done() || p[i] != ')') fail("missing )");
            i++;
            icase = saved_icase;
            if (kind == Node::LOOK) return Node{Node::LOOK, -1, negated, 0, {std::move(inner)}};
            return inner;
        }
        if (ch == '[') { i++; return parse_bracket(); }
        RegexClass c;
        if (ch == '.') { i++; c.ranges.push_back({'\n', '\n'}); c.negated = true; return Node{Node::CLASS, add_class(std::move(c)), 0, 0, {}}; }
        if (ch == '^' || ch == '$') fail("anchors");
        if (ch == ')' || ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == '|') fail("misplaced operator");
        uint32_t lit;
        if (ch == '\\') {
            i++;
            if (parse_escape(c, lit, false)) return Node{Node::CLASS, add_class(std::move(c)), 0, 0, {}};
        } else {
            lit = next_cp();
        }
        add_literal(c, lit);
        return Node{Node::CLASS, add_class(std::move(c)), 0, 0, {}};
    }

    bool parse_count(int& min, int& max) {  // at '{': {m}, {m,}, {m,n}; false if not a counted repeat
        size_t j = i + 1;
        auto number = [&](int& v) {
            size_t s = j; v = 0;
            while (j < p.size() && p[j] >= '0' && p[j] <= '9') { v = v * 10 + (p[j] - '0'); if (v > 1000) fail("repeat count over 1000"); j++; }
            return j > s;
        };
        if (!number(min)) return false;
        max = min;
        if (j < p.size() && p[j] == ',') { j++; if (!number(max)) max = -1; }
        if (j >= p.size() || p[j] != '}') fail("bad {m,n}");
        if (max != -1 && max < min) fail("{m,n} with n < m");
        i = j + 1;
        return true;
    }

    Node parse_repeat() {
        Node atom = parse_atom();
        while (!done()) {
            int min, max;
            char ch = p[i];
            if (ch == '?') { min = 0; max = 1; i++; }
            else if (ch == '*') { min = 0; max = -1; i++; }
            else if (ch == '+') { min = 1; max = -1; i++; }
            else if (ch == '{') { if (!parse_count(min, max)) fail("literal { (escape it)"); }
            else break;
            if (!done() && (p[i] == '?' || p[i] == '+')) fail("lazy or possessive quantifier");
            if (atom.kind == Node::LOOK) fail("quantified lookaround");
            atom = Node{Node::REPEAT, -1, min, max, {std::move(atom)}};
        }
        return atom;
    }

    Node parse_concat() {
        Node n{Node::CONCAT, -1, 0, 0, {}};
        while (!done() && p[i] != '|' && p[i] != ')') n.kids.push_back(parse_repeat());
        return n;
    }

    Node parse_alt() {
        Node n{Node::ALT, -1, 0, 0, {}};
        n.kids.push_back(parse_concat());
        while (!done() && p[i] == '|') { i++; n.kids.push_back(parse_concat()); }
        return n.kids.size() == 1 ? std::move(n.kids[0]) : std::move(n);
    }
};

inline bool can_match_empty(const Node& n) {
    switch (n.kind) {
        case Node::CLASS: return false;
        case Node::LOOK: return true;
        case Node::REPEAT: return n.min == 0 || can_match_empty(n.kids[0]);
        case Node::CONCAT: for (auto& k : n.kids) if (!can_match_empty(k)) return false; return true;
        case Node::ALT: for (auto& k : n.kids) if (can_match_empty(k)) return true; return false;
    }
    return true;
}

struct Compiler {
    std::vector<Regex::Inst>& prog;
    const std::string& where;
    const std::string& pattern;
    int emit(Regex::Op op, int a = 0, int b = 0, int c = 0) { prog.push_back({op, a, b, c}); return int(prog.size()) - 1; }

    void node(const Node& n) {
        switch (n.kind) {
            case Node::CLASS: emit(Regex::CLASS, n.cls); break;
            case Node::CONCAT: for (auto& k : n.kids) node(k); break;
            case Node::ALT: {
                std::vector<int> jumps;
                for (size_t k = 0; k < n.kids.size(); k++) {
                    int split = -1;
                    if (k + 1 < n.kids.size()) split = emit(Regex::SPLIT);
                    if (split >= 0) prog[split].a = int(prog.size());
                    node(n.kids[k]);
                    if (k + 1 < n.kids.size()) jumps.push_back(emit(Regex::JMP));
                    if (split >= 0) prog[split].b = int(prog.size());
                }
                for (int j : jumps) prog[j].a = int(prog.size());
                break;
            }
            case Node::LOOK: {
                int look = emit(Regex::LOOK, n.min);
                node(n.kids[0]);
                emit(Regex::MATCH);
                prog[look].b = int(prog.size());
                break;
            }
            case Node::REPEAT: repeat(n); break;
        }
    }

    void repeat(const Node& n) {
        const Node& body = n.kids[0];
        if (body.kind == Node::CLASS) { emit(Regex::REPEAT_CLASS, body.cls, n.min, n.max); return; }
        if (n.max == -1 && can_match_empty(body))
            die("%s: regex /%s/: unbounded repeat of a sub-pattern that can match empty", where.c_str(), pattern.c_str());
        for (int k = 0; k < n.min; k++) node(body);
        if (n.max == -1) {  // L: SPLIT body, end; body; JMP L
            int split = emit(Regex::SPLIT);
            prog[split].a = int(prog.size());
            node(body);
            emit(Regex::JMP, split);
            prog[split].b = int(prog.size());
            return;
        }
        std::vector<int> splits;  // x{0,k} as nested optionals: every failure goes to the end
        for (int k = n.min; k < n.max; k++) {
            int split = emit(Regex::SPLIT);
            prog[split].a = int(prog.size());
            splits.push_back(split);
            node(body);
        }
        for (int s : splits) prog[s].b = int(prog.size());
    }
};

}  // namespace regex_detail

inline Regex Regex::compile(const std::string& pattern, const std::string& where) {
    Regex r;
    r.source = pattern;
    regex_detail::Parser parser{pattern, where, r.classes};
    regex_detail::Node root = parser.parse_alt();
    if (!parser.done()) parser.fail("unbalanced )");
    regex_detail::Compiler comp{r.prog, where, pattern};
    comp.node(root);
    comp.emit(MATCH);
    return r;
}

inline bool Regex::run(int pc, const uint32_t* s, size_t n, size_t pos, size_t& end, std::vector<Frame>& stack) const {
    const size_t base = stack.size();
    while (true) {
        const Inst& in = prog[size_t(pc)];
        bool ok = true;
        switch (in.op) {
            case CLASS:
                if (pos < n && classes[size_t(in.a)].matches(s[pos])) { pos++; pc++; } else ok = false;
                break;
            case REPEAT_CLASS: {
                const RegexClass& c = classes[size_t(in.a)];
                size_t limit = in.c < 0 ? n - pos : std::min(n - pos, size_t(in.c));
                size_t k = 0;
                while (k < limit && c.matches(s[pos + k])) k++;
                if (k < size_t(in.b)) { ok = false; break; }
                if (k > size_t(in.b)) stack.push_back({pc + 1, pos, int(k)});
                pos += k; pc++;
                break;
            }
            case SPLIT: stack.push_back({in.b, pos, -1}); pc = in.a; break;
            case JMP: pc = in.a; break;
            case LOOK: {
                size_t ignored;
                bool m = run(pc + 1, s, n, pos, ignored, stack);
                if (m != bool(in.a)) pc = in.b; else ok = false;
                break;
            }
            case MATCH: end = pos; stack.resize(base); return true;
        }
        if (ok) continue;
        if (stack.size() == base) return false;
        Frame f = stack.back();
        stack.pop_back();
        pc = f.pc;
        pos = f.pos;
        if (f.count >= 0) {  // give back one character of a greedy class repeat
            int k = f.count - 1;
            if (k > prog[size_t(f.pc - 1)].b) stack.push_back({f.pc, f.pos, k});
            pos = f.pos + size_t(k);
        }
    }
}

inline void Regex::find_all(const uint32_t* cps, size_t n, std::vector<std::pair<uint32_t, uint32_t>>& out) const {
    out.clear();
    std::vector<Frame> stack;
    stack.reserve(64);
    size_t pos = 0;
    while (pos < n) {
        size_t end;
        if (run(0, cps, n, pos, end, stack)) {
            out.push_back({uint32_t(pos), uint32_t(end)});
            pos = end > pos ? end : pos + 1;
        } else {
            pos++;
        }
    }
}

}  // namespace monocu
