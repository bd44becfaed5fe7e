// ModelRunner and StepWorker with an asynchronous backend (a fake device): greedy steps go to the
// "device" before the previous step's tokens reach the host, named by greedy row, and the outputs
// are exactly those of the synchronous path; a step that needs logits on the host waits for the
// one in flight; results come back in order, through the engine's submit-then-wait pattern too.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

#include "engine/model_runner.h"
#include "engine/step_worker.h"

namespace deepinfer::engine {
namespace {

constexpr int kVocab = 50;

// The fake model: the next token after `last` at position `pos`.
int32_t next_token(int32_t last, int64_t pos) { return static_cast<int32_t>((last * 7 + pos * 3 + 1) % kVocab); }

// Last-row outputs of a batch: greedy rows and logits (peaked at the next token).
void outputs(std::span<const model::SeqChunk> batch, const std::vector<std::vector<int32_t>>& tokens,
             std::vector<float>* logits, std::vector<GreedyRow>* greedy) {
  if (logits) logits->clear();
  if (greedy) greedy->clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].logits != model::LogitRows::kLast || tokens[i].empty()) continue;
    const int32_t t = next_token(tokens[i].back(), batch[i].start + static_cast<int64_t>(tokens[i].size()) - 1);
    if (logits) {
      const size_t base = logits->size();
      logits->resize(base + kVocab, 0.0f);
      (*logits)[base + t] = 5.0f;
    }
    if (greedy) greedy->push_back(GreedyRow{t, -0.25f});
  }
}

// A device that keeps the last step's greedy rows and resolves deferred tokens from them.
struct FakeDevice {
  std::vector<GreedyRow> last_rows;
  std::deque<std::vector<GreedyRow>> pending;
  int submits = 0, deferred_seen = 0, sync_forwards = 0;

  Status forward(std::span<const model::SeqChunk> batch, std::vector<float>* logits, std::vector<GreedyRow>* greedy) {
    EXPECT_TRUE(pending.empty()) << "a synchronous forward with steps in flight";
    ++sync_forwards;
    std::vector<std::vector<int32_t>> tokens;
    for (const model::SeqChunk& c : batch) tokens.emplace_back(c.tokens.begin(), c.tokens.end());
    outputs(batch, tokens, logits, greedy);
    last_rows.clear();
    if (greedy) last_rows = *greedy;
    return Status::ok();
  }
  Status submit(std::span<const model::SeqChunk> batch, std::span<const DeferredToken> deferred) {
    EXPECT_LT(pending.size(), 2u);
    ++submits;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::pair<size_t, size_t>> where;  // flat index -> (chunk, offset)
    for (size_t i = 0; i < batch.size(); ++i) {
      tokens.emplace_back(batch[i].tokens.begin(), batch[i].tokens.end());
      for (size_t t = 0; t < batch[i].tokens.size(); ++t) where.emplace_back(i, t);
    }
    for (const DeferredToken& d : deferred) {
      EXPECT_LT(static_cast<size_t>(d.row), last_rows.size());
      const auto [i, t] = where.at(static_cast<size_t>(d.index));
      EXPECT_EQ(tokens[i][t], 0) << "a deferred token's host value is a placeholder";
      tokens[i][t] = last_rows.at(static_cast<size_t>(d.row)).token;
      ++deferred_seen;
    }
    std::vector<GreedyRow> rows;
    outputs(batch, tokens, nullptr, &rows);
    last_rows = rows;
    pending.push_back(rows);
    return Status::ok();
  }
  Status collect(std::vector<GreedyRow>* rows) {
    EXPECT_FALSE(pending.empty());
    *rows = pending.front();
    pending.pop_front();
    return Status::ok();
  }
};

std::unique_ptr<ModelRunner> make_runner(FakeDevice& dev, bool async) {
  ForwardFn f = [&dev](std::span<const model::SeqChunk> b, std::vector<float>* l, std::vector<GreedyRow>* g) {
    return dev.forward(b, l, g);
  };
  AsyncGreedyFns a;
  if (async) {
    a.submit = [&dev](std::span<const model::SeqChunk> b, std::span<const DeferredToken> d) { return dev.submit(b, d); };
    a.collect = [&dev](std::vector<GreedyRow>* g) { return dev.collect(g); };
  }
  return std::make_unique<ModelRunner>(std::move(f), kVocab, /*device_greedy=*/true, std::move(a));
}

// Steps of two requests: prompts, then `decode` one-token steps; request 2 samples with temperature
// from step `sampled_from` on (a host-sampled step: logits needed), if >= 0.
std::vector<std::shared_ptr<StepInput>> make_steps(int decode, int sampled_from) {
  const std::vector<std::vector<int32_t>> prompts = {{3, 9, 4}, {8, 1, 1, 6}};
  std::vector<std::shared_ptr<StepInput>> steps;
  for (int s = 0; s <= decode; ++s) {
    auto in = std::make_shared<StepInput>();
    in->sched.step = static_cast<uint64_t>(s);
    for (int i = 0; i < 2; ++i) {
      core::ScheduledRequest r;
      r.id = static_cast<core::RequestId>(i + 1);
      r.slot = i;
      r.block_table = {i};
      r.samples = true;
      const int64_t len = static_cast<int64_t>(prompts[i].size());
      if (s == 0) {
        r.is_new = true;
        r.tokens = prompts[i];
        r.start = 0;
        r.num_tokens = static_cast<int>(len);
        auto info = std::make_shared<RunnerRequestInfo>();
        info->num_prompt_tokens = static_cast<int>(len);
        info->sampling.temperature = 0.0f;
        if (i == 1 && sampled_from == 0) info->sampling.temperature = 0.7f;
        in->new_infos[r.id] = info;
      } else {
        r.start = len + s - 1;
        r.num_tokens = 1;
      }
      in->sched.requests.push_back(r);
    }
    steps.push_back(in);
  }
  return steps;
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<core::ModelOutput>& outs) {
  std::vector<std::vector<int32_t>> t(2);
  for (const core::ModelOutput& o : outs)
    for (const core::SampledToken& s : o.sampled) t[s.id - 1].push_back(s.token);
  return t;
}

TEST(ModelRunner, ChainedAsyncGreedyStepsGiveTheSynchronousTokens) {
  const auto steps = make_steps(6, -1);
  FakeDevice sync_dev, async_dev;
  auto sync_runner = make_runner(sync_dev, false);
  auto async_runner = make_runner(async_dev, true);
  std::vector<core::ModelOutput> sync_out, async_out;
  for (const auto& s : steps) {
    auto r = sync_runner->execute(*s);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    sync_out.push_back(*r);
  }
  // Launch step k + 1, then finish step k: the device always has the next step queued.
  async_runner->launch(*steps[0]);
  for (size_t k = 1; k < steps.size(); ++k) {
    ASSERT_TRUE(async_runner->can_overlap(*steps[k])) << "step " << k;
    async_runner->launch(*steps[k]);
    auto r = async_runner->finish();
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    async_out.push_back(*r);
  }
  auto last = async_runner->finish();
  ASSERT_TRUE(last.is_ok());
  async_out.push_back(*last);
  EXPECT_EQ(tokens_of(async_out), tokens_of(sync_out));
  for (size_t k = 0; k < steps.size(); ++k) EXPECT_EQ(async_out[k].step, k);
  EXPECT_EQ(async_runner->overlapped_launches(), steps.size() - 1);
  EXPECT_EQ(async_dev.submits, static_cast<int>(steps.size()));
  EXPECT_EQ(async_dev.sync_forwards, 0);
  EXPECT_EQ(async_dev.deferred_seen, 2 * static_cast<int>(steps.size() - 1));  // every decode input
  // The tokens really follow the fake model (the test would pass vacuously on constant outputs).
  const auto t = tokens_of(sync_out);
  EXPECT_EQ(t[0][0], next_token(4, 2));
  EXPECT_EQ(t[0][1], next_token(t[0][0], 3));
}

TEST(ModelRunner, AHostSampledStepWaitsForTheStepInFlight) {
  auto steps = make_steps(4, -1);
  // Step 3 adds a request with min_tokens: its first token bans one, so that step's sampling needs
  // the logits on the host; from its second token on it is plain greedy again.
  auto info = std::make_shared<RunnerRequestInfo>();
  info->num_prompt_tokens = 2;
  info->sampling.temperature = 0.0f;
  info->min_tokens = 1;
  info->min_tokens_banned = {0};
  core::ScheduledRequest r;
  r.id = 3;
  r.slot = 2;
  r.block_table = {2};
  r.samples = true;
  r.is_new = true;
  r.tokens = {7, 7};
  r.num_tokens = 2;
  auto s3 = std::make_shared<StepInput>(*steps[3]);
  s3->sched.requests.push_back(r);
  s3->new_infos[3] = info;
  steps[3] = s3;
  steps[4]->sched.requests.clear();  // then one more step of request 3 alone
  core::ScheduledRequest r4 = r;
  r4.is_new = false;
  r4.tokens.clear();
  r4.start = 2;
  r4.num_tokens = 1;
  steps[4]->sched.requests.push_back(r4);
  steps[4]->sched.freed = {1, 2};

  FakeDevice dev, sync_dev;
  auto runner = make_runner(dev, true);
  auto sync_runner = make_runner(sync_dev, false);
  std::vector<core::ModelOutput> outs, sync_outs;
  for (const auto& s : steps) sync_outs.push_back(*sync_runner->execute(*s));
  runner->launch(*steps[0]);
  for (size_t k = 1; k < steps.size(); ++k) {
    const bool overlap = runner->can_overlap(*steps[k]);
    EXPECT_EQ(overlap, k < 3) << "step " << k;
    if (!overlap && runner->num_launched() > 0) outs.push_back(*runner->finish());
    runner->launch(*steps[k]);
    if (runner->num_launched() > 1) outs.push_back(*runner->finish());
    if (runner->oldest_is_done()) outs.push_back(*runner->finish());
  }
  while (runner->num_launched() > 0) outs.push_back(*runner->finish());
  ASSERT_EQ(outs.size(), steps.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    EXPECT_EQ(outs[k].step, k);
    ASSERT_EQ(outs[k].sampled.size(), sync_outs[k].sampled.size()) << "step " << k;
    for (size_t j = 0; j < outs[k].sampled.size(); ++j) {
      EXPECT_EQ(outs[k].sampled[j].id, sync_outs[k].sampled[j].id);
      EXPECT_EQ(outs[k].sampled[j].token, sync_outs[k].sampled[j].token) << "step " << k << " row " << j;
    }
  }
  EXPECT_EQ(dev.sync_forwards, 1);  // step 3; step 4 is async again (nothing in flight to overlap)
  EXPECT_EQ(runner->overlapped_launches(), 2u);
}

// The engine's pattern through the worker thread: submit step N+1, then wait for step N; at the
// end, wait with nothing submitted (the worker must fetch the step it holds in flight).
TEST(StepWorker, DeliversInOrderAndFlushesTheStepInFlightForAWaiter) {
  const auto steps = make_steps(8, -1);
  FakeDevice dev, sync_dev;
  auto runner = make_runner(dev, true);
  auto sync_runner = make_runner(sync_dev, false);
  std::vector<core::ModelOutput> sync_out, outs;
  for (const auto& s : steps) sync_out.push_back(*sync_runner->execute(*s));
  {
    StepWorker worker(*runner, nullptr);
    worker.submit(steps[0]);
    for (size_t k = 1; k < steps.size(); ++k) {
      worker.submit(steps[k]);
      auto r = worker.wait();
      ASSERT_TRUE(r.is_ok());
      outs.push_back(*r);
    }
    auto r = worker.wait();  // nothing more submitted
    ASSERT_TRUE(r.is_ok());
    outs.push_back(*r);
    // Synchronous use too: submit and wait each step alone.
    worker.submit(steps[0]);  // (the same requests again: new, so their state is rebuilt)
    auto again = worker.wait();
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ(again->sampled[0].token, sync_out[0].sampled[0].token);
  }
  EXPECT_EQ(tokens_of(outs), tokens_of(sync_out));
  EXPECT_GE(runner->overlapped_launches(), 1u);
  EXPECT_EQ(runner->num_launched(), 0u);
}

}  // namespace
}  // namespace deepinfer::engine
