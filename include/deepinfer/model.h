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
// official inference code's quantization-aware numerics (FP8 activations before FP8/FP4 GEMMs, bf16
// activations where it keeps bf16, Hadamard-rotated indexer; docs/numerics.md); kAuto — release for
// checkpoints whose config has an fp8 quantization_config (the released format), exact otherwise.
enum class NumericsMode { kAuto, kExact, kRelease };
// "auto" / "exact" / "release" -> mode; an error naming the value otherwise.
Result<NumericsMode> parse_numerics(const std::string& name);

struct LoadOptions {
  NumericsMode numerics = NumericsMode::kAuto;
  // How the state cache stores KV rows and indexer keys: "auto" (float32 under exact numerics,
  // bfloat16 under release — lossless for each), "float32", "bfloat16", or "fp8" (KV rows FP8 e4m3
  // with bf16 RoPE dims, indexer keys FP4 e2m1: rounds them through those formats, the quantization
  // the release was trained with; 584 B per 512-d row instead of 1 KiB in bf16).
  std::string kv_cache_dtype = "auto";
};

struct ModelInfo {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int eos_token_id = -1;
  std::string layout;       // "official", "transformers" or "embedded"
  std::string numerics;     // "exact" or "release": what this load computes
  std::string kv_cache_dtype;  // "float32", "bfloat16" or "fp8"
  std::string description;  // one line for logs
};

// State-cache memory of a model under one KV cache dtype, from its config alone.
struct StateCacheBytes {
  std::string kv_cache_dtype;  // "float32", "bfloat16" or "fp8"
  int block_size = 0;          // token positions per page
  int64_t slot_bytes = 0;      // per running request, whatever its length: window rings + compressor buffers
  int64_t window_bytes = 0;    // the part of slot_bytes that is sliding-window KV rows
  int64_t page_bytes = 0;      // per block_size positions: compressed KV rows + indexer keys
  // Cache bytes of one request holding `tokens` positions: a slot plus the pages that cover them.
  int64_t request_bytes(int64_t tokens) const {
    return slot_bytes + (page_bytes > 0 ? (tokens + block_size - 1) / block_size * page_bytes : 0);
  }
};
// For `config_json` (a config.json path, or a model folder holding one): one entry per KV cache
// dtype (float32, bfloat16, fp8), pages of `block_size` positions (0: the engine's default).
Result<std::vector<StateCacheBytes>> state_cache_bytes(const std::string& config_json, int block_size = 0);

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
  // Errors also for a kv_cache_dtype outside the list above.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const LoadOptions& options);
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
