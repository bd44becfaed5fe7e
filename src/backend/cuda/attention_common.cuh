// Pieces of sink_attention shared by its mma.sync kernels (attention.cu) and its TMA-free wgmma
// kernel for 64-head CTAs (attention_wgmma.cu): the split plan, the kernel parameters, cp.async
// wrappers and the P-row loads whose fixed order the per-head sums depend on. Internal to the
// attention library (attention.h is its contract).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace deepinfer::backend::cuda::attention_common {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

// ---- PTX wrappers -------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses L1 (rows are streamed, reuse is through L2).
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(shared_dst)),
               "l"(__cvta_generic_to_global(global_src))
               : "memory");
}
// 8-byte global -> shared copy (FP8 rows are only 8-byte aligned; .cg takes 16-byte copies only).
__device__ __forceinline__ void cp_async_8(void* shared_dst, const void* global_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(shared_address(shared_dst)),
               "l"(__cvta_generic_to_global(global_src))
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ void store_zero_16(void* shared_dst) {
  *reinterpret_cast<uint4*>(shared_dst) = make_uint4(0u, 0u, 0u, 0u);
}

// =================================================================================================
// sink_attention: tiles, splits, parameters
// =================================================================================================

constexpr int kAttnThreads = 256;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kTileRows = 64;             // rows per shared-memory tile (the unit of the online softmax)
// ~640 rows per split: every CSA token of V4 (window 128 + top-k 512 compressed rows at most) and
// every HCA token up to ~65k context (128 + n/128 rows) is one split, so it writes no fp32
// partials and needs no combine kernel. At prefill the partials of the 2-split CSA tokens (64 x
// 512 fp32 per split) and the combine were ~1 ms of a 4k prompt; at batch 1 a 10-tile split is
// the same work as 2 of 5 plus the combine, in fewer launches.
constexpr int kTargetTilesPerSplit = 10;
constexpr int kMaxSplits = 16;            // long HCA contexts: splits grow up to this, then get longer
constexpr int kPartialSlots = 512;        // (token, split) partials per launch; bounds the workspace

struct SplitPlan {
  int splits;
  int tiles_per_split;
};

// Upper bound on split_plan(rows).splits, monotone in rows: the host sizes the grid and the
// workspace with split_bound(max_rows).
__host__ __device__ constexpr int split_bound(int rows) {
  return imax(1, imin(ceil_div(ceil_div(rows, kTileRows), kTargetTilesPerSplit), kMaxSplits));
}

// How a token's rows are cut: a function of its own row count only (batch invariance). Splits are
// whole tiles, balanced to within one tile; rows == 0 gives one split with no tiles.
__host__ __device__ constexpr SplitPlan split_plan(int rows) {
  const int tiles = ceil_div(rows, kTileRows);
  const int per_split = imax(1, ceil_div(tiles, split_bound(rows)));
  return {imax(1, ceil_div(tiles, per_split)), per_split};
}
static_assert(split_plan(0).splits == 1 && split_plan(640).splits == 1 && split_plan(641).splits == 2 &&
              split_plan(1280).splits == 2 && split_plan(1281).splits == 3);

struct SinkAttentionParams {
  const bf16* q;                // [tokens, H, d], first token of this launch
  const void* const* rows;      // all row pointers (row_begin values index this): bf16 or FP8 rows
  const int* row_begin;         // [tokens + 1], first token of this launch
  const float* sinks;           // [H]
  float* out;                   // [tokens, H, d]
  float* partial_o;             // [tokens * max_splits, H, d]  unnormalised O of each split
  float* partial_ml;            // [tokens * max_splits, H, 2]  (running max m, sum l) in log2 units
  int H;
  int max_splits;
  int head_blocks;
  float score_scale;            // scale * log2(e): scores are kept in log2 units, softmax uses exp2
  // FP8 rows (kFp8 instances; model/kv_format.h layout): e4m3 codes at [0, nope), one scale byte per
  // 64 codes at nope, bf16 RoPE values at tail_offset; row_chunks 8-byte pieces per row; staged
  // rows raw_pitch bytes apart in shared memory.
  int nope;
  int tail_offset;
  int row_chunks;
  int raw_pitch;
};

// One sink_attention CTA's share (grid: token x split of its rows x head block) and the steps every
// kernel takes around its tiles: sink_cta_begin (which token, heads and rows; the running statistics
// and the first two tiles' row pointers initialised) and sink_cta_epilogue_stats (the final scale
// of a single split, or the split's (m, l) for the combine kernel).
struct SinkCta {
  int token, split, head0, valid_heads;
  SplitPlan plan;
  int chunk_rows, num_tiles;
  const void* const* chunk_ptrs;
  __device__ bool single() const { return plan.splits == 1; }
  // Where O goes: the output row (single split) or this split's partial.
  __device__ float* out_base(const SinkAttentionParams& p, int D) const {
    const size_t slot = static_cast<size_t>(token) * p.max_splits + split;
    return single() ? p.out + static_cast<size_t>(token) * p.H * D : p.partial_o + slot * p.H * D;
  }
};

// False when the CTA has nothing to do: a split past the token's plan, or a token with more rows than
// the launch's max_rows (its output is then filled with NaN: loud). Otherwise sets m_run / l_run
// ([kHeads]) and ptr_s ([2][kTileRows]: tiles 0 and 1); the caller's barrier publishes them.
template <int kHeads, int D>
__device__ bool sink_cta_begin(const SinkAttentionParams& p, SinkCta& c, float* m_run, float* l_run,
                               const void** ptr_s) {
  const int tid = static_cast<int>(threadIdx.x);
  const int head_block = static_cast<int>(blockIdx.x) % p.head_blocks;
  c.split = static_cast<int>(blockIdx.x) / p.head_blocks % p.max_splits;
  c.token = static_cast<int>(blockIdx.x) / p.head_blocks / p.max_splits;
  const int row0 = p.row_begin[c.token];
  const int n = p.row_begin[c.token + 1] - row0;
  c.plan = split_plan(n);
  c.head0 = head_block * kHeads;
  c.valid_heads = imin(kHeads, p.H - c.head0);
  if (c.plan.splits > p.max_splits) {
    // More rows than the caller's max_rows: the splits have no CTAs or workspace. Make it loud.
    if (c.split == 0)
      for (int i = tid; i < c.valid_heads * D; i += kAttnThreads)
        p.out[(static_cast<size_t>(c.token) * p.H + c.head0 + i / D) * D + i % D] = __int_as_float(0x7fc00000);
    return false;
  }
  if (c.split >= c.plan.splits) return false;
  const int chunk_begin = c.split * c.plan.tiles_per_split * kTileRows;
  c.chunk_rows = imin(n - chunk_begin, c.plan.tiles_per_split * kTileRows);
  c.num_tiles = ceil_div(c.chunk_rows, kTileRows);
  c.chunk_ptrs = p.rows + row0 + chunk_begin;
  if (tid < kHeads) {
    m_run[tid] = -INFINITY;
    l_run[tid] = 0.0f;
  }
  if (tid < kTileRows) {
    ptr_s[tid] = tid < c.chunk_rows ? c.chunk_ptrs[tid] : nullptr;
    ptr_s[kTileRows + tid] = kTileRows + tid < c.chunk_rows ? c.chunk_ptrs[kTileRows + tid] : nullptr;
  }
  return true;
}

// Threads 0..valid_heads-1, after the last tile: one split: final_scale[h] = 2^(m - top) / (l 2^(m - top)
// + 2^(sink - top)), top = max(m, sink) (attention.h's mx); several: this split's (m, l) for the
// combine kernel. The caller's barrier then publishes final_scale.
__device__ __forceinline__ void sink_cta_epilogue_stats(const SinkAttentionParams& p, const SinkCta& c,
                                                        const float* m_run, const float* l_run,
                                                        float* final_scale) {
  const int h = static_cast<int>(threadIdx.x);
  if (h >= c.valid_heads) return;
  if (c.single()) {
    const float sink = __fmul_rn(p.sinks[c.head0 + h], kLog2e);
    const float m = m_run[h];
    const float top = fmaxf(m, sink);
    const float rows_weight = exp2f(m - top);  // 0 when the token has no rows (m = -inf)
    const float denominator = __fmaf_rn(l_run[h], rows_weight, exp2f(sink - top));
    final_scale[h] = rows_weight / denominator;
  } else {
    float* ml = p.partial_ml + ((static_cast<size_t>(c.token) * p.max_splits + c.split) * p.H + c.head0 + h) * 2;
    ml[0] = m_run[h];
    ml[1] = l_run[h];
  }
}

// 8 bf16 values (one 16-byte word, memory order) as floats, in order.
__device__ __forceinline__ void bf16x8_to_float(const uint4 v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    __nv_bfloat162 pair;
    static_assert(sizeof(pair) == sizeof(uint32_t));
    memcpy(&pair, &words[w], sizeof(pair));
    out[2 * w] = __low2float(pair);
    out[2 * w + 1] = __high2float(pair);
  }
}
// 16 consecutive bf16 values (32-byte aligned) as floats, in order.
__device__ __forceinline__ void load_bf16x16(const bf16* src, float (&out)[16]) {
  const uint4* v = reinterpret_cast<const uint4*>(src);
  bf16x8_to_float(v[0], out);
  bf16x8_to_float(v[1], out + 8);
}

// One tile's per-head statistics, shared by both kernels so their order is one definition: 4
// threads a head (h, quarter), each holding its quarter's 16 P values in row order (hi; `low`: the
// kBf16HiLo low parts, added first, exact in fp32). Each sums them in order, then a butterfly over
// the 4 lanes (commutative: all agree); the quarter-0 thread folds the tile's row-group maxima
// (red_max [kRowGroups][kHeads]) into the running max and sum and publishes this tile's O rescale.
template <int kHeads, int kRowGroups>
__device__ __forceinline__ void fold_tile_head_stats(float (&pv)[16], const float* low, int h, int quarter,
                                                     const float* red_max, float* m_run, float* l_run,
                                                     float* alpha_s) {
  if (low != nullptr) {
#pragma unroll
    for (int i = 0; i < 16; ++i) pv[i] = __fadd_rn(pv[i], low[i]);
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) sum += pv[i];
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (quarter == 0) {
    const float m_old = m_run[h];
    float m_new = m_old;
#pragma unroll
    for (int g = 0; g < kRowGroups; ++g) m_new = fmaxf(m_new, red_max[g * kHeads + h]);
    const float alpha = exp2f(m_old - m_new);  // 0 on the first tile (m_old = -inf)
    l_run[h] = __fmaf_rn(l_run[h], alpha, sum);
    m_run[h] = m_new;
    alpha_s[h] = alpha;
  }
}

// Launches the wgmma kernel (attention_wgmma.cu) on `grid` CTAs of 64 heads: bf16 rows, d = 512,
// the same bits as sink_attention_kernel<512, 4, false, kSplitP> (mma.sync) on the same CTAs.
void launch_sink_attention_wgmma(const SinkAttentionParams& p, int grid, bool split_p, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::attention_common
