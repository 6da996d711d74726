// tokenizer_goldens.mjs — golden ids and decodes from Hugging Face's own tokenizer (the npm
// `tokenizers` package: the Node binding of the Rust core that Python's `tokenizers` also wraps).
//
// Usage (repo root):  tests/fetch_tokenizers.sh --oracle && node oracle/tokenizer_goldens.mjs
//   reads  tests/data/tokenizer/corpus.json and tests/data/hf/<name>/tokenizer.json
//   writes tests/data/tokenizer/goldens/<name>.json, one entry per corpus string:
//     ids            encode(text, add_special_tokens=false)   — added tokens in the text recognised
//     plain_ids      the same with every added token removed  — the text as plain text
//     decoded        decode(ids, skip_special_tokens=false)
//     plain_decoded  decode(plain_ids, false)
// A corpus entry given as "hex" (bytes that are not valid UTF-8) is first decoded with U+FFFD
// replacement, as any client would have to: HF takes only valid strings.
// VARIANTS are a fetched tokenizer.json with some top-level parts replaced (the forms of files that no
// npm package ships, e.g. the Metaspace pre-tokenizer of Mistral v0.3 and Llama 2 legacy=false, or
// SmolLM2's Digits + ByteLevel); their golden records "base" and "overrides", which the test applies
// the same way before comparing.
//   node oracle/tokenizer_goldens.mjs [name ...]   only these names (default: all)
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);
const HF = "tests/data/hf";
const { Tokenizer } = require(path.resolve(HF, "node_modules/tokenizers"));
const NAMES = ["qwen3", "llama3_1", "gptoss", "gemma3", "deepseek_v3", "llama2", "llama3_2", "qwen2_5",
  // Committed here compressed (tests/data/tokenizers/SOURCES.md): TinyLlama-1.1B-Chat-v1.0, Mistral-7B-v0.3, SmolLM2-135M-Instruct, SmolLM3-3B.
  "tinyllama", "mistral_v0_3", "smollm2", "smollm3"];
const MS = "\u2581";
const VARIANTS = {
  // Mistral v0.3 / Llama 2 with legacy=false: no normalizer, Metaspace "first" without split.
  metaspace_first: { base: "llama2", overrides: {
    normalizer: null,
    pre_tokenizer: { type: "Metaspace", replacement: MS, prepend_scheme: "first", split: false } } },
  // The older serialization (add_prefix_space, no prepend_scheme: "always"), split, Metaspace decoder.
  metaspace_always_split: { base: "llama2", overrides: {
    normalizer: null,
    pre_tokenizer: { type: "Metaspace", replacement: MS, add_prefix_space: true },
    decoder: { type: "Metaspace", replacement: MS, add_prefix_space: true } } },
  // "never", split, after a NFC normalizer; decoder: byte fallback, Metaspace "never", fuse.
  metaspace_never_split: { base: "llama2", overrides: {
    normalizer: { type: "NFC" },
    pre_tokenizer: { type: "Metaspace", replacement: MS, prepend_scheme: "never", split: true },
    decoder: { type: "Sequence", decoders: [{ type: "ByteFallback" },
      { type: "Metaspace", replacement: MS, prepend_scheme: "never", split: true }, { type: "Fuse" }] } } },
  // "first" behind a Split pre-tokenizer: only the piece at the text's start gets the prefix.
  metaspace_first_after_split: { base: "llama2", overrides: {
    normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { String: "\n" }, behavior: "MergedWithPrevious", invert: false },
      { type: "Metaspace", replacement: MS, prepend_scheme: "first", split: true }] } } },
  // Llama 1/2 files of the older form (e.g. hf-internal-testing/llama-tokenizer) mark <unk>, <s>, </s>
  // "normalized": true: they match after the Prepend/Replace normalizer, as "▁</s>", and decode as that.
  llama_normalized_added: { base: "tinyllama", overrides: {
    added_tokens: ["<unk>", "<s>", "</s>"].map((content, id) => ({ id, content, single_word: false, lstrip: false,
      rstrip: false, normalized: true, special: true })) } },
  // SmolLM2's (StarCoder's) pre-tokenizer: each digit alone, then GPT-2's ByteLevel.
  digits_bytelevel: { base: "qwen2_5", overrides: {
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Digits", individual_digits: true },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true }] } } },
  // Runs of digits, then ByteLevel with add_prefix_space.
  digit_runs_bytelevel: { base: "qwen2_5", overrides: {
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Digits", individual_digits: false },
      { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true }] } } },
};
const OUT = "tests/data/tokenizer/goldens";

const corpus = JSON.parse(fs.readFileSync("tests/data/tokenizer/corpus.json", "utf8"));
const textOf = (e) => (e.hex !== undefined ? Buffer.from(e.hex, "hex").toString("utf8") : e.text);

fs.mkdirSync(OUT, { recursive: true });
const version = require(path.resolve(HF, "node_modules/tokenizers/package.json")).version;
const wanted = process.argv.slice(2);
for (const name of [...NAMES, ...Object.keys(VARIANTS)]) {
  if (wanted.length && !wanted.includes(name)) continue;
  const variant = VARIANTS[name];
  const file = path.join(HF, variant ? variant.base : name, "tokenizer.json");
  if (!fs.existsSync(file)) {
    console.error(`skip ${name}: ${file} absent (run tests/fetch_tokenizers.sh)`);
    continue;
  }
  const json = JSON.parse(fs.readFileSync(file, "utf8"));
  if (variant) Object.assign(json, variant.overrides);
  const tok = variant ? Tokenizer.fromString(JSON.stringify(json)) : Tokenizer.fromFile(file);
  const plain = Tokenizer.fromString(JSON.stringify({ ...json, added_tokens: [] }));
  const entries = [];
  for (const e of corpus) {
    const text = textOf(e);
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const plainIds = (await plain.encode(text, null, { addSpecialTokens: false })).getIds();
    entries.push({
      name: e.name,
      ids,
      plain_ids: plainIds,
      decoded: await tok.decode(ids, false),
      plain_decoded: await tok.decode(plainIds, false),
    });
  }
  const out = { tokenizer: name, hf_tokenizers_npm_version: version };
  if (variant) Object.assign(out, variant);
  out.entries = entries;
  fs.writeFileSync(path.join(OUT, `${name}.json`), JSON.stringify(out) + "\n");
  console.log(`${name}: ${entries.length} entries -> ${OUT}/${name}.json`);
}
