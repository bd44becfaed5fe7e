#include "sched/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"

namespace deepinfer::sched {

using core::Request;
using core::RequestId;
using core::RequestStatus;

namespace {

std::string req_name(RequestId id) { return "request " + std::to_string(id); }

// running_ is kept sorted by (arrival, id): oldest first, a total order even when arrivals tie.
bool older(const Request* a, const Request* b) {
  return a->arrival != b->arrival ? a->arrival < b->arrival : a->id < b->id;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, const kv::CacheLayout& layout)
    : options_(options), cache_(layout) {
  DI_CHECK(options.max_num_seqs > 0, "max_num_seqs %d", options.max_num_seqs);
  DI_CHECK(options.max_num_batched_tokens > 0, "max_num_batched_tokens %d", options.max_num_batched_tokens);
  DI_CHECK(options.long_prefill_token_threshold >= 0, "long_prefill_token_threshold %d",
           options.long_prefill_token_threshold);
  running_.reserve(static_cast<size_t>(options.max_num_seqs));
}

Status Scheduler::add_request(Request req) {
  const std::string name = req_name(req.id);
  if (requests_.count(req.id) != 0) return Status::invalid_argument(name + ": id already in use");
  if (req.tokens.empty()) return Status::invalid_argument(name + ": no tokens (empty prompt)");
  const int64_t num_tokens = static_cast<int64_t>(req.tokens.size());
  if (req.max_total_tokens <= num_tokens) {
    return Status::invalid_argument(name + ": max_total_tokens " + std::to_string(req.max_total_tokens) +
                                    " leaves no room to generate after its " + std::to_string(num_tokens) +
                                    " tokens");
  }
  if (req.num_computed_tokens != 0 || req.num_output_placeholders != 0 || req.slot != -1 ||
      !req.block_table.empty()) {
    return Status::invalid_argument(
        name + ": arrives with scheduler-owned state (num_computed_tokens " + std::to_string(req.num_computed_tokens) +
        ", num_output_placeholders " + std::to_string(req.num_output_placeholders) + ", slot " +
        std::to_string(req.slot) + ", " + std::to_string(req.block_table.size()) + " pages); all must be empty");
  }
  const kv::CacheLayout& layout = cache_.layout();
  if (layout.num_slots <= 0) return Status::invalid_argument(name + ": the cache has no state slots");
  const int pages = cache_.blocks_needed(req.max_total_tokens);
  if (pages > layout.num_blocks) {
    return Status::invalid_argument(name + ": max_total_tokens " + std::to_string(req.max_total_tokens) + " needs " +
                                    std::to_string(pages) + " pages of " + std::to_string(layout.block_size) +
                                    " tokens, but the cache has only " + std::to_string(layout.num_blocks) +
                                    " pages");
  }
  req.status = RequestStatus::kWaiting;
  auto owned = std::make_unique<Request>(std::move(req));
  Request* r = owned.get();
  requests_.emplace(r->id, std::move(owned));
  waiting_.push_back(r);
  return Status::ok();
}

void Scheduler::preempt(Request& req) {
  cache_.free(req);
  req.num_computed_tokens = 0;  // recompute from scratch; tokens and placeholders are kept
  req.status = RequestStatus::kPreempted;
  ++req.num_preemptions;
  ++num_preemptions_;
  // Victims are taken newest first, so pushing each to the front leaves the oldest in front.
  waiting_.push_front(&req);
  pending_freed_.push_back(req.id);
}

namespace {

// Records `n` tokens of `req` starting at its num_computed_tokens and advances it.
void emit(Request& req, int64_t n, bool is_new, core::SchedulerOutput& out) {
  core::ScheduledRequest s;
  s.id = req.id;
  s.start = req.num_computed_tokens;
  s.num_tokens = static_cast<int>(n);
  s.is_new = is_new;
  if (is_new) s.tokens = req.tokens;
  s.samples = s.start + n == req.num_tokens_with_placeholders();
  s.slot = req.slot;
  s.block_table = req.block_table;
  req.num_computed_tokens += n;
  if (s.samples) ++req.num_output_placeholders;
  out.total_tokens += n;
  out.requests.push_back(std::move(s));
}

}  // namespace

core::SchedulerOutput Scheduler::schedule() {
  core::SchedulerOutput out;
  out.step = step_++;
  out.requests.reserve(std::min(static_cast<size_t>(options_.max_num_seqs), running_.size() + waiting_.size()));
  int64_t budget = options_.max_num_batched_tokens;
  const int64_t threshold = options_.long_prefill_token_threshold;
  bool preempted = false;

  // Running requests, oldest first: decodes and unfinished prefill chunks.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& req = *running_[i];
    int64_t n = req.num_tokens_with_placeholders() - req.num_computed_tokens;
    n = std::min(n, req.max_total_tokens - 1 - req.num_computed_tokens);  // the last token is never fed
    n = std::min(n, budget);
    if (threshold > 0) n = std::min(n, threshold);
    if (n <= 0) continue;
    bool self_preempted = false;
    while (!cache_.allocate(req, req.num_computed_tokens + n)) {
      // The victim is the newest running request; every one before `i` is older, so it was not
      // scheduled in this step yet (or it is `req` itself).
      Request* victim = running_.back();
      running_.pop_back();
      preempt(*victim);
      preempted = true;
      if (victim == &req) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the last running request
    emit(req, n, /*is_new=*/false, out);
    budget -= n;
  }

  // Waiting requests, front first, never skipping one (FCFS); not in a step that had to preempt.
  if (!preempted) {
    while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < options_.max_num_seqs) {
      Request& req = *waiting_.front();
      if (req.num_output_placeholders > 0) break;  // preempted with a token in flight: wait for it
      DI_CHECK(req.num_computed_tokens == 0 && req.slot == -1 && req.block_table.empty(),
               "waiting request %llu holds cache state", static_cast<unsigned long long>(req.id));
      int64_t n = req.num_tokens_with_placeholders();
      n = std::min(n, req.max_total_tokens - 1);
      n = std::min(n, budget);
      if (threshold > 0) n = std::min(n, threshold);
      DI_CHECK(n > 0, "request %llu: nothing to schedule", static_cast<unsigned long long>(req.id));
      if (!cache_.allocate(req, n)) break;
      waiting_.pop_front();
      req.status = RequestStatus::kRunning;
      running_.insert(std::upper_bound(running_.begin(), running_.end(), &req, older), &req);
      emit(req, n, /*is_new=*/true, out);
      budget -= n;
    }
  }

  out.freed = std::move(pending_freed_);
  pending_freed_.clear();
  return out;
}

std::vector<RequestId> Scheduler::update(const core::SchedulerOutput& sched, const core::ModelOutput& out) {
  DI_CHECK(out.step == sched.step, "model output of step %llu applied with the plan of step %llu",
           static_cast<unsigned long long>(out.step), static_cast<unsigned long long>(sched.step));
  std::vector<RequestId> received;
  received.reserve(out.sampled.size());
  for (const core::SampledToken& s : out.sampled) {
    auto it = requests_.find(s.id);
    if (it == requests_.end()) continue;  // finished or aborted since: discard
    Request& req = *it->second;
    if (req.status == RequestStatus::kFinished) continue;
    DI_CHECK(req.num_output_placeholders > 0, "request %llu got a token it has no placeholder for",
             static_cast<unsigned long long>(req.id));
    req.tokens.push_back(s.token);
    --req.num_output_placeholders;
    received.push_back(s.id);
  }
  return received;
}

bool Scheduler::finish_request(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request* req = it->second.get();
  if (auto r = std::find(running_.begin(), running_.end(), req); r != running_.end()) {
    running_.erase(r);
  } else {
    auto w = std::find(waiting_.begin(), waiting_.end(), req);
    DI_CHECK(w != waiting_.end(), "request %llu neither running nor waiting", static_cast<unsigned long long>(id));
    waiting_.erase(w);
  }
  cache_.free(*req);
  req->status = RequestStatus::kFinished;
  pending_freed_.push_back(id);
  requests_.erase(it);
  return true;
}

const Request* Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace deepinfer::sched
