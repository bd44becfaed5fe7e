// Attention-side kernels of the CUDA backend (sm_90): sparse attention with a learned sink over
// one shared KV head, the lightning indexer's scores, and the indexer's top-k. Contract and
// semantics: attention.h.
//
// sink_attention
//   One CTA = (token, split of that token's rows, block of 16/32/64 heads), 8 warps. The CTA keeps
//   its heads' q [heads x d] in shared memory, streams the split's rows through a double-buffered
//   64-row tile (gathered through the row pointers with 16-byte cp.async, each row loaded once per
//   CTA and used as both K and V), and per tile computes on tensor cores (mma.sync m16n8k16 bf16,
//   fp32 accumulation):
//     S [heads x 64] = q K^T       warps split heads x rows; fp32 scores stay in registers
//     online softmax               per-head tile max via shared memory; P = exp2(S - m) as bf16
//     O [heads x d] += P V         warps split d; O stays in registers (128 floats per thread)
//   kBf16HiLo (release numerics, whose softmax is fp32): P is kept as two bf16 tiles, hi = bf16(P)
//   and lo = bf16(P - hi) (~16 significant bits together), and O += P_hi V, then O += P_lo V (a
//   second pass over the tile): twice the P V tensor work, P's rounding error 2^-9 -> ~2^-17
//   relative. l sums hi + lo (exact in fp32).
//   FP8 rows (sink_attention_fp8): the raw bytes are cp.async'd into the second row buffer, then
//   decoded into the first (one more barrier per tile); from there on everything is the bf16 path.
//   A token's rows are cut into splits whose size is a function of its row count alone
//   (split_plan); each split's (m, l, O) goes to the workspace and a second kernel combines the
//   splits in ascending order with the sink. A token with a single split is finished in place.
//
//   Batch invariance: every value a head's output depends on is computed by the same operation
//   sequence whatever CTA computes it: each score is one chain of mma k-steps over d; the tile
//   max is exact; P is rounded from the same numbers; the per-tile row sum l is taken from the
//   bf16 P in shared memory in a fixed order (4 x 16 rows + butterfly) that does not depend on
//   the warp layout; O is rescaled and accumulated by the same mma chain over the tile's rows.
//   So the head-block size (chosen from the grid size, i.e. from T) and max_rows change which
//   CTA computes a head, never its bits. Multiply-adds that the compiler could otherwise fuse
//   differently in different instantiations are written as explicit _rn intrinsics.
//
// indexer_scores
//   One CTA = (token, a strided set of 64-key tiles). q [64 heads x dim] is held as mma A
//   fragments in registers; key tiles are gathered like attention rows; S [64 x 64] goes through
//   shared memory so that one thread per key sums its 64 head terms sequentially in ascending
//   head order (the CPU reference's order). More than 64 heads: head blocks in ascending order,
//   each adding onto the partial sums already in `score`. FP4 keys (indexer_scores_fp4) are loaded
//   into registers during the previous tile's compute and decoded into the bf16 buffer.
//
// topk_select
//   One CTA (1024 threads) per token, radix select on a 64-bit composite key
//   (order-preserving float bits << 32 | ~index): all composites are distinct and "larger" means
//   higher score, then lower index, so the k largest composites are exactly the wanted set.
//   Scores are staged in shared memory when they fit; otherwise 12-bit histogram passes over
//   global memory narrow the candidates until they fit. The selected indices are sorted
//   (bitonic) into ascending order. Only counts (histograms) and sets depend on the atomics, so
//   the result is deterministic. If more than the staging capacity share one exact score at the
//   threshold, an order-preserving compaction over global memory takes the lowest indices.

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/kv_fp8.h"
#include "backend/cuda/kv_fp8_device.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda {
namespace {

using namespace attention_common;  // split plan, kernel parameters, cp.async wrappers

// Argument checks on the host entry points: a violated precondition is a programming error.
#define ATTN_REQUIRE(cond)                                                                              \
  do {                                                                                                  \
    if (!(cond)) {                                                                                      \
      std::fprintf(stderr, "%s:%d: deepinfer attention kernels: requirement failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                                                    \
      std::abort();                                                                                     \
    }                                                                                                   \
  } while (0)

constexpr size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

int multiprocessor_count() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}
// Compute capability 9.0 (the wgmma kernel's; this library is built for sm_90a).
bool device_is_sm90() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

// Calls fn.template operator()<V>() for the V in {kFirst, kFirst + kStep, ..., kLast} equal to v.
template <int kFirst, int kStep, int kLast, class Fn>
void dispatch_size(int v, Fn&& fn) {
  if (v == kFirst) return fn.template operator()<kFirst>();
  if constexpr (kFirst + kStep <= kLast) dispatch_size<kFirst + kStep, kStep, kLast>(v, fn);
}

// ---- PTX wrappers (the cp.async ones: attention_common.cuh) ----------------------------------------

// ldmatrix: each lane passes the address of one 8-element (16-byte) row of an 8x8 b16 matrix;
// lanes 0-7 address matrix 0, 8-15 matrix 1, 16-23 matrix 2, 24-31 matrix 3 (x2: lanes 0-15).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(p))
               : "memory");
}

// c[16x8] += a[16x16] b[16x8], bf16 inputs, fp32 accumulation. Fragment layout (lane = 4g + j):
// a = {A[g][2j..], A[g+8][2j..], A[g][2j+8..], A[g+8][2j+8..]}, b = {B[2j..][g], B[2j+8..][g]},
// c = {C[g][2j], C[g][2j+1], C[g+8][2j], C[g+8][2j+1]}.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// =================================================================================================
// sink_attention (tiles, splits and parameters: attention_common.cuh)
// =================================================================================================

// Shared-memory layout and warp roles of one (d, heads-per-CTA) instance.
template <int D, int kMTiles, bool kSplitP = false>
struct AttnLayout {
  static_assert(D % 64 == 0 && D >= 64 && D <= 512, "head dim must be a multiple of 64 up to 512");
  static_assert(kMTiles == 1 || kMTiles == 2 || kMTiles == 4, "16, 32 or 64 heads per CTA");
  static constexpr int kHeads = 16 * kMTiles;
  // Row pitches padded by 16 bytes: the 8 rows that one ldmatrix reads fall in 8 distinct 4-bank
  // groups, so fragment loads are conflict-free.
  static constexpr int kPitch = D + 8;            // bf16, q and row tiles
  static constexpr int kPPitch = kTileRows + 8;   // bf16, P tile
  // S = q K^T: warps = kSHeadParts x kSRowGroups, each kSMt x kSNt mma tiles (16 heads x 8 rows).
  static constexpr int kSHeadParts = kMTiles >= 2 ? 2 : 1;
  static constexpr int kSRowGroups = kAttnWarps / kSHeadParts;
  static constexpr int kSMt = kMTiles / kSHeadParts;
  static constexpr int kSNt = kTileRows / kSRowGroups / 8;
  // O += P V: each warp owns d / 8 output columns for all of the CTA's heads.
  static constexpr int kDimsPerWarp = D / kAttnWarps;
  static constexpr int kONt = kDimsPerWarp / 8;
  // Byte offsets (all multiples of 16).
  static constexpr size_t kRowsOffset = size_t{kHeads} * kPitch * 2;
  static constexpr size_t kPOffset = kRowsOffset + size_t{2} * kTileRows * kPitch * 2;
  static constexpr size_t kPLoOffset = kPOffset + size_t{kHeads} * kPPitch * 2;  // kSplitP: P - bf16(P)
  static constexpr size_t kRedOffset = kPLoOffset + (kSplitP ? size_t{kHeads} * kPPitch * 2 : 0);
  static constexpr size_t kStatsOffset = kRedOffset + size_t{kSRowGroups} * kHeads * 4;
  static constexpr size_t kPtrOffset = kStatsOffset + size_t{4} * kHeads * 4;
  static constexpr size_t kBytes = kPtrOffset + size_t{2} * kTileRows * sizeof(void*);
  static_assert(kBytes <= 227 * 1024, "shared memory per block on sm_90");
  static_assert(kSNt == 1 || kSNt == 2, "S fragments: 8 or 16 rows per warp");
};

// kFp8: rows are FP8 KV rows. Their raw bytes are staged (cp.async) in the second row buffer,
// then decoded to bf16 into the first: one bf16 tile buffer, the same tile contents and the same
// compute as for bf16 rows holding the decoded values.
template <int D, int kMTiles, bool kFp8, bool kSplitP>
__global__ void __launch_bounds__(kAttnThreads, 1) sink_attention_kernel(const SinkAttentionParams p) {
  prefetch_l2(p.sinks, static_cast<size_t>(p.H) * sizeof(float));
  pdl_prologue();
  using L = AttnLayout<D, kMTiles, kSplitP>;
  constexpr int kHeads = L::kHeads;
  constexpr int kPitch = L::kPitch;
  constexpr int kPPitch = L::kPPitch;
  constexpr int kChunksPerRow = D / 8;  // 16-byte pieces
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);                            // [kHeads][kPitch]
  bf16* rows_s = reinterpret_cast<bf16*>(smem + L::kRowsOffset);        // [2][kTileRows][kPitch]
  bf16* p_s = reinterpret_cast<bf16*>(smem + L::kPOffset);              // [kHeads][kPPitch]
  [[maybe_unused]] bf16* plo_s = reinterpret_cast<bf16*>(smem + L::kPLoOffset);  // kSplitP: low parts
  float* red_max = reinterpret_cast<float*>(smem + L::kRedOffset);      // [kSRowGroups][kHeads]
  float* m_run = reinterpret_cast<float*>(smem + L::kStatsOffset);      // [kHeads] running max (log2)
  float* l_run = m_run + kHeads;                                        // [kHeads] running sum of P
  float* alpha_s = l_run + kHeads;                                      // [kHeads] this tile's O rescale
  float* final_scale = alpha_s + kHeads;                                // [kHeads] 1 / denominator
  const void** ptr_s = reinterpret_cast<const void**>(smem + L::kPtrOffset);  // [2][kTileRows]
  // kFp8: raw rows of the tile in flight, in the place of the second row buffer.
  unsigned char* raw_s = smem + L::kRowsOffset + size_t{kTileRows} * kPitch * 2;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32;
  const int warp = tid / 32;
  // Prologue: this CTA's token, heads and rows, statistics, pointers of tiles 0 and 1 (sink_cta_begin),
  // q (zero rows past the last head).
  SinkCta cta;
  if (!sink_cta_begin<kHeads, D>(p, cta, m_run, l_run, ptr_s)) return;
  const int token = cta.token, head0 = cta.head0, valid_heads = cta.valid_heads;
  const int chunk_rows = cta.chunk_rows, num_tiles = cta.num_tiles;
  const void* const* chunk_ptrs = cta.chunk_ptrs;
  for (int c = tid; c < kHeads * kChunksPerRow; c += kAttnThreads) {
    const int h = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    bf16* dst = q_s + h * kPitch + col;
    if (h < valid_heads)
      cp_async_16(dst, p.q + (static_cast<size_t>(token) * p.H + head0 + h) * D + col);
    else
      store_zero_16(dst);
  }
  __syncthreads();  // ptr_s

  // Tile t lives in buffer t % 2 (kFp8: buffer 0) and its pointers in ptr_s[t % 2]. Rows past the
  // split's end are zero-filled: P is 0 there, and 0 * (stale shared memory) could be NaN.
  auto issue_tile = [&](int t) {
    const void* const* src = ptr_s + (t % 2) * kTileRows;
    const int tile_rows = imin(kTileRows, chunk_rows - t * kTileRows);
    if constexpr (kFp8) {  // raw bytes only, one warp per row; decode_tile zero-fills
      for (int r = warp; r < tile_rows; r += kAttnWarps) {
        const unsigned char* row = static_cast<const unsigned char*>(src[r]);
        for (int c = lane; c < p.row_chunks; c += 32) cp_async_8(raw_s + r * p.raw_pitch + c * 8, row + c * 8);
      }
    } else {
      bf16* dst = rows_s + (t % 2) * kTileRows * kPitch;
#pragma unroll 4
      for (int c = tid; c < kTileRows * kChunksPerRow; c += kAttnThreads) {
        const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
        if (r < tile_rows)
          cp_async_16(dst + r * kPitch + col, static_cast<const bf16*>(src[r]) + col);
        else
          store_zero_16(dst + r * kPitch + col);
      }
    }
  };
  // kFp8: staged raw tile t -> bf16 buffer 0, 8 dims (16 bytes) per step (model::KvRowFormat::decode).
  [[maybe_unused]] auto decode_tile = [&](int t) {
    const int tile_rows = imin(kTileRows, chunk_rows - t * kTileRows);
    for (int c = tid; c < kTileRows * kChunksPerRow; c += kAttnThreads) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r < tile_rows) {
        const unsigned char* raw = raw_s + r * p.raw_pitch;
        if (col < p.nope) {
          v = kvfp8::e4m3x8_scaled_bf16(*reinterpret_cast<const uint2*>(raw + col),
                                        kvfp8::e8m0_to_float(raw[p.nope + col / 64]));
        } else {
          const uint2* tail = reinterpret_cast<const uint2*>(raw + p.tail_offset + 2 * (col - p.nope));
          const uint2 lo = tail[0], hi = tail[1];
          v = make_uint4(lo.x, lo.y, hi.x, hi.y);
        }
      }
      *reinterpret_cast<uint4*>(rows_s + r * kPitch + col) = v;
    }
  };
  if (num_tiles > 0) issue_tile(0);
  cp_async_commit();

  // Per-lane fragment addressing (see mma_bf16_16816 / ldmatrix_x4).
  const int a_row = lane % 16, a_col = (lane / 16) * 8;                       // A (16x16, row-major)
  const int b_row = (lane % 8) + (L::kSNt == 2 ? (lane / 16) * 8 : 0);         // B from row-major K
  const int b_col = ((lane / 8) % 2) * 8;
  const int v_row = (lane % 8) + ((lane / 8) % 2) * 8, v_col = (lane / 16) * 8;  // B from V (.trans)
  const int s_part = warp / L::kSRowGroups;   // S phase: which heads
  const int s_group = warp % L::kSRowGroups;  // S phase: which rows of the tile
  const int s_head0 = s_part * L::kSMt * 16;
  const int s_row0 = s_group * L::kSNt * 8;
  const int o_col0 = warp * L::kDimsPerWarp;  // PV phase: which output columns

  float o[kMTiles][L::kONt][4] = {};

  const void* prefetch_ptr = nullptr;
  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait_all();
    __syncthreads();  // (A) tile t and q landed for everyone; buffer (t+1)%2 and ptr_s[(t+1)%2] free/ready
    if constexpr (kFp8) {
      decode_tile(t);   // buffer 0 is free: tile t-1's compute ended before (A)
      __syncthreads();  // (A') tile t decoded for everyone; the staging buffer is free
    }
    if (t + 1 < num_tiles) issue_tile(t + 1);
    cp_async_commit();
    if (tid < kTileRows) {  // pointers of tile t+2, stored after this tile's compute (latency hidden)
      const int r = (t + 2) * kTileRows + tid;
      prefetch_ptr = r < chunk_rows ? chunk_ptrs[r] : nullptr;
    }
    const bf16* tile = rows_s + (kFp8 ? 0 : (t % 2) * kTileRows * kPitch);
    const int tile_rows = imin(kTileRows, chunk_rows - t * kTileRows);

    // ---- S = q K^T for this warp's kSMt*16 heads x kSNt*8 rows, over all of d.
    float s[L::kSMt][L::kSNt][4] = {};
    {
      const bf16* q_frag = q_s + (s_head0 + a_row) * kPitch + a_col;
      const bf16* k_frag = tile + (s_row0 + b_row) * kPitch + b_col;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[L::kSMt][4];
#pragma unroll
        for (int mt = 0; mt < L::kSMt; ++mt) ldmatrix_x4(a[mt], q_frag + mt * 16 * kPitch + ks * 16);
        uint32_t b[4];
        if constexpr (L::kSNt == 2) {
          ldmatrix_x4(b, k_frag + ks * 16);
        } else {
          uint32_t b2[2];
          ldmatrix_x2(b2, k_frag + ks * 16);
          b[0] = b2[0];
          b[1] = b2[1];
          b[2] = b[3] = 0u;
        }
#pragma unroll
        for (int mt = 0; mt < L::kSMt; ++mt)
#pragma unroll
          for (int nt = 0; nt < L::kSNt; ++nt) mma_bf16_16816(s[mt][nt], a[mt], b[2 * nt], b[2 * nt + 1]);
      }
    }

    // ---- Scale into log2 units, mask rows past the tile's end, per-warp max per head.
#pragma unroll
    for (int mt = 0; mt < L::kSMt; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < L::kSNt; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int row = s_row0 + nt * 8 + (lane % 4) * 2 + j;
            float& v = s[mt][nt][half * 2 + j];
            v = row < tile_rows ? __fmul_rn(v, p.score_scale) : -INFINITY;
            mx = fmaxf(mx, v);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if (lane % 4 == 0) red_max[s_group * kHeads + s_head0 + mt * 16 + half * 8 + lane / 4] = mx;
      }
    __syncthreads();  // (B) red_max complete

    // ---- P = exp2(S - m_new) as bf16 into shared memory. m_new = max(m_run, tile max) is exact
    //      (max does not round), so every thread that needs it gets the same value.
#pragma unroll
    for (int mt = 0; mt < L::kSMt; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int h = s_head0 + mt * 16 + half * 8 + lane / 4;
        float m_new = m_run[h];
#pragma unroll
        for (int g = 0; g < L::kSRowGroups; ++g) m_new = fmaxf(m_new, red_max[g * kHeads + h]);
#pragma unroll
        for (int nt = 0; nt < L::kSNt; ++nt) {
          const float p0 = exp2f(s[mt][nt][half * 2] - m_new);
          const float p1 = exp2f(s[mt][nt][half * 2 + 1] - m_new);
          const int at = h * kPPitch + s_row0 + nt * 8 + (lane % 4) * 2;
          const __nv_bfloat162 hi = __floats2bfloat162_rn(p0, p1);
          *reinterpret_cast<__nv_bfloat162*>(p_s + at) = hi;
          if constexpr (kSplitP)  // the rounding error, itself in bf16: hi + lo carries ~16 bits of P
            *reinterpret_cast<__nv_bfloat162*>(plo_s + at) =
                __floats2bfloat162_rn(__fsub_rn(p0, __low2float(hi)), __fsub_rn(p1, __high2float(hi)));
        }
      }
    __syncthreads();  // (C) P complete

    // ---- Per-head statistics, 4 threads per head: each sums 16 bf16 P values in row order, then a
    //      butterfly (commutative, so all 4 lanes agree). The order is fixed and independent of
    //      the warp layout above.
    if (tid < kHeads * 4) {  // whole warps (kHeads * 4 is 64, 128 or 256)
      const int h = tid / 4, quarter = tid % 4;
      // This quarter's 16 values; under kSplitP hi + lo (exact in fp32: at most 17 significant bits).
      float pv[16], low[16];
      load_bf16x16(p_s + h * kPPitch + quarter * 16, pv);
      if constexpr (kSplitP) load_bf16x16(plo_s + h * kPPitch + quarter * 16, low);
      fold_tile_head_stats<kHeads, L::kSRowGroups>(pv, kSplitP ? low : nullptr, h, quarter, red_max, m_run, l_run,
                                                   alpha_s);
    }
    __syncthreads();  // (D) alpha ready

    // ---- O = O * alpha + P V for this warp's columns (all heads of the CTA).
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float alpha = alpha_s[mt * 16 + half * 8 + lane / 4];
#pragma unroll
        for (int nt = 0; nt < L::kONt; ++nt) {
          o[mt][nt][half * 2] *= alpha;
          o[mt][nt][half * 2 + 1] *= alpha;
        }
      }
    // kSplitP: a second pass over the tile with the low parts (same registers as the first).
#pragma unroll 1
    for (int pass = 0; pass < (kSplitP ? 2 : 1); ++pass) {
      const bf16* p_src = pass == 0 ? p_s : plo_s;
#pragma unroll
      for (int ks = 0; ks < kTileRows / 16; ++ks) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) ldmatrix_x4(a[mt], p_src + (mt * 16 + a_row) * kPPitch + ks * 16 + a_col);
        const bf16* v_frag = tile + (ks * 16 + v_row) * kPitch + o_col0;
#pragma unroll
        for (int np = 0; np < L::kONt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_frag + np * 16 + v_col);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_bf16_16816(o[mt][2 * np], a[mt], b[0], b[1]);
            mma_bf16_16816(o[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
        if constexpr (L::kONt % 2 == 1) {
          uint32_t b[2];
          ldmatrix_x2_trans(b, v_frag + (L::kONt - 1) * 8);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) mma_bf16_16816(o[mt][L::kONt - 1], a[mt], b[0], b[1]);
        }
      }
    }
    if (tid < kTileRows) ptr_s[(t % 2) * kTileRows + tid] = prefetch_ptr;  // tile t+2's pointers
  }
  cp_async_wait_all();  // a token without rows never waited for its q copy

  // ---- Epilogue: the final scale (one split) or this split's (m, l) for the combine kernel, then O.
  sink_cta_epilogue_stats(p, cta, m_run, l_run, final_scale);
  __syncthreads();
  const bool single = cta.single();
  float* dst_base = cta.out_base(p, D);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = mt * 16 + half * 8 + lane / 4;
      if (h >= valid_heads) continue;
      const float f = single ? final_scale[h] : 1.0f;
      float* dst = dst_base + static_cast<size_t>(head0 + h) * D + o_col0 + (lane % 4) * 2;
#pragma unroll
      for (int nt = 0; nt < L::kONt; ++nt)
        *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(o[mt][nt][half * 2] * f, o[mt][nt][half * 2 + 1] * f);
    }
}

// Combines the splits of multi-split tokens, in ascending split order:
//   top = max(sink, m_i), den = 2^(sink - top) + sum_i l_i 2^(m_i - top), out = sum_i O_i 2^(m_i - top) / den.
// Grid (tokens, H), 128 threads x 4 columns.
__global__ void __launch_bounds__(128) sink_attention_combine_kernel(const SinkAttentionParams p, int d) {
  prefetch_l2(p.sinks, static_cast<size_t>(p.H) * sizeof(float));
  pdl_prologue();
  const int token = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const SplitPlan plan = split_plan(p.row_begin[token + 1] - p.row_begin[token]);
  if (plan.splits <= 1 || plan.splits > p.max_splits) return;
  const size_t slot0 = static_cast<size_t>(token) * p.max_splits;
  auto ml = [&](int s) { return p.partial_ml + ((slot0 + s) * p.H + h) * 2; };
  const float sink = __fmul_rn(p.sinks[h], kLog2e);
  float top = sink;
  for (int s = 0; s < plan.splits; ++s) top = fmaxf(top, ml(s)[0]);
  float denominator = exp2f(sink - top);
  for (int s = 0; s < plan.splits; ++s) denominator = __fmaf_rn(ml(s)[1], exp2f(ml(s)[0] - top), denominator);
  for (int c = static_cast<int>(threadIdx.x) * 4; c < d; c += static_cast<int>(blockDim.x) * 4) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < plan.splits; ++s) {
      const float w = exp2f(ml(s)[0] - top);
      const float4 v = *reinterpret_cast<const float4*>(p.partial_o + ((slot0 + s) * p.H + h) * d + c);
      acc.x = __fmaf_rn(v.x, w, acc.x);
      acc.y = __fmaf_rn(v.y, w, acc.y);
      acc.z = __fmaf_rn(v.z, w, acc.z);
      acc.w = __fmaf_rn(v.w, w, acc.w);
    }
    *reinterpret_cast<float4*>(p.out + (static_cast<size_t>(token) * p.H + h) * d + c) =
        make_float4(acc.x / denominator, acc.y / denominator, acc.z / denominator, acc.w / denominator);
  }
}

template <int D, int kMTiles, bool kFp8, bool kSplitP>
void launch_sink_attention(const SinkAttentionParams& p, int grid, cudaStream_t stream) {
  using L = AttnLayout<D, kMTiles, kSplitP>;
  CUDA_CHECK(cudaFuncSetAttribute(sink_attention_kernel<D, kMTiles, kFp8, kSplitP>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kBytes)));
  sink_attention_kernel<D, kMTiles, kFp8, kSplitP><<<grid, kAttnThreads, L::kBytes, stream>>>(p);
}

template <int D, bool kFp8, bool kSplitP>
void launch_sink_attention_dim(int m_tiles, const SinkAttentionParams& p, int grid, cudaStream_t stream) {
  switch (m_tiles) {
    case 1: return launch_sink_attention<D, 1, kFp8, kSplitP>(p, grid, stream);
    case 2: return launch_sink_attention<D, 2, kFp8, kSplitP>(p, grid, stream);
    default: return launch_sink_attention<D, 4, kFp8, kSplitP>(p, grid, stream);
  }
}

int tokens_per_launch(int T, int max_splits) {
  return max_splits == 1 ? T : imin(T, kPartialSlots / max_splits);
}

// =================================================================================================
// indexer_scores
// =================================================================================================

constexpr int kIdxThreads = 256;
constexpr int kIdxTileKeys = 64;
constexpr int kIdxBlockHeads = 64;

struct IndexerParams {
  const bf16* q;              // [T, heads, dim]
  const float* weights;       // [T, heads]
  const void* const* keys;    // bf16 keys, or FP4 keys (kFp4 instances)
  const int* key_begin;       // [T]
  const int* num_keys;        // [T]
  float* score;
  int heads;
  int score_stride;
  float scale;
};

template <int DIM>
struct IndexerLayout {
  static_assert(DIM % 16 == 0 && DIM >= 16 && DIM <= 256, "indexer dim: a multiple of 16 up to 256");
  static constexpr int kPitch = DIM + 8;               // bf16; conflict-free ldmatrix (see AttnLayout)
  static constexpr int kSPitch = kIdxTileKeys + 4;     // fp32 score tile
  static constexpr size_t kKeysOffset = size_t{kIdxBlockHeads} * kPitch * 2;
  static constexpr size_t kScoreOffset = kKeysOffset + size_t{2} * kIdxTileKeys * kPitch * 2;
  static constexpr size_t kWeightOffset = kScoreOffset + size_t{kIdxBlockHeads} * kSPitch * 4;
  static constexpr size_t kPtrOffset = kWeightOffset + size_t{kIdxBlockHeads} * 4;
  static constexpr size_t kBytes = kPtrOffset + size_t{2} * kIdxTileKeys * sizeof(void*);
};

// Warps: 2 head halves (32 heads: 2 m-tiles) x 4 key groups (16 keys: 2 n-tiles). Grid (T, key
// tile groups): CTA y takes the token's tiles y, y + gridDim.y, ...
// kFp4: keys are FP4 rows (model::IndexRowFormat). A tile is loaded into registers after (A) and
// decoded into its bf16 buffer after the score tile's barrier, so the buffers hold exactly what a
// bf16 tile of the decoded keys would hold, and the compute is the same.
template <int DIM, bool kFp4>
__global__ void __launch_bounds__(kIdxThreads, DIM <= 128 ? 2 : 1) indexer_scores_kernel(const IndexerParams p) {
  pdl_prologue();
  using L = IndexerLayout<DIM>;
  constexpr int kPitch = L::kPitch;
  constexpr int kChunksPerKey = DIM / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);                                  // [64][kPitch]
  bf16* keys_s = reinterpret_cast<bf16*>(smem + L::kKeysOffset);              // [2][64][kPitch]
  float* s_s = reinterpret_cast<float*>(smem + L::kScoreOffset);              // [64 heads][kSPitch]
  float* w_s = reinterpret_cast<float*>(smem + L::kWeightOffset);             // [64]
  const void** ptr_s = reinterpret_cast<const void**>(smem + L::kPtrOffset);  // [2][64]

  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int token = static_cast<int>(blockIdx.x);
  const int n = p.num_keys[token];
  const int total_tiles = ceil_div(n, kIdxTileKeys);
  const int first_tile = static_cast<int>(blockIdx.y), tile_stride = static_cast<int>(gridDim.y);
  if (first_tile >= total_tiles) return;
  const int my_tiles = ceil_div(total_tiles - first_tile, tile_stride);
  const void* const* key_ptrs = p.keys + p.key_begin[token];
  auto key0_of = [&](int i) { return (first_tile + i * tile_stride) * kIdxTileKeys; };

  [[maybe_unused]] auto issue_tile = [&](int i) {
    bf16* dst = keys_s + (i % 2) * kIdxTileKeys * kPitch;
    const void* const* src = ptr_s + (i % 2) * kIdxTileKeys;
    const int tile_keys = imin(kIdxTileKeys, n - key0_of(i));
#pragma unroll
    for (int c = tid; c < kIdxTileKeys * kChunksPerKey; c += kIdxThreads) {
      const int r = c / kChunksPerKey, col = (c % kChunksPerKey) * 8;
      if (r < tile_keys)
        cp_async_16(dst + r * kPitch + col, static_cast<const bf16*>(src[r]) + col);
      else
        store_zero_16(dst + r * kPitch + col);
    }
  };

  // kFp4: a unit is (key, 32-dim block): 16 code bytes + 1 scale byte, in registers between
  // load_tile and decode_tile. Key pointers are aligned as rows packed from a 16-byte base.
  constexpr int kBlocks = imax(1, DIM / 32);  // (DIM 16 exists for bf16 keys only)
  constexpr int kUnits = kIdxTileKeys * kBlocks;
  static_assert(!kFp4 || DIM % 32 == 0, "FP4 keys carry one scale per 32 dims");
  constexpr int kUnitsPerThread = imax(1, ceil_div(kUnits, kIdxThreads));
  constexpr int kKeyAlign = kvfp8::packed_row_alignment(DIM / 2 + kBlocks);
  [[maybe_unused]] uint4 unit_codes[kUnitsPerThread];
  [[maybe_unused]] uint32_t unit_scale[kUnitsPerThread];  // > 0xff: no key there (zeros)
  [[maybe_unused]] auto load_tile = [&](int i) {
    const void* const* src = ptr_s + (i % 2) * kIdxTileKeys;
    const int tile_keys = imin(kIdxTileKeys, n - key0_of(i));
#pragma unroll
    for (int k = 0; k < kUnitsPerThread; ++k) {
      const int u = tid + k * kIdxThreads, r = u / kBlocks, b = u % kBlocks;
      unit_codes[k] = make_uint4(0u, 0u, 0u, 0u);
      unit_scale[k] = 0x100u;
      if (u < kUnits && r < tile_keys) {
        const uint8_t* key = static_cast<const uint8_t*>(src[r]);
        unit_codes[k] = kvfp8::load16<kKeyAlign>(key + 16 * b);
        unit_scale[k] = key[DIM / 2 + b];
      }
    }
  };
  [[maybe_unused]] auto decode_tile = [&](int i) {  // model::IndexRowFormat::decode
    bf16* dst = keys_s + (i % 2) * kIdxTileKeys * kPitch;
#pragma unroll
    for (int k = 0; k < kUnitsPerThread; ++k) {
      const int u = tid + k * kIdxThreads, r = u / kBlocks, b = u % kBlocks;
      if (u >= kUnits) continue;
      uint4* out = reinterpret_cast<uint4*>(dst + r * kPitch + 32 * b);
      if (unit_scale[k] > 0xffu) {
        out[0] = out[1] = out[2] = out[3] = make_uint4(0u, 0u, 0u, 0u);
      } else {
        const float scale = kvfp8::e8m0_to_float(unit_scale[k]);
        out[0] = kvfp8::e2m1x8_scaled_bf16(unit_codes[k].x, scale);
        out[1] = kvfp8::e2m1x8_scaled_bf16(unit_codes[k].y, scale);
        out[2] = kvfp8::e2m1x8_scaled_bf16(unit_codes[k].z, scale);
        out[3] = kvfp8::e2m1x8_scaled_bf16(unit_codes[k].w, scale);
      }
    }
  };

  const int part = warp / 4, group = warp % 4;
  const int a_row = lane % 16, a_col = (lane / 16) * 8;
  const int b_row = (lane % 8) + (lane / 16) * 8, b_col = ((lane / 8) % 2) * 8;

  for (int hb = 0; hb * kIdxBlockHeads < p.heads; ++hb) {
    const int valid_heads = imin(kIdxBlockHeads, p.heads - hb * kIdxBlockHeads);
    __syncthreads();  // the previous head block is done with q_s, w_s, ptr_s
    for (int c = tid; c < kIdxBlockHeads * kChunksPerKey; c += kIdxThreads) {
      const int h = c / kChunksPerKey, col = (c % kChunksPerKey) * 8;
      bf16* dst = q_s + h * kPitch + col;
      if (h < valid_heads)
        cp_async_16(dst, p.q + (static_cast<size_t>(token) * p.heads + hb * kIdxBlockHeads + h) * DIM + col);
      else
        store_zero_16(dst);
    }
    if (tid < kIdxBlockHeads) {
      w_s[tid] = tid < valid_heads ? p.weights[static_cast<size_t>(token) * p.heads + hb * kIdxBlockHeads + tid] : 0.0f;
      for (int i = 0; i < 2; ++i) {
        const int key = key0_of(i) + tid;
        ptr_s[i * kIdxTileKeys + tid] = i < my_tiles && key < n ? key_ptrs[key] : nullptr;
      }
    }
    __syncthreads();  // ptr_s
    if constexpr (kFp4) {
      load_tile(0);  // buffer 0 is free: the previous head block is done with it
      decode_tile(0);
    } else {
      issue_tile(0);
    }
    cp_async_commit();

    uint32_t q_frag[2][DIM / 16][4];  // this warp's 32 heads of q as A fragments, loaded once
    const void* prefetch_ptr = nullptr;
    for (int i = 0; i < my_tiles; ++i) {
      cp_async_wait_all();
      __syncthreads();  // tile i (and q) landed; the other buffer and ptr_s[(i+1)%2] are ready
      if (i == 0) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int ks = 0; ks < DIM / 16; ++ks)
            ldmatrix_x4(q_frag[mt][ks], q_s + (part * 32 + mt * 16 + a_row) * kPitch + ks * 16 + a_col);
      }
      if constexpr (!kFp4)
        if (i + 1 < my_tiles) issue_tile(i + 1);
      cp_async_commit();
      if (tid < kIdxTileKeys) {
        const int key = key0_of(i + 2) + tid;
        prefetch_ptr = i + 2 < my_tiles && key < n ? key_ptrs[key] : nullptr;
      }

      float acc[2][2][4] = {};
      const bf16* k_frag = keys_s + (i % 2) * kIdxTileKeys * kPitch + (group * 16 + b_row) * kPitch + b_col;
#pragma unroll
      for (int ks = 0; ks < DIM / 16; ++ks) {
        uint32_t b[4];
        ldmatrix_x4(b, k_frag + ks * 16);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16_16816(acc[mt][0], q_frag[mt][ks], b[0], b[1]);
          mma_bf16_16816(acc[mt][1], q_frag[mt][ks], b[2], b[3]);
        }
      }
      // kFp4: the next tile's raw keys into registers (not held across the mma loop: no spills).
      if constexpr (kFp4)
        if (i + 1 < my_tiles) load_tile(i + 1);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            const int h = part * 32 + mt * 16 + half * 8 + lane / 4;
            const int key = group * 16 + nt * 8 + (lane % 4) * 2;
            *reinterpret_cast<float2*>(s_s + h * L::kSPitch + key) =
                make_float2(acc[mt][nt][half * 2], acc[mt][nt][half * 2 + 1]);
          }
      __syncthreads();  // score tile complete

      // One thread per key: sum over heads in ascending order, (relu(dot) * scale) * weight.
      if (tid < kIdxTileKeys) {
        const int key = key0_of(i) + tid;
        if (key < n) {
          float* dst = p.score + static_cast<size_t>(token) * p.score_stride + key;
          float sum = hb == 0 ? 0.0f : *dst;
          for (int h = 0; h < valid_heads; ++h)
            sum = __fadd_rn(sum, __fmul_rn(__fmul_rn(fmaxf(s_s[h * L::kSPitch + tid], 0.0f), p.scale), w_s[h]));
          *dst = sum;
        }
        ptr_s[(i % 2) * kIdxTileKeys + tid] = prefetch_ptr;  // tile i+2's pointers
      }
      // kFp4: buffer (i+1)%2 was last read by tile i-1's mma, which ended before (A); the next
      // iteration's (A) publishes it.
      if constexpr (kFp4)
        if (i + 1 < my_tiles) decode_tile(i + 1);
    }
  }
}

template <int DIM, bool kFp4>
void launch_indexer_scores(const IndexerParams& p, dim3 grid, cudaStream_t stream) {
  using L = IndexerLayout<DIM>;
  CUDA_CHECK(cudaFuncSetAttribute(indexer_scores_kernel<DIM, kFp4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(L::kBytes)));
  indexer_scores_kernel<DIM, kFp4><<<grid, kIdxThreads, L::kBytes, stream>>>(p);
}

// =================================================================================================
// topk_select
// =================================================================================================

constexpr int kTopkThreads = 1024;
constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kTopkBins = 4096;                  // 12-bit radix digits
constexpr int kTopkMaxK = 2048;
constexpr int kTopkStageCapacity = 24 * 1024;    // staged (key, index) pairs: 192 KB
constexpr int kTopkBatch = 8;                    // loads in flight per thread in a histogram pass
constexpr int kTopkScratch = 64;                 // ints: scan scratch + results
// scratch slots
static_assert(kTopkBins == 4 * kTopkThreads, "radix_step: each thread owns 4 bins");
constexpr int kScratchDigit = 40, kScratchAbove = 41, kScratchBinCount = 42, kScratchCount = 43;

struct TopkParams {
  const float* score;
  const int* num_keys;
  int* selected;
  int* count;
  int score_stride;
  int k;
  int stage_capacity;  // staged pairs that fit in this launch's shared memory
};

// Order-preserving map of a float to uint32 (larger float -> larger key). -0 is mapped like +0:
// the reference compares them equal, so they must tie (and then the lower index wins).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t bits = x == 0.0f ? 0u : __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
// Distinct for distinct indices; larger = higher score, then lower index.
__device__ __forceinline__ uint64_t composite_key(uint32_t key, int index) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(index));
}

// Inclusive prefix sum over the block in thread order; every thread must call.
__device__ int block_inclusive_scan(int v, int* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += u;
  }
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = scratch[lane];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += u;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += scratch[warp - 1];
  __syncthreads();  // scratch may be reused
  return v;
}

// One radix step: histogram of the `bits`-wide digit at `shift` over the composites c of
// elements 0..count-1 (load(i)) with (c & mask) == prefix, then the digit holding the need-th
// largest. Updates prefix, mask and need; returns that digit's count. Every thread must call.
template <class Load>
__device__ int radix_step(int count, Load load, int shift, int bits, uint64_t& prefix, uint64_t& mask, int& need,
                          int* hist, int* scratch) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  for (int b = tid; b < kTopkBins; b += kTopkThreads) hist[b] = 0;
  __syncthreads();
  const uint64_t digit_mask = (uint64_t{1} << bits) - 1;
  // Uniform trip count: __match_any_sync needs whole warps. Lanes with the same digit add once.
  for (int base = 0; base < count; base += kTopkThreads * kTopkBatch) {
    uint64_t c[kTopkBatch];
#pragma unroll
    for (int j = 0; j < kTopkBatch; ++j) {
      const int i = base + j * kTopkThreads + tid;
      c[j] = i < count ? load(i) : 0;
    }
#pragma unroll
    for (int j = 0; j < kTopkBatch; ++j) {
      const int i = base + j * kTopkThreads + tid;
      const int digit = i < count && (c[j] & mask) == prefix ? static_cast<int>((c[j] >> shift) & digit_mask) : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      if (digit >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
    }
  }
  __syncthreads();
  // Thread t owns bins 4095-4t .. 4092-4t (descending), so the scan counts from the top.
  int local[4], sum = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    local[j] = hist[kTopkBins - 1 - 4 * tid - j];
    sum += local[j];
  }
  const int inclusive = block_inclusive_scan(sum, scratch);
  int above = inclusive - sum;
  if (above < need && need <= inclusive) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (above + local[j] >= need) {
        scratch[kScratchDigit] = kTopkBins - 1 - 4 * tid - j;
        scratch[kScratchAbove] = above;
        scratch[kScratchBinCount] = local[j];
        break;
      }
      above += local[j];
    }
  }
  __syncthreads();
  const int digit = scratch[kScratchDigit];
  need -= scratch[kScratchAbove];
  const int bin_count = scratch[kScratchBinCount];
  prefix |= static_cast<uint64_t>(digit) << shift;
  mask |= digit_mask << shift;
  __syncthreads();  // scratch results read by all before the next step writes them
  return bin_count;
}

// Digit widths: 12, 12, 8 bits for the score half and again for the index half, so that a step
// never straddles the two.
__device__ __forceinline__ int radix_bits(int resolved) {
  return resolved < 32 ? imin(12, 32 - resolved) : imin(12, 64 - resolved);
}

// Fallback for massive exact ties: keys > threshold, then the take_equal lowest-index keys ==
// threshold, written at their rank in index order. Each warp owns a contiguous index segment:
// count pass, warp offsets, write pass. Loads go 4 x 32 per step to keep several in flight.
__device__ void ordered_global_compaction(const float* s, int n, uint32_t threshold, int take_equal, int* out,
                                          int* scratch) {
  constexpr int kGroups = 4;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int segment = ceil_div(ceil_div(n, kTopkWarps), 32 * kGroups) * 32 * kGroups;
  const int begin = warp * segment, end = imin(n, begin + segment);
  auto load_keys = [&](int i0, uint32_t (&key)[kGroups]) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int i = i0 + g * 32 + lane;
      key[g] = i < end ? order_key(s[i]) : 0u;
    }
  };
  int greater = 0, equal = 0;
  for (int i0 = begin; i0 < end; i0 += 32 * kGroups) {
    uint32_t key[kGroups];
    load_keys(i0, key);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const bool valid = i0 + g * 32 + lane < end;
      greater += __popc(__ballot_sync(0xffffffffu, valid && key[g] > threshold));
      equal += __popc(__ballot_sync(0xffffffffu, valid && key[g] == threshold));
    }
  }
  if (lane == 0) {
    scratch[warp] = greater;
    scratch[kTopkWarps + warp] = equal;
  }
  __syncthreads();
  int greater_before = 0, equal_before = 0;
  for (int w = 0; w < warp; ++w) {
    greater_before += scratch[w];
    equal_before += scratch[kTopkWarps + w];
  }
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int i0 = begin; i0 < end; i0 += 32 * kGroups) {
    uint32_t key[kGroups];
    load_keys(i0, key);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int i = i0 + g * 32 + lane;
      const bool is_greater = i < end && key[g] > threshold, is_equal = i < end && key[g] == threshold;
      const unsigned greater_mask = __ballot_sync(0xffffffffu, is_greater);
      const unsigned equal_mask = __ballot_sync(0xffffffffu, is_equal);
      const int rank_greater = greater_before + __popc(greater_mask & lanes_below);
      const int rank_equal = equal_before + __popc(equal_mask & lanes_below);
      if (is_greater || (is_equal && rank_equal < take_equal)) out[rank_greater + imin(rank_equal, take_equal)] = i;
      greater_before += __popc(greater_mask);
      equal_before += __popc(equal_mask);
    }
  }
}

__global__ void __launch_bounds__(kTopkThreads, 1) topk_kernel(const TopkParams p) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char smem[];
  int* hist = reinterpret_cast<int*>(smem);                                 // [kTopkBins]
  int* sel = hist + kTopkBins;                                              // [kTopkMaxK]
  int* scratch = sel + kTopkMaxK;                                           // [kTopkScratch]
  uint32_t* staged_key = reinterpret_cast<uint32_t*>(scratch + kTopkScratch);  // [stage_capacity]
  int* staged_index = reinterpret_cast<int*>(staged_key + p.stage_capacity);   // [stage_capacity]

  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const int token = static_cast<int>(blockIdx.x);
  const int n = imax(0, p.num_keys[token]);
  const int k = p.k;
  int* out = p.selected + static_cast<size_t>(token) * k;
  if (tid == 0 && p.count != nullptr) p.count[token] = imin(k, n);
  if (n <= k) {
    for (int i = tid; i < k; i += kTopkThreads) out[i] = i < n ? i : -1;
    return;
  }
  const float* s = p.score + static_cast<size_t>(token) * p.score_stride;
  auto global_composite = [&](int i) { return static_cast<uint64_t>(order_key(s[i])) << 32; };

  // 1) Narrow the candidates over global memory until they fit in shared memory. Candidates are
  //    the elements whose resolved score bits are >= prefix: (k - need) of them are sure to be
  //    selected, bin_count share the prefix.
  uint64_t prefix = 0, mask = 0;
  int need = k, resolved = 0, candidates = n;
  while (candidates > p.stage_capacity) {
    if (resolved == 32) {  // > stage_capacity keys tie exactly at the threshold score
      ordered_global_compaction(s, n, static_cast<uint32_t>(prefix >> 32), need, out, scratch);
      return;
    }
    const int bits = radix_bits(resolved);
    const int bin_count = radix_step(n, global_composite, 64 - resolved - bits, bits, prefix, mask, need, hist, scratch);
    resolved += bits;
    candidates = (k - need) + bin_count;
  }

  // 2) Stage the candidates (score key, index); their order in shared memory is irrelevant.
  if (tid == 0) scratch[kScratchCount] = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kTopkThreads * kTopkBatch) {
    uint32_t key[kTopkBatch];
#pragma unroll
    for (int j = 0; j < kTopkBatch; ++j) {
      const int i = base + j * kTopkThreads + tid;
      key[j] = i < n ? order_key(s[i]) : 0u;
    }
#pragma unroll
    for (int j = 0; j < kTopkBatch; ++j) {
      const int i = base + j * kTopkThreads + tid;
      const bool take = i < n && ((static_cast<uint64_t>(key[j]) << 32) & mask) >= prefix;
      const unsigned takers = __ballot_sync(0xffffffffu, take);
      int slot = 0;
      if (lane == 0 && takers != 0u) slot = atomicAdd(&scratch[kScratchCount], __popc(takers));
      slot = __shfl_sync(0xffffffffu, slot, 0) + __popc(takers & ((1u << lane) - 1u));
      if (take) {
        staged_key[slot] = key[j];
        staged_index[slot] = i;
      }
    }
  }
  __syncthreads();
  const int staged = scratch[kScratchCount];
  __syncthreads();

  // 3) Radix select on the composites in shared memory; stop early once the chosen bin is taken
  //    whole (then every composite >= prefix is selected: exactly k of them).
  auto staged_composite = [&](int i) { return composite_key(staged_key[i], staged_index[i]); };
  prefix = 0;
  mask = 0;
  need = k;
  for (resolved = 0; resolved < 64;) {
    const int bits = radix_bits(resolved);
    const int bin_count = radix_step(staged, staged_composite, 64 - resolved - bits, bits, prefix, mask, need, hist, scratch);
    resolved += bits;
    if (bin_count == need) break;
  }

  // 4) Gather the k selected indices, sort ascending (bitonic, padded to a power of two).
  if (tid == 0) scratch[kScratchCount] = 0;
  __syncthreads();
  for (int i = tid; i < staged; i += kTopkThreads)
    if (staged_composite(i) >= prefix) sel[atomicAdd(&scratch[kScratchCount], 1)] = staged_index[i];
  int padded = 1;
  while (padded < k) padded <<= 1;
  for (int i = k + tid; i < padded; i += kTopkThreads) sel[i] = 0x7fffffff;
  __syncthreads();
  for (int size = 2; size <= padded; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = tid; i < padded; i += kTopkThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const bool ascending = (i & size) == 0;
          const int a = sel[i], b = sel[j];
          if ((a > b) == ascending) {
            sel[i] = b;
            sel[j] = a;
          }
        }
      }
      __syncthreads();
    }
  for (int i = tid; i < k; i += kTopkThreads) out[i] = sel[i];
}

}  // namespace

// =================================================================================================
// Host entry points
// =================================================================================================

size_t sink_attention_workspace_bytes(int T, int H, int d, int max_rows) {
  const int max_splits = split_bound(max_rows);
  if (T <= 0 || max_splits == 1) return 0;
  const size_t slots = static_cast<size_t>(tokens_per_launch(T, max_splits)) * max_splits;
  return align256(slots * H * d * sizeof(float)) + align256(slots * H * 2 * sizeof(float));
}

namespace {

// rope_dims < 0: bf16 rows; otherwise FP8 rows of kv_fp8_row_bytes(d, rope_dims) bytes.
void sink_attention_any(const bf16* q, int T, int H, int d, int rope_dims, const void* const* rows,
                        const int* row_begin, int max_rows, const float* sinks, float scale, float* out,
                        void* workspace, cudaStream_t stream, AttnProbabilities probs) {
  if (T <= 0) return;
  ATTN_REQUIRE(H >= 1 && d % 64 == 0 && d >= 64 && d <= 512 && max_rows >= 0);
  const bool fp8 = rope_dims >= 0;
  const int max_splits = split_bound(max_rows);
  const int per_launch = tokens_per_launch(T, max_splits);
  ATTN_REQUIRE(max_splits == 1 || workspace != nullptr);

  // Heads per CTA: 64 when the grid fills the GPU, smaller blocks for few tokens. This moves
  // heads between CTAs but never changes a head's arithmetic (see the file comment).
  const int sms = multiprocessor_count();
  auto ctas = [&](int m_tiles) {
    return static_cast<long long>(per_launch) * max_splits * ceil_div(H, 16 * m_tiles);
  };
  int m_tiles = 1;
  if (H > 16) {
    if (ctas(4) * 4 >= 3LL * sms)
      m_tiles = 4;
    else if (ctas(2) * 4 >= 3LL * sms)
      m_tiles = 2;
  }
  const int head_blocks = ceil_div(H, 16 * m_tiles);
  // 64-head CTAs over bf16 rows of d = 512 run on wgmma (attention_wgmma.cu; the same bits).
  const bool wgmma = m_tiles == 4 && !fp8 && d == 512 && H % 64 == 0 && device_is_sm90();

  SinkAttentionParams p{};
  p.rows = rows;
  p.sinks = sinks;
  p.H = H;
  p.max_splits = max_splits;
  p.head_blocks = head_blocks;
  p.score_scale = scale * kLog2e;
  if (fp8) {
    ATTN_REQUIRE(rope_dims <= d && rope_dims % 8 == 0);
    const size_t row_bytes = kv_fp8_row_bytes(d, rope_dims);
    ATTN_REQUIRE(row_bytes % 8 == 0 && row_bytes <= size_t{2} * d);  // staging fits the second row buffer
    p.nope = d - rope_dims;
    p.tail_offset = static_cast<int>(row_bytes) - 2 * rope_dims;
    p.row_chunks = static_cast<int>(row_bytes / 8);
    p.raw_pitch = static_cast<int>((row_bytes + 15) / 16 * 16);
  }
  if (max_splits > 1) {
    const size_t slots = static_cast<size_t>(per_launch) * max_splits;
    p.partial_o = static_cast<float*>(workspace);
    p.partial_ml = reinterpret_cast<float*>(static_cast<char*>(workspace) + align256(slots * H * d * sizeof(float)));
  }
  for (int t0 = 0; t0 < T; t0 += per_launch) {
    const int tokens = imin(per_launch, T - t0);
    p.q = q + static_cast<size_t>(t0) * H * d;
    p.row_begin = row_begin + t0;
    p.out = out + static_cast<size_t>(t0) * H * d;
    const int grid = tokens * max_splits * head_blocks;
    const bool split_p = probs == AttnProbabilities::kBf16HiLo;
    if (wgmma)
      launch_sink_attention_wgmma(p, grid, split_p, stream);
    else
      dispatch_size<64, 64, 512>(d, [&]<int D>() {
        if (fp8 && split_p)
          launch_sink_attention_dim<D, true, true>(m_tiles, p, grid, stream);
        else if (fp8)
          launch_sink_attention_dim<D, true, false>(m_tiles, p, grid, stream);
        else if (split_p)
          launch_sink_attention_dim<D, false, true>(m_tiles, p, grid, stream);
        else
          launch_sink_attention_dim<D, false, false>(m_tiles, p, grid, stream);
      });
    if (max_splits > 1) sink_attention_combine_kernel<<<dim3(tokens, H), 128, 0, stream>>>(p, d);
  }
}

void indexer_scores_any(const bf16* q, const float* weights, int T, int heads, int dim, bool fp4,
                        const void* const* keys, const int* key_begin, const int* num_keys, int max_keys, float scale,
                        float* score, int score_stride, cudaStream_t stream) {
  if (T <= 0 || max_keys <= 0) return;
  ATTN_REQUIRE(heads >= 1 && dim >= 16 && dim <= 256 && dim % (fp4 ? 32 : 16) == 0);
  const IndexerParams p{q, weights, keys, key_begin, num_keys, score, heads, score_stride, scale};
  // About four CTAs per SM in all; each CTA walks a strided set of its token's tiles.
  const int tiles = ceil_div(max_keys, kIdxTileKeys);
  const int per_token = imin(imin(tiles, imax(1, ceil_div(4 * multiprocessor_count(), T))), 65535);
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(per_token));
  if (dim == 16) {  // small test models (bf16 keys only)
    launch_indexer_scores<16, false>(p, grid, stream);
    return;
  }
  dispatch_size<32, 32, 256>(dim, [&]<int DIM>() {
    if (fp4)
      launch_indexer_scores<DIM, true>(p, grid, stream);
    else
      launch_indexer_scores<DIM, false>(p, grid, stream);
  });
}

}  // namespace

void sink_attention(const bf16* q, int T, int H, int d, const bf16* const* rows, const int* row_begin, int max_rows,
                    const float* sinks, float scale, float* out, void* workspace, cudaStream_t stream,
                    AttnProbabilities probs) {
  sink_attention_any(q, T, H, d, -1, reinterpret_cast<const void* const*>(rows), row_begin, max_rows, sinks, scale,
                     out, workspace, stream, probs);
}

void sink_attention_fp8(const bf16* q, int T, int H, int d, int rope_dims, const uint8_t* const* rows,
                        const int* row_begin, int max_rows, const float* sinks, float scale, float* out,
                        void* workspace, cudaStream_t stream, AttnProbabilities probs) {
  ATTN_REQUIRE(rope_dims >= 0);
  sink_attention_any(q, T, H, d, rope_dims, reinterpret_cast<const void* const*>(rows), row_begin, max_rows, sinks,
                     scale, out, workspace, stream, probs);
}

void indexer_scores(const bf16* q, const float* weights, int T, int heads, int dim, const bf16* const* keys,
                    const int* key_begin, const int* num_keys, int max_keys, float scale, float* score,
                    int score_stride, cudaStream_t stream) {
  indexer_scores_any(q, weights, T, heads, dim, false, reinterpret_cast<const void* const*>(keys), key_begin, num_keys,
                     max_keys, scale, score, score_stride, stream);
}

void indexer_scores_fp4(const bf16* q, const float* weights, int T, int heads, int dim, const uint8_t* const* keys,
                        const int* key_begin, const int* num_keys, int max_keys, float scale, float* score,
                        int score_stride, cudaStream_t stream) {
  indexer_scores_any(q, weights, T, heads, dim, true, reinterpret_cast<const void* const*>(keys), key_begin, num_keys,
                     max_keys, scale, score, score_stride, stream);
}

size_t topk_workspace_bytes(int /*T*/, int /*max_keys*/, int /*k*/) { return 0; }

void topk_select(const float* score, int T, int score_stride, const int* num_keys, int max_keys, int k, int* selected,
                 int* count, void* /*workspace*/, cudaStream_t stream) {
  if (T <= 0) return;
  ATTN_REQUIRE(k >= 1 && k <= kTopkMaxK && max_keys >= 0);
  // Only tokens with more keys than k stage anything; size the staging area for the largest.
  const int stage_capacity = max_keys > k ? imin(max_keys, kTopkStageCapacity) : 0;
  const size_t bytes = sizeof(int) * (kTopkBins + kTopkMaxK + kTopkScratch) + size_t{8} * stage_capacity;
  CUDA_CHECK(cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const TopkParams p{score, num_keys, selected, count, score_stride, k, stage_capacity};
  topk_kernel<<<T, kTopkThreads, bytes, stream>>>(p);
}

}  // namespace deepinfer::backend::cuda
