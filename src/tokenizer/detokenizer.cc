// Streaming detokenizer: complete UTF-8 only, stop strings found across token boundaries.
#include <algorithm>

#include "deepinfer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

Detokenizer::Detokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool skip_special_tokens)
    : tokenizer_(tokenizer), stops_(std::move(stop_strings)), skip_special_(skip_special_tokens) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

Result<std::string> Detokenizer::add(int32_t id) {
  if (stopped_) return std::string();
  DI_ASSIGN_OR_RETURN(std::string b, tokenizer_.token_bytes(id));
  if (!(skip_special_ && tokenizer_.is_special(id))) bytes_ += b;
  return drain(false);
}

std::string Detokenizer::finish() {
  if (stopped_) return std::string();
  return drain(true);
}

std::string Detokenizer::drain(bool at_end) {
  // Decode everything but an incomplete UTF-8 tail (which later bytes may complete).
  const size_t hold = at_end ? 0 : tokenizer::utf8_incomplete_tail(bytes_);
  pending_ += tokenizer::utf8_lossy(std::string_view(bytes_).substr(0, bytes_.size() - hold));
  bytes_.erase(0, bytes_.size() - hold);
  // Earliest stop string wins; text before it is emitted, the rest dropped.
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos && (best == std::string::npos || at < best)) {
      best = at;
      matched_stop_ = s;
    }
  }
  if (best != std::string::npos) {
    for (const auto& s : stops_)  // prefer the longest stop string starting at the same place
      if (pending_.compare(best, s.size(), s) == 0 && s.size() > matched_stop_.size()) matched_stop_ = s;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    bytes_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest suffix that could still grow into a stop string.
  size_t keep = 0;
  if (!at_end)
    for (const auto& s : stops_)
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > keep; --k)
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

}  // namespace deepinfer
