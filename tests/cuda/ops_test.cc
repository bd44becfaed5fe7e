// CUDA token-wise ops (backend/cuda/ops.h) against the CPU reference: CpuBackend for rms_norm,
// rope and the mHC ops; for embedding, SwiGLU, routing, permutation and combination, loops written
// here after DeepSeekV4::moe and the CpuBackend code. Random inputs at real sizes (D 4096, hc 4,
// 64 heads of 512 with 64 RoPE dims, E 256, K 6, inter 2048) and edge sizes (M = 1, 3, 257, odd
// widths, misaligned pointers, which take the kernels' scalar paths). Skipped without a CUDA device.
//
// Tolerances: fp32 results within a few ulps of the terms (different summation trees and fused
// multiply-adds); bf16 results within half a bf16 ulp of the CPU's fp32 value; exact where the op
// only moves or orders data (embedding, gather, permutation, routing ids, casts). Batch invariance
// and scalar-vs-vector paths are checked bitwise.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test_util.h"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/v4_kernels.h"
#include "io/dtype.h"
#include "model/numerics.h"
#include "model/topk.h"

namespace deepinfer::backend::cuda {
namespace {

// Device array of n T's at `offset` elements past a cudaMalloc'd base (offset 1 makes fp32 rows
// misaligned for 16-byte access). Filled with 0xff bytes (NaN for floats, -1 for ints) so that
// anything an op fails to write shows.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n, size_t offset = 0) : n_(n), offset_(offset) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, (n + offset) * sizeof(T) + 1));
    base_ = static_cast<T*>(p);
    CUDA_CHECK(cudaMemset(base_, 0xff, (n + offset) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host, size_t offset = 0) : DeviceBuffer(host.size(), offset) {
    upload(host);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(base_); }

  T* get() const { return base_ + offset_; }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_CHECK(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t n_, offset_;
  T* base_ = nullptr;
};

// bf16 data lives in uint16_t host vectors (io::f32_to_bf16 bits) and is handed to the ops as bf16.
bf16* as_bf16(const DeviceBuffer<uint16_t>& b) {
  return reinterpret_cast<bf16*>(b.get());
}

void sync() {
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

Backend& cpu() {
  static const std::unique_ptr<Backend> backend = make_cpu_backend();
  return *backend;
}

// The RoPE inverse frequencies of a rope_dim-wide rotation, theta 10000 (the tests' table).
std::vector<float> rope_inv_freq(int rope_dim) {
  std::vector<float> freq;
  for (int i = 0; i < rope_dim / 2; ++i)
    freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(rope_dim)));
  return freq;
}

std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<int> random_ints(size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(n);
  for (int& i : v) i = dist(rng);
  return v;
}

float bf16_value(uint16_t bits) {
  return io::bf16_to_f32(bits);
}

// |got - want| <= atol + rtol * |want| everywhere (NaN fails); reports the first offenders.
void expect_near(const std::vector<float>& got, const std::vector<float>& want, float rtol, float atol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i])) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " out of tolerance";
}

template <typename T>
bool same_bits(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

// ---------------------------------------------------------------------------------------------

TEST(CudaOps, ZeroRowsLaunchNothing) {
  SKIP_WITHOUT_CUDA_DEVICE();
  rms_norm(nullptr, 0, 4096, nullptr, 1e-6f, nullptr, nullptr, nullptr);
  hc_pre(nullptr, 0, 4, 4096, nullptr, nullptr, nullptr, 20, 1e-6f, 1e-6f, nullptr, nullptr, nullptr, nullptr, nullptr);
  hc_post(nullptr, nullptr, 0, 4, 4096, nullptr, nullptr, nullptr);
  moe_route(nullptr, 0, 256, 6, Scoring::kSqrtSoftplus, nullptr, nullptr, nullptr, 1.0f, nullptr, nullptr, nullptr);
  moe_permute(nullptr, nullptr, 0, 6, 256, nullptr, nullptr, nullptr, nullptr, nullptr);
  moe_combine(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 6, 4096, nullptr, nullptr);
  to_bf16(nullptr, 0, nullptr, nullptr);
  sync();
}

// ---------------------------------------------------------------------------------------------
// Embedding

TEST(CudaOps, EmbedCopiesTheRowIntoEveryStream) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, D, hc;
    size_t offset;
  };
  for (const Case& c : {Case{257, 4096, 4, 0}, Case{1, 4096, 4, 0}, Case{3, 7, 3, 0}, Case{5, 64, 2, 1}}) {
    const int vocab = 1000;
    std::vector<uint16_t> table(static_cast<size_t>(vocab) * c.D);
    const std::vector<float> values = random_floats(table.size(), -3.0f, 3.0f, 1);
    for (size_t i = 0; i < table.size(); ++i) table[i] = io::f32_to_bf16(values[i]);
    const std::vector<int> tokens = random_ints(c.T, 0, vocab - 1, 2);
    DeviceBuffer<uint16_t> d_table(table, c.offset);
    DeviceBuffer<int> d_tokens(tokens);
    DeviceBuffer<float> d_X(static_cast<size_t>(c.T) * c.hc * c.D, c.offset);
    embed(d_tokens.get(), c.T, as_bf16(d_table), c.D, c.hc, d_X.get(), nullptr);
    sync();
    const std::vector<float> X = d_X.download();
    std::vector<float> want(X.size());
    for (int t = 0; t < c.T; ++t)
      for (int s = 0; s < c.hc; ++s)
        for (int d = 0; d < c.D; ++d)
          want[(static_cast<size_t>(t) * c.hc + s) * c.D + d] =
              bf16_value(table[static_cast<size_t>(tokens[t]) * c.D + d]);
    EXPECT_TRUE(same_bits(X, want)) << "T " << c.T << " D " << c.D << " hc " << c.hc;
  }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

struct RmsCase {
  int M, n;
  bool weighted;
};

class CudaRmsNorm : public ::testing::TestWithParam<RmsCase> {};

TEST_P(CudaRmsNorm, MatchesCpuBackendInBothPrecisions) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RmsCase c = GetParam();
  const float eps = 1e-6f;
  const std::vector<float> x = random_floats(static_cast<size_t>(c.M) * c.n, -3.0f, 3.0f, c.M * 31 + c.n);
  const std::vector<float> w = random_floats(c.n, 0.25f, 2.0f, 7);
  std::vector<float> want(x.size());
  cpu().rms_norm(x.data(), c.M, c.n, c.weighted ? w.data() : nullptr, eps, want.data());

  DeviceBuffer<float> d_x(x), d_w(w), d_y(x.size());
  DeviceBuffer<uint16_t> d_yb(x.size());
  const float* wp = c.weighted ? d_w.get() : nullptr;
  rms_norm(d_x.get(), c.M, c.n, wp, eps, d_y.get(), as_bf16(d_yb), nullptr);
  sync();
  const std::vector<float> y = d_y.download();
  const std::vector<uint16_t> yb = d_yb.download();
  expect_near(y, want, 1e-5f, 1e-7f, "rms_norm fp32");
  // The bf16 output is the fp32 output rounded to nearest even, in the same call.
  size_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i) bad += yb[i] != io::f32_to_bf16(y[i]);
  EXPECT_EQ(bad, 0u) << "bf16 output differs from round(fp32 output)";

  // Misaligned input and outputs (scalar path) and only one output at a time: same bits.
  DeviceBuffer<float> d_x1(x, 1), d_w1(w, 1), d_y1(x.size(), 1);
  DeviceBuffer<uint16_t> d_yb1(x.size(), 1);
  rms_norm(d_x1.get(), c.M, c.n, c.weighted ? d_w1.get() : nullptr, eps, d_y1.get(), nullptr, nullptr);
  rms_norm(d_x1.get(), c.M, c.n, c.weighted ? d_w1.get() : nullptr, eps, nullptr, as_bf16(d_yb1), nullptr);
  sync();
  EXPECT_TRUE(same_bits(d_y1.download(), y)) << "scalar path differs from vector path";
  EXPECT_TRUE(same_bits(d_yb1.download(), yb));

  // In place (y_f32 == x) gives the same bits.
  rms_norm(d_x.get(), c.M, c.n, wp, eps, d_x.get(), nullptr, nullptr);
  sync();
  EXPECT_TRUE(same_bits(d_x.download(), y)) << "in place differs";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRmsNorm,
                         ::testing::Values(RmsCase{1, 16384, false}, RmsCase{257, 16384, false}, RmsCase{1, 4096, true},
                                           RmsCase{3, 4096, true}, RmsCase{257, 4096, true}, RmsCase{257, 1024, true},
                                           RmsCase{64, 512, true}, RmsCase{3, 7, true}, RmsCase{5, 33, false},
                                           RmsCase{2, 1, true}, RmsCase{1, 1001, true}),
                         [](const ::testing::TestParamInfo<RmsCase>& info) {
                           return "M" + std::to_string(info.param.M) + "_n" + std::to_string(info.param.n) +
                                  (info.param.weighted ? "_weight" : "_noweight");
                         });

TEST(CudaOps, RmsNormIsBatchInvariant) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int M = 257, n = 4096;
  const std::vector<float> x = random_floats(static_cast<size_t>(M) * n, -3.0f, 3.0f, 11);
  const std::vector<float> w = random_floats(n, 0.25f, 2.0f, 12);
  DeviceBuffer<float> d_x(x), d_w(w), d_y(x.size());
  rms_norm(d_x.get(), M, n, d_w.get(), 1e-6f, d_y.get(), nullptr, nullptr);
  sync();
  const std::vector<float> batch = d_y.download();
  for (int m : {0, 1, 100, 256}) {
    DeviceBuffer<float> d_row(std::vector<float>(x.begin() + static_cast<size_t>(m) * n, x.begin() + (m + 1) * n));
    DeviceBuffer<float> d_out(n);
    rms_norm(d_row.get(), 1, n, d_w.get(), 1e-6f, d_out.get(), nullptr, nullptr);
    sync();
    EXPECT_TRUE(same_bits(d_out.download().data(), batch.data() + static_cast<size_t>(m) * n, n)) << "row " << m;
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE

TEST(CudaOps, RopeMatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, heads, head_dim, rope_dim;
    size_t offset;
  };
  for (const Case& c : {Case{257, 64, 512, 64, 0}, Case{3, 1, 512, 64, 0}, Case{1, 64, 512, 64, 0}, Case{3, 3, 9, 4, 0},
                        Case{2, 2, 6, 6, 0}, Case{5, 4, 512, 64, 1}}) {
    for (const bool inverse : {false, true}) {
      RopeTable table;
      table.rope_dim = c.rope_dim;
      table.attention_factor = inverse ? 1.0f : 1.25f;
      table.inv_freq = rope_inv_freq(c.rope_dim);
      std::vector<int64_t> pos(c.M);
      std::mt19937 rng(c.M + c.heads);
      for (int64_t& p : pos) p = static_cast<int64_t>(rng() % 40000);
      pos[0] = 1000003;  // large angles: full range reduction on both sides
      const std::vector<float> x =
          random_floats(static_cast<size_t>(c.M) * c.heads * c.head_dim, -2.0f, 2.0f, c.head_dim);
      std::vector<float> want = x;
      cpu().rope(want.data(), c.M, c.heads, c.head_dim, pos.data(), table, inverse);

      DeviceBuffer<float> d_x(x, c.offset), d_freq(table.inv_freq);
      DeviceBuffer<int64_t> d_pos(pos);
      rope(d_x.get(), c.M, c.heads, c.head_dim, d_pos.get(), d_freq.get(), c.rope_dim, table.attention_factor, inverse,
           nullptr);
      sync();
      const std::vector<float> got = d_x.download();
      const std::string what = "rope M " + std::to_string(c.M) + " heads " + std::to_string(c.heads) + " head_dim " +
                               std::to_string(c.head_dim) + (inverse ? " inverse" : "");
      expect_near(got, want, 0.0f, 2e-5f, what);
      // Dims before the RoPE part are untouched.
      size_t moved = 0;
      for (size_t v = 0; v < x.size(); ++v)
        if (static_cast<int>(v % c.head_dim) < c.head_dim - c.rope_dim) moved += got[v] != x[v];
      EXPECT_EQ(moved, 0u) << what;
    }
  }
}

// rope_to_bf16 (the exact-numerics indexer queries) is rope then to_bf16, bit for bit, and leaves x alone.
TEST(CudaOps, RopeToBf16IsRopeThenCastBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, heads, head_dim, rope_dim;
    size_t offset;  // 1: unaligned rows (scalar loads and stores)
  };
  for (const Case& c : {Case{130, 64, 128, 64, 0}, Case{1, 64, 128, 64, 0}, Case{3, 1, 512, 64, 0},
                        Case{5, 3, 10, 4, 0}, Case{4, 2, 6, 6, 0}, Case{6, 64, 128, 64, 1}}) {
    const std::string what = "rope_to_bf16 M " + std::to_string(c.M) + " heads " + std::to_string(c.heads) +
                             " head_dim " + std::to_string(c.head_dim) + (c.offset ? " unaligned" : "");
    const size_t count = static_cast<size_t>(c.M) * c.heads * c.head_dim;
    const std::vector<float> x = random_floats(count, -3.0f, 3.0f, c.head_dim + c.M);
    const std::vector<float> freq = rope_inv_freq(c.rope_dim);
    std::vector<int64_t> pos(c.M);
    for (int t = 0; t < c.M; ++t) pos[t] = 53 * t + (t == 0 ? 1000003 : 0);
    DeviceBuffer<float> d_freq(freq), d_sep(x, c.offset), d_fused(x, c.offset);
    DeviceBuffer<int64_t> d_pos(pos);
    DeviceBuffer<uint16_t> d_sep_bf(count, c.offset), d_fused_bf(count, c.offset);
    rope(d_sep.get(), c.M, c.heads, c.head_dim, d_pos.get(), d_freq.get(), c.rope_dim, 1.25f, false, nullptr);
    to_bf16(d_sep.get(), count, as_bf16(d_sep_bf), nullptr);
    rope_to_bf16(d_fused.get(), c.M, c.heads, c.head_dim, d_pos.get(), d_freq.get(), c.rope_dim, 1.25f,
                 as_bf16(d_fused_bf), nullptr);
    sync();
    const std::vector<uint16_t> want = d_sep_bf.download(), got = d_fused_bf.download();
    size_t differ = 0;
    for (size_t i = 0; i < count; ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0u) << what;
    EXPECT_EQ(d_fused.download(), x) << what << ": x must be left unchanged";
  }
}

// norm_rope against its definition: rms_norm, (round_bf16), rope and to_bf16 run one after another
// on the GPU. The fused pass may contract the rotation's multiply-adds differently, so each output
// is within one bf16 ulp of the separate passes' (most are equal); a row's bits do not depend on M.
TEST(CudaOps, NormRopeIsTheSeparatePassesInOne) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, heads, n, rope_dim;
    bool weight, round_mid;
    size_t offset;  // 1: unaligned rows, the separate passes' fallback
  };
  for (const Case& c : {Case{130, 64, 512, 64, false, false, 0}, Case{3, 1, 512, 64, true, true, 0},
                        Case{7, 4, 256, 64, true, false, 0}, Case{5, 2, 70, 6, true, true, 0},
                        Case{4, 3, 512, 64, false, false, 1}}) {
    const std::string what = "norm_rope M " + std::to_string(c.M) + " heads " + std::to_string(c.heads) + " n " +
                             std::to_string(c.n) + (c.offset ? " unaligned" : "");
    const size_t count = static_cast<size_t>(c.M) * c.heads * c.n;
    const std::vector<float> x = random_floats(count, -3.0f, 3.0f, c.n + c.M);
    const std::vector<float> w = random_floats(c.n, 0.5f, 1.5f, 7);
    const std::vector<float> freq = rope_inv_freq(c.rope_dim);
    std::vector<int64_t> pos(c.M);
    for (int t = 0; t < c.M; ++t) pos[t] = 37 * t + (t == 0 ? 1000003 : 0);
    DeviceBuffer<float> d_w(w), d_freq(freq), d_sep(x, c.offset), d_fused(x, c.offset), d_f32(count, c.offset);
    DeviceBuffer<int64_t> d_pos(pos);
    DeviceBuffer<uint16_t> d_sep_bf(count, c.offset), d_fused_bf(count, c.offset);
    const float* weight = c.weight ? d_w.get() : nullptr;
    rms_norm(d_sep.get(), c.M * c.heads, c.n, weight, 1e-6f, d_sep.get(), nullptr, nullptr);
    if (c.round_mid) round_bf16(d_sep.get(), count, nullptr);
    rope(d_sep.get(), c.M, c.heads, c.n, d_pos.get(), d_freq.get(), c.rope_dim, 1.25f, false, nullptr);
    to_bf16(d_sep.get(), count, as_bf16(d_sep_bf), nullptr);
    norm_rope(d_fused.get(), c.M, c.heads, c.n, weight, 1e-6f, c.round_mid, d_pos.get(), d_freq.get(), c.rope_dim,
              1.25f, d_f32.get(), as_bf16(d_fused_bf), nullptr);
    sync();
    const std::vector<uint16_t> want = d_sep_bf.download(), got = d_fused_bf.download();
    const std::vector<float> want_f32 = d_sep.download(), got_f32 = d_f32.download();
    size_t equal = 0, off = 0;
    for (size_t i = 0; i < count; ++i) {
      equal += got[i] == want[i];
      const float g = bf16_value(got[i]), v = bf16_value(want[i]);
      if (std::fabs(g - v) > std::ldexp(std::fabs(v), -7) + 1e-6f && ++off <= 5)
        ADD_FAILURE() << what << " element " << i << ": fused " << g << " separate " << v;
      if (std::fabs(got_f32[i] - want_f32[i]) > 2e-6f * (1.0f + std::fabs(want_f32[i])) && ++off <= 5)
        ADD_FAILURE() << what << " fp32 element " << i << ": fused " << got_f32[i] << " separate " << want_f32[i];
    }
    EXPECT_EQ(off, 0u) << what;
    EXPECT_GE(static_cast<double>(equal), 0.99 * static_cast<double>(count)) << what;
    // Row bits alone == in the batch (the last token at M = 1).
    DeviceBuffer<float> d_one(std::vector<float>(x.end() - static_cast<long>(count / c.M), x.end()), c.offset);
    DeviceBuffer<int64_t> d_pos1(std::vector<int64_t>{pos.back()});
    DeviceBuffer<uint16_t> d_one_bf(count / c.M, c.offset);
    norm_rope(d_one.get(), 1, c.heads, c.n, weight, 1e-6f, c.round_mid, d_pos1.get(), d_freq.get(), c.rope_dim, 1.25f,
              nullptr, as_bf16(d_one_bf), nullptr);
    sync();
    const std::vector<uint16_t> one = d_one_bf.download();
    EXPECT_TRUE(std::equal(one.begin(), one.end(), got.end() - static_cast<long>(one.size()))) << what << ": alone";
  }
}

// greedy_rows: argmax with the lowest id on ties (a planted tie across parts), NaN never winning,
// an all -inf row -> token 0; log-probabilities within 1e-5 of a double reference; a row alone ==
// the same row in a batch, bit for bit.
TEST(CudaOps, GreedyRowsPartsMeetInAFixedOrder) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // 129280: 32 parts of 4040 ids (the register path); 140000: parts of 4375 (the loop path).
  for (int V : {7, 1024, 129280, 140000}) {
    const int R = 6;
    std::vector<float> x = random_floats(static_cast<size_t>(R) * V, -8.0f, 8.0f, V);
    if (V > 100) {
      x[static_cast<size_t>(1) * V + V - 3] = 30.0f;  // row 1: the same max near the end and the start
      x[static_cast<size_t>(1) * V + 2] = 30.0f;
      x[static_cast<size_t>(2) * V + 5] = std::nanf("");  // row 2: a NaN never wins
    }
    for (int v = 0; v < V; ++v) x[static_cast<size_t>(3) * V + v] = -INFINITY;  // row 3: all -inf
    DeviceBuffer<float> d_x(x), d_lp(R);
    DeviceBuffer<int32_t> d_tok(R);
    DeviceBuffer<unsigned char> d_ws(greedy_workspace_bytes(R, V));
    greedy_rows(d_x.get(), R, V, d_tok.get(), d_lp.get(), d_ws.get(), nullptr);
    sync();
    const std::vector<int32_t> tok = d_tok.download();
    const std::vector<float> lp = d_lp.download();
    for (int r = 0; r < R; ++r) {
      const float* row = &x[static_cast<size_t>(r) * V];
      int best = -1;
      for (int v = 0; v < V; ++v)
        if (!std::isnan(row[v]) && row[v] > -INFINITY && (best < 0 || row[v] > row[best])) best = v;
      if (best < 0) {
        EXPECT_EQ(tok[r], 0) << "V " << V << " row " << r;
        continue;
      }
      EXPECT_EQ(tok[r], best) << "V " << V << " row " << r;
      double sum = 0.0;
      for (int v = 0; v < V; ++v)
        if (!std::isnan(row[v])) sum += std::exp(static_cast<double>(row[v]) - row[best]);
      if (r != 2 || V < 100) {  // (a NaN in the row makes its sum NaN, as before)
        EXPECT_NEAR(lp[r], -std::log(sum), 1e-5) << "V " << V << " row " << r;
      }
    }
    if (V > 100) {
      EXPECT_EQ(tok[1], 2);
    }
    DeviceBuffer<float> d_one(std::vector<float>(x.begin() + static_cast<long>(4) * V, x.begin() + static_cast<long>(5) * V));
    DeviceBuffer<float> d_lp1(1);
    DeviceBuffer<int32_t> d_tok1(1);
    greedy_rows(d_one.get(), 1, V, d_tok1.get(), d_lp1.get(), d_ws.get(), nullptr);
    sync();
    EXPECT_EQ(d_tok1.download()[0], tok[4]) << "V " << V;
    EXPECT_TRUE(same_bits(d_lp1.download().data(), lp.data() + 4, 1)) << "V " << V << ": alone vs in a batch";
  }
}

// rope_inverse_split_groups against rope(inverse) then split_groups: bitwise (one rotation,
// rope_common.cuh), o untouched; a row alone == in the batch; shapes it does not take are refused
// without launching.
TEST(CudaOps, RopeInverseSplitGroupsIsTheTwoPassesInOne) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, H, hd, rope_dim, G;
  };
  for (const Case& c : {Case{130, 64, 512, 64, 8}, Case{1, 4, 256, 64, 2}, Case{5, 3, 64, 16, 3}}) {
    const std::string what = "T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " hd " + std::to_string(c.hd);
    const size_t count = static_cast<size_t>(c.T) * c.H * c.hd;
    const std::vector<float> o = random_floats(count, -2.0f, 2.0f, c.T + c.hd);
    const std::vector<float> freq = rope_inv_freq(c.rope_dim);
    std::vector<int64_t> pos(c.T);
    for (int t = 0; t < c.T; ++t) pos[t] = 53 * t + (t == 0 ? 777777 : 0);
    DeviceBuffer<float> d_o(o), d_two(o), d_freq(freq);
    DeviceBuffer<int64_t> d_pos(pos);
    DeviceBuffer<uint16_t> d_fused(count), d_ref(count);
    ASSERT_TRUE(rope_inverse_split_groups(d_o.get(), c.T, c.H, c.hd, d_pos.get(), d_freq.get(), c.rope_dim, 1.25f, c.G,
                                          as_bf16(d_fused), nullptr)) << what;
    rope(d_two.get(), c.T, c.H, c.hd, d_pos.get(), d_freq.get(), c.rope_dim, 1.25f, true, nullptr);
    split_groups(d_two.get(), c.T, c.G, c.H * c.hd / c.G, as_bf16(d_ref), nullptr);
    sync();
    const std::vector<uint16_t> got = d_fused.download(), want = d_ref.download();
    EXPECT_TRUE(same_bits(d_o.download(), o)) << what << ": o was modified";
    size_t off = 0;
    for (size_t i = 0; i < count; ++i)
      if (got[i] != want[i] && ++off <= 5)
        ADD_FAILURE() << what << " element " << i << ": fused " << bf16_value(got[i]) << " two passes "
                      << bf16_value(want[i]);
    EXPECT_EQ(off, 0u) << what;
    // The last token alone: its row of every group equals the batch's.
    const size_t row = static_cast<size_t>(c.H) * c.hd, gw = row / c.G;
    DeviceBuffer<float> d_one(std::vector<float>(o.end() - static_cast<long>(row), o.end()));
    DeviceBuffer<int64_t> d_pos1(std::vector<int64_t>{pos.back()});
    DeviceBuffer<uint16_t> d_one_bf(row);
    ASSERT_TRUE(rope_inverse_split_groups(d_one.get(), 1, c.H, c.hd, d_pos1.get(), d_freq.get(), c.rope_dim, 1.25f, c.G,
                                          as_bf16(d_one_bf), nullptr));
    sync();
    const std::vector<uint16_t> one = d_one_bf.download();
    for (int g = 0; g < c.G; ++g)
      EXPECT_TRUE(std::equal(one.begin() + static_cast<long>(g * gw), one.begin() + static_cast<long>((g + 1) * gw),
                             got.begin() + static_cast<long>((static_cast<size_t>(g) * c.T + c.T - 1) * gw)))
          << what << " group " << g << ": alone";
  }
  DeviceBuffer<float> d_odd(static_cast<size_t>(2 * 3 * 6)), d_freq(std::vector<float>{1.0f});
  DeviceBuffer<int64_t> d_pos(std::vector<int64_t>{0, 1});
  DeviceBuffer<uint16_t> d_out(static_cast<size_t>(2 * 3 * 6));
  EXPECT_FALSE(rope_inverse_split_groups(d_odd.get(), 2, 3, 6, d_pos.get(), d_freq.get(), 2, 1.0f, 3, as_bf16(d_out),
                                         nullptr));
}

// ---------------------------------------------------------------------------------------------
// mHC

struct HcData {
  int hc, D;
  model::HyperConnWeights w;
  std::vector<float> X;
};

// fn scaled so that the mixes are O(1), as trained weights make them.
HcData make_hc_data(int M, int hc, int D, int nmix, unsigned seed) {
  HcData d{hc, D, {}, {}};
  const int width = hc * D;
  d.w.fn.rows = nmix;
  d.w.fn.cols = width;
  d.w.fn.data = random_floats(static_cast<size_t>(nmix) * width, -1.0f, 1.0f, seed);
  const float s = 2.0f / std::sqrt(static_cast<float>(width));
  for (float& f : d.w.fn.data) f *= s;
  d.w.base = random_floats(nmix, -1.0f, 1.0f, seed + 1);
  d.w.scale = random_floats(3, 0.5f, 2.0f, seed + 2);
  d.X = random_floats(static_cast<size_t>(M) * width, -2.0f, 2.0f, seed + 3);
  return d;
}

struct HcOut {
  std::vector<float> collapsed, post, comb;
};

HcOut run_hc_pre(const HcData& d, int M, int iters, size_t offset = 0) {
  DeviceBuffer<float> d_X(d.X, offset), d_fn(d.w.fn.data, offset), d_base(d.w.base), d_scale(d.w.scale);
  DeviceBuffer<float> d_col(static_cast<size_t>(M) * d.D, offset), d_post(static_cast<size_t>(M) * d.hc);
  DeviceBuffer<float> d_comb(static_cast<size_t>(M) * d.hc * d.hc);
  DeviceBuffer<float> d_ws(hc_workspace_bytes(M, d.hc, d.D, false) / sizeof(float));
  hc_pre(d_X.get(), M, d.hc, d.D, d_fn.get(), d_base.get(), d_scale.get(), iters, 1e-6f, 1e-6f, d_col.get(),
         d_post.get(), d_comb.get(), d_ws.get(), nullptr);
  sync();
  return {d_col.download(), d_post.download(), d_comb.download()};
}

TEST(CudaOps, HcPreMatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, hc, D, iters;
  };
  for (const Case& c : {Case{1, 4, 4096, 20}, Case{3, 4, 4096, 20}, Case{257, 4, 4096, 20}, Case{3, 3, 7, 20},
                        Case{2, 8, 64, 20}, Case{130, 2, 33, 5}, Case{2, 1, 4096, 1}}) {
    const std::string what =
        "hc_pre M " + std::to_string(c.M) + " hc " + std::to_string(c.hc) + " D " + std::to_string(c.D);
    const HcData d = make_hc_data(c.M, c.hc, c.D, (2 + c.hc) * c.hc, c.M + c.hc * 100 + c.D);
    std::vector<float> want_col(static_cast<size_t>(c.M) * c.D);
    HcMix want_mix;
    cpu().hc_pre(d.X.data(), c.M, c.hc, c.D, d.w, c.iters, 1e-6f, 1e-6f, want_col.data(), &want_mix);
    const HcOut got = run_hc_pre(d, c.M, c.iters);
    expect_near(got.collapsed, want_col, 1e-4f, 1e-4f, what + " collapsed");
    expect_near(got.post, want_mix.post, 1e-4f, 1e-5f, what + " post");
    expect_near(got.comb, want_mix.comb, 1e-4f, 1e-5f, what + " comb");
  }
}

// The dots run on the tensor cores as 3xTF32: they must keep fp32's accuracy, not TF32's. post is
// 2 sigmoid(mix scale + base), checked against the mixes in double: a 3xTF32 dot is off by ~1e-7
// here, a plain TF32 one by ~5e-4.
TEST(CudaOps, HcPreMixesKeepFp32Accuracy) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int hc = 4, D = 4096, W = hc * D, nmix = (2 + hc) * hc;
  for (int M : {5, 40, 600}) {  // one m16 tile a warp, two, two in 2-step batches (prefill)
    const HcData d = make_hc_data(M, hc, D, nmix, 70 + M);
    const HcOut got = run_hc_pre(d, M, 20);
    std::vector<float> want(static_cast<size_t>(M) * hc);
    for (int m = 0; m < M; ++m) {
      const float* x = d.X.data() + static_cast<size_t>(m) * W;
      double ss = 0.0;
      for (int i = 0; i < W; ++i) ss += static_cast<double>(x[i]) * x[i];
      const double r = 1.0 / std::sqrt(ss / W + 1e-6);
      for (int j = 0; j < hc; ++j) {
        const float* f = d.w.fn.data.data() + static_cast<size_t>(hc + j) * W;
        double dot = 0.0;
        for (int i = 0; i < W; ++i) dot += static_cast<double>(f[i]) * x[i];
        const double z = dot * r * d.w.scale[1] + d.w.base[hc + j];
        want[static_cast<size_t>(m) * hc + j] = static_cast<float>(2.0 / (1.0 + std::exp(-z)));
      }
    }
    expect_near(got.post, want, 0.0f, 2e-6f, "hc_pre post against double, M " + std::to_string(M));
  }
}

TEST(CudaOps, HcPreIsBatchInvariantAndPathInvariant) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int M = 257, hc = 4, D = 4096, W = hc * D;
  HcData d = make_hc_data(M, hc, D, (2 + hc) * hc, 5);
  const HcOut batch = run_hc_pre(d, M, 20);  // several tokens per cluster
  HcData one = d;
  for (int m : {0, 1, 128, 256}) {
    one.X.assign(d.X.begin() + static_cast<size_t>(m) * W, d.X.begin() + static_cast<size_t>(m + 1) * W);
    const HcOut alone = run_hc_pre(one, 1, 20);  // one token per cluster
    EXPECT_TRUE(same_bits(alone.collapsed.data(), batch.collapsed.data() + static_cast<size_t>(m) * D, D)) << m;
    EXPECT_TRUE(same_bits(alone.post.data(), batch.post.data() + static_cast<size_t>(m) * hc, hc)) << m;
    EXPECT_TRUE(same_bits(alone.comb.data(), batch.comb.data() + static_cast<size_t>(m) * hc * hc, hc * hc)) << m;
  }
  // Misaligned X, fn and output: the scalar path gives the same bits.
  const HcOut scalar = run_hc_pre(d, M, 20, 1);
  EXPECT_TRUE(same_bits(scalar.collapsed, batch.collapsed));
  EXPECT_TRUE(same_bits(scalar.post, batch.post));
  EXPECT_TRUE(same_bits(scalar.comb, batch.comb));
}

// Prefill-sized: each CTA runs several 32-token tiles over its staged fn range (2049 tokens = 65
// tiles on ~17 CTAs per range); a token's bits are still its bits alone.
TEST(CudaOps, HcPreOverManyTokenTilesIsBatchInvariant) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int M = 2049, hc = 4, D = 4096, W = hc * D;
  HcData d = make_hc_data(M, hc, D, (2 + hc) * hc, 11);
  const HcOut batch = run_hc_pre(d, M, 20);
  HcData one = d;
  for (int m : {0, 31, 32, 1000, 1087, 2048}) {
    one.X.assign(d.X.begin() + static_cast<size_t>(m) * W, d.X.begin() + static_cast<size_t>(m + 1) * W);
    const HcOut alone = run_hc_pre(one, 1, 20);
    EXPECT_TRUE(same_bits(alone.collapsed.data(), batch.collapsed.data() + static_cast<size_t>(m) * D, D)) << m;
    EXPECT_TRUE(same_bits(alone.post.data(), batch.post.data() + static_cast<size_t>(m) * hc, hc)) << m;
    EXPECT_TRUE(same_bits(alone.comb.data(), batch.comb.data() + static_cast<size_t>(m) * hc * hc, hc * hc)) << m;
  }
  std::vector<float> want_col(static_cast<size_t>(M) * D);
  HcMix want_mix;
  cpu().hc_pre(d.X.data(), M, hc, D, d.w, 20, 1e-6f, 1e-6f, want_col.data(), &want_mix);
  expect_near(batch.collapsed, want_col, 1e-4f, 1e-4f, "hc_pre M 2049 collapsed");
  expect_near(batch.comb, want_mix.comb, 1e-4f, 1e-5f, "hc_pre M 2049 comb");
}

TEST(CudaOps, HcPostMatchesCpuBackendAndIsBatchInvariant) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, hc, D;
    size_t offset;
  };
  for (const Case& c :
       {Case{1, 4, 4096, 0}, Case{257, 4, 4096, 0}, Case{3, 3, 7, 0}, Case{2, 8, 33, 0}, Case{3, 4, 4096, 1}}) {
    const std::string what = "hc_post M " + std::to_string(c.M) + " hc " + std::to_string(c.hc) + " D " +
                             std::to_string(c.D) + " offset " + std::to_string(c.offset);
    const size_t width = static_cast<size_t>(c.hc) * c.D;
    const std::vector<float> X = random_floats(c.M * width, -2.0f, 2.0f, 21);
    const std::vector<float> o = random_floats(static_cast<size_t>(c.M) * c.D, -2.0f, 2.0f, 22);
    HcMix mix;
    mix.post = random_floats(static_cast<size_t>(c.M) * c.hc, 0.0f, 2.0f, 23);
    mix.comb = random_floats(static_cast<size_t>(c.M) * c.hc * c.hc, 0.0f, 1.0f, 24);
    std::vector<float> want = X;
    cpu().hc_post(want.data(), o.data(), c.M, c.hc, c.D, mix);

    DeviceBuffer<float> d_X(X, c.offset), d_o(o, c.offset), d_post(mix.post), d_comb(mix.comb);
    hc_post(d_X.get(), d_o.get(), c.M, c.hc, c.D, d_post.get(), d_comb.get(), nullptr);
    sync();
    const std::vector<float> got = d_X.download();
    // Up to hc + 1 terms of magnitude <= 4 that may cancel: a few ulps of the largest term.
    expect_near(got, want, 1e-6f, 2e-5f, what);
    if (c.M > 1) {  // last row alone
      const int m = c.M - 1;
      DeviceBuffer<float> d_X1(std::vector<float>(X.begin() + m * width, X.end()));
      DeviceBuffer<float> d_o1(std::vector<float>(o.begin() + static_cast<size_t>(m) * c.D, o.end()));
      DeviceBuffer<float> d_post1(std::vector<float>(mix.post.begin() + m * c.hc, mix.post.end()));
      DeviceBuffer<float> d_comb1(std::vector<float>(mix.comb.begin() + m * c.hc * c.hc, mix.comb.end()));
      hc_post(d_X1.get(), d_o1.get(), 1, c.hc, c.D, d_post1.get(), d_comb1.get(), nullptr);
      sync();
      EXPECT_TRUE(same_bits(d_X1.download().data(), got.data() + m * width, width)) << what;
    }
  }
}

TEST(CudaOps, HcHeadMatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, hc, D;
    std::vector<int> rows;
  };
  for (const Case& c : {Case{6, 4, 4096, {5, 0, 2}}, Case{1, 4, 4096, {0}}, Case{4, 3, 7, {3, 3, 1}},
                        Case{200, 4, 64, std::vector<int>(150, 0)}}) {
    const std::string what = "hc_head hc " + std::to_string(c.hc) + " D " + std::to_string(c.D);
    const int R = static_cast<int>(c.rows.size()), width = c.hc * c.D;
    std::vector<int> rows = c.rows;
    if (R == 150) std::iota(rows.begin(), rows.end(), 25);
    const HcData d = make_hc_data(c.M, c.hc, c.D, c.hc, 31 + c.D);
    std::vector<float> picked;
    for (int r : rows)
      picked.insert(picked.end(), d.X.begin() + static_cast<size_t>(r) * width,
                    d.X.begin() + static_cast<size_t>(r + 1) * width);
    std::vector<float> want(static_cast<size_t>(R) * c.D);
    cpu().hc_head(picked.data(), R, c.hc, c.D, d.w.fn, d.w.base.data(), d.w.scale.data(), 1e-6f, 1e-6f, want.data());

    DeviceBuffer<float> d_X(d.X), d_fn(d.w.fn.data), d_base(d.w.base), d_scale(d.w.scale), d_out(want.size());
    DeviceBuffer<int> d_rows(rows);
    DeviceBuffer<float> d_ws(hc_workspace_bytes(R, c.hc, c.D, true) / sizeof(float));
    hc_head(d_X.get(), d_rows.get(), R, c.hc, c.D, d_fn.get(), d_base.get(), d_scale.get(), 1e-6f, 1e-6f, d_out.get(),
            d_ws.get(), nullptr);
    sync();
    expect_near(d_out.download(), want, 1e-4f, 1e-4f, what);
  }
}

// The norm after the collapse (HcNorm), fused into hc_pre / hc_head at D > 2048 and as separate
// passes below: the same bits as the collapse, (release) round_bf16 and rms_norm run in turn, for
// the collapsed rows and the normed bf16 rows, alone or in a batch, on aligned and unaligned buffers.
// With discard_collapsed the normed rows are the same, and where the norm is fused at more than 256
// rows (hc_finish's loop form) the collapsed rows are not written.
TEST(CudaOps, HcNormIsTheCollapseThenRoundThenRmsNorm) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, hc, D;
    bool head, round;
    size_t offset;
  };
  for (const Case& c : {Case{257, 4, 4096, false, false, 0}, Case{257, 4, 4096, false, true, 0},
                        Case{3, 4, 4096, false, true, 1}, Case{37, 4, 7168, false, true, 0},
                        Case{5, 4, 512, false, true, 0}, Case{9, 4, 4096, true, true, 0},
                        Case{4, 4, 4096, true, false, 1}, Case{6, 3, 100, true, true, 0}}) {
    const std::string what = std::string(c.head ? "hc_head" : "hc_pre") + " M " + std::to_string(c.M) + " D " +
                             std::to_string(c.D) + (c.round ? " round" : "") + (c.offset ? " unaligned" : "");
    const int nmix = c.head ? c.hc : (2 + c.hc) * c.hc;
    const HcData d = make_hc_data(c.M, c.hc, c.D, nmix, 7 * c.M + c.D);
    const std::vector<float> weight = random_floats(static_cast<size_t>(c.D), 0.5f, 1.5f, 3 + c.D);
    std::vector<int> rows(static_cast<size_t>(c.M));
    for (int r = 0; r < c.M; ++r) rows[static_cast<size_t>(r)] = (c.M - 1 - r + 2) % c.M;  // a permutation
    // Runs the collapse for tokens [first, first + M) with the norm fused (norm) or as the passes.
    auto run = [&](int first, int M, bool fused, bool discard = false) {
      const size_t W = static_cast<size_t>(c.hc) * c.D;
      std::vector<float> X(d.X.begin() + static_cast<long>(first * W), d.X.begin() + static_cast<long>((first + M) * W));
      std::vector<int> r(rows.begin() + first, rows.begin() + first + M);
      if (c.head)
        for (int& v : r) v = v % M;
      DeviceBuffer<float> d_X(X, c.offset), d_fn(d.w.fn.data, c.offset), d_base(d.w.base), d_scale(d.w.scale);
      DeviceBuffer<float> d_w(weight, c.offset), d_col(static_cast<size_t>(M) * c.D, c.offset);
      DeviceBuffer<float> d_post(static_cast<size_t>(M) * c.hc), d_comb(static_cast<size_t>(M) * c.hc * c.hc);
      DeviceBuffer<uint16_t> d_normed(static_cast<size_t>(M) * c.D, c.offset);
      DeviceBuffer<int> d_rows(r);
      DeviceBuffer<float> d_ws(hc_workspace_bytes(M, c.hc, c.D, c.head) / sizeof(float));
      const HcNorm norm{d_w.get(), 1e-6f, c.round, as_bf16(d_normed), discard};
      const HcNorm* arg = fused ? &norm : nullptr;
      if (c.head)
        hc_head(d_X.get(), d_rows.get(), M, c.hc, c.D, d_fn.get(), d_base.get(), d_scale.get(), 1e-6f, 1e-6f,
                d_col.get(), d_ws.get(), nullptr, arg);
      else
        hc_pre(d_X.get(), M, c.hc, c.D, d_fn.get(), d_base.get(), d_scale.get(), 20, 1e-6f, 1e-6f, d_col.get(),
               d_post.get(), d_comb.get(), d_ws.get(), nullptr, arg);
      if (!fused) {
        if (c.round) round_bf16(d_col.get(), static_cast<size_t>(M) * c.D, nullptr);
        rms_norm(d_col.get(), M, c.D, d_w.get(), 1e-6f, nullptr, as_bf16(d_normed), nullptr);
      }
      sync();
      return std::make_pair(d_col.download(), d_normed.download());
    };
    const auto passes = run(0, c.M, false);
    const auto fused = run(0, c.M, true);
    const auto discarded = run(0, c.M, true, true);
    EXPECT_TRUE(discarded.second == passes.second) << what << ": normed, collapsed rows discarded";
    if (c.D > 2048 && c.M > 256) {  // fused, loop form: the collapsed buffer keeps its 0xff fill
      EXPECT_TRUE(std::all_of(discarded.first.begin(), discarded.first.end(),
                              [](float v) { return std::bit_cast<uint32_t>(v) == 0xffffffffu; }))
          << what << ": collapsed rows written although discarded";
    } else {
      EXPECT_TRUE(same_bits(discarded.first, passes.first)) << what << ": collapsed";
    }
    EXPECT_TRUE(same_bits(fused.first, passes.first)) << what << ": collapsed";
    EXPECT_TRUE(std::equal(fused.second.begin(), fused.second.end(), passes.second.begin())) << what << ": normed";
    if (!c.head && c.M > 1) {  // a token alone: the same bits as in the batch
      const int m = c.M / 2;
      const auto alone = run(m, 1, true);
      EXPECT_TRUE(std::equal(alone.second.begin(), alone.second.end(),
                             fused.second.begin() + static_cast<long>(m) * c.D))
          << what << ": token " << m << " alone";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

TEST(CudaOps, SwigluMatchesTheReleaseExpertStep) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, inter;
    bool weighted;
    size_t offset;
  };
  const float limit = 7.0f;
  for (const Case& c : {Case{257, 2048, false, 0}, Case{1, 2048, true, 0}, Case{257, 2048, true, 0},
                        Case{3, 5, true, 0}, Case{4, 2048, false, 1}}) {
    const std::string what = "swiglu M " + std::to_string(c.M) + " inter " + std::to_string(c.inter);
    const std::vector<float> gu = random_floats(static_cast<size_t>(c.M) * 2 * c.inter, -10.0f, 10.0f, c.inter);
    const std::vector<float> rw = random_floats(c.M, 0.0f, 1.0f, 3);
    std::vector<float> want(static_cast<size_t>(c.M) * c.inter);  // fp32, before the bf16 rounding
    for (int m = 0; m < c.M; ++m)
      for (int i = 0; i < c.inter; ++i) {
        const float g = gu[static_cast<size_t>(m) * 2 * c.inter + i];
        const float u = gu[static_cast<size_t>(m) * 2 * c.inter + c.inter + i];
        const float gate = std::min(g, limit), up = std::clamp(u, -limit, limit);
        want[static_cast<size_t>(m) * c.inter + i] =
            (gate / (1.0f + std::exp(-gate))) * up * (c.weighted ? rw[m] : 1.0f);
      }
    DeviceBuffer<float> d_gu(gu), d_rw(rw);
    DeviceBuffer<uint16_t> d_out(want.size(), c.offset);
    swiglu(d_gu.get(), c.M, c.inter, limit, c.weighted ? d_rw.get() : nullptr, as_bf16(d_out), nullptr);
    sync();
    const std::vector<uint16_t> out = d_out.download();
    std::vector<float> got(out.size());
    size_t same = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      got[i] = bf16_value(out[i]);
      same += out[i] == io::f32_to_bf16(want[i]);
    }
    expect_near(got, want, 1.0f / 256 + 1e-6f, 1e-30f, what);  // within half a bf16 ulp (+ fp32 noise)
    EXPECT_GE(same, out.size() * 99 / 100) << what << ": bf16 bits equal to the CPU's rounding";
  }
}

// ---------------------------------------------------------------------------------------------
// MoE routing

struct Routing {
  std::vector<int> sel;
  std::vector<float> w;
  std::vector<bool> ambiguous;  // learned routing: a CPU near-tie (not an exact tie) at the selection
};

// DeepSeekV4::moe's routing loop.
Routing route_ref(const std::vector<float>& logits, int T, int E, int K, Scoring scoring,
                  const std::vector<float>& bias, const std::vector<int>& tid2eid, const std::vector<int>& tokens,
                  float routed_scale) {
  Routing r{std::vector<int>(static_cast<size_t>(T) * K), std::vector<float>(static_cast<size_t>(T) * K),
            std::vector<bool>(T, false)};
  std::vector<float> s(E), biased(E);
  for (int t = 0; t < T; ++t) {
    const float* lg = &logits[static_cast<size_t>(t) * E];
    switch (scoring) {
      case Scoring::kSqrtSoftplus:
        for (int e = 0; e < E; ++e) s[e] = std::sqrt(lg[e] > 20.0f ? lg[e] : std::log1p(std::exp(lg[e])));
        break;
      case Scoring::kSigmoid:
        for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-lg[e]));
        break;
      case Scoring::kSoftmax: {
        const float mx = *std::max_element(lg, lg + E);
        float sum = 0.0f;
        for (int e = 0; e < E; ++e) sum += (s[e] = std::exp(lg[e] - mx));
        for (int e = 0; e < E; ++e) s[e] /= sum;
        break;
      }
    }
    int* idx = &r.sel[static_cast<size_t>(t) * K];
    if (!tid2eid.empty()) {
      for (int k = 0; k < K; ++k) idx[k] = tid2eid[static_cast<size_t>(tokens[t]) * K + k];
    } else {
      for (int e = 0; e < E; ++e) biased[e] = s[e] + bias[e];
      const std::vector<int> top = model::topk_indices(biased.data(), E, K + 1);
      for (int k = 0; k < K; ++k) idx[k] = top[k];
      // Adjacent ranks (including the first unselected one) within a few times the GPU's score
      // noise (expf, summation order: ~1e-7 relative), yet not an exact tie of identical inputs,
      // could legitimately swap on the GPU. These inputs have at most one such token per case.
      for (int k = 0; k + 1 < static_cast<int>(top.size()); ++k) {
        const int a = top[k], b = top[k + 1];
        const float gap = biased[a] - biased[b];
        const bool identical = lg[a] == lg[b] && bias[a] == bias[b];
        if (!identical && gap <= 2e-6f * (std::abs(biased[a]) + std::abs(biased[b]))) r.ambiguous[t] = true;
      }
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += s[idx[k]];
    for (int k = 0; k < K; ++k) r.w[static_cast<size_t>(t) * K + k] = s[idx[k]] / (sum + 1e-20f) * routed_scale;
  }
  return r;
}

Routing route_gpu(const std::vector<float>& logits, int T, int E, int K, Scoring scoring,
                  const std::vector<float>& bias, const std::vector<int>& tid2eid, const std::vector<int>& tokens,
                  float routed_scale) {
  DeviceBuffer<float> d_logits(logits), d_bias(bias);
  DeviceBuffer<int> d_tid2eid(tid2eid), d_tokens(tokens), d_sel(static_cast<size_t>(T) * K);
  DeviceBuffer<float> d_w(static_cast<size_t>(T) * K);
  moe_route(d_logits.get(), T, E, K, scoring, d_bias.get(), tid2eid.empty() ? nullptr : d_tid2eid.get(), d_tokens.get(),
            routed_scale, d_sel.get(), d_w.get(), nullptr);
  sync();
  return {d_sel.download(), d_w.download(), {}};
}

void expect_same_routing(const Routing& got, const Routing& want, int T, int K, const std::string& what) {
  int ambiguous = 0, wrong = 0;
  std::vector<float> gw, ww;
  for (int t = 0; t < T; ++t) {
    if (!want.ambiguous.empty() && want.ambiguous[t]) {
      ++ambiguous;
      continue;
    }
    for (int k = 0; k < K; ++k) {
      const size_t i = static_cast<size_t>(t) * K + k;
      if (got.sel[i] != want.sel[i] && ++wrong <= 5)
        ADD_FAILURE() << what << " token " << t << " slot " << k << ": expert " << got.sel[i] << ", want "
                      << want.sel[i];
      gw.push_back(got.w[i]);
      ww.push_back(want.w[i]);
    }
  }
  EXPECT_EQ(wrong, 0) << what;
  EXPECT_LE(ambiguous, T / 50 + 1) << what << ": too many near-ties to be a meaningful test";
  expect_near(gw, ww, 1e-5f, 1e-7f, what + " weights");
}

TEST(CudaOps, MoeRouteLearnedMatchesCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, E, K;
    Scoring scoring;
  };
  for (const Case& c : {Case{257, 256, 6, Scoring::kSqrtSoftplus}, Case{1, 256, 6, Scoring::kSqrtSoftplus},
                        Case{3, 256, 6, Scoring::kSigmoid}, Case{257, 256, 6, Scoring::kSoftmax},
                        Case{4096, 32, 6, Scoring::kSqrtSoftplus}, Case{33, 37, 5, Scoring::kSigmoid},
                        Case{65, 1024, 16, Scoring::kSoftmax}, Case{5, 8, 8, Scoring::kSqrtSoftplus}}) {
    const std::string what = "route T " + std::to_string(c.T) + " E " + std::to_string(c.E) + " K " +
                             std::to_string(c.K) + " scoring " + std::to_string(static_cast<int>(c.scoring));
    std::vector<float> logits = random_floats(static_cast<size_t>(c.T) * c.E, -6.0f, 6.0f, c.T + c.E);
    logits[0] = 25.0f;  // the softplus(x) = x branch
    // The bias is big enough to change selections (the weights still use the unbiased score).
    const std::vector<float> bias = random_floats(c.E, -0.3f, 0.3f, c.E);
    const Routing want = route_ref(logits, c.T, c.E, c.K, c.scoring, bias, {}, {}, 2.5f);
    const Routing got = route_gpu(logits, c.T, c.E, c.K, c.scoring, bias, {}, {}, 2.5f);
    expect_same_routing(got, want, c.T, c.K, what);
  }
}

TEST(CudaOps, MoeRouteBreaksTiesTowardTheLowerId) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int E = 256, K = 6, T = 4;
  std::vector<float> logits = random_floats(static_cast<size_t>(T) * E, -6.0f, 0.0f, 77);
  std::vector<float> bias(E, 0.0f);
  // Token 0: eight experts share the top score: the six lowest ids win, in ascending order.
  for (int e : {42, 7, 41, 3, 9, 40, 20, 21}) logits[e] = 2.0f;
  // Token 1: every expert ties (but expert 5, whose bias is -10: see token 3).
  std::fill(logits.begin() + E, logits.begin() + 2 * E, 0.5f);
  // Token 2: four clear winners, then a tie across the selection boundary among 200, 50, 100.
  float* l2 = &logits[2 * E];
  l2[10] = 5.0f, l2[11] = 4.5f, l2[12] = 4.0f, l2[13] = 3.5f;
  l2[200] = l2[50] = l2[100] = 3.0f;
  // Token 3: equal biased scores from identical logit and bias, above a higher-logit expert that
  // the bias pushes below them.
  float* l3 = &logits[3 * E];
  for (int e : {255, 128, 64, 1, 2, 254, 0}) l3[e] = 1.0f;
  bias[5] = -10.0f;
  l3[5] = 6.0f;
  const std::vector<int> want_sel = {3,  7,  9,  20, 21, 40,  0, 1, 2, 3,  4,   6,
                                     10, 11, 12, 13, 50, 100, 0, 1, 2, 64, 128, 254};
  for (const Scoring scoring : {Scoring::kSqrtSoftplus, Scoring::kSigmoid, Scoring::kSoftmax}) {
    const Routing want = route_ref(logits, T, E, K, scoring, bias, {}, {}, 1.0f);
    ASSERT_EQ(want.sel, want_sel) << "the test's own expectation";
    const Routing got = route_gpu(logits, T, E, K, scoring, bias, {}, {}, 1.0f);
    EXPECT_EQ(got.sel, want_sel) << "scoring " << static_cast<int>(scoring);
    expect_near(got.w, want.w, 1e-5f, 1e-7f, "tie weights");
  }
}

TEST(CudaOps, MoeRouteHashUsesTheTable) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int T = 257, E = 256, K = 6, vocab = 1000;
  const std::vector<float> logits = random_floats(static_cast<size_t>(T) * E, -6.0f, 6.0f, 91);
  const std::vector<int> tid2eid = random_ints(static_cast<size_t>(vocab) * K, 0, E - 1, 92);
  const std::vector<int> tokens = random_ints(T, 0, vocab - 1, 93);
  const std::vector<float> bias(E, 100.0f);  // must be ignored
  for (const Scoring scoring : {Scoring::kSqrtSoftplus, Scoring::kSoftmax}) {
    const Routing want = route_ref(logits, T, E, K, scoring, bias, tid2eid, tokens, 1.5f);
    const Routing got = route_gpu(logits, T, E, K, scoring, bias, tid2eid, tokens, 1.5f);
    expect_same_routing(got, want, T, K, "hash");
  }
}

TEST(CudaOps, MoeRouteIsBatchInvariant) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int T = 257, E = 256, K = 6;
  const std::vector<float> logits = random_floats(static_cast<size_t>(T) * E, -6.0f, 6.0f, 101);
  const std::vector<float> bias = random_floats(E, -0.3f, 0.3f, 102);
  for (const Scoring scoring : {Scoring::kSqrtSoftplus, Scoring::kSoftmax}) {
    const Routing batch = route_gpu(logits, T, E, K, scoring, bias, {}, {}, 2.5f);
    for (int t : {0, 5, 256}) {
      const std::vector<float> one(logits.begin() + static_cast<size_t>(t) * E, logits.begin() + (t + 1) * E);
      const Routing alone = route_gpu(one, 1, E, K, scoring, bias, {}, {}, 2.5f);
      EXPECT_TRUE(same_bits(alone.sel.data(), batch.sel.data() + t * K, K)) << t;
      EXPECT_TRUE(same_bits(alone.w.data(), batch.w.data() + t * K, K)) << t;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// MoE permutation, gather, combination

struct Permutation {
  std::vector<int> offsets, token, row_of;
  std::vector<float> weight;
};

// DeepSeekV4::moe's bucketing (stable counting sort), with row_of added.
Permutation permute_ref(const std::vector<int>& sel, const std::vector<float>& w, int T, int K, int E) {
  const size_t N = static_cast<size_t>(T) * K;
  Permutation p{std::vector<int>(E + 1, 0), std::vector<int>(N), std::vector<int>(N), std::vector<float>(N)};
  for (int e : sel) ++p.offsets[e + 1];
  for (int e = 0; e < E; ++e) p.offsets[e + 1] += p.offsets[e];
  std::vector<int> fill(p.offsets.begin(), p.offsets.end() - 1);
  for (size_t i = 0; i < N; ++i) {
    const int at = fill[sel[i]]++;
    p.token[at] = static_cast<int>(i / K);
    p.weight[at] = w[i];
    p.row_of[i] = at;
  }
  return p;
}

TEST(CudaOps, MoePermuteIsTheStableCountingSort) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, K, E;
    int skew;  // 0 uniform, 1 all on one expert, 2 most on a few
  };
  for (const Case& c :
       {Case{1, 6, 256, 0}, Case{3, 6, 256, 0}, Case{257, 6, 256, 0}, Case{32768, 6, 256, 0}, Case{1000, 6, 256, 1},
        Case{5000, 6, 256, 2}, Case{2048, 6, 32, 0}, Case{300, 16, 1024, 0}, Case{77, 5, 37, 2}, Case{200, 1, 3, 0}}) {
    const std::string what = "permute T " + std::to_string(c.T) + " K " + std::to_string(c.K) + " E " +
                             std::to_string(c.E) + " skew " + std::to_string(c.skew);
    const size_t N = static_cast<size_t>(c.T) * c.K;
    std::vector<int> sel = random_ints(N, 0, c.E - 1, c.T + c.E);  // repeats within a token allowed
    if (c.skew == 1) std::fill(sel.begin(), sel.end(), c.E / 2 + 1);
    if (c.skew == 2)
      for (size_t i = 0; i < N; ++i)
        if (sel[i] % 4 != 0) sel[i] = sel[i] % 3 + (c.E > 20 ? 17 : 0);
    const std::vector<float> w = random_floats(N, 0.0f, 1.0f, 5);
    const Permutation want = permute_ref(sel, w, c.T, c.K, c.E);

    DeviceBuffer<int> d_sel(sel), d_offsets(c.E + 1), d_token(N), d_row_of(N);
    DeviceBuffer<float> d_w(w), d_weight(N);
    moe_permute(d_sel.get(), d_w.get(), c.T, c.K, c.E, d_offsets.get(), d_token.get(), d_weight.get(), d_row_of.get(),
                nullptr);
    sync();
    EXPECT_EQ(d_offsets.download(), want.offsets) << what;
    EXPECT_EQ(d_token.download(), want.token) << what;
    EXPECT_TRUE(same_bits(d_weight.download(), want.weight)) << what;
    EXPECT_EQ(d_row_of.download(), want.row_of) << what;
  }
}

// At T <= 4 moe_route writes moe_permute's outputs too (one launch less a decode step): the same
// sel and w as routing alone, the same rows as moe_permute, with learned and hash routing, with and
// without the weights; at T = 5 it leaves the permutation to moe_permute (and says so).
TEST(CudaOps, MoeRouteAlsoPermutesAtFewTokens) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, E, K;
    bool hash, weights;
  };
  for (const Case& c : {Case{1, 256, 6, false, true}, Case{2, 32, 6, false, true}, Case{4, 256, 8, false, false},
                        Case{3, 64, 6, true, true}, Case{4, 7, 7, false, true}, Case{5, 256, 6, false, true}}) {
    const std::string what = "T " + std::to_string(c.T) + " E " + std::to_string(c.E) + " K " + std::to_string(c.K) +
                             (c.hash ? " hash" : "") + (c.weights ? "" : " no weights");
    const size_t N = static_cast<size_t>(c.T) * c.K;
    const std::vector<float> logits = random_floats(static_cast<size_t>(c.T) * c.E, -3.0f, 3.0f, 40 + c.T + c.E);
    const std::vector<float> bias = random_floats(static_cast<size_t>(c.E), -0.5f, 0.5f, 41);
    const std::vector<int> tokens = random_ints(static_cast<size_t>(c.T), 0, 99, 42);
    std::vector<int> tid2eid;
    if (c.hash) {
      tid2eid = random_ints(static_cast<size_t>(100) * c.K, 0, c.E - 1, 43);
      for (int v = 0; v < 100; v += 7)  // some tokens with a repeated expert
        tid2eid[static_cast<size_t>(v) * c.K + 1] = tid2eid[static_cast<size_t>(v) * c.K];
    }
    DeviceBuffer<float> d_logits(logits), d_bias(bias);
    DeviceBuffer<int> d_tokens(tokens), d_tid2eid(c.hash ? tid2eid : std::vector<int>{0});
    DeviceBuffer<int> d_sel(N), d_sel2(N), d_offsets(c.E + 1), d_token(N), d_row_of(N);
    DeviceBuffer<int> d_offsets2(c.E + 1), d_token2(N), d_row_of2(N);
    DeviceBuffer<float> d_w(N), d_w2(N), d_weight(N), d_weight2(N);
    const int32_t* t2e = c.hash ? d_tid2eid.get() : nullptr;
    // Routing, then moe_permute: the reference.
    EXPECT_FALSE(moe_route(d_logits.get(), c.T, c.E, c.K, Scoring::kSqrtSoftplus, d_bias.get(), t2e, d_tokens.get(),
                           1.5f, d_sel.get(), d_w.get(), nullptr))
        << what;
    moe_permute(d_sel.get(), d_w.get(), c.T, c.K, c.E, d_offsets.get(), d_token.get(),
                c.weights ? d_weight.get() : nullptr, d_row_of.get(), nullptr);
    // Routing that permutes as well where it can.
    const MoePermutation perm{d_offsets2.get(), d_token2.get(), c.weights ? d_weight2.get() : nullptr,
                              d_row_of2.get()};
    const bool permuted = moe_route(d_logits.get(), c.T, c.E, c.K, Scoring::kSqrtSoftplus, d_bias.get(), t2e,
                                    d_tokens.get(), 1.5f, d_sel2.get(), d_w2.get(), nullptr, &perm);
    EXPECT_EQ(permuted, c.T <= 4) << what;
    if (!permuted)
      moe_permute(d_sel2.get(), d_w2.get(), c.T, c.K, c.E, d_offsets2.get(), d_token2.get(),
                  c.weights ? d_weight2.get() : nullptr, d_row_of2.get(), nullptr);
    sync();
    EXPECT_EQ(d_sel2.download(), d_sel.download()) << what;
    EXPECT_TRUE(same_bits(d_w2.download(), d_w.download())) << what;
    const std::vector<int> sel = d_sel.download();
    const Permutation want = permute_ref(sel, d_w.download(), c.T, c.K, c.E);
    EXPECT_EQ(d_offsets.download(), want.offsets) << what;  // the reference itself
    EXPECT_EQ(d_offsets2.download(), want.offsets) << what;
    EXPECT_EQ(d_token2.download(), want.token) << what;
    EXPECT_EQ(d_row_of2.download(), want.row_of) << what;
    if (c.weights) {
      EXPECT_TRUE(same_bits(d_weight2.download(), want.weight)) << what;
    }
  }
}

TEST(CudaOps, GatherRowsCopiesRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, R, width;
    size_t offset;
  };
  for (const Case& c : {Case{50, 257, 4096, 0}, Case{1, 1, 4096, 0}, Case{9, 20, 7, 0}, Case{9, 20, 4096, 1}}) {
    std::vector<uint16_t> src(static_cast<size_t>(c.T) * c.width);
    std::mt19937 rng(c.width);
    for (uint16_t& v : src) v = static_cast<uint16_t>(rng());
    const std::vector<int> idx = random_ints(c.R, 0, c.T - 1, 3);
    DeviceBuffer<uint16_t> d_src(src, c.offset), d_out(static_cast<size_t>(c.R) * c.width);
    DeviceBuffer<int> d_idx(idx);
    gather_rows(as_bf16(d_src), d_idx.get(), c.R, c.width, as_bf16(d_out), nullptr);
    sync();
    std::vector<uint16_t> want;
    for (int r : idx)
      want.insert(want.end(), src.begin() + static_cast<size_t>(r) * c.width,
                  src.begin() + static_cast<size_t>(r + 1) * c.width);
    EXPECT_EQ(d_out.download(), want) << "width " << c.width;
  }
}

// y rows by permuted row; out[t] accumulated in the CPU's order: permuted rows ascending (experts
// ascending, tokens ascending inside an expert), then + shared.
std::vector<float> combine_ref(const Permutation& p, const std::vector<float>& y, const std::vector<float>* shared,
                               bool weighted, int T, int D) {
  std::vector<float> out(static_cast<size_t>(T) * D, 0.0f);
  for (size_t slot = 0; slot < p.token.size(); ++slot)
    for (int d = 0; d < D; ++d) {
      const float v = y[slot * D + d];
      out[static_cast<size_t>(p.token[slot]) * D + d] += weighted ? v * p.weight[slot] : v;
    }
  if (shared != nullptr)
    for (size_t i = 0; i < out.size(); ++i) out[i] += (*shared)[i];
  return out;
}

// K distinct experts of E per token, in random (not ascending) order: [T * K].
std::vector<int> distinct_experts(int T, int K, int E, std::mt19937& rng) {
  std::vector<int> sel(static_cast<size_t>(T) * K), experts(E);
  std::iota(experts.begin(), experts.end(), 0);
  for (int t = 0; t < T; ++t) {
    std::shuffle(experts.begin(), experts.end(), rng);
    std::copy(experts.begin(), experts.begin() + K, sel.begin() + static_cast<size_t>(t) * K);
  }
  return sel;
}

TEST(CudaOps, MoeCombineAddsInAscendingExpertOrder) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, K, E, D;
    bool weighted, with_shared, order_sensitive;
    size_t offset;
  };
  for (const Case& c : {Case{257, 6, 256, 4096, true, true, false, 0}, Case{1, 6, 256, 4096, true, false, false, 0},
                        Case{3, 6, 256, 4096, false, true, false, 0}, Case{3, 6, 32, 7, true, true, false, 0},
                        Case{64, 6, 16, 4096, true, true, true, 0}, Case{64, 6, 16, 1024, false, true, true, 0},
                        Case{5, 6, 16, 4096, true, true, true, 1}}) {
    const std::string what = "combine T " + std::to_string(c.T) + " D " + std::to_string(c.D) +
                             (c.weighted ? " weighted" : "") + (c.with_shared ? " shared" : "") +
                             (c.order_sensitive ? " order-sensitive" : "");
    const size_t N = static_cast<size_t>(c.T) * c.K;
    std::mt19937 rng(c.T * 7 + c.D);
    const std::vector<int> sel = distinct_experts(c.T, c.K, c.E, rng);
    std::vector<float> w = random_floats(N, 0.0f, 1.0f, 8), y = random_floats(N * c.D, -2.0f, 2.0f, 9);
    std::vector<float> shared = random_floats(static_cast<size_t>(c.T) * c.D, -2.0f, 2.0f, 10);
    if (c.order_sensitive) {
      // Values whose fp32 sum depends on the order, powers-of-two weights (exact products, so a
      // fused multiply-add rounds like the CPU's multiply then add): the result must match bit for bit.
      const float pool[] = {1e8f, -1e8f, 1.0f, -3.5f, 1e-3f, 7e7f, 0.25f};
      for (float& v : y) v = pool[rng() % 7];
      for (float& v : shared) v = pool[rng() % 7];
      for (float& v : w) v = std::ldexp(1.0f, static_cast<int>(rng() % 5) - 2);
    }
    const Permutation p = permute_ref(sel, w, c.T, c.K, c.E);
    const std::vector<float> want = combine_ref(p, y, c.with_shared ? &shared : nullptr, c.weighted, c.T, c.D);

    DeviceBuffer<float> d_y(y, c.offset), d_w(w), d_shared(shared, c.offset), d_out(want.size(), c.offset);
    DeviceBuffer<int> d_row_of(p.row_of), d_sel(sel);
    moe_combine(d_y.get(), d_row_of.get(), d_sel.get(), c.weighted ? d_w.get() : nullptr,
                c.with_shared ? d_shared.get() : nullptr, c.T, c.K, c.D, d_out.get(), nullptr);
    sync();
    const std::vector<float> got = d_out.download();
    if (c.order_sensitive || !c.weighted) {
      EXPECT_TRUE(same_bits(got, want)) << what;
    } else {
      expect_near(got, want, 1e-6f, 2e-5f, what);  // K + 1 terms of magnitude <= 2 that may cancel
    }
  }
}

// hc_post_moe: moe_combine, (release) round_bf16 of its output, hc_post and (release) round_bf16 of X
// in one kernel — bit for bit those passes, on aligned and unaligned buffers.
TEST(CudaOps, HcPostMoeIsCombineThenPostBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int T, K, E, hc, D;
    bool weighted, with_shared, round;
    size_t offset;
  };
  for (const Case& c : {Case{257, 6, 32, 4, 4096, true, true, false, 0}, Case{256, 6, 32, 4, 4096, false, true, true, 0},
                        Case{1, 6, 32, 4, 4096, true, true, true, 0}, Case{5, 6, 16, 4, 4096, true, false, false, 1},
                        Case{3, 2, 8, 3, 7, true, true, true, 0}, Case{9, 8, 64, 4, 7168, false, true, false, 0}}) {
    const std::string what = "hc_post_moe T " + std::to_string(c.T) + " hc " + std::to_string(c.hc) + " D " +
                             std::to_string(c.D) + (c.weighted ? " weighted" : "") + (c.with_shared ? " shared" : "") +
                             (c.round ? " round" : "") + (c.offset ? " unaligned" : "");
    const size_t N = static_cast<size_t>(c.T) * c.K, width = static_cast<size_t>(c.hc) * c.D;
    std::mt19937 rng(c.T * 5 + c.D);
    const std::vector<int> sel = distinct_experts(c.T, c.K, c.E, rng);
    const std::vector<float> w = random_floats(N, 0.0f, 1.0f, 18), y = random_floats(N * c.D, -2.0f, 2.0f, 19);
    const std::vector<float> shared = random_floats(static_cast<size_t>(c.T) * c.D, -2.0f, 2.0f, 20);
    const std::vector<float> X = random_floats(c.T * width, -2.0f, 2.0f, 21);
    const std::vector<float> post = random_floats(static_cast<size_t>(c.T) * c.hc, 0.0f, 2.0f, 23);
    const std::vector<float> comb = random_floats(static_cast<size_t>(c.T) * c.hc * c.hc, 0.0f, 1.0f, 24);
    const Permutation p = permute_ref(sel, w, c.T, c.K, c.E);

    DeviceBuffer<float> d_y(y, c.offset), d_w(w), d_shared(shared, c.offset), d_o(static_cast<size_t>(c.T) * c.D);
    DeviceBuffer<float> d_X1(X, c.offset), d_X2(X, c.offset), d_post(post), d_comb(comb);
    DeviceBuffer<int> d_row_of(p.row_of), d_sel(sel);
    const float* wp = c.weighted ? d_w.get() : nullptr;
    const float* sp = c.with_shared ? d_shared.get() : nullptr;
    moe_combine(d_y.get(), d_row_of.get(), d_sel.get(), wp, sp, c.T, c.K, c.D, d_o.get(), nullptr);
    if (c.round) round_bf16(d_o.get(), static_cast<size_t>(c.T) * c.D, nullptr);
    hc_post(d_X1.get(), d_o.get(), c.T, c.hc, c.D, d_post.get(), d_comb.get(), nullptr);
    if (c.round) round_bf16(d_X1.get(), c.T * width, nullptr);
    hc_post_moe(d_X2.get(), d_y.get(), d_row_of.get(), d_sel.get(), wp, sp, c.T, c.K, c.hc, c.D, d_post.get(),
                d_comb.get(), c.round, c.round, nullptr);
    sync();
    const std::vector<float> want = d_X1.download(), got = d_X2.download();
    EXPECT_TRUE(same_bits(got, want)) << what;
    EXPECT_NE(got, X) << what;  // the update happened
  }
}

// hc_post_pre: a block's post (attention rows, or the MoE combine, release roundings included) and
// the next block's hc_pre with its norm. For V4's shapes (and others whose warp ranges cut the
// streams evenly) the post and the dots are one pass over X, which must give the bits of
// hc_post / hc_post_moe, round_bf16 of X and hc_pre in turn: X, the collapsed and normed rows, post
// and comb, with post and comb read and rewritten in place as the model does, and the dots' partials;
// with the new streams in place and in another buffer (hc_dots' grid, each lane its own stream; X
// then only read). Shapes: one token to a prefill-sized 600 (dots' two-step batches), V4-Pro's D (7
// steps a range), D 4352 (17 chunks a range: a last step with one chunk), hc 1, 2 and 3, and shapes
// or buffers the one pass does not take (the same calls then run; also an unaligned X_out alone).
TEST(CudaOps, HcPostPreIsPostThenPreBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int M, hc, D;
    bool moe, round;
    size_t offset;
    bool one_pass;
  };
  for (const Case& c : {Case{1, 4, 4096, false, false, 0, true}, Case{1, 4, 4096, true, true, 0, true},
                        Case{5, 4, 4096, true, false, 0, true}, Case{17, 4, 4096, false, true, 0, true},
                        Case{300, 4, 4096, true, true, 0, true}, Case{600, 4, 4096, false, false, 0, true},
                        Case{600, 4, 4096, true, false, 0, true}, Case{37, 4, 7168, true, false, 0, true},
                        Case{9, 2, 1024, false, true, 0, true}, Case{3, 1, 4096, true, true, 0, true},
                        Case{20, 4, 4352, true, false, 0, true}, Case{7, 3, 2048, false, false, 0, true},
                        Case{6, 3, 96, true, false, 0, false}, Case{4, 4, 4096, false, false, 1, false},
                        Case{4, 4, 4096, true, true, 1, false}}) {
    const std::string what = "hc_post_pre M " + std::to_string(c.M) + " hc " + std::to_string(c.hc) + " D " +
                             std::to_string(c.D) + (c.moe ? " moe" : " attention") + (c.round ? " round" : "") +
                             (c.offset ? " unaligned" : "");
    const int K = 6, E = 16, nmix = (2 + c.hc) * c.hc;
    const size_t width = static_cast<size_t>(c.hc) * c.D, N = static_cast<size_t>(c.M) * K;
    const HcData d = make_hc_data(c.M, c.hc, c.D, nmix, 3 * c.M + c.D + c.hc);
    const std::vector<float> norm_w = random_floats(static_cast<size_t>(c.D), 0.5f, 1.5f, 41);
    const std::vector<float> post = random_floats(static_cast<size_t>(c.M) * c.hc, 0.0f, 2.0f, 42);
    const std::vector<float> comb = random_floats(static_cast<size_t>(c.M) * c.hc * c.hc, 0.0f, 1.0f, 43);
    const std::vector<float> o = random_floats(static_cast<size_t>(c.M) * c.D, -2.0f, 2.0f, 44);
    std::mt19937 rng(c.M + 7);
    const std::vector<int> sel = distinct_experts(c.M, K, E, rng);
    const std::vector<float> w = random_floats(N, 0.0f, 1.0f, 45), y = random_floats(N * c.D, -1.0f, 1.0f, 46);
    const std::vector<float> shared = random_floats(static_cast<size_t>(c.M) * c.D, -1.0f, 1.0f, 47);
    const Permutation p = permute_ref(sel, w, c.M, K, E);
    DeviceBuffer<float> d_o(o, c.offset), d_y(y, c.offset), d_w(w), d_shared(shared, c.offset);
    DeviceBuffer<int> d_row_of(p.row_of), d_sel(sel);
    DeviceBuffer<float> d_fn(d.w.fn.data, c.offset), d_base(d.w.base), d_scale(d.w.scale), d_nw(norm_w);
    const float* w_arg = c.round ? nullptr : d_w.get();  // release numerics weighted the rows before w2
    struct Out {
      std::vector<float> X, X_in, collapsed, post, comb, part;
      std::vector<uint16_t> normed;
      bool one_pass = false;
    };
    // mode 0: the passes; 1: hc_post_pre in place; 2: hc_post_pre into another buffer; 3: into an
    // unaligned one (the passes then run, and a copy).
    auto run = [&](int mode) {
      DeviceBuffer<float> d_X(d.X, c.offset), d_X_out(d.X.size(), mode == 3 ? 1 : c.offset), d_post(post),
          d_comb(comb);
      float* const x_out = mode >= 2 ? d_X_out.get() : d_X.get();
      DeviceBuffer<float> d_col(static_cast<size_t>(c.M) * c.D, c.offset);
      DeviceBuffer<uint16_t> d_normed(static_cast<size_t>(c.M) * c.D);
      DeviceBuffer<float> d_ws(hc_workspace_bytes(c.M, c.hc, c.D, false) / sizeof(float));
      const HcNorm norm{d_nw.get(), 1e-6f, c.round, as_bf16(d_normed)};
      Out out;
      if (mode > 0) {
        HcBlockOutput block;
        if (c.moe) {
          block = HcBlockOutput{nullptr, d_y.get(), d_row_of.get(), d_sel.get(), w_arg, d_shared.get(), K, c.round};
        } else {
          block.o = d_o.get();
        }
        out.one_pass = hc_post_pre(d_X.get(), x_out, block, c.M, c.hc, c.D, d_post.get(), d_comb.get(), c.round,
                                   d_fn.get(), d_base.get(), d_scale.get(), 20, 1e-6f, 1e-6f, d_col.get(),
                                   d_post.get(), d_comb.get(), d_ws.get(), nullptr, &norm);
      } else {
        if (c.moe) {
          hc_post_moe(d_X.get(), d_y.get(), d_row_of.get(), d_sel.get(), w_arg, d_shared.get(), c.M, K, c.hc, c.D,
                      d_post.get(), d_comb.get(), c.round, c.round, nullptr);
        } else {
          hc_post(d_X.get(), d_o.get(), c.M, c.hc, c.D, d_post.get(), d_comb.get(), nullptr);
          if (c.round) round_bf16(d_X.get(), c.M * width, nullptr);
        }
        hc_pre(d_X.get(), c.M, c.hc, c.D, d_fn.get(), d_base.get(), d_scale.get(), 20, 1e-6f, 1e-6f, d_col.get(),
               d_post.get(), d_comb.get(), d_ws.get(), nullptr, &norm);
      }
      sync();
      out.X = mode >= 2 ? d_X_out.download() : d_X.download();
      if (mode == 2 && out.one_pass) out.X_in = d_X.download();
      out.collapsed = d_col.download();
      out.post = d_post.download();
      out.comb = d_comb.download();
      out.normed = d_normed.download();
      out.part = d_ws.download();
      return out;
    };
    const Out want = run(0);
    EXPECT_NE(want.X, d.X) << what << ": the post updated X";
    EXPECT_NE(want.post, post) << what << ": hc_pre rewrote post";
    for (int mode = 1; mode <= 3; ++mode) {
      const Out got = run(mode);
      const std::string how = what + (mode == 1   ? ", in place"
                                      : mode == 2 ? ", into another buffer"
                                                  : ", into an unaligned buffer");
      EXPECT_EQ(got.one_pass, c.one_pass && mode < 3) << how;
      if (!got.X_in.empty()) {
        EXPECT_TRUE(same_bits(got.X_in, d.X)) << how << ": X only read";
      }
      EXPECT_TRUE(same_bits(got.X, want.X)) << how << ": X";
      EXPECT_TRUE(same_bits(got.part, want.part)) << how << ": the dots' partials";
      EXPECT_TRUE(same_bits(got.collapsed, want.collapsed)) << how << ": collapsed";
      EXPECT_TRUE(same_bits(got.post, want.post)) << how << ": post";
      EXPECT_TRUE(same_bits(got.comb, want.comb)) << how << ": comb";
      EXPECT_TRUE(got.normed == want.normed) << how << ": normed";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Casts

std::vector<float> cast_inputs(size_t n) {
  std::vector<float> x = random_floats(n, -1000.0f, 1000.0f, static_cast<unsigned>(n));
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x3f808000u, 0x3f818000u,
                               0x7f7fffffu, 0x00000001u, 0x807fffffu, 0x3f80ffffu, 0x477fe000u};
  for (size_t i = 0; i < std::min(n, std::size(specials)); ++i) x[i] = std::bit_cast<float>(specials[i]);
  return x;
}

TEST(CudaOps, CastsRoundToNearestEvenLikeTheCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const size_t n : {size_t{1}, size_t{7}, size_t{11}, size_t{4096} * 257 + 3}) {
    for (const size_t offset : {size_t{0}, size_t{1}}) {
      const std::vector<float> x = cast_inputs(n);
      std::vector<uint16_t> want_bits(n);
      std::vector<float> want_round(n);
      for (size_t i = 0; i < n; ++i) {
        want_bits[i] = io::f32_to_bf16(x[i]);
        want_round[i] = model::round_bf16(x[i]);
      }
      DeviceBuffer<float> d_x(x, offset);
      DeviceBuffer<uint16_t> d_y(n, offset);
      to_bf16(d_x.get(), n, as_bf16(d_y), nullptr);
      round_bf16(d_x.get(), n, nullptr);
      sync();
      EXPECT_EQ(d_y.download(), want_bits) << "to_bf16 n " << n << " offset " << offset;
      EXPECT_TRUE(same_bits(d_x.download(), want_round)) << "round_bf16 n " << n << " offset " << offset;
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda
