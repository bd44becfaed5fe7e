// Continuous-batching scheduler in the vLLM v1 style. Host-only: no tensors, no model.
//
// Each step gets one token budget (max_num_batched_tokens) and at most max_num_seqs running
// requests. There are no prefill/decode phases: every request chases its token count; a prompt
// longer than what the budget leaves is prefilled in chunks over several steps (chunked prefill
// falls out of the budget). Order is FCFS: running requests first (oldest first), then waiting ones
// (front first, never skipping one that does not fit, so nobody starves). When the cache cannot
// hold a running request's next tokens, the newest running request is preempted by recompute: its
// cache is freed, its num_computed_tokens reset to 0, and it goes back to the front of the waiting
// queue with its outputs kept (it later re-prefills prompt + outputs and continues exactly).
//
// Asynchronous scheduling: schedule() may run before the previous step's update(). A request
// scheduled to its end gets an output placeholder at schedule time, so the next schedule() can
// already feed that (unknown) token; the runner resolves it from its own history. update() then
// replaces the placeholder with the real token. Synchronous use (update before each schedule) is
// the same code with at most one placeholder alive.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "core/request.h"
#include "deepinfer/status.h"
#include "kv/state_cache_manager.h"

namespace deepinfer::sched {

struct SchedulerOptions {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  // A single prefill chunk takes at most this many tokens (0: no cap beyond the budget), leaving
  // room for decodes of other requests in the same step.
  int long_prefill_token_threshold = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, const kv::CacheLayout& layout);

  // Queues a request (status kWaiting). Its id must be unused; tokens non-empty; max_total_tokens
  // > tokens.size(); and its whole length must fit in the cache alone (blocks_needed(max_total_tokens)
  // <= num_blocks), else an error naming the request and the numbers.
  Status add_request(core::Request req);

  // Plans the next step. Never exceeds the token budget or max_num_seqs; never schedules a request
  // past max_total_tokens - 1 (the last token is sampled, never fed). Returns an output with no
  // requests when nothing can run.
  core::SchedulerOutput schedule();

  // Applies a step's samples: appends each token to its request and removes one placeholder.
  // Tokens for requests that finished or were aborted meanwhile are discarded. Returns the ids of
  // requests that received a token, in the order of `out.sampled`.
  std::vector<core::RequestId> update(const core::SchedulerOutput& sched, const core::ModelOutput& out);

  // Ends a request (stop condition met, or abort): frees its cache, forgets it, and reports it in
  // the next SchedulerOutput::freed. Unknown or already finished ids are ignored (returns false).
  bool finish_request(core::RequestId id);

  const core::Request* find(core::RequestId id) const;
  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  const kv::StateCacheManager& cache() const { return cache_; }
  uint64_t num_preemptions() const { return num_preemptions_; }

 private:
  void preempt(core::Request& req);

  SchedulerOptions options_;
  kv::StateCacheManager cache_;
  std::map<core::RequestId, std::unique_ptr<core::Request>> requests_;
  std::vector<core::Request*> running_;  // oldest first
  std::deque<core::Request*> waiting_;   // front is next
  std::vector<core::RequestId> pending_freed_;
  uint64_t step_ = 0;
  uint64_t num_preemptions_ = 0;
};

}  // namespace deepinfer::sched
