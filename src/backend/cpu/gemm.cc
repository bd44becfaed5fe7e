#include "backend/cpu/gemm.h"

#include <cstddef>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace deepinfer::backend::cpu {

namespace {

// Portable definition of the per-element arithmetic: 8 partial sums over k (lane = k mod 8, fused
// multiply-add), lanes reduced as ((0+4)+(2+6)) + ((1+5)+(3+7)), then the tail added in order.
// The AVX2 kernels below perform exactly these operations.
float dot_portable(const float* a, const float* b, int K) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int K8 = K & ~7;
  for (int k = 0; k < K8; k += 8)
    for (int l = 0; l < 8; ++l) lane[l] = __builtin_fmaf(a[k + l], b[k + l], lane[l]);
  float s = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (int k = K8; k < K; ++k) s = __builtin_fmaf(a[k], b[k], s);
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float hsum_avx(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);   // lanes 0..3
  const __m128 hi = _mm256_extractf128_ps(v, 1); // lanes 4..7
  const __m128 s = _mm_add_ps(lo, hi);           // (0+4) (1+5) (2+6) (3+7)
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));  // ((0+4)+(2+6)) ((1+5)+(3+7))
  const __m128 u = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(u);
}

__attribute__((target("avx2,fma"))) float finish(__m256 acc, const float* a, const float* b, int K8, int K) {
  float s = hsum_avx(acc);
  for (int k = K8; k < K; ++k) s = __builtin_fmaf(a[k], b[k], s);
  return s;
}

// 2 rows of A x 4 rows of B.
__attribute__((target("avx2,fma"))) void kernel_2x4(const float* A, int lda, const float* B, int ldb, int K, float* C,
                                                    int ldc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
  __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  const float* a0 = A;
  const float* a1 = A + lda;
  const float *b0 = B, *b1 = B + ldb, *b2 = B + 2 * ldb, *b3 = B + 3 * ldb;
  const int K8 = K & ~7;
  for (int k = 0; k < K8; k += 8) {
    const __m256 x0 = _mm256_loadu_ps(a0 + k), x1 = _mm256_loadu_ps(a1 + k);
    __m256 w = _mm256_loadu_ps(b0 + k);
    c00 = _mm256_fmadd_ps(x0, w, c00);
    c10 = _mm256_fmadd_ps(x1, w, c10);
    w = _mm256_loadu_ps(b1 + k);
    c01 = _mm256_fmadd_ps(x0, w, c01);
    c11 = _mm256_fmadd_ps(x1, w, c11);
    w = _mm256_loadu_ps(b2 + k);
    c02 = _mm256_fmadd_ps(x0, w, c02);
    c12 = _mm256_fmadd_ps(x1, w, c12);
    w = _mm256_loadu_ps(b3 + k);
    c03 = _mm256_fmadd_ps(x0, w, c03);
    c13 = _mm256_fmadd_ps(x1, w, c13);
  }
  C[0] = finish(c00, a0, b0, K8, K);
  C[1] = finish(c01, a0, b1, K8, K);
  C[2] = finish(c02, a0, b2, K8, K);
  C[3] = finish(c03, a0, b3, K8, K);
  C[ldc + 0] = finish(c10, a1, b0, K8, K);
  C[ldc + 1] = finish(c11, a1, b1, K8, K);
  C[ldc + 2] = finish(c12, a1, b2, K8, K);
  C[ldc + 3] = finish(c13, a1, b3, K8, K);
}

__attribute__((target("avx2,fma"))) float dot_avx(const float* a, const float* b, int K) {
  __m256 acc = _mm256_setzero_ps();
  const int K8 = K & ~7;
  for (int k = 0; k < K8; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
  return finish(acc, a, b, K8, K);
}

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}
#endif

}  // namespace

float dot(const float* a, const float* b, int K) {
#if defined(__x86_64__)
  if (have_avx2()) return dot_avx(a, b, K);
#endif
  return dot_portable(a, b, K);
}

void gemm_nt(const float* A, int M, int K, const float* B, int N, float* C) {
  // Work unit: a 2-row x 4-column tile of C (edges use the single dot product, same arithmetic).
  constexpr int kNb = 64;  // columns of B per task: keeps a panel of B in cache across rows of A
  const int n_blocks = (N + kNb - 1) / kNb;
  const long long flops = static_cast<long long>(M) * N * K;
#pragma omp parallel for schedule(static) if (n_blocks > 1 && flops > (1 << 18))
  for (int nb = 0; nb < n_blocks; ++nb) {
    const int n0 = nb * kNb;
    const int n1 = n0 + kNb < N ? n0 + kNb : N;
    int m = 0;
#if defined(__x86_64__)
    if (have_avx2()) {
      for (; m + 2 <= M; m += 2) {
        int n = n0;
        for (; n + 4 <= n1; n += 4)
          kernel_2x4(A + static_cast<size_t>(m) * K, K, B + static_cast<size_t>(n) * K, K, K,
                     C + static_cast<size_t>(m) * N + n, N);
        for (; n < n1; ++n) {
          C[static_cast<size_t>(m) * N + n] = dot(A + static_cast<size_t>(m) * K, B + static_cast<size_t>(n) * K, K);
          C[static_cast<size_t>(m + 1) * N + n] =
              dot(A + static_cast<size_t>(m + 1) * K, B + static_cast<size_t>(n) * K, K);
        }
      }
    }
#endif
    for (; m < M; ++m)
      for (int n = n0; n < n1; ++n)
        C[static_cast<size_t>(m) * N + n] = dot(A + static_cast<size_t>(m) * K, B + static_cast<size_t>(n) * K, K);
  }
}

}  // namespace deepinfer::backend::cpu
