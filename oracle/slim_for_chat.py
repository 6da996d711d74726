#!/usr/bin/env python3
"""slim_for_chat.py — small copies of the tokenizer directories for oracle/chat_goldens.py.

Usage (repo root, Python 3 stdlib only):
    python3 oracle/slim_for_chat.py tests/data/hf tests/data/hf/chat_oracle

Chat rendering needs a tokenizer's config (chat_template, bos/eos) and its added tokens, not its
100k-entry vocab and merges; the fetched files are ~100 MB, too much to carry to another machine.
For each directory with a tokenizer.json this writes DEST/<name>/ with tokenizer_config.json as is,
any *.jinja template beside it, and a tokenizer.json whose model vocab holds only the added tokens
(same ids) and no merges — enough for transformers to load and apply_chat_template.
"""
import glob
import json
import os
import shutil
import sys


def slim(src_dir, dst_dir):
    with open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    vocab = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    unk = tok["model"].get("unk_token")
    if unk and unk not in vocab:
        vocab[unk] = tok["model"]["vocab"][unk]
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = []
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(dst_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    shutil.copy(os.path.join(src_dir, "tokenizer_config.json"), dst_dir)
    for template in glob.glob(os.path.join(src_dir, "*.jinja")):
        shutil.copy(template, dst_dir)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: python3 oracle/slim_for_chat.py HF_DIR DEST")
    src, dst = sys.argv[1], sys.argv[2]
    for path in sorted(glob.glob(os.path.join(src, "*", "tokenizer.json"))):
        name = os.path.basename(os.path.dirname(path))
        if os.path.abspath(os.path.dirname(path)).startswith(os.path.abspath(dst)):
            continue
        slim(os.path.dirname(path), os.path.join(dst, name))
        print(f"{name} -> {os.path.join(dst, name)}")


main()
