// Public API: load a DeepSeek-V4 checkpoint (or the embedded default model) and run it.
// This header and status.h are all that apps and bindings include.
//
//   auto model = deepinfer::Model::load("path/to/model");          // Result<std::unique_ptr<Model>>
//   auto session = (*model)->new_session();                        // one request's decode state
//   std::vector<float> logits;                                     // [T, vocab]
//   Status st = (*model)->forward(*session, {5, 17, 42}, &logits);
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

// Numerics: kExact — weights dequantized, activations fp32 (transformers' math); kRelease — the
// official inference code's quantization-aware numerics (FP8 activations before FP8/FP4 GEMMs, FP8
// KV rows, Hadamard + FP4 indexer, bf16 activations) — EXPERIMENTAL: it does not yet reproduce the
// official fixture (issue #6); kAuto — exact for now (release for FP8 checkpoints once it does).
enum class NumericsMode { kAuto, kExact, kRelease };
// "auto" / "exact" / "release" -> mode; an error naming the value otherwise.
Result<NumericsMode> parse_numerics(const std::string& name);

struct ModelInfo {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int eos_token_id = -1;
  std::string layout;       // "official", "transformers" or "embedded"
  std::string numerics;     // "exact" or "release": what this load computes
  std::string description;  // one line for logs
};

// One request's decode state (window KV, compressed rows, compressor buffers, indexer keys).
class Session {
 public:
  virtual ~Session() = default;
  virtual int64_t num_tokens() const = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // Loads config.json and safetensors (single file or sharded) from `dir`. Every tensor is checked
  // against the config before this returns.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, NumericsMode numerics = NumericsMode::kAuto);
  // The embedded default model: a small V4 with deterministic random weights generated in process.
  static Result<std::unique_ptr<Model>> load_default();

  virtual const ModelInfo& info() const = 0;
  virtual std::unique_ptr<Session> new_session() const = 0;

  // Feeds `tokens` after whatever `session` has consumed; writes logits[T, vocab] for each of them.
  // Feeding a prompt at once, in chunks, or one token at a time gives identical logits.
  virtual Status forward(Session& session, std::span<const int32_t> tokens, std::vector<float>* logits) const = 0;

  // Greedy continuation: feeds `prompt` in chunks of `chunk` tokens (0: all at once), then decodes
  // `max_tokens` tokens one at a time, stopping early at EOS if `stop_at_eos`.
  virtual Result<std::vector<int32_t>> generate_greedy(std::span<const int32_t> prompt, int max_tokens, int chunk,
                                                       bool stop_at_eos) const = 0;
};

}  // namespace deepinfer
