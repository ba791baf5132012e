// Thread safety as docs/security.md states it, checked under ThreadSanitizer by CI (scripts/ci-tsan.sh) and in the
// normal suite:
//   - several models in one process run at the same time, each on its own thread;
//   - one AnyModel shared by threads, each with its own cache or session (AnyModel serialises its calls);
//   - a generation cancelled from another thread (GenerateOptions::stop), in generate() and in a Session;
//   - a tokenizer and a chat template shared read-only by threads.
// Every concurrent result must equal, bit for bit, the same work done on one thread first. Each model asks for two
// CPU threads, so OpenMP teams run inside the callers' threads: what is checked is the library's state shared between
// callers (rotary-table cache, per-thread scratch, OpenMP and Eigen settings, tokenizer caches) and the kernels' own
// threading. Under ThreadSanitizer, scripts/ci-tsan.sh loads LLVM's Archer so that TSan sees libomp's synchronisation.
//
// Model: the 2-layer llama2 fixture config, widened to 64 (Q8_0 blocks), with seeded weights, as float32 and as Q8_0 with 8-bit activations.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "maxtext/backend/cpu/backend.hpp"
#include "maxtext/families/llama2/llama2.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/any_model_blocks.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/tokenizer/chat_template.hpp"
#include "maxtext/tokenizer/hf_tokenizer.hpp"
#include "support/fixture_config.hpp"
#include "support/test_support.hpp"

using namespace maxtext;

MAXTEXT_ANY_MODEL_BUILT(::maxtext::models::any_model_policies::F32, ::maxtext::layers::LlamaDecoderLayer)
MAXTEXT_ANY_MODEL_BUILT(::maxtext::models::any_model_policies::Q8W, ::maxtext::layers::LlamaDecoderLayer)

namespace {

Config fixture() {
  Config c = test::config_from_meta(test::read_meta(test::fixtures_dir() + "/llama2_model"));
  c.dtype = "float32";
  c.max_target_length = 256;
  // Widths that are multiples of Q8_0's 32-value blocks (the weights are seeded, so any sizes do).
  c.base_emb_dim = 64;
  c.base_mlp_dim = 128;
  c.base_num_query_heads = 4;
  c.base_num_kv_heads = 2;
  c.head_dim = 16;
  c.derive();
  c.validate();
  return c;
}

std::unique_ptr<models::AnyModel> make_model(const std::string& weight_type, std::uint64_t seed) {
  models::AnyModelOptions o;
  o.weight_type = weight_type;
  o.threads = 2;
  o.int8_activations = weight_type == "q8_0";
  auto m = models::make_built_any_model(fixture(), o, "llama2 f32, q8_0");
  m->init(seed);
  return m;
}

std::vector<std::int32_t> prompt(int k, std::int64_t vocab) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < 3 + k; ++i) p.push_back(static_cast<std::int32_t>((5 * k + 3 * i + 1) % vocab));
  return p;
}

Tensor<std::int32_t, 2> as_row(const std::vector<std::int32_t>& p) {
  Tensor<std::int32_t, 2> t({1, static_cast<std::int64_t>(p.size())});
  for (std::size_t i = 0; i < p.size(); ++i) t(0, static_cast<std::int64_t>(i)) = p[i];
  return t;
}

// Logits of `p` through a fresh cache, prefill of all but the last token then the last one alone.
std::vector<float> cached_logits(models::AnyModel& m, const std::vector<std::int32_t>& p) {
  const auto cache = m.new_cache(1, static_cast<std::int64_t>(p.size()));
  const auto head = as_row({p.begin(), p.end() - 1}), last = as_row({p.back()});
  models::ForwardRequest r;
  r.cache = cache.get();
  r.tokens = &head;
  (void)m.forward(r);
  r.tokens = &last;
  const Tensor<float, 3> l = m.forward(r);
  return {l.data(), l.data() + l.size()};
}

std::vector<std::int32_t> greedy(models::AnyModel& m, const std::vector<std::int32_t>& p, std::int64_t n) {
  models::GenerateOptions go;
  go.max_new_tokens = n;
  return m.generate({p}, go).tokens[0];
}

std::vector<std::int32_t> session_greedy(models::AnyModel& m, const std::vector<std::int32_t>& p, std::int64_t n) {
  const auto s = m.new_session(64);
  models::GenerateOptions go;
  go.max_new_tokens = n;
  return s->generate(p, go).tokens[0];
}

// Runs body(i) on `n` threads at once (they start together) and joins them.
template <class F>
void on_threads(int n, F body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i) {
    ts.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      body(i);
    });
  }
  for (auto& t : ts) t.join();
}

}  // namespace

TEST_CASE("several models in one process run at the same time on their own threads", "[concurrency]") {
  std::vector<std::unique_ptr<models::AnyModel>> ms;
  ms.push_back(make_model("float32", 1));
  ms.push_back(make_model("q8_0", 2));
  ms.push_back(make_model("float32", 3));
  const std::int64_t V = ms[0]->config().vocab_size;
  std::vector<std::vector<float>> want_logits;
  std::vector<std::vector<std::int32_t>> want_tokens;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    want_logits.push_back(cached_logits(*ms[i], prompt(static_cast<int>(i), V)));
    want_tokens.push_back(greedy(*ms[i], prompt(static_cast<int>(i), V), 6));
  }
  std::vector<int> same(ms.size(), 0);
  constexpr int kRounds = 3;
  on_threads(static_cast<int>(ms.size()), [&](int i) {
    const auto k = static_cast<std::size_t>(i);
    for (int r = 0; r < kRounds; ++r) {
      same[k] += cached_logits(*ms[k], prompt(i, V)) == want_logits[k];
      same[k] += greedy(*ms[k], prompt(i, V), 6) == want_tokens[k];
    }
  });
  for (std::size_t i = 0; i < ms.size(); ++i) {
    INFO("model " << i << " (" << ms[i]->type_name() << ")");
    CHECK(same[i] == 2 * kRounds);
  }
}

TEST_CASE("one model shared by threads, each with its own cache or session", "[concurrency]") {
  const auto m = make_model("float32", 7);
  const std::int64_t V = m->config().vocab_size;
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> want_logits;
  std::vector<std::vector<std::int32_t>> want_tokens;
  for (int i = 0; i < kThreads; ++i) {
    want_logits.push_back(cached_logits(*m, prompt(i, V)));
    want_tokens.push_back(session_greedy(*m, prompt(i, V), 5));
  }
  std::vector<int> same(kThreads, 0);
  on_threads(kThreads, [&](int i) {
    const auto k = static_cast<std::size_t>(i);
    for (int r = 0; r < 3; ++r) {
      // Even threads keep a cache, odd ones a session: both interleave their calls with the others'.
      if (i % 2 == 0) {
        same[k] += cached_logits(*m, prompt(i, V)) == want_logits[k];
      } else {
        same[k] += session_greedy(*m, prompt(i, V), 5) == want_tokens[k];
      }
    }
  });
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i);
    CHECK(same[static_cast<std::size_t>(i)] == 3);
  }
}

TEST_CASE("a generation is cancelled from another thread (GenerateOptions::stop)", "[concurrency][generate]") {
  const auto m = make_model("float32", 5);
  const std::int64_t V = m->config().vocab_size;
  const auto p = prompt(1, V);
  const std::vector<std::int32_t> full = greedy(*m, p, 120);
  REQUIRE(full.size() == 120);

  for (const bool use_session : {false, true}) {
    INFO((use_session ? "Session::generate" : "generate"));
    std::stop_source stop;
    std::atomic<int> seen{0};
    models::GenerateOptions go;
    go.max_new_tokens = 120;
    go.stop = stop.get_token();
    // After its third token the worker waits until the main thread has requested the stop (so the request lands
    // at a known step whatever the scheduling): the next check, before the fourth forward pass, must end the row.
    go.on_token = [&](std::int64_t, std::int32_t) {
      if (seen.fetch_add(1) + 1 != 3) return;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!go.stop.stop_requested() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    };
    models::GenerateResult res;
    const auto session = m->new_session(256);
    std::thread worker([&] { res = use_session ? session->generate(p, go) : m->generate({p}, go); });
    while (seen.load() < 3) std::this_thread::sleep_for(std::chrono::microseconds(50));
    stop.request_stop();
    worker.join();
    REQUIRE(res.finish.size() == 1);
    CHECK(res.finish[0] == models::FinishReason::cancelled);
    const auto& got = res.tokens[0];
    REQUIRE(got.size() == 3);
    CHECK(std::vector<std::int32_t>(full.begin(), full.begin() + 3) == got);
    if (use_session) CHECK(session->length() == static_cast<std::int64_t>(p.size() + got.size()));
  }

  SECTION("a stop requested before the call generates nothing") {
    std::stop_source stop;
    stop.request_stop();
    models::GenerateOptions go;
    go.max_new_tokens = 8;
    go.stop = stop.get_token();
    const auto res = m->generate({p, prompt(2, V)}, go);
    CHECK(res.finish == std::vector<models::FinishReason>(2, models::FinishReason::cancelled));
    CHECK(res.tokens[0].empty());
    CHECK(res.decode_steps == 0);
  }
}

TEST_CASE("a tokenizer and a chat template shared read-only by threads", "[concurrency][tokenizer]") {
  const std::string dir = test::fixtures_dir() + "/tokenizers/";
  const auto tk = tokenizer::HfTokenizer::from_file(dir + "synth_bytelevel.tokenizer.json");
  const tokenizer::ChatTemplate tmpl(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}");
  const std::vector<std::string> texts = {"Hello, world! Ça va? 你好 🙂", "  spaces\tand\nnewlines  ",
                                          "numbers 1234567 and words", "émoji 🎉🎉 mixed ASCII"};
  std::vector<std::vector<std::int32_t>> want_ids;
  std::vector<std::string> want_text, want_chat;
  auto chat_of = [&](std::size_t i) {
    tokenizer::Json msgs = tokenizer::Json::array();
    msgs.push_back({{"role", "user"}, {"content", texts[i]}});
    msgs.push_back({{"role", "assistant"}, {"content", texts[(i + 1) % texts.size()]}});
    return tmpl.render(msgs, true);
  };
  for (std::size_t i = 0; i < texts.size(); ++i) {
    want_ids.push_back(tk->encode(texts[i]));
    want_text.push_back(tk->decode(want_ids.back()));
    want_chat.push_back(chat_of(i));
  }
  std::vector<int> same(texts.size(), 0);
  on_threads(static_cast<int>(texts.size()), [&](int t) {
    for (int r = 0; r < 20; ++r) {
      const auto i = static_cast<std::size_t>((t + r) % static_cast<int>(texts.size()));
      const auto ids = tk->encode(texts[i]);
      same[static_cast<std::size_t>(t)] += ids == want_ids[i] && tk->decode(ids) == want_text[i] && chat_of(i) == want_chat[i];
    }
  });
  for (std::size_t t = 0; t < texts.size(); ++t) CHECK(same[t] == 20);
}
