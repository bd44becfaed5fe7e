// The FP8 KV cache on the GPU (kv_fp8.h, attention.h's fp8/fp4 readers), all checks bitwise:
//  * encode_kv_rows_fp8 / encode_index_rows_fp4 == model::KvRowFormat / IndexRowFormat::encode (kFP8)
//    byte for byte, from fp32 and bf16 sources, into a contiguous buffer and through row pointers,
//    on random rows and edge values (zeros, -0, amax below the floor, huge values, values that
//    saturate, rounding ties);
//  * sink_attention_fp8 == sink_attention on bf16 rows holding the CPU's decode of the same rows;
//  * indexer_scores_fp4 == indexer_scores and indexer_scores_release_fp4 == indexer_scores_release
//    on bf16 keys holding the CPU's decode.
// Skipped without a CUDA device.

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
#include "backend/cuda/kv_fp8.h"
#include "backend/cuda/release_kernels.h"
#include "model/kv_format.h"
#include "model/numerics.h"

namespace deepinfer::backend::cuda {
namespace {

using model::IndexRowFormat;
using model::KvCacheDtype;
using model::KvRowFormat;

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
uint32_t float_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Owning device buffer.
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

void sync_and_check() {
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- test rows ---------------------------------------------------------------------------------

// Rows of `dims` values whose blocks of `block` values cover the cases that matter for a block
// format: random magnitudes over many binades, all zeros, signed zeros, amax below the floor, huge
// values, values whose block amax makes x / s land just above the format's max (saturation), and
// exact rounding ties of the format's grid (`grid`: the positive values of e4m3 or e2m1).
std::vector<float> make_edge_rows(int R, int dims, int block, float inv_qmax, float qmax, float floor,
                                  const std::vector<float>& grid, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(R) * dims);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-30, 30), kind_dist(0, 9), pick(0, static_cast<int>(grid.size()) - 2);
  for (int r = 0; r < R; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * dims;
    for (int lo = 0; lo < dims; lo += block) {
      const int n = std::min(block, dims - lo);
      const int kind = r < 10 ? r : kind_dist(rng);
      float* v = row + lo;
      switch (kind) {
        case 0:  // zeros
          for (int i = 0; i < n; ++i) v[i] = 0.0f;
          break;
        case 1:  // signed zeros
          for (int i = 0; i < n; ++i) v[i] = i % 2 ? -0.0f : 0.0f;
          break;
        case 2: {  // amax below the floor (incl. fp32 subnormals for the FP4 floor)
          const float m = floor * (r % 2 ? 0.25f : 1e-3f);
          for (int i = 0; i < n; ++i) v[i] = unit(rng) * m;
          break;
        }
        case 3:  // huge
          for (int i = 0; i < n; ++i) v[i] = unit(rng) * 1e30f;
          break;
        case 4: {  // saturation: amax a few ulps above qmax * 2^k with fp32(amax / qmax) == 2^k
          const float base = std::ldexp(qmax, binade(rng) / 4);
          float a = base;
          for (int k = 0; k < 64; ++k) {
            a = std::nextafter(a, 2.0f * base);
            const float t = a * inv_qmax;
            if (t == std::ldexp(1.0f, std::ilogb(t))) break;  // t is a power of two: s = t < a / qmax
          }
          for (int i = 0; i < n; ++i) v[i] = (i % 3 ? -1.0f : 1.0f) * (i % 2 ? a : std::nextafter(a, 0.0f));
          break;
        }
        case 5: case 6: {  // rounding ties of the grid times the block's scale, amax fixed first
          const float amax = std::ldexp(qmax * 0.75f, binade(rng) / 3);
          const float s = model::pow2_ceil_scale(std::fmax(amax, floor), inv_qmax);
          v[0] = amax;
          for (int i = 1; i < n; ++i) {
            const int g = pick(rng);
            const float mid = 0.5f * (grid[g] + grid[g + 1]);
            v[i] = (i % 2 ? -1.0f : 1.0f) * std::fmin(mid * s, amax);
          }
          break;
        }
        default: {  // random magnitudes, with some exact grid values
          const float m = std::ldexp(1.0f, binade(rng));
          for (int i = 0; i < n; ++i) v[i] = i % 7 == 3 ? grid[static_cast<size_t>(i) % grid.size()] * m : unit(rng) * m;
          break;
        }
      }
    }
  }
  return x;
}

std::vector<float> e4m3_grid() {  // positive e4m3fn values, ascending
  std::vector<float> g;
  for (int m = 0; m < 8; ++m) g.push_back(std::ldexp(static_cast<float>(m), -9));
  for (int e = 1; e < 16; ++e)
    for (int m = 0; m < 8; ++m)
      if (!(e == 15 && m == 7)) g.push_back(std::ldexp(static_cast<float>(8 + m), e - 10));
  return g;
}
std::vector<float> e2m1_grid() { return {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f}; }

std::vector<float> make_kv_rows(int R, int dims, std::mt19937& rng) {
  return make_edge_rows(R, dims, 64, 1.0f / 448.0f, 448.0f, 1e-4f, e4m3_grid(), rng);
}
std::vector<float> make_index_rows(int R, int dims, std::mt19937& rng) {
  return make_edge_rows(R, dims, 32, 1.0f / 6.0f, 6.0f, 6.0f * 0x1p-126f, e2m1_grid(), rng);
}

std::vector<uint8_t> cpu_encode_kv(const std::vector<float>& x, int R, int dims, int rope_dims) {
  const KvRowFormat f{KvCacheDtype::kFP8, dims, rope_dims};
  std::vector<uint8_t> out(static_cast<size_t>(R) * f.bytes());
  for (int r = 0; r < R; ++r) f.encode(x.data() + static_cast<size_t>(r) * dims, out.data() + r * f.bytes());
  return out;
}
std::vector<uint8_t> cpu_encode_index(const std::vector<float>& x, int R, int dims) {
  const IndexRowFormat f{KvCacheDtype::kFP8, dims};
  std::vector<uint8_t> out(static_cast<size_t>(R) * f.bytes());
  for (int r = 0; r < R; ++r) f.encode(x.data() + static_cast<size_t>(r) * dims, out.data() + r * f.bytes());
  return out;
}

// ---- encoders ----------------------------------------------------------------------------------

// Runs one encoder configuration and compares with the CPU bytes. `encode_contig(src, src_stride,
// dst, dst_stride)` and `encode_rows(src, src_stride, dst_rows)` wrap the entry point under test.
template <class Src, class EncodeContig, class EncodeRows>
void check_encoder(const std::vector<Src>& src_host, int R, int dims, size_t row_bytes,
                   const std::vector<uint8_t>& expected, EncodeContig encode_contig, EncodeRows encode_rows,
                   const std::string& what) {
  const size_t src_stride = static_cast<size_t>(dims) + 3;  // a padded source
  std::vector<Src> padded(static_cast<size_t>(R) * src_stride);
  for (int r = 0; r < R; ++r)
    std::copy(src_host.begin() + static_cast<size_t>(r) * dims, src_host.begin() + static_cast<size_t>(r + 1) * dims,
              padded.begin() + static_cast<size_t>(r) * src_stride);
  DeviceArray<Src> d_src(padded);

  // Contiguous, tight and with a gap between rows (gap bytes must stay untouched).
  for (const size_t dst_stride : {row_bytes, row_bytes + 5}) {
    DeviceArray<uint8_t> d_dst(static_cast<size_t>(R) * dst_stride);
    CUDA_CHECK(cudaMemset(d_dst.get(), 0xab, d_dst.size()));
    encode_contig(d_src.get(), src_stride, d_dst.get(), dst_stride);
    sync_and_check();
    const std::vector<uint8_t> got = d_dst.download();
    int bad = 0;
    for (int r = 0; r < R; ++r) {
      const uint8_t* g = got.data() + r * dst_stride;
      const uint8_t* e = expected.data() + r * row_bytes;
      for (size_t i = 0; i < dst_stride; ++i) {
        const int want = i < row_bytes ? e[i] : 0xab;
        if (g[i] != want && ++bad <= 8)
          ADD_FAILURE() << what << " contiguous stride " << dst_stride << " row " << r << " byte " << i << ": got "
                        << int{g[i]} << " want " << want;
      }
    }
    EXPECT_EQ(bad, 0) << what;
  }

  // Through row pointers: rows scattered over a pool in shuffled order, every 7th entry nullptr.
  std::vector<int> slot(R);
  std::iota(slot.begin(), slot.end(), 0);
  std::mt19937 rng(99u);
  std::shuffle(slot.begin(), slot.end(), rng);
  DeviceArray<uint8_t> pool(static_cast<size_t>(R) * row_bytes);
  CUDA_CHECK(cudaMemset(pool.get(), 0xcd, pool.size()));
  std::vector<uint8_t*> ptrs(R);
  for (int r = 0; r < R; ++r) ptrs[r] = r % 7 == 5 ? nullptr : pool.get() + static_cast<size_t>(slot[r]) * row_bytes;
  DeviceArray<uint8_t*> d_ptrs(ptrs);
  encode_rows(d_src.get(), src_stride, d_ptrs.get());
  sync_and_check();
  const std::vector<uint8_t> got = pool.download();
  int bad = 0;
  for (int r = 0; r < R; ++r) {
    const uint8_t* g = got.data() + static_cast<size_t>(slot[r]) * row_bytes;
    for (size_t i = 0; i < row_bytes; ++i) {
      const int want = r % 7 == 5 ? 0xcd : expected[r * row_bytes + i];
      if (g[i] != want && ++bad <= 8)
        ADD_FAILURE() << what << " row pointers, row " << r << " byte " << i << ": got " << int{g[i]} << " want "
                      << want;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

struct KvShape {
  int dims, rope_dims;
};

TEST(KvFp8Encode, RowBytesMatchCpu) {
  for (const KvShape s : {KvShape{512, 64}, KvShape{512, 0}, KvShape{64, 0}, KvShape{100, 6}, KvShape{200, 8},
                          KvShape{8, 8}, KvShape{129, 1}})
    EXPECT_EQ(kv_fp8_row_bytes(s.dims, s.rope_dims), (KvRowFormat{KvCacheDtype::kFP8, s.dims, s.rope_dims}.bytes()))
        << s.dims << "/" << s.rope_dims;
  EXPECT_EQ(kv_fp8_row_bytes(512, 64), 584u);
  for (int dims : {128, 64, 32, 37, 1, 256, 96})
    EXPECT_EQ(index_fp4_row_bytes(dims), (IndexRowFormat{KvCacheDtype::kFP8, dims}.bytes())) << dims;
  EXPECT_EQ(index_fp4_row_bytes(128), 68u);
}

TEST(KvFp8Encode, KvRowsMatchCpuBytes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const KvShape s : {KvShape{512, 64}, KvShape{512, 0}, KvShape{100, 6}, KvShape{200, 8}, KvShape{8, 8}}) {
    std::mt19937 rng(7u + static_cast<unsigned>(s.dims * 3 + s.rope_dims));
    const int R = 333;
    const size_t row_bytes = kv_fp8_row_bytes(s.dims, s.rope_dims);
    const std::string what = "kv " + std::to_string(s.dims) + "/" + std::to_string(s.rope_dims);

    // fp32 source.
    const std::vector<float> x = make_kv_rows(R, s.dims, rng);
    check_encoder(
        x, R, s.dims, row_bytes, cpu_encode_kv(x, R, s.dims, s.rope_dims),
        [&](const float* src, size_t stride, uint8_t* dst, size_t dst_stride) {
          encode_kv_rows_fp8(src, stride, R, s.dims, s.rope_dims, dst, dst_stride, nullptr);
        },
        [&](const float* src, size_t stride, uint8_t* const* rows) {
          encode_kv_rows_fp8(src, stride, R, s.dims, s.rope_dims, rows, nullptr);
        },
        what + " fp32");

    // bf16 source: the same as encoding the widened values.
    std::vector<uint16_t> xb(x.size());
    std::vector<float> xw(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xb[i] = to_bf16_bits(std::isfinite(x[i]) ? x[i] : 0.0f);
      xw[i] = from_bf16_bits(xb[i]);
    }
    check_encoder(
        xb, R, s.dims, row_bytes, cpu_encode_kv(xw, R, s.dims, s.rope_dims),
        [&](const uint16_t* src, size_t stride, uint8_t* dst, size_t dst_stride) {
          encode_kv_rows_fp8(reinterpret_cast<const bf16*>(src), stride, R, s.dims, s.rope_dims, dst, dst_stride,
                             nullptr);
        },
        [&](const uint16_t* src, size_t stride, uint8_t* const* rows) {
          encode_kv_rows_fp8(reinterpret_cast<const bf16*>(src), stride, R, s.dims, s.rope_dims, rows, nullptr);
        },
        what + " bf16");
  }
}

TEST(KvFp8Encode, IndexRowsMatchCpuBytes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int dims : {128, 64, 37, 256, 1}) {
    std::mt19937 rng(11u + static_cast<unsigned>(dims));
    const int R = 401;
    const size_t row_bytes = index_fp4_row_bytes(dims);
    const std::string what = "index " + std::to_string(dims);
    const std::vector<float> x = make_index_rows(R, dims, rng);
    check_encoder(
        x, R, dims, row_bytes, cpu_encode_index(x, R, dims),
        [&](const float* src, size_t stride, uint8_t* dst, size_t dst_stride) {
          encode_index_rows_fp4(src, stride, R, dims, dst, dst_stride, nullptr);
        },
        [&](const float* src, size_t stride, uint8_t* const* rows) {
          encode_index_rows_fp4(src, stride, R, dims, rows, nullptr);
        },
        what + " fp32");
    std::vector<uint16_t> xb(x.size());
    std::vector<float> xw(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xb[i] = to_bf16_bits(x[i]);
      xw[i] = from_bf16_bits(xb[i]);
    }
    check_encoder(
        xb, R, dims, row_bytes, cpu_encode_index(xw, R, dims),
        [&](const uint16_t* src, size_t stride, uint8_t* dst, size_t dst_stride) {
          encode_index_rows_fp4(reinterpret_cast<const bf16*>(src), stride, R, dims, dst, dst_stride, nullptr);
        },
        [&](const uint16_t* src, size_t stride, uint8_t* const* rows) {
          encode_index_rows_fp4(reinterpret_cast<const bf16*>(src), stride, R, dims, rows, nullptr);
        },
        what + " bf16");
  }
}

// ---- sink attention over FP8 rows --------------------------------------------------------------

struct Fp8AttnCase {
  std::string name;
  int H, d, rope_dims;
  std::vector<int> rows;  // per token
};

// Random bf16 values in [-1, 1).
std::vector<uint16_t> random_bf16_bits(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> bits(n);
  for (uint16_t& b : bits) b = to_bf16_bits(dist(rng));
  return bits;
}

class SinkAttentionFp8Cuda : public ::testing::TestWithParam<Fp8AttnCase> {};

TEST_P(SinkAttentionFp8Cuda, EqualsBf16AttentionOnDecodedRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Fp8AttnCase& c = GetParam();
  std::mt19937 rng(2024u + static_cast<unsigned>(c.rows.size() * 13 + c.rope_dims));
  const int T = static_cast<int>(c.rows.size());
  const int max_rows = *std::max_element(c.rows.begin(), c.rows.end());
  const int pool_rows = max_rows + 257;
  const size_t row_bytes = kv_fp8_row_bytes(c.d, c.rope_dims);

  // Row values: per 64-dim block a magnitude in [1/8, 8], RoPE dims in [-1, 1), a few edge blocks.
  std::vector<float> x(static_cast<size_t>(pool_rows) * c.d);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-3, 3);
  for (int r = 0; r < pool_rows; ++r)
    for (int lo = 0; lo < c.d; lo += 64) {
      const float m = r % 17 == 3 ? 1e-6f : std::ldexp(1.0f, binade(rng));  // some blocks below the floor
      for (int i = lo; i < lo + 64; ++i) x[static_cast<size_t>(r) * c.d + i] = (r % 29 == 1 ? 0.0f : unit(rng) * m);
    }
  const KvRowFormat f{KvCacheDtype::kFP8, c.d, c.rope_dims};
  const std::vector<uint8_t> encoded = cpu_encode_kv(x, pool_rows, c.d, c.rope_dims);
  std::vector<uint16_t> decoded_bits(x.size());
  std::vector<float> row(c.d);
  for (int r = 0; r < pool_rows; ++r) {
    f.decode(encoded.data() + r * row_bytes, row.data());
    for (int i = 0; i < c.d; ++i) {
      const uint16_t b = to_bf16_bits(row[i]);
      ASSERT_EQ(from_bf16_bits(b), row[i]) << "decoded value not a bf16 value";
      decoded_bits[static_cast<size_t>(r) * c.d + i] = b;
    }
  }

  const std::vector<uint16_t> q = random_bf16_bits(static_cast<size_t>(T) * c.H * c.d, rng);
  std::vector<float> sinks;
  std::uniform_real_distribution<float> moderate(-2.0f, 2.0f);
  for (int h = 0; h < c.H; ++h) sinks.push_back(h % 4 == 0 ? 12.0f : h % 4 == 1 ? -30.0f : moderate(rng));
  std::vector<int> perm(pool_rows), row_index, row_begin{0};
  std::iota(perm.begin(), perm.end(), 0);
  for (int n : c.rows) {
    std::shuffle(perm.begin(), perm.end(), rng);
    row_index.insert(row_index.end(), perm.begin(), perm.begin() + n);
    row_begin.push_back(static_cast<int>(row_index.size()));
  }

  DeviceArray<uint16_t> d_q(q), d_pool_bf16(decoded_bits);
  DeviceArray<uint8_t> d_pool_fp8(encoded);
  std::vector<const bf16*> ptr_bf16;
  std::vector<const uint8_t*> ptr_fp8;
  for (int idx : row_index) {
    ptr_bf16.push_back(as_bf16(d_pool_bf16) + static_cast<size_t>(idx) * c.d);
    ptr_fp8.push_back(d_pool_fp8.get() + static_cast<size_t>(idx) * row_bytes);
  }
  if (ptr_bf16.empty()) {
    ptr_bf16.push_back(nullptr);
    ptr_fp8.push_back(nullptr);
  }
  DeviceArray<const bf16*> d_ptr_bf16(ptr_bf16);
  DeviceArray<const uint8_t*> d_ptr_fp8(ptr_fp8);
  DeviceArray<int> d_begin(row_begin);
  DeviceArray<float> d_sinks(sinks);
  const size_t out_n = static_cast<size_t>(T) * c.H * c.d;
  DeviceArray<float> d_out_bf16(out_n), d_out_fp8(out_n);
  DeviceArray<unsigned char> ws(sink_attention_workspace_bytes(T, c.H, c.d, max_rows));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  for (AttnProbabilities probs : {AttnProbabilities::kBf16, AttnProbabilities::kBf16HiLo}) {
    SCOPED_TRACE(probs == AttnProbabilities::kBf16 ? "bf16 probabilities" : "hi/lo probabilities");
    CUDA_CHECK(cudaMemset(d_out_bf16.get(), 0xff, out_n * sizeof(float)));
    CUDA_CHECK(cudaMemset(d_out_fp8.get(), 0xff, out_n * sizeof(float)));
    sink_attention(as_bf16(d_q), T, c.H, c.d, d_ptr_bf16.get(), d_begin.get(), max_rows, d_sinks.get(), scale,
                   d_out_bf16.get(), ws.get(), nullptr, probs);
    sync_and_check();
    sink_attention_fp8(as_bf16(d_q), T, c.H, c.d, c.rope_dims, d_ptr_fp8.get(), d_begin.get(), max_rows,
                       d_sinks.get(), scale, d_out_fp8.get(), ws.get(), nullptr, probs);
    sync_and_check();
    const std::vector<float> want = d_out_bf16.download(), got = d_out_fp8.download();
    int bad = 0, nonfinite = 0;
    for (size_t i = 0; i < out_n; ++i) {
      if (!std::isfinite(want[i])) ++nonfinite;
      if (float_bits(got[i]) != float_bits(want[i]) && ++bad <= 8)
        ADD_FAILURE() << "token " << i / (static_cast<size_t>(c.H) * c.d) << " head " << i / c.d % c.H << " dim "
                      << i % c.d << ": fp8 " << got[i] << " bf16 " << want[i];
    }
    EXPECT_EQ(bad, 0) << "of " << out_n << " outputs";
    EXPECT_EQ(nonfinite, 0) << "the bf16 reference has non-finite outputs";
  }
}

std::vector<int> counts(int T, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(T);
  for (int& n : v) n = dist(rng);
  return v;
}
std::vector<int> one_to_600_with_edges() {  // 37 tokens: tile and split edges, then random
  std::vector<int> v{1, 2, 63, 64, 65, 127, 128, 129, 319, 320, 321, 384, 599, 600, 0};
  const std::vector<int> r = counts(37 - static_cast<int>(v.size()), 1, 600, 5u);
  v.insert(v.end(), r.begin(), r.end());
  return v;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SinkAttentionFp8Cuda,
    ::testing::Values(Fp8AttnCase{"t1_r1", 64, 512, 64, {1}}, Fp8AttnCase{"t1_r37", 64, 512, 64, {37}},
                      Fp8AttnCase{"t1_r64", 64, 512, 64, {64}}, Fp8AttnCase{"t1_r65", 64, 512, 64, {65}},
                      Fp8AttnCase{"t1_r600", 64, 512, 64, {600}},  // two splits + combine
                      Fp8AttnCase{"t37_mixed", 64, 512, 64, one_to_600_with_edges()},
                      Fp8AttnCase{"t200_mixed", 64, 512, 64, counts(200, 1, 600, 6u)},  // 64 heads per CTA
                      Fp8AttnCase{"t37_no_rope", 64, 512, 0, counts(37, 1, 600, 7u)},
                      Fp8AttnCase{"t5_h3", 3, 512, 64, {1, 100, 600, 2, 0}}),
    [](const ::testing::TestParamInfo<Fp8AttnCase>& info) { return info.param.name; });

// ---- indexer over FP4 keys ---------------------------------------------------------------------

struct Fp4IndexerCase {
  std::string name;
  int heads, dim;
  std::vector<int> keys;  // per token
  bool release;           // indexer_scores_release(_fp4) instead of indexer_scores(_fp4)
};

class IndexerFp4Cuda : public ::testing::TestWithParam<Fp4IndexerCase> {};

TEST_P(IndexerFp4Cuda, EqualsBf16IndexerOnDecodedKeys) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Fp4IndexerCase& c = GetParam();
  std::mt19937 rng(77u + static_cast<unsigned>(c.dim * 5 + c.heads));
  const int T = static_cast<int>(c.keys.size());
  const int max_keys = *std::max_element(c.keys.begin(), c.keys.end());
  const int stride = max_keys + 3;
  const int pool_keys = max_keys + 100;
  const size_t key_bytes = index_fp4_row_bytes(c.dim);

  // Keys: random Hadamard-like values of varied block magnitudes, some zero / tiny blocks.
  std::vector<float> x(static_cast<size_t>(pool_keys) * c.dim);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-4, 4);
  for (int r = 0; r < pool_keys; ++r)
    for (int lo = 0; lo < c.dim; lo += 32) {
      const float m = r % 13 == 2 ? 1e-38f : std::ldexp(1.0f, binade(rng));
      for (int i = lo; i < lo + 32; ++i) x[static_cast<size_t>(r) * c.dim + i] = r % 31 == 4 ? -0.0f : unit(rng) * m;
    }
  const IndexRowFormat f{KvCacheDtype::kFP8, c.dim};
  const std::vector<uint8_t> encoded = cpu_encode_index(x, pool_keys, c.dim);
  std::vector<uint16_t> decoded_bits(x.size());
  std::vector<float> key(c.dim);
  for (int r = 0; r < pool_keys; ++r) {
    f.decode(encoded.data() + r * key_bytes, key.data());
    for (int i = 0; i < c.dim; ++i) {
      const uint16_t b = to_bf16_bits(key[i]);
      ASSERT_EQ(from_bf16_bits(b), key[i]) << "decoded value not a bf16 value";
      decoded_bits[static_cast<size_t>(r) * c.dim + i] = b;
    }
  }

  const std::vector<uint16_t> q = random_bf16_bits(static_cast<size_t>(T) * c.heads * c.dim, rng);
  std::vector<float> weights(static_cast<size_t>(T) * c.heads);
  for (float& w : weights) w = unit(rng);
  std::vector<int> key_index, key_begin, num_keys = c.keys, perm(pool_keys);
  std::iota(perm.begin(), perm.end(), 0);
  for (int n : c.keys) {
    std::shuffle(perm.begin(), perm.end(), rng);
    key_begin.push_back(static_cast<int>(key_index.size()));
    key_index.insert(key_index.end(), perm.begin(), perm.begin() + n);
  }

  DeviceArray<uint16_t> d_q(q), d_pool_bf16(decoded_bits);
  DeviceArray<uint8_t> d_pool_fp4(encoded);  // packed keys: the alignment indexer_scores_fp4 requires
  std::vector<const bf16*> ptr_bf16;
  std::vector<const uint8_t*> ptr_fp4;
  for (int idx : key_index) {
    ptr_bf16.push_back(as_bf16(d_pool_bf16) + static_cast<size_t>(idx) * c.dim);
    ptr_fp4.push_back(d_pool_fp4.get() + static_cast<size_t>(idx) * key_bytes);
  }
  DeviceArray<const bf16*> d_ptr_bf16(ptr_bf16);
  DeviceArray<const uint8_t*> d_ptr_fp4(ptr_fp4);
  DeviceArray<float> d_w(weights);
  DeviceArray<int> d_begin(key_begin), d_num(num_keys);
  DeviceArray<float> d_want(static_cast<size_t>(T) * stride), d_got(static_cast<size_t>(T) * stride);
  CUDA_CHECK(cudaMemset(d_want.get(), 0xff, d_want.size() * sizeof(float)));
  CUDA_CHECK(cudaMemset(d_got.get(), 0xff, d_got.size() * sizeof(float)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  if (c.release) {
    indexer_scores_release(as_bf16(d_q), d_w.get(), T, c.heads, c.dim, d_ptr_bf16.get(), d_begin.get(), d_num.get(),
                           max_keys, d_want.get(), stride, nullptr);
    indexer_scores_release_fp4(as_bf16(d_q), d_w.get(), T, c.heads, c.dim, d_ptr_fp4.get(), d_begin.get(),
                               d_num.get(), max_keys, d_got.get(), stride, nullptr);
  } else {
    indexer_scores(as_bf16(d_q), d_w.get(), T, c.heads, c.dim, d_ptr_bf16.get(), d_begin.get(), d_num.get(), max_keys,
                   scale, d_want.get(), stride, nullptr);
    indexer_scores_fp4(as_bf16(d_q), d_w.get(), T, c.heads, c.dim, d_ptr_fp4.get(), d_begin.get(), d_num.get(),
                       max_keys, scale, d_got.get(), stride, nullptr);
  }
  sync_and_check();
  const std::vector<float> want = d_want.download(), got = d_got.download();
  int bad = 0, nonfinite = 0;
  for (int t = 0; t < T; ++t)
    for (int w = 0; w < stride; ++w) {
      const size_t i = static_cast<size_t>(t) * stride + w;
      if (w < c.keys[t] && !std::isfinite(want[i])) ++nonfinite;
      if (float_bits(got[i]) != float_bits(want[i]) && ++bad <= 8)
        ADD_FAILURE() << "token " << t << " key " << w << " (of " << c.keys[t] << "): fp4 " << got[i] << " bf16 "
                      << want[i];
    }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(nonfinite, 0) << "the bf16 reference has non-finite scores";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, IndexerFp4Cuda,
    ::testing::Values(Fp4IndexerCase{"h64_d128", 64, 128, {2000, 1, 777, 64, 65, 0}, false},
                      Fp4IndexerCase{"h64_d64", 64, 64, {2000, 129, 1}, false},
                      Fp4IndexerCase{"h64_d128_t1", 64, 128, {1999}, false},
                      Fp4IndexerCase{"h80_d128", 80, 128, {700, 3}, false},  // two head blocks
                      Fp4IndexerCase{"h64_d32", 64, 32, {300, 65}, false},   // 1-byte aligned keys
                      Fp4IndexerCase{"h64_d96", 64, 96, {300, 65}, false},   // 1-byte aligned keys
                      Fp4IndexerCase{"h5_d256", 5, 256, {500, 2}, false},    // 8-byte aligned keys
                      Fp4IndexerCase{"release_h64_d128", 64, 128, {2000, 1, 300}, true},
                      Fp4IndexerCase{"release_h20_d64", 20, 64, {500, 7}, true}),
    [](const ::testing::TestParamInfo<Fp4IndexerCase>& info) { return info.param.name; });

}  // namespace
}  // namespace deepinfer::backend::cuda
