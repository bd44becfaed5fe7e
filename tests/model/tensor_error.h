// How far a tensor is from a reference, for tests that compare activations (teacher forcing, taps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace deepinfer::testing {

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
