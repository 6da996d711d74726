// Loads a page in headless Chromium (Debian's chromium-headless-shell), waits in real time until its text contains
// WANT (or TIMEOUT_MS passes), and prints the page's HTML. Driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: messages are JSON ended by a NUL byte), so no port and no WebSocket are needed.
//
// Usage: node tests/server/page_check.mjs URL WANT [TIMEOUT_MS=20000] [BROWSER=/usr/bin/chromium-headless-shell]
// (tests/test_http_server.cpp runs it for the chat page.)
import { spawn } from 'node:child_process';

const [url, want, timeout = '20000', browser = '/usr/bin/chromium-headless-shell'] = process.argv.slice(2);
const chrome = spawn(browser, ['--no-sandbox', '--disable-gpu', '--remote-debugging-pipe', 'about:blank'],
                     { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'] });
const toBrowser = chrome.stdio[3], fromBrowser = chrome.stdio[4];
let nextId = 0, buf = '';
const waiting = new Map();
fromBrowser.on('data', (d) => {
  buf += d.toString();
  let at;
  while ((at = buf.indexOf('\0')) >= 0) {
    const msg = JSON.parse(buf.slice(0, at));
    buf = buf.slice(at + 1);
    if (msg.id !== undefined && waiting.has(msg.id)) {
      waiting.get(msg.id)(msg);
      waiting.delete(msg.id);
    }
  }
});
const call = (method, params = {}, sessionId) =>
  new Promise((resolve) => {
    const id = ++nextId;
    waiting.set(id, resolve);
    toBrowser.write(JSON.stringify(sessionId ? { id, method, params, sessionId } : { id, method, params }) + '\0');
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let html = '';
try {
  const target = await call('Target.createTarget', { url });
  const { result } = await call('Target.attachToTarget', { targetId: target.result.targetId, flatten: true });
  const end = Date.now() + Number(timeout);
  while (Date.now() < end) {
    const r = await call('Runtime.evaluate', { expression: 'document.documentElement.outerHTML', returnByValue: true }, result.sessionId);
    html = r.result?.result?.value ?? '';
    if (html.includes(want)) break;
    await sleep(50);
  }
} finally {
  process.stdout.write(html);
  chrome.kill();
}
process.exit(0);
