// models/text_stream.hpp: incremental detokenisation for streaming: token ids in, UTF-8-complete text deltas out,
// with stop strings that may span tokens. Works on any tokenizer through a decode(ids) function only, so byte-fallback
// pieces, byte-level BPE and decoders that strip a leading space all come out as decode() of the whole sequence would.
//
//   TextStreamer s(decoder_for(tokenizer), {"\nUser:"}, {prompt.back()});
//   for (...) { std::string delta = s.push(token); ... if (s.stopped()) break; }
//   std::string tail = s.finish();
//
// Guarantees: the concatenation of the deltas is decode(context + tokens) past decode(context), cut before the first
// stop-string match (the stop string and everything after it are never emitted). No delta ends inside a UTF-8
// sequence (an incomplete trailing sequence, or a trailing U+FFFD that a later token may still replace, is held back),
// and text that could still be the start of a stop string is held back until it cannot. finish() releases what is
// held (a partial stop match that never completed; an incomplete trailing sequence becomes U+FFFD).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext::models {

/// Text of a token sequence (a tokenizer's decode).
using DecodeFn = std::function<std::string(const std::vector<std::int32_t>&)>;

/// A DecodeFn calling `tk.decode(ids)`; `tk` must outlive it.
template <class Tok>
DecodeFn decoder_for(const Tok& tk) {
  return [&tk](const std::vector<std::int32_t>& ids) { return tk.decode(ids); };
}

namespace detail {
/// Bytes at the end of `s` (from `from` on) that start a UTF-8 sequence not yet complete.
inline std::size_t incomplete_utf8_tail(std::string_view s, std::size_t from) {
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n - from; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    std::size_t need = 0;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? back : 0;
  }
  return 0;
}
}  // namespace detail

class TextStreamer {
 public:
  /// `context`: tokens before the streamed ones (e.g. the prompt's last token) so the first token decodes in context.
  explicit TextStreamer(DecodeFn decode, std::vector<std::string> stop_strings = {}, std::vector<std::int32_t> context = {})
      : decode_(std::move(decode)), stops_(std::move(stop_strings)), ids_(std::move(context)) {
    MAXTEXT_CHECK(static_cast<bool>(decode_), ArgumentError, "[TextStreamer] no decode function");
    for (const auto& s : stops_) MAXTEXT_CHECK(!s.empty(), ArgumentError, "[TextStreamer] empty stop string");
    if (!ids_.empty()) anchor_text_ = decode_(ids_);
    done_ = anchor_text_.size();
  }

  /// Add a generated token; returns the text that became safe to show (often empty). Ignored once stopped().
  std::string push(std::int32_t id) {
    if (stopped_) return {};
    ids_.push_back(id);
    return advance(false);
  }
  /// End of the stream: what was held back (nothing after a stop).
  std::string finish() {
    if (stopped_ || finished_) return {};
    finished_ = true;
    return advance(true);
  }

  bool stopped() const { return stopped_; }
  /// Which stop string matched (-1: none).
  std::int64_t stop_index() const { return stop_index_; }
  /// Everything emitted so far.
  const std::string& text() const { return text_; }

 private:
  std::string advance(bool final);

  DecodeFn decode_;
  std::vector<std::string> stops_;
  std::vector<std::int32_t> ids_;
  std::size_t win_ = 0;     // decode window: ids_[win_:]
  std::size_t done_ = 0;    // bytes of the window's text already emitted (or context)
  std::string anchor_text_;  // text of the window's context tokens
  bool anchor_checked_ = false;
  std::string text_;
  bool stopped_ = false, finished_ = false;
  std::int64_t stop_index_ = -1;
};

#if MAXTEXT_API_DEFINITIONS
MAXTEXT_API std::string TextStreamer::advance(bool final) {
  const std::vector<std::int32_t> win(ids_.begin() + static_cast<std::ptrdiff_t>(win_), ids_.end());
  std::string full = decode_(win);
  // The window's first tokens are context already accounted for: their text should be a prefix of the window's.
  // (If a tokenizer decodes them differently in context, continue after the common prefix.)
  if (!anchor_checked_) {
    anchor_checked_ = true;
    if (full.compare(0, anchor_text_.size(), anchor_text_) != 0) {
      std::size_t i = 0;
      while (i < anchor_text_.size() && i < full.size() && full[i] == anchor_text_[i]) ++i;
      done_ = i;
    }
  }
  if (done_ > full.size()) done_ = full.size();
  const std::string_view pending = std::string_view(full).substr(done_);
  // The earliest stop-string match in the pending text (none can start in emitted text: see hold-back below).
  std::size_t cut = std::string_view::npos;
  for (std::size_t k = 0; k < stops_.size(); ++k) {
    const std::size_t p = pending.find(stops_[k]);
    if (p < cut) {
      cut = p;
      stop_index_ = static_cast<std::int64_t>(k);
    }
  }
  std::string out;
  if (cut != std::string_view::npos) {
    out = std::string(pending.substr(0, cut));
    stopped_ = true;
    text_ += out;
    return out;
  }
  std::size_t emit = pending.size();
  if (!final) {
    // Hold back the longest suffix that is a proper prefix of some stop string.
    for (const auto& s : stops_) {
      for (std::size_t len = std::min(s.size() - 1, pending.size()); len > 0; --len) {
        if (pending.substr(pending.size() - len) == std::string_view(s).substr(0, len)) {
          emit = std::min(emit, pending.size() - len);
          break;
        }
      }
    }
    // Hold back an incomplete UTF-8 sequence or a replacement character a later token may still complete.
    std::string_view e = pending.substr(0, emit);
    const std::size_t inc = detail::incomplete_utf8_tail(e, 0);
    emit -= inc;
    e = pending.substr(0, emit);
    if (inc == 0 && e.size() >= 3 && e.substr(e.size() - 3) == "\xEF\xBF\xBD") emit -= 3;
    out = std::string(pending.substr(0, emit));
  } else {
    out = std::string(pending);
    const std::size_t inc = detail::incomplete_utf8_tail(out, 0);
    if (inc > 0) out.replace(out.size() - inc, inc, "\xEF\xBF\xBD");
  }
  done_ += emit;
  text_ += out;
  // Nothing held: restart the window at the last token (kept as context) so decoding stays O(1) per token.
  if (done_ == full.size() && ids_.size() - win_ > 1) {
    win_ = ids_.size() - 1;
    anchor_text_ = decode_({ids_.back()});
    anchor_checked_ = false;
    done_ = anchor_text_.size();
  }
  return out;
}
#endif

}  // namespace maxtext::models
