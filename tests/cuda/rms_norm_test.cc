// CUDA RMSNorm vs a plain CPU loop (the CpuBackend's arithmetic). Skipped when no CUDA device is
// present, so the suite builds and passes on GPU-less machines.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_ops.h"

namespace deepinfer::backend::cuda {
namespace {

bool has_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_CUDA_DEVICE() \
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)"

// Same loop as CpuBackend::rms_norm.
void rms_norm_ref(const float* x, int M, int n, const float* weight, float eps, float* y) {
  for (int m = 0; m < M; ++m) {
    const float* xr = x + static_cast<size_t>(m) * n;
    float* yr = y + static_cast<size_t>(m) * n;
    float ss = 0.0f;
    for (int i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (int i = 0; i < n; ++i) yr[i] = weight ? weight[i] * (xr[i] * r) : xr[i] * r;
  }
}

std::vector<float> random_vector(size_t size, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(size);
  for (float& f : v) f = dist(rng);
  return v;
}

struct Shape {
  int M;
  int n;
  bool weighted;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << "M=" << s.M << " n=" << s.n << (s.weighted ? " weight" : " no weight");
}

class RmsNormCuda : public ::testing::TestWithParam<Shape> {};

TEST_P(RmsNormCuda, MatchesCpuLoop) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Shape s = GetParam();
  const float eps = 1e-6f;
  const auto seed = static_cast<unsigned>(s.M * 131071 + s.n * 7 + (s.weighted ? 1 : 0));
  const std::vector<float> x = random_vector(static_cast<size_t>(s.M) * s.n, -3.0f, 3.0f, seed);
  const std::vector<float> w = random_vector(static_cast<size_t>(s.n), 0.25f, 2.0f, seed + 1);
  const float* wp = s.weighted ? w.data() : nullptr;

  std::vector<float> ref(x.size()), got(x.size(), std::nanf(""));
  rms_norm_ref(x.data(), s.M, s.n, wp, eps, ref.data());
  const std::string err = rms_norm_cuda_host(x.data(), s.M, s.n, wp, eps, got.data());
  ASSERT_EQ(err, "");

  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::abs(got[i] - ref[i]) <= 1e-5f * std::abs(ref[i])) && ++bad <= 10)
      ADD_FAILURE() << "row " << i / s.n << " col " << i % s.n << ": cuda " << got[i] << " cpu " << ref[i];
  }
  EXPECT_EQ(bad, 0u) << "of " << x.size() << " elements";
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCuda,
                         ::testing::Values(Shape{1, 16384, true}, Shape{1, 16384, false}, Shape{37, 16384, true},
                                           Shape{37, 4096, false}, Shape{37, 7168, true}, Shape{5, 1000, true},
                                           Shape{3, 33, false}, Shape{2, 1, true}, Shape{64, 512, true}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "M" + std::to_string(info.param.M) + "_n" + std::to_string(info.param.n) +
                                  (info.param.weighted ? "_weight" : "_noweight");
                         });

// Batch invariance: each row of a 37-row call is bitwise equal to that row normalised alone.
TEST(RmsNormCudaInvariance, RowResultIndependentOfM) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int M = 37, n = 7168;
  const std::vector<float> x = random_vector(static_cast<size_t>(M) * n, -3.0f, 3.0f, 42);
  const std::vector<float> w = random_vector(static_cast<size_t>(n), 0.25f, 2.0f, 43);
  std::vector<float> batch(x.size());
  ASSERT_EQ(rms_norm_cuda_host(x.data(), M, n, w.data(), 1e-6f, batch.data()), "");
  std::vector<float> single(static_cast<size_t>(n));
  for (int m = 0; m < M; ++m) {
    const size_t off = static_cast<size_t>(m) * n;
    ASSERT_EQ(rms_norm_cuda_host(x.data() + off, 1, n, w.data(), 1e-6f, single.data()), "");
    EXPECT_EQ(std::memcmp(single.data(), batch.data() + off, n * sizeof(float)), 0) << "row " << m;
  }
}

// In place (x == y) on device memory gives the same bits as out of place.
TEST(RmsNormCudaInPlace, SameAsOutOfPlace) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int M = 9, n = 4096;
  const std::vector<float> x = random_vector(static_cast<size_t>(M) * n, -3.0f, 3.0f, 7);
  const std::vector<float> w = random_vector(static_cast<size_t>(n), 0.25f, 2.0f, 8);
  std::vector<float> expect(x.size()), got(x.size());
  ASSERT_EQ(rms_norm_cuda_host(x.data(), M, n, w.data(), 1e-6f, expect.data()), "");

  const size_t bytes = x.size() * sizeof(float);
  // cuda_runtime_api.h (plain C++) has only the void** overload of cudaMalloc.
  void* d_xv = nullptr;
  void* d_wv = nullptr;
  CUDA_CHECK(cudaMalloc(&d_xv, bytes));
  CUDA_CHECK(cudaMalloc(&d_wv, n * sizeof(float)));
  float* d_x = static_cast<float*>(d_xv);
  float* d_w = static_cast<float*>(d_wv);
  CUDA_CHECK(cudaMemcpy(d_x, x.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_w, w.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  rms_norm_cuda(d_x, M, n, d_w, 1e-6f, d_x, nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(got.data(), d_x, bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_w));
  EXPECT_EQ(std::memcmp(got.data(), expect.data(), bytes), 0);
}

}  // namespace
}  // namespace deepinfer::backend::cuda
