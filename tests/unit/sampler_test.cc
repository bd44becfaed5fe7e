#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace deepinfer::sample {
namespace {

// ---------------------------------------------------------------------------------------------
// helpers

int32_t sample(const std::vector<float>& logits, const SamplingConfig& cfg, int64_t position = 0,
               const std::vector<int32_t>& prompt = {}, const std::vector<int32_t>& output = {},
               const std::vector<int32_t>& banned = {}) {
  SampleInput in;
  in.logits = logits;
  in.prompt_tokens = prompt;
  in.output_tokens = output;
  in.position = position;
  in.banned_tokens = banned;
  return sample_token(in, cfg).token;
}

SamplingConfig greedy() {
  SamplingConfig c;
  c.temperature = 0.0f;
  return c;
}

SamplingConfig tempered(float t, uint64_t seed = 1234) {
  SamplingConfig c;
  c.temperature = t;
  c.seed = seed;
  return c;
}

std::vector<float> random_logits(size_t vocab, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(vocab);
  for (float& x : v) x = dist(gen);
  return v;
}

// log_softmax in double, computed independently of the sampler.
std::vector<double> ref_log_softmax(const std::vector<float>& logits) {
  double m = -INFINITY;
  for (float x : logits) m = std::max(m, static_cast<double>(x));
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x) - m);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - m - std::log(z);
  return out;
}

std::vector<double> ref_softmax(const std::vector<double>& s) {
  double m = *std::max_element(s.begin(), s.end());
  std::vector<double> p(s.size());
  double z = 0.0;
  for (size_t i = 0; i < s.size(); ++i) z += p[i] = std::exp(s[i] - m);
  for (double& x : p) x /= z;
  return p;
}

// Reference sampler without penalties / bans: brute-force filters (full sorts, probability
// domain) and a Gumbel key for every kept token.
int32_t ref_sample(const std::vector<float>& logits, const SamplingConfig& cfg, int64_t position) {
  const size_t n = logits.size();
  std::vector<double> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<double>(logits[i]) / static_cast<double>(cfg.temperature);
  std::vector<double> p = ref_softmax(s);
  std::vector<bool> keep(n, true);
  if (cfg.min_p > 0.0f) {
    const double pmax = *std::max_element(p.begin(), p.end());
    for (size_t i = 0; i < n; ++i)
      if (p[i] < static_cast<double>(cfg.min_p) * pmax) keep[i] = false;
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
  if (cfg.top_k > 0) {
    int kept = 0;
    for (int32_t id : order)
      if (keep[id] && kept++ >= cfg.top_k) keep[id] = false;
  }
  if (cfg.top_p < 1.0f) {
    double z = 0.0;
    for (size_t i = 0; i < n; ++i)
      if (keep[i]) z += p[i];
    double cum = 0.0;
    bool reached = false;
    for (int32_t id : order) {
      if (!keep[id]) continue;
      if (reached) {
        keep[id] = false;
        continue;
      }
      cum += p[id] / z;
      if (cum >= static_cast<double>(cfg.top_p)) reached = true;
    }
  }
  int32_t best = -1;
  double best_key = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    const double u = philox_uniform(cfg.seed, position, static_cast<int32_t>(i));
    const double key = s[i] - std::log(-std::log(u));
    if (best < 0 || key > best_key) {
      best_key = key;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Philox

TEST(Philox, KnownAnswerVectorsRandom123) {
  struct Kat {
    uint32_t ctr[4], key[2], expect[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4] = {};
    philox4x32(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.expect[i]) << "word " << i;
  }
}

TEST(Philox, UniformInOpenIntervalAndDistinct) {
  std::set<double> seen;
  double sum = 0.0;
  int count = 0;
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{0xffffffffffffffffull}, uint64_t{1} << 32}) {
    for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{1} << 32, int64_t{-1}}) {
      for (int32_t tok = 0; tok < 200; ++tok) {
        const double u = philox_uniform(seed, pos, tok);
        ASSERT_GT(u, 0.0);
        ASSERT_LT(u, 1.0);
        EXPECT_TRUE(std::isfinite(std::log(-std::log(u))));
        EXPECT_TRUE(seen.insert(u).second) << "collision at seed " << seed << " pos " << pos << " tok " << tok;
        sum += u;
        ++count;
      }
    }
  }
  EXPECT_NEAR(sum / count, 0.5, 0.02);
  // Each of seed, position and token changes the value (incl. the high halves of seed / position).
  const double base = philox_uniform(42, 7, 3);
  EXPECT_EQ(base, philox_uniform(42, 7, 3));
  EXPECT_NE(base, philox_uniform(43, 7, 3));
  EXPECT_NE(base, philox_uniform(42 + (uint64_t{1} << 32), 7, 3));
  EXPECT_NE(base, philox_uniform(42, 8, 3));
  EXPECT_NE(base, philox_uniform(42, 7 + (int64_t{1} << 32), 3));
  EXPECT_NE(base, philox_uniform(42, 7, 4));
}

// ---------------------------------------------------------------------------------------------
// greedy, determinism

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTie) {
  EXPECT_EQ(sample({0.1f, 2.0f, -1.0f, 1.9f}, greedy()), 1);
  EXPECT_EQ(sample({0.1f, 3.0f, -1.0f, 3.0f, 3.0f}, greedy()), 1);
  EXPECT_EQ(sample(std::vector<float>(10, 0.0f), greedy()), 0);
  EXPECT_EQ(sample({-INFINITY, -INFINITY, -5.0f}, greedy()), 2);
  EXPECT_EQ(sample({NAN, 1.0f, 2.0f}, greedy()), 2);
  // Ties across a banned / penalised token (separate runs of the row) still go to the lower id.
  EXPECT_EQ(sample({0.0f, 3.0f, 0.0f, 3.0f}, greedy(), 0, {}, {}, {2}), 1);
  SamplingConfig tiny = greedy();
  tiny.presence_penalty = 1e-30f;  // 3.0f - 1e-30f == 3.0f: id 0 is patched but unchanged
  EXPECT_EQ(sample({3.0f, 0.0f, 3.0f}, tiny, 0, {}, {0}), 0);
  EXPECT_EQ(sample({0.0f, 3.0f, 3.0f}, tiny, 0, {}, {2}), 1);
  // The seed and filters are irrelevant when greedy.
  SamplingConfig c = greedy();
  c.seed = 99;
  c.top_k = 3;
  c.top_p = 0.1f;
  c.min_p = 0.9f;
  EXPECT_EQ(sample({0.1f, 2.0f, -1.0f, 1.9f}, c, 12345), 1);
}

TEST(Sampler, SameInputsSameTokenEveryCall) {
  const std::vector<float> logits = random_logits(3000, 7, 1.0f);
  SamplingConfig c = tempered(1.0f, 555);
  c.top_p = 0.95f;
  c.num_logprobs = 3;
  for (int64_t pos = 0; pos < 50; ++pos) {
    SampleInput in;
    in.logits = logits;
    in.position = pos;
    const core::SampledToken a = sample_token(in, c);
    for (int rep = 0; rep < 3; ++rep) {
      const core::SampledToken b = sample_token(in, c);
      EXPECT_EQ(a.token, b.token);
      EXPECT_EQ(std::memcmp(&a.logprob, &b.logprob, sizeof(float)), 0);
      ASSERT_EQ(a.top.size(), b.top.size());
      for (size_t i = 0; i < a.top.size(); ++i) {
        EXPECT_EQ(a.top[i].token, b.top[i].token);
        EXPECT_EQ(std::memcmp(&a.top[i].logprob, &b.top[i].logprob, sizeof(float)), 0);
      }
    }
  }
}

TEST(Sampler, ThreadSafeAndBatchInvariant) {
  const std::vector<float> logits = random_logits(5000, 11, 2.0f);
  const SamplingConfig c = tempered(0.8f, 9);
  std::vector<int32_t> expect(64);
  for (int64_t pos = 0; pos < 64; ++pos) expect[pos] = sample(logits, c, pos);
  std::vector<std::vector<int32_t>> got(4, std::vector<int32_t>(64));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      // Each thread walks the positions in a different order.
      for (int64_t i = 0; i < 64; ++i) {
        const int64_t pos = (i * (2 * t + 1)) % 64;
        got[t][pos] = sample(logits, c, pos);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], expect);
}

TEST(Sampler, DifferentSeedsGiveDifferentSamples) {
  const std::vector<float> logits(16, 0.0f);  // uniform: a collision per position has p = 1/16
  int differ = 0;
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < 200; ++pos) {
    const int32_t a = sample(logits, tempered(1.0f, 1), pos);
    const int32_t b = sample(logits, tempered(1.0f, 2), pos);
    differ += a != b;
    seen.insert(a);
  }
  EXPECT_GT(differ, 160);  // expected 187.5
  EXPECT_EQ(seen.size(), 16u);
}

// ---------------------------------------------------------------------------------------------
// distribution

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(Sampler, GumbelDrawMatchesSoftmaxChiSquare) {
  const std::vector<float> logits = {0.5f, -0.3f, 1.2f, 0.0f, -1.0f, 0.8f, 0.2f, -0.5f};
  const float temp = 0.7f;
  std::vector<double> s(logits.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = logits[i] / static_cast<double>(temp);
  const std::vector<double> p = ref_softmax(s);
  const int n = 20000;
  std::vector<int> counts(logits.size(), 0);
  for (int64_t pos = 0; pos < n; ++pos) ++counts[sample(logits, tempered(temp, 2024), pos)];
  for (double pi : p) ASSERT_GT(pi * n, 50.0);
  // df = 7; critical value for p = 1e-4 is 29.877.
  EXPECT_LT(chi_square(counts, p, n), 29.877);
  // The test has power: the untempered softmax (T = 1) must be rejected.
  std::vector<double> s1(logits.begin(), logits.end());
  EXPECT_GT(chi_square(counts, ref_softmax(s1), n), 29.877);
}

TEST(Sampler, FilteredDrawMatchesRenormalisedSoftmax) {
  // top_k = 4 keeps ids {2, 5, 0, 6}; the draw must follow their renormalised softmax.
  const std::vector<float> logits = {0.5f, -0.3f, 1.2f, 0.0f, -1.0f, 0.8f, 0.2f, -0.5f};
  SamplingConfig c = tempered(1.0f, 77);
  c.top_k = 4;
  const std::vector<int32_t> kept = {0, 2, 5, 6};
  std::vector<double> s;
  for (int32_t id : kept) s.push_back(logits[id]);
  const std::vector<double> p = ref_softmax(s);
  const int n = 20000;
  std::vector<int> counts(kept.size(), 0);
  for (int64_t pos = 0; pos < n; ++pos) {
    const int32_t t = sample(logits, c, pos);
    const auto it = std::find(kept.begin(), kept.end(), t);
    ASSERT_NE(it, kept.end()) << t;
    ++counts[it - kept.begin()];
  }
  EXPECT_LT(chi_square(counts, p, n), 21.108);  // df = 3, p = 1e-4
}

TEST(Sampler, PrunedDrawMatchesBruteForceReference) {
  // The Gumbel draw skips tokens that provably cannot win; compare with a brute-force reference
  // that computes every key, with and without filters.
  struct Case {
    float temp;
    int top_k;
    float top_p;
    float min_p;
  };
  const Case cases[] = {{1.0f, 0, 1.0f, 0.0f},  {0.5f, 0, 1.0f, 0.0f},  {2.0f, 0, 1.0f, 0.0f},
                        {30.0f, 0, 1.0f, 0.0f}, {1.0f, 50, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f},
                        {1.0f, 0, 1.0f, 0.05f}, {0.7f, 40, 0.8f, 0.01f}, {1.3f, 1000, 0.97f, 0.0f},
                        {1.0f, 2000, 1.0f, 0.0f}, {0.9f, 3000, 0.95f, 0.0f}, {1.0f, 0, 0.5f, 0.0f}};
  for (uint32_t seed : {1u, 2u}) {
    const std::vector<float> logits = random_logits(4000, seed, 2.5f);
    for (const Case& k : cases) {
      SamplingConfig c = tempered(k.temp, 1000 + seed);
      c.top_k = k.top_k;
      c.top_p = k.top_p;
      c.min_p = k.min_p;
      for (int64_t pos = 0; pos < 40; ++pos)
        ASSERT_EQ(sample(logits, c, pos), ref_sample(logits, c, pos))
            << "T=" << k.temp << " k=" << k.top_k << " p=" << k.top_p << " min_p=" << k.min_p << " pos=" << pos;
    }
  }
}

TEST(Sampler, FullVocabularyMatchesBruteForceReference) {
  const std::vector<float> logits = random_logits(129280, 5, 4.0f);
  SamplingConfig c = tempered(1.0f, 31337);
  for (int64_t pos = 0; pos < 5; ++pos) EXPECT_EQ(sample(logits, c, pos), ref_sample(logits, c, pos));
  c.top_p = 0.9f;
  for (int64_t pos = 0; pos < 5; ++pos) EXPECT_EQ(sample(logits, c, pos), ref_sample(logits, c, pos));
}

// ---------------------------------------------------------------------------------------------
// filters

TEST(Sampler, TopK1EqualsGreedy) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = random_logits(500, seed, 1.0f);
    SamplingConfig c = tempered(1.5f, seed);
    c.top_k = 1;
    const int32_t g = sample(logits, greedy());
    for (int64_t pos = 0; pos < 20; ++pos) EXPECT_EQ(sample(logits, c, pos), g);
  }
  // Tie for the top: top_k = 1 keeps the lower id, like greedy.
  SamplingConfig c = tempered(1.0f);
  c.top_k = 1;
  for (int64_t pos = 0; pos < 20; ++pos) EXPECT_EQ(sample({0.0f, 2.0f, 2.0f, 1.0f}, c, pos), 1);
}

TEST(Sampler, TopK2NeverOutsideTop2) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.9f, 2.8f, 0.0f, 2.95f};  // top 2: ids 1, 5
  SamplingConfig c = tempered(5.0f, 8);  // flat: without the filter every token would show up
  c.top_k = 2;
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < 2000; ++pos) seen.insert(sample(logits, c, pos));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 5}));
  c.top_k = 0;
  seen.clear();
  for (int64_t pos = 0; pos < 2000; ++pos) seen.insert(sample(logits, c, pos));
  EXPECT_EQ(seen.size(), logits.size());
}

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

std::set<int32_t> support(const std::vector<float>& logits, const SamplingConfig& c, int draws = 3000) {
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < draws; ++pos) seen.insert(sample(logits, c, pos));
  return seen;
}

TEST(Sampler, TopPKeepsSmallestPrefix) {
  const std::vector<float> logits = log_probs({0.05, 0.5, 0.15, 0.3});  // order: 1, 3, 2, 0
  SamplingConfig c = tempered(1.0f, 3);
  c.top_p = 0.01f;
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1}));
  c.top_p = 0.0f;  // still keeps one token
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1}));
  c.top_p = 0.49f;
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1}));
  c.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1, 3}));
  c.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1, 2, 3}));
  c.top_p = 1.0f;
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(Sampler, TopPOnRenormalisedTopK) {
  // After top_k = 2 the survivors {1: 0.5, 3: 0.3} renormalise to {0.625, 0.375}.
  const std::vector<float> logits = log_probs({0.05, 0.5, 0.15, 0.3});
  SamplingConfig c = tempered(1.0f, 4);
  c.top_k = 2;
  c.top_p = 0.6f;  // 0.6 <= 0.625: only id 1
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1}));
  c.top_p = 0.65f;  // 0.625 < 0.65: both
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1, 3}));
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  const std::vector<float> logits = log_probs({0.05, 0.5, 0.15, 0.3});
  SamplingConfig c = tempered(1.0f, 5);
  c.min_p = 0.2f;  // threshold 0.1: drops id 0
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1, 2, 3}));
  c.min_p = 0.5f;  // threshold 0.25: keeps 1, 3
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1, 3}));
  c.min_p = 0.7f;  // threshold 0.35
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1}));
  c.min_p = 1.0f;
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1}));
  // min_p is on the tempered distribution: T = 2 flattens to sqrt(p), ratio 0.05 -> 0.316.
  c = tempered(2.0f, 5);
  c.min_p = 0.3f;
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{0, 1, 2, 3}));
  c.min_p = 0.33f;
  EXPECT_EQ(support(logits, c), (std::set<int32_t>{1, 2, 3}));
}

TEST(Sampler, TinyTemperatureBehavesLikeGreedy) {
  const std::vector<float> logits = {1.0f, 0.2f, 3.5f, 3.0f, -2.0f};
  for (float t : {1e-3f, 1e-6f, 1e-30f}) {
    for (int64_t pos = 0; pos < 500; ++pos) ASSERT_EQ(sample(logits, tempered(t, 17), pos), 2) << t;
  }
}

// ---------------------------------------------------------------------------------------------
// penalties

TEST(Sampler, RepetitionPenaltyByHand) {
  SamplingConfig c = greedy();
  c.repetition_penalty = 2.0f;
  // Positive logits are divided: token 0 (prompt) 2.0 -> 1.0 < 1.5.
  EXPECT_EQ(sample({2.0f, -1.0f, 1.5f, 0.5f}, greedy(), 0, {0}, {1}), 0);
  EXPECT_EQ(sample({2.0f, -1.0f, 1.5f, 0.5f}, c, 0, {0}, {1}), 2);
  // ... output tokens count too: 2.0 -> 1.0 < 1.5.
  EXPECT_EQ(sample({2.0f, -1.0f, 1.5f, 0.5f}, c, 0, {}, {0}), 2);
  // Negative logits are multiplied: -0.5 -> -1.0 < -0.8 (dividing would give -0.25 and keep 0).
  EXPECT_EQ(sample({-0.5f, -0.8f, -3.0f}, c, 0, {0}, {}), 1);
  // Applied once per distinct token, however often it occurs: 3.0 -> 1.5 > 1.4.
  EXPECT_EQ(sample({3.0f, 1.4f}, c, 0, {0, 0}, {0, 0, 0}), 0);
  EXPECT_EQ(sample({3.0f, 1.6f}, c, 0, {0, 0}, {0, 0, 0}), 1);
  // Penalty < 1 encourages repeats: 1.0 / 0.5 = 2.0 > 1.9.
  c.repetition_penalty = 0.5f;
  EXPECT_EQ(sample({1.0f, 1.9f}, c, 0, {0}, {}), 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesByHand) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.9f};
  const std::vector<int32_t> out = {0, 2, 0};  // counts: id 0 x2, id 2 x1
  SamplingConfig c = greedy();
  c.frequency_penalty = 0.4f;  // 2.0 - 0.8 = 1.2 > 1.0
  EXPECT_EQ(sample(logits, c, 0, {}, out), 0);
  c.frequency_penalty = 0.6f;  // 2.0 - 1.2 = 0.8 < 1.0
  EXPECT_EQ(sample(logits, c, 0, {}, out), 1);
  c.frequency_penalty = 0.2f;
  c.presence_penalty = 0.5f;  // 2.0 - 0.4 - 0.5 = 1.1 > 1.0
  EXPECT_EQ(sample(logits, c, 0, {}, out), 0);
  c.presence_penalty = 0.7f;  // 2.0 - 0.4 - 0.7 = 0.9 < 1.0
  EXPECT_EQ(sample(logits, c, 0, {}, out), 1);
  // Presence counts once: with presence alone 2.0 - 1.05 = 0.95 < 1.0 whatever the count.
  SamplingConfig p = greedy();
  p.presence_penalty = 1.05f;
  EXPECT_EQ(sample(logits, p, 0, {}, {0}), 1);
  p.presence_penalty = 0.95f;  // 1.05 > 1.0; a per-occurrence rule would give 0.1 with out
  EXPECT_EQ(sample(logits, p, 0, {}, out), 0);
  // Prompt tokens do not count for presence / frequency.
  c.presence_penalty = 5.0f;
  c.frequency_penalty = 5.0f;
  EXPECT_EQ(sample(logits, c, 0, {0, 0, 0}, {}), 0);
  // Negative penalties reward: 0.9 + 0.2 = 1.1 beats 1.0 (but not 2.0): ban id 0 to see it.
  SamplingConfig r = greedy();
  r.presence_penalty = -0.2f;
  EXPECT_EQ(sample(logits, r, 0, {}, {2}, {0}), 2);
}

TEST(Sampler, PenaltiesApplyBeforeTemperatureAndFilters) {
  // Repetition penalty on id 0 (2.0 -> 0.5 with r = 4) makes id 1 the only top_k = 1 survivor.
  SamplingConfig c = tempered(0.9f, 6);
  c.top_k = 1;
  c.repetition_penalty = 4.0f;
  for (int64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(sample({2.0f, 1.0f, 0.0f}, c, pos, {0}), 1);
}

TEST(Sampler, PenaltiesAndBansMatchDenseReference) {
  // The sampler patches only the penalised tokens and skips banned ones without copying the row;
  // compare with a dense reference: penalise every token by the rules, banned -> -inf.
  const size_t vocab = 3000;
  const std::vector<float> logits = random_logits(vocab, 42, 2.0f);
  std::mt19937 gen(43);
  std::vector<int32_t> prompt(400), output(150), banned(60);
  for (auto& t : prompt) t = static_cast<int32_t>(gen() % vocab);
  for (auto& t : output) t = static_cast<int32_t>(gen() % 200);  // repeats
  for (auto& t : banned) t = static_cast<int32_t>(gen() % vocab);
  banned.push_back(0);
  banned.push_back(static_cast<int32_t>(vocab - 1));

  SamplingConfig c = greedy();
  c.repetition_penalty = 1.3f;
  c.presence_penalty = 0.4f;
  c.frequency_penalty = 0.25f;
  std::vector<float> dense = logits;
  std::vector<int> count(vocab, 0);
  std::vector<bool> seen(vocab, false);
  for (int32_t t : prompt) seen[t] = true;
  for (int32_t t : output) {
    seen[t] = true;
    ++count[t];
  }
  for (size_t v = 0; v < vocab; ++v) {
    float x = dense[v];
    if (seen[v]) x = x > 0.0f ? x / c.repetition_penalty : x * c.repetition_penalty;
    x = x - c.frequency_penalty * static_cast<float>(count[v]);
    if (count[v] > 0) x = x - c.presence_penalty;
    dense[v] = x;
  }
  for (int32_t t : banned) dense[t] = -INFINITY;
  const int32_t expect = static_cast<int32_t>(std::max_element(dense.begin(), dense.end()) - dense.begin());
  EXPECT_EQ(sample(logits, c, 0, prompt, output, banned), expect);

  for (const float top_p : {1.0f, 0.9f}) {
    c.temperature = 0.8f;
    c.top_p = top_p;
    c.seed = 5;
    for (int64_t pos = 0; pos < 40; ++pos)
      ASSERT_EQ(sample(logits, c, pos, prompt, output, banned), ref_sample(dense, c, pos)) << pos;
  }
}

// ---------------------------------------------------------------------------------------------
// banned tokens

TEST(Sampler, BannedTokensNeverChosen) {
  const std::vector<float> logits = {1.0f, 5.0f, 4.9f, 0.0f};
  EXPECT_EQ(sample(logits, greedy(), 0, {}, {}, {1}), 2);
  EXPECT_EQ(sample(logits, greedy(), 0, {}, {}, {1, 2, 2, 1}), 0);
  // Out-of-range ids are ignored.
  EXPECT_EQ(sample(logits, greedy(), 0, {}, {}, {-1, 4, 1000}), 1);
  // Banning everything would leave nothing: the ban is ignored.
  EXPECT_EQ(sample(logits, greedy(), 0, {}, {}, {0, 1, 2, 3}), 1);

  // Sampling: a flat distribution would hit every id; the banned ones never appear, even when
  // they are the best, with any filter.
  const std::vector<float> flat = {0.0f, 0.1f, 0.0f, -0.1f, 0.05f, 0.0f};
  SamplingConfig c = tempered(1.0f, 21);
  EXPECT_EQ(support(flat, c), (std::set<int32_t>{0, 1, 2, 3, 4, 5}));
  const std::vector<int32_t> banned = {1, 4};
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < 3000; ++pos) seen.insert(sample(flat, c, pos, {}, {}, banned));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 2, 3, 5}));
  c.top_k = 1;  // the best non-banned token: id 0 (ties with 2, 5 by id)
  for (int64_t pos = 0; pos < 100; ++pos) EXPECT_EQ(sample(flat, c, pos, {}, {}, banned), 0);
}

// ---------------------------------------------------------------------------------------------
// logprobs

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  const std::vector<float> logits = random_logits(1000, 99, 3.0f);
  const std::vector<double> ref = ref_log_softmax(logits);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ref[a] > ref[b] || (ref[a] == ref[b] && a < b); });

  SamplingConfig c = tempered(0.6f, 3);
  c.num_logprobs = 7;
  c.repetition_penalty = 1.3f;  // processing must not leak into the reported logprobs
  c.top_p = 0.9f;
  const std::vector<int32_t> prompt = {order[0], 5, 6};
  for (int64_t pos = 0; pos < 30; ++pos) {
    SampleInput in;
    in.logits = logits;
    in.prompt_tokens = prompt;
    in.position = pos;
    const core::SampledToken r = sample_token(in, c);
    EXPECT_EQ(r.id, 0u);
    EXPECT_NEAR(r.logprob, ref[r.token], 1e-5);
    ASSERT_EQ(r.top.size(), 7u);
    for (size_t i = 0; i < r.top.size(); ++i) {
      EXPECT_EQ(r.top[i].token, order[i]);
      EXPECT_NEAR(r.top[i].logprob, ref[order[i]], 1e-5);
      if (i > 0) {
        EXPECT_GE(r.top[i - 1].logprob, r.top[i].logprob);
      }
    }
  }
  // Greedy too; no top list unless asked.
  SampleInput in;
  in.logits = logits;
  const core::SampledToken g = sample_token(in, greedy());
  EXPECT_EQ(g.token, order[0]);
  EXPECT_NEAR(g.logprob, ref[order[0]], 1e-5);
  EXPECT_TRUE(g.top.empty());
}

TEST(Sampler, TopLogprobsTiesByIdAndClamped) {
  const std::vector<float> logits = {1.0f, 2.0f, 1.0f, 2.0f, 0.0f};
  SamplingConfig c = greedy();
  c.num_logprobs = 4;
  SampleInput in;
  in.logits = logits;
  core::SampledToken r = sample_token(in, c);
  ASSERT_EQ(r.top.size(), 4u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 3);
  EXPECT_EQ(r.top[2].token, 0);
  EXPECT_EQ(r.top[3].token, 2);
  EXPECT_EQ(r.top[0].logprob, r.top[1].logprob);
  c.num_logprobs = 100;  // more than the vocabulary
  r = sample_token(in, c);
  ASSERT_EQ(r.top.size(), 5u);
  EXPECT_EQ(r.top[4].token, 4);
  double total = 0.0;
  for (const auto& t : r.top) total += std::exp(static_cast<double>(t.logprob));
  EXPECT_NEAR(total, 1.0, 1e-6);
}

}  // namespace
}  // namespace deepinfer::sample
