// The official OpenAI client (npm `openai`, pinned in package.json), unmodified, against a running monocu server:
// completions and chat, whole and streamed, usage, stop strings, n > 1, tools, every error the server gives, a client
// that leaves mid-stream. tests/server/run.sh starts the server and runs this; it prints one line per check and exits
// non-zero when any fails.
//
// Environment: MONOCU_URL (http://127.0.0.1:PORT/v1), MONOCU_KEY (the server's --api-key), MONOCU_ALIAS (--alias),
// MONOCU_CTX (-c).
import OpenAI from 'openai';

const base = process.env.MONOCU_URL, key = process.env.MONOCU_KEY, alias = process.env.MONOCU_ALIAS;
const ctx = Number(process.env.MONOCU_CTX);
const root = base.replace(/\/v1$/, '');
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000 });

let passed = 0, failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
function expect(cond, what) {
  if (!cond) throw new Error(what);
}
function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
}
// The error a call throws (an OpenAI.APIError), or a failure when it does not throw.
async function apiError(fn) {
  try {
    await fn();
  } catch (e) {
    if (e instanceof OpenAI.APIError) return e;
    throw e;
  }
  throw new Error('the call did not fail');
}
async function metrics() {
  const r = await fetch(`${root}/metrics`, { headers: { Authorization: `Bearer ${key}` } });
  const m = {};
  for (const line of (await r.text()).split('\n'))
    if (line && !line.startsWith('#')) {
      const [k, v] = line.split(' ');
      m[k] = Number(v);
    }
  return m;
}
async function idle(ms = 5000) {  // no running or waiting sequence, no KV block held
  const t0 = Date.now();
  for (;;) {
    const m = await metrics();
    if (m.monocu_requests_running === 0 && m.monocu_requests_waiting === 0 && m.monocu_kv_blocks_used === 0) return Date.now() - t0;
    if (Date.now() - t0 > ms) throw new Error(`not idle after ${ms} ms: ${JSON.stringify(m)}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const user = [{ role: 'user', content: 'Write a haiku about the sea.' }];
const prompt = 'The quick brown fox';

await check('models: the one model, by its alias', async () => {
  const list = await client.models.list();
  eq(list.data.map((m) => m.id), [alias], 'models');
});

let chatWhole;
await check('chat: a whole completion, greedy: assistant message, finish_reason, usage', async () => {
  const r = await client.chat.completions.create({ model: alias, messages: user, max_tokens: 24, temperature: 0 });
  chatWhole = r;
  expect(r.object === 'chat.completion', 'object');
  eq(r.choices.length, 1, 'choices');
  const c = r.choices[0];
  expect(c.index === 0 && c.message.role === 'assistant', 'index, role');
  expect(typeof c.message.content === 'string', 'content is a string');
  expect(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  expect(r.usage.prompt_tokens > 5 && r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 24, 'usage range');
  eq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'total_tokens');
  if (c.finish_reason === 'length') eq(r.usage.completion_tokens, 24, 'completion_tokens at length');
});

await check('chat: streamed, greedy, adds up to the whole one; usage chunk exact', async () => {
  const s = await client.chat.completions.create({ model: alias, messages: user, max_tokens: 24, temperature: 0, stream: true,
                                                   stream_options: { include_usage: true } });
  let content = '', reasoning = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const ch of s) {
    chunks++;
    expect(ch.object === 'chat.completion.chunk', 'chunk object');
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content ?? '';
      reasoning += c.delta.reasoning_content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  expect(chunks >= 3, `${chunks} chunks`);
  eq(role, 'assistant', 'role');
  const w = chatWhole.choices[0];
  eq(content, w.message.content, 'content');
  eq(reasoning, w.message.reasoning_content ?? '', 'reasoning');
  eq(finish, w.finish_reason, 'finish_reason');
  eq(usage, chatWhole.usage, 'usage');
});

let textWhole;
await check('completions: whole and streamed agree; prompt_tokens as /tokenize counts them', async () => {
  textWhole = await client.completions.create({ model: alias, prompt, max_tokens: 20, temperature: 0 });
  expect(textWhole.object === 'text_completion', 'object');
  const c = textWhole.choices[0];
  let text = '', finish = null, usage = null;
  for await (const ch of await client.completions.create({ model: alias, prompt, max_tokens: 20, temperature: 0, stream: true,
                                                           stream_options: { include_usage: true } })) {
    if (ch.usage) usage = ch.usage;
    for (const x of ch.choices) {
      text += x.text;
      if (x.finish_reason) finish = x.finish_reason;
    }
  }
  eq(text, c.text, 'text');
  eq(finish, c.finish_reason, 'finish_reason');
  eq(usage, textWhole.usage, 'usage');
  const t = await (await fetch(`${root}/tokenize`, { method: 'POST', headers: { Authorization: `Bearer ${key}` },
                                                     body: JSON.stringify({ content: prompt, add_special: true }) })).json();
  eq(textWhole.usage.prompt_tokens, t.tokens.length, 'prompt_tokens');
  if (c.finish_reason === 'length') eq(textWhole.usage.completion_tokens, 20, 'completion_tokens');
  const d = await (await fetch(`${root}/detokenize`, { method: 'POST', headers: { Authorization: `Bearer ${key}` },
                                                       body: JSON.stringify({ tokens: t.tokens }) })).json();
  expect(d.content.endsWith(prompt), `detokenize: ${d.content}`);
});

await check('stop strings: the text ends where the stop string starts, across tokens, whole and streamed', async () => {
  const full = Array.from(textWhole.choices[0].text);  // code points
  expect(full.length >= 12, `a long enough greedy text: ${JSON.stringify(textWhole.choices[0].text)}`);
  const stop = full.slice(6, 9).join('');
  const cut = textWhole.choices[0].text.slice(0, textWhole.choices[0].text.indexOf(stop));
  const r = await client.completions.create({ model: alias, prompt, max_tokens: 20, temperature: 0, stop: [stop, 'never appears'] });
  eq(r.choices[0].text, cut, 'text');
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  expect(r.usage.completion_tokens <= 20, 'completion_tokens');
  let text = '';
  for await (const ch of await client.completions.create({ model: alias, prompt, max_tokens: 20, temperature: 0, stop, stream: true }))
    for (const x of ch.choices) text += x.text;
  eq(text, cut, 'streamed text');
  // chat: the same cut on the reply
  const content = chatWhole.choices[0].message.content;
  if (Array.from(content).length >= 6) {
    const s2 = Array.from(content).slice(3, 5).join('');
    const c = await client.chat.completions.create({ model: alias, messages: user, max_tokens: 24, temperature: 0, stop: s2 });
    eq(c.choices[0].message.content, content.slice(0, content.indexOf(s2)).trim(), 'chat content');
    eq(c.choices[0].finish_reason, 'stop', 'chat finish_reason');
  }
});

await check('n = 3 with a seed: three choices, indexed, usage summed; the same seed gives the same choices', async () => {
  const req = { model: alias, prompt, max_tokens: 8, temperature: 1.0, top_p: 1, n: 3, seed: 1234 };
  const a = await client.completions.create(req);
  eq(a.choices.map((c) => c.index).sort(), [0, 1, 2], 'indexes');
  const lengths = a.choices.filter((c) => c.finish_reason === 'length').length;
  expect(a.usage.completion_tokens >= lengths * 8 && a.usage.completion_tokens <= 24, `completion_tokens ${a.usage.completion_tokens}`);
  const texts = new Set(a.choices.map((c) => c.text));
  expect(texts.size >= 2, 'choices differ (their seeds do)');
  const b = await client.completions.create(req);
  eq(b.choices.map((c) => c.text), a.choices.map((c) => c.text), 'same seed, same choices');
  // streamed n > 1: every index gets its finish
  const fin = new Set();
  for await (const ch of await client.chat.completions.create({ model: alias, messages: user, max_tokens: 6, n: 3, seed: 5, stream: true }))
    for (const c of ch.choices) if (c.finish_reason) fin.add(c.index);
  eq([...fin].sort(), [0, 1, 2], 'streamed finishes');
});

await check('logprobs: chat and completions, whole and streamed; greedy picks the most likely; they add up to the text', async () => {
  const c = await client.chat.completions.create({ model: alias, messages: user, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 });
  const entries = c.choices[0].logprobs.content;
  eq(entries.length, c.usage.completion_tokens, 'one entry per token');
  for (const e of entries) {
    expect(e.logprob <= 0 && e.top_logprobs.length === 3 && Array.isArray(e.bytes), 'entry shape');
    expect(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob && e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob, 'top sorted');
    expect(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-3, `greedy took the most likely: ${e.logprob} vs ${e.top_logprobs[0].logprob}`);
  }
  const whole = (es) => es.every((e) => !e.token.includes('\uFFFD'));  // (a token that is part of a character shows U+FFFD)
  if (whole(entries)) eq(entries.map((e) => e.token).join('').trim(), c.choices[0].message.content, 'tokens spell the content');
  const streamed = [];
  for await (const ch of await client.chat.completions.create({ model: alias, messages: user, max_tokens: 12, temperature: 0, logprobs: true,
                                                               top_logprobs: 3, stream: true }))
    for (const x of ch.choices) if (x.logprobs) streamed.push(...x.logprobs.content);
  eq(streamed.map((e) => e.token), entries.map((e) => e.token), 'streamed tokens');
  for (let i = 0; i < entries.length; i++) expect(Math.abs(streamed[i].logprob - entries[i].logprob) < 1e-4, 'streamed logprobs');
  const t = await client.completions.create({ model: alias, prompt, max_tokens: 10, temperature: 0, logprobs: 2 });
  const lp = t.choices[0].logprobs;
  eq(lp.tokens.length, t.usage.completion_tokens, 'completions: one per token');
  if (lp.tokens.every((x) => !x.includes('\uFFFD'))) eq(lp.tokens.join(''), t.choices[0].text, 'completions: tokens spell the text');
  expect(lp.top_logprobs.every((o) => Object.keys(o).length >= 1 && Object.keys(o).length <= 2), 'completions: top 2');
  expect(lp.text_offset[0] === 0 && lp.text_offset.every((x, i) => i === 0 || x >= lp.text_offset[i - 1]), 'text_offset');
  const none = await client.completions.create({ model: alias, prompt, max_tokens: 3 });
  expect(none.choices[0].logprobs === null, 'null when not asked');
});

await check('penalties: a large frequency penalty makes greedy text repeat fewer tokens; presence too', async () => {
  const base = await client.completions.create({ model: alias, prompt, max_tokens: 48, temperature: 0 });
  const distinct = async (extra) => {
    const r = await client.completions.create({ model: alias, prompt, max_tokens: 48, temperature: 0, logprobs: 0, ...extra });
    return new Set(r.choices[0].logprobs.tokens).size;
  };
  const plain = await distinct({}), freq = await distinct({ frequency_penalty: 2 }), pres = await distinct({ presence_penalty: 2 });
  console.log(`     (distinct tokens in 48: ${plain} plain, ${freq} frequency 2, ${pres} presence 2)`);
  expect(freq >= plain && pres >= plain && (freq > plain || plain >= 40), 'penalties spread the choice of tokens');
  expect(base.choices[0].text.length > 0, 'text');
});

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
                                               parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
await check('tools: offered (auto, a named one, none), and a tool call round trip through the template', async () => {
  for (const tool_choice of ['auto', 'none', { type: 'function', function: { name: 'get_weather' } }]) {
    const r = await client.chat.completions.create({ model: alias, messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools, tool_choice,
                                                     max_tokens: 16, temperature: 0 });
    const m = r.choices[0].message;
    expect(m.role === 'assistant', 'role');
    if (m.tool_calls) for (const c of m.tool_calls) expect(c.type === 'function' && JSON.parse(c.function.arguments), 'a parsed call');
  }
  const r = await client.chat.completions.create({
    model: alias, tools, max_tokens: 8, temperature: 0,
    messages: [{ role: 'user', content: 'Weather in Oslo?' },
               { role: 'assistant', content: null,
                 tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
               { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 4, "sky": "rain"}' }],
  });
  expect(r.choices[0].message.role === 'assistant', 'the reply after a tool result');
  // The template rendered the call and its result: more prompt tokens than the question alone.
  const q = await client.chat.completions.create({ model: alias, tools, max_tokens: 1, messages: [{ role: 'user', content: 'Weather in Oslo?' }] });
  expect(r.usage.prompt_tokens > q.usage.prompt_tokens + 15, `prompt tokens ${r.usage.prompt_tokens} vs ${q.usage.prompt_tokens}`);
});

await check('errors: key, model, field, context, JSON, size: status, type, param, message', async () => {
  const bad = new OpenAI({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
  let e = await apiError(() => bad.chat.completions.create({ model: alias, messages: user }));
  expect(e instanceof OpenAI.AuthenticationError && e.status === 401, `401: ${e.status}`);
  e = await apiError(() => client.chat.completions.create({ model: 'gpt-4o', messages: user }));
  expect(e instanceof OpenAI.NotFoundError && e.status === 404 && e.param === 'model' && e.code === 'model_not_found', `404: ${e.message}`);
  e = await apiError(() => client.chat.completions.create({ model: alias, messages: user, temperature: 5 }));
  expect(e instanceof OpenAI.BadRequestError && e.param === 'temperature' && /temperature/.test(e.message), `400 field: ${e.message}`);
  e = await apiError(() => client.chat.completions.create({ model: alias, messages: user, max_tokens: ctx }));
  expect(e.status === 400 && e.code === 'context_length_exceeded' && new RegExp(String(ctx)).test(e.message), `400 context: ${e.message}`);
  e = await apiError(() => client.completions.create({ model: alias, prompt: 'x '.repeat(ctx + 10) }));
  expect(e.status === 400 && e.code === 'context_length_exceeded', `400 long prompt: ${e.message}`);
  e = await apiError(() => client.chat.completions.create({ model: alias, messages: user, presence_penalty: 3 }));
  expect(e.status === 400 && e.param === 'presence_penalty', `400 range: ${e.message}`);
  e = await apiError(() => client.chat.completions.create({ model: alias, messages: [] }));
  expect(e.status === 400 && e.param === 'messages', `400 messages: ${e.message}`);
  const raw = await fetch(`${base}/chat/completions`, { method: 'POST', headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
                                                        body: '{"messages": [' });
  expect(raw.status === 400 && (await raw.json()).error.message, 'malformed JSON');
  const big = await fetch(`${base}/chat/completions`, { method: 'POST', headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
                                                        body: JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(9 << 20) }] }) });
  expect(big.status === 413 && (await big.json()).error.message, `413: ${big.status}`);
});

await check('a client that leaves mid-stream frees its sequence and KV blocks', async () => {
  await idle();
  const ac = new AbortController();
  const s = await client.chat.completions.create({ model: alias, messages: user, max_tokens: Math.min(1500, ctx - 64), temperature: 0, stream: true },
                                                 { signal: ac.signal });
  let n = 0;
  try {
    for await (const ch of s) if (++n === 3) ac.abort();
  } catch (e) {
    expect(e.name === 'APIUserAbortError' || e.name === 'AbortError', `abort: ${e.name}`);
  }
  const m = await metrics();
  expect(m.monocu_kv_blocks_used >= 0, 'metrics read');
  const ms = await idle(2000);
  console.log(`     (idle ${ms} ms after the abort)`);
});

await check('queue full: 503 with Retry-After, the rest served; nothing left behind', async () => {
  const many = [];
  for (let i = 0; i < 400; i++)
    many.push(client.completions.create({ model: alias, prompt: `${i} ${prompt}`, max_tokens: 64, temperature: 0 })
      .then(() => 200, (e) => (e instanceof OpenAI.APIError ? [e.status, e.headers?.get?.('retry-after') ?? e.headers?.['retry-after']] : String(e))));
  const out = await Promise.all(many);
  const ok = out.filter((x) => x === 200).length, busy = out.filter((x) => Array.isArray(x) && x[0] === 503);
  const other = out.filter((x) => x !== 200 && !(Array.isArray(x) && x[0] === 503));
  console.log(`     (${ok} served, ${busy.length} refused busy)`);
  eq(other, [], 'other outcomes');
  expect(ok > 0 && busy.length > 0, 'some served, some refused');
  expect(busy.every((x) => x[1] === '1'), 'Retry-After: 1');
  await idle();
});

await check('metrics: counters moved, nothing held', async () => {
  const m = await metrics();
  expect(m.monocu_requests_finished_total > 10 && m.monocu_generated_tokens_total > 100 && m.monocu_step_seconds_count > 10, 'counters');
  expect(m.monocu_requests_cancelled_total >= 2, 'cancellations counted (the abort, the stop strings)');
  expect(m.monocu_prefix_cache_hit_blocks_total >= 0, 'prefix cache');
  eq([m.monocu_requests_running, m.monocu_requests_waiting, m.monocu_kv_blocks_used], [0, 0, 0], 'idle');
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
