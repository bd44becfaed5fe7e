// Public API of the offline engine: many requests at once over one model, continuous batching
// with chunked prefill, a paged state cache under a memory budget, and deterministic sampling.
//
//   deepinfer::EngineOptions opts;
//   opts.model = "path/to/model";                          // empty: the embedded default model
//   auto llm = deepinfer::LLM::create(opts);                // Result<std::unique_ptr<LLM>>
//   deepinfer::SamplingParams sp;
//   sp.temperature = 0.8f; sp.seed = 7; sp.max_tokens = 64;
//   auto outs = (*llm)->generate({deepinfer::Prompt::text("def fib(n):")}, sp);
//   // outs: one RequestOutput per prompt, in order; a bad request carries its own error.
//
// Streaming: add_request() queues, step() advances every running request by one engine step
// and returns the outputs that changed, abort() ends one. Outputs are reproducible to the bit:
// a request gives the same tokens and logprobs alone, in any batch, under any chunking, with
// overlapped scheduling on or off.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer {

// vLLM's names and defaults.
struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // (0, 1]
  int top_k = 0;                    // 0 or -1: all tokens
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; prompt and output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; output tokens
  float frequency_penalty = 0.0f;   // [-2, 2]; output tokens
  std::optional<uint64_t> seed;     // none: the engine picks one and reports it
  int max_tokens = 16;              // >= 1
  int min_tokens = 0;               // EOS and stop_token_ids are masked until this many were generated
  std::vector<std::string> stop;    // stop strings (not in the output text unless include_stop_str_in_output)
  bool include_stop_str_in_output = false;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<int> logprobs;      // none: no logprobs; n >= 0: the sampled token's and the n most likely
  bool skip_special_tokens = true;  // in the output text

  // Error naming the first invalid field, or ok.
  Status validate() const;
};

// A prompt: text (tokenized with the model's tokenizer), chat messages (the V4 chat encoding;
// JSON text of an OpenAI-style message list), or token ids (works without a tokenizer).
struct Prompt {
  enum class Kind { kText, kMessages, kTokenIds };
  Kind kind = Kind::kText;
  std::string text;              // kText, or kMessages: the JSON list of messages
  std::vector<int32_t> token_ids;

  static Prompt from_text(std::string t) { return Prompt{Kind::kText, std::move(t), {}}; }
  static Prompt from_messages_json(std::string json) { return Prompt{Kind::kMessages, std::move(json), {}}; }
  static Prompt from_token_ids(std::vector<int32_t> ids) { return Prompt{Kind::kTokenIds, {}, std::move(ids)}; }
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "", "stop", "length", "abort", "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first
};

struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::string text;                    // empty when the model has no tokenizer
  std::vector<int32_t> token_ids;      // generated tokens (a stop token id is included, as vLLM does)
  std::vector<TokenLogprob> logprobs;  // one per generated token, if asked
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;             // the stop string, or the stop token id as text
  std::string error;                   // FinishReason::kError: what was wrong with the request
  uint64_t seed = 0;                   // the seed the request's draws used
  std::string numerics;                // "exact" or "release": the numerics that produced it
  std::string kv_cache_dtype;          // "float32", "bfloat16" or "fp8": how its KV cache was stored
  int num_preemptions = 0;
  // Timings in seconds from the request's arrival.
  double time_to_first_token = 0.0;
  double time_per_output_token = 0.0;  // mean over tokens after the first
  double total_time = 0.0;
};

struct EngineOptions {
  std::string model;  // model directory; empty: the embedded default model
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int long_prefill_token_threshold = 0;  // cap per prefill chunk (0: the budget)
  // State-cache memory budget in bytes (slots for max_num_seqs requests + pages). 0: 1 GiB.
  int64_t cache_bytes = 0;
  int block_size = 0;              // token positions per page; 0: 256 rounded to the compression ratios
  int max_model_len = 0;           // 0: the model's max_position_embeddings
  bool async_scheduling = true;    // schedule step N+1 while step N runs
  uint64_t seed = 0;               // seeds of requests without one derive from this and their index
  int num_threads = 0;             // CPU backend threads (0: OpenMP's default)
  // "auto" (release numerics for checkpoints with an fp8 quantization_config, exact otherwise),
  // "exact" or "release"; see deepinfer/model.h.
  std::string numerics = "auto";
  // State-cache storage of KV rows and indexer keys: "auto", "float32", "bfloat16" or "fp8"; see
  // LoadOptions in deepinfer/model.h.
  std::string kv_cache_dtype = "auto";
  // "cpu" (the fp32 reference backend) or "cuda" (the GPU; needs a build with
  // DEEPINFER_ACCELERATOR=nvidia and a CUDA device; its KV cache is bfloat16: "auto" means that).
  std::string device = "cpu";
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;      // computed prompt positions (recomputed ones included)
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  int num_blocks = 0;
  int block_size = 0;
  int64_t slot_bytes = 0;
  int64_t page_bytes = 0;
  std::string kv_cache_dtype;      // "float32", "bfloat16" or "fp8"
  std::string device;              // "cpu" or "cuda"
  uint64_t cuda_graph_replays = 0; // decode steps replayed as CUDA graphs (cuda only)
  // steps enqueued on the device before the previous step's tokens were fetched (cuda only: greedy
  // steps keep their tokens on the device, so the device runs step N+1 while the host takes step N's)
  uint64_t overlapped_steps = 0;
};

// Not thread-safe: call it from one thread at a time (it runs its own step thread inside).
class LLM {
 public:
  virtual ~LLM() = default;
  static Result<std::unique_ptr<LLM>> create(const EngineOptions& options);

  // Batch: runs every prompt to completion. One output per prompt, in order; an invalid request
  // gets FinishReason::kError with its message and the others run normally.
  virtual std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const SamplingParams& params) = 0;
  virtual std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                              const std::vector<SamplingParams>& params) = 0;

  // Streaming. add_request returns the request id (or the request's error; nothing is queued).
  virtual Result<std::string> add_request(const Prompt& prompt, const SamplingParams& params) = 0;
  // Runs one engine step; returns the outputs of requests that produced tokens or finished.
  virtual Result<std::vector<RequestOutput>> step() = 0;
  virtual Status abort(const std::string& request_id) = 0;
  virtual bool has_unfinished_requests() const = 0;

  virtual const Tokenizer* tokenizer() const = 0;  // null when the model directory has none
  virtual int vocab_size() const = 0;
  virtual int max_model_len() const = 0;
  virtual EngineStats stats() const = 0;
  virtual std::string description() const = 0;
  virtual std::string numerics() const = 0;  // "exact" or "release"
};

}  // namespace deepinfer
