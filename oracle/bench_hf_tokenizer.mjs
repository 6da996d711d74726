// bench_hf_tokenizer.mjs — HF `tokenizers` (npm Node binding, Rust core) on the same text as
// `build/tools/tokenize --bench`: load time of tokenizer.json and encode MB/s, best of three.
// Usage (repo root): node oracle/bench_hf_tokenizer.mjs tests/data/hf/qwen3 tests/data/hf/bench/bench.txt
// Run it with RAYON_NUM_THREADS=1 for a single-threaded figure (one encode call is one sequence).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);
const { Tokenizer } = require(path.resolve("tests/data/hf/node_modules/tokenizers"));
const [dir, file] = process.argv.slice(2);
let t0 = process.hrtime.bigint();
const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
console.log(`load: ${(Number(process.hrtime.bigint() - t0) / 1e6).toFixed(1)} ms`);
const text = fs.readFileSync(file, "utf8");
const mb = Buffer.byteLength(text) / 1e6;
let best = Infinity, n = 0;
for (let pass = 0; pass < 3; pass++) {
  t0 = process.hrtime.bigint();
  const enc = await tok.encode(text, null, { addSpecialTokens: false });
  n = enc.getIds().length;
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(`encode: ${mb.toFixed(2)} MB in ${best.toFixed(3)} s = ${(mb / best).toFixed(2)} MB/s, ${n} tokens (best of 3)`);
