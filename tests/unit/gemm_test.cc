// backend::cpu::gemm_nt: accuracy against a double-precision reference, the documented per-element
// summation order, and batch invariance (row m of a batched call == a one-row call, bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"

namespace deepinfer::backend::cpu {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

bool bitwise_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// The per-element arithmetic gemm.h documents: 8 lanes (lane = k mod 8) of fused multiply-adds,
// reduced ((0+4)+(2+6)) + ((1+5)+(3+7)), then the K tail fused in order.
float documented_dot(const float* a, const float* b, int K) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int K8 = K / 8 * 8;
  for (int k = 0; k < K8; ++k) lane[k % 8] = std::fma(a[k], b[k], lane[k % 8]);
  float s = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (int k = K8; k < K; ++k) s = std::fma(a[k], b[k], s);
  return s;
}

TEST(GemmNt, MatchesDoubleReferenceOnRandomShapes) {
  std::mt19937 rng(42);
  for (int M : {1, 2, 3, 7})
    for (int K : {1, 7, 8, 9, 63, 64, 129})
      for (int N : {1, 3, 4, 5, 70}) {
        SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
        const auto A = random_vec(static_cast<size_t>(M) * K, rng);
        const auto B = random_vec(static_cast<size_t>(N) * K, rng);
        std::vector<float> C(static_cast<size_t>(M) * N, NAN);
        gemm_nt(A.data(), M, K, B.data(), N, C.data());
        for (int m = 0; m < M; ++m)
          for (int n = 0; n < N; ++n) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; ++k) {
              ref += static_cast<double>(A[m * K + k]) * B[n * K + k];
              mag += std::fabs(static_cast<double>(A[m * K + k]) * B[n * K + k]);
            }
            // fp32 accumulation bound: about K ulps of the magnitude sum.
            const double tol = (K + 4) * 6e-8 * mag + 1e-30;
            ASSERT_NEAR(C[m * N + n], ref, tol) << "m=" << m << " n=" << n;
          }
      }
}

TEST(GemmNt, ElementsFollowTheDocumentedSummationOrder) {
  std::mt19937 rng(3);
  for (int K : {1, 5, 8, 9, 16, 63, 64, 129, 1000}) {
    const int M = 3, N = 9;
    const auto A = random_vec(static_cast<size_t>(M) * K, rng);
    const auto B = random_vec(static_cast<size_t>(N) * K, rng);
    std::vector<float> C(static_cast<size_t>(M) * N);
    gemm_nt(A.data(), M, K, B.data(), N, C.data());
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        const float want = documented_dot(&A[m * K], &B[n * K], K);
        ASSERT_EQ(C[m * N + n], want) << "K=" << K << " m=" << m << " n=" << n;
        ASSERT_EQ(dot(&A[m * K], &B[n * K], K), want) << "dot K=" << K;
      }
  }
}

TEST(GemmNt, BatchInvariantRowByRow) {
  std::mt19937 rng(9);
  struct Shape {
    int M, K, N;
  };
  // Small shapes plus ones large enough for the OpenMP path (M*N*K > 65536) and several 64-column panels.
  std::vector<Shape> shapes;
  for (int M : {1, 2, 3, 7})
    for (int K : {1, 7, 8, 9, 63, 64, 129})
      for (int N : {1, 3, 4, 5, 70}) shapes.push_back({M, K, N});
  shapes.push_back({7, 129, 200});
  shapes.push_back({16, 300, 133});
  shapes.push_back({5, 1024, 257});
  for (const auto& s : shapes) {
    SCOPED_TRACE("M=" + std::to_string(s.M) + " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N));
    const auto A = random_vec(static_cast<size_t>(s.M) * s.K, rng);
    const auto B = random_vec(static_cast<size_t>(s.N) * s.K, rng);
    std::vector<float> C(static_cast<size_t>(s.M) * s.N);
    gemm_nt(A.data(), s.M, s.K, B.data(), s.N, C.data());
    std::vector<float> row(s.N);
    for (int m = 0; m < s.M; ++m) {
      gemm_nt(A.data() + static_cast<size_t>(m) * s.K, 1, s.K, B.data(), s.N, row.data());
      ASSERT_TRUE(bitwise_equal(row.data(), C.data() + static_cast<size_t>(m) * s.N, s.N)) << "row " << m;
    }
    // Any sub-batch starting at any row also agrees (odd offsets shift the 2-row tiling).
    if (s.M >= 3) {
      std::vector<float> sub(static_cast<size_t>(s.M - 1) * s.N);
      gemm_nt(A.data() + s.K, s.M - 1, s.K, B.data(), s.N, sub.data());
      ASSERT_TRUE(bitwise_equal(sub.data(), C.data() + s.N, sub.size())) << "rows 1..M-1";
    }
    // Repeated calls are deterministic.
    std::vector<float> C2(C.size());
    gemm_nt(A.data(), s.M, s.K, B.data(), s.N, C2.data());
    ASSERT_TRUE(bitwise_equal(C.data(), C2.data(), C.size()));
  }
}

TEST(GemmNt, ExactSmallIntegers) {
  // A = [[1,2,3],[4,5,6]], B = [[1,0,-1],[2,2,2]] -> C = [[-2,12],[-2,30]].
  const float A[6] = {1, 2, 3, 4, 5, 6};
  const float B[6] = {1, 0, -1, 2, 2, 2};
  float C[4];
  gemm_nt(A, 2, 3, B, 2, C);
  EXPECT_EQ(C[0], -2.0f);
  EXPECT_EQ(C[1], 12.0f);
  EXPECT_EQ(C[2], -2.0f);
  EXPECT_EQ(C[3], 30.0f);
}

TEST(CpuBackendLinear, IsGemmWithWeightRows) {
  std::mt19937 rng(4);
  model::Matrix W;
  W.rows = 6;
  W.cols = 11;
  W.data = random_vec(66, rng);
  const auto x = random_vec(3 * 11, rng);
  std::vector<float> y(3 * 6), y2(3 * 6);
  auto be = make_cpu_backend();
  be->linear(x.data(), 3, W, y.data());
  gemm_nt(x.data(), 3, 11, W.data.data(), 6, y2.data());
  EXPECT_TRUE(bitwise_equal(y.data(), y2.data(), y.size()));
  for (int m = 0; m < 3; ++m)
    for (int o = 0; o < 6; ++o) {
      double ref = 0;
      for (int i = 0; i < 11; ++i) ref += static_cast<double>(x[m * 11 + i]) * W.data[o * 11 + i];
      EXPECT_NEAR(y[m * 6 + o], ref, 1e-5);
    }
}

}  // namespace
}  // namespace deepinfer::backend::cpu
