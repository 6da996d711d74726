// server/chat_page.h — the chat page the server sends at GET / : one static HTML file with its script, compiled in
// (no build step, no files to find at run time). It talks to the server's own /v1/chat/completions, streaming:
// the reply appears as it is written, its reasoning folded apart, a Stop button ends it (the server frees the
// sequence when the connection closes), and each reply shows its token count and tokens per second.
// `/?prompt=TEXT` sends TEXT on load (a link that opens a conversation; the headless-browser test uses it).
#pragma once

namespace monocu {

inline const char* chat_page_html() {
    return R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>monocu</title>
<style>
  :root { --fg: #1d1d1f; --muted: #6e6e73; --line: #d2d2d7; --user: #e8f0fe; --bot: #f5f5f7; --accent: #0b63ce; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); display: flex;
         flex-direction: column; height: 100vh; }
  header { padding: 10px 16px; border-bottom: 1px solid var(--line); display: flex; gap: 12px; align-items: center; flex-wrap: wrap; }
  header b { font-size: 16px; }
  header label { color: var(--muted); font-size: 13px; }
  header input { width: 70px; }
  #model { color: var(--muted); font-size: 13px; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 12px; }
  .msg { max-width: 760px; padding: 10px 14px; border-radius: 12px; white-space: pre-wrap; word-wrap: break-word; }
  .user { background: var(--user); align-self: flex-end; }
  .assistant { background: var(--bot); align-self: flex-start; }
  .assistant details { color: var(--muted); margin-bottom: 6px; }
  .assistant details summary { cursor: pointer; font-size: 13px; }
  .stats { color: var(--muted); font-size: 12px; margin-top: 6px; }
  .error { color: #b3261e; }
  .tool { font-family: ui-monospace, monospace; font-size: 13px; color: var(--accent); }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid var(--line); }
  textarea { flex: 1; resize: none; height: 64px; font: inherit; padding: 8px; border: 1px solid var(--line); border-radius: 8px; }
  button { font: inherit; padding: 0 18px; border-radius: 8px; border: 1px solid var(--accent); background: var(--accent); color: white; cursor: pointer; }
  button.secondary { background: white; color: var(--accent); }
  button:disabled { opacity: 0.4; cursor: default; }
</style>
</head>
<body>
<header>
  <b>monocu</b><span id="model"></span>
  <label>system <input id="system" style="width: 220px" placeholder="(none)"></label>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" value="1024"></label>
  <label>API key <input id="key" type="password" style="width: 120px"></label>
  <button id="clear" class="secondary" type="button">New chat</button>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter sends, Shift+Enter is a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" class="secondary" disabled>Stop</button>
</form>
<script>
const $ = (id) => document.getElementById(id);
let messages = [], controller = null;

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if ($('key').value) h.Authorization = 'Bearer ' + $('key').value;
  return h;
}

function bubble(role) {
  const d = document.createElement('div');
  d.className = 'msg ' + role;
  $('log').appendChild(d);
  return d;
}

async function loadModel() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    if (r.ok) $('model').textContent = (await r.json()).data.map((m) => m.id).join(', ');
  } catch (e) {}
}

// One reply, streamed: server-sent events read off the response body as they arrive.
async function send(text) {
  messages.push({ role: 'user', content: text });
  bubble('user').textContent = text;
  const out = bubble('assistant');
  const think = document.createElement('details'), thinkText = document.createElement('div'), body = document.createElement('div');
  const stats = document.createElement('div');
  think.innerHTML = '<summary>reasoning</summary>';
  think.appendChild(thinkText);
  think.hidden = true;
  stats.className = 'stats';
  out.append(think, body, stats);
  let content = '', reasoning = '', usage = null, first = 0, calls = [];
  const t0 = performance.now();
  controller = new AbortController();
  $('send').disabled = true;
  $('stop').disabled = false;
  const all = [];
  if ($('system').value) all.push({ role: 'system', content: $('system').value });
  all.push(...messages);
  let finish = '';
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), signal: controller.signal,
      body: JSON.stringify({ messages: all, stream: true, stream_options: { include_usage: true },
                             temperature: Number($('temperature').value), max_tokens: Number($('max_tokens').value) }),
    });
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
          const d = c.delta || {};
          if ((d.content || d.reasoning_content) && !first) first = performance.now();
          if (d.reasoning_content) {
            reasoning += d.reasoning_content;
            thinkText.textContent = reasoning;
            think.hidden = false;
          }
          if (d.content) {
            content += d.content;
            body.textContent = content;
          }
          if (d.tool_calls) calls.push(...d.tool_calls);
          if (c.finish_reason) finish = c.finish_reason;
        }
        $('log').scrollTop = $('log').scrollHeight;
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') finish = 'stopped';
    else {
      const err = document.createElement('div');
      err.className = 'error';
      err.textContent = String(e.message || e);
      out.appendChild(err);
    }
  }
  for (const c of calls) {
    const t = document.createElement('div');
    t.className = 'tool';
    t.textContent = 'tool call: ' + c.function.name + ' ' + c.function.arguments;
    out.insertBefore(t, stats);
  }
  const secs = ((first ? performance.now() - first : 0) / 1000);
  const n = usage ? usage.completion_tokens : null;
  stats.textContent = (n !== null ? n + ' tokens' : '') +
    (n && secs > 0 ? ', ' + (n / secs).toFixed(1) + ' tok/s' : '') +
    (first ? ', first token ' + ((first - t0) / 1000).toFixed(2) + ' s' : '') + (finish ? ' (' + finish + ')' : '');
  messages.push({ role: 'assistant', content });
  controller = null;
  $('send').disabled = false;
  $('stop').disabled = true;
}

$('form').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    $('form').requestSubmit();
  }
});
$('stop').addEventListener('click', () => controller && controller.abort());
$('clear').addEventListener('click', () => {
  if (controller) controller.abort();
  messages = [];
  $('log').innerHTML = '';
});
loadModel();
const q = new URLSearchParams(location.search).get('prompt');
if (q) send(q);
</script>
</body>
</html>
)PAGE";
}

}  // namespace monocu
