// CUDA attention-side kernels (sink_attention, indexer_scores, topk_select) against CPU
// references in double precision (top-k: model::topk_indices, the same tie rule), plus batch
// invariance (a token's bits alone vs inside larger batches). Skipped without a CUDA device.
//
// Tolerances (q, rows and keys are bf16, so products are exact and only the summation differs):
//  * sink_attention with AttnProbabilities::kBf16HiLo (release numerics): P carried as bf16 hi + lo
//    (~2^-17 relative), so max |err| <= 5e-5 * max|v| and rms(err) <= 6e-5 * rms(ref).
//  * sink_attention: the kernel rounds the softmax numerators P to bf16 (relative error <= 2^-9)
//    before P V, and the denominator is the sum of the same rounded values. That bounds the error
//    by ~2 * 2^-9 * max|v| = 3.9e-3 * max|v|; per (token, head) we require
//      max |err| <= 4e-3 * max|v|  and  rms(err) <= 5e-3 * rms(ref).
//    The rms bound is what catches structural bugs: dropping a single row out of n changes the
//    output by ~rms(ref) / sqrt(n), i.e. 2% at n = 2177; a meta-check below asserts this.
//  * indexer_scores: fp32 tensor-core dot products, fp32 head sum in the reference's order:
//      |err| <= 2e-5 * sum_h |scale * w_h| * sum_i |q_hi k_i| + 1e-30.
//  * topk_select: exact (same index sets, ascending, -1 padding, count).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.cuh"
#include "model/topk.h"

namespace deepinfer::backend::cuda {
namespace {

// ---- host helpers ----------------------------------------------------------------------------

uint16_t to_bf16_bits(float f) {  // round to nearest even (inputs are finite)
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16_bits(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Random bf16 values in [lo, hi): the bits to upload and the exact float values for the reference.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Bf16Data random_bf16(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Bf16Data d;
  d.bits.resize(n);
  d.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    d.bits[i] = to_bf16_bits(dist(rng));
    d.values[i] = from_bf16_bits(d.bits[i]);
  }
  return d;
}

// Owning device buffer (cuda_runtime_api.h has only the void** cudaMalloc).
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    void* p = nullptr;
    if (count > 0) CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    ptr_ = static_cast<T*>(p);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr_ != nullptr) CUDA_CHECK(cudaFree(ptr_));
  }
  void upload(const std::vector<T>& host) {
    if (!host.empty()) CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  size_t count_ = 0;
  T* ptr_ = nullptr;
};

const bf16* as_bf16(const DeviceArray<uint16_t>& a) { return reinterpret_cast<const bf16*>(a.get()); }

// ---- sink attention --------------------------------------------------------------------------

// A batch of tokens over a shared pool of rows: each token picks a random subset of the pool in
// random order, so tokens share rows and pointer lists are unordered.
struct AttnBatch {
  int T = 0, H = 0, d = 0, max_rows = 0;
  float scale = 0.0f;
  Bf16Data q;                    // [T, H, d]
  Bf16Data pool;                 // [pool_rows, d]
  std::vector<int> row_index;    // pool row of each pointer
  std::vector<int> row_begin;    // [T + 1]
  std::vector<float> sinks;      // [H]
};

AttnBatch make_attn_batch(int H, int d, const std::vector<int>& row_counts, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  AttnBatch b;
  b.T = static_cast<int>(row_counts.size());
  b.H = H;
  b.d = d;
  b.scale = scale;
  b.max_rows = row_counts.empty() ? 0 : *std::max_element(row_counts.begin(), row_counts.end());
  const int pool_rows = b.max_rows + 300;
  b.q = random_bf16(static_cast<size_t>(b.T) * H * d, -1.0f, 1.0f, rng);
  b.pool = random_bf16(static_cast<size_t>(pool_rows) * d, -1.0f, 1.0f, rng);
  std::vector<int> perm(pool_rows);
  std::iota(perm.begin(), perm.end(), 0);
  b.row_begin.push_back(0);
  for (int n : row_counts) {
    std::shuffle(perm.begin(), perm.end(), rng);
    b.row_index.insert(b.row_index.end(), perm.begin(), perm.begin() + n);
    b.row_begin.push_back(static_cast<int>(b.row_index.size()));
  }
  // Sinks: every 4th head huge (the sink dominates the denominator), every 4th negligible, the
  // rest comparable to the scores.
  std::uniform_real_distribution<float> moderate(-2.0f, 2.0f);
  for (int h = 0; h < H; ++h) b.sinks.push_back(h % 4 == 0 ? 12.0f : h % 4 == 1 ? -30.0f : moderate(rng));
  return b;
}

// Runs sink_attention on tokens [first, first + count) of the batch; returns out [count, H, d].
std::vector<float> run_sink_attention(const AttnBatch& b, int first, int count, int max_rows,
                                      AttnProbabilities probs = AttnProbabilities::kBf16) {
  DeviceArray<uint16_t> q(std::vector<uint16_t>(b.q.bits.begin() + static_cast<size_t>(first) * b.H * b.d,
                                                b.q.bits.begin() + static_cast<size_t>(first + count) * b.H * b.d));
  DeviceArray<uint16_t> pool(b.pool.bits);
  std::vector<const bf16*> ptrs;
  for (int r = b.row_begin[first]; r < b.row_begin[first + count]; ++r)
    ptrs.push_back(as_bf16(pool) + static_cast<size_t>(b.row_index[r]) * b.d);
  // Row pointers of this sub-batch start at 0, so offsets are rebased; row_begin stays absolute
  // into the pointer array we upload.
  std::vector<int> begin(b.row_begin.begin() + first, b.row_begin.begin() + first + count + 1);
  const int base = begin[0];
  for (int& v : begin) v -= base;
  DeviceArray<const bf16*> d_ptrs(ptrs.empty() ? std::vector<const bf16*>{nullptr} : ptrs);
  DeviceArray<int> d_begin(begin);
  DeviceArray<float> d_sinks(b.sinks);
  DeviceArray<float> d_out(static_cast<size_t>(count) * b.H * b.d);
  const size_t ws_bytes = sink_attention_workspace_bytes(count, b.H, b.d, max_rows);
  DeviceArray<unsigned char> ws(ws_bytes);
  CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.size() * sizeof(float)));  // NaN: unwritten outputs show
  sink_attention(as_bf16(q), count, b.H, b.d, d_ptrs.get(), d_begin.get(), max_rows, d_sinks.get(), b.scale,
                 d_out.get(), ws.get(), nullptr, probs);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return d_out.download();
}

// CpuBackend::sink_attention in double, for one token (all heads); `skip_row` (if >= 0) drops
// that row of the token (for the sensitivity meta-check).
std::vector<double> sink_attention_ref(const AttnBatch& b, int t, int skip_row = -1) {
  std::vector<double> out(static_cast<size_t>(b.H) * b.d, 0.0);
  const int first = b.row_begin[t], n = b.row_begin[t + 1] - first;
  std::vector<double> s(n);
  for (int h = 0; h < b.H; ++h) {
    const float* q = b.q.values.data() + (static_cast<size_t>(t) * b.H + h) * b.d;
    double mx = b.sinks[h];
    for (int r = 0; r < n; ++r) {
      const float* row = b.pool.values.data() + static_cast<size_t>(b.row_index[first + r]) * b.d;
      double dot = 0.0;
      for (int i = 0; i < b.d; ++i) dot += static_cast<double>(q[i]) * row[i];
      s[r] = dot * b.scale;
      if (r != skip_row) mx = std::max(mx, s[r]);
    }
    double denominator = std::exp(b.sinks[h] - mx);
    for (int r = 0; r < n; ++r) {
      s[r] = r == skip_row ? 0.0 : std::exp(s[r] - mx);
      denominator += s[r];
    }
    double* o = out.data() + static_cast<size_t>(h) * b.d;
    for (int r = 0; r < n; ++r) {
      const float* row = b.pool.values.data() + static_cast<size_t>(b.row_index[first + r]) * b.d;
      const double p = s[r] / denominator;
      for (int i = 0; i < b.d; ++i) o[i] += p * row[i];
    }
  }
  return out;
}

struct HeadError {
  double max_abs = 0, rms_err = 0, rms_ref = 0;
  bool finite = true;
};
HeadError head_error(const float* got, const double* ref, int d) {
  HeadError e;
  for (int i = 0; i < d; ++i) {
    if (!std::isfinite(got[i])) e.finite = false;
    const double diff = got[i] - ref[i];
    e.max_abs = std::max(e.max_abs, std::abs(diff));
    e.rms_err += diff * diff;
    e.rms_ref += ref[i] * ref[i];
  }
  e.rms_err = std::sqrt(e.rms_err / d);
  e.rms_ref = std::sqrt(e.rms_ref / d);
  return e;
}
bool within_tolerance(const HeadError& e, double vmax) {
  return e.finite && e.max_abs <= 4e-3 * vmax + 1e-6 && e.rms_err <= 5e-3 * e.rms_ref + 1e-7;
}
// kBf16HiLo: P to ~2^-17 relative, so 80x tighter than the bf16-P bound (and fp32 sums beside).
bool within_hilo_tolerance(const HeadError& e, double vmax) {
  return e.finite && e.max_abs <= 5e-5 * vmax + 1e-7 && e.rms_err <= 6e-5 * e.rms_ref + 1e-8;
}

// Compares token t of `got` (the output of a call whose first token is `first`) with the reference.
void expect_token_matches(const AttnBatch& b, const std::vector<float>& got, int first, int t,
                          AttnProbabilities probs = AttnProbabilities::kBf16) {
  const std::vector<double> ref = sink_attention_ref(b, t);
  const float* g = got.data() + static_cast<size_t>(t - first) * b.H * b.d;
  const int n = b.row_begin[t + 1] - b.row_begin[t];
  if (n == 0) {  // exactly zero
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(g[i], 0.0f) << "token " << t << " (no rows) element " << i;
    return;
  }
  double vmax = 0.0;
  for (int r = b.row_begin[t]; r < b.row_begin[t + 1]; ++r)
    for (int i = 0; i < b.d; ++i)
      vmax = std::max(vmax, std::abs(static_cast<double>(b.pool.values[static_cast<size_t>(b.row_index[r]) * b.d + i])));
  int bad = 0;
  for (int h = 0; h < b.H; ++h) {
    const HeadError e = head_error(g + static_cast<size_t>(h) * b.d, ref.data() + static_cast<size_t>(h) * b.d, b.d);
    const bool ok = probs == AttnProbabilities::kBf16HiLo ? within_hilo_tolerance(e, vmax) : within_tolerance(e, vmax);
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << "token " << t << " (" << n << " rows) head " << h << " sink " << b.sinks[h]
                    << ": max|err| " << e.max_abs << " rms err " << e.rms_err << " rms ref " << e.rms_ref
                    << (e.finite ? "" : " NON-FINITE");
  }
  EXPECT_EQ(bad, 0) << "token " << t << ": heads out of tolerance, of " << b.H;
}

struct AttnCase {
  std::string name;
  int H, d;
  std::vector<int> rows;
  float scale;
};

class SinkAttentionCuda : public ::testing::TestWithParam<AttnCase> {};

TEST_P(SinkAttentionCuda, MatchesDoubleReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttnCase& c = GetParam();
  const AttnBatch b = make_attn_batch(c.H, c.d, c.rows, c.scale, 1234u + static_cast<unsigned>(c.d * 7 + c.H));
  const std::vector<float> got = run_sink_attention(b, 0, b.T, b.max_rows);
  for (int t = 0; t < b.T; ++t) expect_token_matches(b, got, 0, t);
}

// Release numerics' probabilities (bf16 hi + lo): within the tight bound on every shape.
TEST_P(SinkAttentionCuda, HiLoProbabilitiesMatchDoubleReferenceTightly) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttnCase& c = GetParam();
  const AttnBatch b = make_attn_batch(c.H, c.d, c.rows, c.scale, 1234u + static_cast<unsigned>(c.d * 7 + c.H));
  const std::vector<float> got = run_sink_attention(b, 0, b.T, b.max_rows, AttnProbabilities::kBf16HiLo);
  for (int t = 0; t < b.T; ++t) expect_token_matches(b, got, 0, t, AttnProbabilities::kBf16HiLo);
}

// ... and that bound is one plain bf16 probabilities do not meet (the hi/lo split is what passes it).
TEST(SinkAttentionCudaMeta, HiLoBoundRejectsBf16Probabilities) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttnBatch b = make_attn_batch(64, 512, {640, 2177}, 0.04419417f, 5u);
  const std::vector<float> got = run_sink_attention(b, 0, b.T, b.max_rows, AttnProbabilities::kBf16);
  for (int t = 0; t < b.T; ++t) {
    const std::vector<double> ref = sink_attention_ref(b, t);
    int flagged = 0;
    for (int h = 0; h < b.H; ++h)
      flagged += !within_hilo_tolerance(
          head_error(got.data() + (static_cast<size_t>(t) * b.H + h) * b.d, ref.data() + h * b.d, b.d), 1.0);
    EXPECT_GE(flagged, b.H / 2) << "token " << t << ": heads where bf16 P breaks the hi/lo bound";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SinkAttentionCuda,
    ::testing::Values(
        // DeepSeek-V4 dims; row counts around tile (64) and split (640) boundaries, 2177 = 4 splits.
        AttnCase{"real_flat", 64, 512, {640, 0, 2177, 1, 128, 5}, 0.04419417f},
        AttnCase{"real_peaked", 64, 512, {5, 2177, 1, 640, 0, 128}, 0.25f},
        AttnCase{"real_boundaries", 64, 512, {63, 64, 65, 319, 320, 321, 639, 640, 641}, 0.1f},
        AttnCase{"h1_d64", 1, 64, {3, 64, 65, 0, 200, 1, 700}, 0.125f},
        AttnCase{"h3_d64", 3, 64, {1, 130, 700, 2177}, 0.3f},
        AttnCase{"h3_d128", 3, 128, {64, 1000}, 0.0884f},
        AttnCase{"h17_d192", 17, 192, {70, 0, 333}, 0.07f},  // odd output n-tiles, 2 head blocks
        AttnCase{"h80_d256", 80, 256, {129, 650}, 0.0625f}),
    [](const ::testing::TestParamInfo<AttnCase>& info) { return info.param.name; });

// The rms criterion is sharp enough to see one missing row at the largest row count tested.
TEST(SinkAttentionCudaMeta, ToleranceDetectsOneMissingRow) {
  const AttnBatch b = make_attn_batch(64, 512, {2177}, 0.04419417f, 99u);
  const std::vector<double> full = sink_attention_ref(b, 0);
  const std::vector<double> dropped = sink_attention_ref(b, 0, 1000);
  std::vector<float> dropped_f(dropped.begin(), dropped.end());
  int flagged = 0;
  for (int h = 0; h < b.H; ++h)
    flagged += !within_tolerance(head_error(dropped_f.data() + h * b.d, full.data() + h * b.d, b.d), 1.0);
  EXPECT_GE(flagged, b.H * 9 / 10) << "heads where dropping 1 of 2177 rows is visible";
}

// Row counts 0..max_rows with the boundary cases forced in.
std::vector<int> random_row_counts(int T, int max_rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, max_rows);
  std::vector<int> counts(T);
  for (int& c : counts) c = dist(rng);
  const int forced[] = {0, 1, 64, 65, max_rows, 640, 641};
  for (int i = 0; i < 7 && i < T; ++i) counts[i * 5 % T] = std::min(forced[i], max_rows);
  return counts;
}

// A token's output alone (T = 1, with max_rows = its own row count) is bitwise identical to the
// same token inside T = 37 and T = 200 calls (which also use other head-block sizes), and
// repeated calls are bitwise identical.
void check_batch_invariance(int max_rows, unsigned seed, AttnProbabilities probs = AttnProbabilities::kBf16) {
  const AttnBatch b = make_attn_batch(64, 512, random_row_counts(200, max_rows, seed), 0.1f, seed);
  const size_t per_token = static_cast<size_t>(b.H) * b.d;
  const std::vector<float> all = run_sink_attention(b, 0, 200, b.max_rows, probs);
  const std::vector<float> again = run_sink_attention(b, 0, 200, b.max_rows, probs);
  EXPECT_EQ(std::memcmp(all.data(), again.data(), all.size() * sizeof(float)), 0) << "run-to-run";
  const std::vector<float> first37 = run_sink_attention(b, 0, 37, b.max_rows, probs);
  for (int t = 0; t < 37; ++t)
    EXPECT_EQ(std::memcmp(first37.data() + t * per_token, all.data() + t * per_token, per_token * sizeof(float)), 0)
        << "token " << t << " (" << b.row_begin[t + 1] - b.row_begin[t] << " rows): T=37 vs T=200";
  for (int t : {0, 1, 5, 10, 17, 36, 99, 150, 199}) {
    const int n = b.row_begin[t + 1] - b.row_begin[t];
    const std::vector<float> alone = run_sink_attention(b, t, 1, n, probs);
    EXPECT_EQ(std::memcmp(alone.data(), all.data() + t * per_token, per_token * sizeof(float)), 0)
        << "token " << t << " (" << n << " rows): T=1 vs T=200";
  }
  for (int t : {0, 5, 36, 199}) expect_token_matches(b, all, 0, t, probs);  // and the batch is right
}

TEST(SinkAttentionCudaInvariance, Decode640Rows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_batch_invariance(640, 7u);
}

TEST(SinkAttentionCudaInvariance, ManySplits2177Rows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_batch_invariance(2177, 8u);
}

TEST(SinkAttentionCudaInvariance, HiLoProbabilities2177Rows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_batch_invariance(2177, 9u, AttnProbabilities::kBf16HiLo);
}

// ---- indexer scores --------------------------------------------------------------------------

struct IndexerCase {
  std::string name;
  int heads, dim;
  std::vector<int> keys;  // per token
};

class IndexerScoresCuda : public ::testing::TestWithParam<IndexerCase> {};

TEST_P(IndexerScoresCuda, MatchesDoubleReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const IndexerCase& c = GetParam();
  const int T = static_cast<int>(c.keys.size());
  const int max_keys = *std::max_element(c.keys.begin(), c.keys.end());
  const int stride = max_keys + 5;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  std::mt19937 rng(4321u + static_cast<unsigned>(c.dim + c.heads));
  const Bf16Data q = random_bf16(static_cast<size_t>(T) * c.heads * c.dim, -1.0f, 1.0f, rng);
  const int pool_keys = max_keys + 100;
  const Bf16Data pool = random_bf16(static_cast<size_t>(pool_keys) * c.dim, -1.0f, 1.0f, rng);
  std::vector<float> weights(static_cast<size_t>(T) * c.heads);
  std::uniform_real_distribution<float> wdist(-1.0f, 1.0f);
  for (float& w : weights) w = wdist(rng);
  std::vector<int> key_index, key_begin, num_keys = c.keys;
  std::vector<int> perm(pool_keys);
  std::iota(perm.begin(), perm.end(), 0);
  for (int n : c.keys) {
    std::shuffle(perm.begin(), perm.end(), rng);
    key_begin.push_back(static_cast<int>(key_index.size()));
    key_index.insert(key_index.end(), perm.begin(), perm.begin() + n);
  }

  DeviceArray<uint16_t> d_q(q.bits), d_pool(pool.bits);
  std::vector<const bf16*> ptrs;
  for (int idx : key_index) ptrs.push_back(as_bf16(d_pool) + static_cast<size_t>(idx) * c.dim);
  DeviceArray<const bf16*> d_ptrs(ptrs.empty() ? std::vector<const bf16*>{nullptr} : ptrs);
  DeviceArray<float> d_w(weights);
  DeviceArray<int> d_begin(key_begin), d_num(num_keys);
  DeviceArray<float> d_score(static_cast<size_t>(T) * stride);
  CUDA_CHECK(cudaMemset(d_score.get(), 0xff, d_score.size() * sizeof(float)));  // NaN sentinel
  indexer_scores(as_bf16(d_q), d_w.get(), T, c.heads, c.dim, d_ptrs.get(), d_begin.get(), d_num.get(), max_keys,
                 scale, d_score.get(), stride, nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> score = d_score.download();

  for (int t = 0; t < T; ++t) {
    const int n = c.keys[t];
    for (int w = n; w < stride; ++w)
      ASSERT_TRUE(std::isnan(score[static_cast<size_t>(t) * stride + w])) << "token " << t << " wrote entry " << w;
    // Check every key for small counts; a sample (with both ends) for large ones.
    std::vector<int> check(n);
    std::iota(check.begin(), check.end(), 0);
    if (n > 4000) {
      std::shuffle(check.begin(), check.end(), rng);
      check.resize(3000);
      for (int w = 0; w < 64; ++w) {
        check.push_back(w);
        check.push_back(n - 1 - w);
      }
    }
    int bad = 0;
    for (int w : check) {
      const float* k = pool.values.data() + static_cast<size_t>(key_index[key_begin[t] + w]) * c.dim;
      double ref = 0.0, bound = 0.0;
      for (int h = 0; h < c.heads; ++h) {
        const float* qh = q.values.data() + (static_cast<size_t>(t) * c.heads + h) * c.dim;
        double dot = 0.0, dot_abs = 0.0;
        for (int i = 0; i < c.dim; ++i) {
          dot += static_cast<double>(qh[i]) * k[i];
          dot_abs += std::abs(static_cast<double>(qh[i]) * k[i]);
        }
        const double wh = weights[static_cast<size_t>(t) * c.heads + h];
        ref += std::max(dot, 0.0) * scale * wh;
        bound += dot_abs * scale * std::abs(wh);
      }
      const float got = score[static_cast<size_t>(t) * stride + w];
      if (!(std::abs(got - ref) <= 2e-5 * bound + 1e-30) && ++bad <= 5)
        ADD_FAILURE() << "token " << t << " key " << w << ": cuda " << got << " ref " << ref << " bound " << bound;
    }
    EXPECT_EQ(bad, 0) << "token " << t << " of " << check.size() << " keys checked";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, IndexerScoresCuda,
    ::testing::Values(IndexerCase{"real", 64, 128, {0, 1000, 5000, 63, 64, 65}},
                      IndexerCase{"real_long", 64, 128, {70000, 1}},
                      IndexerCase{"h3_d32", 3, 32, {65, 200}},
                      IndexerCase{"h80_d256", 80, 256, {300, 1, 129}},  // two head blocks
                      IndexerCase{"h64_d96", 64, 96, {777}},
                      IndexerCase{"h8_d16", 8, 16, {3, 40, 130}}),  // the tiny fixtures' indexer
    [](const ::testing::TestParamInfo<IndexerCase>& info) { return info.param.name; });

// ---- top-k -----------------------------------------------------------------------------------

// Runs topk_select on rows of `scores` (stride = row length) and compares each token with
// model::topk_indices sorted ascending, -1 padded; count = min(k, n).
void check_topk(const std::vector<std::vector<float>>& rows, int k) {
  const int T = static_cast<int>(rows.size());
  int max_keys = 0;
  for (const auto& r : rows) max_keys = std::max(max_keys, static_cast<int>(r.size()));
  const int stride = max_keys + 3;  // rows start at unaligned addresses
  std::vector<float> flat(static_cast<size_t>(T) * stride, 0.0f);
  std::vector<int> num_keys;
  for (int t = 0; t < T; ++t) {
    std::copy(rows[t].begin(), rows[t].end(), flat.begin() + static_cast<size_t>(t) * stride);
    num_keys.push_back(static_cast<int>(rows[t].size()));
  }
  DeviceArray<float> d_score(flat);
  DeviceArray<int> d_num(num_keys);
  DeviceArray<int> d_sel(static_cast<size_t>(T) * k), d_count(static_cast<size_t>(T));
  DeviceArray<unsigned char> ws(topk_workspace_bytes(T, max_keys, k));
  CUDA_CHECK(cudaMemset(d_sel.get(), 0x7f, d_sel.size() * sizeof(int)));
  CUDA_CHECK(cudaMemset(d_count.get(), 0x7f, d_count.size() * sizeof(int)));
  topk_select(d_score.get(), T, stride, d_num.get(), max_keys, k, d_sel.get(), d_count.get(), ws.get(), nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int> sel = d_sel.download(), count = d_count.download();
  for (int t = 0; t < T; ++t) {
    const int n = num_keys[t];
    std::vector<int> ref = model::topk_indices(rows[t].data(), n, k);
    std::sort(ref.begin(), ref.end());
    EXPECT_EQ(count[t], static_cast<int>(ref.size())) << "token " << t << " n " << n;
    ref.resize(k, -1);
    const std::vector<int> got(sel.begin() + static_cast<size_t>(t) * k, sel.begin() + static_cast<size_t>(t + 1) * k);
    if (got != ref) {
      int first_diff = 0;
      while (got[first_diff] == ref[first_diff]) ++first_diff;
      ADD_FAILURE() << "token " << t << " (n " << n << ", k " << k << "): first difference at " << first_diff
                    << ": cuda " << got[first_diff] << " ref " << ref[first_diff];
    }
  }
}

std::vector<float> normal_scores(int n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}
std::vector<float> level_scores(int n, int levels, std::mt19937& rng) {  // many exact ties
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % levels)) * 0.5f - 1.0f;
  return v;
}

TEST(TopkCuda, RandomScoresAllSizes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(11);
  std::vector<std::vector<float>> rows;
  // <= k, = k, > k, in shared memory (<= 24576), just over it, and global-memory sizes.
  for (int n : {0, 1, 511, 512, 513, 8192, 24576, 24577, 30000, 65536, 262144}) rows.push_back(normal_scores(n, rng));
  check_topk(rows, 512);
}

TEST(TopkCuda, ExactTiesAndInfinities) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(12);
  std::vector<std::vector<float>> rows;
  rows.push_back(level_scores(262144, 10, rng));  // > 24576 ties at the threshold: ordered fallback
  rows.push_back(level_scores(262144, 20, rng));  // ~13k ties: staged, ties resolved by index
  rows.push_back(level_scores(8192, 3, rng));
  rows.push_back(std::vector<float>(262144, 0.75f));  // all equal: 0..k-1
  rows.push_back(std::vector<float>(5000, -std::numeric_limits<float>::infinity()));
  std::vector<float> mostly_inf(100000, -std::numeric_limits<float>::infinity());
  for (int i = 0; i < 100; ++i) mostly_inf[rng() % mostly_inf.size()] = static_cast<float>(i);
  rows.push_back(mostly_inf);  // 100 finite, the rest of the k from -inf ties by index
  std::vector<float> zeros(3000);
  for (float& x : zeros) {
    const int r = static_cast<int>(rng() % 4);
    x = r == 0 ? -0.0f : r == 1 ? 0.0f : r == 2 ? -1.0f : std::numeric_limits<float>::infinity();
  }
  rows.push_back(zeros);  // -0 and +0 tie (lower index wins)
  check_topk(rows, 512);
}

TEST(TopkCuda, OtherK) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(13);
  check_topk({normal_scores(262144, rng), normal_scores(3000, rng), normal_scores(2048, rng)}, 2048);
  check_topk({normal_scores(1000, rng), level_scores(70000, 5, rng)}, 1);
  check_topk({level_scores(100, 3, rng), level_scores(40000, 7, rng), normal_scores(6, rng)}, 7);
}

}  // namespace
}  // namespace deepinfer::backend::cuda
