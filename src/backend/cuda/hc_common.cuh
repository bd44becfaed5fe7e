// Device pieces of the mHC ops shared by ops.cu (hc_dots, hc_finish, hc_post, hc_post_moe) and
// hc_post_dots.cu (the post of one block and the dots of the next in one pass): the warp-range cut
// of a token's hc * D values, the 3xTF32 tensor-core step, the post update of one chunk, and the MoE
// combine that hc_post_moe fuses. One definition each, so the fused kernel and the passes it replaces
// compute every value with the same instructions (same bits). Internal to the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/ops_common.cuh"

namespace deepinfer::backend::cuda::hc_common {

using ops_common::ceil_div;
using ops_common::fma4;
using ops_common::load4;
using ops_common::round_bf16x4;

// hc_dots' CTA: 8 warps, each accumulating one warp range of chunks (4 floats) of a token's row.
constexpr int kHcThreads = 256;
constexpr int kHcWarps = kHcThreads / 32;  // warp ranges a CTA adds up (hc_dots)
constexpr int kHcWarpChunks = 16;          // chunks a warp range covers, about
constexpr int kHcMaxSplits = 32;

// Number of CTA ranges S of a row of hc * D values (a function of hc and D only): 32 for hc 4,
// D 4096 (256 warp ranges of 16 chunks, enough CTAs to stream fn for a single decode token).
inline int hc_splits(int hc, int D) {
  const int chunks = ceil_div(hc * D, 4);
  return std::clamp(ceil_div(chunks, kHcWarps * kHcWarpChunks), 1, kHcMaxSplits);
}

__device__ __forceinline__ uint32_t tf32_bits(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}
// v = big + small, both TF32 (big = v rounded to TF32; small = the remainder rounded to TF32).
__device__ __forceinline__ void tf32_split(float v, uint32_t& big, uint32_t& small) {
  big = tf32_bits(v);
  small = tf32_bits(v - __uint_as_float(big));
}
// d[16 x 8] += A[16 x 8] B[8 x 8], TF32 in, fp32 accumulate. Lane (g, t): a = {(g, t), (g + 8, t),
// (g, t + 4), (g + 8, t + 4)}, b = {(t, g), (t + 4, g)} (k, n), d = {(g, 2t), (g, 2t + 1), (g + 8, 2t),
// (g + 8, 2t + 1)}.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One chunk (4 values) of a warp range into the dots of kMT m16 token tiles: lane (g, t)'s token
// rows g and g + 8 of tile mt (x[mt][0], x[mt][1]) against its kNT fn rows 8 nt + g, as two k8 mma
// steps, the chunk's (x, y) then its (z, w) (which k a slot holds is free as long as x and fn agree),
// each 3xTF32 (xs fb, xb fs, xb fb accumulated in that order); ssq: the rows' sums of squares. hc_dots
// and hc_post_dots take every chunk through this, so an accumulator sees the same operations in both.
template <int kMT, int kNT>
__device__ __forceinline__ void hc_dots_chunk(const float4 (&x)[kMT][2], const float4 (&f)[kNT],
                                              float (&acc)[kMT][kNT][4], float (&ssq)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) ssq[mt][h] = ops_common::dot4(x[mt][h], x[mt][h], ssq[mt][h]);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    uint32_t fb[kNT][2], fs[kNT][2];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      tf32_split(half == 0 ? f[nt].x : f[nt].z, fb[nt][0], fs[nt][0]);
      tf32_split(half == 0 ? f[nt].y : f[nt].w, fb[nt][1], fs[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      uint32_t xb[4], xs[4];
      tf32_split(half == 0 ? x[mt][0].x : x[mt][0].z, xb[0], xs[0]);
      tf32_split(half == 0 ? x[mt][1].x : x[mt][1].z, xb[1], xs[1]);
      tf32_split(half == 0 ? x[mt][0].y : x[mt][0].w, xb[2], xs[2]);
      tf32_split(half == 0 ? x[mt][1].y : x[mt][1].w, xb[3], xs[3]);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        mma_tf32(acc[mt][nt], xs, fb[nt][0], fb[nt][1]);
        mma_tf32(acc[mt][nt], xb, fs[nt][0], fs[nt][1]);
        mma_tf32(acc[mt][nt], xb, fb[nt][0], fb[nt][1]);
      }
    }
  }
}

// A warp's partials -> red[warp] ([kHcWarps][16 kMT][kMix + 1] floats): each row's sum of squares
// (its 4 lanes' in an xor butterfly) in slot kMix, the dots in slots 0 .. kMix - 1.
template <int kMT, int kNT, int kMix>
__device__ __forceinline__ void hc_store_warp_partials(const float (&acc)[kMT][kNT][4], const float (&ssq)[kMT][2],
                                                       float* red) {
  constexpr int kVals = kMix + 1, kRows = 16 * kMT;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  float* const mine = red + static_cast<size_t>(warp) * kRows * kVals;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v = ssq[mt][h];
      v += __shfl_xor_sync(ops_common::kFullMask, v, 1);
      v += __shfl_xor_sync(ops_common::kFullMask, v, 2);
      if (t == 0) mine[(16 * mt + 8 * h + g) * kVals + kMix] = v;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 16 * mt + g + 8 * (e / 2), col = 8 * nt + 2 * t + e % 2;
        if (col < kMix) mine[row * kVals + col] = acc[mt][nt][e];
      }
  }
}

// The CTA's partials (after the barrier that follows every warp's hc_store_warp_partials): its
// warps' values added in warp order, to part[m][s][v] for the tile's tokens m < M from tok0.
template <int kMT, int kMix>
__device__ __forceinline__ void hc_store_cta_partials(const float* red, int tok0, int M, int splits, int s,
                                                      float* part) {
  constexpr int kVals = kMix + 1, kRows = 16 * kMT;
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kVals; i += kHcThreads) {
    const int m = tok0 + i / kVals;
    if (m >= M) continue;
    float sum = red[i];
#pragma unroll
    for (int w = 1; w < kHcWarps; ++w) sum += red[static_cast<size_t>(w) * kRows * kVals + i];
    part[(static_cast<size_t>(m) * splits + s) * kVals + i % kVals] = sum;
  }
}

// hc_post of one chunk of one token, output stream k: post[k] * o + sum_j comb[j][k] old_j (j in
// increasing order, from 0), rounded to bf16 when round_x (release numerics' rounding of X).
// pm: the token's post [HC]; cm: its comb [HC * HC].
template <int HC>
__device__ __forceinline__ float4 hc_post_value(const float4 (&old)[HC], float4 o, const float* pm, const float* cm,
                                                int k, bool round_x) {
  float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < HC; ++j) s = fma4(cm[j * HC + k], old[j], s);
  const float4 v = fma4(pm[k], o, s);
  return round_x ? round_bf16x4(v) : v;
}

// ---------------------------------------------------------------------------------------------
// The MoE combine (moe_combine, hc_post_moe, hc_post_dots)

constexpr int kMaxTopK = 16;

// Token t's K choices sorted by (expert, k) into order_row / order_w (weight 1 without w): the order
// in which its rows are added.
__device__ __forceinline__ void moe_order_token(const int* __restrict__ row_of, const int* __restrict__ sel,
                                                const float* __restrict__ w, int t, int K, int* order_row,
                                                float* order_w) {
  int ks[kMaxTopK];
  const int* st = sel + static_cast<size_t>(t) * K;
  for (int k = 0; k < K; ++k) {  // insertion sort, stable: equal ids keep k order
    int p = k;
    while (p > 0 && st[ks[p - 1]] > st[k]) {
      ks[p] = ks[p - 1];
      --p;
    }
    ks[p] = k;
  }
  for (int q = 0; q < K; ++q) {
    order_row[q] = row_of[static_cast<size_t>(t) * K + ks[q]];
    order_w[q] = w != nullptr ? w[static_cast<size_t>(t) * K + ks[q]] : 1.0f;
  }
}

// Chunk c of a token's combined output: its rows y[order_row[q]] added in q order (weighted by
// order_w[q] when `weighted`), then + the token's shared-expert row when shared_row is non-null.
__device__ __forceinline__ float4 moe_combine_chunk(const float* __restrict__ y, const int* order_row,
                                                    const float* order_w, bool weighted, const float* shared_row, int K,
                                                    int D, bool vec, int c) {
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int q = 0; q < K; ++q) {
    const float4 yv = load4(y + static_cast<size_t>(order_row[q]) * D, c, D, vec);
    if (weighted) {
      acc = fma4(order_w[q], yv, acc);
    } else {
      acc = make_float4(acc.x + yv.x, acc.y + yv.y, acc.z + yv.z, acc.w + yv.w);
    }
  }
  if (shared_row != nullptr) {
    const float4 sv = load4(shared_row, c, D, vec);
    acc = make_float4(acc.x + sv.x, acc.y + sv.y, acc.z + sv.z, acc.w + sv.w);
  }
  return acc;
}

// ---------------------------------------------------------------------------------------------
// hc_post_dots (hc_post_dots.cu): the post that closes a block, then the next hc_pre's dots, in one
// pass over X. In place (X_out == X): CTA (tile, s') takes the tile's 16 tokens and, in every stream
// i, warp range i * (8 S / hc) + 8 s' + warp: the same columns of all hc streams, so each lane reads
// the hc old chunks the post of its chunk needs once and updates them in place. Out of place (small
// M): hc_dots' grid, a lane writing its own stream's chunk to X_out from the hc old chunks in X (read
// hc times, from L2). Either way each range's partial is hc_dots' partial of the same CTA index
// (same chunks through hc_dots_chunk, same warp-order sum).
struct HcPostDotsArgs {
  const float* X;  // [M, hc, D]: the streams before the post
  float* X_out;    // [M, hc, D]: after it (X itself: in place)
  int M, D;
  // The closing block's output: o [M, D] (attention), or the MoE combine of y / row_of / sel / w /
  // shared (o == nullptr), rounded to bf16 when round_o.
  const float* o;
  const float* y;
  const int* row_of;
  const int* sel;
  const float* w;
  const float* shared;
  int K;
  bool round_o, round_x;
  const float* post;  // [M, hc]
  const float* comb;  // [M, hc, hc]
  const float* fn;    // the next block's [kMix, hc * D]
  int splits;
  float* part;  // [M, splits, kMix + 1]
};

// Whether hc_post_dots can run a call: hc <= 4 (its accumulators), every buffer 16-byte aligned,
// D % 4 == 0, and the warp ranges cut the streams into equal whole ranges (V4: 64 ranges of 16
// chunks a stream).
bool hc_post_dots_fits(int hc, int D, bool aligned);
// Launches hc_post_dots for hc = HC (1..4) and kMix mixes (hc_pre's (2 + hc) hc).
void launch_hc_post_dots(int hc, const HcPostDotsArgs& a, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::hc_common
