// KV cache storage formats (model/kv_format.h): sizes, bytes of hand-computed rows, and the promise
// decode(encode(row)) == round_trip(row), bit for bit.
#include "model/kv_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/numerics.h"

namespace deepinfer::model {
namespace {

TEST(KvFormat, RowSizes) {
  // FlashMLA's V4 row: 448 e4m3 + 7 scales + 1 pad + 64 bf16.
  EXPECT_EQ((KvRowFormat{KvCacheDtype::kFP8, 512, 64}.bytes()), 584u);
  EXPECT_EQ((KvRowFormat{KvCacheDtype::kBF16, 512, 64}.bytes()), 1024u);
  EXPECT_EQ((KvRowFormat{KvCacheDtype::kF32, 512, 64}.bytes()), 2048u);
  EXPECT_EQ((KvRowFormat{KvCacheDtype::kFP8, 256, 64}.bytes()), 324u);  // 192 + 3 scales + 1 pad + 128
  EXPECT_EQ((KvRowFormat{KvCacheDtype::kFP8, 100, 36}.bytes()), 138u);  // 64 + 1 scale + 1 pad + 72
  EXPECT_EQ((IndexRowFormat{KvCacheDtype::kFP8, 128}.bytes()), 68u);    // 64 packed + 4 scales
  EXPECT_EQ((IndexRowFormat{KvCacheDtype::kFP8, 64}.bytes()), 34u);
  EXPECT_EQ((IndexRowFormat{KvCacheDtype::kBF16, 128}.bytes()), 256u);
}

TEST(KvFormat, NamesAndAuto) {
  EXPECT_EQ(kv_cache_dtype_from_name("fp8"), KvCacheDtype::kFP8);
  EXPECT_EQ(kv_cache_dtype_from_name("fp8_e4m3"), KvCacheDtype::kFP8);
  EXPECT_EQ(kv_cache_dtype_from_name("bf16"), KvCacheDtype::kBF16);
  EXPECT_EQ(kv_cache_dtype_from_name("float32"), KvCacheDtype::kF32);
  EXPECT_FALSE(kv_cache_dtype_from_name("fp8_e5m2").has_value());
  EXPECT_FALSE(kv_cache_dtype_from_name("auto").has_value());
  EXPECT_EQ(resolve_kv_cache_dtype("auto", false), KvCacheDtype::kF32);
  EXPECT_EQ(resolve_kv_cache_dtype("auto", true), KvCacheDtype::kBF16);
  EXPECT_STREQ(kv_cache_dtype_name(KvCacheDtype::kFP8), "fp8");
}

TEST(KvFormat, Fp8RowBytesByHand) {
  const KvRowFormat f{KvCacheDtype::kFP8, 512, 64};
  std::vector<float> row(512, 0.0f);
  // Block 0: amax 3 -> s = 2^ceil(log2(3/448)) = 2^-7.
  row[0] = 3.0f;      // 384 = 1.5 * 2^8: exponent field 15, mantissa 4 -> 0x7c
  row[1] = -0.5f;     // -64 = -1.0 * 2^6: 0x80 | 13 << 3 -> 0xe8
  row[2] = 0.01f;     // 1.28 -> 1.25 (mantissa 2, exponent field 7) -> 0x3a, reads back 1.25 * 2^-7
  row[3] = 0x1p-20f;  // 2^-13 after scaling: below half the smallest subnormal (2^-9) -> 0
  // Block 1 all zero: amax floor 1e-4 -> s = 2^ceil(log2(1e-4 / 448)) = 2^-22.
  row[448] = 1.0f + 0x1p-10f;  // RoPE dims in bf16: rounds to 1.0 = 0x3f80
  row[511] = -2.0f;            // 0xc000
  std::vector<uint8_t> b(f.bytes(), 0xee);
  f.encode(row.data(), b.data());
  EXPECT_EQ(b[0], 0x7c);
  EXPECT_EQ(b[1], 0xe8);
  EXPECT_EQ(b[2], 0x3a);
  EXPECT_EQ(b[3], 0x00);
  EXPECT_EQ(b[64], 0x00);
  EXPECT_EQ(b[448], 127 - 7);   // block 0 scale byte
  EXPECT_EQ(b[449], 127 - 22);  // block 1
  EXPECT_EQ(b[455], 0);         // pad
  EXPECT_EQ(b[456], 0x80);      // first RoPE dim, little-endian bf16
  EXPECT_EQ(b[457], 0x3f);
  EXPECT_EQ(b[582], 0x00);
  EXPECT_EQ(b[583], 0xc0);
  std::vector<float> back(512);
  f.decode(b.data(), back.data());
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[1], -0.5f);
  EXPECT_EQ(back[2], 1.25f * 0x1p-7f);
  EXPECT_EQ(back[3], 0.0f);
  EXPECT_EQ(back[448], 1.0f);
  EXPECT_EQ(back[511], -2.0f);
}

TEST(KvFormat, Fp4IndexKeyBytesByHand) {
  const IndexRowFormat f{KvCacheDtype::kFP8, 64};
  std::vector<float> row(64, 0.0f);
  // Block 0: amax 5 -> s = 2^ceil(log2(5/6)) = 1.
  row[0] = 5.0f;    // halfway between 4 and 6: ties to even -> 4, code 6
  row[1] = -1.0f;   // code 0x8 | 2
  row[2] = 0.26f;   // -> 0.5, code 1
  row[3] = 1.75f;   // halfway between 1.5 and 2: ties to even -> 2, code 4
  // Block 1: amax 0.75 -> s = 2^ceil(log2(0.125)) = 0.125; 0.75 / 0.125 = 6, code 7.
  row[32] = -0.75f;
  std::vector<uint8_t> b(f.bytes(), 0xee);
  f.encode(row.data(), b.data());
  EXPECT_EQ(b[0], 0xa6);  // low nibble = even dim
  EXPECT_EQ(b[1], 0x41);
  EXPECT_EQ(b[16], 0x0f);  // dim 32: -6 -> 0x8 | 7; dim 33: 0
  EXPECT_EQ(b[32], 127);
  EXPECT_EQ(b[33], 127 - 3);
  std::vector<float> back(64);
  f.decode(b.data(), back.data());
  EXPECT_EQ(back[0], 4.0f);
  EXPECT_EQ(back[1], -1.0f);
  EXPECT_EQ(back[2], 0.5f);
  EXPECT_EQ(back[3], 2.0f);
  EXPECT_EQ(back[32], -0.75f);
}

std::vector<float> random_row(std::mt19937& rng, int n) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 10), kind(0, 9);
  std::vector<float> row(n);
  for (float& v : row) {
    switch (kind(rng)) {
      case 0: v = 0.0f; break;
      case 1: v = -0.0f; break;
      case 2: v = std::ldexp(g(rng), e(rng)); break;  // wide dynamic range inside a block
      default: v = round_bf16(g(rng) * 2.0f); break;  // bf16 activations, as release numerics has
    }
  }
  return row;
}

TEST(KvFormat, DecodeOfEncodeIsTheRoundTripBitForBit) {
  std::mt19937 rng(7);
  for (KvCacheDtype d : {KvCacheDtype::kF32, KvCacheDtype::kBF16, KvCacheDtype::kFP8}) {
    for (auto [dims, rope] : {std::pair{512, 64}, std::pair{256, 64}, std::pair{100, 36}}) {
      const KvRowFormat f{d, dims, rope};
      for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> row = random_row(rng, dims), rt = row, back(dims), again;
        std::vector<uint8_t> b(f.bytes());
        f.encode(row.data(), b.data());
        f.decode(b.data(), back.data());
        f.round_trip(rt.data());
        ASSERT_EQ(std::memcmp(back.data(), rt.data(), dims * sizeof(float)), 0) << kv_cache_dtype_name(d) << " " << dims;
        again = rt;
        f.round_trip(again.data());  // idempotent: a cached row reads back as itself
        ASSERT_EQ(std::memcmp(again.data(), rt.data(), dims * sizeof(float)), 0);
      }
    }
    for (int dims : {128, 64, 48}) {
      const IndexRowFormat f{d, dims};
      for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> row = random_row(rng, dims), rt = row, back(dims);
        std::vector<uint8_t> b(f.bytes());
        f.encode(row.data(), b.data());
        f.decode(b.data(), back.data());
        f.round_trip(rt.data());
        ASSERT_EQ(std::memcmp(back.data(), rt.data(), dims * sizeof(float)), 0) << kv_cache_dtype_name(d) << " " << dims;
        std::vector<float> again = rt;
        f.round_trip(again.data());
        ASSERT_EQ(std::memcmp(again.data(), rt.data(), dims * sizeof(float)), 0);
      }
    }
  }
}

// FP8 keeps about 2^-4 relative precision per value of a block's largest magnitude; RoPE dims 2^-8.
TEST(KvFormat, Fp8ErrorIsBoundedByTheBlockScale) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const KvRowFormat f{KvCacheDtype::kFP8, 512, 64};
  std::vector<float> row(512), rt;
  for (float& v : row) v = g(rng);
  rt = row;
  f.round_trip(rt.data());
  for (int b = 0; b < 7; ++b) {
    float amax = 0.0f;
    for (int i = 64 * b; i < 64 * b + 64; ++i) amax = std::max(amax, std::fabs(row[i]));
    for (int i = 64 * b; i < 64 * b + 64; ++i) EXPECT_LE(std::fabs(rt[i] - row[i]), amax / 16.0f + 1e-30f) << i;
  }
  for (int i = 448; i < 512; ++i) EXPECT_LE(std::fabs(rt[i] - row[i]), std::fabs(row[i]) / 256.0f) << i;
}

}  // namespace
}  // namespace deepinfer::model
