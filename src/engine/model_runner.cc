#include "engine/model_runner.h"

#include "base/check.h"

namespace deepinfer::engine {

ModelRunner::ModelRunner(ForwardFn forward, int vocab_size, bool device_greedy)
    : forward_(std::move(forward)), vocab_size_(vocab_size), device_greedy_(device_greedy) {}

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

Result<core::ModelOutput> ModelRunner::execute(const StepInput& in) {
  const core::SchedulerOutput& so = in.sched;
  for (core::RequestId id : so.freed) requests_.erase(id);

  std::vector<model::SeqChunk> batch;
  batch.reserve(so.requests.size());
  std::vector<RequestState*> states;
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
