// Token-wise ops of the CUDA backend (sm_90); the contract of every entry point is in ops.h.
//
// Conventions shared by the kernels below.
//  * Chunks. Rows are walked in "chunks" of 4 consecutive fp32 values (8 for bf16-only copies).
//    Every row reduction gives thread t of a block of fixed size the chunks t, t + blockDim, ...
//    in increasing order, accumulates with explicit fmaf, then reduces across lanes with a fixed
//    xor butterfly and across warps sequentially. The order therefore depends only on the row
//    width (and compile-time block sizes), never on M: a row's bits are the same alone or in a
//    batch.
//  * Alignment. No alignment is required of callers. A chunk is read with one 16-byte load when
//    the row width is a multiple of the chunk and every pointer involved is 16-byte aligned (8
//    bytes for 4-value bf16 stores); otherwise the same chunk is read element by element with zero
//    padding past the row end. Both paths feed the same arithmetic, so results are bitwise equal
//    whichever path runs (the tests check this with misaligned pointers and odd widths). All real
//    widths (4096, 16384, 512, 1024, 2048, ...) with cudaMalloc'd buffers take the vector path.
//  * Grids. Per-row kernels put rows on grid.x (up to 2^31 - 1) and chunk tiles on grid.y.
//  * Contract checks (hc <= 8, E <= 1024, K <= 16, ...) abort via DI_CHECK: they are caller bugs.
#include <cooperative_groups.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/ops_common.cuh"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/hc_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_common.cuh"
#include "backend/cuda/swiglu.cuh"
#include "base/check.h"

namespace deepinfer::backend::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace ops_common;  // chunk loads/stores, reductions (ops_common.cuh)
using namespace hc_common;  // mHC warp ranges, 3xTF32 step, post update, MoE combine (hc_common.cuh)

// ---------------------------------------------------------------------------------------------
// Embedding

constexpr int kCopyThreads = 128;

// X[t, i, :] = fp32(table[tokens[t], :]); chunks of 8 bf16 (one 16-byte load).
__global__ void __launch_bounds__(kCopyThreads)
    embed_kernel(const int32_t* __restrict__ tokens, const bf16* __restrict__ table, int D, int hc,
                 float* __restrict__ X, bool vec) {
  pdl_prologue();
  const int t = static_cast<int>(blockIdx.x);
  const int c = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  const int i = 8 * c;
  if (i >= D) return;
  const bf16* src = table + static_cast<size_t>(tokens[t]) * D;
  float* dst = X + static_cast<size_t>(t) * hc * D;
  if (vec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src + i);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 p0 = __bfloat1622float2(pairs[0]), p1 = __bfloat1622float2(pairs[1]);
    const float2 p2 = __bfloat1622float2(pairs[2]), p3 = __bfloat1622float2(pairs[3]);
    const float4 lo = make_float4(p0.x, p0.y, p1.x, p1.y), hi = make_float4(p2.x, p2.y, p3.x, p3.y);
    for (int s = 0; s < hc; ++s) {
      *reinterpret_cast<float4*>(dst + static_cast<size_t>(s) * D + i) = lo;
      *reinterpret_cast<float4*>(dst + static_cast<size_t>(s) * D + i + 4) = hi;
    }
    return;
  }
  for (int j = i; j < min(i + 8, D); ++j) {
    const float v = __bfloat162float(src[j]);
    for (int s = 0; s < hc; ++s) dst[static_cast<size_t>(s) * D + j] = v;
  }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm: one block per row.

constexpr int kRmsThreads = 256;  // part of the reduction order: fixed

// The two halves of an RMS norm row shared by the block and warp forms: this thread's sum of
// squares over chunks first, first + stride, ... (in order), then those chunks scaled by r (and the
// weight) and stored. Every thread rewrites only the chunks it read, so y_f32 may alias x.
__device__ __forceinline__ float rms_partial_sum(const float* xr, int n, bool vec, int first, int stride) {
  const int chunks = ceil_div(n, 4);
  float ss = 0.0f;
  for (int c = first; c < chunks; c += stride) {
    const float4 v = load4(xr, c, n, vec);
    ss = dot4(v, v, ss);
  }
  return ss;
}
// The scale of a row from its sum of squares. Same expression as the CPU reference: IEEE division
// and square root.
__device__ __forceinline__ float rms_scale(float sum_squares, int n, float eps) {
  return 1.0f / sqrtf(sum_squares / static_cast<float>(n) + eps);
}
// A chunk's values v scaled by r, then by the weight's chunk w (when there is a weight).
__device__ __forceinline__ float4 rms_scaled_values(float4 v, float r, bool has_weight, float4 w) {
  float4 y = make_float4(v.x * r, v.y * r, v.z * r, v.w * r);
  if (has_weight) y = make_float4(w.x * y.x, w.y * y.y, w.z * y.z, w.w * y.w);
  return y;
}
// Chunk c of a row scaled by r (and the weight).
__device__ __forceinline__ float4 rms_scaled_chunk(const float* xr, int c, int n, bool vec, float r,
                                                   const float* weight) {
  return rms_scaled_values(load4(xr, c, n, vec), r, weight != nullptr,
                           weight != nullptr ? load4(weight, c, n, vec) : float4{});
}
__device__ __forceinline__ void rms_scale_store(const float* xr, size_t row, int n, float r, const float* weight,
                                                float* y_f32, bf16* y_bf16, bool vec, int first, int stride) {
  const int chunks = ceil_div(n, 4);
  for (int c = first; c < chunks; c += stride) {
    const float4 y = rms_scaled_chunk(xr, c, n, vec, r, weight);
    if (y_f32 != nullptr) store4(y_f32 + row, c, n, vec, y);
    if (y_bf16 != nullptr) store4_bf16(y_bf16 + row, c, n, vec, y);
  }
}

__global__ void __launch_bounds__(kRmsThreads)
    rms_norm_kernel(const float* x, int n, const float* weight, float eps, float* y_f32, bf16* y_bf16, bool vec) {
  prefetch_l2(weight, static_cast<size_t>(n) * sizeof(float));
  pdl_prologue();
  __shared__ float scratch[kRmsThreads / 32];
  const size_t row = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(n);
  const int tid = static_cast<int>(threadIdx.x);
  const float total = block_sum<kRmsThreads>(rms_partial_sum(x + row, n, vec, tid, kRmsThreads), scratch);
  const float r = rms_scale(total, n, eps);
  // (After the barrier in block_sum: every thread has read its chunks.)
  rms_scale_store(x + row, row, n, r, weight, y_f32, y_bf16, vec, tid, kRmsThreads);
}

// Short rows (n <= kRmsWarpMaxN): one warp per row, 8 rows a block — the per-head q norm has
// T x heads rows of 512, where a 256-thread block per row left half its threads idle and paid a
// block-wide reduction per row. Lane l sums chunks l, l + 32, ... in order, then an xor butterfly:
// fixed by n, like the block form (whose order it does not reproduce bit for bit), and the same for
// the vector and scalar (unaligned) layouts, like the block form.
constexpr int kRmsWarpMaxN = 2048;
constexpr int kRmsWarpRows = 8;

// The warp form's row in registers: lane l holds chunks l, l + 32, ... (at most kRmsWarpChunks), all
// loaded before any is used, so a row waits out memory latency once rather than once per chunk (a
// decode step's norms are one or a few rows, on the critical path); the sum and the scaled values are
// the same expressions in the same order as rms_partial_sum + warp_sum and rms_scaled_chunk, so the
// bits do not change. Rows are read once (the second pass scales the registers), so y may alias x.
// kChunks (4, 8 or 16 a lane: rows up to 512, 1024 or kRmsWarpMaxN values) sizes the registers, so
// the per-head norms (n = 512) keep their occupancy.
template <int kChunks>
struct WarpRow {
  float4 v[kChunks];  // chunk lane + 32 k of the row
  float4 w[kChunks];  // the weight's same chunk (zeros without a weight)
};
template <int kChunks>
__device__ __forceinline__ void warp_row_load(const float* xr, int n, bool vec, const float* weight, int lane,
                                              WarpRow<kChunks>& row) {
  const int chunks = ceil_div(n, 4);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = lane + 32 * k;
    if (c < chunks) {
      row.v[k] = load4(xr, c, n, vec);
      row.w[k] = weight != nullptr ? load4(weight, c, n, vec) : float4{};
    }
  }
}
// The row's scale, in every lane.
template <int kChunks>
__device__ __forceinline__ float warp_row_rms_scale(const WarpRow<kChunks>& row, int n, int lane, float eps) {
  const int chunks = ceil_div(n, 4);
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (lane + 32 * k < chunks) ss = dot4(row.v[k], row.v[k], ss);
  return rms_scale(warp_sum(ss), n, eps);
}

// Registers a lane's row needs: 4, 8 or 16 chunks (n <= kRmsWarpMaxN).
int warp_row_chunks(int n) {
  const int per_lane = ceil_div(ceil_div(n, 4), 32);
  return per_lane <= 4 ? 4 : per_lane <= 8 ? 8 : 16;
}
static_assert(kRmsWarpMaxN == 16 * 4 * 32, "the largest WarpRow holds a kRmsWarpMaxN row");
// Calls f(std::integral_constant<int, chunks>{}) for warp_row_chunks(n).
template <typename F>
void with_warp_row_chunks(int n, F&& f) {
  switch (warp_row_chunks(n)) {
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return f(std::integral_constant<int, 16>{});
  }
}

template <int kChunks>
__global__ void __launch_bounds__(32 * kRmsWarpRows) rms_norm_warp_kernel(const float* x, int M, int n,
                                                                          const float* weight, float eps, float* y_f32,
                                                                          bf16* y_bf16, bool vec) {
  prefetch_l2(weight, static_cast<size_t>(n) * sizeof(float));
  pdl_prologue();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int m = static_cast<int>(blockIdx.x) * kRmsWarpRows + static_cast<int>(threadIdx.x) / 32;
  if (m >= M) return;
  const size_t row = static_cast<size_t>(m) * static_cast<size_t>(n);
  WarpRow<kChunks> values;
  warp_row_load(x + row, n, vec, weight, lane, values);
  const float r = warp_row_rms_scale(values, n, lane, eps);
  const int chunks = ceil_div(n, 4);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = lane + 32 * k;
    if (c >= chunks) break;
    const float4 y = rms_scaled_values(values.v[k], r, weight != nullptr, values.w[k]);
    if (y_f32 != nullptr) store4(y_f32 + row, c, n, vec, y);
    if (y_bf16 != nullptr) store4_bf16(y_bf16 + row, c, n, vec, y);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE: one block per row; the row's cos/sin table is built once in shared memory.

constexpr int kRopeThreads = 128;

// The pair arithmetic of every rotating kernel (rope_common.cuh): one set of roundings, so rope,
// rope_to_bf16, norm_rope and v4_kernels.cu's inverse rotation give the same bits for the same values.
using rope_common::rope_cos_sin;
using rope_common::rope_rotate;

// Token m's (cos, sin) table into shared memory ([half] cos, then [half] sin), for rope_kernel and
// rope_to_bf16_kernel; ends with the block barrier that makes it visible.
__device__ __forceinline__ void load_rope_table(float* cos_sin, const float* __restrict__ inv_freq, float p, int half,
                                                float attention_factor, bool inverse) {
  for (int i = static_cast<int>(threadIdx.x); i < half; i += static_cast<int>(blockDim.x)) {
    const float2 cs = rope_cos_sin(inv_freq[i], p, attention_factor, inverse);
    cos_sin[i] = cs.x;
    cos_sin[half + i] = cs.y;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(float* __restrict__ x, int heads, int head_dim, const int64_t* __restrict__ pos,
                const float* __restrict__ inv_freq, int rope_dim, float attention_factor, bool inverse, bool vec) {
  prefetch_l2(inv_freq, static_cast<size_t>(rope_dim / 2) * sizeof(float));
  pdl_prologue();
  extern __shared__ float cos_sin[];  // [half] cos, then [half] sin
  const int half = rope_dim / 2;
  const int m = static_cast<int>(blockIdx.x);
  load_rope_table(cos_sin, inv_freq, static_cast<float>(pos[m]), half, attention_factor, inverse);
  float* row = x + static_cast<size_t>(m) * heads * head_dim + (head_dim - rope_dim);
  for (int q = static_cast<int>(threadIdx.x); q < heads * half; q += kRopeThreads) {
    const int h = q / half, i = q % half;
    float* v = row + static_cast<size_t>(h) * head_dim + 2 * i;
    float2 ab = vec ? *reinterpret_cast<const float2*>(v) : make_float2(v[0], v[1]);
    const float2 out = rope_rotate(ab, make_float2(cos_sin[i], cos_sin[half + i]));
    if (vec) {
      *reinterpret_cast<float2*>(v) = out;
    } else {
      v[0] = out.x;
      v[1] = out.y;
    }
  }
}

// rope() then to_bf16 of the whole row, in one pass over the pairs of a token's row (x is read only).
__global__ void __launch_bounds__(kRopeThreads)
    rope_to_bf16_kernel(const float* __restrict__ x, int heads, int head_dim, const int64_t* __restrict__ pos,
                        const float* __restrict__ inv_freq, int rope_dim, float attention_factor, bf16* __restrict__ y,
                        bool vec) {
  prefetch_l2(inv_freq, static_cast<size_t>(rope_dim / 2) * sizeof(float));
  pdl_prologue();
  extern __shared__ float cos_sin[];  // [half] cos, then [half] sin
  const int half = rope_dim / 2;
  const int m = static_cast<int>(blockIdx.x);
  load_rope_table(cos_sin, inv_freq, static_cast<float>(pos[m]), half, attention_factor, false);
  const size_t row = static_cast<size_t>(m) * heads * head_dim;
  const int pairs = head_dim / 2, plain = (head_dim - rope_dim) / 2;
  for (int q = static_cast<int>(threadIdx.x); q < heads * pairs; q += kRopeThreads) {
    const int i = q % pairs - plain;  // < 0: a pair outside the rotated dims
    const float* v = x + row + 2 * static_cast<size_t>(q);
    float2 ab = vec ? *reinterpret_cast<const float2*>(v) : make_float2(v[0], v[1]);
    if (i >= 0) ab = rope_rotate(ab, make_float2(cos_sin[i], cos_sin[half + i]));
    if (vec) {
      *reinterpret_cast<__nv_bfloat162*>(y + row + 2 * static_cast<size_t>(q)) = __floats2bfloat162_rn(ab.x, ab.y);
    } else {
      y[row + 2 * static_cast<size_t>(q)] = __float2bfloat16_rn(ab.x);
      y[row + 2 * static_cast<size_t>(q) + 1] = __float2bfloat16_rn(ab.y);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// mHC pre-mix and head collapse: two kernels.
//
// hc_dots: the kMix dot products fn_j . x and the sum of squares x . x of every token's hc * D
// values (fn is 1.5 MB fp32 for hc 4, D 4096), on the tensor cores: mma.sync m16n8k8 TF32 with
// three products per step (3xTF32: x = xb + xs, fn = fb + fs, each part rounded to TF32; xs fb,
// xb fs, xb fb accumulated in that order in fp32), so the dots keep about fp32's accuracy (the
// omitted xs fs term is ~2^-22 of a product) at a fraction of the FMA pipe's issue slots (the
// fp32 kernel before it was issue- and latency-bound at 14 us a batch-256 call).
// The row's chunks (4 floats) are cut into Sw = 8 S fixed warp ranges (S = hc_splits, from hc and D
// only). Warp w of CTA (tile, s) takes range 8 s + w for the tile's 16 kMT tokens: each step, lane
// (g, t) = (lane / 4, lane % 4) loads chunk c0 + 4 step + t of token rows g, g + 8 of each m16 tile
// and of fn rows g + 8 nt; the chunk's (x, y) feed one k8 mma as k slots t and t + 4, (z, w) the
// next (which k a slot holds is free as long as x and fn agree). The sum of squares is each lane's
// fmaf chain over its chunks, then the lanes t = 0..3 of the row in an xor butterfly. The CTA adds
// its 8 warps' partials in warp order and writes part[token][s][v].
// hc_finish: one CTA per token adds its partials over s in increasing order, forms mixes, pre, post
// and comb (warp 0's Sinkhorn overlaps the other warps' collapse) and collapses the streams.
// A token's bits depend on hc and D only, never on M, on kMT or on the token's row in its tile:
// an mma's output row is a function of that row of A (and B) alone.

constexpr int kCollapseBarrier = 1;  // hc_finish's named barrier for its collapse threads

struct HcArgs {
  const float* X;
  const int* rows;  // head: X rows to read; pre: null (row = token)
  int M, D;
  const float* fn;
  const float* base;
  const float* scale;
  int iters;
  float hc_eps, norm_eps;
  float* out;  // collapsed [M, D]
  float* post;
  float* comb;
  bool vec;
  int splits;
  float* part;  // [M, splits, kMix + 1]
  // HcNorm fused into hc_finish (normed != nullptr): collapsed rows rounded to bf16 (round_collapsed),
  // then rms_norm_kernel's own steps on them.
  bool round_collapsed = false;
  const float* norm_weight = nullptr;
  float out_norm_eps = 0.0f;
  bf16* normed = nullptr;
  bool norm_vec = false;
  // The fused norm's caller reads only `normed`: the loop form (large M) then keeps the collapsed
  // row in shared memory for the norm instead of writing out. (The register form, M <= 256, writes
  // out regardless: 16 KB a token, and a branch there would cost the registers that keep it at two
  // CTAs an SM.)
  bool out_unused = false;
};

// Token's comb matrix (hc x hc, from the mixes) through softmax, +eps and Sinkhorn, by one warp;
// lane l holds elements l and l + 32. Written to comb_out[j * HC + k].
template <int HC>
__device__ void sinkhorn_warp(const float* mix, const float* base, float scale, int iters, float hc_eps,
                              float* comb_out) {
  constexpr int kElems = HC * HC;
  constexpr int kSlots = (kElems + 31) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float c[kSlots];
  int row[kSlots], col[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int e = min(lane + 32 * s, kElems - 1);  // idle lanes shadow the last element
    row[s] = e / HC;
    col[s] = e % HC;
    c[s] = fmaf(mix[2 * HC + e], scale, base[2 * HC + e]);
  }
  // Value of element idx (every lane passes its own idx; all lanes must call).
  auto at = [&](int idx) {
    float v = __shfl_sync(kFullMask, c[0], idx & 31);
    if constexpr (kSlots > 1) {
      const float v1 = __shfl_sync(kFullMask, c[1], idx & 31);
      if (idx >= 32) v = v1;
    }
    return v;
  };
  // Row softmax, then + eps (the CPU's loop order: max, exp, sequential sum, divide).
  {
    float mx[kSlots], sum[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) mx[s] = -INFINITY;
#pragma unroll
    for (int k = 0; k < HC; ++k)
#pragma unroll
      for (int s = 0; s < kSlots; ++s) mx[s] = fmaxf(mx[s], at(row[s] * HC + k));
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      c[s] = expf(c[s] - mx[s]);
      sum[s] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < HC; ++k)
#pragma unroll
      for (int s = 0; s < kSlots; ++s) sum[s] += at(row[s] * HC + k);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) c[s] = c[s] / sum[s] + hc_eps;
  }
  auto normalise = [&](bool columns) {
    float sum[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) sum[s] = 0.0f;
#pragma unroll
    for (int q = 0; q < HC; ++q)
#pragma unroll
      for (int s = 0; s < kSlots; ++s) sum[s] += at(columns ? q * HC + col[s] : row[s] * HC + q);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) c[s] = c[s] / (sum[s] + hc_eps);
  };
  normalise(true);
  for (int it = 0; it < iters - 1; ++it) {
    normalise(false);
    normalise(true);
  }
#pragma unroll
  for (int s = 0; s < kSlots; ++s)
    if (lane + 32 * s < kElems) comb_out[lane + 32 * s] = c[s];
}

// 16-byte slots a lane fills per step: chunk c of its 2 kMT token rows, then of its kNT fn rows.
template <int kMT, int kNT>
constexpr int kHcSlots = 2 * kMT + kNT;
// kBatch: steps whose loads are all in flight at once. 4 (a V4 warp's whole range) at one CTA an
// SM; 2 at two CTAs an SM (prefill), where one CTA's loads overlap the other's mma chain and
// reduction (one CTA alone runs load, compute and reduce one after the other).
template <int kBatch>
constexpr int hc_dots_ctas_per_sm() {
  return kBatch <= 2 ? 2 : 1;
}

template <int kMT, int kNT, int kBatch>
constexpr size_t hc_dots_smem_bytes(int kVals) {
  const size_t stage = static_cast<size_t>(kHcWarps) * kBatch * kHcSlots<kMT, kNT> * 32 * 16;
  const size_t reduce = static_cast<size_t>(kHcWarps) * 16 * kMT * kVals * sizeof(float);
  return stage > reduce ? stage : reduce;
}

template <int HC, int kMix, int kMT, bool kHead, int kBatch>
__global__ void __launch_bounds__(kHcThreads, hc_dots_ctas_per_sm<kBatch>()) hc_dots_kernel(HcArgs a) {
  constexpr int kNT = (kMix + 7) / 8;
  constexpr int kRows = 16 * kMT;
  constexpr int kSlots = kHcSlots<kMT, kNT>;
  // [kHcWarps][kBatch][kSlots][32] float4: each lane's own loads (it alone writes and reads
  // its slots, so cp.async.wait_group is all the synchronisation a batch needs); afterwards the
  // same memory holds the reduction [kHcWarps][kRows][kMix + 1] floats (per token: kMix dot
  // products, then the sum of squares).
  extern __shared__ float4 stage_s[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int W = HC * a.D;
  const int chunks = ceil_div(W, 4);
  const int s = static_cast<int>(blockIdx.y);
  const int ranges = a.splits * kHcWarps, range = s * kHcWarps + warp;
  const int c0 = static_cast<int>(static_cast<long long>(chunks) * range / ranges);
  const int c1 = static_cast<int>(static_cast<long long>(chunks) * (range + 1) / ranges);
  const int steps = ceil_div(c1 - c0, 4);
  const int tok0 = static_cast<int>(blockIdx.x) * kRows;
  float4* const my_slots = stage_s + static_cast<size_t>(warp) * kBatch * kSlots * 32 + lane;
  const auto slot = [&](int step_in_batch, int k) -> float4& { return my_slots[(step_in_batch * kSlots + k) * 32]; };
  // Slot k of a step <- chunk c of `row` (zeros past the range, for absent rows and past W).
  const auto fill = [&](int step_in_batch, int k, const float* row, int c) {
    const bool real = row != nullptr && c < c1;
    if (a.vec) {
      gemm_common::cp_async_16(gemm_common::shared_address(&slot(step_in_batch, k)), real ? row + 4 * c : a.fn,
                               real ? 16 : 0);
    } else {
      slot(step_in_batch, k) = real ? load4(row, c, W, false) : float4{};
    }
  };

  const float* fn_row[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) fn_row[nt] = 8 * nt + g < kMix ? a.fn + static_cast<size_t>(8 * nt + g) * W : nullptr;
  const auto fill_fn = [&](int b0) {
    for (int i = 0; i < kBatch && b0 + i < steps; ++i)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) fill(i, 2 * kMT + nt, fn_row[nt], c0 + 4 * (b0 + i) + t);
  };
  // fn is a weight (no kernel writes it): the first batch's fn loads go out before the PDL wait.
  fill_fn(0);
  pdl_prologue();

  // Token rows of this lane (rows past M read as zeros and are never stored).
  const float* x_row[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = tok0 + 16 * mt + 8 * h + g;
      x_row[mt][h] = m < a.M ? a.X + static_cast<size_t>(kHead ? a.rows[m] : m) * W : nullptr;
    }

  float acc[kMT][kNT][4];
  float ssq[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    ssq[mt][0] = ssq[mt][1] = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  }
  for (int b0 = 0; b0 < steps; b0 += kBatch) {
    if (b0 > 0) fill_fn(b0);
    for (int i = 0; i < kBatch && b0 + i < steps; ++i)
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) fill(i, 2 * mt + h, x_row[mt][h], c0 + 4 * (b0 + i) + t);
    gemm_common::cp_async_commit();
    gemm_common::cp_async_wait<0>();
    for (int i = 0; i < kBatch && b0 + i < steps; ++i) {
      float4 x[kMT][2], f[kNT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) x[mt][h] = slot(i, 2 * mt + h);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) f[nt] = slot(i, 2 * kMT + nt);
      hc_dots_chunk<kMT, kNT>(x, f, acc, ssq);
    }
  }

  // This warp's partials -> red[warp] (over the staging slots: every warp must be done reading
  // them); then the CTA's sum over its warps in warp order.
  __syncthreads();
  float* const red = reinterpret_cast<float*>(stage_s);
  hc_store_warp_partials<kMT, kNT, kMix>(acc, ssq, red);
  __syncthreads();
  hc_store_cta_partials<kMT, kMix>(red, tok0, a.M, a.splits, s, a.part);
}

// hc_finish's threads: kHcThreads collapse and norm the token's rows (rms_norm_kernel's threads
// and reduction); hc_pre adds one warp that computes post and runs the Sinkhorn iterations beside
// them (20 dependent iterations, ~4 us, that warp 0 used to run ahead of its share of the collapse).
template <bool kHead>
constexpr int hc_finish_threads() {
  return kHead ? kHcThreads : kHcThreads + 32;
}

// hc_finish's register form (kRegs): a collapse thread's kFinishChunks chunks of every stream are
// loaded into registers at the start, before the partials are summed, and
// the collapsed chunks stay there for the norm, so the token waits out memory latency about once
// instead of once per chunk and pass (a decode step's nine hc_finish calls are links of its
// critical chain). The partials are likewise loaded all at once (sum_partials). Same expressions in
// the same order as the loop form, so the same bits. Where hc <= 4 and D <= 4 kFinishChunks
// kHcThreads (V4: hc 4, D 4096), for calls of up to kFinishRegisterRows tokens: its 112 registers a
// thread leave two CTAs an SM, and a 4k prefill's hc_finish took 20% longer so (H100, 1055 -> 1259
// us; batch 1 73 -> 60 us, batches 8 and 64 gained too).
constexpr int kFinishChunks = 4;
constexpr int kFinishRegisterRows = 256;

// sum_i p[i * stride] for i < splits (<= kHcMaxSplits), added in increasing i from 0.0f, with every
// load issued before the first add.
__device__ __forceinline__ float sum_partials(const float* p, int splits, int stride) {
  float v[kHcMaxSplits];
#pragma unroll
  for (int i = 0; i < kHcMaxSplits; ++i) v[i] = i < splits ? p[static_cast<size_t>(i) * stride] : 0.0f;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kHcMaxSplits; ++i)
    if (i < splits) sum += v[i];
  return sum;
}

// One chunk of the collapse, sum_i pre_i x_i (in increasing i), rounded to bf16 when `round`.
template <int HC>
__device__ __forceinline__ float4 collapse_chunk(const float* pre, const float4 (&x)[HC], bool round) {
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < HC; ++i) o = fma4(pre[i], x[i], o);
  return round ? round_bf16x4(o) : o;
}

template <int HC, int kMix, bool kHead, bool kRegs>
__global__ void __launch_bounds__(hc_finish_threads<kHead>()) hc_finish_kernel(HcArgs a) {
  // The mixes' base and scale and the fused norm's weight are read on the token's chain after the
  // partials arrive: fetched into L2 while the dots run.
  prefetch_l2(a.base, kMix * sizeof(float));
  prefetch_l2(a.scale, (kHead ? 1 : 3) * sizeof(float));
  prefetch_l2(a.norm_weight, static_cast<size_t>(a.D) * sizeof(float));  // null unless the norm is fused
  pdl_prologue();
  constexpr int kVals = kMix + 1;
  __shared__ float total[kVals];
  __shared__ float mixes[kMix];
  __shared__ float pre[HC];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  const int m = static_cast<int>(blockIdx.x);
  const int W = HC * a.D;
  const float* x = a.X + static_cast<size_t>(kHead ? a.rows[m] : m) * W;
  const int d_chunks = ceil_div(a.D, 4);
  // Register form: this thread's chunks tid + kHcThreads k of every stream.
  [[maybe_unused]] float4 xs[kRegs ? kFinishChunks : 1][kRegs ? HC : 1];
  if constexpr (kRegs) {
    if (tid < kHcThreads) {
#pragma unroll
      for (int k = 0; k < kFinishChunks; ++k) {
        const int c = tid + kHcThreads * k;
        if (c >= d_chunks) continue;
#pragma unroll
        for (int i = 0; i < HC; ++i) xs[k][i] = load4(x + static_cast<size_t>(i) * a.D, c, a.D, a.vec);
      }
    }
  }
  // The partial sums: hc_pre's extra warp in the register form (the collapse threads hold their
  // chunks), else the first kVals threads.
  const int sum_tid = kRegs && !kHead ? tid - kHcThreads : tid;
  if (sum_tid >= 0 && sum_tid < kVals)
    total[sum_tid] = sum_partials(a.part + static_cast<size_t>(m) * a.splits * kVals + sum_tid, a.splits, kVals);
  __syncthreads();
  // mixes = (fn . x) * rsqrt(mean(x^2) + eps), i.e. fn . rmsnorm(x).
  if (tid < kMix) {
    const float r = 1.0f / sqrtf(total[kMix] / static_cast<float>(W) + a.norm_eps);
    const float mix = total[tid] * r;
    mixes[tid] = mix;
    if (tid < HC) pre[tid] = sigmoidf(fmaf(mix, a.scale[0], a.base[tid])) + a.hc_eps;
  }
  __syncthreads();
  if constexpr (!kHead) {
    if (warp == kHcThreads / 32) {  // the extra warp: post and comb, then done
      const int lane = tid % 32;
      if (lane < HC)
        a.post[static_cast<size_t>(m) * HC + lane] = 2.0f * sigmoidf(fmaf(mixes[HC + lane], a.scale[1], a.base[HC + lane]));
      sinkhorn_warp<HC>(mixes, a.base, a.scale[2], a.iters, a.hc_eps, a.comb + static_cast<size_t>(m) * HC * HC);
      return;
    }
  }
  // collapsed[m, d] = sum_i pre_i X[m, i, d].
  float* out = a.out + static_cast<size_t>(m) * a.D;
  // The norm after the collapse, as rms_norm_kernel computes it (same threads, chunks and reduction,
  // hence the same bits): every thread reads back only the chunks it has just written (the loop
  // form) or keeps them in registers (the register form).
  // (The reduction's barrier is a named one over these kRmsThreads threads: the Sinkhorn warp may
  // still be running, or have left.)
  static_assert(kHcThreads == kRmsThreads, "the fused norm reproduces rms_norm_kernel's reduction");
  __shared__ float scratch[kRmsThreads / 32];
  if constexpr (kRegs) {
    float4 os[kFinishChunks];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kFinishChunks; ++k) {
      const int c = tid + kHcThreads * k;
      if (c >= d_chunks) continue;
      const float4 o = collapse_chunk<HC>(pre, xs[k], a.round_collapsed);
      store4(out, c, a.D, a.vec, o);  // (even when out_unused: a branch here costs registers)
      os[k] = o;
      ss = dot4(o, o, ss);
    }
    if (a.normed == nullptr) return;
    // The weight's chunks, loaded while the block reduces (fewer registers than from the start: two
    // CTAs an SM at prefill).
    float4 ws[kFinishChunks];
#pragma unroll
    for (int k = 0; k < kFinishChunks; ++k) {
      const int c = tid + kHcThreads * k;
      ws[k] = c < d_chunks && a.norm_weight != nullptr ? load4(a.norm_weight, c, a.D, a.norm_vec) : float4{};
    }
    const float r = rms_scale(block_sum<kRmsThreads, kCollapseBarrier>(ss, scratch), a.D, a.out_norm_eps);
    bf16* const normed = a.normed + static_cast<size_t>(m) * a.D;
#pragma unroll
    for (int k = 0; k < kFinishChunks; ++k) {
      const int c = tid + kHcThreads * k;
      if (c < d_chunks) store4_bf16(normed, c, a.D, a.norm_vec, rms_scaled_values(os[k], r, a.norm_weight != nullptr, ws[k]));
    }
  } else {
    // The collapsed row: out, or (out_unused) the D floats of dynamic shared memory the launch gives.
    // Each thread reads back only the chunks it wrote, so no barrier is needed either way.
    extern __shared__ float4 row_s[];
    float* const row = a.out_unused ? reinterpret_cast<float*>(row_s) : out;
    for (int c = tid; c < d_chunks; c += kHcThreads) {
      float4 xc[HC];
#pragma unroll
      for (int i = 0; i < HC; ++i) xc[i] = load4(x + static_cast<size_t>(i) * a.D, c, a.D, a.vec);
      store4(row, c, a.D, a.vec, collapse_chunk<HC>(pre, xc, a.round_collapsed));
    }
    if (a.normed == nullptr) return;
    const float ss =
        block_sum<kRmsThreads, kCollapseBarrier>(rms_partial_sum(row, a.D, a.norm_vec, tid, kRmsThreads), scratch);
    rms_scale_store(row, static_cast<size_t>(m) * a.D, a.D, rms_scale(ss, a.D, a.out_norm_eps), a.norm_weight, nullptr,
                    a.normed, a.norm_vec, tid, kRmsThreads);
  }
}

// ---------------------------------------------------------------------------------------------
// hc_post: each thread owns one chunk of D of one token across all hc streams, so the in-place
// update needs no barrier.

constexpr int kEltThreads = 256;

// Chunk c of token m's hc_post update with that token's output chunk ov (fp32(bf16(.)) of each new
// value when round_x: release numerics' rounding of X, fused).
template <int HC>
__device__ __forceinline__ void hc_post_chunk(float* X, int m, int D, int c, float4 ov, const float* __restrict__ post,
                                              const float* __restrict__ comb, bool vec, bool round_x) {
  float* Xm = X + static_cast<size_t>(m) * HC * D;
  const float* pm = post + static_cast<size_t>(m) * HC;
  const float* Cm = comb + static_cast<size_t>(m) * HC * HC;
  float4 old[HC];
#pragma unroll
  for (int j = 0; j < HC; ++j) old[j] = load4(Xm + static_cast<size_t>(j) * D, c, D, vec);
#pragma unroll
  for (int k = 0; k < HC; ++k)
    store4(Xm + static_cast<size_t>(k) * D, c, D, vec, hc_post_value<HC>(old, ov, pm, Cm, k, round_x));
}

template <int HC>
__global__ void __launch_bounds__(kEltThreads)
    hc_post_kernel(float* X, const float* __restrict__ o, int D, const float* __restrict__ post,
                   const float* __restrict__ comb, bool vec) {
  pdl_prologue();
  const int m = static_cast<int>(blockIdx.x);
  const int c = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (c >= ceil_div(D, 4)) return;
  hc_post_chunk<HC>(X, m, D, c, load4(o + static_cast<size_t>(m) * D, c, D, vec), post, comb, vec, false);
}

// Calls f(std::integral_constant<int, hc>{}) for hc in [1, 8].
template <int kHc = 1, typename F>
void with_hc(int hc, F&& f) {
  if constexpr (kHc <= 8) {
    if (hc == kHc) return f(std::integral_constant<int, kHc>{});
    with_hc<kHc + 1>(hc, f);
  } else {
    DI_CHECK(false, "hc = %d, expected 1..8", hc);
  }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

// interleaved: gu's columns in kGateUpBlock blocks of gate then up (swiglu.cuh); a chunk of 4 h
// values (4 | kGateUpBlock) then reads 4 consecutive gate and 4 consecutive up columns.
__global__ void __launch_bounds__(kEltThreads)
    swiglu_kernel(const float* __restrict__ gu, int inter, float limit, const float* __restrict__ row_weight,
                  bf16* __restrict__ out, bool vec, bool interleaved) {
  pdl_prologue();
  const int m = static_cast<int>(blockIdx.x);
  const int c = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (c >= ceil_div(inter, 4)) return;
  const float* row = gu + static_cast<size_t>(m) * 2 * inter;
  float4 g4, u4;
  if (interleaved) {  // vec holds: inter % kGateUpBlock == 0 is checked on the host
    g4 = *reinterpret_cast<const float4*>(row + interleaved_gate_up_column(4 * c, false));
    u4 = *reinterpret_cast<const float4*>(row + interleaved_gate_up_column(4 * c, true));
  } else {
    g4 = load4(row, c, inter, vec);
    u4 = load4(row + inter, c, inter, vec);
  }
  const float rw = row_weight != nullptr ? row_weight[m] : 1.0f;
  auto act = [&](float g, float u) {
    const float v = swiglu_act(g, u, limit);
    return row_weight != nullptr ? v * rw : v;
  };
  const float4 y = make_float4(act(g4.x, u4.x), act(g4.y, u4.y), act(g4.z, u4.z), act(g4.w, u4.w));
  store4_bf16(out + static_cast<size_t>(m) * inter, c, inter, vec, y);
}

// ---------------------------------------------------------------------------------------------
// MoE routing: one warp per token, the token's scores in shared memory.

constexpr int kRouteWarps = 4;
constexpr int kMaxExperts = 1024;

// Token t's routing by one warp into sel and w row t; score, biased and pick are the warp's own
// shared rows ([E], [E], [K]).
__device__ __forceinline__ void route_token(const float* __restrict__ logits, int t, int E, int K, Scoring scoring,
                                            const float* __restrict__ bias, const int32_t* __restrict__ tid2eid,
                                            const int32_t* __restrict__ tokens, float routed_scale, int* sel, float* w,
                                            float* score, float* biased, int* pick) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const float* lg = logits + static_cast<size_t>(t) * E;

  // Element e lives in lane e % 32 (slot e / 32) throughout.
  if (scoring == Scoring::kSoftmax) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, lg[e]);
    mx = warp_max(mx);
    float part = 0.0f;
    for (int e = lane; e < E; e += 32) {
      const float ex = expf(lg[e] - mx);
      score[e] = ex;
      part += ex;
    }
    const float sum = warp_sum(part);
    for (int e = lane; e < E; e += 32) score[e] = score[e] / sum;
  } else {
    for (int e = lane; e < E; e += 32) {
      const float x = lg[e];
      score[e] = scoring == Scoring::kSigmoid ? sigmoidf(x) : sqrtf(x > 20.0f ? x : log1pf(expf(x)));
    }
  }

  if (tid2eid != nullptr) {
    if (lane < K) pick[lane] = tid2eid[static_cast<size_t>(tokens[t]) * K + lane];
  } else {
    for (int e = lane; e < E; e += 32) biased[e] = score[e] + (bias != nullptr ? bias[e] : 0.0f);
    // K rounds of warp argmax over the untaken experts; the order (score desc, id asc) is total,
    // so the butterfly leaves the same winner in every lane.
    unsigned taken = 0;  // bit s: expert lane + 32 s already picked
    for (int r = 0; r < K; ++r) {
      float best = -INFINITY;
      int best_id = INT_MAX;  // none yet
      for (int s = 0, e = lane; e < E; ++s, e += 32) {
        if ((taken >> s) & 1u) continue;
        const float b = biased[e];
        if (best_id == INT_MAX || b > best) {  // ascending e: strict > keeps the lower id
          best = b;
          best_id = e;
        }
      }
      for (int off = 16; off > 0; off >>= 1) {
        const float ob = __shfl_xor_sync(kFullMask, best, off);
        const int oid = __shfl_xor_sync(kFullMask, best_id, off);
        if (oid != INT_MAX && (best_id == INT_MAX || ob > best || (ob == best && oid < best_id))) {
          best = ob;
          best_id = oid;
        }
      }
      if (best_id % 32 == lane) taken |= 1u << (best_id / 32);
      if (lane == 0) pick[r] = best_id;
    }
  }
  __syncwarp();
  if (lane < K) {
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += score[pick[k]];
    const int id = pick[lane];
    sel[static_cast<size_t>(t) * K + lane] = id;
    w[static_cast<size_t>(t) * K + lane] = score[id] / (sum + 1e-20f) * routed_scale;
  }
}

// One warp a token (route_token). kPermute (T <= kRouteWarps, one CTA): the CTA then also writes
// moe_permute's outputs for the N = T K choices, so no permutation launch follows. The rows are
// those of moe_permute's stable counting sort (integer counts): row_offsets[e] = choices of
// experts below e; choice i goes to row_offsets[sel[i]] + earlier choices of the same expert.
template <bool kPermute>
__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const float* __restrict__ logits, int T, int E, int K, Scoring scoring,
                     const float* __restrict__ bias, const int32_t* __restrict__ tid2eid,
                     const int32_t* __restrict__ tokens, float routed_scale, int* sel, float* w,
                     MoePermutation out) {
  prefetch_l2(bias, static_cast<size_t>(E) * sizeof(float));
  pdl_prologue();
  __shared__ float score_s[kRouteWarps][kMaxExperts];
  __shared__ float biased_s[kRouteWarps][kMaxExperts];
  __shared__ int pick_s[kRouteWarps][kMaxTopK];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  const int t = static_cast<int>(blockIdx.x) * kRouteWarps + warp;
  if (t < T)
    route_token(logits, t, E, K, scoring, bias, tid2eid, tokens, routed_scale, sel, w, score_s[warp], biased_s[warp],
                pick_s[warp]);
  if constexpr (kPermute) {
    __shared__ int sel_s[kRouteWarps * kMaxTopK];
    __syncthreads();  // every token's sel and w written (global writes of this CTA, visible to it now)
    const int N = T * K;
    for (int i = tid; i < N; i += kRouteWarps * 32) sel_s[i] = sel[i];
    __syncthreads();
    for (int e = tid; e <= E; e += kRouteWarps * 32) {
      int below = 0;
      for (int j = 0; j < N; ++j) below += sel_s[j] < e;
      out.row_offsets[e] = below;
    }
    for (int i = tid; i < N; i += kRouteWarps * 32) {
      const int e = sel_s[i];
      int row = 0;
      for (int j = 0; j < N; ++j) row += sel_s[j] < e || (j < i && sel_s[j] == e);
      out.perm_token[row] = i / K;
      if (out.perm_weight != nullptr) out.perm_weight[row] = w[i];
      out.row_of[i] = row;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// MoE permutation: stable counting sort without order-dependent atomics.
//
// CTA b owns experts [8b, 8b + 8). It counts the choices below and inside its range (integer
// sums: any order gives the same result), then walks all choices in tiles of 1024 in index
// order. Inside a tile, a choice's slot = its expert's running offset + choices of that expert in
// earlier warps of the tile (a warp scan over per-warp ballot counts) + earlier lanes of its own
// warp (popc of the ballot). Every CTA reads all of sel (200k ints at most, from L2).

constexpr int kPermThreads = 1024;
constexpr int kPermWarps = kPermThreads / 32;
constexpr int kExpertsPerCta = 8;

__global__ void __launch_bounds__(kPermThreads)
    moe_permute_kernel(const int* __restrict__ sel, const float* __restrict__ w, int N, int K, int E,
                       int* __restrict__ row_offsets, int* __restrict__ perm_token, float* __restrict__ perm_weight,
                       int* __restrict__ row_of) {
  pdl_prologue();
  __shared__ int count_part[kPermWarps][kExpertsPerCta + 1];
  __shared__ int start[kExpertsPerCta + 1];
  __shared__ int warp_count[kPermWarps][kExpertsPerCta];
  __shared__ int warp_start[kPermWarps][kExpertsPerCta];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int e_first = static_cast<int>(blockIdx.x) * kExpertsPerCta;
  const int n_own = min(kExpertsPerCta, E - e_first);

  // 1) Counts: own[q] choices of expert e_first + q, `lower` choices of experts below e_first.
  int lower = 0;
  int own[kExpertsPerCta] = {};
  for (int i = tid; i < N; i += kPermThreads) {
    const int e = sel[i];
    lower += e < e_first;
#pragma unroll
    for (int q = 0; q < kExpertsPerCta; ++q) own[q] += e == e_first + q;
  }
  lower = __reduce_add_sync(kFullMask, lower);
#pragma unroll
  for (int q = 0; q < kExpertsPerCta; ++q) own[q] = __reduce_add_sync(kFullMask, own[q]);
  if (lane == 0) {
#pragma unroll
    for (int q = 0; q < kExpertsPerCta; ++q) count_part[warp][q] = own[q];
    count_part[warp][kExpertsPerCta] = lower;
  }
  __syncthreads();
  if (tid == 0) {
    int sums[kExpertsPerCta + 1] = {};
    for (int v = 0; v <= kExpertsPerCta; ++v)
      for (int wp = 0; wp < kPermWarps; ++wp) sums[v] += count_part[wp][v];
    int at = sums[kExpertsPerCta];
    for (int q = 0; q < n_own; ++q) {
      start[q] = at;
      row_offsets[e_first + q] = at;
      at += sums[q];
    }
    start[kExpertsPerCta] = at;  // end of this CTA's range
    if (e_first + n_own == E) row_offsets[E] = at;
  }
  __syncthreads();
  if (start[kExpertsPerCta] == start[0]) return;  // none of the choices is ours (uniform)

  // 2) Stable scatter, tile by tile. Warp q (< n_own) keeps expert q's running offset.
  int run = warp < n_own ? start[warp] : 0;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int tile = 0; tile < N; tile += kPermThreads) {
    const int i = tile + tid;
    const int q = i < N ? sel[i] - e_first : -1;
    const bool mine = q >= 0 && q < n_own;
    int rank = 0;
#pragma unroll
    for (int qq = 0; qq < kExpertsPerCta; ++qq) {
      const unsigned ballot = __ballot_sync(kFullMask, mine && q == qq);
      if (lane == 0) warp_count[warp][qq] = __popc(ballot);
      if (mine && q == qq) rank = __popc(ballot & lanes_below);
    }
    __syncthreads();
    if (warp < n_own) {
      const int cnt = warp_count[lane][warp];
      int incl = cnt;
      for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(kFullMask, incl, off);
        if (lane >= off) incl += v;
      }
      warp_start[lane][warp] = run + incl - cnt;
      run += __shfl_sync(kFullMask, incl, 31);
    }
    __syncthreads();
    if (mine) {
      const int slot = warp_start[warp][q] + rank;
      perm_token[slot] = i / K;
      if (perm_weight != nullptr) perm_weight[slot] = w[i];
      row_of[i] = slot;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Row gather (bf16) and MoE combination.

__global__ void __launch_bounds__(kCopyThreads)
    gather_rows_kernel(const bf16* __restrict__ src, const int* __restrict__ idx, int width, bf16* __restrict__ out,
                       bool vec) {
  pdl_prologue();
  const int r = static_cast<int>(blockIdx.x);
  const int i = 8 * static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (i >= width) return;
  const bf16* s = src + static_cast<size_t>(idx[r]) * width;
  bf16* d = out + static_cast<size_t>(r) * width;
  if (vec) {
    *reinterpret_cast<uint4*>(d + i) = *reinterpret_cast<const uint4*>(s + i);
    return;
  }
  for (int j = i; j < min(i + 8, width); ++j) d[j] = s[j];
}

// The combined output of token t = blockIdx.x at this thread's chunk c: the token's choices sorted
// once per block (moe_order_token, by thread 0), its rows added in that order (weighted when w is
// non-null), then + shared[t]. Every thread of the block calls it (it synchronises); false past the
// row's end.
__device__ __forceinline__ bool moe_combined_chunk(const float* __restrict__ y, const int* __restrict__ row_of,
                                                   const int* __restrict__ sel, const float* __restrict__ w,
                                                   const float* shared, int K, int D, bool vec, int& t, int& c,
                                                   float4& out) {
  __shared__ int order_row[kMaxTopK];
  __shared__ float order_w[kMaxTopK];
  t = static_cast<int>(blockIdx.x);
  if (threadIdx.x == 0) moe_order_token(row_of, sel, w, t, K, order_row, order_w);
  __syncthreads();
  c = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (c >= ceil_div(D, 4)) return false;
  const float* shared_row = shared != nullptr ? shared + static_cast<size_t>(t) * D : nullptr;
  out = moe_combine_chunk(y, order_row, order_w, w != nullptr, shared_row, K, D, vec, c);
  return true;
}

// out may alias shared (each thread reads its chunk before writing it).
__global__ void __launch_bounds__(kEltThreads)
    moe_combine_kernel(const float* __restrict__ y, const int* __restrict__ row_of, const int* __restrict__ sel,
                       const float* __restrict__ w, const float* shared, int K, int D, float* out, bool vec) {
  pdl_prologue();
  int t, c;
  float4 o;
  if (moe_combined_chunk(y, row_of, sel, w, shared, K, D, vec, t, c, o))
    store4(out + static_cast<size_t>(t) * D, c, D, vec, o);
}

// moe_combine, (release) bf16 rounding of its output, hc_post and (release) rounding of X in one
// pass: the combined chunk never leaves registers.
template <int HC>
__global__ void __launch_bounds__(kEltThreads)
    hc_post_moe_kernel(float* X, const float* __restrict__ y, const int* __restrict__ row_of,
                       const int* __restrict__ sel, const float* __restrict__ w, const float* __restrict__ shared, int K,
                       int D, const float* __restrict__ post, const float* __restrict__ comb, bool round_o,
                       bool round_x, bool vec) {
  pdl_prologue();
  int t, c;
  float4 o;
  if (!moe_combined_chunk(y, row_of, sel, w, shared, K, D, vec, t, c, o)) return;
  if (round_o) o = round_bf16x4(o);
  hc_post_chunk<HC>(X, t, D, c, o, post, comb, vec, round_x);
}

// ---------------------------------------------------------------------------------------------
// Casts: grid-stride over chunks of 4; the tail (n % 4, or everything when misaligned) scalar.

__global__ void __launch_bounds__(kEltThreads)
    to_bf16_kernel(const float* __restrict__ x, size_t n, bf16* __restrict__ y, bool vec) {
  pdl_prologue();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t n4 = vec ? n / 4 : 0;
  for (size_t c = first; c < n4; c += stride) {
    reinterpret_cast<uint2*>(y)[c] = pack_bf16x4(reinterpret_cast<const float4*>(x)[c]);
  }
  for (size_t i = 4 * n4 + first; i < n; i += stride) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void __launch_bounds__(kEltThreads) round_bf16_kernel(float* __restrict__ x, size_t n, bool vec) {
  pdl_prologue();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t n4 = vec ? n / 4 : 0;
  for (size_t c = first; c < n4; c += stride) {
    float4 v = reinterpret_cast<float4*>(x)[c];
    v = round_bf16x4(v);
    reinterpret_cast<float4*>(x)[c] = v;
  }
  for (size_t i = 4 * n4 + first; i < n; i += stride) x[i] = round_bf16_dev(x[i]);
}

unsigned cast_grid(size_t n) {
  const size_t blocks = (n / 4 + kEltThreads) / kEltThreads;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(blocks, 1), 8192));
}

template <int HC, int kMix, int kMT, bool kHead, int kBatch = 4>
void launch_hc_dots(const HcArgs& a, cudaStream_t stream) {
  const size_t smem = hc_dots_smem_bytes<kMT, (kMix + 7) / 8, kBatch>(kMix + 1);
  static bool configured = false;  // per instantiation (its shared memory is fixed)
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(hc_dots_kernel<HC, kMix, kMT, kHead, kBatch>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(a.M, 16 * kMT)), static_cast<unsigned>(a.splits));
  hc_dots_kernel<HC, kMix, kMT, kHead, kBatch><<<grid, kHcThreads, smem, stream>>>(a);
}

// hc_finish over the partials of hc_dots (or hc_post_dots) for kMix mixes.
template <int HC, int kMix, bool kHead>
void launch_hc_finish(HcArgs a, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(a.M);
  if constexpr (HC <= 4) {
    if (a.M <= kFinishRegisterRows && ceil_div(a.D, 4) <= kFinishChunks * kHcThreads) {
      hc_finish_kernel<HC, kMix, kHead, true><<<grid, hc_finish_threads<kHead>(), 0, stream>>>(a);
      return;
    }
  }
  // The loop form keeps an unused collapsed row in shared memory: D floats, with the kernel's static
  // arrays within the default 48 KB (else it is written to `out` after all).
  const size_t row_bytes = 16 * static_cast<size_t>(ceil_div(a.D, 4));
  if (row_bytes > 46 * 1024) a.out_unused = false;
  hc_finish_kernel<HC, kMix, kHead, false>
      <<<grid, hc_finish_threads<kHead>(), a.out_unused ? row_bytes : 0, stream>>>(a);
}

// Runs hc_dots then hc_finish for kMix mixes (hc_pre: (2 + hc) hc; hc_head: hc).
template <int HC, int kMix, bool kHead>
void launch_hc(HcArgs a, cudaStream_t stream) {
  // m16 tiles a warp takes: one for a few tokens (no rows wasted), two for decode batches (fn read
  // once per 32 tokens, 256 CTAs at batch 256) and for prefill at two CTAs an SM (2-step batches:
  // 57 KB of staging and <= 128 registers a thread; four m16 tiles would spill there). More than 3
  // n8 tiles (hc > 4 in hc_pre) keep one (accumulator registers). None of this changes a token's
  // bits (hc_dots' comment).
  constexpr bool kWide = (kMix + 7) / 8 <= 3;
  if (!kWide || a.M <= 16)
    launch_hc_dots<HC, kMix, 1, kHead>(a, stream);
  else if constexpr (kWide) {
    if (a.M <= 512)
      launch_hc_dots<HC, kMix, 2, kHead>(a, stream);
    else
      launch_hc_dots<HC, kMix, 2, kHead, 2>(a, stream);
  }
  launch_hc_finish<HC, kMix, kHead>(a, stream);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// norm_rope: rms_norm + (bf16 rounding) + RoPE + bf16 cast of each head row in one pass, one warp per
// row (rms_norm's warp form for the sum and scale, rope_kernel's expressions for the rotation). The
// vector layout only (n and rope_dim multiples of 4, 16-byte aligned rows).

template <int kChunks>
__global__ void __launch_bounds__(32 * kRmsWarpRows)
    norm_rope_kernel(const float* x, int rows, int heads, int n, const float* weight, float eps, bool round_mid,
                     const int64_t* __restrict__ pos, const float* __restrict__ inv_freq, int rope_dim,
                     float attention_factor, float* y_f32, bf16* y_bf16) {
  prefetch_l2(weight, static_cast<size_t>(n) * sizeof(float));
  prefetch_l2(inv_freq, static_cast<size_t>(rope_dim / 2) * sizeof(float));
  pdl_prologue();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int m = static_cast<int>(blockIdx.x) * kRmsWarpRows + static_cast<int>(threadIdx.x) / 32;
  if (m >= rows) return;
  const size_t row = static_cast<size_t>(m) * static_cast<size_t>(n);
  WarpRow<kChunks> values;
  warp_row_load(x + row, n, true, weight, lane, values);
  const float r = warp_row_rms_scale(values, n, lane, eps);
  const float p = static_cast<float>(pos[m / heads]);
  const int first_rotated = (n - rope_dim) / 4;  // chunk index
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = lane + 32 * k;
    if (c >= n / 4) break;
    float4 y = rms_scaled_values(values.v[k], r, weight != nullptr, values.w[k]);
    if (round_mid) y = round_bf16x4(y);
    if (c >= first_rotated) {
      const int i = 2 * (c - first_rotated);  // pairs i and i + 1 of the rotated tail
      const float2 lo = rope_rotate(make_float2(y.x, y.y), rope_cos_sin(inv_freq[i], p, attention_factor, false));
      const float2 hi = rope_rotate(make_float2(y.z, y.w), rope_cos_sin(inv_freq[i + 1], p, attention_factor, false));
      y = make_float4(lo.x, lo.y, hi.x, hi.y);
    }
    if (y_f32 != nullptr) store4(y_f32 + row, c, n, true, y);
    if (y_bf16 != nullptr) store4_bf16(y_bf16 + row, c, n, true, y);
  }
}

// ---------------------------------------------------------------------------------------------
// Entry points

void embed(const int32_t* tokens, int T, const bf16* table, int D, int hc, float* X, cudaStream_t stream) {
  if (T <= 0 || D <= 0 || hc <= 0) return;
  const bool vec = D % 8 == 0 && aligned(table, 16) && aligned(X, 16);
  embed_kernel<<<row_grid(T, ceil_div(D, 8), kCopyThreads), kCopyThreads, 0, stream>>>(tokens, table, D, hc, X, vec);
}

void rms_norm(const float* x, int M, int n, const float* weight, float eps, float* y_f32, bf16* y_bf16,
              cudaStream_t stream) {
  if (M <= 0 || n <= 0) return;
  const bool vec = n % 4 == 0 && aligned(x, 16) && (weight == nullptr || aligned(weight, 16)) &&
                   (y_f32 == nullptr || aligned(y_f32, 16)) && (y_bf16 == nullptr || aligned(y_bf16, 8));
  if (n <= kRmsWarpMaxN) {
    with_warp_row_chunks(n, [&](auto chunks) {
      rms_norm_warp_kernel<decltype(chunks)::value>
          <<<static_cast<unsigned>((M + kRmsWarpRows - 1) / kRmsWarpRows), 32 * kRmsWarpRows, 0, stream>>>(
              x, M, n, weight, eps, y_f32, y_bf16, vec);
    });
    return;
  }
  rms_norm_kernel<<<static_cast<unsigned>(M), kRmsThreads, 0, stream>>>(x, n, weight, eps, y_f32, y_bf16, vec);
}

void rope(float* x, int M, int heads, int head_dim, const int64_t* pos, const float* inv_freq, int rope_dim,
          float attention_factor, bool inverse, cudaStream_t stream) {
  if (M <= 0 || heads <= 0 || rope_dim <= 0) return;
  DI_CHECK(rope_dim % 2 == 0 && rope_dim <= head_dim, "rope_dim %d, head_dim %d", rope_dim, head_dim);
  const bool vec = head_dim % 2 == 0 && aligned(x, 8);
  rope_kernel<<<static_cast<unsigned>(M), kRopeThreads, rope_dim * sizeof(float), stream>>>(
      x, heads, head_dim, pos, inv_freq, rope_dim, attention_factor, inverse, vec);
}

void rope_to_bf16(const float* x, int M, int heads, int head_dim, const int64_t* pos, const float* inv_freq,
                  int rope_dim, float attention_factor, bf16* y, cudaStream_t stream) {
  if (M <= 0 || heads <= 0 || head_dim <= 0) return;
  DI_CHECK(rope_dim % 2 == 0 && head_dim % 2 == 0 && rope_dim <= head_dim, "rope_dim %d, head_dim %d", rope_dim,
           head_dim);
  rope_to_bf16_kernel<<<static_cast<unsigned>(M), kRopeThreads, std::max(rope_dim, 2) * sizeof(float), stream>>>(
      x, heads, head_dim, pos, inv_freq, rope_dim, attention_factor, y, aligned(x, 8) && aligned(y, 4));
}

void norm_rope(float* x, int M, int heads, int n, const float* weight, float eps, bool round_mid, const int64_t* pos,
               const float* inv_freq, int rope_dim, float attention_factor, float* y_f32, bf16* y_bf16,
               cudaStream_t stream) {
  if (M <= 0 || heads <= 0 || n <= 0) return;
  DI_CHECK(rope_dim % 2 == 0 && rope_dim <= n, "rope_dim %d, n %d", rope_dim, n);
  const bool vec = n % 4 == 0 && rope_dim % 4 == 0 && n <= kRmsWarpMaxN && aligned(x, 16) &&
                   (weight == nullptr || aligned(weight, 16)) && (y_f32 == nullptr || aligned(y_f32, 16)) &&
                   (y_bf16 == nullptr || aligned(y_bf16, 8));
  const int rows = M * heads;
  if (!vec) {  // the separate passes, in place in x
    rms_norm(x, rows, n, weight, eps, x, nullptr, stream);
    if (round_mid) round_bf16(x, static_cast<size_t>(rows) * n, stream);
    rope(x, M, heads, n, pos, inv_freq, rope_dim, attention_factor, false, stream);
    if (y_f32 != nullptr && y_f32 != x)
      CUDA_CHECK(cudaMemcpyAsync(y_f32, x, static_cast<size_t>(rows) * n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    if (y_bf16 != nullptr) to_bf16(x, static_cast<size_t>(rows) * n, y_bf16, stream);
    return;
  }
  with_warp_row_chunks(n, [&](auto chunks) {
    norm_rope_kernel<decltype(chunks)::value>
        <<<static_cast<unsigned>((rows + kRmsWarpRows - 1) / kRmsWarpRows), 32 * kRmsWarpRows, 0, stream>>>(
            x, rows, heads, n, weight, eps, round_mid, pos, inv_freq, rope_dim, attention_factor, y_f32, y_bf16);
  });
}

size_t hc_workspace_bytes(int M, int hc, int D, bool head) {
  const int mixes = head ? hc : (2 + hc) * hc;
  return static_cast<size_t>(std::max(M, 0)) * hc_splits(hc, D) * (mixes + 1) * sizeof(float);
}

namespace {
// Fills the fused-norm fields of `a` when the norm can run inside hc_finish: D > kRmsWarpMaxN, where
// rms_norm takes the block form that hc_finish reproduces. Returns whether it did.
bool fuse_hc_norm(HcArgs& a, const HcNorm* norm) {
  if (norm == nullptr || norm->normed == nullptr || a.D <= kRmsWarpMaxN) return false;
  a.round_collapsed = norm->round_collapsed;
  a.norm_weight = norm->weight;
  a.out_norm_eps = norm->eps;
  a.normed = norm->normed;
  a.norm_vec = a.D % 4 == 0 && aligned(a.out, 16) && (norm->weight == nullptr || aligned(norm->weight, 16)) &&
               aligned(norm->normed, 8);
  a.out_unused = norm->discard_collapsed;
  return true;
}
// The norm as separate passes (when hc_finish did not fuse it).
void hc_norm_passes(float* collapsed, int M, int D, const HcNorm* norm, cudaStream_t stream) {
  if (norm == nullptr || norm->normed == nullptr) return;
  if (norm->round_collapsed) round_bf16(collapsed, static_cast<size_t>(M) * D, stream);
  rms_norm(collapsed, M, D, norm->weight, norm->eps, nullptr, norm->normed, stream);
}
}  // namespace

void hc_pre(const float* X, int M, int hc, int D, const float* fn, const float* base, const float* scale, int iters,
            float hc_eps, float norm_eps, float* collapsed, float* post, float* comb, void* workspace,
            cudaStream_t stream, const HcNorm* norm) {
  if (M <= 0) return;
  DI_CHECK(D > 0, "D = %d", D);
  DI_CHECK(workspace != nullptr, "hc_pre needs hc_workspace_bytes of workspace");
  const bool vec = D % 4 == 0 && aligned(X, 16) && aligned(fn, 16) && aligned(collapsed, 16);
  with_hc(hc, [&](auto hc_constant) {
    constexpr int HC = decltype(hc_constant)::value;
    constexpr int kMix = (2 + HC) * HC;
    HcArgs args{X, nullptr, M, D, fn, base, scale, iters, hc_eps, norm_eps, collapsed, post, comb, vec,
                hc_splits(HC, D), static_cast<float*>(workspace)};
    const bool fused = fuse_hc_norm(args, norm);
    launch_hc<HC, kMix, false>(args, stream);
    if (!fused) hc_norm_passes(collapsed, M, D, norm, stream);
  });
}

void hc_post(float* X, const float* o, int M, int hc, int D, const float* post, const float* comb,
             cudaStream_t stream) {
  if (M <= 0 || D <= 0) return;
  const bool vec = D % 4 == 0 && aligned(X, 16) && aligned(o, 16);
  with_hc(hc, [&](auto hc_constant) {
    constexpr int HC = decltype(hc_constant)::value;
    hc_post_kernel<HC><<<row_grid(M, ceil_div(D, 4), kEltThreads), kEltThreads, 0, stream>>>(X, o, D, post, comb, vec);
  });
}

void hc_head(const float* X, const int* rows, int R, int hc, int D, const float* fn, const float* base,
             const float* scale, float hc_eps, float norm_eps, float* out, void* workspace, cudaStream_t stream,
             const HcNorm* norm) {
  if (R <= 0) return;
  DI_CHECK(D > 0, "D = %d", D);
  DI_CHECK(workspace != nullptr, "hc_head needs hc_workspace_bytes of workspace");
  const bool vec = D % 4 == 0 && aligned(X, 16) && aligned(fn, 16) && aligned(out, 16);
  with_hc(hc, [&](auto hc_constant) {
    constexpr int HC = decltype(hc_constant)::value;
    HcArgs args{X, rows, R, D, fn, base, scale, 0, hc_eps, norm_eps, out, nullptr, nullptr, vec,
                hc_splits(HC, D), static_cast<float*>(workspace)};
    const bool fused = fuse_hc_norm(args, norm);
    launch_hc<HC, HC, true>(args, stream);
    if (!fused) hc_norm_passes(out, R, D, norm, stream);
  });
}

void swiglu(const float* gu, int M, int inter, float limit, const float* row_weight, bf16* out, cudaStream_t stream,
            bool gate_up_interleaved) {
  if (M <= 0 || inter <= 0) return;
  const bool vec = inter % 4 == 0 && aligned(gu, 16) && aligned(out, 8);
  DI_CHECK(!gate_up_interleaved || (vec && inter % kGateUpBlock == 0),
           "interleaved gate|up rows need inter %% %d == 0 (inter = %d) and aligned rows", kGateUpBlock, inter);
  swiglu_kernel<<<row_grid(M, ceil_div(inter, 4), kEltThreads), kEltThreads, 0, stream>>>(
      gu, inter, limit, row_weight, out, vec, gate_up_interleaved);
}

bool moe_route(const float* logits, int T, int E, int K, Scoring scoring, const float* bias, const int32_t* tid2eid,
               const int32_t* tokens, float routed_scale, int* sel, float* w, cudaStream_t stream,
               const MoePermutation* permutation) {
  if (T <= 0) return false;
  DI_CHECK(E > 0 && E <= kMaxExperts && K > 0 && K <= kMaxTopK && K <= E, "E = %d, K = %d", E, K);
  DI_CHECK(tid2eid == nullptr || tokens != nullptr, "hash routing needs the token ids");
  if (permutation != nullptr && T <= kRouteWarps) {
    moe_route_kernel<true><<<1, kRouteWarps * 32, 0, stream>>>(logits, T, E, K, scoring, bias, tid2eid, tokens,
                                                               routed_scale, sel, w, *permutation);
    return true;
  }
  moe_route_kernel<false><<<static_cast<unsigned>(ceil_div(T, kRouteWarps)), kRouteWarps * 32, 0, stream>>>(
      logits, T, E, K, scoring, bias, tid2eid, tokens, routed_scale, sel, w, MoePermutation{});
  return false;
}

void moe_permute(const int* sel, const float* w, int T, int K, int E, int* row_offsets, int* perm_token,
                 float* perm_weight, int* row_of, cudaStream_t stream) {
  if (T <= 0 || K <= 0 || E <= 0) return;
  DI_CHECK(static_cast<long long>(T) * K <= INT_MAX, "T * K = %lld", static_cast<long long>(T) * K);
  moe_permute_kernel<<<static_cast<unsigned>(ceil_div(E, kExpertsPerCta)), kPermThreads, 0, stream>>>(
      sel, w, T * K, K, E, row_offsets, perm_token, perm_weight, row_of);
}

void gather_rows(const bf16* src, const int* idx, int R, int width, bf16* out, cudaStream_t stream) {
  if (R <= 0 || width <= 0) return;
  const bool vec = width % 8 == 0 && aligned(src, 16) && aligned(out, 16);
  gather_rows_kernel<<<row_grid(R, ceil_div(width, 8), kCopyThreads), kCopyThreads, 0, stream>>>(src, idx, width, out,
                                                                                                 vec);
}

void moe_combine(const float* y, const int* row_of, const int* sel, const float* w, const float* shared, int T, int K,
                 int D, float* out, cudaStream_t stream) {
  if (T <= 0 || D <= 0) return;
  DI_CHECK(K > 0 && K <= kMaxTopK, "K = %d", K);
  const bool vec = D % 4 == 0 && aligned(y, 16) && aligned(out, 16) && (shared == nullptr || aligned(shared, 16));
  moe_combine_kernel<<<row_grid(T, ceil_div(D, 4), kEltThreads), kEltThreads, 0, stream>>>(y, row_of, sel, w, shared, K,
                                                                                           D, out, vec);
}

void hc_post_moe(float* X, const float* y, const int* row_of, const int* sel, const float* w, const float* shared,
                 int T, int K, int hc, int D, const float* post, const float* comb, bool round_o, bool round_x,
                 cudaStream_t stream) {
  if (T <= 0 || D <= 0) return;
  DI_CHECK(K > 0 && K <= kMaxTopK, "K = %d", K);
  const bool vec = D % 4 == 0 && aligned(X, 16) && aligned(y, 16) && (shared == nullptr || aligned(shared, 16));
  with_hc(hc, [&](auto hc_constant) {
    constexpr int HC = decltype(hc_constant)::value;
    hc_post_moe_kernel<HC><<<row_grid(T, ceil_div(D, 4), kEltThreads), kEltThreads, 0, stream>>>(
        X, y, row_of, sel, w, shared, K, D, post, comb, round_o, round_x, vec);
  });
}

bool hc_post_pre(float* X, float* X_out, const HcBlockOutput& out, int M, int hc, int D, const float* post,
                 const float* comb, bool round_x, const float* fn, const float* base, const float* scale, int iters,
                 float hc_eps, float norm_eps, float* collapsed, float* next_post, float* next_comb, void* workspace,
                 cudaStream_t stream, const HcNorm* norm) {
  if (M <= 0) return false;
  DI_CHECK(D > 0, "D = %d", D);
  DI_CHECK(workspace != nullptr, "hc_post_pre needs hc_workspace_bytes of workspace");
  const bool moe = out.o == nullptr;
  DI_CHECK(X_out != nullptr, "hc_post_pre: X_out is null (X itself for in place)");
  const size_t n = static_cast<size_t>(M) * hc * D;
  DI_CHECK(X_out == X || X_out + n <= X || X + n <= X_out, "hc_post_pre: X_out overlaps X without being X");
  const bool all_aligned = aligned(X, 16) && aligned(X_out, 16) && aligned(fn, 16) && aligned(collapsed, 16) &&
                           (moe ? aligned(out.y, 16) && (out.shared == nullptr || aligned(out.shared, 16))
                                : aligned(out.o, 16));
  if (!hc_post_dots_fits(hc, D, all_aligned)) {
    if (moe) {
      hc_post_moe(X, out.y, out.row_of, out.sel, out.w, out.shared, M, out.K, hc, D, post, comb, out.round_o, round_x,
                  stream);
    } else {
      hc_post(X, out.o, M, hc, D, post, comb, stream);
      if (round_x) round_bf16(X, n, stream);
    }
    if (X_out != X) CUDA_CHECK(cudaMemcpyAsync(X_out, X, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    hc_pre(X_out, M, hc, D, fn, base, scale, iters, hc_eps, norm_eps, collapsed, next_post, next_comb, workspace,
           stream, norm);
    return false;
  }
  const int splits = hc_splits(hc, D);
  float* const part = static_cast<float*>(workspace);
  const HcPostDotsArgs pd{X,          X_out, M,     D,          out.o,   out.y, out.row_of, out.sel, out.w,
                          out.shared, out.K, out.round_o, round_x, post, comb,  fn,         splits,  part};
  launch_hc_post_dots(hc, pd, stream);
  with_hc(hc, [&](auto hc_constant) {
    constexpr int HC = decltype(hc_constant)::value;
    constexpr int kMix = (2 + HC) * HC;
    HcArgs args{X_out, nullptr, M, D, fn, base, scale, iters, hc_eps, norm_eps, collapsed, next_post, next_comb,
                true,  splits,  part};
    const bool fused = fuse_hc_norm(args, norm);
    launch_hc_finish<HC, kMix, false>(args, stream);
    if (!fused) hc_norm_passes(collapsed, M, D, norm, stream);
  });
  return true;
}

void to_bf16(const float* x, size_t n, bf16* y, cudaStream_t stream) {
  if (n == 0) return;
  to_bf16_kernel<<<cast_grid(n), kEltThreads, 0, stream>>>(x, n, y, aligned(x, 16) && aligned(y, 8));
}

void round_bf16(float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  round_bf16_kernel<<<cast_grid(n), kEltThreads, 0, stream>>>(x, n, aligned(x, 16));
}

}  // namespace deepinfer::backend::cuda
