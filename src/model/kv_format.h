// How KV rows and indexer keys are stored in the state cache (the KV cache dtype).
//
//   kF32   row as fp32 (exact numerics' default: lossless for fp32 activations)
//   kBF16  row as bf16 (release numerics' default: its KV rows are bf16 values, so lossless there)
//   kFP8   KV row: the non-RoPE dims as FP8 e4m3 with one ue8m0 (power-of-two) scale per 64 dims,
//          the RoPE dims as bf16 — FlashMLA's V4 layout, 584 B for a 512-d row with 64 RoPE dims:
//          [448 e4m3][7 scale bytes][1 pad][64 x bf16]. Indexer key: FP4 e2m1 (two codes per byte,
//          low nibble = even dim) with one ue8m0 scale per 32 dims, 68 B for 128 dims. Lossy: rows are
//          rounded through these formats (the quantization the release was trained with) before any
//          query reads them, the rows of the chunk that produced them included.
//
// decode(encode(row)) == round_trip(row) bit for bit, and round_trip is idempotent, so a row reads
// the same whether it comes from the chunk being computed or from the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace deepinfer::model {

enum class KvCacheDtype { kF32, kBF16, kFP8 };

const char* kv_cache_dtype_name(KvCacheDtype d);  // "float32", "bfloat16", "fp8"
// Accepts float32|fp32, bfloat16|bf16, fp8|fp8_e4m3 (vLLM's spellings); nullopt otherwise.
std::optional<KvCacheDtype> kv_cache_dtype_from_name(std::string_view name);
// "auto": float32 when `release` is false (exact numerics), bfloat16 when true — lossless for each.
// Any other name must be valid (see kv_cache_dtype_from_name).
KvCacheDtype resolve_kv_cache_dtype(std::string_view name, bool release);

// A KV row of `dims` values whose last `rope_dims` carry RoPE.
struct KvRowFormat {
  KvCacheDtype dtype = KvCacheDtype::kF32;
  int dims = 0;
  int rope_dims = 0;
  size_t bytes() const;
  void encode(const float* row, uint8_t* dst) const;
  void decode(const uint8_t* src, float* row) const;
  void round_trip(float* row) const;  // row = decode(encode(row))
};

// An indexer key row of `dims` values (FP4 under kFP8).
struct IndexRowFormat {
  KvCacheDtype dtype = KvCacheDtype::kF32;
  int dims = 0;
  size_t bytes() const;
  void encode(const float* row, uint8_t* dst) const;
  void decode(const uint8_t* src, float* row) const;
  void round_trip(float* row) const;
};

}  // namespace deepinfer::model
