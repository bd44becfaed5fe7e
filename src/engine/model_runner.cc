#include "engine/model_runner.h"

#include "base/check.h"

namespace deepinfer::engine {

ModelRunner::ModelRunner(ForwardFn forward, int vocab_size, bool device_greedy, AsyncGreedyFns async)
    : forward_(std::move(forward)),
      vocab_size_(vocab_size),
      device_greedy_(device_greedy),
      async_(device_greedy ? std::move(async) : AsyncGreedyFns{}) {}

namespace {

// Sampling that is a plain argmax of the raw logits for this token (sample_token's greedy branch
// with nothing to patch or ban) and reports nothing else.
bool plain_greedy(const RunnerRequestInfo& info, size_t outputs_so_far) {
  const sample::SamplingConfig& s = info.sampling;
  return !(s.temperature > 0.0f) && s.num_logprobs == 0 && !info.reports_logprobs && s.repetition_penalty == 1.0f &&
         s.presence_penalty == 0.0f && s.frequency_penalty == 0.0f &&
         (static_cast<int>(outputs_so_far) >= info.min_tokens || info.min_tokens_banned.empty());
}

}  // namespace

bool ModelRunner::plain_greedy_step(const StepInput& in) const {
  bool any = false;
  for (const core::ScheduledRequest& r : in.sched.requests) {
    if (!r.samples) continue;
    any = true;
    const RunnerRequestInfo* info = nullptr;
    size_t history = 0;
    if (r.is_new) {
      auto it = in.new_infos.find(r.id);
      if (it == in.new_infos.end()) return false;  // launch() reports the broken invariant
      info = it->second.get();
      history = r.tokens.size();
    } else {
      auto it = requests_.find(r.id);
      if (it == requests_.end()) return false;
      info = it->second.info.get();
      history = it->second.tokens.size();
    }
    if (!plain_greedy(*info, history - static_cast<size_t>(info->num_prompt_tokens))) return false;
  }
  return any;
}

bool ModelRunner::can_overlap(const StepInput& in) const {
  return async_ && launched_.size() == 1 && !launched_.back().done && plain_greedy_step(in);
}

// Drops freed requests, registers new ones, and lays out the step's chunks over the requests'
// histories (states[i]: request i's state).
void ModelRunner::build_batch(const StepInput& in, std::vector<model::SeqChunk>& batch,
                              std::vector<RequestState*>& states) {
  const core::SchedulerOutput& so = in.sched;
  for (core::RequestId id : so.freed) requests_.erase(id);
  batch.clear();
  states.clear();
  batch.reserve(so.requests.size());
  for (const core::ScheduledRequest& r : so.requests) {
    if (r.is_new) {
      auto info = in.new_infos.find(r.id);
      DI_CHECK(info != in.new_infos.end(), "request %llu is new but came without its info",
               static_cast<unsigned long long>(r.id));
      DI_CHECK(r.start == 0, "a new request starts at position 0");
      requests_[r.id] = RequestState{info->second, r.tokens};
    }
    auto it = requests_.find(r.id);
    DI_CHECK(it != requests_.end(), "request %llu scheduled but unknown to the runner", static_cast<unsigned long long>(r.id));
    RequestState& rs = it->second;
    const int64_t end = r.start + r.num_tokens;
    DI_CHECK(end <= static_cast<int64_t>(rs.tokens.size()),
             "request %llu: step needs tokens up to %lld, the runner knows %zu", static_cast<unsigned long long>(r.id),
             static_cast<long long>(end), rs.tokens.size());
    DI_CHECK(r.samples == (end == static_cast<int64_t>(rs.tokens.size())), "request %llu: sampling flag out of step",
             static_cast<unsigned long long>(r.id));
    model::SeqChunk c;
    c.tokens = std::span<const int32_t>(rs.tokens).subspan(static_cast<size_t>(r.start), static_cast<size_t>(r.num_tokens));
    c.start = r.start;
    c.slot = r.slot;
    c.block_table = r.block_table;
    c.logits = r.samples ? model::LogitRows::kLast : model::LogitRows::kNone;
    batch.push_back(c);
    states.push_back(&rs);
  }
}

void ModelRunner::launch(const StepInput& in) {
  const bool overlapping = !launched_.empty();
  const bool async = async_ && plain_greedy_step(in);
  // can_overlap(in), without scanning the step's requests again
  DI_CHECK(!overlapping || (async && launched_.size() == 1 && !launched_.back().done),
           "step %llu launched while a step it cannot overlap is unfinished",
           static_cast<unsigned long long>(in.sched.step));
  Launched l;
  l.step = in.sched.step;
  if (async) {
    const Status st = submit_async(in, l);
    if (!st.is_ok()) l.done = Result<core::ModelOutput>(st);
    if (st.is_ok() && overlapping) ++overlapped_;
  } else {
    l.done = run_now(in);
  }
  launched_.push_back(std::move(l));
}

Result<core::ModelOutput> ModelRunner::execute(const StepInput& in) {
  DI_CHECK(launched_.empty(), "execute() while %zu launched steps are unfinished", launched_.size());
  launch(in);
  return finish();
}

Status ModelRunner::submit_async(const StepInput& in, Launched& l) {
  std::vector<model::SeqChunk> batch;
  std::vector<RequestState*> states;
  build_batch(in, batch, states);
  // The batch's tokens, copied so that placeholders can become valid ids (0); the device replaces
  // them with the in-flight step's greedy rows.
  size_t total = 0;
  for (const model::SeqChunk& c : batch) total += c.tokens.size();
  staged_tokens_.resize(total);
  std::vector<DeferredToken> deferred;
  const Launched* prev = launched_.empty() ? nullptr : &launched_.back();
  size_t offset = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const core::ScheduledRequest& r = in.sched.requests[i];
    const std::span<const int32_t> src = batch[i].tokens;
    for (size_t t = 0; t < src.size(); ++t) {
      int32_t v = src[t];
      if (v == kPendingToken) {
        const int64_t pos = batch[i].start + static_cast<int64_t>(t);
        DI_CHECK(prev != nullptr && !prev->done, "request %llu: token at position %lld is pending, no step is in flight",
                 static_cast<unsigned long long>(r.id), static_cast<long long>(pos));
        auto it = prev->placeholders.find(r.id);
        DI_CHECK(it != prev->placeholders.end() && it->second.first == pos,
                 "request %llu: token at position %lld is pending but not from the step in flight",
                 static_cast<unsigned long long>(r.id), static_cast<long long>(pos));
        deferred.push_back(DeferredToken{static_cast<int32_t>(offset + t), it->second.second});
        v = 0;
      }
      staged_tokens_[offset + t] = v;
    }
    batch[i].tokens = std::span<const int32_t>(staged_tokens_).subspan(offset, src.size());
    offset += src.size();
  }
  DI_RETURN_IF_ERROR(async_.submit(batch, deferred));
  int32_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const core::ScheduledRequest& r = in.sched.requests[i];
    if (!r.samples) continue;
    l.sampled_ids.push_back(r.id);
    l.placeholders[r.id] = {static_cast<int64_t>(states[i]->tokens.size()), row++};
    states[i]->tokens.push_back(kPendingToken);
  }
  return Status::ok();
}

Result<core::ModelOutput> ModelRunner::finish() {
  DI_CHECK(!launched_.empty(), "finish() without a launched step");
  Launched l = std::move(launched_.front());
  launched_.pop_front();
  if (l.done) return std::move(*l.done);
  DI_RETURN_IF_ERROR(async_.collect(&greedy_));
  DI_CHECK(greedy_.size() == l.sampled_ids.size(), "step %llu: %zu greedy rows for %zu sampling requests",
           static_cast<unsigned long long>(l.step), greedy_.size(), l.sampled_ids.size());
  core::ModelOutput out;
  out.step = l.step;
  out.sampled.resize(l.sampled_ids.size());
  for (size_t k = 0; k < l.sampled_ids.size(); ++k) {
    const core::RequestId id = l.sampled_ids[k];
    out.sampled[k].id = id;
    out.sampled[k].token = greedy_[k].token;
    out.sampled[k].logprob = greedy_[k].logprob;
    // The placeholder becomes the token, unless the request was dropped (or rebuilt) meanwhile.
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    const size_t pos = static_cast<size_t>(l.placeholders.at(id).first);
    if (pos < it->second.tokens.size() && it->second.tokens[pos] == kPendingToken) it->second.tokens[pos] = greedy_[k].token;
  }
  return out;
}

Result<core::ModelOutput> ModelRunner::run_now(const StepInput& in) {
  const core::SchedulerOutput& so = in.sched;
  std::vector<model::SeqChunk> batch;
  std::vector<RequestState*> states;
  build_batch(in, batch, states);
  for (size_t i = 0; i < batch.size(); ++i)
    for (int32_t v : batch[i].tokens)
      DI_CHECK(v != kPendingToken, "request %llu: a pending token in a step that runs synchronously",
               static_cast<unsigned long long>(so.requests[i].id));
  core::ModelOutput out;
  out.step = so.step;
  if (batch.empty()) return out;
  std::vector<size_t> sampling;
  for (size_t i = 0; i < so.requests.size(); ++i)
    if (so.requests[i].samples) sampling.push_back(i);
  out.sampled.resize(sampling.size());

  bool greedy_on_device = device_greedy_ && !sampling.empty();
  for (size_t k = 0; k < sampling.size() && greedy_on_device; ++k) {
    const RequestState& rs = *states[sampling[k]];
    greedy_on_device = plain_greedy(*rs.info, rs.tokens.size() - static_cast<size_t>(rs.info->num_prompt_tokens));
  }
  if (greedy_on_device) {
    DI_RETURN_IF_ERROR(forward_(batch, nullptr, &greedy_));
    DI_CHECK(greedy_.size() == sampling.size(), "forward returned %zu greedy rows for %zu sampling requests",
             greedy_.size(), sampling.size());
    for (size_t k = 0; k < sampling.size(); ++k) {
      out.sampled[k].id = so.requests[sampling[k]].id;
      out.sampled[k].token = greedy_[k].token;
      out.sampled[k].logprob = greedy_[k].logprob;
      states[sampling[k]]->tokens.push_back(greedy_[k].token);
    }
    return out;
  }
  DI_RETURN_IF_ERROR(forward_(batch, &logits_, nullptr));

  // Sample: a pure function per request, so requests can be sampled in parallel.
  const int V = vocab_size_;
#pragma omp parallel for schedule(dynamic) if (sampling.size() > 4)
  for (size_t k = 0; k < sampling.size(); ++k) {
    const core::ScheduledRequest& r = so.requests[sampling[k]];
    const RequestState& rs = *states[sampling[k]];
    const RunnerRequestInfo& info = *rs.info;
    const std::span<const int32_t> all(rs.tokens);
    sample::SampleInput si;
    si.logits = std::span<const float>(logits_).subspan(k * V, V);
    si.prompt_tokens = all.first(info.num_prompt_tokens);
    si.output_tokens = all.subspan(info.num_prompt_tokens);
    si.position = r.start + r.num_tokens;
    if (static_cast<int>(si.output_tokens.size()) < info.min_tokens) si.banned_tokens = info.min_tokens_banned;
    out.sampled[k] = sample::sample_token(si, info.sampling);
    out.sampled[k].id = r.id;
  }
  for (size_t k = 0; k < sampling.size(); ++k) states[sampling[k]]->tokens.push_back(out.sampled[k].token);
  return out;
}

}  // namespace deepinfer::engine
