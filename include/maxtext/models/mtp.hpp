// models/mtp.hpp: MaxText's multi-token prediction (MTP) heads at inference: the acceptance rate MaxText reports for
// them (multi_token_prediction.py calculate_mtp_acceptance_rate), and MtpDrafter, which drafts tokens for speculative
// decoding (models/speculative.hpp) with a model's own MTP layers (models::Transformer::forward_mtp).
//
//   models::MtpDrafter drafter(model, capacity);                  // the model's MTP layers, its own caches
//   auto r = models::generate_speculative(model, prompt, opt, drafter, {.draft_max = model.mtp_num_layers()});
//
// Draft j of a pass comes from MTP layer j, chained as MaxText chains them: at the position q of the last token the
// model has taken, layer 1 reads the model's hidden state at q and the token it just chose (q + 1), and predicts the
// token after that; layer j reads layer j - 1's state at q and draft j - 1. So a pass drafts at most mtp_num_layers
// tokens (DeepSeek-V3: one). Each layer keeps a cache of the positions whose inputs are final; a draft's own rows are
// computed and then dropped from it. The model's verification decides the tokens, so drafts change only the speed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/tensor.hpp"
#include "maxtext/models/sampling.hpp"
#include "maxtext/models/transformer.hpp"

namespace maxtext::models {

/// MaxText's MTP acceptance rate (calculate_mtp_acceptance_rate with mtp_eval_target_module = k), in percent: the
/// share of positions t where MTP layer k's greedy choice equals the main model's greedy choice at t + k, over the
/// target mask rolled k places left (MaxText's roll_and_mask: the last k positions of each row count as 0). `main` and
/// `mtp` are [B, T, V] logits; `target_mask` [B, T] (nonzero = counted) defaults to all ones. Ties go to the lowest
/// id (jnp.argmax). MaxText divides by (mask sum + EPS) with EPS = 1e-8.
inline double mtp_acceptance_rate(const Tensor<float, 3>& main, const Tensor<float, 3>& mtp, std::int64_t k,
                                  const Tensor<std::int32_t, 2>* target_mask = nullptr) {
  const std::int64_t B = main.dim(0), T = main.dim(1), V = main.dim(2);
  MAXTEXT_CHECK(mtp.dim(0) == B && mtp.dim(1) == T && mtp.dim(2) == V, ArgumentError, "[mtp] acceptance rate: main logits ",
                main.shape(), " and MTP logits ", mtp.shape(), " differ in shape");
  MAXTEXT_CHECK(k >= 1, ArgumentError, "[mtp] acceptance rate: k (mtp_eval_target_module) must be >= 1, found ", k);
  if (target_mask != nullptr) {
    MAXTEXT_CHECK(target_mask->dim(0) == B && target_mask->dim(1) == T, ArgumentError, "[mtp] acceptance rate: target_mask ",
                  target_mask->shape(), " for logits of [", B, ", ", T, "]");
  }
  double correct = 0, valid = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t + k < T; ++t) {
      if (target_mask != nullptr && (*target_mask)(b, t + k) == 0) continue;
      valid += 1;
      if (argmax(&mtp(b, t, 0), V) == argmax(&main(b, t + k, 0), V)) correct += 1;
    }
  }
  return correct / (valid + 1e-8) * 100.0;
}

/// Drafts with the model's own MTP layers (see the file comment). Works with models::generate_speculative, which
/// hands it the model's hidden states (observe()) after the prefill and after every verify pass.
template <class Model>
class MtpDrafter {
 public:
  using Cache = decltype(std::declval<Model&>().make_mtp_cache(1, 1));

  /// `capacity`: the most positions each MTP cache holds (default: the config's max_target_length); at least the
  /// prompt and the tokens to generate.
  /// `hidden`: the hidden state the MTP layers read (MtpHidden; MaxText's raw by default).
  explicit MtpDrafter(Model& model, std::int64_t capacity = 0, MtpHidden hidden = MtpHidden::raw)
      : model_(model), hidden_(hidden), D_(model.config().emb_dim) {
    MAXTEXT_CHECK(model.mtp_num_layers() > 0, ConfigError, "[speculative] --spec mtp: the model has no MTP layers "
                  "(mtp_num_layers = 0; checkpoints that carry them: DeepSeek-V3's num_nextn_predict_layers)");
    for (std::int64_t k = 0; k < model.mtp_num_layers(); ++k) caches_.push_back(model.make_mtp_cache(1, capacity));
    // rewind() and propose() set an MTP layer's cache back by its length, which a recurrent state cannot follow.
    MAXTEXT_CHECK(!caches_.front().recurrent(), UnsupportedError, "[speculative] MTP drafter: the model's MTP layers "
                  "keep a recurrent state, which drafts cannot be taken back from");
    pending_.resize(static_cast<std::size_t>(model.mtp_num_layers()));
  }

  std::int64_t num_layers() const { return static_cast<std::int64_t>(caches_.size()); }

  MtpHidden hidden() const { return hidden_; }
  /// The position after the last hidden state handed in: the length of the model's cache this drafter follows.
  std::int64_t observed_end() const { return pending_[0].first + rows_of(pending_[0]); }
  /// Hidden states handed in whose positions MTP layer 1 has not taken yet.
  std::int64_t pending() const { return rows_of(pending_[0]); }

  /// The model's raw hidden states (ForwardOptions::hidden_out) of `rows` rows from `first_position` on, whose inputs
  /// are final, with `context` the tokens so far (position i holds context[i]; the last one not yet run by the model).
  /// Each MTP layer then takes every position whose token it reads is known.
  void observe(const Tensor<float, 2>& hidden, std::int64_t first_position, std::int64_t rows,
               const std::vector<std::int32_t>& context) {
    append(hidden, first_position, rows);
    catch_up(context);
  }
  /// observe() without running the layers yet: the rows wait until catch_up() runs them together (a Session's plain
  /// turns hand each step's row in; its next speculative turn runs them at once).
  void append(const Tensor<float, 2>& hidden, std::int64_t first_position, std::int64_t rows) {
    MAXTEXT_CHECK(rows <= 0 || (hidden.dim(1) == D_ && hidden.dim(0) >= rows), ArgumentError,
                  "[speculative] MTP drafter: hidden states ", hidden.shape(), " for ", rows, " rows of ", D_, " values");
    MAXTEXT_CHECK(observed_end() == first_position, ArgumentError, "[speculative] MTP drafter: hidden states from position ",
                  first_position, " do not continue those it holds (to position ", observed_end(), ")");
    draft1_ = -1;
    if (rows <= 0) return;
    Pending& p0 = pending_[0];
    p0.rows.insert(p0.rows.end(), hidden.data(), hidden.data() + rows * D_);
  }
  /// Runs each MTP layer over the positions it can take: those whose hidden state it holds and whose token k places
  /// ahead is in `context`. Layer 1's choice at the last of them is the next propose()'s first draft.
  void catch_up(const std::vector<std::int32_t>& context) {
    const std::int64_t D = D_;
    draft1_ = -1;
    for (std::int64_t k = 1; k <= num_layers(); ++k) {
      Pending& in = pending_[static_cast<std::size_t>(k - 1)];
      // Positions t = in.first ... whose token t + k is known.
      const std::int64_t n = std::min(rows_of(in), static_cast<std::int64_t>(context.size()) - k - in.first);
      if (n <= 0) continue;
      Tensor<float, 2> h({n, D});
      std::copy(in.rows.begin(), in.rows.begin() + n * D, h.data());
      Tensor<std::int32_t, 2> tok({1, n});
      for (std::int64_t i = 0; i < n; ++i) tok(0, i) = context[static_cast<std::size_t>(in.first + i + k)];
      Tensor<float, 2> out;
      ForwardOptions fo;
      fo.last_only = true;
      fo.hidden_out = &out;
      Cache& c = caches_[static_cast<std::size_t>(k - 1)];
      MAXTEXT_CHECK(c.length(0) == in.first, ArgumentError, "[speculative] MTP drafter: layer ", k, "'s cache holds ",
                    c.length(0), " positions, ", in.first, " expected");
      const Tensor<float, 3> l = model_.forward_mtp(k, h, tok, c, fo, hidden_);
      in.rows.erase(in.rows.begin(), in.rows.begin() + n * D);
      if (k < num_layers()) {
        Pending& next = pending_[static_cast<std::size_t>(k)];
        next.rows.insert(next.rows.end(), out.data(), out.data() + n * D);
      }
      in.first += n;
      // Layer 1's choice at the position before the context's last token is the next token's draft (a drafter that
      // has not reached it, or holds rows past it, offers none).
      if (k == 1 && in.first == static_cast<std::int64_t>(context.size()) - 1) {
        last_h1_.assign(out.data() + (n - 1) * D, out.data() + n * D);
        draft1_ = argmax(&l(0, 0, 0), l.dim(2));
        draft1_at_ = static_cast<std::int64_t>(context.size());
      }
    }
  }

  /// Follows a conversation cut back (Session::rewind): the model's cache keeps its first `cached` positions (at most
  /// observed_end()) and the conversation its first `tokens` tokens. Each layer keeps the positions whose inputs are
  /// unchanged. A layer's rows already taken are not kept, so a layer that must go back makes the one before it (and
  /// layer 1 the model) go back to the same position and compute those rows again: returns the length the model's
  /// cache must go back to (<= cached; at most mtp_num_layers positions less for a cut inside what the layers took).
  std::int64_t rewind(std::int64_t cached, std::int64_t tokens) {
    MAXTEXT_CHECK(cached >= 0 && cached <= observed_end(), ArgumentError, "[speculative] MTP drafter: rewind to ", cached,
                  " positions, it follows ", observed_end());
    const std::int64_t L = num_layers();
    std::vector<std::int64_t> t(static_cast<std::size_t>(L + 1)), first(static_cast<std::size_t>(L + 1));
    t[0] = cached;
    for (std::int64_t k = 1; k <= L; ++k) {
      first[static_cast<std::size_t>(k)] = pending_[static_cast<std::size_t>(k - 1)].first;
      t[static_cast<std::size_t>(k)] = std::max<std::int64_t>(0, std::min(first[static_cast<std::size_t>(k)], tokens - k));
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t k = 1; k <= static_cast<std::size_t>(L); ++k) t[k] = std::min(t[k], t[k - 1]);
      for (std::size_t k = static_cast<std::size_t>(L); k >= 1; --k) {
        if (t[k] < first[k] && t[k - 1] > t[k]) {
          t[k - 1] = t[k];
          changed = true;
        }
      }
    }
    for (std::int64_t k = 1; k <= L; ++k) {
      const auto ku = static_cast<std::size_t>(k);
      Pending& in = pending_[ku - 1];
      if (t[ku] < first[ku]) {  // the layer goes back; the one before it hands the rows from there again
        caches_[ku - 1].set_length(0, static_cast<std::int32_t>(t[ku]));
        in.first = t[ku];
        in.rows.clear();
      } else {  // rows the layer before it will hand again are dropped
        const std::int64_t keep = std::min(rows_of(in), t[ku - 1] - in.first);
        in.rows.resize(static_cast<std::size_t>(keep * D_));
      }
    }
    draft1_ = -1;
    return t[0];
  }
  /// Forgets every position (a conversation replaced whole).
  void reset() {
    for (auto& c : caches_) c.set_length(0, 0);
    for (auto& p : pending_) p = Pending{};
    draft1_ = -1;
  }

  /// Up to min(k, mtp_num_layers) tokens to follow `context`: layer 1's choice from the last observe(), then the
  /// deeper layers' chained on it. Empty when `context` is not the one last observed.
  std::vector<std::int32_t> propose(const std::vector<std::int32_t>& context, std::int64_t k, std::int64_t target_vocab = -1) {
    std::vector<std::int32_t> out;
    if (draft1_ < 0 || draft1_at_ != static_cast<std::int64_t>(context.size()) || k <= 0) return out;
    if (target_vocab > 0 && draft1_ >= target_vocab) return out;
    out.push_back(draft1_);
    const std::int64_t q = static_cast<std::int64_t>(context.size()) - 2;  // the position the drafts are read at
    std::vector<float> h = last_h1_;
    const auto D = static_cast<std::int64_t>(h.size());
    for (std::int64_t j = 2; j <= std::min(k, num_layers()); ++j) {
      Cache& c = caches_[static_cast<std::size_t>(j - 1)];
      if (c.length(0) != q || c.length(0) + 1 > c.capacity()) break;  // layer j is not at q yet
      Tensor<float, 2> hin({1, D});
      std::copy(h.begin(), h.end(), hin.data());
      Tensor<std::int32_t, 2> tok({1, 1});
      tok(0, 0) = out.back();
      Tensor<float, 2> hout;
      ForwardOptions fo;
      fo.hidden_out = &hout;
      const Tensor<float, 3> l = model_.forward_mtp(j, hin, tok, c, fo, hidden_);
      c.set_length(0, static_cast<std::int32_t>(q));  // the row read a draft: not kept
      const std::int32_t t = argmax(&l(0, 0, 0), l.dim(2));
      if (target_vocab > 0 && t >= target_vocab) break;
      out.push_back(t);
      h.assign(hout.data(), hout.data() + D);
    }
    return out;
  }

 private:
  struct Pending {
    std::int64_t first = 0;   ///< the position of rows' first row
    std::vector<float> rows;  ///< h_{k-1} of positions first, first + 1, ... not yet taken by layer k
  };
  std::int64_t rows_of(const Pending& p) const { return static_cast<std::int64_t>(p.rows.size()) / D_; }

  Model& model_;
  MtpHidden hidden_;
  std::int64_t D_;  ///< emb_dim: the width of every hidden state
  std::vector<Cache> caches_;
  std::vector<Pending> pending_;
  std::vector<float> last_h1_;   ///< layer 1's output at the last position it took
  std::int32_t draft1_ = -1;     ///< layer 1's greedy choice there
  std::int64_t draft1_at_ = -1;  ///< the context length it was made for
};

}  // namespace maxtext::models
