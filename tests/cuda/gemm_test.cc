// CUDA bf16 GEMMs (backend/cuda/gemm.h) against a double-precision CPU reference, plus the batch
// invariance the contract promises: a row's bits do not depend on M, on the tile configuration the
// host picks from M, or on being a row of grouped_gemm. Skipped when no CUDA device is present.
//
// Tolerance: |y - ref| <= 2e-5 * sum_k |x[m,k] w[n,k]| (fp32 accumulation over <= 4104 terms of
// random sign stays orders of magnitude below; a wrong fragment layout, k order or bounds check is
// O(|ref|)), plus half a bf16 ulp of |ref| (2^-8 |ref|) for bf16 outputs.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_testing.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/swiglu.cuh"

namespace deepinfer::backend::cuda {
namespace {

constexpr int kAuto = -1;  // config index meaning "what gemm() picks"

// bf16 values are handled on the host as their bit patterns.
float bf16_bits_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Random bf16 with random sign, magnitudes 2^-7 .. 2 (varied exponents make a wrong pairing of x
// and w elements visible) and random mantissas. xorshift keeps 64M-element weights fast to build.
std::vector<uint16_t> random_bf16(size_t count, uint64_t seed) {
  std::vector<uint16_t> v(count);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (uint16_t& e : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const uint32_t r = static_cast<uint32_t>(s >> 32);
    const uint32_t sign = r & 1u, exponent = 120u + (r >> 1) % 8u, mantissa = (r >> 4) & 0x7Fu;
    e = static_cast<uint16_t>((sign << 15) | (exponent << 7) | mantissa);
  }
  return v;
}

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    ptr_ = static_cast<T*>(p);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { (void)cudaFree(ptr_); }

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

const bf16* as_bf16(const DeviceArray<uint16_t>& a) { return reinterpret_cast<const bf16*>(a.get()); }
bf16* as_bf16(DeviceArray<uint16_t>& a) { return reinterpret_cast<bf16*>(a.get()); }

// Output element types on the host side: float for fp32 output, uint16_t bits for bf16 output.
template <class HostOut>
constexpr bool kIsBf16 = std::is_same_v<HostOut, uint16_t>;

template <class HostOut>
float to_float(HostOut v) {
  if constexpr (kIsBf16<HostOut>)
    return bf16_bits_to_float(v);
  else
    return v;
}

template <class HostOut>
auto device_out(DeviceArray<HostOut>& y) {
  if constexpr (kIsBf16<HostOut>)
    return as_bf16(y);
  else
    return y.get();
}

template <class HostOut>
void run_gemm(int config, const DeviceArray<uint16_t>& x, size_t x_row, int M, int K, const DeviceArray<uint16_t>& w,
              int N, DeviceArray<HostOut>& y) {
  const bf16* xp = as_bf16(x) + x_row * static_cast<size_t>(K);
  if (config == kAuto)
    gemm(xp, M, K, as_bf16(w), N, device_out(y), nullptr);
  else
    gemm_testing::gemm_with_config(config, xp, M, K, as_bf16(w), N, device_out(y), nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Sentinel for output canaries: elements the GEMM must not write.
template <class HostOut>
HostOut canary() {
  if constexpr (kIsBf16<HostOut>)
    return 0x7FA5;  // a NaN pattern the kernel never produces
  else
    return -12345.5f;
}

// All of [0, count) when count <= keep_all_below, else the first and last `ends` and a few random.
std::vector<int> sample_indices(int count, int keep_all_below, int ends, int random_count, uint64_t seed) {
  std::vector<int> idx;
  if (count <= keep_all_below) {
    for (int i = 0; i < count; ++i) idx.push_back(i);
    return idx;
  }
  for (int i = 0; i < ends; ++i) idx.push_back(i);
  for (int i = count - ends; i < count; ++i) idx.push_back(i);
  const std::vector<uint16_t> r = random_bf16(static_cast<size_t>(random_count), seed);
  for (int i = 0; i < random_count; ++i) idx.push_back(static_cast<int>((r[i] * 2654435761u) % count));
  return idx;
}

// Compares y[rows x cols] (row-major M x N, as floats) with the double-precision reference.
void expect_matches_reference(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w, int M, int N, int K,
                              const std::vector<float>& y, bool bf16_output, const std::string& what) {
  const std::vector<int> rows = sample_indices(M, 40, 4, 8, 11);
  const std::vector<int> cols = sample_indices(N, 1024, 64, 256, 12);
  std::vector<float> wf(static_cast<size_t>(K));
  int bad = 0;
  for (int n : cols) {
    for (int k = 0; k < K; ++k) wf[k] = bf16_bits_to_float(w[static_cast<size_t>(n) * K + k]);
    for (int m : rows) {
      double ref = 0.0, mag = 0.0;
      const uint16_t* xr = x.data() + static_cast<size_t>(m) * K;
      for (int k = 0; k < K; ++k) {
        const double p = static_cast<double>(bf16_bits_to_float(xr[k])) * wf[k];
        ref += p;
        mag += std::fabs(p);
      }
      const double got = y[static_cast<size_t>(m) * N + n];
      const double tol = 2e-5 * mag + (bf16_output ? std::ldexp(std::fabs(ref), -8) : 0.0);
      if (!(std::fabs(got - ref) <= tol) && ++bad <= 8)
        ADD_FAILURE() << what << ": y[" << m << "," << n << "] = " << got << ", reference " << ref << " (tol " << tol
                      << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

struct Shape {
  int M, N, K;
};

void PrintTo(const Shape& s, std::ostream* os) { *os << "M=" << s.M << " N=" << s.N << " K=" << s.K; }

class GemmCuda : public ::testing::TestWithParam<Shape> {};

// gemm() and every forced tile configuration: within tolerance of the reference, bitwise equal to
// each other, and nothing written past y[M, N].
template <class HostOut>
void check_shape(const Shape& s) {
  const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(s.M) * s.K, 1000u + s.M * 7u + s.K);
  const std::vector<uint16_t> w = random_bf16(static_cast<size_t>(s.N) * s.K, 2000u + s.N * 3u + s.K);
  const DeviceArray<uint16_t> dx(x), dw(w);
  const size_t out_count = static_cast<size_t>(s.M) * s.N, guard = 64;
  DeviceArray<HostOut> dy(out_count + guard);
  const std::vector<HostOut> fresh(out_count + guard, canary<HostOut>());
  const std::string type = kIsBf16<HostOut> ? "bf16 out" : "fp32 out";

  dy.upload(fresh);
  run_gemm(kAuto, dx, 0, s.M, s.K, dw, s.N, dy);
  const std::vector<HostOut> auto_out = dy.download();
  for (size_t i = out_count; i < out_count + guard; ++i)
    ASSERT_EQ(std::memcmp(&auto_out[i], &fresh[i], sizeof(HostOut)), 0) << type << ": wrote past y at " << i;
  if (s.M == 0) return;
  std::vector<float> y(out_count);
  for (size_t i = 0; i < out_count; ++i) y[i] = to_float(auto_out[i]);
  expect_matches_reference(x, w, s.M, s.N, s.K, y, kIsBf16<HostOut>,
                           type + " auto (" + gemm_testing::config_name(gemm_testing::auto_config(s.M, s.N, s.K)) + ")");

  for (int config = 0; config < gemm_testing::config_count(); ++config) {
    if (!gemm_testing::config_runs_as_is(config, s.N, s.K)) continue;
    dy.upload(fresh);
    run_gemm(config, dx, 0, s.M, s.K, dw, s.N, dy);
    const std::vector<HostOut> out = dy.download();
    EXPECT_EQ(std::memcmp(out.data(), auto_out.data(), (out_count + guard) * sizeof(HostOut)), 0)
        << type << ": config " << gemm_testing::config_name(config) << " differs from gemm() (slices "
        << gemm_testing::slice_count(s.N, s.K) << ")";
  }
}

TEST_P(GemmCuda, MatchesReferenceInEveryConfig) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_shape<float>(GetParam());
  check_shape<uint16_t>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmCuda,
    ::testing::Values(
        // Edge shapes: M = 0, odd M, N not a multiple of any tile, K not a multiple of 16 or of a slice.
        Shape{0, 100, 64}, Shape{1, 1, 8}, Shape{3, 7, 24}, Shape{17, 100, 4104}, Shape{129, 1000, 24},
        Shape{129, 7, 4104}, Shape{1, 1000, 4104}, Shape{17, 1, 4104}, Shape{3, 100, 8}, Shape{300, 100, 520},
        // Real projection sizes (N x K) at decode and small-prefill M.
        Shape{1, 1024, 4096}, Shape{8, 1024, 4096}, Shape{64, 512, 4096}, Shape{257, 1024, 4096},
        Shape{1, 32768, 1024}, Shape{64, 8192, 1024}, Shape{8, 4096, 8192}, Shape{129, 4096, 2048},
        Shape{600, 4096, 4096}, Shape{1, 129280, 256}),
    [](const ::testing::TestParamInfo<Shape>& info) {
      return "M" + std::to_string(info.param.M) + "_N" + std::to_string(info.param.N) + "_K" +
             std::to_string(info.param.K);
    });

// Row r of an M = 2200 call == the same row computed alone (M = 1) == inside a mid-size call at
// another offset, bitwise, for both output types. On 132 SMs, M = 2200 takes the 128x256 configs
// (N = 1024, K = 4096: 4 slices, shared-memory fold; N = 4096, K = 1024: 1 slice), M = 77 the
// 64-row cluster config and M = 1 the 16-row cluster config.
template <class HostOut>
void check_rows_independent_of_m(int N, int K) {
  const int big_m = 2200, mid_m = 77, mid_offset = 450;
  const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(big_m) * K, 31u + N + K);
  const std::vector<uint16_t> w = random_bf16(static_cast<size_t>(N) * K, 32u + N + K);
  const DeviceArray<uint16_t> dx(x), dw(w);
  const std::string what = std::string(kIsBf16<HostOut> ? "bf16" : "fp32") + " N=" + std::to_string(N) +
                           " K=" + std::to_string(K);
  const size_t row_bytes = static_cast<size_t>(N) * sizeof(HostOut);

  DeviceArray<HostOut> big(static_cast<size_t>(big_m) * N), mid(static_cast<size_t>(mid_m) * N), one(N);
  run_gemm(kAuto, dx, 0, big_m, K, dw, N, big);
  run_gemm(kAuto, dx, mid_offset, mid_m, K, dw, N, mid);
  const std::vector<HostOut> big_out = big.download(), mid_out = mid.download();

  // The reference check keeps the invariance comparison from passing on identically wrong results.
  std::vector<float> big_f(big_out.size());
  for (size_t i = 0; i < big_out.size(); ++i) big_f[i] = to_float(big_out[i]);
  expect_matches_reference(x, w, big_m, N, K, big_f, kIsBf16<HostOut>, what + " M=2200");

  for (int r : {0, 1, 63, 64, 127, 128, 449, 450, 500, 526, 527, 1000, 2198, 2199}) {
    run_gemm(kAuto, dx, static_cast<size_t>(r), 1, K, dw, N, one);
    const std::vector<HostOut> one_out = one.download();
    EXPECT_EQ(std::memcmp(one_out.data(), big_out.data() + static_cast<size_t>(r) * N, row_bytes), 0)
        << what << ": row " << r << " alone differs from the same row in M=2200";
  }
  for (int r = 0; r < mid_m; ++r)
    EXPECT_EQ(std::memcmp(mid_out.data() + static_cast<size_t>(r) * N,
                          big_out.data() + static_cast<size_t>(mid_offset + r) * N, row_bytes),
              0)
        << what << ": row " << mid_offset + r << " in M=77 differs from M=2200";
}

TEST(GemmCudaInvariance, RowsIndependentOfM) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [N, K] : std::vector<std::pair<int, int>>{{1024, 4096}, {4096, 1024}, {100, 4104}, {7, 24}}) {
    check_rows_independent_of_m<float>(N, K);
    check_rows_independent_of_m<uint16_t>(N, K);
  }
}

// grouped_gemm rows == gemm() of that group's rows with that group's weight, bitwise; empty and
// uneven groups; rows past row_offsets[G] (inside max_rows) untouched; every forced configuration.
template <class HostOut>
void check_grouped(const std::vector<int>& group_rows, int slack_rows, int N, int K) {
  const int G = static_cast<int>(group_rows.size());
  std::vector<int> offsets(G + 1, 0);
  for (int g = 0; g < G; ++g) offsets[g + 1] = offsets[g] + group_rows[g];
  const int rows = offsets[G], max_rows = rows + slack_rows;
  const std::string what = std::string(kIsBf16<HostOut> ? "bf16" : "fp32") + " G=" + std::to_string(G) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K);

  const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(max_rows) * K, 77u + G + K);
  const DeviceArray<uint16_t> dx(x);
  const int distinct_weights = std::min(G, 5);  // groups share a few weights to keep the test fast
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> dws;
  for (int i = 0; i < distinct_weights; ++i)
    dws.push_back(std::make_unique<DeviceArray<uint16_t>>(random_bf16(static_cast<size_t>(N) * K, 900u + i)));
  std::vector<const bf16*> weight_ptrs(G);
  for (int g = 0; g < G; ++g) weight_ptrs[g] = as_bf16(*dws[g % distinct_weights]);
  DeviceArray<int> d_offsets(offsets);
  DeviceArray<const bf16*> d_weights(weight_ptrs);
  // The same weights back to back, for grouped_gemm_stacked (the form the TMA tiles can load).
  const size_t matrix = static_cast<size_t>(N) * K;
  DeviceArray<uint16_t> d_stacked(static_cast<size_t>(G) * matrix);
  for (int g = 0; g < G; ++g)
    CUDA_CHECK(cudaMemcpy(d_stacked.get() + g * matrix, dws[g % distinct_weights]->get(), matrix * 2,
                          cudaMemcpyDeviceToDevice));

  // Expected: one gemm() per non-empty group.
  const size_t out_count = static_cast<size_t>(max_rows) * N;
  const std::vector<HostOut> fresh(out_count, canary<HostOut>());
  std::vector<HostOut> expected = fresh;
  for (int g = 0; g < G; ++g) {
    if (group_rows[g] == 0) continue;
    DeviceArray<HostOut> part(static_cast<size_t>(group_rows[g]) * N);
    run_gemm(kAuto, dx, static_cast<size_t>(offsets[g]), group_rows[g], K, *dws[g % distinct_weights], N, part);
    const std::vector<HostOut> p = part.download();
    std::copy(p.begin(), p.end(), expected.begin() + static_cast<size_t>(offsets[g]) * N);
  }

  DeviceArray<HostOut> dy(out_count);
  // Every configuration (kAuto: what grouped_gemm picks) with per-group pointers and stacked weights.
  const auto run = [&](bool stacked, int config) {
    if (stacked && config == kAuto)
      grouped_gemm_stacked(as_bf16(dx), d_offsets.get(), G, max_rows, K, as_bf16(d_stacked), N, device_out(dy),
                           nullptr);
    else if (stacked)
      gemm_testing::grouped_gemm_stacked_with_config(config, as_bf16(dx), d_offsets.get(), G, max_rows, K,
                                                     as_bf16(d_stacked), N, device_out(dy), nullptr);
    else if (config == kAuto)
      grouped_gemm(as_bf16(dx), d_offsets.get(), G, max_rows, K, d_weights.get(), N, device_out(dy), nullptr);
    else
      gemm_testing::grouped_gemm_with_config(config, as_bf16(dx), d_offsets.get(), G, max_rows, K, d_weights.get(), N,
                                             device_out(dy), nullptr);
  };
  for (const bool stacked : {false, true}) {
    for (int config = kAuto; config < gemm_testing::config_count(); ++config) {
      if (config != kAuto && !gemm_testing::config_runs_as_is(config, N, K)) continue;
      dy.upload(fresh);
      run(stacked, config);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<HostOut> got = dy.download();
      const std::string name = std::string(stacked ? "stacked " : "") +
                               (config == kAuto ? "auto" : gemm_testing::config_name(config));
      for (int g = 0; g < G; ++g)
        for (int r = offsets[g]; r < offsets[g + 1]; ++r)
          EXPECT_EQ(std::memcmp(&got[static_cast<size_t>(r) * N], &expected[static_cast<size_t>(r) * N],
                                static_cast<size_t>(N) * sizeof(HostOut)),
                    0)
              << what << " config " << name << ": group " << g << " row " << r << " differs from gemm()";
      EXPECT_EQ(std::memcmp(&got[static_cast<size_t>(rows) * N], &fresh[0],
                            static_cast<size_t>(max_rows - rows) * N * sizeof(HostOut)),
                0)
          << what << " config " << name << ": wrote rows past row_offsets[G]";
    }
  }
}

TEST(GemmCudaGrouped, RowsMatchGemmBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<int> uneven = {5, 0, 37, 1, 0, 130, 16, 0};
  for (const auto& [N, K] : std::vector<std::pair<int, int>>{{1024, 4096}, {4096, 1024}, {100, 4104}}) {
    check_grouped<float>(uneven, 23, N, K);
    check_grouped<uint16_t>(uneven, 23, N, K);
  }
  // MoE decode: one row per expert, 8 experts.
  check_grouped<uint16_t>(std::vector<int>(8, 1), 0, 1024, 4096);
  // Many groups (more than one scan pass of the CTA), most empty, last ones empty too.
  std::vector<int> many(300, 0);
  for (int g = 0; g < 290; g += 7) many[g] = 1 + g % 4;
  check_grouped<float>(many, 5, 100, 520);
  // A single group is an ordinary GEMM.
  check_grouped<float>({600}, 0, 4096, 1024);
  // Prefill-sized MoE (the automatic choice is the TMA + wgmma tile for the stacked form): uneven
  // groups that are not multiples of 128 rows, one empty.
  check_grouped<uint16_t>({700, 0, 1290, 333, 900, 129, 1000, 64}, 17, 1024, 4096);
}

TEST(GemmCudaGrouped, AllEmptyWritesNothing) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_grouped<float>({0, 0, 0}, 40, 64, 128);
}

// grouped_gemm_stacked_side_by_side: G groups of T rows each land as one [T, G * N] array, row t of
// group g at columns [g N, g N + N), bitwise grouped_gemm_stacked's [G * T, N] rows; every forced
// configuration; nothing past the T rows written. Shapes of the grouped output projection (8 groups,
// N = 1024, K = 4096) from one token to prefill sizes, and an odd N.
TEST(GemmCudaGrouped, SideBySideMatchesStackedBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [G, N, K] : std::vector<std::tuple<int, int, int>>{{8, 1024, 4096}, {3, 100, 520}}) {
    for (int T : {1, 3, 130, 300}) {
      const std::string what = "G=" + std::to_string(G) + " T=" + std::to_string(T) + " N=" + std::to_string(N) +
                               " K=" + std::to_string(K);
      const int rows = G * T;
      std::vector<int> offsets(G + 1);
      for (int g = 0; g <= G; ++g) offsets[g] = g * T;
      const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(rows) * K, 400u + T + N);
      const DeviceArray<uint16_t> dx(x), dw(random_bf16(static_cast<size_t>(G) * N * K, 500u + K));
      const DeviceArray<int> d_offsets(offsets);
      const size_t count = static_cast<size_t>(rows) * N, guard = 64;
      DeviceArray<uint16_t> stacked(count);
      grouped_gemm_stacked(as_bf16(dx), d_offsets.get(), G, rows, K, as_bf16(dw), N,
                           reinterpret_cast<bf16*>(stacked.get()), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint16_t> expect = stacked.download();
      const std::vector<uint16_t> fresh(count + guard, canary<uint16_t>());
      DeviceArray<uint16_t> side(count + guard);
      for (int config = kAuto; config < gemm_testing::config_count(); ++config) {
        if (config != kAuto && !gemm_testing::config_runs_as_is(config, N, K)) continue;
        const std::string name = config == kAuto ? "auto" : gemm_testing::config_name(config);
        side.upload(fresh);
        bf16* const y = reinterpret_cast<bf16*>(side.get());
        if (config == kAuto)
          grouped_gemm_stacked_side_by_side(as_bf16(dx), d_offsets.get(), G, rows, K, as_bf16(dw), N, y, nullptr);
        else
          gemm_testing::grouped_gemm_stacked_side_by_side_with_config(config, as_bf16(dx), d_offsets.get(), G, rows,
                                                                      K, as_bf16(dw), N, y, nullptr);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> got = side.download();
        int mismatches = 0;
        for (int g = 0; g < G; ++g)
          for (int t = 0; t < T; ++t)
            mismatches += std::memcmp(&got[(static_cast<size_t>(t) * G + g) * N],
                                      &expect[(static_cast<size_t>(g) * T + t) * N], N * sizeof(uint16_t)) != 0;
        EXPECT_EQ(mismatches, 0) << what << " config " << name << ": rows differing from the stacked output";
        EXPECT_EQ(std::memcmp(&got[count], &fresh[count], guard * sizeof(uint16_t)), 0)
            << what << " config " << name << ": wrote past the [T, G * N] output";
      }
    }
  }
}

// grouped_gemm_stacked_swiglu: with each group's w1 | w3 rows interleaved in blocks of 8 (swiglu.cuh),
// h is bitwise what the two-step form gives on the plain weights (grouped_gemm_stacked into fp32, then
// swiglu()), for the automatic choice and every forced TMA + wgmma tile; the two-step form on the
// interleaved weights (swiglu(..., gate_up_interleaved = true)) gives the same bits too; forced
// mma.sync tiles, and operands the TMA tiles cannot load (K % 64 != 0), make it return false
// without writing; nothing is written past the rows. Shapes: the V4-Flash experts
// (inter 2048, K 4096) at decode (1 row an expert: the 64 x 256 cluster tile, whose slices meet in
// the DSMEM sum) and at a few dozen rows an expert, prefill-sized groups over two K slices (the
// fold tiles), and a small inter.
void check_grouped_swiglu(const std::vector<int>& group_rows, int inter, int K, float limit) {
  const int G = static_cast<int>(group_rows.size()), N = 2 * inter;
  std::vector<int> offsets(G + 1, 0);
  for (int g = 0; g < G; ++g) offsets[g + 1] = offsets[g] + group_rows[g];
  const int rows = offsets[G], max_rows = rows + 9;
  const std::string what = "G=" + std::to_string(G) + " rows=" + std::to_string(rows) +
                           " inter=" + std::to_string(inter) + " K=" + std::to_string(K);
  const DeviceArray<uint16_t> dx(random_bf16(static_cast<size_t>(max_rows) * K, 1234u + rows + K));
  const DeviceArray<int> d_offsets(offsets);
  // A few distinct weights, stacked as G groups: plain (w1 rows, then w3 rows) and interleaved.
  const int distinct = std::min(G, 3);
  const size_t matrix = static_cast<size_t>(N) * K, row = static_cast<size_t>(K);
  DeviceArray<uint16_t> plain(static_cast<size_t>(G) * matrix), mixed(static_cast<size_t>(G) * matrix);
  for (int i = 0; i < distinct; ++i) {
    const std::vector<uint16_t> w = random_bf16(matrix, 4321u + i + K);
    std::vector<uint16_t> wi(matrix);
    for (int r = 0; r < inter; ++r) {
      std::copy_n(w.begin() + static_cast<std::ptrdiff_t>(r * row), row,
                  wi.begin() + static_cast<std::ptrdiff_t>(interleaved_gate_up_column(r, false) * row));
      std::copy_n(w.begin() + static_cast<std::ptrdiff_t>((inter + r) * row), row,
                  wi.begin() + static_cast<std::ptrdiff_t>(interleaved_gate_up_column(r, true) * row));
    }
    for (int g = i; g < G; g += distinct) {
      CUDA_CHECK(cudaMemcpy(plain.get() + g * matrix, w.data(), matrix * 2, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(mixed.get() + g * matrix, wi.data(), matrix * 2, cudaMemcpyHostToDevice));
    }
  }
  const size_t h_count = static_cast<size_t>(max_rows) * inter;
  const std::vector<uint16_t> fresh(h_count, canary<uint16_t>());
  DeviceArray<float> gu(static_cast<size_t>(max_rows) * N);
  DeviceArray<uint16_t> expect_h(h_count), h(h_count);
  expect_h.upload(fresh);
  grouped_gemm_stacked(as_bf16(dx), d_offsets.get(), G, max_rows, K, as_bf16(plain), N, gu.get(), nullptr);
  swiglu(gu.get(), rows, inter, limit, nullptr, as_bf16(expect_h), nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> expect = expect_h.download();
  const auto check = [&](const std::string& name) {
    const std::vector<uint16_t> got = h.download();
    int mismatches = 0;
    for (int r = 0; r < rows; ++r)
      mismatches += std::memcmp(&got[static_cast<size_t>(r) * inter], &expect[static_cast<size_t>(r) * inter],
                                static_cast<size_t>(inter) * 2) != 0;
    EXPECT_EQ(mismatches, 0) << what << " " << name << ": rows differing from the two-step form";
    EXPECT_EQ(std::memcmp(&got[static_cast<size_t>(rows) * inter], &fresh[0],
                          static_cast<size_t>(max_rows - rows) * inter * 2),
              0)
        << what << " " << name << ": wrote rows past row_offsets[G]";
  };
  // The two-step form on the interleaved weights.
  h.upload(fresh);
  grouped_gemm_stacked(as_bf16(dx), d_offsets.get(), G, max_rows, K, as_bf16(mixed), N, gu.get(), nullptr);
  swiglu(gu.get(), rows, inter, limit, nullptr, as_bf16(h), nullptr, true);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  check("interleaved two-step");
  // The fused form: the automatic choice and every forced configuration.
  const bool tma_operands = K % 64 == 0;
  for (int config = kAuto; config < gemm_testing::config_count(); ++config) {
    if (config != kAuto && !gemm_testing::config_runs_as_is(config, N, K)) continue;
    const std::string name = config == kAuto ? "auto" : gemm_testing::config_name(config);
    const bool wgmma_tile = config == kAuto || name.rfind("wgmma", 0) == 0;
    h.upload(fresh);
    const bool ran = config == kAuto
                         ? grouped_gemm_stacked_swiglu(as_bf16(dx), d_offsets.get(), G, max_rows, K, as_bf16(mixed),
                                                       N, limit, as_bf16(h), nullptr)
                         : gemm_testing::grouped_gemm_stacked_swiglu_with_config(config, as_bf16(dx), d_offsets.get(),
                                                                                 G, max_rows, K, as_bf16(mixed), N,
                                                                                 limit, as_bf16(h), nullptr);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    if (!tma_operands || !wgmma_tile) {
      EXPECT_FALSE(ran) << what << " " << name << ": fused without a TMA + wgmma tile";
      EXPECT_EQ(h.download(), fresh) << what << " " << name << ": wrote although it returned false";
      continue;
    }
    EXPECT_TRUE(ran) << what << " " << name << ": the TMA + wgmma tile did not take the SwiGLU epilogue";
    if (ran) check("fused " + name);
  }
}

TEST(GemmCudaGrouped, SwigluEpilogueMatchesTwoStepsBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // V4-Flash experts at batch 1: 6 of 32 experts with one row each.
  std::vector<int> decode(32, 0);
  for (int g : {1, 4, 9, 17, 22, 31}) decode[g] = 1;
  check_grouped_swiglu(decode, 2048, 4096, 10.0f);
  // A few dozen rows an expert (batch 8-64), uneven and partly empty.
  check_grouped_swiglu({5, 0, 37, 1, 0, 130, 16, 0}, 2048, 4096, 10.0f);
  // Prefill-sized groups, not multiples of 128 rows, over two K slices (auto: the 128 x 192 fold).
  check_grouped_swiglu({700, 0, 1290, 333, 900, 129, 1000, 64}, 1024, 2048, 3.0f);
  // A small inter (13 blocks of 8: the last 128-wide column tile is partly past N), and a K the TMA
  // tiles cannot load.
  check_grouped_swiglu({3, 200, 0, 77}, 104, 512, 1.0f);
  check_grouped_swiglu({3, 200, 0, 77}, 104, 520, 1.0f);
}

// gemm_split: each output is bitwise the matching columns of gemm() over the whole concatenated
// weight, for every forced configuration and several M; the padding after each output's rows
// (canaries) is left alone.
void check_split(const std::vector<int>& widths, int K) {
  int N = 0;
  for (int n : widths) N += n;
  const std::string what = "N=" + std::to_string(N) + " K=" + std::to_string(K);
  for (int M : {1, 5, 64, 200, 700}) {
    const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(M) * K, 31u + M);
    const std::vector<uint16_t> w = random_bf16(static_cast<size_t>(N) * K, 57u + K);
    const DeviceArray<uint16_t> dx(x), dw(w);
    DeviceArray<float> whole(static_cast<size_t>(M) * N);
    run_gemm<float>(kAuto, dx, 0, M, K, dw, N, whole);
    const std::vector<float> expect = whole.download();
    for (int config = kAuto; config < gemm_testing::config_count(); ++config) {
      const std::string name = config == kAuto ? "auto" : gemm_testing::config_name(config);
      std::vector<std::unique_ptr<DeviceArray<float>>> outs;
      std::vector<GemmOutput> spec;
      for (int n : widths) {
        // 16 spare floats after the rows (16-byte aligned, so a stray float4 would land in them).
        outs.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(static_cast<size_t>(M) * n + 16,
                                                                               canary<float>())));
        spec.push_back({outs.back()->get(), n});
      }
      if (config == kAuto)
        gemm_split(as_bf16(dx), M, K, as_bf16(dw), spec.data(), static_cast<int>(spec.size()), nullptr);
      else
        gemm_testing::gemm_split_with_config(config, as_bf16(dx), M, K, as_bf16(dw), spec.data(),
                                             static_cast<int>(spec.size()), nullptr);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());
      int begin = 0;
      for (size_t i = 0; i < widths.size(); ++i) {
        const int n = widths[i];
        const std::vector<float> got = outs[i]->download();
        int mismatches = 0;
        for (int m = 0; m < M; ++m)
          mismatches += std::memcmp(got.data() + static_cast<size_t>(m) * n,
                                    expect.data() + static_cast<size_t>(m) * N + begin, n * sizeof(float)) != 0;
        EXPECT_EQ(mismatches, 0) << what << " M=" << M << " config " << name << ": output " << i
                                 << " differs from gemm() in " << mismatches << " rows";
        for (int e = 0; e < 16; ++e)
          EXPECT_EQ(got[static_cast<size_t>(M) * n + e], canary<float>())
              << what << " M=" << M << " config " << name << ": output " << i << " written past its rows";
        begin += n;
      }
    }
  }
}

TEST(GemmCudaSplit, OutputsMatchOneGemmBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // V4-Flash's compressed-sparse-attention layer: wq_a, wkv, compressor, indexer compressor and
  // indexer weights; then the MoE block's shared expert + router; then odd small widths.
  check_split({1024, 512, 2048, 512, 64}, 4096);
  check_split({4096, 32}, 4096);
  check_split({256, 512, 12}, 200);  // K not a multiple of 64: the mma.sync tiles only
}

TEST(GemmCudaSplit, SaysWhenItMatchesSeparateGemms) {
  // V4-Flash's widths get their own K slicing (4 slices of 1024 at K = 4096) inside the sum too.
  const int attention[] = {1024, 512, 2048, 512, 64}, moe[] = {4096, 32};
  EXPECT_TRUE(gemm_split_matches_separate(4096, attention, 5));
  EXPECT_TRUE(gemm_split_matches_separate(4096, moe, 2));
  // A wide weight is cut in fewer slices than a narrow one (8256 columns: 2 slices; 64: 4).
  const int wide_and_narrow[] = {8192, 64};
  EXPECT_FALSE(gemm_split_matches_separate(4096, wide_and_narrow, 2));
  // Layout rules: all but the last a multiple of 256, every one a multiple of 4, at most 6.
  const int unaligned[] = {100, 256}, odd_last[] = {256, 6}, seven[] = {256, 256, 256, 256, 256, 256, 256};
  EXPECT_FALSE(gemm_split_matches_separate(4096, unaligned, 2));
  EXPECT_FALSE(gemm_split_matches_separate(4096, odd_last, 2));
  EXPECT_FALSE(gemm_split_matches_separate(4096, seven, 7));
}

}  // namespace
}  // namespace deepinfer::backend::cuda
