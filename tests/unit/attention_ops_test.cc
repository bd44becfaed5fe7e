// CpuBackend attention-side ops: sink_attention, compress_pool, indexer_scores (plus rms_norm and
// swiglu_expert), against hand computations and double-precision references (docs §4.5-4.8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::backend {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// docs §4.5: o = sum_j exp(s_j - m) k_j / (sum_j exp(s_j - m) + exp(sink - m)), m = max_j s_j.
std::vector<double> ref_sink_attention(const float* q, int d, const std::vector<const float*>& rows, double sink,
                                       double scale) {
  std::vector<double> s(rows.size());
  double m = -INFINITY;
  for (size_t j = 0; j < rows.size(); ++j) {
    double dp = 0;
    for (int i = 0; i < d; ++i) dp += static_cast<double>(q[i]) * rows[j][i];
    s[j] = scale * dp;
    m = std::max(m, s[j]);
  }
  std::vector<double> o(d, 0.0);
  if (rows.empty()) return o;
  double denom = std::exp(sink - m);
  for (double v : s) denom += std::exp(v - m);
  for (size_t j = 0; j < rows.size(); ++j)
    for (int i = 0; i < d; ++i) o[i] += std::exp(s[j] - m) / denom * rows[j][i];
  return o;
}

TEST(SinkAttention, HandValuesSinkOnlyInDenominator) {
  auto be = make_cpu_backend();
  // q = 0: every score is 0; sink 0 adds exp(0) = 1 to a denominator of 3 -> each row weighs 1/4.
  const float k0[3] = {4, 0, 0}, k1[3] = {0, 8, 0}, k2[3] = {0, 0, -4};
  const std::vector<const float*> rows = {k0, k1, k2};
  const std::vector<int> begin = {0, 3};
  const float q[3] = {0, 0, 0};
  const float sink[1] = {0.0f};
  float out[3];
  be->sink_attention(q, 1, 1, 3, rows, begin, sink, 0.5f, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], -1.0f);
}

TEST(SinkAttention, IdenticalRowsAreScaledByOneMinusSinkWeight) {
  auto be = make_cpu_backend();
  // All rows equal v: o = v * Z / (Z + exp(sink - m)); the sink contributes no value.
  const float v[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  const std::vector<const float*> rows = {v, v, v, v, v};
  const std::vector<int> begin = {0, 5};
  const float q[4] = {0.3f, 0.1f, -0.2f, 0.05f};
  const float scale = 0.7f;
  double s = 0;
  for (int i = 0; i < 4; ++i) s += static_cast<double>(q[i]) * v[i];
  s *= scale;
  for (float sk : {-30.0f, -1.0f, 0.0f, 2.0f, 9.0f}) {
    const float sink[1] = {sk};
    float out[4];
    be->sink_attention(q, 1, 1, 4, rows, begin, sink, scale, out);
    const double frac = 5.0 / (5.0 + std::exp(sk - s));  // m = s
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], v[i] * frac, 1e-6 * std::fabs(v[i]) + 1e-7) << "sink " << sk;
  }
}

TEST(SinkAttention, MatchesReferenceMultiQueryMultiHead) {
  auto be = make_cpu_backend();
  std::mt19937 rng(21);
  const int M = 3, H = 2, d = 5, R = 7;
  const auto kv = random_vec(R * d, rng, -2.0f, 2.0f);
  const auto q = random_vec(M * H * d, rng, -2.0f, 2.0f);
  const float sinks[2] = {0.4f, -1.5f};
  const float scale = 1.0f / std::sqrt(5.0f);
  // Query 0: rows {0,1,2}; query 1: rows {6,3} (any order, any subset); query 2: none.
  const std::vector<const float*> rows = {&kv[0], &kv[d], &kv[2 * d], &kv[6 * d], &kv[3 * d]};
  const std::vector<int> begin = {0, 3, 5, 5};
  std::vector<float> out(M * H * d, NAN);
  be->sink_attention(q.data(), M, H, d, rows, begin, sinks, scale, out.data());
  for (int m = 0; m < M; ++m)
    for (int h = 0; h < H; ++h) {
      std::vector<const float*> sel(rows.begin() + begin[m], rows.begin() + begin[m + 1]);
      const auto want = ref_sink_attention(&q[(m * H + h) * d], d, sel, sinks[h], scale);
      for (int i = 0; i < d; ++i) EXPECT_NEAR(out[(m * H + h) * d + i], want[i], 2e-6) << m << " " << h << " " << i;
    }
  // No rows: output is exactly zero (empty numerator).
  for (int i = 0; i < H * d; ++i) EXPECT_EQ(out[2 * H * d + i], 0.0f);
  // A single-query call on query 1 gives the same bits (batch invariance).
  std::vector<const float*> rows1(rows.begin() + 3, rows.begin() + 5);
  std::vector<float> out1(H * d);
  be->sink_attention(&q[1 * H * d], 1, H, d, rows1, {0, 2}, sinks, scale, out1.data());
  EXPECT_EQ(std::memcmp(out1.data(), &out[1 * H * d], out1.size() * sizeof(float)), 0);
}

TEST(SinkAttention, VeryNegativeSinkIsPlainSoftmax) {
  auto be = make_cpu_backend();
  const float k0[2] = {1, 0}, k1[2] = {0, 1};
  const std::vector<const float*> rows = {k0, k1};
  const float q[2] = {std::log(3.0f), 0};  // scores ln3 and 0 at scale 1 -> weights 3/4, 1/4
  const float sink[1] = {-1e4f};
  float out[2];
  be->sink_attention(q, 1, 1, 2, rows, {0, 2}, sink, 1.0f, out);
  EXPECT_NEAR(out[0], 0.75f, 1e-6);
  EXPECT_NEAR(out[1], 0.25f, 1e-6);
}

// out[r, c] = sum over non-null slots of softmax_s(gate[s][c]) * kv[s][c].
double ref_pool(const std::vector<const float*>& kv, const std::vector<const float*>& g, int r, int S, int c) {
  double mx = -INFINITY;
  for (int s = 0; s < S; ++s)
    if (g[r * S + s]) mx = std::max(mx, static_cast<double>(g[r * S + s][c]));
  double z = 0, acc = 0;
  for (int s = 0; s < S; ++s)
    if (g[r * S + s]) z += std::exp(g[r * S + s][c] - mx);
  for (int s = 0; s < S; ++s)
    if (g[r * S + s]) acc += std::exp(g[r * S + s][c] - mx) / z * kv[r * S + s][c];
  return acc;
}

TEST(CompressPool, HandValuesWithEmptySlot) {
  auto be = make_cpu_backend();
  // One row, 3 slots, width 2. Slot 0 is empty (like CSA window w = 0's A-half).
  const float kv1[2] = {1, 2}, g1[2] = {0, std::log(3.0f)};
  const float kv2[2] = {3, 4}, g2[2] = {0, 0};
  const std::vector<const float*> kv = {nullptr, kv1, kv2};
  const std::vector<const float*> g = {nullptr, g1, g2};
  float out[2];
  be->compress_pool(kv, g, 1, 3, 2, out);
  EXPECT_NEAR(out[0], 0.5 * 1 + 0.5 * 3, 1e-6);       // equal gates over the two real slots
  EXPECT_NEAR(out[1], 0.75 * 2 + 0.25 * 4, 1e-6);     // gates ln3, 0 -> 3/4, 1/4
}

TEST(CompressPool, EmptySlotGetsZeroWeightEvenIfItWouldDominate) {
  auto be = make_cpu_backend();
  std::mt19937 rng(8);
  const int rows = 3, S = 8, W = 6;
  const auto kvbuf = random_vec(rows * S * W, rng, -3.0f, 3.0f);
  const auto gbuf = random_vec(rows * S * W, rng, -2.0f, 2.0f);
  std::vector<const float*> kv(rows * S), g(rows * S);
  for (int i = 0; i < rows * S; ++i) {
    kv[i] = &kvbuf[i * W];
    g[i] = &gbuf[i * W];
  }
  // Row 0: first 4 slots empty; row 2: slot 5 empty.
  for (int s = 0; s < 4; ++s) kv[s] = g[s] = nullptr;
  kv[2 * S + 5] = g[2 * S + 5] = nullptr;
  std::vector<float> out(rows * W);
  be->compress_pool(kv, g, rows, S, W, out.data());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < W; ++c) EXPECT_NEAR(out[r * W + c], ref_pool(kv, g, r, S, c), 2e-6) << r << " " << c;
  // Premise check: had slot 5 of row 2 been present with a huge gate, the result would differ.
  std::vector<float> big_gate(W, 50.0f), big_kv(W, 1000.0f);
  auto kv2 = kv, g2 = g;
  kv2[2 * S + 5] = big_kv.data();
  g2[2 * S + 5] = big_gate.data();
  std::vector<float> out2(rows * W);
  be->compress_pool(kv2, g2, rows, S, W, out2.data());
  for (int c = 0; c < W; ++c) EXPECT_NEAR(out2[2 * W + c], 1000.0f, 1e-2);
}

TEST(IndexerScores, HandValueAndRelu) {
  auto be = make_cpu_backend();
  // heads q: [1,0,0,0], [0,1,0,0], [-1,0,0,0]; key [2,-3,0,0]: dots 2, -3, -2 -> relu 2, 0, 0.
  const float q[12] = {1, 0, 0, 0, 0, 1, 0, 0, -1, 0, 0, 0};
  const float w[3] = {1.0f, 10.0f, 100.0f};
  const float keys[8] = {2, -3, 0, 0, -1, 1, 5, 0};  // key 1: dots -1, 1, 1 -> 0 + 10 + 100
  const int nk[1] = {2};
  float score[2];
  be->indexer_scores(q, w, 1, 3, 4, keys, nk, 0.5f, score, 2);
  EXPECT_EQ(score[0], 1.0f);   // 1 * 2 * 0.5
  EXPECT_EQ(score[1], 55.0f);  // (10 * 1 + 100 * 1) * 0.5
}

TEST(IndexerScores, MatchesReferenceAndRespectsNumKeysAndStride) {
  auto be = make_cpu_backend();
  std::mt19937 rng(13);
  const int M = 3, H = 4, dim = 8, K = 6, stride = 9;
  const auto q = random_vec(M * H * dim, rng);
  const auto wts = random_vec(M * H, rng, -1.0f, 2.0f);  // negative head weights are allowed
  const auto keys = random_vec(K * dim, rng);
  const int nk[M] = {2, 6, 0};
  const float scale = 0.125f;
  std::vector<float> score(M * stride, -777.0f);
  be->indexer_scores(q.data(), wts.data(), M, H, dim, keys.data(), nk, scale, score.data(), stride);
  for (int m = 0; m < M; ++m)
    for (int w = 0; w < stride; ++w) {
      if (w >= nk[m]) {
        EXPECT_EQ(score[m * stride + w], -777.0f) << "untouched beyond num_keys: m=" << m << " w=" << w;
        continue;
      }
      double want = 0;
      for (int h = 0; h < H; ++h) {
        double dp = 0;
        for (int i = 0; i < dim; ++i) dp += static_cast<double>(q[(m * H + h) * dim + i]) * keys[w * dim + i];
        want += wts[m * H + h] * std::max(dp, 0.0) * scale;
      }
      EXPECT_NEAR(score[m * stride + w], want, 1e-6) << m << " " << w;
    }
}

TEST(RmsNorm, WithAndWithoutWeight) {
  auto be = make_cpu_backend();
  // x = [3, 4]: mean(x^2) = 12.5 -> rsqrt(12.5 + eps).
  const float x[4] = {3, 4, -1, 1};
  const float wgt[2] = {2.0f, 0.5f};
  float y[4], yw[4];
  be->rms_norm(x, 2, 2, nullptr, 0.0f, y);
  be->rms_norm(x, 2, 2, wgt, 0.0f, yw);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 4 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[2], -1.0, 1e-6);
  EXPECT_NEAR(y[3], 1.0, 1e-6);
  EXPECT_NEAR(yw[0], 2 * 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(yw[1], 0.5 * 4 / std::sqrt(12.5), 1e-6);
  // eps matters for tiny rows: x = [1e-4, 0], eps 1e-6 -> 1e-4 / sqrt(5e-9 + 1e-6).
  const float t[2] = {1e-4f, 0};
  float yt[2];
  be->rms_norm(t, 1, 2, nullptr, 1e-6f, yt);
  EXPECT_NEAR(yt[0], 1e-4 / std::sqrt(5e-9 + 1e-6), 1e-6);
}

TEST(SwigluExpert, ClampsGateAboveAndUpBothWays) {
  auto be = make_cpu_backend();
  // hidden 2 -> inter 3 -> hidden 2, chosen so that gate/up cross the limit.
  model::ExpertWeights e;
  e.w1 = {{1, 0, 0, 1, -3, 0}, 3, 2};  // gate = [x0, x1, -3 x0]
  e.w3 = {{0, 1, 1, 0, 2, 2}, 3, 2};   // up = [x1, x0, 2 x0 + 2 x1]
  e.w2 = {{1, 0, 0, 0, 1, 1}, 2, 3};   // y = [h0, h1 + h2]
  const float limit = 1.5f;
  const float x[2] = {2.0f, -4.0f};
  float y[2];
  be->swiglu_expert(x, 1, e, limit, y);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  const double g[3] = {std::min(2.0, 1.5), std::min(-4.0, 1.5), std::min(-6.0, 1.5)};
  const double u[3] = {std::clamp(-4.0, -1.5, 1.5), std::clamp(2.0, -1.5, 1.5), std::clamp(-4.0, -1.5, 1.5)};
  const double h[3] = {silu(g[0]) * u[0], silu(g[1]) * u[1], silu(g[2]) * u[2]};
  EXPECT_NEAR(y[0], h[0], 1e-6);
  EXPECT_NEAR(y[1], h[1] + h[2], 1e-6);
}

}  // namespace
}  // namespace deepinfer::backend
