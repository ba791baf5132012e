// bench/serve_load.mjs: a load of streamed completions against an OpenAI-compatible server (bench/serve runs it
// against `maxtext serve` and llama-server in turn). Plain fetch and SSE parsing, no dependency:
//   node bench/serve_load.mjs URL --clients C --requests R --max-tokens M [--eos ID] [--label NAME]
// C clients each send R/C requests one after another to /v1/completions (the same prompt text for both servers; no
// chat template in between), greedy, `max_tokens` M, the end-of-sequence id banned with logit_bias so that every
// answer is M tokens long. Prints one JSON line: generated tokens, wall seconds, tokens/s
// over the whole run, and the median / 90th percentile time to the first streamed text and per request.
const args = process.argv.slice(2);
const url = args[0];
const opt = (name, d) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : d;
};
const clients = Number(opt('clients', 4));
const requests = Number(opt('requests', 16));
const maxTokens = Number(opt('max-tokens', 64));
const eos = opt('eos', '2');
const label = opt('label', url);
const prompts = ['Once upon a time', 'The little dog', 'Lily wanted to', 'One sunny day', 'Tom and his friend',
  'The big tree', 'A girl named Sue', 'In a small town'];

let retries = 0;
// A keep-alive connection the server closed while idle fails before the request is sent (undici: "other side
// closed"): sent again on a new connection, at most twice, and counted.
async function post(body) {
  for (let attempt = 0; ; ++attempt) {
    try {
      return await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
    } catch (e) {
      if (attempt >= 2 || e?.cause?.code !== 'UND_ERR_SOCKET') throw e;
      retries++;
    }
  }
}

async function one(i) {
  const t0 = performance.now();
  const r = await post(JSON.stringify({ model: 'm', prompt: prompts[i % prompts.length], temperature: 0,
    max_tokens: maxTokens, stream: true, stream_options: { include_usage: true }, logit_bias: { [eos]: -100 } }));
  if (!r.ok) throw new Error(`${label}: HTTP ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '', first = null, tokens = null, pieces = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k).trim();
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data:')) continue;
      const data = ev.slice(5).trim();
      if (data === '[DONE]') continue;
      const j = JSON.parse(data);
      if (j.usage) tokens = j.usage.completion_tokens;
      const c = j.choices?.[0]?.text;
      if (c) {
        pieces++;
        if (first === null) first = performance.now() - t0;
      }
    }
  }
  return { first: first ?? NaN, total: performance.now() - t0, tokens: tokens ?? pieces };
}

const results = [];
const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, async (_, c) => {
  for (let i = c; i < requests; i += clients) results.push(await one(i));
}));
const wall = (performance.now() - t0) / 1000;
const q = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const tokens = results.reduce((a, r) => a + r.tokens, 0);
console.log(JSON.stringify({ label, clients, requests, max_tokens: maxTokens, tokens, wall_s: +wall.toFixed(3),
  tokens_per_s: +(tokens / wall).toFixed(1), first_ms_p50: +q(results.map((r) => r.first), 0.5).toFixed(1),
  first_ms_p90: +q(results.map((r) => r.first), 0.9).toFixed(1), request_ms_p50: +q(results.map((r) => r.total), 0.5).toFixed(1), retries }));
