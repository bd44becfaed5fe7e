// mHC hyper-connections on the CPU backend (hc_pre / hc_post / hc_head) against a straightforward
// double-precision implementation of docs/deepseek_v4.md §4.2-4.3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::backend {
namespace {

double sigm(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct RefMix {
  std::vector<double> pre, post, comb, collapsed;  // comb [hc][hc], row j = input stream j
};

// One token. X is [hc, D].
RefMix ref_hc_pre(const float* X, int hc, int D, const model::HyperConnWeights& w, int iters, double hc_eps,
                  double norm_eps) {
  const int width = hc * D, nmix = (2 + hc) * hc;
  double ss = 0;
  for (int c = 0; c < width; ++c) ss += static_cast<double>(X[c]) * X[c];
  const double rs = 1.0 / std::sqrt(ss / width + norm_eps);
  std::vector<double> mix(nmix, 0.0);
  for (int i = 0; i < nmix; ++i)
    for (int c = 0; c < width; ++c) mix[i] += static_cast<double>(w.fn.data[i * width + c]) * (X[c] * rs);
  RefMix r;
  r.pre.resize(hc);
  r.post.resize(hc);
  r.comb.resize(hc * hc);
  for (int i = 0; i < hc; ++i) r.pre[i] = sigm(mix[i] * w.scale[0] + w.base[i]) + hc_eps;
  for (int i = 0; i < hc; ++i) r.post[i] = 2.0 * sigm(mix[hc + i] * w.scale[1] + w.base[hc + i]);
  auto& C = r.comb;
  for (int j = 0; j < hc; ++j) {
    double mx = -INFINITY, sum = 0;
    for (int k = 0; k < hc; ++k) {
      C[j * hc + k] = mix[2 * hc + j * hc + k] * w.scale[2] + w.base[2 * hc + j * hc + k];
      mx = std::max(mx, C[j * hc + k]);
    }
    for (int k = 0; k < hc; ++k) sum += std::exp(C[j * hc + k] - mx);
    for (int k = 0; k < hc; ++k) C[j * hc + k] = std::exp(C[j * hc + k] - mx) / sum + hc_eps;
  }
  auto cols = [&] {
    for (int k = 0; k < hc; ++k) {
      double s = 0;
      for (int j = 0; j < hc; ++j) s += C[j * hc + k];
      for (int j = 0; j < hc; ++j) C[j * hc + k] /= s + hc_eps;
    }
  };
  auto rows = [&] {
    for (int j = 0; j < hc; ++j) {
      double s = 0;
      for (int k = 0; k < hc; ++k) s += C[j * hc + k];
      for (int k = 0; k < hc; ++k) C[j * hc + k] /= s + hc_eps;
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    rows();
    cols();
  }
  r.collapsed.assign(D, 0.0);
  for (int d = 0; d < D; ++d)
    for (int i = 0; i < hc; ++i) r.collapsed[d] += r.pre[i] * X[i * D + d];
  return r;
}

model::HyperConnWeights random_weights(int hc, int D, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  model::HyperConnWeights w;
  const int nmix = (2 + hc) * hc, width = hc * D;
  w.fn.rows = nmix;
  w.fn.cols = width;
  w.fn.data.resize(static_cast<size_t>(nmix) * width);
  for (auto& v : w.fn.data) v = u(rng) * 0.5f;
  w.base.resize(nmix);
  for (auto& v : w.base) v = u(rng);
  w.scale = {0.7f, -1.3f, 2.5f};  // distinct per group, so a swapped scale index shows
  return w;
}

void check_hc_pre(int hc, int D, int M, int iters, uint32_t seed, float scale2 = 2.5f) {
  SCOPED_TRACE("hc=" + std::to_string(hc) + " D=" + std::to_string(D) + " M=" + std::to_string(M) +
               " iters=" + std::to_string(iters));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto w = random_weights(hc, D, rng);
  w.scale[2] = scale2;
  std::vector<float> X(static_cast<size_t>(M) * hc * D);
  for (auto& v : X) v = u(rng);
  const float hc_eps = 1e-6f, norm_eps = 1e-6f;
  auto be = make_cpu_backend();
  std::vector<float> collapsed(static_cast<size_t>(M) * D);
  HcMix mix;
  be->hc_pre(X.data(), M, hc, D, w, iters, hc_eps, norm_eps, collapsed.data(), &mix);
  ASSERT_EQ(mix.post.size(), static_cast<size_t>(M) * hc);
  ASSERT_EQ(mix.comb.size(), static_cast<size_t>(M) * hc * hc);
  for (int m = 0; m < M; ++m) {
    const RefMix r = ref_hc_pre(X.data() + static_cast<size_t>(m) * hc * D, hc, D, w, iters, hc_eps, norm_eps);
    for (int i = 0; i < hc; ++i) EXPECT_NEAR(mix.post[m * hc + i], r.post[i], 2e-6) << "post m=" << m << " i=" << i;
    for (int j = 0; j < hc; ++j)
      for (int k = 0; k < hc; ++k)
        EXPECT_NEAR(mix.comb[(m * hc + j) * hc + k], r.comb[j * hc + k], 2e-6) << "comb m=" << m << " j=" << j << " k=" << k;
    for (int d = 0; d < D; ++d) EXPECT_NEAR(collapsed[m * D + d], r.collapsed[d], 1e-5) << "collapsed m=" << m << " d=" << d;
    if (iters >= 100) {
      // Sinkhorn output converges to a doubly stochastic matrix (column sums are exact after the
      // last column pass, row sums converge; 20 iterations of sharp inputs can leave ~1e-2 off).
      for (int j = 0; j < hc; ++j) {
        double rs = 0, cs = 0;
        for (int k = 0; k < hc; ++k) {
          rs += mix.comb[(m * hc + j) * hc + k];
          cs += mix.comb[(m * hc + k) * hc + j];
          EXPECT_GT(mix.comb[(m * hc + j) * hc + k], 0.0f);
        }
        EXPECT_NEAR(rs, 1.0, 1e-4) << "row " << j;
        EXPECT_NEAR(cs, 1.0, 1e-5) << "col " << j;
      }
    }
  }
}

TEST(HcPre, MatchesReferenceHc4) { check_hc_pre(4, 8, 3, 20, 1); }
TEST(HcPre, MatchesReferenceHc2) { check_hc_pre(2, 5, 2, 20, 2); }
TEST(HcPre, ConvergesToDoublyStochastic) {
  // Moderate logits (sharp ones leave near-zero entries and converge slowly).
  check_hc_pre(4, 8, 3, 100, 1, 0.5f);
  check_hc_pre(2, 5, 2, 100, 2, 0.5f);
}
TEST(HcPre, IterationCountIsHonoured) {
  // iters = 1: softmax rows + eps, then a single column normalisation (rows not yet normalised).
  check_hc_pre(4, 6, 2, 1, 3);
  check_hc_pre(4, 6, 2, 2, 3);
  check_hc_pre(4, 6, 2, 3, 3);
}

TEST(HcPre, SinkhornAfterOneIterationIsColumnStochasticOnly) {
  std::mt19937 rng(5);
  auto w = random_weights(4, 4, rng);
  w.scale[2] = 6.0f;  // sharp row softmaxes, so row sums after one column pass are far from 1
  std::vector<float> X(16);
  for (size_t i = 0; i < X.size(); ++i) X[i] = std::sin(1.7 * i + 0.3);
  auto be = make_cpu_backend();
  std::vector<float> collapsed(4);
  HcMix mix;
  be->hc_pre(X.data(), 1, 4, 4, w, 1, 1e-6f, 1e-6f, collapsed.data(), &mix);
  double max_row_dev = 0;
  for (int k = 0; k < 4; ++k) {
    double cs = 0, rs = 0;
    for (int j = 0; j < 4; ++j) {
      cs += mix.comb[j * 4 + k];
      rs += mix.comb[k * 4 + j];
    }
    EXPECT_NEAR(cs, 1.0, 1e-5);
    max_row_dev = std::max(max_row_dev, std::fabs(rs - 1.0));
  }
  EXPECT_GT(max_row_dev, 1e-2) << "test premise: one column pass leaves rows unnormalised";
}

TEST(HcPre, PreWeightsIncludeHcEps) {
  // With pre logits pushed to -40 the sigmoid is ~4e-18, so pre_i is hc_eps to 1e-11 relative and
  // collapsed = hc_eps * sum_i X_i.
  std::mt19937 rng(17);
  const int hc = 4, D = 3;
  auto w = random_weights(hc, D, rng);
  for (int i = 0; i < hc; ++i) w.base[i] = -40.0f;
  std::vector<float> X(hc * D);
  for (size_t i = 0; i < X.size(); ++i) X[i] = 1.0f + static_cast<float>(i);
  auto be = make_cpu_backend();
  std::vector<float> collapsed(D);
  HcMix mix;
  be->hc_pre(X.data(), 1, hc, D, w, 20, 1e-6f, 1e-6f, collapsed.data(), &mix);
  for (int d = 0; d < D; ++d) {
    double want = 0;
    for (int i = 0; i < hc; ++i) want += 1e-6 * X[i * D + d];
    EXPECT_NEAR(collapsed[d], want, 1e-5 * want) << d;
  }
}

TEST(HcPost, UsesCombTransposedHandValues) {
  auto be = make_cpu_backend();
  const int hc = 2, D = 3;
  HcMix mix;
  mix.post = {0.5f, 2.0f};
  mix.comb = {1.0f, 2.0f,   // comb[0][0], comb[0][1]: input stream 0 -> outputs 0, 1
              3.0f, 4.0f};  // comb[1][0], comb[1][1]: input stream 1 -> outputs 0, 1
  std::vector<float> X = {1, 0, -1,     // X0
                          10, 20, 30};  // X1
  const float o[3] = {1, 2, 3};
  be->hc_post(X.data(), o, 1, hc, D, mix);
  // out0 = 0.5*o + 1*X0 + 3*X1 ; out1 = 2*o + 2*X0 + 4*X1
  const std::vector<float> want = {31.5f, 61.0f, 90.5f, 44.0f, 84.0f, 124.0f};
  EXPECT_EQ(X, want);
}

TEST(HcPost, RandomHc4MultiToken) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int hc = 4, D = 5, M = 3;
  HcMix mix;
  mix.post.resize(M * hc);
  mix.comb.resize(M * hc * hc);
  for (auto& v : mix.post) v = u(rng);
  for (auto& v : mix.comb) v = u(rng);
  std::vector<float> X(M * hc * D), o(M * D);
  for (auto& v : X) v = u(rng);
  for (auto& v : o) v = u(rng);
  const std::vector<float> X0 = X;
  auto be = make_cpu_backend();
  be->hc_post(X.data(), o.data(), M, hc, D, mix);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < hc; ++k)
      for (int d = 0; d < D; ++d) {
        double want = static_cast<double>(mix.post[m * hc + k]) * o[m * D + d];
        for (int j = 0; j < hc; ++j) want += static_cast<double>(mix.comb[(m * hc + j) * hc + k]) * X0[(m * hc + j) * D + d];
        EXPECT_NEAR(X[(m * hc + k) * D + d], want, 1e-5) << m << " " << k << " " << d;
      }
}

TEST(HcHead, MatchesReference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int hc = 4, D = 6, M = 2, width = hc * D;
  model::Matrix fn;
  fn.rows = hc;
  fn.cols = width;
  fn.data.resize(hc * width);
  for (auto& v : fn.data) v = u(rng);
  const float base[4] = {0.1f, -0.2f, 0.3f, -0.4f};
  const float scale[1] = {0.9f};
  std::vector<float> X(M * width);
  for (auto& v : X) v = 3.0f * u(rng);
  std::vector<float> out(M * D);
  auto be = make_cpu_backend();
  be->hc_head(X.data(), M, hc, D, fn, base, scale, 1e-6f, 1e-6f, out.data());
  for (int m = 0; m < M; ++m) {
    const float* Xm = X.data() + m * width;
    double ss = 0;
    for (int c = 0; c < width; ++c) ss += static_cast<double>(Xm[c]) * Xm[c];
    const double rs = 1.0 / std::sqrt(ss / width + 1e-6);
    for (int d = 0; d < D; ++d) {
      double want = 0;
      for (int i = 0; i < hc; ++i) {
        double mixv = 0;
        for (int c = 0; c < width; ++c) mixv += static_cast<double>(fn.data[i * width + c]) * Xm[c] * rs;
        want += (sigm(mixv * scale[0] + base[i]) + 1e-6) * Xm[i * D + d];
      }
      EXPECT_NEAR(out[m * D + d], want, 1e-5) << m << " " << d;
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend
