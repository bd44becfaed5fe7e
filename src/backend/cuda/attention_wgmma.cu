// sink_attention's 64-head CTAs on the warpgroup tensor-core instructions of Hopper (wgmma, sm_90a):
// bf16 rows, d = 512. Contract: attention.h; same CTAs, splits, partials and combine as the mma.sync
// kernel of attention.cu, and the same bits (below).
//
// Why: at prefill and large batches every CTA holds 64 heads, and the mma.sync kernel feeds its
// tensor cores through ldmatrix: per 64-row tile its 8 warps read ~512 KB of shared memory (q is
// re-read by every row group), twice what the tile's 4 M multiply-adds need from a 128 B/clk SM at
// full rate, and it runs at ~4.5 us a tile (a 4k prefill's CSA layer: 1.39 ms). wgmma reads its
// operands from shared memory once per warpgroup instruction: ~270 KB a tile.
//
// Layout (shared memory, 1024-byte aligned): every [64 x 512] bf16 operand (q: heads x d; a row
// tile: rows x d) is 8 d-blocks of [64 x 64], 8 KB apart; a block holds one 128-byte row per head /
// row with its 16-byte chunks in the 128-byte swizzle (chunk c of row r at c ^ (r % 8)), the
// layout TMA writes with CU_TENSOR_MAP_SWIZZLE_128B, written here by cp.async. P [64 heads x 64
// rows] bf16 is one such block.
//
// Two consumer warpgroups, 256 threads, one CTA per SM. Per tile:
//   S    warpgroup w: S[64 heads x 32 rows] = q K^T for the tile's rows 32 w .. 32 w + 31:
//        32 x wgmma m64n32k16 (A = q, B = the tile as K-major [rows x d]).
//   max  per head over the warpgroup's 32 rows -> shared memory; m_new = max(m_run, both).
//   P    exp2(S - m_new) as bf16 (kSplitP: + the bf16 low parts) -> shared memory.
//   l    per-head sums of P in the mma.sync kernel's fixed order (4 x 16 rows + butterfly).
//   PV   warpgroup w: O[64 heads x 256 d] (d 256 w ..) = O * alpha + P V: 4 x wgmma m64n256k16
//        (A = P, B = the same tile as MN-major [rows x d]: imm-trans-b, LBO = the 8 KB between
//        d-blocks, SBO = the 1 KB between 8-row groups, +2 KB a k16 step).
//
// Same bits as sink_attention_kernel<512, 4, false, kSplitP>: an S element is one chain of 32 k16
// steps over d in increasing order from zero, as there; a wgmma k16 step and an mma.sync m16n8k16
// step take the same 16 products and the same fp32 accumulator (gemm_wgmma.h; measured, 0
// differing bits); the tile max is exact whatever the grouping; P, its low part, l, alpha and the
// O rescale are the same expressions on the same values; O accumulates the same k16 steps over the
// tile's rows in the same order (and kSplitP's second pass after the first); the epilogue is the
// same. The batch-invariance tests compare T = 200 calls (this kernel) with T = 1 and T = 37 calls
// (the mma.sync kernel, 16-head CTAs) bitwise.
//
// Proxies: q and the rows arrive by cp.async and P by st.shared (generic proxy); wgmma reads shared
// memory through the async proxy, so every thread fences (fence.proxy.async) its own writes before
// the barrier that publishes them. A buffer is overwritten only after the wgmma groups reading it
// have completed (wgmma.wait_group 0 before the next tile's first barrier).
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tma_common.cuh"

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace deepinfer::backend::cuda::attention_common {
namespace {

using tma_common::fence_registers;
using tma_common::smem_descriptor;
using tma_common::wgmma_commit;
using tma_common::wgmma_fence;
using tma_common::wgmma_wait;

constexpr int kD = 512;
constexpr int kHeads = 64;
constexpr int kDBlocks = kD / 64;       // 64-wide d blocks: one 128-byte swizzle row per head / row
constexpr int kBlockBytes = 64 * 128;   // one d-block of 64 heads / rows
constexpr int kOperandBytes = kDBlocks * kBlockBytes;  // q, or one row tile: 64 KB
constexpr int kPBytes = kHeads * 128;   // P: [64 heads][64 rows] bf16, one block
constexpr int kChunksPerRow = kD / 8;   // 16-byte chunks of a 512-wide bf16 row
constexpr int kWarpgroupThreads = 128;
static_assert(kTileRows == 64 && kAttnThreads == 2 * kWarpgroupThreads, "two warpgroups, 64-row tiles");

template <bool kSplitP>
struct WgmmaLayout {
  static constexpr size_t kQ = 0;
  static constexpr size_t kRows = kQ + kOperandBytes;               // [2] row tiles
  static constexpr size_t kP = kRows + size_t{2} * kOperandBytes;
  static constexpr size_t kPLo = kP + kPBytes;                      // kSplitP: P - bf16(P)
  static constexpr size_t kRedMax = kPLo + (kSplitP ? kPBytes : 0);  // [2 warpgroups][64 heads] fp32
  static constexpr size_t kStats = kRedMax + size_t{2} * kHeads * 4;  // m, l, alpha, final scale: [4][64]
  static constexpr size_t kPtr = kStats + size_t{4} * kHeads * 4;      // [2][64] row pointers
  static constexpr size_t kBytes = kPtr + size_t{2} * kTileRows * sizeof(void*);
  static constexpr size_t kAlloc = kBytes + 1024;  // the dynamic base is rounded up to 1024 bytes
  static_assert(kAlloc <= 227 * 1024, "shared memory per block on sm_90");
  static_assert(kP % 1024 == 0 && kPLo % 1024 == 0, "wgmma operands on 1024-byte swizzle atoms");
};

// Byte offset of 16-byte chunk c (0..7) of row r inside a 128-byte-swizzled d-block.
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// Descriptor of the row tile as the MN-major (d-contiguous) B operand of O += P V: LBO = the
// distance between 64-wide d-blocks, SBO = between groups of 8 rows, 128-byte swizzle.
__device__ __forceinline__ uint64_t mn_major_descriptor(uint32_t addr) {
  uint64_t desc = static_cast<uint64_t>((addr & 0x3FFFFu) >> 4);
  desc |= static_cast<uint64_t>(kBlockBytes >> 4) << 16;
  desc |= static_cast<uint64_t>(1024u >> 4) << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d[64 x 32] += A[64 x 16] B[32 x 16]^T, both K-major. d[4 j + 2 h + e]: (row 16 warp + lane / 4 + 8 h,
// column 8 j + 2 (lane % 4) + e).
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "n"(1));
}

template <bool kSplitP>
__global__ void __launch_bounds__(kAttnThreads, 1) sink_attention_wgmma_kernel(const SinkAttentionParams p) {
  prefetch_l2(p.sinks, static_cast<size_t>(p.H) * sizeof(float));
  pdl_prologue();
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)p;
  __trap();  // built for a device without wgmma: the host never selects this kernel there
#else
  using L = WgmmaLayout<kSplitP>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw_base = shared_address(smem_raw);
  const uint32_t base = (raw_base + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw_base);
  unsigned char* const q_s = smem + L::kQ;
  unsigned char* const rows_s = smem + L::kRows;
  unsigned char* const p_s = smem + L::kP;
  [[maybe_unused]] unsigned char* const plo_s = smem + L::kPLo;
  float* const red_max = reinterpret_cast<float*>(smem + L::kRedMax);  // [2][kHeads]
  float* const m_run = reinterpret_cast<float*>(smem + L::kStats);     // [kHeads] running max (log2)
  float* const l_run = m_run + kHeads;                                 // [kHeads] running sum of P
  float* const alpha_s = l_run + kHeads;                               // [kHeads] this tile's O rescale
  float* const final_scale = alpha_s + kHeads;                         // [kHeads] 1 / denominator
  const void** const ptr_s = reinterpret_cast<const void**>(smem + L::kPtr);  // [2][kTileRows]

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32;
  const int wg = tid / kWarpgroupThreads;       // warpgroup: S rows 32 wg.., O columns 256 wg..
  const int wq = (tid / 32) % 4;                // warp inside the warpgroup
  const int head_lo = 16 * wq + lane / 4;       // this thread's fragment heads: head_lo, head_lo + 8
  // Prologue: this CTA's token, heads and rows, statistics, pointers of tiles 0 and 1 (sink_cta_begin),
  // q (zero rows past the last head).
  SinkCta cta;
  if (!sink_cta_begin<kHeads, kD>(p, cta, m_run, l_run, ptr_s)) return;
  const int token = cta.token, head0 = cta.head0, valid_heads = cta.valid_heads;
  const int chunk_rows = cta.chunk_rows, num_tiles = cta.num_tiles;
  const void* const* chunk_ptrs = cta.chunk_ptrs;
  for (int c = tid; c < kHeads * kChunksPerRow; c += kAttnThreads) {
    const int h = c / kChunksPerRow, chunk = c % kChunksPerRow;
    unsigned char* dst = q_s + (chunk / 8) * kBlockBytes + swizzled(h, chunk % 8);
    if (h < valid_heads)
      cp_async_16(dst, p.q + (static_cast<size_t>(token) * p.H + head0 + h) * kD + chunk * 8);
    else
      store_zero_16(dst);
  }
  __syncthreads();  // ptr_s

  // Tile t lives in buffer t % 2 and its pointers in ptr_s[t % 2]. Rows past the split's end are
  // zero-filled: P is 0 there, and 0 * (stale shared memory) could be NaN.
  auto issue_tile = [&](int t) {
    const void* const* src = ptr_s + (t % 2) * kTileRows;
    const int tile_rows = imin(kTileRows, chunk_rows - t * kTileRows);
    unsigned char* const dst = rows_s + (t % 2) * kOperandBytes;
#pragma unroll 4
    for (int c = tid; c < kTileRows * kChunksPerRow; c += kAttnThreads) {
      const int r = c / kChunksPerRow, chunk = c % kChunksPerRow;
      unsigned char* at = dst + (chunk / 8) * kBlockBytes + swizzled(r, chunk % 8);
      if (r < tile_rows)
        cp_async_16(at, static_cast<const bf16*>(src[r]) + chunk * 8);
      else
        store_zero_16(at);
    }
  };
  if (num_tiles > 0) issue_tile(0);
  cp_async_commit();

  float o[128];  // O [64 heads x 256 d] of this warpgroup's columns (m64n256 fragment)
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;

  const void* prefetch_ptr = nullptr;
  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait_all();
    fence_proxy_async();  // this thread's cp.async / zero rows of tile t (and q) -> the async proxy
    __syncthreads();      // (A) tile t and q landed for everyone; buffer (t+1)%2 and ptr_s[(t+1)%2] free/ready
    if (t + 1 < num_tiles) issue_tile(t + 1);
    cp_async_commit();
    if (tid < kTileRows) {  // pointers of tile t+2, stored after this tile's compute (latency hidden)
      const int r = (t + 2) * kTileRows + tid;
      prefetch_ptr = r < chunk_rows ? chunk_ptrs[r] : nullptr;
    }
    const uint32_t tile = base + static_cast<uint32_t>(L::kRows + (t % 2) * kOperandBytes);
    const int tile_rows = imin(kTileRows, chunk_rows - t * kTileRows);

    // ---- S = q K^T: this warpgroup's 32 rows, all 64 heads, over all of d.
    float s[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t block = static_cast<uint32_t>((ks / 4) * kBlockBytes);
      const uint64_t desc_q = smem_descriptor(base + static_cast<uint32_t>(L::kQ) + block) + 2 * (ks % 4);
      const uint64_t desc_k = smem_descriptor(tile + block + static_cast<uint32_t>(wg * 32 * 128)) + 2 * (ks % 4);
      wgmma_m64n32k16(s, desc_q, desc_k);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(s);

    // ---- Scale into log2 units, mask rows past the tile's end, per-warpgroup max per head.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int row = 32 * wg + 8 * j + 2 * (lane % 4) + e;
          float& v = s[4 * j + 2 * h + e];
          v = row < tile_rows ? __fmul_rn(v, p.score_scale) : -INFINITY;
          mx = fmaxf(mx, v);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (lane % 4 == 0) red_max[wg * kHeads + head_lo + 8 * h] = mx;
    }
    __syncthreads();  // (B) red_max complete

    // ---- P = exp2(S - m_new) as bf16 into shared memory (swizzled [head][row]). m_new = max(m_run,
    //      tile max) is exact, so every thread that needs it gets the same value.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = head_lo + 8 * h;
      float m_new = m_run[head];
#pragma unroll
      for (int g = 0; g < 2; ++g) m_new = fmaxf(m_new, red_max[g * kHeads + head]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p0 = exp2f(s[4 * j + 2 * h] - m_new);
        const float p1 = exp2f(s[4 * j + 2 * h + 1] - m_new);
        const int row = 32 * wg + 8 * j + 2 * (lane % 4);
        const uint32_t at = swizzled(head, row / 8) + static_cast<uint32_t>((row % 8) * 2);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(p0, p1);
        *reinterpret_cast<__nv_bfloat162*>(p_s + at) = hi;
        if constexpr (kSplitP)  // the rounding error, itself in bf16: hi + lo carries ~16 bits of P
          *reinterpret_cast<__nv_bfloat162*>(plo_s + at) =
              __floats2bfloat162_rn(__fsub_rn(p0, __low2float(hi)), __fsub_rn(p1, __high2float(hi)));
      }
    }
    fence_proxy_async();  // P -> the async proxy (the P V wgmma reads it)
    __syncthreads();      // (C) P complete

    // ---- Per-head statistics, 4 threads per head: each sums 16 bf16 P values in row order, then a
    //      butterfly: the mma.sync kernel's order exactly.
    {
      const int h = tid / 4, quarter = tid % 4;  // 256 threads = 64 heads x 4
      float pv[16], low[16];  // rows 16 quarter .. + 15: the head's swizzled chunks 2 quarter and 2 quarter + 1
      bf16x8_to_float(*reinterpret_cast<const uint4*>(p_s + swizzled(h, 2 * quarter)), pv);
      bf16x8_to_float(*reinterpret_cast<const uint4*>(p_s + swizzled(h, 2 * quarter + 1)), pv + 8);
      if constexpr (kSplitP) {
        bf16x8_to_float(*reinterpret_cast<const uint4*>(plo_s + swizzled(h, 2 * quarter)), low);
        bf16x8_to_float(*reinterpret_cast<const uint4*>(plo_s + swizzled(h, 2 * quarter + 1)), low + 8);
      }
      fold_tile_head_stats<kHeads, 2>(pv, kSplitP ? low : nullptr, h, quarter, red_max, m_run, l_run, alpha_s);
    }
    __syncthreads();  // (D) alpha ready

    // ---- O = O * alpha + P V for this warpgroup's 256 columns (all 64 heads).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float alpha = alpha_s[head_lo + 8 * h];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j + 2 * h] *= alpha;
        o[4 * j + 2 * h + 1] *= alpha;
      }
    }
    wgmma_fence();
    const uint32_t v_cols = tile + static_cast<uint32_t>(wg * 4 * kBlockBytes);  // d-blocks 4 wg .. 4 wg + 3
    // kSplitP: a second pass over the tile with the low parts, after the first.
#pragma unroll
    for (int pass = 0; pass < (kSplitP ? 2 : 1); ++pass) {
      const uint32_t p_src = base + static_cast<uint32_t>(pass == 0 ? L::kP : L::kPLo);
#pragma unroll
      for (int ks = 0; ks < kTileRows / 16; ++ks)
        tma_common::wgmma_m64n256k16<true>(o, smem_descriptor(p_src) + 2 * ks,
                                           mn_major_descriptor(v_cols + static_cast<uint32_t>(ks * 16 * 128)));
    }
    wgmma_commit();
    wgmma_wait<0>();  // the tile buffer and P are read: they may be overwritten after (A)
    fence_registers(o);
    if (tid < kTileRows) ptr_s[(t % 2) * kTileRows + tid] = prefetch_ptr;  // tile t+2's pointers
  }
  cp_async_wait_all();  // a token without rows never waited for its q copy

  // ---- Epilogue (the mma.sync kernel's): the final scale (one split) or this split's (m, l), then O.
  sink_cta_epilogue_stats(p, cta, m_run, l_run, final_scale);
  __syncthreads();
  const bool single = cta.single();
  float* const dst_base = cta.out_base(p, kD);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = head_lo + 8 * h;
    if (head >= valid_heads) continue;
    const float f = single ? final_scale[head] : 1.0f;
    float* dst = dst_base + static_cast<size_t>(head0 + head) * kD + wg * (kD / 2) + (lane % 4) * 2;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[4 * j + 2 * h] * f, o[4 * j + 2 * h + 1] * f);
  }
#endif
}

template <bool kSplitP>
void launch(const SinkAttentionParams& p, int grid, cudaStream_t stream) {
  const auto kernel = sink_attention_wgmma_kernel<kSplitP>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(WgmmaLayout<kSplitP>::kAlloc)));
  kernel<<<grid, kAttnThreads, WgmmaLayout<kSplitP>::kAlloc, stream>>>(p);
}

}  // namespace

void launch_sink_attention_wgmma(const SinkAttentionParams& p, int grid, bool split_p, cudaStream_t stream) {
  if (split_p)
    launch<true>(p, grid, stream);
  else
    launch<false>(p, grid, stream);
}

}  // namespace deepinfer::backend::cuda::attention_common
