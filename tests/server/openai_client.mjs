// `maxtext serve` driven by a client no one here wrote: the official `openai` npm package (tests/server/package.json,
// installed by scripts/setup.sh --tests). Run by CTest:
//   node tests/server/openai_client.mjs MAXTEXT_PROGRAM MODELS_DIR
// Exit 77 (skipped) without the package or without stories260K. Checks, on loopback:
// - /v1/models; completions and chat completions, whole and streamed (the deltas add up to the whole answer; the
//   usage chunk); greedy answers equal `maxtext generate`'s text for the same prompt;
// - response_format json_schema: the content parses and has the schema's keys;
// - refusals as the client surfaces them: an unknown field (400 naming the nearest field), a context overflow;
// - a load test: 64 concurrent streams on 4 slots, every answer equal to the same request run alone, twice, with the
//   server's resident memory flat between the rounds; a client that aborts a stream is noticed (/health);
// - pictures (image_url data URLs) through a tiny multimodal Gemma 3's tower, equal to `maxtext generate --image`;
// - tool calls through Qwen3's chat template (a seeded model; tool_choice required and named make it call): whole and
//   streamed, and the call and its result sent back;
// - a server with one slot and no queue answers a burst with 503s (the client's APIError), and an API key is enforced.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const [maxtext, modelsDir] = process.argv.slice(2);
// --sanitized: the program is an ASan build, whose quarantine keeps freed memory resident for a while, so resident
// memory says nothing about leaks there (LeakSanitizer checks them at exit instead).
const sanitized = process.argv.includes('--sanitized');
if (!maxtext || !modelsDir) {
  console.error('usage: node openai_client.mjs MAXTEXT_PROGRAM MODELS_DIR');
  process.exit(2);
}
let OpenAI;
try {
  OpenAI = (await import(createRequire(join(here, 'package.json')).resolve('openai'))).default;
} catch (e) {
  console.log(`skipped: the openai npm package is not installed in ${here} (npm install there, as scripts/setup.sh --tests does): ${e.message}`);
  process.exit(77);
}
const weights = join(modelsDir, 'stories260K', 'stories260K.bin');
const tokenizer = join(modelsDir, 'stories260K', 'tok512.bin');
if (!existsSync(weights) || !existsSync(tokenizer)) {
  console.log(`skipped: ${weights} or ${tokenizer} not found`);
  process.exit(77);
}

let failures = 0;
function check(ok, what) {
  if (ok) {
    console.log(`ok: ${what}`);
  } else {
    console.log(`FAILED: ${what}`);
    failures++;
  }
}

const servers = [];
/** Starts `maxtext serve` on a free port; resolves when it listens. */
function serve(args, env = {}, stories = true) {
  return new Promise((resolve, reject) => {
    const model = stories ? ['--weights', weights, '--tokenizer', tokenizer] : [];
    const p = spawn(maxtext, ['serve', ...model, '--port', '0', '--threads', '1', ...args],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'pipe'] });
    servers.push(p);
    let log = '';
    const timer = setTimeout(() => reject(new Error(`maxtext serve did not start: ${log}`)), 60000);
    p.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m && !p.url) {
        p.url = m[1];
        clearTimeout(timer);
        resolve(p);
      }
    });
    p.on('exit', (code) => {
      if (!p.url) reject(new Error(`maxtext serve exited with ${code}: ${log}`));
    });
    p.logText = () => log;
  });
}
function rssKiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) : NaN;
}
async function health(url) {
  return (await fetch(`${url}/health`)).json();
}

try {
  const s = await serve(['--parallel', '4', '--queue', '64', '--ctx-size', '256']);
  const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === 'stories260K.bin', `/v1/models lists the model (${models.data[0]?.id})`);

  // Completions: greedy text equal to `maxtext generate`'s for the same prompt and length.
  const prompt = 'Once upon a time';
  const c = await client.completions.create({ model: 'stories260K.bin', prompt, max_tokens: 40, temperature: 0 });
  const cli = execFileSync(maxtext, ['generate', '--weights', weights, '--tokenizer', tokenizer, '--prompt', prompt,
    '--max-new-tokens', '40', '--threads', '1'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  check(c.choices[0].text.length > 0 && cli.startsWith(prompt + c.choices[0].text),
    `completion equals maxtext generate's text (${JSON.stringify(c.choices[0].text.slice(0, 40))}...)`);
  check(c.usage.completion_tokens === 40 && c.choices[0].finish_reason === 'length', 'completion: 40 tokens, finish_reason length');
  let streamed = '';
  for await (const chunk of await client.completions.create({ model: 'x', prompt, max_tokens: 40, temperature: 0, stream: true })) {
    streamed += chunk.choices[0]?.text ?? '';
  }
  check(streamed === c.choices[0].text, 'streamed completion equals the whole one');

  // Chat: whole and streamed, with the usage chunk.
  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a cat.' }];
  const whole = await client.chat.completions.create({ model: 'm', messages, max_tokens: 48, temperature: 0 });
  const answer = whole.choices[0].message.content;
  check(whole.object === 'chat.completion' && whole.choices[0].message.role === 'assistant' && answer.length > 0,
    `chat completion (${JSON.stringify(answer.slice(0, 40))}...)`);
  let deltas = '', usage = null, roles = 0, finish = null;
  const stream = await client.chat.completions.create({ model: 'm', messages, max_tokens: 48, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role) roles++;
      deltas += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(deltas === answer, 'streamed chat deltas add up to the whole answer');
  check(roles === 1 && finish === whole.choices[0].finish_reason, `one role delta, the same finish_reason (${finish})`);
  check(usage && usage.completion_tokens === whole.usage.completion_tokens && usage.prompt_tokens === whole.usage.prompt_tokens,
    `usage chunk (${JSON.stringify(usage)})`);
  const lp = await client.chat.completions.create({ model: 'm', messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
  const lpc = lp.choices[0].logprobs?.content ?? [];
  check(lpc.length === 5 && lpc.every((t) => t.logprob <= 0 && t.top_logprobs.length === 2 && t.top_logprobs[0].logprob >= t.logprob - 1e-6),
    'logprobs: one entry per token, the chosen token is the most likely under greedy');

  // JSON schema.
  const js = await client.chat.completions.create({ model: 'm', messages, max_tokens: 200, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema: {
      type: 'object', properties: { name: { type: 'string', maxLength: 10 }, legs: { type: 'integer' } },
      required: ['name', 'legs'], additionalProperties: false } } } });
  let doc = null;
  try {
    doc = JSON.parse(js.choices[0].message.content);
  } catch (e) {
    doc = null;
  }
  check(js.choices[0].finish_reason === 'stop' && doc && typeof doc.name === 'string' && Number.isInteger(doc.legs) &&
    Object.keys(doc).length === 2, `json_schema answer follows the schema (${js.choices[0].message.content})`);

  // Refusals, as the client surfaces them.
  try {
    await client.chat.completions.create({ model: 'm', messages, temprature: 0 });
    check(false, 'an unknown field is refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400 && /did you mean 'temperature'/.test(e.message) &&
      e.param === 'temprature', `unknown field refused: 400 ${e.message}`);
  }
  try {
    await client.completions.create({ model: 'm', prompt, max_tokens: 1000 });
    check(false, 'a context overflow is refused');
  } catch (e) {
    check(e.status === 400 && /exceed the context of 256 tokens/.test(e.message), `context overflow refused: ${e.message}`);
  }

  // Load: 64 concurrent streams on 4 slots (queue 64), each equal to the same request alone; twice, memory flat.
  const prompts = ['Once upon a time', 'The dog ran', 'Lily and Tom', 'One day, a bird', 'The sun was hot', 'A big red ball',
    'Tim liked to', 'In the park'];
  const alone = [];
  for (const p of prompts) {
    alone.push((await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: p }], max_tokens: 32,
      temperature: 0 })).choices[0].message.content);
  }
  const rss = [];
  for (let round = 0; round < 2; round++) {
    const t0 = Date.now();
    const results = await Promise.all(Array.from({ length: 64 }, async (_, i) => {
      let text = '';
      const st = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: prompts[i % 8] }],
        max_tokens: 32, temperature: 0, stream: true });
      for await (const chunk of st) text += chunk.choices[0]?.delta?.content ?? '';
      return text;
    }));
    const same = results.filter((t, i) => t === alone[i % 8]).length;
    rss.push(rssKiB(s.pid));
    check(same === 64, `round ${round + 1}: 64 concurrent streams, ${same} equal to the request alone (${Date.now() - t0} ms, RSS ${rss[round]} KiB)`);
  }
  if (sanitized) {
    console.log(`(resident memory not checked in a sanitizer build: ${rss[0]} -> ${rss[1]} KiB)`);
  } else {
    check(rss[1] - rss[0] < 16 * 1024, `resident memory flat between rounds (${rss[0]} -> ${rss[1]} KiB)`);
  }

  // A client that goes away mid-stream: the server stops that generation (the cancelled count).
  const before = (await health(s.url)).cancelled;
  const ac = new AbortController();
  try {
    const st = await client.completions.create({ model: 'm', prompt, max_tokens: 200, temperature: 0, stream: true,
      logit_bias: { 2: -100 } }, { signal: ac.signal });
    let n = 0;
    for await (const chunk of st) {
      if (++n === 3) ac.abort();
      void chunk;
    }
  } catch (e) {
    void e;  // the abort
  }
  let after = before;
  for (let i = 0; i < 100 && after === before; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = (await health(s.url)).cancelled;
  }
  check(after === before + 1, `an aborted stream is cancelled on the server (cancelled ${before} -> ${after})`);

  // Tool calls: Qwen3's tokenizer and chat template (its <tool_call> syntax) over a seeded small model. Its text is
  // noise, but tool_choice required makes it call a tool through the call grammar.
  const qwen = join(modelsDir, 'tokenizers', 'qwen3');
  if (existsSync(join(qwen, 'tokenizer_config.json'))) {
    const t = await serve(['--config', join(here, '..', '..', 'configs', 'models', 'llama2-7b.yml'), 'base_num_decoder_layers=1',
      'base_emb_dim=64', 'base_num_query_heads=2', 'base_num_kv_heads=2', 'head_dim=32', 'base_mlp_dim=128', 'dtype=float32',
      'vocab_size=151936', 'max_target_length=1024', '--seed', '3', '--tokenizer', qwen, '--ctx-size', '1024'], {}, false);
    check(/tool calls: hermes/.test(t.logText()), 'the server reads the tool-call syntax of Qwen3\'s template');
    const tc = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
    const tools = [
      { type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: { type: 'object',
        properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } }, required: ['city', 'days'],
        additionalProperties: false } } },
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } },
        required: ['zone'], additionalProperties: false } } }];
    const ask = [{ role: 'user', content: 'What is the weather in Oslo?' }];
    const fits = (call) => {
      const a = JSON.parse(call.function.arguments);
      return call.function.name === 'get_weather' ? typeof a.city === 'string' && Number.isInteger(a.days)
        : call.function.name === 'get_time' && ['UTC', 'CET'].includes(a.zone);
    };
    const called = await tc.chat.completions.create({ model: 'm', messages: ask, tools, tool_choice: 'required',
      parallel_tool_calls: false, temperature: 0, max_tokens: 80 });
    const m = called.choices[0].message;
    check(called.choices[0].finish_reason === 'tool_calls' && m.content === null && m.tool_calls?.length === 1 &&
      m.tool_calls[0].type === 'function' && fits(m.tool_calls[0]), `required tool call: ${JSON.stringify(m.tool_calls)}`);
    const named = await tc.chat.completions.create({ model: 'm', messages: ask, tools, parallel_tool_calls: false,
      tool_choice: { type: 'function', function: { name: 'get_time' } }, temperature: 0, max_tokens: 80 });
    check(named.choices[0].message.tool_calls?.[0]?.function.name === 'get_time', 'named tool_choice calls that tool');
    // Streamed: the call arrives as tool_calls deltas, equal to the whole answer's.
    const calls = [];
    let sfinish = null, stext = '';
    for await (const chunk of await tc.chat.completions.create({ model: 'm', messages: ask, tools, tool_choice: 'required',
      parallel_tool_calls: false, temperature: 0, max_tokens: 80, stream: true })) {
      const ch = chunk.choices[0];
      if (!ch) continue;
      stext += ch.delta.content ?? '';
      for (const d of ch.delta.tool_calls ?? []) {
        calls[d.index] ??= { id: '', name: '', arguments: '' };
        calls[d.index].id += d.id ?? '';
        calls[d.index].name += d.function?.name ?? '';
        calls[d.index].arguments += d.function?.arguments ?? '';
      }
      sfinish = ch.finish_reason ?? sfinish;
    }
    check(sfinish === 'tool_calls' && stext === '' && calls.length === 1 && calls[0].name === m.tool_calls[0].function.name &&
      calls[0].arguments === m.tool_calls[0].function.arguments, `streamed tool call equals the whole one (${JSON.stringify(calls)})`);
    // The call and its result go back as the client sends them; the template renders both.
    const next = await tc.chat.completions.create({ model: 'm', temperature: 0, max_tokens: 4, tools, tool_choice: 'none',
      messages: [...ask, m, { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '{"temp": 3}' }] });
    check(next.choices[0].message.tool_calls === undefined && typeof next.choices[0].message.content === 'string',
      'the call and its result sent back: a text answer with tool_choice none');
  } else {
    console.log(`(tool calls not checked: ${qwen} not found)`);
  }

  // Pictures: image_url parts (data URLs) through the tower of a tiny multimodal Gemma 3 (tests/fixtures/
  // gemma3_mm_model, with its chat tokenizer's template): the greedy answer equals `maxtext generate --image` on the
  // rendered prompt, whole and streamed; `--mmproj none` serves text only and refuses pictures by name.
  const mm = join(here, '..', 'fixtures', 'gemma3_mm_model');
  const mmArgs = ['--weights', join(mm, 'hf'), '--tokenizer', join(mm, 'chat_tokenizer')];
  const png = (f) => `data:image/png;base64,${readFileSync(join(mm, f)).toString('base64')}`;
  const pictured = [{ role: 'user', content: [{ type: 'text', text: 'look ' },
    { type: 'image_url', image_url: { url: png('image_a.png') } }, { type: 'text', text: ' and ' },
    { type: 'image_url', image_url: { url: png('image_b.png'), detail: 'low' } }] }];
  const g = await serve([...mmArgs, '--ctx-size', '1024'], {}, false);
  const gc = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const pr = await gc.chat.completions.create({ model: 'm', messages: pictured, max_tokens: 6, temperature: 0 });
  const seen = pr.choices[0].message.content;
  const gen = execFileSync(maxtext, ['generate', ...mmArgs, '--image', join(mm, 'image_a.png'), '--image',
    join(mm, 'image_b.png'), '--max-new-tokens', '6', '--threads', '1', '--prompt',
    '<start_of_turn>user\nlook <start_of_image> and <__media__><end_of_turn>\n<start_of_turn>model\n'],
  { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  const turn = gen.indexOf('<start_of_turn>model\n');
  check(seen.length > 0 && turn >= 0 && gen.slice(turn + 21).startsWith(seen),
    `a chat with two pictures equals maxtext generate --image (${JSON.stringify(seen)})`);
  check(pr.usage.prompt_tokens > 2 * 260, `the pictures' tokens are counted (${pr.usage.prompt_tokens} prompt tokens)`);
  let pd = '';
  for await (const chunk of await gc.chat.completions.create({ model: 'm', messages: pictured, max_tokens: 6,
    temperature: 0, stream: true })) {
    pd += chunk.choices[0]?.delta?.content ?? '';
  }
  check(pd === seen, 'the streamed answer with pictures equals the whole one');
  try {
    await gc.chat.completions.create({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: [
      { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }] });
    check(false, 'a picture by URL is refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'messages[0].content[0].image_url.url' &&
      /not a data URL/.test(e.message), `a picture by URL is refused: ${e.status} ${e.message}`);
  }
  const nt = await serve([...mmArgs, '--ctx-size', '1024', '--mmproj', 'none'], {}, false);
  try {
    await new OpenAI({ baseURL: `${nt.url}/v1`, apiKey: 'unused', maxRetries: 0 }).chat.completions.create(
      { model: 'm', messages: pictured, max_tokens: 2 });
    check(false, '--mmproj none refuses pictures');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && /takes no pictures/.test(e.message),
      `--mmproj none refuses pictures: ${e.status} ${e.message}`);
  }

  // One slot, no queue, an API key: a burst gets 503s, the key is enforced.
  const key = 'test-key-0123456789';
  const b = await serve(['--parallel', '1', '--queue', '0', '--ctx-size', '512'], { MAXTEXT_API_KEY: key });
  try {
    await new OpenAI({ baseURL: `${b.url}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list();
    check(false, 'a wrong API key is refused');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401, `a wrong API key is refused: ${e.status} ${e.message}`);
  }
  const bc = new OpenAI({ baseURL: `${b.url}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });
  const burst = await Promise.allSettled(Array.from({ length: 16 }, () =>
    bc.completions.create({ model: 'm', prompt, max_tokens: 400, temperature: 0, logit_bias: { 2: -100 } })));
  const ok = burst.filter((r) => r.status === 'fulfilled').length;
  const busy = burst.filter((r) => r.status === 'rejected' && r.reason.status === 503 && /server is busy/.test(r.reason.message)).length;
  check(ok >= 1 && busy >= 1 && ok + busy === 16, `a burst of 16 on one slot without a queue: ${ok} served, ${busy} refused with 503`);
  const h = await health(b.url);
  check(h.refused_busy === busy && h.running === 0 && h.waiting === 0, `/health counts them (${JSON.stringify(h)})`);
} catch (e) {
  console.log(`FAILED: ${e.stack ?? e}`);
  failures++;
} finally {
  for (const p of servers) p.kill('SIGTERM');
}
await Promise.all(servers.map((p) => new Promise((r) => (p.exitCode !== null ? r() : p.on('exit', r)))));
for (const p of servers) check(p.exitCode === 0 && /signal 15: stopping/.test(p.logText()), `server ${p.pid} stopped cleanly on SIGTERM (exit ${p.exitCode})`);
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
