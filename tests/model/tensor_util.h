// Tensors in tests (CPU and GPU): a safetensors view's values as floats or token ids, and how far a
// tensor is from a reference (teacher forcing, taps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "io/dtype.h"
#include "io/safetensors.h"

namespace deepinfer::testing {

// F32 or BF16 values (other dtypes give zeros).
inline std::vector<float> to_floats(const io::TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == io::DType::kF32) std::memcpy(&out[i], t.data + 4 * i, 4);
    else if (t.dtype == io::DType::kBF16) out[i] = io::bf16_to_f32(static_cast<uint16_t>(t.data[2 * i] | (t.data[2 * i + 1] << 8)));
  }
  return out;
}

// I64 token ids as int32.
inline std::vector<int32_t> to_ids(const io::TensorView& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v;
    std::memcpy(&v, t.data + 8 * i, 8);
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

struct TensorError {
  double rel_rms = 0.0;  // rms(got - want) / rms(want)
  double max_abs = 0.0;
  double equal = 0.0;    // fraction of elements bitwise equal (1 for empty tensors)
};

inline TensorError tensor_error(const float* got, const float* want, size_t n) {
  TensorError e;
  double se = 0.0, sr = 0.0;
  size_t eq = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    se += d * d;
    sr += static_cast<double>(want[i]) * want[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    eq += got[i] == want[i];
  }
  e.rel_rms = std::sqrt(se / std::max(sr, 1e-30));
  e.equal = n == 0 ? 1.0 : static_cast<double>(eq) / static_cast<double>(n);
  return e;
}

}  // namespace deepinfer::testing
