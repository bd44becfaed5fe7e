// Turns a SchedulerOutput into model work: gathers each scheduled request's input tokens from its
// own token history, runs one batched forward over the paged state cache, and samples a token for
// every request that reached its end. Runs on the engine's step thread only (no locks): everything
// it needs about a request arrives with the step that first schedules it.
//
// The runner keeps each request's token history (prompt + every token it sampled), so a step
// scheduled before the previous step's tokens reached the scheduler (asynchronous scheduling)
// still feeds the right token: the placeholder is resolved here, not in the scheduler.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/request.h"
#include "deepinfer/status.h"
#include "model/deepseek_v4.h"
#include "model/state_cache.h"
#include "sample/sampler.h"

namespace deepinfer::engine {

// What the runner must know about a request, fixed for its lifetime.
struct RunnerRequestInfo {
  sample::SamplingConfig sampling;
  int num_prompt_tokens = 0;
  int min_tokens = 0;                  // ban `min_tokens_banned` until this many outputs exist
  std::vector<int32_t> min_tokens_banned;
  bool reports_logprobs = false;       // the request asked for logprobs (even 0 top entries)
};

struct StepInput {
  core::SchedulerOutput sched;
  // For every scheduled request with is_new: its info (shared with the engine thread, immutable).
  std::map<core::RequestId, std::shared_ptr<const RunnerRequestInfo>> new_infos;
};

// A logits row's greedy token (argmax, lowest id on ties) and its raw log-probability, computed
// where the logits are (the CUDA backend: only these 8 bytes per row reach the host).
struct GreedyRow {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One batched forward over the state cache (model::DeepSeekV4::forward's contract): the CPU
// backend's DeepSeekV4 + StateStorage, or the CUDA backend's CudaModel. Either output may be null;
// `greedy` is only asked of a forward made with device_greedy (ModelRunner's constructor).
using ForwardFn =
    std::function<Status(std::span<const model::SeqChunk>, std::vector<float>* logits, std::vector<GreedyRow>* greedy)>;

class ModelRunner {
 public:
  // device_greedy: the forward can return greedy rows instead of logits. A step whose sampling
  // requests are all plain greedy (temperature 0, no penalties, no logprobs, no banned tokens at this
  // position) then takes them instead of the logits; the token is the one the host sampler would
  // pick from the same logits (same argmax and tie rule).
  ModelRunner(ForwardFn forward, int vocab_size, bool device_greedy = false);

  // Executes one step. An error here is a bug or a broken invariant (requests are validated
  // before they are scheduled); the engine reports it on every request of the step.
  Result<core::ModelOutput> execute(const StepInput& in);

  size_t num_requests() const { return requests_.size(); }

 private:
  struct RequestState {
    std::shared_ptr<const RunnerRequestInfo> info;
    std::vector<int32_t> tokens;  // prompt + outputs, including tokens of steps the scheduler has not seen yet
  };

  ForwardFn forward_;
  int vocab_size_ = 0;
  bool device_greedy_ = false;
  std::vector<GreedyRow> greedy_;
  std::map<core::RequestId, RequestState> requests_;
  std::vector<float> logits_;
};

}  // namespace deepinfer::engine
