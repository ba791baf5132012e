// server/engine.hpp: runs the requests of an OpenAI-compatible server (server/openai.hpp) on one embedded model.
//
//   server::EngineOptions eo;  eo.slots = 4;  eo.queue = 16;  eo.render = ...;  eo.stop_tokens = tk.eos_ids();
//   server::Engine engine(model, tk, eo);
//   server::Outcome o = engine.run(server::parse_chat_request(body), [](std::string_view piece) { ...; return true; });
//
// Slots: `slots` conversations are generated at once, each in a slot of one KV cache of slots x `ctx` tokens
// (allocated when the engine is made, so memory is bounded by slots x ctx whatever the traffic; with the config's
// attention=paged, memory for the pages written, at most pagedattn_num_pages, docs/serving.md). Their forward passes
// go through a models::BatchScheduler (models/batching.hpp): the slots' decode steps run as one forward pass per
// round (on a CPU a pass over eight conversations costs little more than a pass over one), a prompt's prefill runs
// alone between rounds, 512 tokens a round, and with up to 8 rows a pass each row is bit for bit the slot's own decode
// step (a prompt longer than a chunk is prefilled in parts: within f32 rounding of one pass). A request takes the free slot whose
// cached tokens share the longest prefix with its prompt (a conversation's next turn, or the same system prompt) and
// prefills only the rest; a prompt whose beginning another slot holds borrows those rows from it (the scheduler's
// prefix sharing, BatchOptions::share_min).
//
// Admission: up to `queue` requests wait for a slot; one more is refused at once with RequestError 503 (type
// server_busy), never queued without bound. run() blocks the calling thread (an HTTP handler's) while the slot's own
// thread generates and hands the text back, so the HTTP server's thread pool must hold slots + queue threads; the
// model's forward passes run on the scheduler's thread only (one set of per-thread kernel scratch and OpenMP team).
//
// Requests with response_format json_object / json_schema are generated under the schema's grammar
// (models/constrained.hpp): their output is a JSON document the schema accepts. They run in a slot's session like
// the others, so they reuse its cached prefix too.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "maxtext/core/error.hpp"
#include "maxtext/models/any_model.hpp"
#include "maxtext/models/batching.hpp"
#include "maxtext/models/constrained.hpp"
#include "maxtext/models/generate.hpp"
#include "maxtext/models/media.hpp"
#include "maxtext/models/json_schema.hpp"
#include "maxtext/models/session.hpp"
#include "maxtext/models/text_stream.hpp"
#include "maxtext/server/openai.hpp"
#include "maxtext/server/tools.hpp"
#include "maxtext/tokenizer/spm.hpp"

namespace maxtext::server {

/// How the model takes pictures (a vision tower: EngineOptions::pictures). Without `expand`, a request with pictures
/// is refused by name.
struct PictureInput {
  /// The text that opens a picture in the model's prompts (Gemma 3: "<start_of_image>"): each image part's
  /// kMediaMarker is rewritten to it after the chat template ran.
  std::string marker;
  /// Prompt ids with one marker per picture, and the pictures (PNG or JPEG bytes) -> their MediaPrompt. Throws
  /// maxtext::Error for a picture it cannot take (a message naming Picture::field: the request is refused, 400). The
  /// engine calls it on a thread of its own, one request at a time, when it admits the request.
  std::function<models::MediaPrompt(const std::vector<std::int32_t>&, const std::vector<Picture>&)> expand;
};

/// The server's batching: models::BatchOptions with prompts prefilled 512 tokens a round (llama-server's default
/// micro-batch), so a long prompt holds the other slots' steps back by one chunk's pass.
inline models::BatchOptions server_batching() {
  models::BatchOptions b;
  b.prefill_chunk = 512;
  return b;
}

struct EngineOptions {
  std::string model_id = "maxtext";  ///< what /v1/models and every response name the model
  int slots = 1;                     ///< conversations generated at once (each with a cache of ctx tokens)
  /// How the slots' passes are batched (models/batching.hpp); prompts are prefilled 512 tokens a round.
  models::BatchOptions batching = server_batching();
  int queue = 16;                    ///< requests that may wait for a slot; one more is refused (503)
  std::int64_t ctx = 0;              ///< tokens per slot: prompt + answer (0: the config's max_target_length)
  /// The most tokens a request generates when it gives no max_tokens (0: what the slot's context leaves).
  std::int64_t default_max_tokens = 0;
  std::vector<std::int32_t> stop_tokens;  ///< end-of-sequence ids (the tokenizer's and the weights' files')
  /// Chat messages (a JSON array of {role, content}) -> prompt text ending with the assistant's turn opening.
  std::function<std::string(const nlohmann::json&, bool)> render;
  /// Chat prompt text -> ids (default: the tokenizer's encode with its default BOS); a chat template writes its own
  /// special tokens, so the CLI passes encode(text, false) with one.
  std::function<std::vector<std::int32_t>(const std::string&)> encode_chat;
  /// Stop strings added to every chat request (the plain format's "\nuser:").
  std::vector<std::string> chat_stop_strings;
  /// Chat messages and tools (OpenAI's list) -> prompt text: the template with its `tools` variable. Empty, or
  /// tool_format none: requests that may call tools are refused by name.
  std::function<std::string(const nlohmann::json&, const nlohmann::json&, bool)> render_tools;
  /// The tool-call syntax the template teaches (tool_format_of(template source)).
  ToolFormat tool_format = ToolFormat::none;
  /// Pictures in chat requests (image_url parts): the model's vision tower, or none.
  PictureInput pictures;
};

/// Counters for /health and the tests.
struct EngineStats {
  int slots = 0, running = 0, waiting = 0;
  std::int64_t served = 0, refused_busy = 0, cancelled = 0, prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  models::BatchStats batching;  ///< the scheduler's passes (decode steps per pass: decode_steps / decode_passes)
  std::int64_t kv_bytes = 0;    ///< the slots' KV cache (a paged cache: its pages in use)
  models::PagingStats kv_pages; ///< a paged cache's pool (attention=paged), or zeros
};


class Engine {
 public:
  Engine(models::AnyModel& model, const tokenizer::Tokenizer& tk, EngineOptions opt)
      : model_(model), adapter_(model), tk_(tk), opt_(std::move(opt)) {
    MAXTEXT_CHECK(opt_.slots >= 1 && opt_.slots <= 256, ArgumentError, "[server] slots (--parallel) must be in [1, 256], found ",
                  opt_.slots);
    MAXTEXT_CHECK(opt_.queue >= 0 && opt_.queue <= 4096, ArgumentError, "[server] queue must be in [0, 4096], found ",
                  opt_.queue);
    MAXTEXT_CHECK(static_cast<bool>(opt_.render), ArgumentError, "[server] EngineOptions::render is required");
    if (opt_.ctx <= 0) opt_.ctx = model.config().max_target_length;
    MAXTEXT_CHECK(opt_.ctx > 1, ArgumentError, "[server] ctx must be > 1, found ", opt_.ctx);
    if (!opt_.encode_chat) opt_.encode_chat = [this](const std::string& s) { return tk_.encode(s); };
    sched_ = std::make_unique<Scheduler>(adapter_, opt_.slots, opt_.ctx, opt_.batching);
    for (int i = 0; i < opt_.slots; ++i) slots_.push_back(std::make_unique<Slot>(*sched_, opt_.ctx, i));
    MAXTEXT_CHECK(!opt_.pictures.expand || !opt_.pictures.marker.empty(), ArgumentError,
                  "[server] PictureInput::expand needs its marker");
    if (opt_.pictures.expand) picture_worker_ = std::make_unique<Worker>();
  }

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return opt_; }

  EngineStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s = stats_;
    s.slots = opt_.slots;
    s.running = running_;
    s.waiting = waiting_;
    s.batching = sched_->stats();
    s.kv_bytes = sched_->cache_bytes();
    s.kv_pages = sched_->paging_stats();
    return s;
  }

  /// Ends every running generation at its next step (FinishReason::cancelled) and refuses new requests: for shutdown.
  void stop() {
    stopping_.request_stop();
    cv_.notify_all();
  }

  /// The prompt's ids (a chat rendered through the template) and, with `text`, the prompt text (for echo).
  std::vector<std::int32_t> prompt_ids(const Request& r, std::string* text = nullptr) const {
    if (r.endpoint == Endpoint::chat) {
      const bool tools = !r.tools.empty() && r.tool_choice != ToolChoice::none && opt_.render_tools;
      std::string s = tools ? opt_.render_tools(r.messages, nlohmann::json::parse(r.tools.dump()), true)
                            : opt_.render(r.messages, true);
      if (!r.pictures.empty()) s = with_picture_markers(std::move(s), r);
      if (text) *text = s;
      return opt_.encode_chat(s);
    }
    if (r.has_prompt_ids) {
      for (std::size_t i = 0; i < r.prompt_ids.size(); ++i) {
        if (r.prompt_ids[i] >= model_.config().vocab_size) {
          bad_request(str("prompt[", i, "]"), str("token id ", r.prompt_ids[i], " outside the vocabulary of ",
                                                  model_.config().vocab_size));
        }
      }
      if (text) *text = tk_.decode(r.prompt_ids, false);
      return r.prompt_ids;
    }
    if (text) *text = r.prompt;
    return tk_.encode(r.prompt);
  }

  class Job;

  /// Checks request `r` against the model (context, token ids, schema: RequestError 400) and waits for a slot
  /// (RequestError 503 when `queue` requests already wait). The slot is held until the job is destroyed. An HTTP
  /// server calls it before it answers, so that a refusal still gets its status code.
  std::unique_ptr<Job> admit(const Request& r);

  /// admit(r), then Job::run: the request to its end on the calling thread.
  Outcome run(const Request& r, const std::function<bool(std::string_view)>& on_text = {}, std::stop_token stop = {});

 private:
  /// The rendered chat `s` with each picture's kMediaMarker rewritten to the model's marker: one per picture, or the
  /// request is refused.
  std::string with_picture_markers(std::string s, const Request& r) const {
    if (!opt_.pictures.expand) {
      bad_request(r.pictures.front().field, "this server's model takes no pictures (maxtext serve: a Gemma 3 "
                                            "or Llama 4 checkpoint with its vision tower, or --mmproj; docs/server.md)");
    }
    std::string out;
    std::size_t n = 0, at = 0;
    for (std::size_t k; (k = s.find(kMediaMarker, at)) != std::string::npos; at = k + kMediaMarker.size()) {
      out.append(s, at, k - at).append(opt_.pictures.marker);
      ++n;
    }
    out.append(s, at, std::string::npos);
    if (n != r.pictures.size()) {
      bad_request("messages", str("the rendered messages hold ", n, " ", kMediaMarker, " marker(s) for ",
                                  r.pictures.size(), " picture(s): text parts must not write the marker, and the chat "
                                  "template must keep every user message"));
    }
    return out;
  }

  /// The pictures' prompt (PictureInput::expand) on the engine's picture thread, one request at a time: the tower's
  /// scratch exists once, whichever HTTP thread admits the request. Its errors refuse the request (400).
  models::MediaPrompt expand_pictures(const std::vector<std::int32_t>& ids, const std::vector<Picture>& pictures) {
    std::lock_guard<std::mutex> one(picture_mu_);
    std::optional<models::MediaPrompt> out;
    std::exception_ptr err;
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    picture_worker_->post([&] {
      try {
        out = opt_.pictures.expand(ids, pictures);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(m);
      done = true;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return done; });
    }
    if (err) {
      try {
        std::rethrow_exception(err);
      } catch (const RequestError&) {
        throw;
      } catch (const Error& e) {
        bad_request("messages", str("the pictures cannot be used: ", e.what()));
      }
    }
    const auto T = static_cast<std::int64_t>(out->ids.size());
    MAXTEXT_CHECK(out->mask.dim(0) == 1 && out->mask.dim(1) == T && out->embeddings.dim(1) == model_.config().emb_dim,
                  ArgumentError, "[server] PictureInput::expand gave a mask of ", out->mask.shape(), " and rows of ",
                  out->embeddings.shape(), " for ", T, " ids (expected [1, ", T, "] and [n, ",
                  model_.config().emb_dim, "])");
    return std::move(*out);
  }

  using Scheduler = models::BatchScheduler<models::detail::AnyDraftModel>;
  using SlotSession = models::Session<Scheduler>;
  /// A thread that runs one task at a time for its slot (the generation's sampling and text; its forward passes go
  /// to the scheduler's thread).
  class Worker {
   public:
    Worker() : thread_([this] { loop(); }) {}
    ~Worker() {
      {
        std::lock_guard<std::mutex> lock(mu_);
        quit_ = true;
      }
      cv_.notify_one();
      thread_.join();
    }
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;
    /// Starts `f` on the worker (the slot is leased: no task is running).
    void post(std::function<void()> f) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        task_ = std::move(f);
      }
      cv_.notify_one();
    }

   private:
    void loop() {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        cv_.wait(lock, [this] { return quit_ || static_cast<bool>(task_); });
        if (quit_) return;
        std::function<void()> f = std::move(task_);
        task_ = nullptr;
        lock.unlock();
        f();  // signals its caller itself, as its last step
        lock.lock();
      }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::function<void()> task_;
    bool quit_ = false;
    std::thread thread_;
  };

  struct Slot {
    Slot(Scheduler& s, std::int64_t ctx, std::int64_t i) : session(s, ctx), index(i) {}
    SlotSession session;
    std::int64_t index;  // the scheduler's slot the session holds (each takes the lowest free one, in order)
    bool busy = false;
    Worker worker;  // last: its thread starts once the session exists, and stops first
  };

  /// A slot held for one request: waits for a free one (or refuses when `queue` requests already wait), takes the one
  /// whose cached tokens share the longest prefix with `ids`, gives it back on destruction.
  class SlotLease {
   public:
    SlotLease(Engine& e, const std::vector<std::int32_t>& ids) : e_(e) {
      std::unique_lock<std::mutex> lock(e_.mu_);
      auto free_slot = [&] {
        return std::any_of(e_.slots_.begin(), e_.slots_.end(), [](const auto& s) { return !s->busy; });
      };
      if (!free_slot()) {
        if (e_.waiting_ >= e_.opt_.queue) {
          ++e_.stats_.refused_busy;
          throw RequestError(503, "server_busy", "",
                             str("the server is busy: ", e_.running_, " requests running and ", e_.waiting_,
                                 " waiting (its --parallel ", e_.opt_.slots, " and --queue ", e_.opt_.queue,
                                 "); try again later"));
        }
        ++e_.waiting_;
        e_.cv_.wait(lock, [&] { return free_slot() || e_.stopping_.stop_requested(); });
        --e_.waiting_;
      }
      if (e_.stopping_.stop_requested()) throw RequestError(503, "server_busy", "", "the server is shutting down");
      std::int64_t best = -1;
      for (auto& s : e_.slots_) {
        if (s->busy) continue;
        const auto& t = s->session.tokens();
        std::int64_t p = 0;
        while (p < static_cast<std::int64_t>(t.size()) && p < static_cast<std::int64_t>(ids.size()) &&
               t[static_cast<std::size_t>(p)] == ids[static_cast<std::size_t>(p)]) {
          ++p;
        }
        if (p > best) {
          best = p;
          slot_ = s.get();
        }
      }
      slot_->busy = true;
      ++e_.running_;
    }
    ~SlotLease() {
      {
        std::lock_guard<std::mutex> lock(e_.mu_);
        slot_->busy = false;
        --e_.running_;
      }
      e_.cv_.notify_one();
    }
    SlotLease(const SlotLease&) = delete;
    SlotLease& operator=(const SlotLease&) = delete;
    Slot& slot() { return *slot_; }

   private:
    Engine& e_;
    Slot* slot_ = nullptr;
  };

  models::AnyModel& model_;
  models::detail::AnyDraftModel adapter_;
  const tokenizer::Tokenizer& tk_;
  EngineOptions opt_;
  std::unique_ptr<Scheduler> sched_;  // before the slots: their sessions' caches are its slots
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<std::uint64_t> next_call_id_{0};
  std::mutex picture_mu_;                    // one picture request at a time on picture_worker_
  std::unique_ptr<Worker> picture_worker_;  // with PictureInput::expand
  int running_ = 0, waiting_ = 0;
  EngineStats stats_;
  std::stop_source stopping_;
};

/// An admitted request: its prompt ids and limits, checked, and the slot it holds until destroyed.
class Engine::Job {
 public:
  Job(Engine& e, const Request& r) : e_(e), r_(r) {
    if (r.endpoint == Endpoint::chat && !r.tools.empty() && r.tool_choice != ToolChoice::none) {
      if (!e.opt_.render_tools || e.opt_.tool_format == ToolFormat::none) {
        bad_request("tools", "this model's chat template teaches no tool-call syntax the server reads (it reads "
                             "<tool_call> JSON lines, as Qwen2.5 and Qwen3 write them; docs/server.md): send the "
                             "request without tools, or with tool_choice none");
      }
      tools_ = e.opt_.tool_format;
    }
    ids_ = e.prompt_ids(r, &prompt_text_);
    if (!r.pictures.empty()) {
      pictures_ = e.expand_pictures(ids_, r.pictures);
      ids_ = pictures_->ids;
    }
    const auto P = static_cast<std::int64_t>(ids_.size());
    if (P == 0) bad_request(r.endpoint == Endpoint::chat ? "messages" : "prompt", "the prompt has no tokens");
    const std::int64_t V = e.model_.config().vocab_size, ctx = e.opt_.ctx;
    for (const auto& [id, b] : r.sampling.logit_bias) {
      if (id >= V) bad_request("logit_bias", str("'logit_bias' token id ", id, " outside the vocabulary of ", V));
    }
    if (r.max_tokens) {
      max_new_ = *r.max_tokens;
      if (P + max_new_ > ctx) {
        bad_request("max_tokens", str("the prompt (", P, " tokens) plus max_tokens (", max_new_,
                                      ") exceed the context of ", ctx,
                                      " tokens (context_length_exceeded; the server's --ctx-size)"));
      }
    } else {
      if (P >= ctx) {
        bad_request(r.endpoint == Endpoint::chat ? "messages" : "prompt",
                    str("the prompt (", P, " tokens) fills the context of ", ctx,
                        " tokens (context_length_exceeded; the server's --ctx-size)"));
      }
      max_new_ = ctx - P;
      if (e.opt_.default_max_tokens > 0) max_new_ = std::min(max_new_, e.opt_.default_max_tokens);
    }
    if (r.format != Format::text) {
      try {
        grammar_ = models::grammar::grammar_from_json_schema(r.format == Format::json_schema ? r.schema
                                                                                             : Json{{"type", "object"}});
      } catch (const Error& err) {
        bad_request("response_format.json_schema.schema", str("the schema cannot be used: ", err.what()));
      }
    }
    if (tools_ != ToolFormat::none &&
        (r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named)) {
      const std::string gbnf = tool_call_grammar(tools_, r.tools, r.tool_choice == ToolChoice::named ? r.tool_name : "",
                                                 r.parallel_tool_calls);
      grammar_ = std::make_shared<const models::grammar::Grammar>(models::grammar::Grammar::parse(gbnf));
    }
    sampling_ = r.sampling;
    if (!r.has_seed) sampling_.seed = std::random_device{}();
    try {
      sampling_.validate();
    } catch (const Error& err) {
      bad_request("", err.what());
    }
    lease_ = std::make_unique<SlotLease>(e, ids_);  // last: waits for a slot, or refuses (503)
  }

  const std::vector<std::int32_t>& prompt_ids() const { return ids_; }
  /// The prompt as text (the rendered chat, or the completion's prompt): what `echo` puts before the answer.
  const std::string& prompt_text() const { return prompt_text_; }

  /// Generates to the end on the calling thread; each piece of text goes to `on_text` (return false to stop:
  /// FinishReason::cancelled), as does a stop request on `stop` or the engine's stop().
  /// The generation runs on the slot's worker thread; the text comes back to the calling thread, which calls
  /// `on_text` (an HTTP handler writes it to its client).
  Outcome run(const std::function<bool(std::string_view)>& on_text = {}, std::stop_token stop = {}) {
    MAXTEXT_CHECK(!ran_, ArgumentError, "[server] a Job runs once");
    ran_ = true;
    // One piece at a time: the worker waits for on_text's answer, so the generation goes at the client's pace and
    // stops at the next piece after the client went away, as if on_text ran on the worker.
    struct Channel {
      std::mutex mu;
      std::condition_variable cv;
      std::optional<std::string> piece;  // handed to the caller
      std::optional<bool> answer;        // on_text's answer, handed back
      bool done = false;
    } ch;
    std::function<bool(std::string_view)> relay;
    if (on_text) {
      relay = [&ch](std::string_view d) {
        std::unique_lock<std::mutex> lock(ch.mu);
        ch.piece.emplace(d);
        ch.cv.notify_all();
        ch.cv.wait(lock, [&] { return ch.answer.has_value(); });
        const bool go_on = *ch.answer;
        ch.answer.reset();
        return go_on;
      };
    }
    Outcome out;
    std::exception_ptr err, caller_err;
    lease_->slot().worker.post([&] {
      try {
        out = generate(relay, stop);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(ch.mu);  // notified under the lock: `ch` may be gone once it is released
      ch.done = true;
      ch.cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(ch.mu);
    for (;;) {
      ch.cv.wait(lock, [&] { return ch.done || ch.piece.has_value(); });
      if (ch.piece) {
        const std::string p = std::move(*ch.piece);
        ch.piece.reset();
        lock.unlock();
        bool go_on = false;
        try {  // the worker waits for the answer: an exception here stops the generation, then is rethrown
          go_on = on_text(p);
        } catch (...) {
          if (!caller_err) caller_err = std::current_exception();
        }
        lock.lock();
        ch.answer = go_on && !caller_err;
        ch.cv.notify_all();
        continue;
      }
      break;  // done, and no piece waits
    }
    lock.unlock();
    if (caller_err) std::rethrow_exception(caller_err);
    if (err) std::rethrow_exception(err);
    return out;
  }

 private:
  /// The generation itself, on the worker thread.
  Outcome generate(const std::function<bool(std::string_view)>& on_text, std::stop_token stop) {
    models::GenerateOptions go;
    go.max_new_tokens = max_new_;
    go.sampling = sampling_;
    go.stop_tokens = e_.opt_.stop_tokens;
    go.decode = models::decoder_for(e_.tk_);
    go.stop_strings = r_.stop;
    if (r_.endpoint == Endpoint::chat) {
      for (const auto& s : e_.opt_.chat_stop_strings) go.stop_strings.push_back(s);
    }
    // With tools, text that may open a call is held back: the client gets the answer's text, then its calls.
    std::string seen;
    std::size_t emitted = 0;
    bool in_calls = false, open = true;
    auto emit_to = [&](std::size_t upto) {
      if (upto > emitted && open) open = on_text(std::string_view(seen).substr(emitted, upto - emitted));
      emitted = std::max(emitted, upto);
      return open;
    };
    if (on_text && tools_ == ToolFormat::none) {
      go.on_text = [&](std::int64_t, std::string_view d) { return on_text(d); };
    } else if (on_text) {
      go.on_text = [&](std::int64_t, std::string_view d) {
        seen += d;
        if (in_calls) return open;
        // A call cannot open inside text already sent (text that might open one is held back): look past it only.
        std::size_t start = tool_call_start(std::string_view(seen).substr(emitted), tools_);
        if (start != std::string::npos) start += emitted;
        in_calls = start != std::string::npos;
        std::size_t safe = in_calls ? start : seen.size() - tool_marker_prefix(seen, tools_);
        while (safe > emitted && (seen[safe - 1] == '\n' || seen[safe - 1] == ' ')) --safe;  // blanks before a call
        return emit_to(safe);
      };
    }
    go.logprobs = r_.logprobs;
    go.top_logprobs = r_.top_logprobs;
    std::stop_source cancel;  // the caller's token or the engine's shutdown
    std::stop_callback from_caller(stop, [&] { cancel.request_stop(); });
    std::stop_callback from_engine(e_.stopping_.get_token(), [&] { cancel.request_stop(); });
    go.stop = cancel.get_token();

    const auto P = static_cast<std::int64_t>(ids_.size());
    Outcome o;
    o.prompt_tokens = P;
    models::GenerateResult res;
    auto& session = lease_->slot().session;
    struct Idle {  // the answer is over (or failed): the scheduler's next round need not wait for this slot
      Engine& e;
      std::int64_t slot;
      ~Idle() { e.sched_->idle(slot); }
    } idle{e_, lease_->slot().index};
    if (pictures_) {
      session.sync(ids_, &pictures_->mask, &pictures_->embeddings);
    } else {
      session.sync(ids_);
    }
    res = grammar_ ? models::generate_constrained(session, e_.tk_, {}, go, grammar_) : session.generate({}, go);
    o.cached_tokens = std::max<std::int64_t>(0, P - res.prompt_tokens);
    o.text = res.text.at(0);
    o.tokens = res.tokens.at(0);
    o.finish = res.finish.at(0);
    if (tools_ != ToolFormat::none) {
      ParsedAnswer a = parse_tool_calls(o.text, tools_, r_.tools, e_.next_call_id_.fetch_add(64));
      o.text = std::move(a.content);
      o.tool_calls = std::move(a.calls);
      if (on_text && o.text.size() > emitted) {  // what was held back and is text after all
        seen = o.text;
        emit_to(o.text.size());
      }
    }
    o.prefill_seconds = res.prefill_seconds;
    o.decode_seconds = res.decode_seconds;
    if (r_.logprobs) {
      o.logprobs = res.logprobs.at(0);
      std::int32_t prev = ids_.back();
      for (const auto& lp : o.logprobs) {
        o.token_text.push_back(e_.tk_.piece(prev, lp.token));
        std::vector<std::string> alts;
        for (const auto& alt : lp.top) alts.push_back(e_.tk_.piece(prev, alt.first));
        o.top_text.push_back(std::move(alts));
        prev = lp.token;
      }
    }
    std::lock_guard<std::mutex> lock(e_.mu_);
    ++e_.stats_.served;
    if (o.finish == models::FinishReason::cancelled) ++e_.stats_.cancelled;
    e_.stats_.prompt_tokens += P;
    e_.stats_.cached_tokens += o.cached_tokens;
    e_.stats_.generated_tokens += static_cast<std::int64_t>(o.tokens.size());
    return o;
  }

  Engine& e_;
  Request r_;
  std::vector<std::int32_t> ids_;
  std::optional<models::MediaPrompt> pictures_;  ///< a chat request's pictures: ids_ holds their tokens
  std::string prompt_text_;
  std::int64_t max_new_ = 0;
  std::shared_ptr<const models::grammar::Grammar> grammar_;
  models::SamplingParams sampling_;
  std::unique_ptr<SlotLease> lease_;
  ToolFormat tools_ = ToolFormat::none;  ///< the syntax calls are parsed in (none: no tools for this request)
  bool ran_ = false;
};

inline std::unique_ptr<Engine::Job> Engine::admit(const Request& r) { return std::make_unique<Job>(*this, r); }

inline Outcome Engine::run(const Request& r, const std::function<bool(std::string_view)>& on_text,
                           std::stop_token stop) {
  return admit(r)->run(on_text, stop);
}

}  // namespace maxtext::server
