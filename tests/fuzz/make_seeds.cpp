// tests/fuzz/make_seeds.cpp: writes small synthetic seed inputs for the fuzz harnesses (tests/fuzz/run.sh adds copies
// of real files from tests/fixtures and ../shared). Usage: make_fuzz_seeds OUT_DIR (writes OUT_DIR/<harness>/*).
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "maxtext/core/tensor.hpp"
#include "maxtext/io/gguf.hpp"
#include "maxtext/io/npy.hpp"
#include "maxtext/io/npz.hpp"
#include "maxtext/io/safetensors.hpp"
#include "entry/session.hpp"

namespace fs = std::filesystem;
using namespace maxtext;
using io::GgufValue;

namespace {

fs::path out_root;

void put(const std::string& target, const std::string& name, const void* data, std::size_t n) {
  const fs::path d = out_root / target;
  fs::create_directories(d);
  io::write_file((d / name).string(), data, n);
}
void put(const std::string& target, const std::string& name, const std::vector<std::byte>& b) {
  put(target, name, b.data(), b.size());
}
void put(const std::string& target, const std::string& name, const std::string& s) {
  put(target, name, s.data(), s.size());
}

AnyTensor ramp(std::vector<std::int64_t> shape, float scale, std::vector<float>& keep) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  keep.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) keep[static_cast<std::size_t>(i)] = scale * static_cast<float>(i % 17 - 8);
  AnyTensor t;
  t.dtype = DType::f32;
  t.shape = std::move(shape);
  t.strides = AnyTensor::dense_strides(t.shape, t.dtype);
  t.data = reinterpret_cast<const std::byte*>(keep.data());
  t.source = "seed";
  return t;
}

// A SentencePiece-style vocabulary: control tokens, 256 byte tokens would be large, so only a few, and pieces.
void vocab(io::GgufWriter& w, bool gpt2) {
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "<0x0A>", "<0x41>"};
  if (gpt2) toks = {"<|endoftext|>", "H", "e", "l", "o", "\xc4\xa0", "He", "ll", "llo", "Hello", "\xc4\xa0w", "w", "r", "d"};
  for (const char* p : {"\xe2\x96\x81", "\xe2\x96\x81H", "ello", "H", "e", "l", "o", "\xe2\x96\x81w", "orld", "!"}) {
    if (!gpt2) toks.push_back(p);
  }
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    scores.push_back(-static_cast<float>(i));
    types.push_back(i < 3 ? 3 : (!gpt2 && i < 5 ? 6 : 1));
  }
  w.set("tokenizer.ggml.model", GgufValue::of_string(gpt2 ? "gpt2" : "llama"));
  if (gpt2) w.set("tokenizer.ggml.pre", GgufValue::of_string("default"));
  w.set("tokenizer.ggml.tokens", GgufValue::of_strings(toks));
  w.set("tokenizer.ggml.scores", GgufValue::of_f32s(scores));
  w.set("tokenizer.ggml.token_type", GgufValue::of_i32s(types));
  if (gpt2) w.set("tokenizer.ggml.merges", GgufValue::of_strings({"H e", "l l", "ll o", "He llo", "\xc4\xa0 w"}));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::of_u32(gpt2 ? 0 : 1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::of_u32(gpt2 ? 0 : 2));
  w.set("tokenizer.chat_template",
        GgufValue::of_string("{% for m in messages %}{{ bos_token + m['role'] + ': ' + m['content'] + eos_token }}"
                             "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"));
}

void gguf_seeds() {
  std::vector<float> a, b, c, d;
  io::GgufWriter w;
  w.set("general.architecture", GgufValue::of_string("llama"));
  w.set("general.name", GgufValue::of_string("seed"));
  w.set("llama.context_length", GgufValue::of_u32(16));
  w.set("llama.embedding_length", GgufValue::of_u32(32));
  w.set("llama.block_count", GgufValue::of_u32(1));
  w.set("llama.feed_forward_length", GgufValue::of_u32(64));
  w.set("llama.attention.head_count", GgufValue::of_u32(2));
  w.set("llama.attention.head_count_kv", GgufValue::of_u32(1));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f));
  w.set("llama.rope.freq_base", GgufValue::of_f32(10000.f));
  vocab(w, false);
  w.add_tensor("token_embd.weight", ramp({4, 32}, 0.25f, a), DType::q8_0);
  w.add_tensor("output_norm.weight", ramp({32}, 0.5f, b));
  w.add_tensor("blk.0.attn_q.weight", ramp({2, 32}, 0.125f, c), DType::f16);
  put("gguf", "llama_spm.gguf", w.bytes());
  io::GgufWriter g;
  g.set("general.architecture", GgufValue::of_string("qwen2"));
  g.set("qwen2.block_count", GgufValue::of_u32(1));
  vocab(g, true);
  g.add_tensor("x", ramp({2, 3}, 1.f, d), DType::bf16);
  put("gguf", "qwen2_bpe.gguf", g.bytes());
  // DeepSeek-V3's keys (families/deepseek/gguf.hpp): MLA sizes, routing with a bias and groups, YaRN, a next-n layer.
  std::vector<float> f, h, k;
  io::GgufWriter ds;
  ds.set("general.architecture", GgufValue::of_string("deepseek2"));
  const std::pair<const char*, std::uint32_t> ints[] = {
      {"context_length", 64},         {"embedding_length", 32},          {"block_count", 2},
      {"nextn_predict_layers", 1},    {"leading_dense_block_count", 0},  {"feed_forward_length", 64},
      {"attention.head_count", 2},    {"attention.head_count_kv", 1},    {"attention.q_lora_rank", 16},
      {"attention.kv_lora_rank", 16}, {"attention.key_length", 20},      {"attention.value_length", 16},
      {"attention.key_length_mla", 12}, {"attention.value_length_mla", 8}, {"rope.dimension_count", 4},
      {"expert_count", 4},            {"expert_used_count", 2},          {"expert_shared_count", 1},
      {"expert_feed_forward_length", 16}, {"expert_gating_func", 2},     {"expert_group_count", 2},
      {"expert_group_used_count", 1}, {"rope.scaling.original_context_length", 16}};
  for (const auto& [key, v] : ints) ds.set(std::string("deepseek2.") + key, GgufValue::of_u32(v));
  ds.set("deepseek2.expert_weights_scale", GgufValue::of_f32(2.5f));
  ds.set("deepseek2.expert_weights_norm", GgufValue::of_bool(true));
  ds.set("deepseek2.rope.scaling.type", GgufValue::of_string("yarn"));
  ds.set("deepseek2.rope.scaling.factor", GgufValue::of_f32(4.f));
  ds.set("deepseek2.rope.scaling.yarn_log_multiplier", GgufValue::of_f32(0.1f));
  vocab(ds, false);
  ds.add_tensor("token_embd.weight", ramp({4, 32}, 0.25f, f));
  ds.add_tensor("output.weight", ramp({4, 32}, 0.5f, h));
  ds.add_tensor("blk.0.exp_probs_b.bias", ramp({4}, 0.125f, k));
  put("gguf", "deepseek2.gguf", ds.bytes());
  // A llama.cpp mmproj file of a 1-layer Llama 4 vision model (families/llama4/vision.hpp llama4_vision_from_mmproj):
  // 28-pixel tiles, width 8, 2 heads, the pixel shuffle's 32 features, adapter and projector of 4.
  std::vector<std::vector<float>> keep(64);
  std::size_t used = 0;
  io::GgufWriter mm;
  mm.set("general.architecture", GgufValue::of_string("clip"));
  mm.set("clip.projector_type", GgufValue::of_string("llama4"));
  mm.set("clip.has_vision_encoder", GgufValue::of_bool(true));
  mm.set("clip.use_gelu", GgufValue::of_bool(true));
  const std::pair<const char*, std::uint32_t> sizes[] = {
      {"image_size", 28}, {"patch_size", 14}, {"embedding_length", 8}, {"feed_forward_length", 32},
      {"block_count", 1}, {"attention.head_count", 2}, {"projection_dim", 4}, {"projector.scale_factor", 2}};
  for (const auto& [key, v] : sizes) mm.set(std::string("clip.vision.") + key, GgufValue::of_u32(v));
  mm.set("clip.vision.attention.layer_norm_epsilon", GgufValue::of_f32(1e-5f));
  const auto tensor = [&](const std::string& name, std::vector<std::int64_t> shape) {
    mm.add_tensor(name, ramp(std::move(shape), 0.0625f, keep[used++]));
  };
  tensor("v.patch_embd.weight", {8, 588});
  tensor("v.class_embd", {8});
  tensor("v.position_embd.weight", {5, 8});
  for (const char* n : {"v.pre_ln", "v.post_ln", "v.blk.0.ln1", "v.blk.0.ln2"}) {
    tensor(std::string(n) + ".weight", {8});
    tensor(std::string(n) + ".bias", {8});
  }
  for (const char* n : {"v.blk.0.attn_q", "v.blk.0.attn_k", "v.blk.0.attn_v", "v.blk.0.attn_out"}) {
    tensor(std::string(n) + ".weight", {8, 8});
    tensor(std::string(n) + ".bias", {8});
  }
  tensor("v.blk.0.ffn_up.weight", {32, 8});
  tensor("v.blk.0.ffn_up.bias", {32});
  tensor("v.blk.0.ffn_down.weight", {8, 32});
  tensor("v.blk.0.ffn_down.bias", {8});
  tensor("mm.model.mlp.1.weight", {4, 32});
  tensor("mm.model.mlp.2.weight", {4, 4});
  tensor("mm.model.fc.weight", {4, 4});
  put("gguf", "llama4_mmproj.gguf", mm.bytes());
  // A llama.cpp mmproj file of a 1-layer Gemma 4 vision encoder (families/gemma4/vision.hpp gemma4_vision_from_mmproj):
  // patches of 2, width 8, 2 heads (head size 4), a position table of 4, projection to 4.
  io::GgufWriter g4;
  g4.set("general.architecture", GgufValue::of_string("clip"));
  g4.set("clip.projector_type", GgufValue::of_string("gemma4v"));
  g4.set("clip.has_vision_encoder", GgufValue::of_bool(true));
  const std::pair<const char*, std::uint32_t> g4_sizes[] = {
      {"image_size", 224}, {"patch_size", 2}, {"embedding_length", 8}, {"feed_forward_length", 16},
      {"block_count", 1}, {"attention.head_count", 2}, {"projection_dim", 4}};
  for (const auto& [key, v] : g4_sizes) g4.set(std::string("clip.vision.") + key, GgufValue::of_u32(v));
  g4.set("clip.vision.attention.layer_norm_epsilon", GgufValue::of_f32(1e-6f));
  const auto g4_tensor = [&](const std::string& name, std::vector<std::int64_t> shape) {
    g4.add_tensor(name, ramp(std::move(shape), 0.0625f, keep[used++]));
  };
  g4_tensor("v.patch_embd.weight", {8, 3, 2, 2});
  g4_tensor("v.position_embd.weight", {2, 4, 8});
  for (const char* n : {"ln1", "ln2", "attn_post_norm", "ffn_post_norm"}) g4_tensor(std::string("v.blk.0.") + n + ".weight", {8});
  for (const char* n : {"attn_q_norm", "attn_k_norm"}) g4_tensor(std::string("v.blk.0.") + n + ".weight", {4});
  for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_out"}) g4_tensor(std::string("v.blk.0.") + n + ".weight", {8, 8});
  g4_tensor("v.blk.0.ffn_gate.weight", {16, 8});
  g4_tensor("v.blk.0.ffn_up.weight", {16, 8});
  g4_tensor("v.blk.0.ffn_down.weight", {8, 16});
  g4_tensor("v.std_bias", {8});
  g4_tensor("v.std_scale", {8});
  g4_tensor("mm.input_projection.weight", {4, 8});
  put("gguf", "gemma4_mmproj.gguf", g4.bytes());
  io::GgufWriter e(64);
  e.set("general.alignment", GgufValue::of_u32(64));
  e.set("nested", GgufValue::of_strings({"a", "", "c"}));
  put("gguf", "minimal.gguf", e.bytes());
}

void tensor_file_seeds() {
  std::vector<float> a, b;
  std::map<std::string, AnyTensor> m = {{"w", ramp({3, 4}, 0.5f, a)}, {"b", ramp({5}, 1.f, b)}};
  const std::string st = (out_root / "st.tmp").string();
  io::write_safetensors(st, m, {{"format", "pt"}});
  fs::create_directories(out_root / "safetensors");
  fs::rename(st, out_root / "safetensors" / "two.safetensors");
  put("safetensors_index", "index.json",
      std::string(R"({"metadata": {"total_size": 32}, "weight_map": {"a": "model.safetensors", "b": "model.safetensors"}})"));
  put("npy", "c.npy", io::npy_bytes(m.at("w")));
  put("npy", "fortran.npy", io::npy_bytes(m.at("w"), true));
  put("npz", "stored.npz", io::npz_bytes(m));
  io::NpzWriteOptions o;
  o.compress = true;
  put("npz", "deflated.npz", io::npz_bytes(m, o));
  o.force_zip64 = true;
  put("npz", "zip64.npz", io::npz_bytes(m, o));
}

void llama2c_seeds() {
  // dim 8, hidden 16, 1 layer, 2 heads, 2 kv heads, vocab 8, seq_len 4 (head size 4).
  const std::int32_t h[7] = {8, 16, 1, 2, 2, 8, 4};
  const std::size_t floats_v0 = 8 * 8 + 8 + 64 + 64 + 64 + 64 + 8 + 128 + 128 + 128 + 8 + 4 * 2 + 4 * 2;
  std::vector<std::byte> v0(28 + floats_v0 * 4, std::byte{0});
  std::memcpy(v0.data(), h, 28);
  put("llama2c", "v0.bin", v0);
  const std::size_t floats_v1 = floats_v0 - 16;
  std::vector<std::byte> v1(256 + floats_v1 * 4, std::byte{0});
  const std::uint32_t magic = 0x616b3432u;
  const std::int32_t version = 1;
  std::memcpy(v1.data(), &magic, 4);
  std::memcpy(v1.data() + 4, &version, 4);
  std::memcpy(v1.data() + 8, h, 28);
  v1[36] = std::byte{1};
  put("llama2c", "v1.bin", v1);
  std::vector<std::byte> tok;
  auto add = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    tok.insert(tok.end(), b, b + n);
  };
  const std::int32_t max_len = 8;
  add(&max_len, 4);
  const char* pieces[] = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x0A>", " H", "ello", " world", "!"};
  for (int i = 0; i < 8; ++i) {
    const float s = -static_cast<float>(i);
    const std::int32_t n = static_cast<std::int32_t>(std::strlen(pieces[i]));
    add(&s, 4);
    add(&n, 4);
    add(pieces[i], static_cast<std::size_t>(n));
  }
  put("llama2c_tokenizer", "tok8.bin", tok);
}

// A SentencePiece ModelProto written field by field (protobuf wire format): pieces (piece, score, type), a
// TrainerSpec (model_type BPE) and a NormalizerSpec ("identity", no charsmap). (Byte pieces need all 256 of them
// with byte_fallback; "<0x0A>" is a normal piece here.)
void spm_seed() {
  auto field = [](std::string& out, int num, int wire) { out.push_back(static_cast<char>(num << 3 | wire)); };
  auto bytes = [&](std::string& out, int num, const std::string& v) {
    field(out, num, 2);
    out.push_back(static_cast<char>(v.size()));  // every length here is < 128 (one varint byte)
    out += v;
  };
  auto varint = [&](std::string& out, int num, int v) {
    field(out, num, 0);
    out.push_back(static_cast<char>(v));
  };
  std::string model;
  const std::pair<const char*, int> pieces[] = {{"<unk>", 2}, {"<s>", 3},  {"</s>", 3},   {"<0x0A>", 1},
                                                {"\xe2\x96\x81", 1}, {"H", 1}, {"ello", 1}, {"\xe2\x96\x81w", 1},
                                                {"orld", 1}, {"!", 1}};
  float score = 0;
  for (const auto& [text, type] : pieces) {
    std::string p;
    bytes(p, 1, text);
    field(p, 2, 5);
    p.append(reinterpret_cast<const char*>(&score), 4);
    score -= 1;
    varint(p, 3, type);
    bytes(model, 1, p);
  }
  std::string trainer;
  varint(trainer, 3, 2);
  bytes(model, 2, trainer);
  std::string norm;
  bytes(norm, 1, "identity");
  varint(norm, 3, 1);
  bytes(model, 3, norm);
  put("spm_model", "tiny.model", model);
}

void text_seeds() {
  put("chat_template", "loop.jinja",
      std::string("{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}<<SYS>>{{ m.content | trim }}"
                  "<</SYS>>{% elif m.tool_calls %}{% for t in m.tool_calls %}{{ t.function.name }}({{ t.function."
                  "arguments | tojson }}){% endfor %}{% else %}[{{ m.role | upper }}] {{ m['content'] }}{% endif %}"
                  "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}"));
  put("chat_template", "macro.jinja",
      std::string("{%- macro f(x, n=2) -%}{{ x * n }}{%- endmacro -%}{% set ns = namespace(c=0) %}{% for i in "
                  "range(3) %}{% set ns.c = ns.c + i %}{{ f('ab', i) }}{{ loop.index }}{% endfor %}{{ ns.c }}"
                  "{{ tools | length }}{{ messages[-1].content.split(' ') | join('|') }}{{ '%d' | format(3) }}"
                  "{{ {'a': 1}.items() | list }}{% raw %}{{x}}{% endraw %}{{ enable_thinking is defined }}"));
  put("grammar", "json.txt",
      std::string("root ::= ws value ws\nvalue ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
                  "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\nmember ::= string ws \":\" ws value\n"
                  "array ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
                  "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
                  "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
                  "ws ::= [ \\t\\n\\r]*  # RFC 8259 whitespace\n") +
          std::string(1, '\0') + R"({"a": [1, -2.5e3, true, null], "b\u00e9": "x\ny"})");
  put("grammar", "arith.txt",
      std::string("root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= num | \"(\" ws expr \")\" ws\n"
                  "num ::= [0-9]{1,3} ws\nws ::= [ ]?\n") +
          std::string(1, '\0') + "12 * (3-45)+(((6)))");
  put("grammar", "unicode.txt", std::string("root ::= [\u3041-\u309f]+ (\"|\" .)? \"\\n\"") + std::string(1, '\0') +
                                    "\xE3\x81\x82\xE3\x81\x84|\xC3\xA9\n");
  put("json_schema", "person.json",
      std::string(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type":
        "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1}}, "required": ["name"],
        "additionalProperties": false})"));
  put("json_schema", "refs.json",
      std::string(R"({"$defs": {"n": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"next": {"$ref":
        "#/$defs/n"}}}]}}, "oneOf": [{"$ref": "#/$defs/n"}, {"type": ["boolean", "number"]}, {"const": {"k": 1}}]})"));
  put("json_schema", "bounds.json",
      std::string(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 150}, "t":
        {"type": "integer", "exclusiveMinimum": -40960.5, "exclusiveMaximum": 65535}}, "required": ["age"]})"));
  put("json_schema", "pattern.json",
      std::string(R"({"type": "object", "properties": {"mail": {"type": "string", "pattern": "^[\\w.-]+@[\\w-]+\\.[a-z]{2,3}$"},
        "code": {"pattern": "(?:[A-F]|\\d){2,4}(-x)?|[^\\s\"]*?"}, "d": {"type": "string", "pattern": "^\\u0041.[^]\\x42$"}}})"));
  put("json_schema", "formats.json",
      std::string(R"({"type": "object", "properties": {"day": {"type": "string", "format": "date"}, "at": {"type":
        "string", "format": "date-time"}, "t": {"type": "string", "format": "time"}, "id": {"type": "string", "format":
        "uuid"}, "mail": {"type": "string", "format": "email"}, "n": {"type": "integer", "format": "int32"}}})"));
  put("openai_request", "chat.json",
      std::string(1, '\0') + R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user",
        "content": [{"type": "text", "text": "Hi \u00e9"}]}], "temperature": 0.5, "top_p": 0.9, "max_tokens": 8,
        "stop": ["\n", "END"], "seed": 3, "logit_bias": {"2": -100}, "logprobs": true, "top_logprobs": 2, "stream": true,
        "stream_options": {"include_usage": true}, "response_format": {"type": "json_schema", "json_schema": {"name":
        "x", "schema": {"type": "object"}}}})");
  put("openai_request", "tools.json",
      std::string(1, '\0') + R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content":
        null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"c\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": 2}}\n</tool_call>"}],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object", "properties": {"c":
        {"type": "integer"}}, "required": ["c"]}}}], "tool_choice": "required", "parallel_tool_calls": false})");
  put("openai_request", "pictures.json",
      std::string(1, '\0') + R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a <__media__>"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4A"}}]}], "max_tokens": 2})");
  put("openai_request", "completion.json",
      std::string(1, '\1') + R"({"prompt": [1, 2, 3], "max_tokens": 4, "logprobs": 2, "echo": true, "n": 1,
        "frequency_penalty": -1.5, "presence_penalty": 2, "top_k": 4, "min_p": 0.1, "repeat_penalty": 1.1})");
  put("yaml_config", "base.yml",
      std::string("base_config: base.yml\nmodel_name: tiny\ndecoder_block: llama2\nemb_dim: 32\nnum_query_heads: 2\n"
                  "num_kv_heads: 1\nhead_dim: 16\nmlp_dim: 64\nnum_decoder_layers: 1\nvocab_size: 16\n"
                  "mlp_activations: [silu, linear]\nlogits_via_embedding: false\nrope_max_timescale: 10000\n"
                  "normalization_layer_epsilon: 1.0e-5\nnested:\n  a: 1\n"));
  put("yaml_config", "overrides.txt", std::string("emb_dim=64\nmlp_activations=[gelu,linear]\ndtype=bfloat16\nbad\n"));
  put("hf_config", "llama.json",
      std::string(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
        "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1,
        "vocab_size": 16, "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8}, "tie_word_embeddings": true, "eos_token_id": [1, 2]})"));
  const unsigned char q[] = {0x2a, 0x00, 0x3c, 1, 2, 3, 250, 127, 128, 0, 7, 0xff, 0x7b, 0x00, 0x7c};
  put("q8_0", "blocks.bin", q, sizeof(q));
  // quant_blocks: one seed per format (byte 0; tests/fuzz/entry/quant_blocks.hpp), two rows of two blocks, fp16
  // scales of 1.0 (0x3c00) among small quants; MXFP4 scale bytes near 127 (2^0).
  for (unsigned k = 0; k < 14; ++k) {
    std::vector<unsigned char> b{static_cast<unsigned char>(k), 0x05};
    for (unsigned i = 0; i < 64; ++i) b.push_back(i % 8 == 0 ? 0x00 : i % 8 == 1 ? 0x3c : static_cast<unsigned char>(i * 37 + k));
    if (k >= 12) b[2] = 127;
    put("quant_blocks", "format" + std::to_string(k) + ".bin", b.data(), b.size());
  }
}

// Session files: one of the harness's layout with every section (a picture's soft tokens, segment ids, a state,
// Engram-style history), and an empty one.
void session_seeds() {
  namespace sf = models::session_file;
  sf::Image im;
  im.layout = fuzz::session_layout();
  im.tokens = {1, 5, 7, 7, 2, 9};
  im.cached = 5;
  im.media_index = {2, 3};
  im.media_width = 8;
  im.media_rows.assign(16, 0.25f);
  im.probe.assign(16, -1.0f);
  im.layers.resize(2);
  im.layers[0].buffers = {std::vector<std::byte>(5 * 8 * 4, std::byte{1}), std::vector<std::byte>(5 * 8 * 4, std::byte{2})};
  im.layers[1].buffers = {std::vector<std::byte>(5 * 4 * 4, std::byte{3})};
  im.layers[1].states = {std::vector<float>(4, 0.5f)};
  im.layers[1].state_tokens = 5;
  im.layers[1].history = {3, 4};
  im.has_segments = true;
  im.segments.assign(5, 1);
  im.app = R"({"messages": [{"role": "user", "content": "hi"}]})";
  put("session_file", "full.mxs", sf::encode(im));
  sf::Image empty;
  empty.layout = fuzz::session_layout();
  empty.probe.assign(16, 0.0f);
  empty.layers.resize(2);
  empty.layers[0].buffers.resize(2);
  empty.layers[1].buffers.resize(1);
  empty.layers[1].states = {std::vector<float>(4, 0.0f)};
  put("session_file", "empty.mxs", sf::encode(empty));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_root = argv[1];
  fs::create_directories(out_root);
  gguf_seeds();
  tensor_file_seeds();
  llama2c_seeds();
  text_seeds();
  spm_seed();
  session_seeds();
  return 0;
}
