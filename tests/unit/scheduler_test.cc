// Scheduler: scripted scenarios with exact plans, then a randomized model-based test with a fake
// runner in synchronous and asynchronous (lagged update) modes.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::sched {
namespace {

using core::ModelOutput;
using core::Request;
using core::RequestId;
using core::RequestStatus;
using core::SampledToken;
using core::ScheduledRequest;
using core::SchedulerOutput;

// The "model": the token at `pos` of request `id` (prompt and outputs alike) is a pure function of
// both, so any correct schedule (chunked, preempted, async) yields exactly the same sequences.
int32_t token_at(RequestId id, int64_t pos) {
  uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(pos) + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<int32_t>(x & 0x7fffffff);
}

std::vector<int32_t> expected_tokens(RequestId id, int64_t n) {
  std::vector<int32_t> t;
  for (int64_t p = 0; p < n; ++p) t.push_back(token_at(id, p));
  return t;
}

Request make_request(RequestId id, int prompt_len, int64_t max_total, uint64_t arrival) {
  Request r;
  r.id = id;
  r.arrival = arrival;
  r.tokens = expected_tokens(id, prompt_len);
  r.num_prompt_tokens = prompt_len;
  r.max_total_tokens = max_total;
  return r;
}

Request make_request(RequestId id, int prompt_len, int64_t max_total) {
  return make_request(id, prompt_len, max_total, id);
}

kv::CacheLayout layout(int block_size, int num_blocks, int num_slots, bool uses_pages = true) {
  kv::CacheLayout l;
  l.block_size = block_size;
  l.num_blocks = num_blocks;
  l.num_slots = num_slots;
  l.uses_pages = uses_pages;
  return l;
}

SchedulerOptions options(int max_num_seqs, int max_num_batched_tokens, int long_prefill_token_threshold = 0) {
  SchedulerOptions o;
  o.max_num_seqs = max_num_seqs;
  o.max_num_batched_tokens = max_num_batched_tokens;
  o.long_prefill_token_threshold = long_prefill_token_threshold;
  return o;
}

SampledToken sampled_token(RequestId id, int32_t token) {
  SampledToken t;
  t.id = id;
  t.token = token;
  return t;
}

// What the runner samples for a plan: the next token of every request that reaches its end.
ModelOutput sample(const SchedulerOutput& so) {
  ModelOutput mo;
  mo.step = so.step;
  for (const ScheduledRequest& s : so.requests) {
    if (s.samples) mo.sampled.push_back(sampled_token(s.id, token_at(s.id, s.start + s.num_tokens)));
  }
  return mo;
}

// One scheduled entry, for compact EXPECT_EQ on plans.
struct Plan {
  RequestId id;
  int64_t start;
  int num_tokens;
  bool is_new;
  bool samples;
  bool operator==(const Plan&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Plan& p) {
  return os << "{id " << p.id << " start " << p.start << " n " << p.num_tokens << (p.is_new ? " new" : "")
            << (p.samples ? " samples" : "") << "}";
}

std::vector<Plan> plans(const SchedulerOutput& so) {
  std::vector<Plan> v;
  for (const ScheduledRequest& s : so.requests) v.push_back(Plan{s.id, s.start, s.num_tokens, s.is_new, s.samples});
  return v;
}

const ScheduledRequest& entry(const SchedulerOutput& so, RequestId id) {
  for (const ScheduledRequest& s : so.requests) {
    if (s.id == id) return s;
  }
  ADD_FAILURE() << "request " << id << " not scheduled in step " << so.step;
  static const ScheduledRequest none;
  return none;
}

kv::CacheLayout big_cache() { return layout(16, 1024, 64); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// --- add_request --------------------------------------------------------------------------------

TEST(Scheduler, AddRequestValidatesWithNamedErrors) {
  Scheduler s(SchedulerOptions{}, layout(4, 3, 2));
  ASSERT_TRUE(s.add_request(make_request(7, 3, 10)).is_ok());

  Status dup = s.add_request(make_request(7, 2, 5));
  EXPECT_EQ(dup.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(contains(dup.message(), "request 7")) << dup.message();
  EXPECT_TRUE(contains(dup.message(), "in use")) << dup.message();

  Status empty = s.add_request(make_request(8, 0, 5));
  EXPECT_EQ(empty.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(contains(empty.message(), "request 8")) << empty.message();

  Status no_room = s.add_request(make_request(9, 5, 5));
  EXPECT_EQ(no_room.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(contains(no_room.message(), "request 9")) << no_room.message();
  EXPECT_TRUE(contains(no_room.message(), "max_total_tokens 5")) << no_room.message();
  EXPECT_TRUE(contains(no_room.message(), "5 tokens")) << no_room.message();

  Status too_long = s.add_request(make_request(10, 5, 13));  // 13 tokens: 4 pages of 4, cache has 3
  EXPECT_EQ(too_long.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(contains(too_long.message(), "request 10")) << too_long.message();
  EXPECT_TRUE(contains(too_long.message(), "max_total_tokens 13")) << too_long.message();
  EXPECT_TRUE(contains(too_long.message(), "4 pages of 4 tokens")) << too_long.message();
  EXPECT_TRUE(contains(too_long.message(), "only 3 pages")) << too_long.message();
  EXPECT_TRUE(s.add_request(make_request(10, 5, 12)).is_ok());  // exactly fits

  Request stale = make_request(11, 2, 5);
  stale.slot = 1;
  Status owned = s.add_request(stale);
  EXPECT_EQ(owned.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(contains(owned.message(), "request 11")) << owned.message();

  EXPECT_EQ(s.num_waiting(), 2);
  EXPECT_EQ(s.find(7)->status, RequestStatus::kWaiting);
  EXPECT_EQ(s.find(8), nullptr);

  Scheduler no_slots(SchedulerOptions{}, layout(4, 3, 0));
  Status slots = no_slots.add_request(make_request(12, 2, 5));
  EXPECT_EQ(slots.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(contains(slots.message(), "request 12")) << slots.message();
}

// --- budget, max_num_seqs, chunking ---------------------------------------------------------------

TEST(Scheduler, RespectsBudgetAndMaxNumSeqs) {
  Scheduler s(options(3, 10), big_cache());
  for (RequestId id = 1; id <= 5; ++id) ASSERT_TRUE(s.add_request(make_request(id, 4, 50)).is_ok());

  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(s0.step, 0u);
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 4, true, true}, {2, 0, 4, true, true}, {3, 0, 2, true, false}}));
  EXPECT_EQ(s0.total_tokens, 10);
  EXPECT_EQ(entry(s0, 3).tokens, expected_tokens(3, 4));  // a new request carries all its tokens
  EXPECT_EQ(s.num_running(), 3);
  EXPECT_EQ(s.num_waiting(), 2);
  EXPECT_EQ(s.update(s0, sample(s0)), (std::vector<RequestId>{1, 2}));

  // Budget is left, but three requests run already.
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(s1.step, 1u);
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 4, 1, false, true}, {2, 4, 1, false, true}, {3, 2, 2, false, true}}));
  EXPECT_EQ(s1.total_tokens, 4);
  EXPECT_TRUE(entry(s1, 1).tokens.empty());
  EXPECT_EQ(s.update(s1, sample(s1)), (std::vector<RequestId>{1, 2, 3}));

  ASSERT_TRUE(s.finish_request(2));
  SchedulerOutput s2 = s.schedule();
  EXPECT_EQ(plans(s2), (std::vector<Plan>{{1, 5, 1, false, true}, {3, 4, 1, false, true}, {4, 0, 4, true, true}}));
  EXPECT_EQ(s2.freed, (std::vector<RequestId>{2}));
  EXPECT_EQ(s.num_running(), 3);
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(Scheduler, ChunkedPrefillOfALongPrompt) {
  Scheduler s(options(4, 8), big_cache());
  ASSERT_TRUE(s.add_request(make_request(1, 20, 23)).is_ok());
  std::vector<std::vector<Plan>> got;
  for (int i = 0; i < 6; ++i) {
    SchedulerOutput so = s.schedule();
    EXPECT_LE(so.total_tokens, 8);
    got.push_back(plans(so));
    if (!so.requests.empty()) {
      EXPECT_EQ(so.requests[0].tokens.empty(), !so.requests[0].is_new);
      EXPECT_EQ(so.requests[0].slot, 0);
      // pages of 16 tokens: the table covers everything computed after this step
      EXPECT_EQ(so.requests[0].block_table.size(), static_cast<size_t>(so.requests[0].start + so.requests[0].num_tokens + 15) / 16);
    }
    s.update(so, sample(so));
  }
  EXPECT_EQ(got, (std::vector<std::vector<Plan>>{
                     {{1, 0, 8, true, false}},
                     {{1, 8, 8, false, false}},
                     {{1, 16, 4, false, true}},   // last chunk samples token 20
                     {{1, 20, 1, false, true}},   // decode: token 21
                     {{1, 21, 1, false, true}},   // token 22 == the last: max_total 23
                     {},                          // position 22 is never fed
                 }));
  EXPECT_EQ(s.find(1)->tokens, expected_tokens(1, 23));
  EXPECT_EQ(s.find(1)->num_computed_tokens, 22);
}

TEST(Scheduler, MixesPrefillChunksWithDecodes) {
  Scheduler s(options(4, 16), big_cache());
  ASSERT_TRUE(s.add_request(make_request(1, 3, 100)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 3, true, true}}));
  s.update(s0, sample(s0));

  ASSERT_TRUE(s.add_request(make_request(2, 40, 100)).is_ok());
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 3, 1, false, true}, {2, 0, 15, true, false}}));
  EXPECT_EQ(entry(s1, 2).tokens, expected_tokens(2, 40));
  EXPECT_EQ(s1.total_tokens, 16);
  s.update(s1, sample(s1));
  SchedulerOutput s2 = s.schedule();
  EXPECT_EQ(plans(s2), (std::vector<Plan>{{1, 4, 1, false, true}, {2, 15, 15, false, false}}));
  s.update(s2, sample(s2));
  SchedulerOutput s3 = s.schedule();
  EXPECT_EQ(plans(s3), (std::vector<Plan>{{1, 5, 1, false, true}, {2, 30, 10, false, true}}));
  EXPECT_EQ(s3.total_tokens, 11);
  EXPECT_EQ(s.update(s3, sample(s3)), (std::vector<RequestId>{1, 2}));
  SchedulerOutput s4 = s.schedule();
  EXPECT_EQ(plans(s4), (std::vector<Plan>{{1, 6, 1, false, true}, {2, 40, 1, false, true}}));
}

TEST(Scheduler, LongPrefillThresholdLeavesRoomForOthers) {
  Scheduler s(options(4, 16, 6),
              big_cache());
  ASSERT_TRUE(s.add_request(make_request(1, 20, 100)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(2, 20, 100)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(3, 2, 100)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 6, true, false}, {2, 0, 6, true, false}, {3, 0, 2, true, true}}));
  s.update(s0, sample(s0));
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 6, 6, false, false}, {2, 6, 6, false, false}, {3, 2, 1, false, true}}));
}

// --- FCFS ---------------------------------------------------------------------------------------

TEST(Scheduler, FcfsNeverSkipsTheFrontOfTheQueue) {
  // 4 pages of 4 tokens. Request 1 holds 3; request 2 needs 2 and waits; request 3 would fit in the
  // one free page but must not overtake request 2.
  Scheduler s(options(4, 64),
              layout(4, 4, 4));
  ASSERT_TRUE(s.add_request(make_request(1, 10, 12)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(entry(s0, 1).block_table, (std::vector<int>{0, 1, 2}));
  s.update(s0, sample(s0));
  ASSERT_TRUE(s.add_request(make_request(2, 8, 9)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(3, 2, 3)).is_ok());
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 10, 1, false, true}}));
  EXPECT_EQ(s.num_waiting(), 2);
  s.update(s1, sample(s1));
  SchedulerOutput s2 = s.schedule();
  EXPECT_TRUE(s2.requests.empty());  // request 1 is at its end; 2 still does not fit
  ASSERT_TRUE(s.finish_request(1));
  SchedulerOutput s3 = s.schedule();
  EXPECT_EQ(plans(s3), (std::vector<Plan>{{2, 0, 8, true, true}, {3, 0, 2, true, true}}));
  EXPECT_EQ(entry(s3, 2).block_table, (std::vector<int>{3, 0}));
  EXPECT_EQ(entry(s3, 3).block_table, (std::vector<int>{1}));
  EXPECT_EQ(s3.freed, (std::vector<RequestId>{1}));
}

TEST(Scheduler, FcfsWhenSlotsRunOut) {
  Scheduler s(options(8, 64),
              layout(4, 64, 2));
  for (RequestId id = 1; id <= 4; ++id) ASSERT_TRUE(s.add_request(make_request(id, 3, 10)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 3, true, true}, {2, 0, 3, true, true}}));
  EXPECT_EQ(entry(s0, 1).slot, 0);
  EXPECT_EQ(entry(s0, 2).slot, 1);
  s.update(s0, sample(s0));
  ASSERT_TRUE(s.finish_request(1));
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{2, 3, 1, false, true}, {3, 0, 3, true, true}}));
  EXPECT_EQ(entry(s1, 3).slot, 0);
}

// --- preemption ---------------------------------------------------------------------------------

TEST(Scheduler, PreemptsItselfWhenNewestAndResumesWithAllTokens) {
  // 5 pages of 4 tokens, two requests of up to 20 tokens: they cannot both grow.
  Scheduler s(options(4, 64),
              layout(4, 5, 4));
  ASSERT_TRUE(s.add_request(make_request(1, 8, 20)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(2, 8, 20)).is_ok());

  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 8, true, true}, {2, 0, 8, true, true}}));
  EXPECT_EQ(entry(s0, 1).block_table, (std::vector<int>{0, 1}));
  EXPECT_EQ(entry(s0, 2).block_table, (std::vector<int>{2, 3}));
  EXPECT_EQ(entry(s0, 1).slot, 0);
  EXPECT_EQ(entry(s0, 2).slot, 1);
  s.update(s0, sample(s0));

  // Request 1 takes the last page; request 2 needs one more and is the newest: preempted.
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 8, 1, false, true}}));
  EXPECT_EQ(entry(s1, 1).block_table, (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(s1.freed, (std::vector<RequestId>{2}));
  EXPECT_EQ(s.num_preemptions(), 1u);
  const Request* r2 = s.find(2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->status, RequestStatus::kPreempted);
  EXPECT_EQ(r2->num_preemptions, 1);
  EXPECT_EQ(r2->num_computed_tokens, 0);
  EXPECT_EQ(r2->slot, -1);
  EXPECT_TRUE(r2->block_table.empty());
  EXPECT_EQ(r2->tokens, expected_tokens(2, 9));  // its output is kept
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(s.cache().num_free_blocks(), 2);
  s.update(s1, sample(s1));

  // Request 1 runs to its end (20 tokens = 5 pages); request 2 does not fit meanwhile.
  int steps = 0;
  while (s.find(1)->tokens.size() < 20) {
    SchedulerOutput so = s.schedule();
    ASSERT_EQ(plans(so), (std::vector<Plan>{{1, s.find(1)->num_computed_tokens - 1, 1, false, true}}));
    EXPECT_TRUE(so.freed.empty());
    s.update(so, sample(so));
    ASSERT_LT(++steps, 20);
  }
  EXPECT_EQ(s.find(1)->block_table, (std::vector<int>{0, 1, 4, 2, 3}));
  EXPECT_EQ(s.find(1)->tokens, expected_tokens(1, 20));
  ASSERT_TRUE(s.finish_request(1));

  // Request 2 resumes from scratch with prompt + output, on recycled pages and slot.
  SchedulerOutput sr = s.schedule();
  EXPECT_EQ(plans(sr), (std::vector<Plan>{{2, 0, 9, true, true}}));
  EXPECT_EQ(entry(sr, 2).tokens, expected_tokens(2, 9));
  EXPECT_EQ(entry(sr, 2).block_table, (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(entry(sr, 2).slot, 2);  // free slots were 2 3 1 0
  EXPECT_EQ(sr.freed, (std::vector<RequestId>{1}));
  EXPECT_EQ(s.find(2)->status, RequestStatus::kRunning);
  s.update(sr, sample(sr));
  while (s.find(2)->tokens.size() < 20) {
    SchedulerOutput so = s.schedule();
    ASSERT_EQ(so.requests.size(), 1u);
    s.update(so, sample(so));
  }
  EXPECT_EQ(s.find(2)->tokens, expected_tokens(2, 20));  // identical to an unpreempted run
  ASSERT_TRUE(s.finish_request(2));
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.cache().num_free_blocks(), 5);
  EXPECT_EQ(s.cache().num_free_slots(), 4);
}

TEST(Scheduler, PreemptsNewestFirstAndKeepsFcfsInWaiting) {
  // Pages of 2 tokens. Request 1's second chunk needs 3 more pages: requests 3 then 2 go.
  Scheduler s(options(4, 10, 6),
              layout(2, 6, 4));
  ASSERT_TRUE(s.add_request(make_request(1, 11, 12)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(2, 2, 4)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(3, 2, 4)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(4, 2, 4)).is_ok());

  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 6, true, false}, {2, 0, 2, true, true}, {3, 0, 2, true, true}}));
  EXPECT_EQ(entry(s0, 1).block_table, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(entry(s0, 2).block_table, (std::vector<int>{3}));
  EXPECT_EQ(entry(s0, 3).block_table, (std::vector<int>{4}));
  s.update(s0, sample(s0));

  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 6, 5, false, true}}));
  EXPECT_EQ(entry(s1, 1).block_table, (std::vector<int>{0, 1, 2, 5, 4, 3}));
  EXPECT_EQ(s1.freed, (std::vector<RequestId>{3, 2}));
  EXPECT_EQ(s.num_preemptions(), 2u);
  EXPECT_EQ(s.num_waiting(), 3);  // 2, 3, then 4 (never ran); no admission in a preempting step
  s.update(s1, sample(s1));
  EXPECT_EQ(s.find(1)->tokens, expected_tokens(1, 12));
  ASSERT_TRUE(s.finish_request(1));

  SchedulerOutput s2 = s.schedule();
  EXPECT_EQ(plans(s2), (std::vector<Plan>{{2, 0, 3, true, true}, {3, 0, 3, true, true}, {4, 0, 2, true, true}}));
  EXPECT_EQ(entry(s2, 2).tokens, expected_tokens(2, 3));
  EXPECT_EQ(entry(s2, 3).tokens, expected_tokens(3, 3));
  EXPECT_EQ(entry(s2, 2).block_table, (std::vector<int>{0, 1}));
  EXPECT_EQ(entry(s2, 3).block_table, (std::vector<int>{2, 5}));
  EXPECT_EQ(entry(s2, 4).block_table, (std::vector<int>{4}));
  EXPECT_EQ(s2.freed, (std::vector<RequestId>{1}));
  EXPECT_EQ(s.update(s2, sample(s2)), (std::vector<RequestId>{2, 3, 4}));
  for (RequestId id : {2, 3}) {
    EXPECT_EQ(s.find(id)->tokens, expected_tokens(id, 4));
    EXPECT_EQ(s.find(id)->num_preemptions, 1);
  }
}

TEST(Scheduler, RunningOrderAndVictimFollowArrival) {
  // Request 2 is added after request 1 but arrived earlier: once admitted it is scheduled first,
  // and request 1 (the newest by arrival) is the one preempted.
  Scheduler s(options(4, 64),
              layout(4, 4, 4));
  ASSERT_TRUE(s.add_request(make_request(1, 4, 16, /*arrival=*/10)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 4, true, true}}));
  s.update(s0, sample(s0));
  ASSERT_TRUE(s.add_request(make_request(2, 4, 16, /*arrival=*/5)).is_ok());
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 4, 1, false, true}, {2, 0, 4, true, true}}));
  EXPECT_EQ(entry(s1, 1).block_table, (std::vector<int>{0, 1}));
  EXPECT_EQ(entry(s1, 2).block_table, (std::vector<int>{2}));
  s.update(s1, sample(s1));
  std::vector<std::vector<Plan>> got;
  for (int i = 0; i < 3; ++i) {
    SchedulerOutput so = s.schedule();
    got.push_back(plans(so));
    s.update(so, sample(so));
  }
  EXPECT_EQ(got, (std::vector<std::vector<Plan>>{
                     {{2, 4, 1, false, true}, {1, 5, 1, false, true}},  // 2 takes the last page
                     {{2, 5, 1, false, true}, {1, 6, 1, false, true}},
                     {{2, 6, 1, false, true}, {1, 7, 1, false, true}},
                 }));
  EXPECT_EQ(s.cache().num_free_blocks(), 0);
  // Position 8 needs request 1's third page: it is the newest, so it preempts itself.
  SchedulerOutput s5 = s.schedule();
  EXPECT_EQ(plans(s5), (std::vector<Plan>{{2, 7, 1, false, true}}));
  EXPECT_EQ(s5.freed, (std::vector<RequestId>{1}));
  EXPECT_EQ(s.find(1)->status, RequestStatus::kPreempted);
  EXPECT_EQ(s.find(1)->tokens, expected_tokens(1, 9));
  EXPECT_EQ(s.find(2)->status, RequestStatus::kRunning);
}

// --- asynchronous scheduling --------------------------------------------------------------------

TEST(Scheduler, AsyncSchedulesAheadWithPlaceholders) {
  Scheduler s(options(4, 64), big_cache());
  ASSERT_TRUE(s.add_request(make_request(1, 4, 8)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 4, true, true}}));
  EXPECT_EQ(s.find(1)->num_output_placeholders, 1);
  SchedulerOutput s1 = s.schedule();  // feeds the token step 0 is still sampling
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 4, 1, false, true}}));
  EXPECT_EQ(s.find(1)->num_output_placeholders, 2);
  EXPECT_EQ(s.find(1)->tokens.size(), 4u);
  EXPECT_EQ(s.find(1)->num_tokens_with_placeholders(), 6);

  EXPECT_EQ(s.update(s0, sample(s0)), (std::vector<RequestId>{1}));
  EXPECT_EQ(s.find(1)->num_output_placeholders, 1);
  SchedulerOutput s2 = s.schedule();
  EXPECT_EQ(plans(s2), (std::vector<Plan>{{1, 5, 1, false, true}}));
  EXPECT_EQ(s.update(s1, sample(s1)), (std::vector<RequestId>{1}));
  SchedulerOutput s3 = s.schedule();
  EXPECT_EQ(plans(s3), (std::vector<Plan>{{1, 6, 1, false, true}}));  // samples the last token (7)
  EXPECT_EQ(s.update(s2, sample(s2)), (std::vector<RequestId>{1}));
  SchedulerOutput s4 = s.schedule();
  EXPECT_TRUE(s4.requests.empty());  // position 7 is the last: never fed
  EXPECT_EQ(s.update(s3, sample(s3)), (std::vector<RequestId>{1}));
  EXPECT_EQ(s.find(1)->tokens, expected_tokens(1, 8));
  EXPECT_EQ(s.find(1)->num_output_placeholders, 0);
  EXPECT_EQ(s.update(s4, sample(s4)), (std::vector<RequestId>{}));
}

TEST(Scheduler, AsyncDiscardsTokensOfFinishedRequests) {
  Scheduler s(options(4, 64), big_cache());
  ASSERT_TRUE(s.add_request(make_request(1, 4, 100)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(2, 4, 100)).is_ok());
  SchedulerOutput s0 = s.schedule();
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(s.update(s0, sample(s0)), (std::vector<RequestId>{1, 2}));
  ASSERT_TRUE(s.finish_request(1));  // e.g. a stop token, while step 1 is in flight
  EXPECT_FALSE(s.finish_request(1));
  EXPECT_EQ(s.find(1), nullptr);
  SchedulerOutput s2 = s.schedule();
  EXPECT_EQ(s2.freed, (std::vector<RequestId>{1}));
  EXPECT_EQ(plans(s2), (std::vector<Plan>{{2, 5, 1, false, true}}));
  EXPECT_EQ(s.update(s1, sample(s1)), (std::vector<RequestId>{2}));  // 1's token is dropped
  EXPECT_EQ(s.find(2)->tokens, expected_tokens(2, 6));
}

TEST(Scheduler, PreemptedRequestWaitsForItsInFlightToken) {
  // 3 pages of 4 tokens; schedule two steps ahead of update.
  Scheduler s(options(4, 64),
              layout(4, 3, 2));
  ASSERT_TRUE(s.add_request(make_request(1, 4, 12)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(2, 4, 8)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 4, true, true}, {2, 0, 4, true, true}}));
  SchedulerOutput s1 = s.schedule();  // 1 takes page 2; 2 needs a page too: preempts itself
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{1, 4, 1, false, true}}));
  EXPECT_EQ(s1.freed, (std::vector<RequestId>{2}));
  const Request* r2 = s.find(2);
  EXPECT_EQ(r2->status, RequestStatus::kPreempted);
  EXPECT_EQ(r2->num_output_placeholders, 1);  // step 0's token for it is still in flight
  EXPECT_EQ(r2->num_computed_tokens, 0);

  ASSERT_TRUE(s.finish_request(1));  // abort: everything is free now
  SchedulerOutput s2 = s.schedule();
  EXPECT_TRUE(s2.requests.empty());  // 2 fits but its token is unknown yet
  EXPECT_EQ(s2.freed, (std::vector<RequestId>{1}));

  EXPECT_EQ(s.update(s0, sample(s0)), (std::vector<RequestId>{2}));  // a preempted request gets its token
  EXPECT_EQ(r2->tokens, expected_tokens(2, 5));
  EXPECT_EQ(r2->num_output_placeholders, 0);
  EXPECT_EQ(s.update(s1, sample(s1)), (std::vector<RequestId>{}));
  SchedulerOutput s3 = s.schedule();
  EXPECT_EQ(plans(s3), (std::vector<Plan>{{2, 0, 5, true, true}}));
  EXPECT_EQ(entry(s3, 2).tokens, expected_tokens(2, 5));
  EXPECT_EQ(s.update(s2, sample(s2)), (std::vector<RequestId>{}));
}

// --- finish_request -----------------------------------------------------------------------------

TEST(Scheduler, FinishRequestFreesCacheAndReportsIt) {
  Scheduler s(options(1, 64),
              layout(4, 8, 2));
  ASSERT_TRUE(s.add_request(make_request(1, 6, 10)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(2, 3, 10)).is_ok());
  ASSERT_TRUE(s.add_request(make_request(3, 3, 10)).is_ok());
  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(plans(s0), (std::vector<Plan>{{1, 0, 6, true, true}}));
  EXPECT_EQ(s.cache().num_free_blocks(), 6);
  EXPECT_EQ(s.cache().num_free_slots(), 1);
  s.update(s0, sample(s0));

  EXPECT_FALSE(s.finish_request(42));
  ASSERT_TRUE(s.finish_request(3));  // still waiting: no cache, but reported all the same
  ASSERT_TRUE(s.finish_request(1));
  EXPECT_FALSE(s.finish_request(1));
  EXPECT_EQ(s.cache().num_free_blocks(), 8);
  EXPECT_EQ(s.cache().num_free_slots(), 2);
  EXPECT_EQ(s.num_running(), 0);
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(s.update(s0, sample(s0)), (std::vector<RequestId>{}));  // stale tokens are ignored

  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(s1.freed, (std::vector<RequestId>{3, 1}));
  EXPECT_EQ(plans(s1), (std::vector<Plan>{{2, 0, 3, true, true}}));
  EXPECT_EQ(entry(s1, 2).slot, 1);  // slot 1 was free before slot 0 came back
  EXPECT_EQ(entry(s1, 2).block_table, (std::vector<int>{2}));
  SchedulerOutput s2 = s.schedule();
  EXPECT_TRUE(s2.freed.empty());
}

TEST(Scheduler, NothingToDo) {
  Scheduler s(SchedulerOptions{}, big_cache());
  EXPECT_FALSE(s.has_unfinished());
  SchedulerOutput so = s.schedule();
  EXPECT_TRUE(so.requests.empty());
  EXPECT_EQ(so.total_tokens, 0);
  EXPECT_EQ(s.schedule().step, 1u);
}

// --- randomized model-based test ----------------------------------------------------------------

struct SimConfig {
  const char* name;
  SchedulerOptions options;
  kv::CacheLayout layout;
  int max_prompt;
  int max_new;
  int add_steps;      // requests arrive during the first add_steps steps
  double p_arrival;   // per step
  double p_abort;     // per step
  bool expect_preemption;
};

struct SimStats {
  int completed = 0;
  int aborted = 0;
  uint64_t preemptions = 0;
  int steps = 0;
};

// The fake runner: keeps each request's token history and computed length like the real one,
// drops state when told (freed), and samples token_at(id, position).
class FakeRunner {
 public:
  explicit FakeRunner(const kv::StateCacheManager& cache) : cache_(cache) {}

  ModelOutput run(const SchedulerOutput& so) {
    ModelOutput mo;
    mo.step = so.step;
    for (RequestId id : so.freed) state_.erase(id);
    for (const ScheduledRequest& s : so.requests) {
      if (s.is_new) {
        EXPECT_EQ(state_.count(s.id), 0u) << "request " << s.id << " rebuilt without being freed";
        EXPECT_EQ(s.start, 0);
        EXPECT_EQ(s.tokens, expected_tokens(s.id, static_cast<int64_t>(s.tokens.size())));
        state_[s.id] = State{s.tokens, 0};
      } else {
        EXPECT_TRUE(s.tokens.empty());
      }
      auto it = state_.find(s.id);
      if (it == state_.end()) {
        ADD_FAILURE() << "request " << s.id << " continued without state";
        continue;
      }
      State& st = it->second;
      EXPECT_EQ(s.start, st.computed) << "request " << s.id;
      EXPECT_GT(s.num_tokens, 0);
      // Every fed position has a token the runner knows (sampled by an earlier step, maybe in flight).
      EXPECT_LE(s.start + s.num_tokens, static_cast<int64_t>(st.history.size())) << "request " << s.id;
      EXPECT_GE(s.slot, 0);
      EXPECT_EQ(static_cast<int>(s.block_table.size()), cache_.blocks_needed(s.start + s.num_tokens));
      st.computed = s.start + s.num_tokens;
      if (s.samples) {
        EXPECT_EQ(st.computed, static_cast<int64_t>(st.history.size()));
        const int32_t tok = token_at(s.id, st.computed);
        st.history.push_back(tok);
        mo.sampled.push_back(sampled_token(s.id, tok));
      } else {
        EXPECT_LT(st.computed, static_cast<int64_t>(st.history.size()));
      }
    }
    return mo;
  }

  size_t history_size(RequestId id) const { return state_.at(id).history.size(); }

 private:
  struct State {
    std::vector<int32_t> history;
    int64_t computed = 0;
  };
  const kv::StateCacheManager& cache_;
  std::map<RequestId, State> state_;
};

// Cache and queue invariants over every live request.
void check_invariants(const Scheduler& s, const SimConfig& cfg, const std::map<RequestId, int64_t>& live, int lag) {
  const kv::StateCacheManager& cache = s.cache();
  const int num_blocks = cfg.layout.num_blocks;
  std::vector<RequestId> owner(static_cast<size_t>(num_blocks), 0);
  std::set<int> slots;
  int held = 0, running = 0, waiting = 0;
  for (const auto& [id, max_total] : live) {
    const Request* r = s.find(id);
    ASSERT_NE(r, nullptr) << "request " << id;
    EXPECT_EQ(r->max_total_tokens, max_total);
    EXPECT_LE(r->num_computed_tokens, r->max_total_tokens - 1);
    EXPECT_LE(r->num_computed_tokens, r->num_tokens_with_placeholders());
    EXPECT_GE(r->num_output_placeholders, 0);
    EXPECT_LE(r->num_output_placeholders, lag);  // one per step in flight
    EXPECT_EQ(static_cast<int>(r->block_table.size()), cache.blocks_needed(r->num_computed_tokens)) << "request " << id;
    if (r->status == RequestStatus::kRunning) {
      ++running;
      EXPECT_GE(r->slot, 0);
      EXPECT_LT(r->slot, cfg.layout.num_slots);
      EXPECT_TRUE(slots.insert(r->slot).second) << "slot " << r->slot << " held twice";
    } else {
      ++waiting;
      EXPECT_TRUE(r->status == RequestStatus::kWaiting || r->status == RequestStatus::kPreempted);
      EXPECT_EQ(r->slot, -1);
      EXPECT_EQ(r->num_computed_tokens, 0);
    }
    for (int b : r->block_table) {
      ASSERT_GE(b, 0);
      ASSERT_LT(b, num_blocks);
      EXPECT_EQ(owner[static_cast<size_t>(b)], 0u) << "block " << b << " held by " << owner[static_cast<size_t>(b)]
                                                   << " and " << id;
      owner[static_cast<size_t>(b)] = id;
      EXPECT_EQ(cache.pool().refcount(b), 1);
      ++held;
    }
  }
  for (int b = 0; b < num_blocks; ++b) {
    if (owner[static_cast<size_t>(b)] == 0) {
      EXPECT_EQ(cache.pool().refcount(b), 0) << "leaked block " << b;
    }
  }
  EXPECT_EQ(held + cache.num_free_blocks(), num_blocks);
  EXPECT_EQ(static_cast<int>(slots.size()) + cache.num_free_slots(), cfg.layout.num_slots);
  EXPECT_EQ(running, s.num_running());
  EXPECT_EQ(waiting, s.num_waiting());
  EXPECT_LE(s.num_running(), cfg.options.max_num_seqs);
  EXPECT_EQ(s.has_unfinished(), !live.empty());
}

// Drives one scheduler for a whole run. lag = how many steps are in flight when a step's output is
// applied: 0 is synchronous (update before the next schedule); 1 schedules N+1 before update N.
SimStats simulate(const SimConfig& cfg, uint32_t seed, int lag) {
  SimStats stats;
  std::mt19937 rng(seed);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p; };
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  Scheduler s(cfg.options, cfg.layout);
  FakeRunner runner(s.cache());
  std::map<RequestId, int64_t> live;  // id -> max_total_tokens
  std::set<RequestId> gone;           // finished or aborted: must never get a token again
  std::vector<RequestId> expect_freed;
  std::deque<std::pair<SchedulerOutput, ModelOutput>> in_flight;
  RequestId next_id = 1;
  const int max_steps = cfg.add_steps * 20 + 2000;

  auto apply_oldest = [&]() {
    auto [so, mo] = std::move(in_flight.front());
    in_flight.pop_front();
    const std::vector<RequestId> got = s.update(so, mo);
    for (RequestId id : got) {
      EXPECT_EQ(gone.count(id), 0u) << "token after finish for request " << id;
      const Request* r = s.find(id);
      ASSERT_NE(r, nullptr);
      const int64_t n = static_cast<int64_t>(r->tokens.size());
      EXPECT_EQ(r->tokens.back(), token_at(id, n - 1));
      ASSERT_LE(n, r->max_total_tokens);
      if (n == r->max_total_tokens) {
        EXPECT_EQ(r->tokens, expected_tokens(id, n)) << "request " << id;
        EXPECT_EQ(r->num_output_placeholders, 0);
        ASSERT_TRUE(s.finish_request(id));
        live.erase(id);
        gone.insert(id);
        expect_freed.push_back(id);
        ++stats.completed;
      }
    }
  };

  for (int step = 0;; ++step) {
    if (step >= cfg.add_steps && live.empty()) break;
    if (step >= max_steps) {
      ADD_FAILURE() << "no progress: " << live.size() << " requests left after " << step << " steps";
      break;
    }
    if (step < cfg.add_steps && chance(cfg.p_arrival)) {
      const int n = uniform(1, 3);
      for (int i = 0; i < n; ++i) {
        const int prompt = uniform(1, cfg.max_prompt);
        const int max_new = uniform(1, cfg.max_new);
        const RequestId id = next_id++;
        EXPECT_TRUE(s.add_request(make_request(id, prompt, prompt + max_new, /*arrival=*/id)).is_ok());
        live[id] = prompt + max_new;
      }
    }
    if (!live.empty() && chance(cfg.p_abort)) {
      auto it = live.begin();
      std::advance(it, uniform(0, static_cast<int>(live.size()) - 1));
      const RequestId id = it->first;
      const Request* r = s.find(id);
      EXPECT_EQ(r->tokens, expected_tokens(id, static_cast<int64_t>(r->tokens.size())));
      EXPECT_TRUE(s.finish_request(id));
      EXPECT_FALSE(s.finish_request(id));
      live.erase(it);
      gone.insert(id);
      expect_freed.push_back(id);
      ++stats.aborted;
    }
    check_invariants(s, cfg, live, lag);
    if (::testing::Test::HasFatalFailure()) return stats;
    if (lag == 0) {
      for (const auto& [id, unused] : live) EXPECT_EQ(s.find(id)->num_output_placeholders, 0);
    }

    const uint64_t preemptions_before = s.num_preemptions();
    SchedulerOutput so = s.schedule();
    EXPECT_EQ(so.step, static_cast<uint64_t>(step));
    // Plan checks: budget, max_num_seqs, no request twice, totals.
    int64_t total = 0;
    std::set<RequestId> ids;
    bool admitted = false;
    for (const ScheduledRequest& sr : so.requests) {
      EXPECT_TRUE(ids.insert(sr.id).second) << "request " << sr.id << " twice in step " << step;
      EXPECT_GT(sr.num_tokens, 0);
      if (auto it = live.find(sr.id); it != live.end()) {
        EXPECT_LE(sr.start + sr.num_tokens, it->second - 1);  // the last token is never fed
      } else {
        ADD_FAILURE() << "scheduled request " << sr.id << " is not live";
      }
      if (sr.is_new) {
        admitted = true;
      } else {
        EXPECT_FALSE(admitted) << "running requests come first";
      }
      total += sr.num_tokens;
    }
    EXPECT_EQ(total, so.total_tokens);
    EXPECT_LE(so.total_tokens, cfg.options.max_num_batched_tokens);
    EXPECT_LE(static_cast<int>(so.requests.size()), cfg.options.max_num_seqs);
    // freed: everything finished since the last step, then this step's preemptions.
    const uint64_t preempted = s.num_preemptions() - preemptions_before;
    EXPECT_EQ(so.freed.size(), expect_freed.size() + preempted);
    for (size_t i = 0; i < so.freed.size(); ++i) {
      if (i < expect_freed.size()) {
        EXPECT_EQ(so.freed[i], expect_freed[i]);
      } else {
        const Request* r = s.find(so.freed[i]);
        if (r == nullptr) {
          ADD_FAILURE() << "freed request " << so.freed[i] << " is neither finished nor preempted";
          continue;
        }
        EXPECT_EQ(r->status, RequestStatus::kPreempted);
        EXPECT_EQ(ids.count(so.freed[i]), 0u) << "preempted and scheduled in one step";
      }
    }
    if (preempted > 0) {
      EXPECT_FALSE(admitted) << "admission in a step that preempted";
    }
    expect_freed.clear();

    in_flight.emplace_back(so, runner.run(so));
    for (const ScheduledRequest& sr : so.requests) {
      // The runner's history is the scheduler's tokens plus the placeholders in flight.
      EXPECT_EQ(static_cast<int64_t>(runner.history_size(sr.id)), s.find(sr.id)->num_tokens_with_placeholders());
    }
    while (static_cast<int>(in_flight.size()) > lag) {
      apply_oldest();
      if (::testing::Test::HasFatalFailure()) return stats;
    }
    check_invariants(s, cfg, live, lag);
    if (::testing::Test::HasFatalFailure()) return stats;
    stats.steps = step + 1;
  }
  while (!in_flight.empty()) apply_oldest();  // steps still in flight carry only stale tokens

  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(stats.completed + stats.aborted, static_cast<int>(next_id - 1));
  EXPECT_EQ(s.cache().num_free_blocks(), cfg.layout.num_blocks);
  EXPECT_EQ(s.cache().num_free_slots(), cfg.layout.num_slots);
  for (int b = 0; b < cfg.layout.num_blocks; ++b) EXPECT_EQ(s.cache().pool().refcount(b), 0);
  stats.preemptions = s.num_preemptions();
  return stats;
}

TEST(SchedulerRandomized, ModelBasedSyncAndAsync) {
  const SimConfig configs[] = {
      // Tiny cache: 10 pages of 4 tokens for requests of up to 36 tokens; preemption is frequent.
      {"tiny", options(5, 12, 0),
       layout(4, 10, 6, true), 20, 16, 300, 0.25, 0.02, true},
      {"tiny-threshold", options(4, 10, 3),
       layout(2, 16, 3, true), 18, 12, 300, 0.35, 0.02, true},
      // Slot-bound only (no compressed layers).
      {"no-pages", options(6, 16, 0),
       layout(4, 0, 3, false), 30, 20, 300, 0.3, 0.03, false},
      // More room: preemption only under bursts.
      {"roomy", options(12, 48, 8),
       layout(8, 80, 16, true), 60, 40, 300, 0.5, 0.01, false},
  };
  for (const SimConfig& cfg : configs) {
    for (int lag : {0, 1, 2}) {
      uint64_t preemptions = 0;
      int completed = 0, aborted = 0;
      for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
        SCOPED_TRACE(testing::Message() << cfg.name << " lag " << lag << " seed " << seed);
        const SimStats st = simulate(cfg, seed, lag);
        if (HasFatalFailure()) return;
        preemptions += st.preemptions;
        completed += st.completed;
        aborted += st.aborted;
      }
      SCOPED_TRACE(testing::Message() << cfg.name << " lag " << lag);
      EXPECT_GT(completed, 0);
      EXPECT_GT(aborted, 0);
      if (cfg.expect_preemption) {
        EXPECT_GT(preemptions, 5u);
      }
      if (!cfg.layout.uses_pages) {
        EXPECT_EQ(preemptions, 0u);  // a running request always holds its slot
      }
      RecordProperty(std::string(cfg.name) + "_lag" + std::to_string(lag) + "_preemptions", std::to_string(preemptions));
    }
  }
}

}  // namespace
}  // namespace deepinfer::sched
