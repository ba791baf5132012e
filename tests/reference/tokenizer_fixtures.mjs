// tests/reference/tokenizer_fixtures.mjs: oracle ids for the Hugging Face tokenizer.json tokenizers.
//
// Writes tests/fixtures/tokenizers/<name>.json for the five real tokenizers under ../shared/models/tokenizers (texts,
// ids without / with special tokens, decoded text with and without skip_special_tokens), and small synthetic
// tokenizers (tests/fixtures/tokenizers/synth_*.tokenizer.json + tokenizer_config, with their oracle ids) that exercise
// the components the real files do not use.
//
// Oracles: npm @huggingface/tokenizers 0.2.0 (transformers.js's tokenizers), and tiktoken (o200k_base) as a second
// oracle for GPT-OSS's plain-text ids. Install once in a scratch folder and run from the checkout:
//   cd SCRATCH && npm install @huggingface/tokenizers@0.2.0 tiktoken
//   NODE_PATH=SCRATCH/node_modules node tests/reference/tokenizer_fixtures.mjs [SHARED_TOKENIZERS_DIR]
// (node resolves ESM imports from NODE_PATH only through createRequire, used below.)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const req = createRequire(path.join(process.env.NODE_PATH ?? "/work/oracle/node_modules", "x.js"));
const resolve_mod = (name) => {
  try { return req.resolve(name); } catch { return path.join(process.env.NODE_PATH ?? "/work/oracle/node_modules", name); }
};
const { Tokenizer } = await import(path.join(process.env.NODE_PATH ?? "/work/oracle/node_modules", "@huggingface/tokenizers/dist/tokenizers.mjs"));
const tiktoken = req(resolve_mod("tiktoken"));

const shared = process.argv[2] ?? path.resolve(root, "../shared/models/tokenizers");
const out_dir = path.join(root, "tests/fixtures/tokenizers");
fs.mkdirSync(out_dir, { recursive: true });

// Deterministic pseudo-random mixed text (xorshift32).
function mixed_text(seed, n_chars) {
  let s = seed >>> 0;
  const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
  const words = ["the", "The", "tokenizer", "ids", "DON'T", "we're", "it's", "I'll", "naïve", "café", "Straße", "über",
    "日本語", "中文字符", "한국어", "Привет", "мир", "Ελληνικά", "مرحبا", "שלום", "हिन्दी", "ไทย", "3.14159", "2024",
    "1,000,000", "x=y+z;", "foo_bar()", "{\"k\": [1, 2]}", "<div>", "https://example.com/a?b=c", "e\u0301", "n\u0303",
    "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "😀", "—", "…", "«quote»", "$100", "#tag", "@user", "C++", "αβγ", "∑∫√"];
  const seps = [" ", " ", " ", "  ", "\n", "\t", "\r\n", "\n\n", ", ", ". ", "!", "?", " - ", "   "];
  let t = "";
  while ([...t].length < n_chars) {
    t += words[Math.floor(rnd() * words.length)];
    t += seps[Math.floor(rnd() * seps.length)];
  }
  return t;
}

function common_texts(specials) {
  const [s1, s2] = specials;
  return [
    "The cat sat on the mat.",
    "",
    " ",
    "Hello",
    " Hello world",
    `${s1}Hello world${s2}`,
    `Before ${s1} middle ${s2}after ${s1}${s2}`,
    `${s2}`,
    "a  b   c\t\td \n\n  e     ",
    "line1\r\nline2\r\n\r\nline3\r",
    "1234567890 3.14159 1,000,000 2024-11-24 007",
    "日本語のテキスト 中文字符 한국어 텍스트",
    "e\u0301cole cafe\u0301 A\u030A \u00C5 n\u0303 \u00F1 Q\u0323\u0307",
    "👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 😀😀",
    "Don't stop   believing! We're fine, they'll SEE. IT'S I'M",
    "def f(x):\n    return x ** 2  # square\n\n\tprint(f(3))\n",
    "a".repeat(1000),
    " ".repeat(200) + "x",
    "=".repeat(300),
    "😀".repeat(40),
    "abcdefghij".repeat(300),
    "\n\n\n\n\n\n\n\n",
    mixed_text(12345, 3000),
  ];
}

function run_case(tk, text, text_pair = null) {
  const opt = text_pair === null ? {} : { text_pair };
  const ids = tk.encode(text, { ...opt, add_special_tokens: false }).ids;
  const ids_special = tk.encode(text, { ...opt, add_special_tokens: true }).ids;
  const dec = (x, skip) => (x.length === 0 ? "" : tk.decode(x, { skip_special_tokens: skip }));
  const c = { text, ids, ids_with_special: ids_special, decoded: dec(ids_special, false), decoded_skip_special: dec(ids_special, true) };
  if (text_pair !== null) c.text_pair = text_pair;
  return c;
}

// ---- real tokenizers -----------------------------------------------------------------------------------------
// One case per line (ids arrays inline) keeps the committed files small and their diffs readable.
const fixture_text = (head, cases) =>
  JSON.stringify(head).slice(0, -1) + ', "cases": [\n' + cases.map((c) => JSON.stringify(c)).join(",\n") + "\n]}\n";

const eos_of = (cfg) => (typeof cfg.eos_token === "string" ? cfg.eos_token : cfg.eos_token?.content);
for (const name of ["llama3", "qwen3", "deepseek_v3", "gemma3", "gptoss"]) {
  const dir = path.join(shared, name);
  if (!fs.existsSync(path.join(dir, "tokenizer.json"))) { console.error(`skip ${name}: no ${dir}/tokenizer.json`); continue; }
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tk = new Tokenizer(tj, cfg);
  const specials = tj.added_tokens.filter((a) => a.special).map((a) => a.content);
  const eos = eos_of(cfg);
  const pick = [specials[0], eos && eos !== specials[0] ? eos : specials[1]];
  const cases = common_texts(pick).map((t) => run_case(tk, t));
  const fixture = { oracle: "@huggingface/tokenizers 0.2.0 (npm)", tokenizer: name };
  if (name === "gptoss") {
    const enc = tiktoken.get_encoding("o200k_base");
    fixture.second_oracle = "tiktoken o200k_base encode_ordinary (plain-text cases)";
    for (const c of cases) {
      if (specials.some((s) => c.text.includes(s))) continue;
      c.tiktoken_ids = Array.from(enc.encode_ordinary(c.text));
    }
    enc.free();
  }
  fs.writeFileSync(path.join(out_dir, `${name}.json`), fixture_text(fixture, cases));
  console.log(`${name}: ${cases.length} cases`);
}

// ---- synthetic tokenizers ------------------------------------------------------------------------------------
// A tiny BPE vocabulary: [UNK], printable ASCII, ▁, a few merges (chosen so that split boundaries change the ids).
function tiny_bpe(extra_vocab = [], merges = [], opts = {}) {
  const vocab = { "[UNK]": 0 };
  const add = (t) => { if (!(t in vocab)) vocab[t] = Object.keys(vocab).length; };
  for (let c = 32; c < 127; ++c) add(String.fromCharCode(c));
  add("\u2581");
  for (const m of merges) add(m.replace(" ", ""));
  for (const v of extra_vocab) add(v);
  return { type: "BPE", dropout: null, unk_token: "[UNK]", continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: opts.fuse_unk ?? false, byte_fallback: false, ignore_merges: false, vocab, merges };
}
const MERGES = ["t h", "th e", "i n", "in g", "a -", "a- b", "- b", "1 2", "12 3", ". .", "\u2581 t", "\u2581t he",
  "h e", "l l", "ll o", "he llo", "w o", "wo r", "wor l", "worl d", "x y", "xy z", "o r", "c a", "ca f", "caf e"];
const tokjson = (model, parts) => ({ version: "1.0", truncation: null, padding: null, added_tokens: parts.added_tokens ?? [],
  normalizer: parts.normalizer ?? null, pre_tokenizer: parts.pre_tokenizer ?? null, post_processor: parts.post_processor ?? null,
  decoder: parts.decoder ?? null, model });
const added = (id, content, o = {}) => ({ id, content, single_word: o.single_word ?? false, lstrip: o.lstrip ?? false,
  rstrip: o.rstrip ?? false, normalized: o.normalized ?? false, special: o.special ?? true });

const synth = [];
// 1. Normalizers NFKC, Strip, Lowercase, Prepend, Replace (string), Metaspace pre-tokenizer (split off), Strip decoder.
synth.push({ name: "synth_norm", tj: tokjson(tiny_bpe([], MERGES), {
  normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "Strip", strip_left: true, strip_right: true },
    { type: "Lowercase" }, { type: "Replace", pattern: { String: "  " }, content: " " }, { type: "Prepend", prepend: "\u2581" }] },
  pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "never", split: false },
  decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "\u2581" }, content: " " },
    { type: "Strip", content: " ", start: 1, stop: 0 }] } }),
  cfg: { clean_up_tokenization_spaces: false },
  texts: ["  Ｈｅｌｌｏ  WORLD  ", "The THING", "ﬁne ① x² ＡＢＣ", "hello  world   the", ""] });
// 2. NFD + StripAccents + Lowercase, Whitespace pre-tokenizer, no decoder (tokens joined by spaces), fuse_unk.
synth.push({ name: "synth_accents", tj: tokjson(tiny_bpe([], MERGES, { fuse_unk: true }), {
  normalizer: { type: "Sequence", normalizers: [{ type: "NFD" }, { type: "StripAccents" }, { type: "Lowercase" }] },
  pre_tokenizer: { type: "Whitespace" } }),
  cfg: { clean_up_tokenization_spaces: false },
  texts: ["Café Déjà vu", "hello, world! x-y", "the thing's 123", "ÀÉÎÕÜ ñ"] });
// 3. Digits (individual), Punctuation, WhitespaceSplit; NFKD; Metaspace split + decoder.
synth.push({ name: "synth_digits", tj: tokjson(tiny_bpe([], MERGES), {
  normalizer: { type: "NFKD" },
  pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" }, { type: "Digits", individual_digits: true },
    { type: "Punctuation", behavior: "Isolated" }, { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true }] },
  decoder: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true } }),
  cfg: { clean_up_tokenization_spaces: false },
  texts: ["abc123 the, 4567 hello.", "x1y2z3", "a-b a.b 12.3"] });
// 4. Digits (runs), Split regex Removed, ByteLevel with add_prefix_space and its own regex.
synth.push({ name: "synth_bytelevel", tj: tokjson(tiny_bpe(["\u0120", "\u0120t", "\u0120the", "\u010a"], ["\u0120 t", "\u0120t he"].concat(MERGES)), {
  pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: "\\s*;\\s*" }, behavior: "Removed", invert: false },
    { type: "Digits", individual_digits: false }, { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true }] },
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } }),
  cfg: { clean_up_tokenization_spaces: false },
  texts: ["the 12345 thing; the other ;x", "hello world"] });
// 5. Split invert (matches kept), Split Isolated (string), TemplateProcessing with pairs, added tokens.
synth.push({ name: "synth_added", tj: tokjson(tiny_bpe([], MERGES), {
  added_tokens: [added(100, "[CLS]"), added(101, "[SEP]"), added(102, "<ls>", { lstrip: true }), added(103, "<rs>", { rstrip: true }),
    added(104, "<both>", { lstrip: true, rstrip: true, special: false }), added(105, "Word", { normalized: true, special: false }),
    added(106, "plain", { special: false })],
  normalizer: { type: "Lowercase" },
  pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: "[a-z]+|[0-9]+|[^a-z0-9 ]" }, behavior: "Removed", invert: true },
    { type: "Split", pattern: { String: "-" }, behavior: "Isolated", invert: false }] },
  post_processor: { type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
      { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } }],
    special_tokens: { "[CLS]": { id: "[CLS]", ids: [100], tokens: ["[CLS]"] }, "[SEP]": { id: "[SEP]", ids: [101], tokens: ["[SEP]"] } } },
  decoder: { type: "Fuse" } }),
  cfg: { clean_up_tokenization_spaces: false },
  texts: ["the   <ls>  hello <rs>   world", "a <both>  b", "my WORD is word; WoRd", "plain[SEP]text [CLS]", "x-y-z"],
  pairs: [["hello world", "the thing"], ["a-b", "[SEP] x"]] });

// 6. SentencePiece-style byte fallback: regex Replace normalizer, Prepend; ByteFallback / Fuse / Strip decoders.
{
  const bytes = [];
  for (let b = 0; b < 256; ++b) bytes.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  synth.push({ name: "synth_fallback", tj: tokjson({ ...tiny_bpe(bytes, MERGES), byte_fallback: true }, {
    normalizer: { type: "Sequence", normalizers: [{ type: "Replace", pattern: { Regex: "\\s+" }, content: " " },
      { type: "Replace", pattern: { String: " " }, content: "\u2581" }, { type: "Prepend", prepend: "\u2581" }] },
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" },
      { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] } }),
    cfg: { clean_up_tokenization_spaces: false },
    texts: ["héllo   wörld 日本", "tabs\t\tand\nnew lines", "emoji 😀 x", "the thing"] });
}

for (const s of synth) {
  const base = path.join(out_dir, s.name);
  fs.writeFileSync(`${base}.tokenizer.json`, JSON.stringify(s.tj, null, 1) + "\n");
  fs.writeFileSync(`${base}.tokenizer_config.json`, JSON.stringify(s.cfg, null, 1) + "\n");
  const tk = new Tokenizer(s.tj, s.cfg);
  const cases = s.texts.map((t) => run_case(tk, t));
  for (const [a, b] of s.pairs ?? []) cases.push(run_case(tk, a, b));
  fs.writeFileSync(`${base}.json`, fixture_text({ oracle: "@huggingface/tokenizers 0.2.0 (npm)", tokenizer: s.name }, cases));
  console.log(`${s.name}: ${cases.length} cases`);
}
