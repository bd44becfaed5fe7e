// FP8 KV rows and FP4 indexer keys on the GPU (kv_fp8.h). The encoders are line-by-line ports of
// model::KvRowFormat::encode / IndexRowFormat::encode (model/kv_format.cc, model/numerics.cc) with
// every fp32 operation an explicit _rn intrinsic or an exact operation (max, fabs, frexp, ldexp,
// rint), so the bytes are the CPU's. One warp per row: a 64-dim FP8 block is 2 values per lane, a
// 32-dim FP4 block 1 value per lane; a block's amax is a butterfly of fmaxf (max is exact and
// order-free, and fmaxf skips NaN like std::fmax).

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/kv_fp8.h"
#include "backend/cuda/fp8_round.cuh"
#include "backend/cuda/kv_fp8_device.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda {
namespace {

#define KVFP8_REQUIRE(cond)                                                                        \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: deepinfer kv fp8 kernels: requirement failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                                               \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)

constexpr int kEncodeThreads = 256;  // 8 rows per block
constexpr float kFp8AmaxFloor = 1e-4f;
constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(bf16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// model::pow2_ceil_scale and kv_format.cc's scale_byte: s = 2^(exp - 127 + up), byte = ilogb(s) + 127.
struct Pow2Scale {
  float s;
  uint32_t byte;
};
__device__ __forceinline__ Pow2Scale pow2_ceil_scale(float a, float inv_qmax) {
  const uint32_t bits = __float_as_uint(__fmul_rn(a, inv_qmax));
  const uint32_t byte = ((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0u ? 1u : 0u);
  return {__uint_as_float(byte << 23), byte};
}

// kv_format.cc's e4m3_code (v on the e4m3 grid).
__device__ __forceinline__ uint32_t e4m3_code(float v) {
  const uint32_t sign = signbit(v) ? 0x80u : 0u;
  const float a = fabsf(v);
  if (a == 0.0f) return sign;
  if (a < 0x1p-6f) return sign | static_cast<uint32_t>(__fmul_rn(a, 512.0f));
  int e;
  const float f = frexpf(a, &e);
  const int mant = static_cast<int>(__fmul_rn(__fsub_rn(__fmul_rn(f, 2.0f), 1.0f), 8.0f));
  return sign | static_cast<uint32_t>(((e - 1 + 7) << 3) | mant);
}

// model::round_e2m1.
__device__ __forceinline__ float round_e2m1(float x) {
  if (isnan(x)) return x;
  const float a = fabsf(x);
  if (a >= 6.0f) return copysignf(6.0f, x);
  const int q_exp = a < 2.0f ? -1 : (a < 4.0f ? 0 : 1);
  float r = ldexpf(rintf(ldexpf(a, -q_exp)), q_exp);
  if (r > 6.0f) r = 6.0f;
  return copysignf(r, x);
}

// kv_format.cc's e2m1_code (v on the e2m1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}).
__device__ __forceinline__ uint32_t e2m1_code(float v) {
  const float a = fabsf(v);
  const uint32_t c = a < 2.0f ? static_cast<uint32_t>(__fmul_rn(a, 2.0f))
                              : (a == 2.0f ? 4u : (a == 3.0f ? 5u : (a == 4.0f ? 6u : 7u)));
  return (signbit(v) ? 8u : 0u) | c;
}

// io::f32_to_bf16 (RNE, NaN quieted) in integer arithmetic. Not __float2bfloat16_rn: on H200, nvcc 13.0
// code stored a saturating f32 -> u8 of the value as the low byte (0 for tiny, 255 for huge positive
// values; high byte right): ptxas appears to fuse cvt.rn.bf16.f32 with the st.u8 (cf. tinygrad#17343).
__device__ __forceinline__ uint32_t bf16_bits_rn(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return ((bits >> 16) | 0x40u) & 0xffffu;
  return ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) & 0xffffu;
}

__device__ __forceinline__ uint8_t* row_destination(uint8_t* const* dst_rows, uint8_t* dst, size_t dst_stride, int row) {
  return dst_rows != nullptr ? dst_rows[row] : dst + static_cast<size_t>(row) * dst_stride;
}

// model::KvRowFormat::encode (kFP8), one warp per row.
template <class Src>
__global__ void __launch_bounds__(kEncodeThreads) encode_kv_fp8_kernel(const Src* src, size_t src_stride, int R,
                                                                        int dims, int rope_dims,
                                                                        uint8_t* const* dst_rows, uint8_t* dst,
                                                                        size_t dst_stride) {
  pdl_prologue();
  const int row = static_cast<int>((blockIdx.x * static_cast<unsigned>(kEncodeThreads) + threadIdx.x) / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= R) return;
  uint8_t* d = row_destination(dst_rows, dst, dst_stride, row);
  if (d == nullptr) return;
  const Src* x = src + static_cast<size_t>(row) * src_stride;
  const int nope = dims - rope_dims, nb = (nope + 63) / 64;
  for (int b = 0; b < nb; ++b) {
    const int lo = b * 64, n = min(64, nope - lo);
    const int i0 = 2 * lane, i1 = 2 * lane + 1;
    const float v0 = i0 < n ? widen(x[lo + i0]) : 0.0f;
    const float v1 = i1 < n ? widen(x[lo + i1]) : 0.0f;
    const float amax = warp_max(fmaxf(fabsf(v0), fabsf(v1)));
    const Pow2Scale s = pow2_ceil_scale(fmaxf(amax, kFp8AmaxFloor), 1.0f / 448.0f);
    if (lane == 0) d[nope + b] = static_cast<uint8_t>(s.byte);
    if (i0 < n) d[lo + i0] = static_cast<uint8_t>(e4m3_code(round_e4m3(__fdiv_rn(v0, s.s))));
    if (i1 < n) d[lo + i1] = static_cast<uint8_t>(e4m3_code(round_e4m3(__fdiv_rn(v1, s.s))));
  }
  if (lane == 0 && (nope + nb) % 2 != 0) d[nope + nb] = 0;  // the pad byte
  uint8_t* tail = d + (static_cast<size_t>(nope) + nb + 1) / 2 * 2;
  for (int i = lane; i < rope_dims; i += 32) {
    const uint32_t h = bf16_bits_rn(widen(x[nope + i]));
    tail[2 * i] = static_cast<uint8_t>(h & 0xffu);
    tail[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

// model::IndexRowFormat::encode (kFP8), one warp per row.
template <class Src>
__global__ void __launch_bounds__(kEncodeThreads) encode_index_fp4_kernel(const Src* src, size_t src_stride, int R,
                                                                           int dims, uint8_t* const* dst_rows,
                                                                           uint8_t* dst, size_t dst_stride) {
  pdl_prologue();
  const int row = static_cast<int>((blockIdx.x * static_cast<unsigned>(kEncodeThreads) + threadIdx.x) / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= R) return;
  uint8_t* d = row_destination(dst_rows, dst, dst_stride, row);
  if (d == nullptr) return;
  const Src* x = src + static_cast<size_t>(row) * src_stride;
  const int packed = (dims + 1) / 2, nb = (dims + 31) / 32;
  for (int b = 0; b < nb; ++b) {
    const int lo = b * 32, n = min(32, dims - lo);
    const float v = lane < n ? widen(x[lo + lane]) : 0.0f;
    const float amax = warp_max(fabsf(v));
    const Pow2Scale s = pow2_ceil_scale(fmaxf(amax, kFp4AmaxFloor), 1.0f / 6.0f);
    const uint32_t code = lane < n ? e2m1_code(round_e2m1(__fdiv_rn(v, s.s))) : 0u;
    const uint32_t odd = __shfl_down_sync(0xffffffffu, code, 1);  // lane + 1's code (0 past n)
    if (lane % 2 == 0 && lane < n) d[(lo + lane) / 2] = static_cast<uint8_t>(code | (odd << 4));
    if (lane == 0) d[packed + b] = static_cast<uint8_t>(s.byte);
  }
}

__device__ __forceinline__ float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

constexpr int kReleaseHeadChunk = 16;

// release_kernels.cu's indexer_release_kernel with each key value decoded from its FP4 row (the
// decoded fp32 value is the bf16 value that kernel would read). The per-head dots of 16 heads run
// side by side so that a key value is decoded once per 16 heads; each dot is still the sequential
// sum over ascending dims, and the head terms are added in ascending head order.
__global__ void __launch_bounds__(128) indexer_release_fp4_kernel(const bf16* q, const float* weights, int heads,
                                                                   int dim, const uint8_t* const* keys,
                                                                   const int* key_begin, const int* num_keys,
                                                                   float* score, int score_stride) {
  pdl_prologue();
  const int t = static_cast<int>(blockIdx.y);
  const int w = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (w >= num_keys[t]) return;
  const uint8_t* k = keys[key_begin[t] + w];
  const uint8_t* scales = k + (dim + 1) / 2;
  float sum = 0.0f;
  for (int h0 = 0; h0 < heads; h0 += kReleaseHeadChunk) {
    const bf16* qh = q + (static_cast<size_t>(t) * heads + h0) * dim;
    float dot[kReleaseHeadChunk];
#pragma unroll
    for (int j = 0; j < kReleaseHeadChunk; ++j) dot[j] = 0.0f;
    for (int i = 0; i < dim; ++i) {
      const uint32_t byte = k[i / 2];
      const float kv = __fmul_rn(kvfp8::e2m1_to_float(i % 2 != 0 ? byte >> 4 : byte & 0xfu),
                                 kvfp8::e8m0_to_float(scales[i / 32]));
#pragma unroll
      for (int j = 0; j < kReleaseHeadChunk; ++j)
        if (h0 + j < heads)
          dot[j] = __fadd_rn(dot[j], __fmul_rn(__bfloat162float(qh[static_cast<size_t>(j) * dim + i]), kv));
    }
#pragma unroll
    for (int j = 0; j < kReleaseHeadChunk; ++j)
      if (h0 + j < heads)
        sum = __fadd_rn(sum, bf(__fmul_rn(fmaxf(bf(dot[j]), 0.0f), weights[static_cast<size_t>(t) * heads + h0 + j])));
  }
  score[static_cast<size_t>(t) * score_stride + w] = bf(sum);
}

unsigned encode_blocks(int R) { return static_cast<unsigned>((static_cast<long long>(R) * 32 + kEncodeThreads - 1) / kEncodeThreads); }

template <class Src>
void encode_kv(const Src* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* const* dst_rows,
               uint8_t* dst, size_t dst_stride, cudaStream_t stream) {
  KVFP8_REQUIRE(R >= 0 && dims >= 1 && rope_dims >= 0 && rope_dims <= dims);
  if (R == 0) return;
  KVFP8_REQUIRE(src != nullptr && (dst_rows != nullptr || dst != nullptr));
  encode_kv_fp8_kernel<Src><<<encode_blocks(R), kEncodeThreads, 0, stream>>>(src, src_stride, R, dims, rope_dims,
                                                                             dst_rows, dst, dst_stride);
}

template <class Src>
void encode_index(const Src* src, size_t src_stride, int R, int dims, uint8_t* const* dst_rows, uint8_t* dst,
                  size_t dst_stride, cudaStream_t stream) {
  KVFP8_REQUIRE(R >= 0 && dims >= 1);
  if (R == 0) return;
  KVFP8_REQUIRE(src != nullptr && (dst_rows != nullptr || dst != nullptr));
  encode_index_fp4_kernel<Src><<<encode_blocks(R), kEncodeThreads, 0, stream>>>(src, src_stride, R, dims, dst_rows,
                                                                                dst, dst_stride);
}

}  // namespace

void encode_kv_rows_fp8(const float* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* const* dst_rows,
                        cudaStream_t stream) {
  encode_kv(src, src_stride, R, dims, rope_dims, dst_rows, nullptr, 0, stream);
}
void encode_kv_rows_fp8(const float* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* dst,
                        size_t dst_stride, cudaStream_t stream) {
  encode_kv(src, src_stride, R, dims, rope_dims, nullptr, dst, dst_stride, stream);
}
void encode_kv_rows_fp8(const bf16* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* const* dst_rows,
                        cudaStream_t stream) {
  encode_kv(src, src_stride, R, dims, rope_dims, dst_rows, nullptr, 0, stream);
}
void encode_kv_rows_fp8(const bf16* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* dst,
                        size_t dst_stride, cudaStream_t stream) {
  encode_kv(src, src_stride, R, dims, rope_dims, nullptr, dst, dst_stride, stream);
}

void encode_index_rows_fp4(const float* src, size_t src_stride, int R, int dims, uint8_t* const* dst_rows,
                           cudaStream_t stream) {
  encode_index(src, src_stride, R, dims, dst_rows, nullptr, 0, stream);
}
void encode_index_rows_fp4(const float* src, size_t src_stride, int R, int dims, uint8_t* dst, size_t dst_stride,
                           cudaStream_t stream) {
  encode_index(src, src_stride, R, dims, nullptr, dst, dst_stride, stream);
}
void encode_index_rows_fp4(const bf16* src, size_t src_stride, int R, int dims, uint8_t* const* dst_rows,
                           cudaStream_t stream) {
  encode_index(src, src_stride, R, dims, dst_rows, nullptr, 0, stream);
}
void encode_index_rows_fp4(const bf16* src, size_t src_stride, int R, int dims, uint8_t* dst, size_t dst_stride,
                           cudaStream_t stream) {
  encode_index(src, src_stride, R, dims, nullptr, dst, dst_stride, stream);
}

void indexer_scores_release_fp4(const bf16* q, const float* weights, int T, int heads, int dim,
                                const uint8_t* const* keys, const int* key_begin, const int* num_keys, int max_keys,
                                float* score, int score_stride, cudaStream_t stream) {
  if (T <= 0 || max_keys <= 0) return;
  KVFP8_REQUIRE(heads >= 1 && dim >= 1);
  indexer_release_fp4_kernel<<<dim3(static_cast<unsigned>((max_keys + 127) / 128), static_cast<unsigned>(T)), 128, 0,
                               stream>>>(q, weights, heads, dim, keys, key_begin, num_keys, score, score_stride);
}

}  // namespace deepinfer::backend::cuda
