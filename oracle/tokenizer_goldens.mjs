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
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);
const HF = "tests/data/hf";
const { Tokenizer } = require(path.resolve(HF, "node_modules/tokenizers"));
const NAMES = ["qwen3", "llama3_1", "gptoss", "gemma3", "deepseek_v3", "llama2"];
const OUT = "tests/data/tokenizer/goldens";

const corpus = JSON.parse(fs.readFileSync("tests/data/tokenizer/corpus.json", "utf8"));
const textOf = (e) => (e.hex !== undefined ? Buffer.from(e.hex, "hex").toString("utf8") : e.text);

function withoutAddedTokens(file) {
  const j = JSON.parse(fs.readFileSync(file, "utf8"));
  j.added_tokens = [];
  return Tokenizer.fromString(JSON.stringify(j));
}

fs.mkdirSync(OUT, { recursive: true });
const version = require(path.resolve(HF, "node_modules/tokenizers/package.json")).version;
for (const name of NAMES) {
  const file = path.join(HF, name, "tokenizer.json");
  if (!fs.existsSync(file)) {
    console.error(`skip ${name}: ${file} absent (run tests/fetch_tokenizers.sh)`);
    continue;
  }
  const tok = Tokenizer.fromFile(file);
  const plain = withoutAddedTokens(file);
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
  const out = { tokenizer: name, hf_tokenizers_npm_version: version, entries };
  fs.writeFileSync(path.join(OUT, `${name}.json`), JSON.stringify(out) + "\n");
  console.log(`${name}: ${entries.length} entries -> ${OUT}/${name}.json`);
}
