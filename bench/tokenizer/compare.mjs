// bench/tokenizer/compare.mjs: tokenizer throughput (MB/s of UTF-8 text) on >= 1 MB of mixed text, ours against
// @huggingface/tokenizers (transformers.js) and, for GPT-OSS, tiktoken's o200k_base, in one command:
//   NODE_PATH=/path/to/node_modules node bench/tokenizer/compare.mjs BUILD_DIR [SHARED_TOKENIZERS_DIR]
// (npm install @huggingface/tokenizers@0.2.0 tiktoken in a scratch folder first; BUILD_DIR holds bench/bench_tokenizer.)
// The text is the fixture script's pseudo-random mix (words in many scripts, digits, emoji, whitespace and punctuation).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const nm = process.env.NODE_PATH ?? "/work/oracle/node_modules";
const { Tokenizer } = await import(path.join(nm, "@huggingface/tokenizers/dist/tokenizers.mjs"));
const tiktoken = createRequire(path.join(nm, "x.js"))(path.join(nm, "tiktoken"));
const build = process.argv[2] ?? path.resolve(here, "../../build");
const shared = process.argv[3] ?? path.resolve(here, "../../../shared/models/tokenizers");
const exe = path.join(build, "bench/bench_tokenizer");

function mixed_text(seed, n_bytes) {
  let s = seed >>> 0;
  const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
  const words = ["the", "The", "tokenizer", "ids", "DON'T", "we're", "it's", "I'll", "naïve", "café", "Straße", "über",
    "日本語", "中文字符", "한국어", "Привет", "мир", "Ελληνικά", "مرحبا", "שלום", "हिन्दी", "ไทย", "3.14159", "2024",
    "1,000,000", "x=y+z;", "foo_bar()", "{\"k\": [1, 2]}", "<div>", "https://example.com/a?b=c", "e\u0301", "n\u0303",
    "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "😀", "—", "…", "«quote»", "$100", "#tag", "@user", "C++", "αβγ", "∑∫√",
    "running", "quickly", "information", "computer", "language", "model", "attention", "transformer"];
  const seps = [" ", " ", " ", " ", " ", "  ", "\n", "\t", "\r\n", "\n\n", ", ", ". ", "!", "?", " - "];
  const parts = [];
  let n = 0;
  while (n < n_bytes) {
    const p = words[Math.floor(rnd() * words.length)] + seps[Math.floor(rnd() * seps.length)];
    parts.push(p);
    n += Buffer.byteLength(p);
  }
  return parts.join("");
}

const text = mixed_text(2024, 1 << 20);
const bytes = Buffer.byteLength(text);
const file = path.join(os.tmpdir(), `maxtext-tokenizer-bench-${process.pid}.txt`);
fs.writeFileSync(file, text);
const time_best = (f, repeats = 3) => {
  f();
  let best = Infinity;
  for (let r = 0; r < repeats; ++r) {
    const t0 = process.hrtime.bigint();
    f();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return best;
};
console.log(`text: ${(bytes / 1e6).toFixed(2)} MB; MB/s, best of 3 after a warm-up; one thread`);
console.log("tokenizer      maxtext  hf-js  ratio  tiktoken  ratio");
for (const name of ["llama3", "qwen3", "deepseek_v3", "gemma3", "gptoss"]) {
  const dir = path.join(shared, name);
  if (!fs.existsSync(path.join(dir, "tokenizer.json"))) continue;
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tk = new Tokenizer(tj, cfg);
  const js_ids = tk.encode(text, { add_special_tokens: false }).ids.length;
  const js = bytes / time_best(() => tk.encode(text, { add_special_tokens: false })) / 1e6;
  const [ours, our_ids] = execFileSync(exe, [dir, file, "3"], { encoding: "utf8" }).trim().split(" ").map(Number);
  if (our_ids !== js_ids) console.log(`  ${name}: token counts differ (ours ${our_ids}, hf-js ${js_ids})`);
  let tt = "";
  if (name === "gptoss") {
    const enc = tiktoken.get_encoding("o200k_base");
    const mbs = bytes / time_best(() => enc.encode_ordinary(text)) / 1e6;
    tt = `${mbs.toFixed(2).padStart(8)}  ${(ours / mbs).toFixed(2).padStart(5)}`;
    enc.free();
  }
  console.log(`${name.padEnd(13)} ${ours.toFixed(2).padStart(8)} ${js.toFixed(2).padStart(6)} ${(ours / js).toFixed(2).padStart(6)}  ${tt}`);
}
fs.unlinkSync(file);
