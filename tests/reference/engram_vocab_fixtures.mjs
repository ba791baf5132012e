// tests/reference/engram_vocab_fixtures.mjs: oracle for MaxText's Engram CompressedTokenizer (layers/engram.py,
// commit e591f30), the many-to-one table from token ids to canonical ids, on the real tokenizers under
// ../shared/models/tokenizers.
//
// As engram.py builds it: every id of the vocabulary is decoded on its own with special tokens kept; a text holding
// U+FFFD keys by the raw token string, any other by its normalised text (or the text when that is empty); canonical
// ids are numbered in first-seen order. The normaliser is engram.py's normalizers.Sequence (NFKC, NFD, StripAccents,
// Lowercase, Replace [ \t\r\n]+ -> " ", Replace ^ $ -> U+E000, Strip, Replace U+E000 -> " "), built with the oracle's
// own normalizer classes (Lowercase per character, see below), and decoding is the oracle's Tokenizer.decode.
//
// Writes tests/fixtures/engram_vocab/<name>.json: the vocabulary size, the number of canonical ids, FNV-1a 64 of the
// table (int32 little endian) and 400 sampled (id, canonical id) pairs, so a mismatch can be located.
// Oracle: npm @huggingface/tokenizers 0.2.0. Install once in a scratch folder and run from the checkout:
//   cd SCRATCH && npm install @huggingface/tokenizers@0.2.0
//   NODE_PATH=SCRATCH/node_modules node tests/reference/engram_vocab_fixtures.mjs [SHARED_TOKENIZERS_DIR]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const mods = process.env.NODE_PATH ?? "/work/oracle/node_modules";
const T = await import(path.join(mods, "@huggingface/tokenizers/dist/tokenizers.mjs"));

const shared = process.argv[2] ?? path.resolve(root, "../shared/models/tokenizers");
const out_dir = path.join(root, "tests/fixtures/engram_vocab");
fs.mkdirSync(out_dir, { recursive: true });

const before = new T.SequenceNormalizer({
  type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "NFD" }, { type: "StripAccents" }],
});
// Lowercase one character at a time, as the Rust crate's NormalizedString::lowercase does (char::to_lowercase, full
// mappings such as U+0130 -> "i\u0307" included): the oracle's Lowercase is String.toLowerCase, which also applies
// the Greek final-sigma rule ("ΟΣ" -> "ος"), and MaxText runs the Rust crate.
const lowercase = (s) => Array.from(s, (ch) => ch.toLowerCase()).join("");
const after = new T.SequenceNormalizer({
  type: "Sequence",
  normalizers: [
    { type: "Replace", pattern: { Regex: "[ \t\r\n]+" }, content: " " },
    { type: "Replace", pattern: { Regex: "^ $" }, content: "\uE000" },
    { type: "Strip", strip_left: true, strip_right: true },
    { type: "Replace", pattern: { String: "\uE000" }, content: " " },
  ],
});
const normalizer = { normalize: (s) => after.normalize(lowercase(before.normalize(s))) };

const fnv1a64 = (table) => {
  let h = 0xcbf29ce484222325n;
  const p = 0x100000001b3n, mask = (1n << 64n) - 1n;
  for (const v of table) {
    const u = v >>> 0;
    for (let b = 0; b < 4; ++b) {
      h ^= BigInt((u >>> (8 * b)) & 0xff);
      h = (h * p) & mask;
    }
  }
  return h.toString(16).padStart(16, "0");
};

for (const name of ["deepseek_v3", "qwen3", "llama3", "gemma3", "gptoss"]) {
  const dir = path.join(shared, name);
  if (!fs.existsSync(path.join(dir, "tokenizer.json"))) { console.error(`skip ${name}: no ${dir}/tokenizer.json`); continue; }
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tk = new T.Tokenizer(tj, cfg);
  // len(tokenizer): the model's vocabulary and the added tokens
  let V = Object.keys(tj.model.vocab).length;
  for (const a of tj.added_tokens) V = Math.max(V, a.id + 1);
  const raw = new Map();
  for (const [tok, id] of Object.entries(tj.model.vocab)) raw.set(id, tok);
  for (const a of tj.added_tokens) raw.set(a.id, a.content);
  const keys = new Map();
  const table = new Int32Array(V);
  for (let id = 0; id < V; ++id) {
    const text = tk.decode([id], { skip_special_tokens: false });
    let key;
    if (text.includes("\uFFFD")) {
      key = raw.get(id) ?? text;
    } else {
      const n = normalizer.normalize(text);
      key = n.length ? n : text;
    }
    if (!keys.has(key)) keys.set(key, keys.size);
    table[id] = keys.get(key);
  }
  const samples = [];
  for (let i = 0; i < 400; ++i) {
    const id = Math.floor((i * (V - 1)) / 399);
    samples.push([id, table[id]]);
  }
  const fixture = { oracle: "@huggingface/tokenizers 0.2.0 (npm)", maxtext_commit: "e591f30", tokenizer: name,
                    vocab_size: V, compressed_size: keys.size, fnv1a64: fnv1a64(table), samples };
  fs.writeFileSync(path.join(out_dir, `${name}.json`), JSON.stringify(fixture) + "\n");
  if (process.env.DUMP_DIR) fs.writeFileSync(path.join(process.env.DUMP_DIR, `${name}.js.bin`), Buffer.from(table.buffer));
  console.log(`${name}: ${V} ids -> ${keys.size} canonical ids`);
}
