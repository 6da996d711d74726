// Load on a running monocu server through the official OpenAI client: C concurrent streaming clients, each sending
// completions back to back for S seconds (a prompt of P random token ids, G tokens generated, greedy); optionally a
// share of them leave mid-stream at a random point. Reports throughput, time to first token and inter-token latency
// (p50 / p99), error counts by status, and whether the server is idle with no KV block held afterwards.
//
// Usage: node tests/server/load.mjs URL KEY ALIAS [clients=256] [seconds=120] [prompt=512] [gen=256] [leave=0.0] [vocab=150000]
// Prints one JSON line of results last.
import OpenAI from 'openai';

const [url, key, alias] = process.argv.slice(2, 5);
const clients = Number(process.argv[5] ?? 256), seconds = Number(process.argv[6] ?? 120);
const P = Number(process.argv[7] ?? 512), G = Number(process.argv[8] ?? 256), leave = Number(process.argv[9] ?? 0);
const vocab = Number(process.argv[10] ?? 150000);
const root = url.replace(/\/v1$/, '');
const client = new OpenAI({ baseURL: url, apiKey: key, maxRetries: 0, timeout: 600000 });

let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const ttft = [], itl = [], statuses = {};
let tokens = 0, requests = 0, left = 0, done = 0;
const t_end = Date.now() + seconds * 1000;

async function one() {
  const prompt = Array.from({ length: P }, () => Math.floor(rand() * vocab));
  const leaveAt = rand() < leave ? 1 + Math.floor(rand() * G) : -1;
  const ac = new AbortController();
  const t0 = performance.now();
  let last = 0, n = 0, usage = -1;
  try {
    const s = await client.completions.create({ model: alias, prompt, max_tokens: G, temperature: 0, stream: true, stream_options: { include_usage: true } },
                                             { signal: ac.signal });
    for await (const ch of s) {
      const now = performance.now();
      if (ch.usage) usage = ch.usage.completion_tokens;
      if (!ch.choices.length || ch.choices[0].finish_reason) continue;  // (the finish chunk carries no token)
      if (n === 0) ttft.push(now - t0);
      else itl.push(now - last);
      last = now;
      n++;
      if (n === leaveAt) {
        left++;
        ac.abort();
      }
    }
    done++;
    statuses[200] = (statuses[200] ?? 0) + 1;
  } catch (e) {
    if (e.name === 'APIUserAbortError' || e.name === 'AbortError') statuses.left = (statuses.left ?? 0) + 1;
    else {
      const k = e.status ?? e.name ?? 'error';
      statuses[k] = (statuses[k] ?? 0) + 1;
      if (e.status === 503) await new Promise((r) => setTimeout(r, 1000));
    }
  }
  tokens += usage >= 0 ? usage : n;  // (a chunk may hold several tokens' text, or wait for a character's end)
  requests++;
}

async function worker() {
  while (Date.now() < t_end) await one();
}

const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, worker));
const wall = (performance.now() - t0) / 1000;
const pct = (a, p) => {
  if (!a.length) return null;
  const s = [...a].sort((x, y) => x - y);
  return Number(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))].toFixed(2));
};
// Idle afterwards: nothing running or waiting, no KV block held.
let m = {};
for (let i = 0; i < 200; i++) {
  const r = await fetch(`${root}/metrics`, { headers: { Authorization: `Bearer ${key}` } });
  m = {};
  for (const line of (await r.text()).split('\n')) if (line && !line.startsWith('#')) m[line.split(' ')[0]] = Number(line.split(' ')[1]);
  if (m.monocu_requests_running === 0 && m.monocu_requests_waiting === 0 && m.monocu_kv_blocks_used === 0) break;
  await new Promise((r) => setTimeout(r, 25));
}
const out = {
  clients, seconds, prompt: P, gen: G, leave, wall_s: Number(wall.toFixed(1)), requests, completed: done, left_midway: left, statuses,
  tokens, tok_s: Number((tokens / wall).toFixed(1)),
  ttft_ms: { p50: pct(ttft, 50), p99: pct(ttft, 99) }, itl_ms: { p50: pct(itl, 50), p99: pct(itl, 99) },
  after: { running: m.monocu_requests_running, waiting: m.monocu_requests_waiting, kv_blocks_used: m.monocu_kv_blocks_used,
           step_s_mean: Number((m.monocu_step_seconds_sum / m.monocu_step_seconds_count).toFixed(5)) },
};
console.log(JSON.stringify(out));
