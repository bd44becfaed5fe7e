// libFuzzer target for the two parsers that read untrusted checkpoint files:
//   io::parse_safetensors   (safetensors header + byte ranges)
//   model::parse_model_config (config.json)
// Input layout: byte 0 selects the parser (even: safetensors, odd: config.json); the rest is the
// file content. Successful parses are cross-checked (every view lies inside the buffer, every
// per-layer vector has num_layers entries) and their results are touched, so ASan sees any view
// that points outside the input and UBSan sees any arithmetic on the parsed values.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/backend.h"
#include "io/dtype.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace {

#define FUZZ_CHECK(cond)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

void fuzz_safetensors(const uint8_t* data, size_t size) {
  auto r = deepinfer::io::parse_safetensors(data, size, "fuzz.safetensors");
  if (!r.is_ok()) {
    FUZZ_CHECK(!r.status().message().empty());
    return;
  }
  using deepinfer::io::DType;
  for (const auto& v : r.value()) {
    FUZZ_CHECK(v.data >= data && v.data + v.num_bytes <= data + size);
    FUZZ_CHECK(static_cast<uint64_t>(v.num_elements()) * deepinfer::io::dtype_size(v.dtype) == v.num_bytes);
    (void)v.shape_string();
    // Decode (a bounded prefix of) every tensor: reads each byte through the view.
    const size_t n = v.num_bytes < 4096 ? v.num_bytes : 4096;
    float acc = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      switch (v.dtype) {
        case DType::kF8E4M3: acc += deepinfer::io::fp8_e4m3_to_f32(v.data[i]); break;
        case DType::kF8E8M0: acc += deepinfer::io::e8m0_to_f32(v.data[i]); break;
        case DType::kI8:
        case DType::kU8: acc += deepinfer::io::fp4_e2m1_to_f32(v.data[i]); break;
        case DType::kBF16:
          if (i + 1 < n) acc += deepinfer::io::bf16_to_f32(static_cast<uint16_t>(v.data[i] | (v.data[i + 1] << 8)));
          break;
        case DType::kF16:
          if (i + 1 < n) acc += deepinfer::io::f16_to_f32(static_cast<uint16_t>(v.data[i] | (v.data[i + 1] << 8)));
          break;
        default: acc += static_cast<float>(v.data[i]); break;
      }
    }
    volatile float sink = acc;
    (void)sink;
  }
}

void fuzz_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = deepinfer::model::parse_model_config(text, "fuzz/config.json");
  if (!r.is_ok()) {
    FUZZ_CHECK(!r.status().message().empty());
    return;
  }
  const auto& c = r.value();
  const size_t n = static_cast<size_t>(c.num_layers);
  FUZZ_CHECK(c.num_layers >= 1);
  FUZZ_CHECK(c.layer_kinds.size() == n && c.compress_ratio.size() == n && c.hash_moe.size() == n);
  FUZZ_CHECK(c.rope_head_dim >= 0 && c.rope_head_dim <= c.head_dim && c.rope_head_dim % 2 == 0);
  for (size_t i = 0; i < n; ++i) {
    FUZZ_CHECK((c.layer_kinds[i] == deepinfer::model::AttentionKind::kSliding) == (c.compress_ratio[i] == 0));
    (void)deepinfer::model::attention_kind_name(c.layer_kinds[i]);
  }
  FUZZ_CHECK(c.num_heads % c.o_groups == 0);
  FUZZ_CHECK(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.n_routed_experts);
  (void)c.q_dim();
  (void)c.shared_intermediate();
  // The RoPE tables the model would build from these parameters (bounded width).
  if (c.rope_head_dim <= 1024) {
    const auto tm = deepinfer::backend::make_rope_table(c.rope_main, c.rope_head_dim);
    const auto tc = deepinfer::backend::make_rope_table(c.rope_compress, c.rope_head_dim);
    FUZZ_CHECK(tm.inv_freq.size() == static_cast<size_t>(c.rope_head_dim / 2));
    FUZZ_CHECK(tc.inv_freq.size() == static_cast<size_t>(c.rope_head_dim / 2));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  if (selector & 1) fuzz_config(data + 1, size - 1);
  else fuzz_safetensors(data + 1, size - 1);
  return 0;
}
