// Turns a SchedulerOutput into model work: gathers each scheduled request's input tokens from its
// own token history, runs one batched forward over the paged state cache, and samples a token for
// every request that reached its end. Runs on the engine's step thread only (no locks): everything
// it needs about a request arrives with the step that first schedules it.
//
// The runner keeps each request's token history (prompt + every token it sampled), so a step
// scheduled before the previous step's tokens reached the scheduler (asynchronous scheduling)
// still feeds the right token: the placeholder is resolved here, not in the scheduler.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

// An input token that is not on the host yet: the token at flat index `index` of the batch (chunks
// in order, each chunk's tokens in order) is greedy row `row` of the previous submitted step.
struct DeferredToken {
  int32_t index = 0;
  int32_t row = 0;
};

// Asynchronous greedy steps (the CUDA backend): `submit` enqueues a forward whose greedy rows stay
// on the device (the chunks' host tokens at deferred indices are placeholders, replaced on the
// device); `collect` waits for the oldest submitted step and returns its greedy rows. At most two
// steps are submitted and not collected; deferred tokens name the most recently submitted step.
struct AsyncGreedyFns {
  std::function<Status(std::span<const model::SeqChunk>, std::span<const DeferredToken>)> submit;
  std::function<Status(std::vector<GreedyRow>*)> collect;
  explicit operator bool() const { return submit && collect; }
};

// Runs steps for the engine's step thread, which may keep one step in flight on the device while
// it launches the next (StepWorker): a step whose sampling is all plain greedy goes to the device
// asynchronously when the backend can (AsyncGreedyFns), and its sampled tokens are placeholders in
// the runner's histories until finish() brings them back; the next step names them by greedy row,
// so it can be enqueued before they reach the host. Every other step runs to completion in launch().
// Outputs are the same either way (the same forward, the same argmax).
class ModelRunner {
 public:
  // device_greedy: the forward can return greedy rows instead of logits. A step whose sampling
  // requests are all plain greedy (temperature 0, no penalties, no logprobs, no banned tokens at this
  // position) then takes them instead of the logits; the token is the one the host sampler would
  // pick from the same logits (same argmax and tie rule). `async` (needs device_greedy): such steps
  // are submitted and collected separately.
  ModelRunner(ForwardFn forward, int vocab_size, bool device_greedy = false, AsyncGreedyFns async = {});

  // launch + finish. An error here is a bug or a broken invariant (requests are validated before
  // they are scheduled); the engine reports it on every request of the step.
  Result<core::ModelOutput> execute(const StepInput& in);

  // Whether `in` may be launched while the launched steps are unfinished: the backend is
  // asynchronous, exactly one step is in flight and it went to the device asynchronously, and `in`
  // will too (all its sampling plain greedy). Otherwise the caller finishes the launched steps first.
  bool can_overlap(const StepInput& in) const;
  // Starts a step (errors are kept for its finish()).
  void launch(const StepInput& in);
  // The output of the oldest launched, unfinished step.
  Result<core::ModelOutput> finish();
  size_t num_launched() const { return launched_.size(); }
  // The oldest launched step has its output already (it ran synchronously, or failed to launch).
  bool oldest_is_done() const { return !launched_.empty() && launched_.front().done.has_value(); }
  // Steps launched while another was in flight (observability, tests).
  uint64_t overlapped_launches() const { return overlapped_.load(std::memory_order_relaxed); }

  size_t num_requests() const { return requests_.size(); }

 private:
  struct RequestState {
    std::shared_ptr<const RunnerRequestInfo> info;
    // prompt + outputs, including tokens of steps the scheduler has not seen yet; kPendingToken
    // where an asynchronous step's token has not reached the host yet
    std::vector<int32_t> tokens;
  };
  // A launched step: finished already (`done`), or asynchronous, its tokens pending on the device.
  struct Launched {
    std::optional<Result<core::ModelOutput>> done;
    uint64_t step = 0;
    std::vector<core::RequestId> sampled_ids;  // in greedy-row order
    std::map<core::RequestId, std::pair<int64_t, int32_t>> placeholders;  // id -> (position, greedy row)
  };
  static constexpr int32_t kPendingToken = -1;

  // Every sampling request of `in` samples plain greedy (needs each request's info and history).
  bool plain_greedy_step(const StepInput& in) const;
  void build_batch(const StepInput& in, std::vector<model::SeqChunk>& batch, std::vector<RequestState*>& states);
  Result<core::ModelOutput> run_now(const StepInput& in);
  Status submit_async(const StepInput& in, Launched& l);

  ForwardFn forward_;
  int vocab_size_ = 0;
  bool device_greedy_ = false;
  AsyncGreedyFns async_;
  std::vector<GreedyRow> greedy_;
  std::map<core::RequestId, RequestState> requests_;
  std::vector<float> logits_;
  std::deque<Launched> launched_;
  std::vector<int32_t> staged_tokens_;  // submit_async: the batch's tokens, placeholders as 0
  std::atomic<uint64_t> overlapped_{0};  // read by other threads (EngineStats)
};

}  // namespace deepinfer::engine
