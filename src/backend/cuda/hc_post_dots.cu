// hc_post_dots: the mHC post that closes a block (attention, or the MoE block with its combine) and
// the dot products of the next block's hc_pre, in one pass over the residual streams X. The passes
// it replaces, hc_post (or hc_post_moe) then hc_dots, read X twice and write it once; this reads
// and writes it once (at a 4k-token prefill, X is 268 MB), and a decode step has one launch less on
// its chain at each of these boundaries. hc_finish then sums the partials as after hc_dots.
//
// Same bits as the passes (tests/cuda/ops_test.cc checks it):
//  * the new X values are hc_post_value of the same old values and block output (the combine in
//    moe_combine_chunk's order), so X and every chunk the dots read are hc_post's values;
//  * warp range r of a token row gets the chunks hc_dots gives it, in the same step order, through
//    the same hc_dots_chunk (a 16-row mma tile: an output row depends on its own input row only);
//  * a CTA's partial for split s is its 8 warps' ranges 8 s .. 8 s + 7 added in warp order, as
//    hc_dots' CTA s adds them.
// The grid differs: CTA (tile, s') owns, in each stream i, the ranges of hc_dots' CTA
// i * (S / hc) + s' — one column block in all hc streams — so a lane holds every old value its
// chunk's post needs, and each X value is read and written by one lane (in place, no barrier).

#include "backend/cuda/hc_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "base/check.h"

namespace deepinfer::backend::cuda::hc_common {
namespace {

using namespace ops_common;

constexpr int kTileRows = 16;  // tokens a CTA takes: one m16 tile

// The warp layout of a call: this warp's range q (of `per_stream`) in its stream(s), of `cps` chunks.
// kOwnStream: CTA y is hc_dots' CTA y (stream y / (S / hc)); else CTA y takes range 8 y + warp of
// every stream.
struct RangeLayout {
  int dq, per_stream, cps, q, steps, stream;
};
template <int HC, bool kOwnStream>
__device__ __forceinline__ RangeLayout range_layout(int D, int splits) {
  RangeLayout r;
  r.dq = D / 4;
  r.per_stream = splits / HC * kHcWarps;
  r.cps = r.dq / r.per_stream;
  const int y = static_cast<int>(blockIdx.y), per_stream_ctas = splits / HC;
  r.stream = kOwnStream ? y / per_stream_ctas : 0;
  r.q = (kOwnStream ? y % per_stream_ctas : y) * kHcWarps + static_cast<int>(threadIdx.x) / 32;
  r.steps = ceil_div(r.cps, 4);
  return r;
}

// HC streams (<= 4), kMix mixes, kMoe: the block output is the MoE combine (else a.o).
// kOwnStream (a.X_out != a.X): a CTA's warps take one range each, of one stream, as hc_dots' do; a
// lane reads the hc old chunks of its column and writes its own stream's new chunk to X_out (X is
// only read, so no CTA can see another's new values). Else (in place) kSets = hc ranges a warp, one
// column block of every stream.
template <int HC, int kMix, bool kMoe, bool kOwnStream>
__global__ void __launch_bounds__(kHcThreads, 1) hc_post_dots_kernel(HcPostDotsArgs a) {
  constexpr int kVals = kMix + 1;
  constexpr int kNT = (kMix + 7) / 8;
  constexpr int kSets = kOwnStream ? 1 : HC;  // ranges a warp accumulates
  __shared__ float red[kHcWarps * kTileRows * kVals];
  __shared__ int order_row[kMoe ? kTileRows : 1][kMaxTopK];
  __shared__ float order_w[kMoe ? kTileRows : 1][kMaxTopK];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, t = lane % 4, g = lane / 4;
  const int D = a.D;
  const size_t W = static_cast<size_t>(HC) * D;
  const RangeLayout L = range_layout<HC, kOwnStream>(D, a.splits);
  const int tok0 = static_cast<int>(blockIdx.x) * kTileRows;
  // The stream of range set i.
  const auto stream_of = [&](int i) { return kOwnStream ? L.stream : i; };

  // This lane's fn rows 8 nt + g (zeros past kMix), at chunk i dq + cc for stream i's chunk cc.
  const float* fn_row[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
    fn_row[nt] = 8 * nt + g < kMix ? a.fn + static_cast<size_t>(8 * nt + g) * W : nullptr;
  // A step's chunk of this lane in its range (k; the range has it while k < cps), in its stream (cc),
  // and in fn row 8 nt + g for range set i.
  const auto chunk_of = [&](int step) { return 4 * step + t; };
  const auto stream_chunk = [&](int step) { return L.q * L.cps + chunk_of(step); };
  const auto fn_chunk = [&](int nt, int i, int step) {
    return fn_row[nt] + 4 * (static_cast<size_t>(stream_of(i)) * L.dq + stream_chunk(step));
  };
  using FnChunks = float4[kSets][kNT];
  FnChunks f;
  const auto load_fn = [&](int step, FnChunks& dst) {
    const bool in = chunk_of(step) < L.cps;
#pragma unroll
    for (int i = 0; i < kSets; ++i)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        dst[i][nt] = in && fn_row[nt] != nullptr ? *reinterpret_cast<const float4*>(fn_chunk(nt, i, step))
                                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  // fn is a weight (no kernel writes it): the first step's chunks load, and the later steps' are
  // fetched into L2, before the wait for the kernels this one depends on (a decode step's graph
  // launches it while the block's last GEMM drains).
  load_fn(0, f);
  for (int step = 1; step < L.steps; ++step) {
    if (chunk_of(step) >= L.cps) continue;
#pragma unroll
    for (int i = 0; i < kSets; ++i)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        if (fn_row[nt] != nullptr) asm volatile("prefetch.L2 [%0];\n" ::"l"(fn_chunk(nt, i, step)));
  }
  pdl_prologue();

  if constexpr (kMoe) {  // the tile's tokens' choices in combine order, a thread per token
    if (tid < kTileRows && tok0 + tid < a.M)
      moe_order_token(a.row_of, a.sel, a.w, tok0 + tid, a.K, order_row[tid], order_w[tid]);
    __syncthreads();
  }

  float acc[kSets][1][kNT][4];
  float ssq[kSets][1][2];
#pragma unroll
  for (int i = 0; i < kSets; ++i) {
    ssq[i][0][0] = ssq[i][0][1] = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][0][nt][e] = 0.0f;
  }
  // A step's inputs for the lane's rows g (h = 0) and g + 8 (h = 1): the hc old chunks and the
  // block output's chunk (the MoE combine, rounded when round_o); in[h] false for an absent row or
  // past the range (hc_dots loads zeros there).
  struct StepInputs {
    float4 old[2][HC];
    float4 o[2];
    bool in[2];
  };
  const auto gather = [&](int step, StepInputs& s) {
    const int k = chunk_of(step), cc = stream_chunk(step);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 8 * h + g, m = tok0 + r;
      s.in[h] = k < L.cps && m < a.M;
      if (!s.in[h]) continue;
      const size_t at = static_cast<size_t>(m) * W + 4 * static_cast<size_t>(cc);
#pragma unroll
      for (int j = 0; j < HC; ++j)
        s.old[h][j] = *reinterpret_cast<const float4*>(a.X + at + static_cast<size_t>(j) * D);
      if constexpr (kMoe) {
        s.o[h] =
            moe_combine_chunk(a.y, order_row[r], order_w[r], a.w != nullptr,
                              a.shared != nullptr ? a.shared + static_cast<size_t>(m) * D : nullptr, a.K, D, true, cc);
        if (a.round_o) s.o[h] = round_bf16x4(s.o[h]);
      } else {
        s.o[h] = *reinterpret_cast<const float4*>(a.o + static_cast<size_t>(m) * D + 4 * static_cast<size_t>(cc));
      }
    }
  };
  // The step's new stream chunks (stored to X_out) into the dots of its range set(s).
  const auto post_and_dots = [&](int step, const StepInputs& s, const FnChunks& fs) {
    const int cc = stream_chunk(step);
    float4 x[kSets][1][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = tok0 + 8 * h + g;
      if (s.in[h]) {
        const size_t at = static_cast<size_t>(m) * W + 4 * static_cast<size_t>(cc);
        const float* pm = a.post + static_cast<size_t>(m) * HC;
        const float* cm = a.comb + static_cast<size_t>(m) * HC * HC;
#pragma unroll
        for (int i = 0; i < kSets; ++i) {
          const int j = stream_of(i);
          const float4 v = hc_post_value<HC>(s.old[h], s.o[h], pm, cm, j, a.round_x);
          *reinterpret_cast<float4*>(a.X_out + at + static_cast<size_t>(j) * D) = v;
          x[i][0][h] = v;
        }
      } else {
#pragma unroll
        for (int i = 0; i < kSets; ++i) x[i][0][h] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int i = 0; i < kSets; ++i) hc_dots_chunk<1, kNT>(x[i], fs[i], acc[i], ssq[i]);
  };
  if constexpr (kOwnStream) {
    // Small steps (decode): a warp's few steps are a chain of L2 round trips, so the next step's
    // inputs and fn chunks load while this step computes (registers allow it here: one range set a
    // warp).
    StepInputs cur{}, next{};
    FnChunks f_next;
    gather(0, cur);
    for (int step = 0; step < L.steps; ++step) {
      const bool more = step + 1 < L.steps;
      if (more) {
        gather(step + 1, next);
        load_fn(step + 1, f_next);
      }
      post_and_dots(step, cur, f);
      if (!more) break;
      cur = next;
#pragma unroll
      for (int i = 0; i < kSets; ++i)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) f[i][nt] = f_next[i][nt];
    }
  } else {
    for (int step = 0; step < L.steps; ++step) {
      if (step > 0) load_fn(step, f);
      StepInputs cur;
      gather(step, cur);
      post_and_dots(step, cur, f);
    }
  }

  // Set i's partials are those of hc_dots' CTA stream_of(i) * (S / hc) + (its range block), one set
  // at a time.
  const int per_stream_ctas = a.splits / HC;
#pragma unroll
  for (int i = 0; i < kSets; ++i) {
    if (i > 0) __syncthreads();  // the previous set's sums are read
    hc_store_warp_partials<1, kNT, kMix>(acc[i], ssq[i], red);
    __syncthreads();
    hc_store_cta_partials<1, kMix>(red, tok0, a.M, a.splits, stream_of(i) * per_stream_ctas + L.q / kHcWarps, a.part);
  }
}

template <int HC, bool kOwnStream>
void launch_form(const HcPostDotsArgs& a, cudaStream_t stream) {
  constexpr int kMix = (2 + HC) * HC;
  const dim3 grid(static_cast<unsigned>(ceil_div(a.M, kTileRows)),
                  static_cast<unsigned>(kOwnStream ? a.splits : a.splits / HC));
  if (a.o != nullptr)
    hc_post_dots_kernel<HC, kMix, false, kOwnStream><<<grid, kHcThreads, 0, stream>>>(a);
  else
    hc_post_dots_kernel<HC, kMix, true, kOwnStream><<<grid, kHcThreads, 0, stream>>>(a);
}
template <int HC>
void launch(const HcPostDotsArgs& a, cudaStream_t stream) {
  if (a.X_out != a.X)
    launch_form<HC, true>(a, stream);
  else
    launch_form<HC, false>(a, stream);
}

}  // namespace

bool hc_post_dots_fits(int hc, int D, bool aligned) {
  if (hc < 1 || hc > 4 || D <= 0 || D % 4 != 0 || !aligned) return false;
  const int splits = hc_splits(hc, D);
  if (splits % hc != 0) return false;
  const int per_stream = splits / hc * kHcWarps;
  return (D / 4) % per_stream == 0;
}

void launch_hc_post_dots(int hc, const HcPostDotsArgs& a, cudaStream_t stream) {
  DI_CHECK(hc_post_dots_fits(hc, a.D, true) && a.splits == hc_splits(hc, a.D), "hc_post_dots: hc %d, D %d", hc, a.D);
  DI_CHECK(a.o != nullptr || (a.K > 0 && a.K <= kMaxTopK), "hc_post_dots: K = %d", a.K);
  switch (hc) {
    case 1:
      return launch<1>(a, stream);
    case 2:
      return launch<2>(a, stream);
    case 3:
      return launch<3>(a, stream);
    default:
      return launch<4>(a, stream);
  }
}

}  // namespace deepinfer::backend::cuda::hc_common
