#!/usr/bin/env python3
"""make_bench_text.py — writes tests/data/hf/bench/bench.txt (~10.5 MB, git-ignored), the text that
`tokenize --bench` and oracle/bench_hf_tokenizer.mjs both encode: this machine's libstdc++ headers
(code) and license texts (English prose), each followed by the multilingual corpus strings.
Usage: python3 oracle/make_bench_text.py   (repo root; Python 3 stdlib only)
"""
import glob
import json
import os

parts = [e["text"] for e in json.load(open("tests/data/tokenizer/corpus.json")) if "text" in e]
multilingual = "\n".join(parts)
files = sorted(glob.glob("/usr/include/c++/*/bits/*.h")) + sorted(glob.glob("/usr/share/common-licenses/*"))
if not files:
    raise SystemExit("make_bench_text: no source files found under /usr/include/c++ or /usr/share/common-licenses")
out, size, i = [], 0, 0
while size < 10_500_000:
    path = files[i % len(files)]
    i += 1
    if os.path.isdir(path):
        continue
    text = open(path, encoding="utf-8", errors="replace").read()
    out += [text, multilingual]
    size += len(text.encode()) + len(multilingual.encode())
os.makedirs("tests/data/hf/bench", exist_ok=True)
with open("tests/data/hf/bench/bench.txt", "w", encoding="utf-8") as f:
    f.write("".join(out))
print(f"wrote tests/data/hf/bench/bench.txt ({size / 1e6:.1f} MB)")
