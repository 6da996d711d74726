#!/usr/bin/env python3
"""make_corpus.py — writes tests/data/tokenizer/corpus.json, the hostile strings every tokenizer must
encode exactly like Hugging Face `tokenizers`.

Usage: python3 oracle/make_corpus.py            (from the repo root; Python 3 stdlib only)

Each entry is {"name": ..., "text": ...} or, for bytes that are not valid UTF-8, {"name": ..., "hex": ...}.
The expected ids are not here: oracle/tokenizer_goldens.mjs computes them with HF's own code.
Entries are written here rather than by hand in JSON so that long runs and odd code points stay readable.
"""
import json
import os

E = []


def t(name, text):
    E.append({"name": name, "text": text})


def h(name, data: bytes):
    E.append({"name": name, "hex": data.hex()})


# ---- the ordinary ----
t("empty", "")
t("one_space", " ")
t("hello", "Hello world")
t("punct", "Hello, world! How are you?? I'm fine... (really) [ok] {yes} <no>")
t("leading_trailing_spaces", "   leading and trailing   ")
t("sentence", "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX.")

# ---- whitespace ----
t("space_runs", "a  b   c    d     e\t\tf \t g")
t("crlf", "line one\r\nline two\r\n\r\nline four\rcr only\n")
t("newline_runs", "\n\n\nx\n \n  \n\t\n")
t("trailing_newlines", "end of text\n\n\n\n")
t("unicode_spaces", "a\u00a0b\u2003c\u3000d\u2028e\u2029f\u0085g\u202fh\u205fi\u1680j\u200bk")
t("tabs_code_indent", "def f(x):\n\tif x:\n\t\treturn 1\n    else:\n        return 2\n")
t("hundred_spaces_then_word", " " * 100 + "word")
t("spaces_only", " " * 37)
t("newlines_only", "\n" * 50)
t("mixed_ws_run", " \t \r\n \u00a0 \n\n \t")

# ---- contractions in any case ----
t("contractions", "I'm you're we've they'll she'd it's don't can't won't")
t("contractions_upper", "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T")
t("contractions_mixed", "It'S yOu'Re We'Ve ThEy'Ll sHe'D i'M o'Reilly's")
t("contractions_long_s", "it'\u017f and IT'\u017f")
t("curly_apostrophe", "it\u2019s don\u2019t \u2018quoted\u2019 \u201cdouble\u201d")
t("lone_apostrophes", "' '' ''' 's 'S 'x x' 'll'd")

# ---- numbers ----
t("digits", "0 12 345 6789 01234 567890")
t("long_digit_run", "".join(str(i % 10) for i in range(203)))
t("number_formats", "3.14159 1,000,000 -42 +7 1e-9 0x1F 0b1010 12:30 2024-06-01 $19.99 50%")
t("unicode_digits", "\uff10\uff11\uff12 \u0663\u0664\u0665 \u0967\u0968 \u2167\u216b \u00bd\u00b2\u00b3 \u2460\u2461")
t("digits_letters", "abc123def x86_64 v1.2.3-rc4 3rd 21st 4K 1080p")

# ---- scripts ----
t("chinese", "你好，世界！我爱编程。机器学习是人工智能的一个分支。")
t("japanese", "こんにちは、世界。カタカナとひらがなと漢字。ｶﾀｶﾅ")
t("korean", "안녕하세요 세계! 한국어 텍스트입니다.")
t("arabic", "مرحبا بالعالم! هذا نص عربي.")
t("hebrew", "שלום עולם")
t("hindi", "नमस्ते दुनिया, यह हिंदी है।")
t("thai", "สวัสดีครับ ภาษาไทย")
t("russian", "Привет, мир! ЁЖИК в тумане. ёжик")
t("greek", "Καλημέρα κόσμε ΣΑΣ σας ς")
t("mixed_scripts", "English中文日本語한국어Русскийعربي")
t("cjk_boundary", "\u4e00\u9fa5\u9fa6\u9fff\u3400\u3040\u309f\u30a0\u30ff\u3100 龦")
t("titlecase_and_turkish", "\u01c5ungla \u01c8j \u0130stanbul \u0131s\u0131k \u1e9e \u00df")
t("camel_case", "camelCaseWords HTTPServer XMLHttpRequest iPhone McDonald's getHTTPResponseCode")

# ---- emoji ----
t("emoji_simple", "I love 🍕 and 🎉!")
t("emoji_skin_tone", "👍🏽 👋🏿")
t("emoji_zwj_family", "👨\u200d👩\u200d👧\u200d👦 family")
t("emoji_flags", "🇫🇷🇯🇵🇺🇸 🏳\ufe0f\u200d🌈")
t("emoji_keycap_vs", "1\ufe0f\u20e3 \u2764\ufe0f \u263a")
t("emoji_run", "🙂" * 40)

# ---- combining marks and normalization ----
t("decomposed_accents", "e\u0301te\u0301 cafe\u0301 n\u0303 A\u030a")
t("precomposed_accents", "été café ñ Å")
t("combining_order", "\u1e0b\u0323 d\u0307\u0323 d\u0323\u0307 q\u0307\u0323")
t("hangul_jamo", "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af")
t("singletons_exclusions", "\u212b \u2126 \u0344 \u0958 \uf900 \u2000")
t("zalgo", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0344\u0327\u0362l\u0327g\u0305o\u0306")
t("ligatures_compat", "\ufb01nance \ufb03 \u2460 \u00bd \u2122 \uff21\uff22\uff23 \u3392")
t("lone_combining", "\u0301 \u0301\u0301a \u20dd")

# ---- code ----
t("code_python", "import numpy as np\n\ndef softmax(x: np.ndarray) -> np.ndarray:\n    e = np.exp(x - x.max())\n    return e / e.sum()  # stable\n")
t("code_cpp", "template <class T>\nstd::vector<int> f(const T& x) {\n\treturn {x[0], x[1]};  // ok\n}\n#include <cstdio>\n")
t("code_js_json", '{"key": "value", "n": [1, 2.5e3, null], "nested": {"a": true}}\nconst f = (a, b) => a ?? b;')
t("code_shell_regex", "grep -E '^[a-z]+$' file.txt | sort -u > out && echo \"$HOME/.config\" 2>&1")
t("html_markdown", "<div class=\"x\"><p>Hi</p></div>\n# Title\n**bold** _it_ `code`\n- [ ] todo\n| a | b |\n|---|---|")
t("urls_paths", "https://example.com/path?q=1&r=2#frag user@example.org /usr/local/bin ../../x C:\\Windows\\System32")
t("latex", "\\frac{a}{b} + \\sum_{i=0}^{n} x_i^2 = \\alpha\\beta")
t("slashes_gptoss", "a/b//c\n/\n//\r\n/path/ end/\n")
t("symbols", "~!@#$%^&*()_+-=`[]\\{}|;':\",./<>? §±©®°µ¶·×÷ ←→↑↓ ∀∂∈∑√∞≠≤≥ ★☆♠♣ €£¥₹")

# ---- tokenizer-format look-alikes ----
t("sentencepiece_marker", "\u2581hello \u2581\u2581world\u2581 \u2581")
t("byte_token_text", "<0x41><0xFF> <0x0A> <unk> <s> </s>")
t("bytelevel_chars", "\u0120hello \u010a \u0100\u0101")
t("control_chars", "a\u0000b\u0001c\u007fd\u001be\u0008f")
t("bom_and_private_use", "\ufeffBOM \ue000\uf8ff \U000f0000 \U0010ffff")
t("tag_and_unassigned", "\U000e0041\U000e007f \u0378 \U0001fb00 \U0003134b")

# ---- special tokens inline ----
t("specials_chatml", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
t("specials_qwen_think", "<think>\nreasoning\n</think>\n\nanswer <tool_call>{}</tool_call><|endoftext|>")
t("specials_llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|end_of_text|>")
t("specials_harmony", "<|start|>assistant<|channel|>final<|message|>Hi<|end|><|return|><|call|><|startoftext|>")
t("specials_gemma", "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n<eos><pad><unused0><mask>")
t("specials_llama2", "<s>[INST] <<SYS>>\nBe nice\n<</SYS>>\n\nHi [/INST] Hello </s><s>")
t("specials_deepseek", "<\uff5cbegin\u2581of\u2581sentence\uff5c>You are helpful.<\uff5cUser\uff5c>Hi<\uff5cAssistant\uff5c>Hello<\uff5cend\u2581of\u2581sentence\uff5c>")
t("specials_adjacent_spaces", "  <|im_end|>  <|endoftext|>\n<|eot_id|> x <s> y </s>")
t("specials_partial", "<|im_start <|im_end| im_end|> <|eot_id <start_of_turn <|end_of_text|")
t("specials_nested", "<<|im_end|>> <<s>> <|<|eot_id|>|> <<bos>>")
t("gemma_added_whitespace", "a\n\n\nb\t\t\tc\u2581\u2581\u2581d <table><tr><td>x</td></tr></table>")

# ---- long and repetitive ----
t("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis" * 20)
t("repeated_char", "a" * 1000)
t("repeated_punct", "!" * 300 + "?" * 5 + "." * 77)
t("repeated_pair", "ab" * 300)
t("repeated_cjk", "的" * 200)
t("paragraph", ("Tokenizers split text into pieces. " * 30).strip())

# ---- not valid UTF-8 (encode must repair each bad sequence to U+FFFD, like a lossy UTF-8 decode) ----
h("invalid_lone_ff", b"\xff")
h("invalid_overlong", b"a\xc0\xafb")
h("invalid_truncated_3byte", b"x\xe2\x82")
h("invalid_truncated_4byte_end", b"hi \xf0\x9f\x98")
h("invalid_surrogate", b"\xed\xa0\x80 ok")
h("invalid_above_max", b"\xf4\x90\x80\x80z")
h("invalid_continuations", b"\x80\x80A\xbf")
h("invalid_mixed", b"Hel\xc3(lo w\xe2\x28\xa1rld \xf0\x28\x8c\xbc")
h("invalid_in_special", b"<|im_\xffstart|> <|im_end|>\xfe")
t("leading_space_word", " Hello world")
t("specials_mid_text", "Hi<s>there </s> again<unk>x<|im_end|>y<|endoftext|> z")
t("leading_newline", "\nHello\n\tworld \n")
t("specials_mistral_v3", "[INST] What? [/INST][TOOL_CALLS] [AVAILABLE_TOOLS][/AVAILABLE_TOOLS][TOOL_RESULTS] [control_8]")

os.makedirs("tests/data/tokenizer", exist_ok=True)
with open("tests/data/tokenizer/corpus.json", "w", encoding="utf-8") as f:
    json.dump(E, f, ensure_ascii=True, indent=1)
    f.write("\n")
print(f"wrote {len(E)} entries to tests/data/tokenizer/corpus.json")
