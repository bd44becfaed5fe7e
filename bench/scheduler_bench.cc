// Host cost of one scheduler step: schedule() + update() (+ the finish/add churn a server does),
// with a large cache so that only bookkeeping is measured.
//   deepinfer_bench_scheduler [--benchmark_filter=...]
// BM_SchedulerDecode/N: N requests all decoding (one token each per step).
// BM_SchedulerMixed: 256 requests; finished ones are replaced by new long prompts, so steps mix
// prefill chunks (long_prefill_token_threshold) with decodes, plus finish_request/add_request.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "sched/scheduler.h"

namespace {

using deepinfer::core::ModelOutput;
using deepinfer::core::Request;
using deepinfer::core::RequestId;
using deepinfer::core::SampledToken;
using deepinfer::core::SchedulerOutput;
using deepinfer::kv::CacheLayout;
using deepinfer::sched::Scheduler;
using deepinfer::sched::SchedulerOptions;

Request make_request(RequestId id, int prompt, int64_t max_total) {
  Request r;
  r.id = id;
  r.arrival = id;
  r.tokens.assign(static_cast<size_t>(prompt), 7);
  r.num_prompt_tokens = prompt;
  r.max_total_tokens = max_total;
  return r;
}

SampledToken sampled_token(RequestId id, int32_t token) {
  SampledToken t;
  t.id = id;
  t.token = token;
  return t;
}

ModelOutput sample(const SchedulerOutput& so) {
  ModelOutput mo;
  mo.step = so.step;
  mo.sampled.reserve(so.requests.size());
  for (const auto& s : so.requests) {
    if (s.samples) mo.sampled.push_back(sampled_token(s.id, static_cast<int32_t>(s.start % 1000)));
  }
  return mo;
}

// Pure decode: every request has its prompt computed; each step feeds one token per request.
void BM_SchedulerDecode(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  constexpr int kPrompt = 1000;
  constexpr int kStepsPerScheduler = 4096;  // a fresh scheduler (untimed) before tables grow further
  SchedulerOptions options;
  options.max_num_seqs = n;
  options.max_num_batched_tokens = 8192;
  CacheLayout layout;
  layout.block_size = 256;
  layout.num_blocks = 1 << 16;
  layout.num_slots = n;
  std::unique_ptr<Scheduler> s;
  int steps_left = 0;
  int64_t tokens = 0, reqs = 0, steps = 0;
  for (auto _ : state) {
    if (steps_left == 0) {
      state.PauseTiming();
      s = std::make_unique<Scheduler>(options, layout);
      for (int i = 0; i < n; ++i) {
        if (!s->add_request(make_request(static_cast<RequestId>(i + 1), kPrompt, kPrompt + 2 * kStepsPerScheduler)).is_ok()) {
          state.SkipWithError("add_request failed");
          return;
        }
      }
      while (true) {  // prefill until everyone decodes
        SchedulerOutput so = s->schedule();
        s->update(so, sample(so));
        if (so.requests.size() == static_cast<size_t>(n) && so.total_tokens == n) break;
      }
      steps_left = kStepsPerScheduler;
      state.ResumeTiming();
    }
    SchedulerOutput so = s->schedule();
    const std::vector<RequestId> got = s->update(so, sample(so));
    benchmark::DoNotOptimize(got.data());
    tokens += so.total_tokens;
    reqs += static_cast<int64_t>(so.requests.size());
    ++steps;
    --steps_left;
  }
  state.counters["tokens/step"] = static_cast<double>(tokens) / static_cast<double>(steps);
  state.counters["reqs/step"] = static_cast<double>(reqs) / static_cast<double>(steps);
  state.counters["steps/s"] = benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SchedulerDecode)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

// Steady state with churn: outputs of 32..512 tokens, replacement prompts of 256..4096 tokens.
void BM_SchedulerMixed(benchmark::State& state) {
  constexpr int kSeqs = 256;
  SchedulerOptions options;
  options.max_num_seqs = kSeqs;
  options.max_num_batched_tokens = 2048;
  options.long_prefill_token_threshold = 512;
  CacheLayout layout;
  layout.block_size = 256;
  layout.num_blocks = 1 << 14;
  layout.num_slots = kSeqs;
  Scheduler s(options, layout);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> prompt_len(256, 4096), output_len(32, 512);
  RequestId next_id = 1;
  auto add = [&]() {
    const int p = prompt_len(rng);
    if (!s.add_request(make_request(next_id++, p, p + output_len(rng))).is_ok()) state.SkipWithError("add_request failed");
  };
  for (int i = 0; i < kSeqs; ++i) add();
  auto step = [&](int64_t* tokens, int64_t* reqs, int64_t* prefills) {
    SchedulerOutput so = s.schedule();
    const std::vector<RequestId> got = s.update(so, sample(so));
    for (RequestId id : got) {
      const Request* r = s.find(id);
      if (static_cast<int64_t>(r->tokens.size()) == r->max_total_tokens) {
        s.finish_request(id);
        add();
      }
    }
    if (tokens != nullptr) {
      *tokens += so.total_tokens;
      *reqs += static_cast<int64_t>(so.requests.size());
      for (const auto& sr : so.requests) *prefills += sr.num_tokens > 1 ? 1 : 0;
    }
  };
  for (int i = 0; i < 2000; ++i) step(nullptr, nullptr, nullptr);  // reach the steady state
  int64_t tokens = 0, reqs = 0, prefills = 0, steps = 0;
  for (auto _ : state) {
    step(&tokens, &reqs, &prefills);
    ++steps;
  }
  state.counters["tokens/step"] = static_cast<double>(tokens) / static_cast<double>(steps);
  state.counters["reqs/step"] = static_cast<double>(reqs) / static_cast<double>(steps);
  state.counters["chunks/step"] = static_cast<double>(prefills) / static_cast<double>(steps);
  state.counters["preemptions"] = static_cast<double>(s.num_preemptions());
}
BENCHMARK(BM_SchedulerMixed)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
