// Block-scaled FP8 GEMMs and the FP8 activation quantizer (backend/cuda/fp8_gemm.h). Skipped when
// no CUDA device is present.
//
// Accuracy bound: |y - ref| <= kTol * sum_k |a[m,k] w[n,k]| with ref the exact dequantized product
// in double and kTol = 1e-5: the per-block fold adds <= K/128 fp32 roundings of at most 2^-24 of the
// running sum of |terms| each (< 4e-6 for K <= 8192), and the tensor-core accumulation inside one
// block measured on the H200 at 2e-7 of sum|terms| at most (it is not guaranteed to be an exactly
// rounded fp32 sum; DeepSeek-V3 reports ~14 retained bits for long FP8 accumulations on Hopper, which
// is why the promotion happens every 128 k). A wrong fragment layout, scale index or nibble order
// gives an O(1) error. The test prints the largest observed ratio. Bit-exact checks against the
// reference use values whose every partial sum is exact (ExactSums*).

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/release_kernels.h"
#include "cuda_test_util.h"
#include "model/numerics.h"

namespace deepinfer::backend::cuda::fp8 {
namespace {

constexpr double kTol = 1e-5;
// The TMA + wgmma kernel (fp8::tma) runs Hopper's native FP8 tensor cores, whose accumulation inside
// a 128-deep block is not fp32: products are aligned to the largest exponent of the group and the
// rest truncated (DeepSeek-V3's "~14 retained bits"), which is why every kernel of this kind, the
// release's own included, promotes to fp32 per 128-block. Measured on the H200 over the shapes
// below: 5.7e-4 of sum|terms| at most. Bound 2^-10; a wrong fragment layout, scale index or
// promotion order still gives errors of order 1.
constexpr double kTolTensorCoreFp8 = 0.0009765625;

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    CUDA_CHECK(cudaMemset(ptr_, 0, std::max<size_t>(count, 1) * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { (void)cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
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
  size_t count_;
};

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 32);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint32_t>(n)); }
};

double decode_e4m3(uint8_t c) {
  const int sign = c >> 7, exponent = (c >> 3) & 15, mantissa = c & 7;
  double v;
  if (exponent == 15 && mantissa == 7) return NAN;
  if (exponent == 0)
    v = std::ldexp(static_cast<double>(mantissa), -9);
  else
    v = std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -v : v;
}
double decode_e2m1(uint8_t c) {
  static constexpr double kMagnitude[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const double v = kMagnitude[c & 7];
  return (c & 8) ? -v : v;
}

uint8_t random_e4m3(Rng& rng) {  // any code but NaN
  for (;;) {
    const uint8_t c = static_cast<uint8_t>(rng.next() >> 8);
    if ((c & 0x7F) != 0x7F) return c;
  }
}

// A GEMM problem on the host: A codes/scales, weight codes/scales (FP8 or FP4 packed).
struct Problem {
  bool fp4 = false;
  int M = 0, N = 0, K = 0;
  std::vector<uint8_t> a, w;
  std::vector<float> sa, sw;
  int KB() const { return (K + 127) / 128; }
  double a_value(int m, int k) const { return decode_e4m3(a[static_cast<size_t>(m) * K + k]) * sa[static_cast<size_t>(m) * KB() + k / 128]; }
  double w_value(int n, int k) const {
    if (fp4) {
      const uint8_t byte = w[static_cast<size_t>(n) * (K / 2) + k / 2];
      return decode_e2m1(k % 2 ? byte >> 4 : byte & 15) * sw[static_cast<size_t>(n) * (K / 32) + k / 32];
    }
    return decode_e4m3(w[static_cast<size_t>(n) * K + k]) * sw[static_cast<size_t>(n / 128) * KB() + k / 128];
  }
  size_t w_bytes() const { return fp4 ? static_cast<size_t>(N) * K / 2 : static_cast<size_t>(N) * K; }
  size_t sw_count() const { return fp4 ? static_cast<size_t>(N) * (K / 32) : static_cast<size_t>((N + 127) / 128) * KB(); }
};

float pow2(Rng& rng, int lo, int hi) { return std::ldexp(1.0f, lo + rng.below(hi - lo + 1)); }

Problem random_problem(bool fp4, int M, int N, int K, uint64_t seed) {
  Rng rng(seed);
  Problem p;
  p.fp4 = fp4;
  p.M = M;
  p.N = N;
  p.K = K;
  p.a.resize(static_cast<size_t>(M) * K);
  for (auto& c : p.a) c = random_e4m3(rng);
  p.sa.resize(static_cast<size_t>(M) * p.KB());
  for (auto& s : p.sa) s = pow2(rng, -12, -4);
  p.w.resize(p.w_bytes());
  for (auto& c : p.w) c = fp4 ? static_cast<uint8_t>(rng.next() >> 8) : random_e4m3(rng);
  p.sw.resize(p.sw_count());
  for (auto& s : p.sw) s = pow2(rng, -10, -2);
  return p;
}

// Device copy of a problem and runners.
struct DeviceProblem {
  DeviceArray<uint8_t> a, w;
  DeviceArray<float> sa, sw;
  explicit DeviceProblem(const Problem& p) : a(p.a), w(p.w), sa(p.sa), sw(p.sw) {}
};

std::vector<float> run(const Problem& p, const DeviceProblem& d, int config, int M_override = -1, int row0 = 0) {
  const int M = M_override >= 0 ? M_override : p.M;
  DeviceArray<float> y(static_cast<size_t>(M) * p.N);
  testing::gemm_with_config(config, p.fp4, d.a.get() + static_cast<size_t>(row0) * p.K,
                            d.sa.get() + static_cast<size_t>(row0) * p.KB(), M, p.K, d.w.get(), d.sw.get(), p.N,
                            y.get(), false, nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

std::vector<uint16_t> run_bf16(const Problem& p, const DeviceProblem& d, int config) {
  DeviceArray<uint16_t> y(static_cast<size_t>(p.M) * p.N);
  testing::gemm_with_config(config, p.fp4, d.a.get(), d.sa.get(), p.M, p.K, d.w.get(), d.sw.get(), p.N, y.get(), true,
                            nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

// Max over checked elements of |y - ref| / sum|terms|; expects each within kTol (or exact).
double check_against_reference(const Problem& p, const std::vector<float>& y, bool exact, int row_stride = 1,
                               double tol = kTol) {
  double worst = 0.0;
  int failures = 0;
  for (int m = 0; m < p.M; m += row_stride)
    for (int n = 0; n < p.N; ++n) {
      double sum = 0.0, abs_sum = 0.0;
      for (int k = 0; k < p.K; ++k) {
        const double t = p.a_value(m, k) * p.w_value(n, k);
        sum += t;
        abs_sum += std::fabs(t);
      }
      const double got = y[static_cast<size_t>(m) * p.N + n];
      const double err = std::fabs(got - sum);
      const double ratio = abs_sum > 0 ? err / abs_sum : err;
      worst = std::max(worst, ratio);
      const bool ok = exact ? got == static_cast<double>(static_cast<float>(sum)) : err <= tol * abs_sum;
      if (!ok && ++failures <= 5)
        ADD_FAILURE() << "m " << m << " n " << n << ": got " << got << " ref " << sum << " (sum|terms| " << abs_sum
                      << ")";
    }
  EXPECT_EQ(failures, 0);
  return worst;
}

bool bitwise_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

struct Shape {
  int M, N, K;
};

// --- Accuracy against the exact dequantized product. ---------------------------------------------
TEST(Fp8Gemm, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // K slices: (256, 2048) -> 4, (64, 4096) -> 8, others 1. K % 128 != 0 exercises the short last block.
  const Shape shapes[] = {{1, 256, 2048}, {5, 64, 4096}, {37, 136, 288}, {130, 256, 1024}, {16, 512, 96}, {3, 8, 32}};
  for (bool fp4 : {false, true}) {
    double worst = 0.0;
    for (const Shape& s : shapes) {
      SCOPED_TRACE(testing::config_name(testing::auto_config(s.M, s.N, s.K)));
      const Problem p = random_problem(fp4, s.M, s.N, s.K, 1000 + s.M + s.N + s.K);
      const DeviceProblem d(p);
      worst = std::max(worst, check_against_reference(p, run(p, d, -1), false));
    }
    std::printf("[fp8_gemm] %s: max |y - ref| / sum|terms| = %.3g (bound %.3g)\n", fp4 ? "fp4" : "fp8", worst, kTol);
  }
}

// Values on a coarse grid with power-of-two scales: every partial sum is exactly representable, so
// any accumulation order gives the exact result: checks layouts bit for bit.
TEST(Fp8Gemm, ExactSumsAreExact) {
  SKIP_WITHOUT_CUDA_DEVICE();
  static constexpr uint8_t kSmall[] = {0x00, 0x80, 0x30, 0xB0, 0x38, 0xB8, 0x40, 0xC0};  // 0 -0 .5 -.5 1 -1 2 -2
  for (bool fp4 : {false, true})
    for (const Shape& s : {Shape{1, 128, 512}, Shape{20, 64, 384}, Shape{150, 264, 256}}) {
      Problem p = random_problem(fp4, s.M, s.N, s.K, 7 + s.M);
      Rng rng(99 + s.M);
      for (auto& c : p.a) c = kSmall[rng.below(8)];
      if (!fp4)
        for (auto& c : p.w) c = kSmall[rng.below(8)];
      for (auto& x : p.sa) x = pow2(rng, -2, 2);
      for (auto& x : p.sw) x = pow2(rng, -2, 2);
      const DeviceProblem d(p);
      for (int config = 0; config < testing::config_count(); ++config) {
        SCOPED_TRACE(testing::config_name(config));
        check_against_reference(p, run(p, d, config), true);
      }
    }
}

// Every e4m3 / e2m1 code in every position: A row m is the unit vector e_m (code 1.0), so
// y[m, n] = w[n, m] exactly (negative zero included: -0 == 0).
TEST(Fp8Gemm, EveryWeightCodeDecodesExactly) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (bool fp4 : {false, true}) {
    const int K = 256, M = 256, N = 64;
    Problem p = random_problem(fp4, M, N, K, 5);
    std::fill(p.a.begin(), p.a.end(), 0);
    for (int m = 0; m < M; ++m) p.a[static_cast<size_t>(m) * K + m] = 0x38;
    std::fill(p.sa.begin(), p.sa.end(), 1.0f);
    std::fill(p.sw.begin(), p.sw.end(), 1.0f);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        if (fp4) {
          const uint8_t code = static_cast<uint8_t>((n + k) & 15);
          uint8_t& byte = p.w[static_cast<size_t>(n) * (K / 2) + k / 2];
          byte = k % 2 ? static_cast<uint8_t>((byte & 0x0F) | (code << 4)) : static_cast<uint8_t>((byte & 0xF0) | code);
        } else {
          uint8_t code = static_cast<uint8_t>((n * 7 + k) & 255);
          if ((code & 0x7F) == 0x7F) code = 0x80;  // NaN codes -> negative zero
          p.w[static_cast<size_t>(n) * K + k] = code;
        }
      }
    const DeviceProblem d(p);
    const std::vector<float> y = run(p, d, -1);
    int failures = 0;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        const double want = p.w_value(n, m);
        if (static_cast<double>(y[static_cast<size_t>(m) * N + n]) != want && ++failures <= 5)
          ADD_FAILURE() << (fp4 ? "fp4" : "fp8") << " m " << m << " n " << n << ": " << y[static_cast<size_t>(m) * N + n]
                        << " vs " << want;
      }
    EXPECT_EQ(failures, 0);
  }
}

// --- Batch invariance. ----------------------------------------------------------------------------
TEST(Fp8Gemm, RowsOfABigBatchEqualTheRowAlone) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (bool fp4 : {false, true})
    for (const Shape& s : {Shape{300, 256, 2048}, Shape{200, 512, 384}, Shape{1100, 2048, 512}, Shape{45, 96, 1056}}) {
      const Problem p = random_problem(fp4, s.M, s.N, s.K, 31 + s.M);
      const DeviceProblem d(p);
      const std::vector<float> big = run(p, d, -1);
      for (int row : {0, 1, 17, s.M / 2, s.M - 1}) {
        for (int alone_m : {1, 3}) {
          if (row + alone_m > s.M) continue;
          const std::vector<float> small = run(p, d, -1, alone_m, row);
          const std::vector<float> want(big.begin() + static_cast<size_t>(row) * s.N,
                                        big.begin() + static_cast<size_t>(row + alone_m) * s.N);
          EXPECT_TRUE(bitwise_equal(small, want)) << (fp4 ? "fp4" : "fp8") << " M " << s.M << " row " << row;
        }
      }
    }
}

TEST(Fp8Gemm, EveryConfigEqualsAutoBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (bool fp4 : {false, true})
    for (const Shape& s : {Shape{1, 256, 2048}, Shape{37, 64, 4096}, Shape{200, 384, 640}, Shape{9, 512, 1024}, Shape{45, 96, 1056}}) {
      const Problem p = random_problem(fp4, s.M, s.N, s.K, 77 + s.N);
      const DeviceProblem d(p);
      const std::vector<float> want = run(p, d, -1);
      check_against_reference(p, want, false, std::max(1, s.M / 8));
      for (int config = 0; config < testing::config_count(); ++config)
        EXPECT_TRUE(bitwise_equal(run(p, d, config), want))
            << (fp4 ? "fp4 " : "fp8 ") << testing::config_name(config) << " M " << s.M << " N " << s.N << " K " << s.K
            << " slices " << testing::slice_count(s.N, s.K);
    }
}

TEST(Fp8Gemm, Bf16OutputIsTheRoundedFp32Output) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (bool fp4 : {false, true}) {
    const Problem p = random_problem(fp4, 70, 256, 2048, 3);
    const DeviceProblem d(p);
    for (int config = -1; config < testing::config_count(); ++config) {
      const std::vector<float> y = run(p, d, config);
      const std::vector<uint16_t> yb = run_bf16(p, d, config);
      for (size_t i = 0; i < y.size(); ++i) {
        const __nv_bfloat16 r = __float2bfloat16_rn(y[i]);
        uint16_t bits;
        std::memcpy(&bits, &r, 2);
        if (bits != yb[i]) {
          ADD_FAILURE() << "element " << i << " config " << config;
          break;
        }
      }
    }
  }
}

TEST(Fp8Gemm, GroupedRowsEqualThePlainCall) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (bool fp4 : {false, true})
    for (const Shape& s : {Shape{0, 256, 2048}, Shape{0, 128, 640}}) {
      const int G = 9;
      const int rows_of[G] = {3, 0, 17, 1, 70, 0, 16, 33, 2};
      std::vector<int> offsets(G + 1, 0);
      for (int g = 0; g < G; ++g) offsets[g + 1] = offsets[g] + rows_of[g];
      const int total = offsets[G];
      // A: total rows; weights: G problems sharing A's shape.
      const Problem pa = random_problem(fp4, total, s.N, s.K, 500);
      std::vector<Problem> pw;
      std::vector<std::unique_ptr<DeviceProblem>> dw;
      std::vector<const uint8_t*> w_ptrs;
      std::vector<const float*> sw_ptrs;
      for (int g = 0; g < G; ++g) {
        pw.push_back(random_problem(fp4, 1, s.N, s.K, 600 + g));
        pw.back().M = total;
        pw.back().a = pa.a;
        pw.back().sa = pa.sa;
        dw.push_back(std::make_unique<DeviceProblem>(pw.back()));
        w_ptrs.push_back(dw.back()->w.get());
        sw_ptrs.push_back(dw.back()->sw.get());
      }
      const DeviceProblem da(pa);
      DeviceArray<int> d_offsets(offsets);
      DeviceArray<const uint8_t*> d_w(w_ptrs);
      DeviceArray<const float*> d_sw(sw_ptrs);
      for (int config = -1; config < testing::config_count(); ++config) {
        DeviceArray<float> y(static_cast<size_t>(total) * s.N);
        testing::grouped_gemm_with_config(config, fp4, da.a.get(), da.sa.get(), d_offsets.get(), G, total + 5, s.K,
                                          d_w.get(), d_sw.get(), s.N, y.get(), false, nullptr);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = y.download();
        for (int g = 0; g < G; ++g) {
          if (rows_of[g] == 0) continue;
          const std::vector<float> plain = run(pw[g], *dw[g], -1, rows_of[g], offsets[g]);
          const std::vector<float> part(got.begin() + static_cast<size_t>(offsets[g]) * s.N,
                                        got.begin() + static_cast<size_t>(offsets[g + 1]) * s.N);
          EXPECT_TRUE(bitwise_equal(plain, part)) << (fp4 ? "fp4" : "fp8") << " group " << g << " config " << config;
        }
      }
    }
}

// --- Quantizer. -----------------------------------------------------------------------------------
std::vector<float> quantizer_input(int M, int K, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(M) * K);
  for (auto& v : x) {
    const float mag = std::ldexp(1.0f + (rng.next() >> 9) * 0x1p-23f, rng.below(40) - 20);
    v = rng.below(2) ? -mag : mag;
    if (rng.below(50) == 0) v = 0.0f;
    if (rng.below(200) == 0) v = -0.0f;
  }
  // Row 0, block 0 all zeros (amax floor); row 1, block 0 tiny values (below the floor's scale).
  for (int k = 0; k < std::min(K, 128); ++k) {
    x[k] = 0.0f;
    if (M > 1) x[static_cast<size_t>(K) + k] = std::ldexp(static_cast<float>(k % 7) - 3.0f, -30);
  }
  return x;
}

TEST(Fp8Quantize, Bf16InputMatchesFp8RoundTripRowsBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const Shape& s : {Shape{7, 0, 1000}, Shape{33, 0, 4096}, Shape{2, 0, 32}}) {
    const int M = s.M, K = s.K, KB = (K + 127) / 128;
    const std::vector<float> xf = quantizer_input(M, K, 11 + K);
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) {
      const __nv_bfloat16 b = __float2bfloat16_rn(xf[i]);
      std::memcpy(&xb[i], &b, 2);
    }
    DeviceArray<uint16_t> dx(xb);
    DeviceArray<uint16_t> dy(xb.size());
    DeviceArray<uint8_t> codes(xb.size());
    DeviceArray<float> scales(static_cast<size_t>(M) * KB);
    const auto* x = reinterpret_cast<const bf16*>(dx.get());
    fp8_round_trip_rows(x, M, K, reinterpret_cast<bf16*>(dy.get()), nullptr);
    quantize_fp8_rows(x, M, K, codes.get(), scales.get(), nullptr);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto y = dy.download();
    const auto c = codes.download();
    const auto sc = scales.download();
    int failures = 0;
    for (int m = 0; m < M; ++m)
      for (int k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>(m) * K + k;
        const float got = static_cast<float>(decode_e4m3(c[i]) * sc[static_cast<size_t>(m) * KB + k / 128]);
        const uint32_t want_bits = static_cast<uint32_t>(y[i]) << 16;
        float want;
        std::memcpy(&want, &want_bits, 4);
        uint32_t got_bits;
        std::memcpy(&got_bits, &got, 4);
        if (got_bits != want_bits && ++failures <= 5)
          ADD_FAILURE() << "m " << m << " k " << k << ": " << got << " vs " << want << " (code " << int{c[i]} << ")";
      }
    EXPECT_EQ(failures, 0);
  }
}

TEST(Fp8Quantize, Fp32InputMatchesTheCpuRoundTripBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int M = 9, K = 1000, KB = (K + 127) / 128;
  const std::vector<float> x = quantizer_input(M, K, 5);
  DeviceArray<float> dx(x);
  DeviceArray<uint8_t> codes(x.size());
  DeviceArray<float> scales(static_cast<size_t>(M) * KB);
  quantize_fp8_rows(dx.get(), M, K, codes.get(), scales.get(), nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto c = codes.download();
  const auto sc = scales.download();
  std::vector<float> want = x;
  for (int m = 0; m < M; ++m) model::fp8_round_trip(want.data() + static_cast<size_t>(m) * K, K, 128);
  int failures = 0;
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      const size_t i = static_cast<size_t>(m) * K + k;
      const float got = static_cast<float>(decode_e4m3(c[i]) * sc[static_cast<size_t>(m) * KB + k / 128]);
      if (std::memcmp(&got, &want[i], 4) != 0 && ++failures <= 5)
        ADD_FAILURE() << "m " << m << " k " << k << ": " << got << " vs " << want[i];
    }
  EXPECT_EQ(failures, 0);
}

// --- The TMA + wgmma family (fp8_gemm.h `tma`): FP8 weights on native FP8 tensor cores. -----------
// Against the exact product with the same bound (the FP8 tensor core's own accumulation inside a
// block is the one inexact step, as above); its tiles bitwise equal to each other and a row alone
// equal to the same row in a big batch. Not compared bitwise with the mma.sync family (different
// tensor-core paths, see fp8_gemm.h).
std::vector<float> run_tma(const Problem& p, const DeviceProblem& d, int config, int M_override = -1, int row0 = 0) {
  const int M = M_override >= 0 ? M_override : p.M;
  DeviceArray<float> y(static_cast<size_t>(M) * p.N);
  const bool ran = tma::testing::gemm_with_config(config, d.a.get() + static_cast<size_t>(row0) * p.K,
                                                  d.sa.get() + static_cast<size_t>(row0) * p.KB(), M, p.K, d.w.get(),
                                                  d.sw.get(), p.N, y.get(), false, nullptr);
  EXPECT_TRUE(ran) << "the TMA FP8 GEMM refused M " << M << " N " << p.N << " K " << p.K << " on this device";
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

TEST(Fp8GemmTma, EveryTileMatchesTheReferenceAndTheOthersBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  double worst = 0.0;
  for (const Shape& s : {Shape{1, 256, 1024}, Shape{37, 130, 2048}, Shape{200, 384, 512}, Shape{9, 4096, 4096},
                         Shape{129, 1024, 256}}) {
    const Problem p = random_problem(false, s.M, s.N, s.K, 501 + s.N + s.K);
    const DeviceProblem d(p);
    const std::vector<float> want = run_tma(p, d, -1);
    worst = std::max(worst, check_against_reference(p, want, false, std::max(1, s.M / 8), kTolTensorCoreFp8));
    for (int config = 0; config < tma::testing::config_count(); ++config)
      EXPECT_TRUE(bitwise_equal(run_tma(p, d, config), want))
          << tma::testing::config_name(config) << " M " << s.M << " N " << s.N << " K " << s.K << " slices "
          << tma::testing::slice_count(s.N, s.K);
  }
  std::printf("[fp8_gemm] tma fp8: max |y - ref| / sum|terms| = %.3g (bound %.3g)\n", worst, kTolTensorCoreFp8);
}

TEST(Fp8GemmTma, RowsOfABigBatchEqualTheRowAlone) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const Shape& s : {Shape{700, 4096, 1024}, Shape{300, 512, 2048}}) {
    const Problem p = random_problem(false, s.M, s.N, s.K, 61 + s.M);
    const DeviceProblem d(p);
    const std::vector<float> big = run_tma(p, d, -1);
    for (int row : {0, 1, 63, 64, s.M / 2, s.M - 1}) {
      const std::vector<float> small = run_tma(p, d, -1, 1, row);
      const std::vector<float> want(big.begin() + static_cast<size_t>(row) * s.N,
                                    big.begin() + static_cast<size_t>(row + 1) * s.N);
      EXPECT_TRUE(bitwise_equal(small, want)) << "M " << s.M << " N " << s.N << " row " << row;
    }
  }
}

TEST(Fp8GemmTma, Bf16OutputIsTheRoundedFp32Output) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Problem p = random_problem(false, 70, 256, 1024, 9);
  const DeviceProblem d(p);
  const std::vector<float> f32 = run_tma(p, d, -1);
  DeviceArray<uint16_t> y(static_cast<size_t>(p.M) * p.N);
  EXPECT_TRUE(tma::gemm_fp8(d.a.get(), d.sa.get(), p.M, p.K, d.w.get(), d.sw.get(), p.N,
                            reinterpret_cast<bf16*>(y.get()), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = y.download();
  for (size_t i = 0; i < got.size(); ++i) {
    const __nv_bfloat16 want = __float2bfloat16_rn(f32[i]);
    uint16_t want_bits;
    std::memcpy(&want_bits, &want, 2);
    ASSERT_EQ(got[i], want_bits) << "element " << i;
  }
}

TEST(Fp8GemmTma, RefusesWhatItCannotRun) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Problem p = random_problem(false, 4, 256, 1056, 3);  // K % 128 != 0
  const DeviceProblem d(p);
  DeviceArray<float> y(static_cast<size_t>(p.M) * p.N);
  EXPECT_FALSE(tma::gemm_fp8(d.a.get(), d.sa.get(), p.M, p.K, d.w.get(), d.sw.get(), p.N, y.get(), nullptr));
}

}  // namespace
}  // namespace deepinfer::backend::cuda::fp8
