// Plain data shared by the scheduler (host-only planning) and the model runner (execution).
// The only contract between them: SchedulerOutput (what to run this step) and ModelOutput (what
// the step sampled). No logic here beyond field invariants.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer::core {

using RequestId = uint64_t;

enum class RequestStatus { kWaiting, kRunning, kPreempted, kFinished };

// One request as the scheduler sees it. `tokens` holds the prompt followed by the sampled tokens
// known so far; `num_output_placeholders` counts tokens already promised by in-flight steps but
// not yet known (asynchronous scheduling; always 0 between steps when scheduling is synchronous).
struct Request {
  RequestId id = 0;
  uint64_t arrival = 0;              // FCFS order: smaller is older
  std::vector<int32_t> tokens;       // prompt + known outputs
  int num_prompt_tokens = 0;
  int64_t max_total_tokens = 0;      // prompt + max_tokens, capped by the model length: never schedule past it
  int64_t num_computed_tokens = 0;   // positions whose state is in the cache (advanced at schedule time)
  int num_output_placeholders = 0;   // tokens sampled by in-flight steps, not yet appended
  RequestStatus status = RequestStatus::kWaiting;
  int num_preemptions = 0;

  // Cache holdings (owned by kv::StateCacheManager): a per-request state slot (window ring and
  // compressor buffers; -1 when none) and pages for the compressed rows (page i covers token
  // positions [i * block_size, (i + 1) * block_size)).
  int slot = -1;
  std::vector<int> block_table;

  int64_t num_tokens_with_placeholders() const { return static_cast<int64_t>(tokens.size()) + num_output_placeholders; }
};

// One request's share of a step: compute positions [start, start + num_tokens).
struct ScheduledRequest {
  RequestId id = 0;
  int64_t start = 0;
  int num_tokens = 0;
  // true when the runner must (re)build this request's state from scratch: first schedule or
  // resumption after preemption. Then start == 0 and `tokens` carries every known token
  // (prompt + outputs); otherwise `tokens` is empty and the runner uses its own token history
  // (which already holds tokens sampled by earlier steps, including in-flight ones).
  bool is_new = false;
  std::vector<int32_t> tokens;
  // true when start + num_tokens reaches the end of the request's tokens: the step samples one token.
  bool samples = false;
  int slot = -1;
  std::vector<int> block_table;  // the whole table after this step's allocation
};

struct SchedulerOutput {
  uint64_t step = 0;
  std::vector<ScheduledRequest> requests;  // in scheduling order (running first, then newly admitted)
  int64_t total_tokens = 0;                // sum of num_tokens, <= max_num_batched_tokens
  // Requests whose runner-side state must be dropped before this step runs (finished, aborted
  // or preempted since the previous step).
  std::vector<RequestId> freed;
};

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  RequestId id = 0;
  int32_t token = 0;
  float logprob = 0.0f;            // of `token` under the model's raw distribution
  std::vector<TopLogprob> top;     // the most likely tokens, if asked (descending, ties by id)
};

struct ModelOutput {
  uint64_t step = 0;
  std::vector<SampledToken> sampled;  // one per ScheduledRequest with samples == true, same order
};

}  // namespace deepinfer::core
