// tests/models/test_qwen3_5_multimodal.cpp: Qwen3.5 with pictures (families/qwen/pictures.hpp into the qwen3_5 text
// decoder): the prompt's <|image_pad|> markers expanded, MRoPE's 3-D positions of every id (MaxText's get_rope_index:
// a picture's token at (p, p + row, p + column), the text after it at the largest position + 1), the soft tokens
// merged, and the decoder's rotary embedding taking the three rows (embeddings.py Qwen3OmniMoeThinkerTextRotaryEmbedding,
// _apply_interleaved_mrope), against the float64 re-statement tests/reference/qwen3_5_multimodal_reference.py (fixture
// qwen3_5_mm_model: the 4-layer qwen3_5_model text decoder, a 2-block vision tower, two pictures of 12 and 4 soft
// tokens in a 39-token prompt, four greedy decode steps). Deepstack features (decoders.py deepstack_process, Qwen3-VL /
// Qwen3-Omni; Qwen3.5 has none) are checked on the same decoder with the fixture's random features.
// Tolerances: logits and soft tokens at test::tol::f32_logits (f32 against f64, as the text model's own tests); ids,
// positions and greedy tokens exact. The controls (meta.json): text positions for the pictures move the logits by 0.15,
// height and width swapped by 0.022, no deepstack by 4.5, decode positions without the offset by 0.12: all far above
// the tolerance.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "maxtext/families/load.hpp"
#include "maxtext/families/qwen/pictures.hpp"
#include "maxtext/families/qwen3_next/qwen3_5.hpp"
#include "maxtext/io/image.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/transformer.hpp"
#include "support/backends.hpp"
#include "support/test_support.hpp"
#include "support/tolerance.hpp"

using namespace maxtext;

namespace {

using P = Policy<test::Backend, float>;
using Model = models::Transformer<P, layers::Qwen3NextDecoderLayer>;

std::string fixture() { return test::fixtures_dir() + "/qwen3_5_mm_model"; }
void need_fixture() {
  if (!std::filesystem::exists(fixture() + "/meta.json")) test::skip("fixture qwen3_5_mm_model missing");
}

Model load_model() {
  const std::string hf = fixture() + "/hf";
  const auto cfg = io::read_weights_config(hf);
  REQUIRE(cfg.has_value());
  CHECK(cfg->decoder_block == "qwen3_5");
  CHECK(cfg->use_mrope);
  Model m(*cfg);
  m.load(io::load_weights(hf, *cfg).tensors);  // the vision tower's tensors are the pictures' (not read here)
  return m;
}

std::vector<std::int32_t> ints(const AnyTensor& a) {
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < a.numel(); ++i) out.push_back(static_cast<std::int32_t>(a.element(i)));
  return out;
}

Tensor<float, 2> floats2(const AnyTensor& a) { return a.to<float, 2>({a.shape[0], a.shape[1]}); }

/// Logits [1, T, V] as [T, V] (the fixture's shape).
AnyTensor rows_of(const Tensor<float, 3>& l) {
  Tensor<float, 2> out({l.dim(0) * l.dim(1), l.dim(2)});
  std::copy(l.data(), l.data() + l.size(), out.data());
  return AnyTensor::from(out);
}

/// The prompt as a user writes it: each picture's run of image tokens as one <|image_pad|> marker.
std::vector<std::int32_t> unexpanded(const std::vector<std::int32_t>& ids) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 62 && i > 0 && ids[i - 1] == 62) continue;
    out.push_back(ids[i]);
  }
  return out;
}

struct Inputs {
  std::vector<std::int32_t> ids;
  Tensor<std::int32_t, 2> tokens, mask;
  Tensor<std::int32_t, 3> positions;
};
Inputs inputs() {
  Inputs in;
  in.ids = ints(test::npy(fixture() + "/tokens.npy"));
  const auto T = static_cast<std::int64_t>(in.ids.size());
  in.tokens = Tensor<std::int32_t, 2>({1, T});
  in.mask = Tensor<std::int32_t, 2>({1, T});
  for (std::int64_t t = 0; t < T; ++t) {
    in.tokens(0, t) = in.ids[static_cast<std::size_t>(t)];
    in.mask(0, t) = in.ids[static_cast<std::size_t>(t)] == 62 ? 1 : 0;
  }
  const std::vector<std::int32_t> pos = ints(test::npy(fixture() + "/positions.npy"));
  REQUIRE(static_cast<std::int64_t>(pos.size()) == 3 * T);
  in.positions = Tensor<std::int32_t, 3>({3, 1, T});
  std::copy(pos.begin(), pos.end(), in.positions.data());
  return in;
}

}  // namespace

TEST_CASE("Qwen3.5 pictures: get_rope_index's 3-D positions, and the prompt expanded from files as Hugging Face's "
          "processor and MaxText's encoder make it", "[models][qwen3_5][vision][multimodal]") {
  need_fixture();
  const std::string dir = fixture();
  const Inputs in = inputs();
  // qwen3_rope_index on the expanded prompt: the fixture's positions (picture 0: 3 x 4 merged tokens at 6, picture 1:
  // 2 x 2 at 16; text after them at the largest position + 1).
  const models::Qwen3ImageTokens tk{60, 61, 62};
  const Tensor<std::int32_t, 2> pos = models::qwen3_rope_index(in.ids, {{3, 4}, {2, 2}}, tk);
  CHECK(ints(AnyTensor::from(pos)) == ints(test::npy(dir + "/positions.npy")));
  CHECK(pos(0, 6) == 6);
  CHECK(pos(1, 17) == 8);  // the last token of picture 0: row 2, column 3
  CHECK(pos(2, 17) == 9);
  CHECK(pos(0, 18) == 10);  // <|vision_end|>: 6 + max(3, 4)
  // Malformed prompts and grids are refused by name.
  std::vector<std::int32_t> bare = in.ids;
  bare[5] = 7;  // the <|vision_start|> before picture 0 replaced by text
  CHECK_THROWS_WITH(models::qwen3_rope_index(bare, {{3, 4}, {2, 2}}, tk), Catch::Contains("do not follow a <|vision_start|>"));
  CHECK_THROWS_WITH(models::qwen3_rope_index(in.ids, {{3, 3}, {2, 2}}, tk), Catch::Contains("holds 12 image tokens"));
  CHECK_THROWS_WITH(models::qwen3_rope_index(in.ids, {{3, 4}}, tk), Catch::Contains("more pictures than the 1 grid"));
  CHECK_THROWS_WITH(models::qwen3_rope_index(in.ids, {{3, 4}, {2, 2}, {1, 1}}, tk), Catch::Contains("3 grid(s) given for 2"));

  // The files through Hugging Face's processor (preprocessor_config.json) and the encoder: the fixture's soft tokens;
  // the prompt's two markers expanded to the fixture's ids, mask and positions.
  const models::Qwen3Pictures<P> pics(test::Backend{}, dir + "/hf", io::Qwen3ImageProcessing::hf);
  CHECK(pics.image_tokens().vision_start == 60);  // config.json's ids
  CHECK(pics.image_tokens().vision_end == 61);
  CHECK(pics.image_tokens().image == 62);
  const auto outs = pics.encode({io::read_image(dir + "/image_0.png"), io::read_image(dir + "/image_1.png")});
  REQUIRE(outs.size() == 2);
  CHECK(outs[0].grid_h == 6);
  CHECK(outs[0].grid_w == 8);
  const models::MediaPrompt mp = pics.expand(unexpanded(in.ids), outs);
  CHECK(mp.ids == in.ids);
  CHECK(ints(AnyTensor::from(mp.mask)) == ints(AnyTensor::from(in.mask)));
  CHECK(ints(AnyTensor::from(mp.positions)) == ints(test::npy(dir + "/positions.npy")));
  test::expect_close(AnyTensor::from(mp.embeddings), test::npy(dir + "/image_embeddings.npy"), test::tol::f32_logits,
                     "qwen3.5 pictures' soft tokens");
  // A marker too few or too many, and a marker outside <|vision_start|> ... <|vision_end|>, are refused by name.
  const std::vector<std::int32_t> one = {1, 60, 62, 61, 5};
  CHECK(pics.expand(one, outs, false).embeddings.dim(0) == 12);
  CHECK_THROWS_WITH(pics.expand(one, outs, true), Catch::Contains("1 <|image_pad|> marker(s) for 2 picture(s)"));
  CHECK_THROWS_WITH(pics.expand({1, 62, 61}, outs, false), Catch::Contains("do not follow a <|vision_start|>"));
  // The text model must be this one: its width and use_mrope.
  Config other = io::read_weights_config(dir + "/hf").value();
  other.use_mrope = false;
  CHECK_THROWS_WITH(pics.check_text_model(other), Catch::Contains("has no use_mrope"));
}

TEST_CASE("Qwen3.5 pictures in the text model: merged soft tokens at MRoPE's 3-D positions give the float64 "
          "reference's logits, in one pass, in two, and in a session that decodes greedily after them",
          "[models][qwen3_5][vision][multimodal]") {
  need_fixture();
  const std::string dir = fixture();
  Model m = load_model();
  const Inputs in = inputs();
  const auto T = static_cast<std::int64_t>(in.ids.size());
  const Tensor<float, 2> rows = floats2(test::npy(dir + "/image_embeddings.npy"));
  const AnyTensor want = test::npy(dir + "/logits.npy");

  models::ForwardOptions fo;
  fo.media_mask = &in.mask;
  fo.media_embeddings = &rows;
  fo.mrope_positions = &in.positions;
  const Tensor<float, 3> l = m.forward(in.tokens, fo);
  test::expect_close(rows_of(l), want, test::tol::f32_logits, "qwen3.5 logits with pictures");

  // Two passes over one cache, split between the pictures (a picture attends as text, so any split is fine).
  {
    auto cache = m.make_cache(1, T);
    const std::int64_t cut = 20;
    std::int64_t done = 0;
    for (const std::int64_t n : {cut, T - cut}) {
      Tensor<std::int32_t, 2> tok({1, n}), mask({1, n});
      Tensor<std::int32_t, 3> pos({3, 1, n});
      std::int64_t k = 0, first = 0;
      for (std::int64_t t = 0; t < done; ++t) first += in.mask(0, t);
      for (std::int64_t t = 0; t < n; ++t) {
        tok(0, t) = in.tokens(0, done + t);
        mask(0, t) = in.mask(0, done + t);
        k += mask(0, t);
        for (std::int64_t r = 0; r < 3; ++r) pos(r, 0, t) = in.positions(r, 0, done + t);
      }
      Tensor<float, 2> part({k, rows.dim(1)});
      std::copy(&rows(first, 0), &rows(first, 0) + part.size(), part.data());
      models::ForwardOptions f2;
      f2.media_mask = &mask;
      f2.media_embeddings = &part;
      f2.mrope_positions = &pos;
      const Tensor<float, 3> lp = m.forward(tok, cache, f2);
      const auto w = want.to<float, 2>({T, 64});
      double d = 0.0;
      for (std::int64_t t = 0; t < n; ++t) {
        for (std::int64_t v = 0; v < 64; ++v) d = std::max(d, std::fabs(static_cast<double>(lp(0, t, v)) - w(done + t, v)));
      }
      CHECK(d < 1e-4);
      done += n;
    }
  }

  // A session: the text before the first picture, then the rest with its pictures and positions (from 0 for those
  // ids: the session places them after the conversation), then greedy decoding at max + 1 + k.
  const std::vector<std::int32_t> greedy = ints(test::npy(dir + "/greedy.npy"));
  const AnyTensor decode_want = test::npy(dir + "/decode_logits.npy");
  {
    models::Session<Model> s(m, 64);
    const std::int64_t head = 5;  // ids[0, 5): text
    s.append(std::vector<std::int32_t>(in.ids.begin(), in.ids.begin() + head));
    std::vector<std::int32_t> rest(in.ids.begin() + head, in.ids.end());
    const auto n = static_cast<std::int64_t>(rest.size());
    Tensor<std::int32_t, 2> mask({1, n}), pos({3, n});
    for (std::int64_t t = 0; t < n; ++t) {
      mask(0, t) = in.mask(0, head + t);
      for (std::int64_t r = 0; r < 3; ++r) pos(r, t) = in.positions(r, 0, head + t) - static_cast<std::int32_t>(head);
    }
    s.append(rest, &mask, &rows, &pos);
    const std::vector<float> last = s.logits();
    const auto w = want.to<float, 2>({T, 64});
    double d = 0.0;
    for (std::int64_t v = 0; v < 64; ++v) d = std::max(d, std::fabs(static_cast<double>(last[static_cast<std::size_t>(v)]) - w(T - 1, v)));
    CHECK(d < 1e-4);
    const auto dw = decode_want.to<float, 2>({4, 64});
    for (std::int64_t k = 0; k < 3; ++k) {
      s.append({greedy[static_cast<std::size_t>(k)]});
      const std::vector<float> lk = s.logits();
      double dk = 0.0;
      for (std::int64_t v = 0; v < 64; ++v) dk = std::max(dk, std::fabs(static_cast<double>(lk[static_cast<std::size_t>(v)]) - dw(k, v)));
      INFO("decode step " << k);
      CHECK(dk < 1e-4);
    }
    // A rewind and a sync of the whole prompt with its positions (Gated DeltaNet's recurrent states cannot be cut
    // back: the session runs the conversation again from the start, at the same positions); pictures without positions
    // are refused (on this model they would run at text positions, unlike MaxText).
    s.rewind(T + 1);
    Tensor<std::int32_t, 2> all_pos({3, T}), all_mask({1, T});
    for (std::int64_t t = 0; t < T; ++t) {
      all_mask(0, t) = in.mask(0, t);
      for (std::int64_t r = 0; r < 3; ++r) all_pos(r, t) = in.positions(r, 0, t);
    }
    s.sync(in.ids, &all_mask, &rows, &all_pos);
    CHECK(s.length() == T);
    const std::vector<float> again = s.logits();
    double da = 0.0;
    for (std::int64_t v = 0; v < 64; ++v) da = std::max(da, std::fabs(static_cast<double>(again[static_cast<std::size_t>(v)]) - w(T - 1, v)));
    CHECK(da < 1e-4);
    CHECK_THROWS_WITH(s.sync(in.ids, &all_mask, &rows), Catch::Contains("need MRoPE's 3-D positions"));
    CHECK_THROWS_WITH(s.save("/nonexistent/x.session"), Catch::Contains("do not keep MRoPE's 3-D positions"));
    // A shorter text-only conversation keeps the text before the first picture (ids 0..5 at positions 0..5).
    s.sync(std::vector<std::int32_t>(in.ids.begin(), in.ids.begin() + 6));
    CHECK(s.length() == 6);
    CHECK(s.logits().size() == 64);
    s.clear();
    s.append(std::vector<std::int32_t>(in.ids.begin(), in.ids.begin() + 3));
    CHECK(s.logits().size() == 64);  // text only again: no 3-D positions kept
  }

  // One-shot generate() with the prompt's positions: the reference's greedy tokens.
  models::GenerateOptions go;
  go.max_new_tokens = 4;
  go.media_mask = &in.mask;
  go.media_embeddings = &rows;
  go.media_positions = &in.positions;
  const models::GenerateResult r = models::generate(m, {in.ids}, go, 64);
  CHECK(r.tokens[0] == greedy);
}

TEST_CASE("Deepstack features (Qwen3-VL / Qwen3-Omni: decoders.py deepstack_process) are added to the first layers' "
          "outputs at the pictures' tokens", "[models][qwen3_5][vision][multimodal]") {
  need_fixture();
  const std::string dir = fixture();
  Model m = load_model();
  const Inputs in = inputs();
  const Tensor<float, 2> e = floats2(test::npy(dir + "/image_embeddings.npy"));
  const Tensor<float, 2> d0 = floats2(test::npy(dir + "/deepstack_0.npy")), d1 = floats2(test::npy(dir + "/deepstack_1.npy"));
  const std::int64_t n = e.dim(0), D = e.dim(1);
  Tensor<float, 2> rows({n, 3 * D});  // each soft token, then its deepstack features for layers 0 and 1
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy(&e(i, 0), &e(i, 0) + D, &rows(i, 0));
    std::copy(&d0(i, 0), &d0(i, 0) + D, &rows(i, D));
    std::copy(&d1(i, 0), &d1(i, 0) + D, &rows(i, 2 * D));
  }
  models::ForwardOptions fo;
  fo.media_mask = &in.mask;
  fo.media_embeddings = &rows;
  fo.mrope_positions = &in.positions;
  const Tensor<float, 3> l = m.forward(in.tokens, fo);
  test::expect_close(rows_of(l), test::npy(dir + "/logits_deepstack.npy"), test::tol::f32_logits,
                     "qwen3.5 logits with deepstack");
  // Rows that are not whole multiples of emb_dim, or more features than layers, are refused by name.
  Tensor<float, 2> odd({n, 3 * D - 1});
  fo.media_embeddings = &odd;
  CHECK_THROWS_WITH(m.forward(in.tokens, fo), Catch::Contains("deepstack features"));
  Tensor<float, 2> many({n, 6 * D});
  fo.media_embeddings = &many;
  CHECK_THROWS_WITH(m.forward(in.tokens, fo), Catch::Contains("5 deepstack features for 4 decoder layers"));
}

TEST_CASE("MRoPE's 3-D positions: what the model cannot take is refused by name", "[models][qwen3_5][errors]") {
  need_fixture();
  const std::string dir = fixture();
  Model m = load_model();
  const Inputs in = inputs();
  const Tensor<float, 2> rows = floats2(test::npy(dir + "/image_embeddings.npy"));
  models::ForwardOptions fo;
  fo.media_mask = &in.mask;
  fo.media_embeddings = &rows;
  // Pictures without their positions would run silently differently from MaxText.
  CHECK_THROWS_WITH(m.forward(in.tokens, fo), Catch::Contains("need MRoPE's 3-D positions"));
  fo.mrope_positions = &in.positions;
  fo.positions = &in.mask;
  CHECK_THROWS_WITH(m.forward(in.tokens, fo), Catch::Contains("positions and mrope_positions both given"));
  fo.positions = nullptr;
  Tensor<std::int32_t, 3> bad({3, 1, 5});
  fo.mrope_positions = &bad;
  CHECK_THROWS_WITH(m.forward(in.tokens, fo), Catch::Contains("expected [3, 1, 39]"));
  Tensor<std::int32_t, 3> neg({3, 1, 39});
  std::copy(in.positions.data(), in.positions.data() + neg.size(), neg.data());
  neg(2, 0, 7) = -1;
  fo.mrope_positions = &neg;
  CHECK_THROWS_WITH(m.forward(in.tokens, fo), Catch::Contains("width position -1 at [0,7]: expected 0 <= position"));
  // A model without use_mrope takes one position per token.
  Config c = io::read_weights_config(dir + "/hf").value();
  c.use_mrope = false;
  Model plain(c);
  plain.init(1);
  models::ForwardOptions f2;
  f2.mrope_positions = &in.positions;
  CHECK_THROWS_WITH(plain.forward(in.tokens, f2), Catch::Contains("without use_mrope takes one position per token"));
}

TEST_CASE("MRoPE's step table: equal rows give the shared text table's values bit for bit, and each frequency takes "
          "the row _apply_interleaved_mrope gives it", "[models][qwen3_5][rope]") {
  Config c;
  c.decoder_block = "qwen3_5";
  c.use_mrope = true;
  c.partial_rotary_factor = 0.25;
  c.set_list("mrope_section", {"11", "11", "10"}, "test");
  c.rope_max_timescale = 10000000.0;
  layers::RopeArgs ra;
  ra.dims = 256;  // rotary width 64: 32 frequencies, Qwen3.5's sections
  const layers::RopeSpec spec = layers::select_rope(c, ra);
  REQUIRE(spec.kind == layers::RopeKind::mrope);
  CHECK(spec.mrope_h == 11);
  const RotaryTable text = layers::build_rotary_table(spec, 64);
  const std::vector<std::int32_t> same = {0, 5, 63, 0, 5, 63, 0, 5, 63};  // [3, 3]: three tokens, equal rows
  const RotaryTable step = layers::build_mrope_step_table(spec, same, 3);
  for (std::int64_t m = 0; m < 3; ++m) {
    const std::int64_t p = same[static_cast<std::size_t>(m)];
    for (std::int64_t i = 0; i < 32; ++i) {
      CHECK(step.cos(m, i) == text.cos(p, i));
      CHECK(step.sin(m, i) == text.sin(p, i));
    }
  }
  // One token at (t, h, w) = (1, 2, 3): lanes 1, 4, ..., 31 (i % 3 == 1, i < 33) turn by h, lanes 2, 5, ..., 29
  // (i % 3 == 2, i < 30) by w, the rest by t.
  const RotaryTable one = layers::build_mrope_step_table(spec, std::vector<std::int32_t>{1, 2, 3}, 1);
  for (std::int64_t i = 0; i < 32; ++i) {
    const std::int64_t row = (i % 3 == 1 && i < 33) ? 2 : (i % 3 == 2 && i < 30) ? 3 : 1;
    INFO("frequency " << i);
    CHECK(one.cos(0, i) == text.cos(row, i));
  }
  CHECK_THROWS_WITH(layers::build_mrope_step_table(spec, same, 4), Catch::Contains("9 values for 4 tokens"));
}
