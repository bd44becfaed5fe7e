// Public API: byte-level BPE tokenizers loaded from a HuggingFace tokenizer.json, and a streaming
// detokenizer. Encoding is exact against HuggingFace `tokenizers`: added tokens (with their
// lstrip/rstrip/single_word/normalized flags), normalizers, Split/ByteLevel/Digits pre-tokenizers
// (regexes through PCRE2 with UTF + UCP + JIT), BPE merges by rank.
//
//   auto tok = deepinfer::Tokenizer::from_file("tokenizer.json");   // Result<std::unique_ptr<Tokenizer>>
//   auto ids = (*tok)->encode("Hello world");                       // Result<std::vector<int32_t>>
//   auto text = (*tok)->decode(*ids);                               // Result<std::string>
//
// Invalid UTF-8 in the text to encode is an error naming the byte offset (HF's Python API cannot
// even represent such input). Decoding replaces byte sequences that are not valid UTF-8 with U+FFFD,
// like HF's lossy decode; ids outside the vocabulary are an error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `tokenizer_json` is a path to tokenizer.json; tokenizer_config.json beside it (if present)
  // supplies add_bos_token and the bos/eos tokens.
  static Result<std::unique_ptr<Tokenizer>> from_file(const std::string& tokenizer_json);
  // From JSON text (config_json may be empty). `source` names the input in error messages.
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json, std::string_view config_json,
                                                      const std::string& source);

  // add_special_tokens applies tokenizer.json's post-processor (as HF `tokenizers` does); the
  // fixtures and `deepinfer tokenize` use false. Special-token strings inside `text` are always
  // matched as their tokens.
  virtual Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens = false) const = 0;
  virtual Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;

  // Raw bytes of one token as the decoder produces them (may be part of a UTF-8 character).
  virtual Result<std::string> token_bytes(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;

  virtual int vocab_size() const = 0;  // one past the largest id
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<int32_t> bos_token_id() const = 0;
  virtual std::optional<int32_t> eos_token_id() const = 0;
  virtual bool add_bos_token() const = 0;  // tokenizer_config.json: prompts start with BOS
};

// Turns a stream of token ids into text, emitting only complete UTF-8, and finds stop strings
// that span tokens. The concatenation of everything emitted equals decode(all ids) (up to the
// first stop string, which is not emitted).
class Detokenizer {
 public:
  Detokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings = {}, bool skip_special_tokens = false);

  // Adds one token; returns the newly final text (possibly empty). After a stop string was found,
  // stopped() is true and further tokens are ignored.
  Result<std::string> add(int32_t id);
  // End of stream: returns whatever is still held back (an incomplete UTF-8 tail becomes U+FFFD).
  std::string finish();

  bool stopped() const { return stopped_; }
  // The stop string that matched (empty if none).
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::string drain(bool at_end);

  const Tokenizer& tokenizer_;
  std::vector<std::string> stops_;
  bool skip_special_;
  std::string bytes_;    // undecoded bytes (an incomplete UTF-8 tail at most)
  std::string pending_;  // decoded text held back because it may start a stop string
  bool stopped_ = false;
  std::string matched_stop_;
};

}  // namespace deepinfer
