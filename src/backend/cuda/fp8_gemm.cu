// Block-scaled FP8 / FP4-weight GEMMs (fp8_gemm.h) on mma.sync m16n8k32 e4m3 tensor cores, with the
// structure of gemm.cu: cp.async multi-stage pipelines, swizzled 16-byte shared-memory vectors,
// ldmatrix, a K "slice plan" from (N, K) alone and a cluster DSMEM fold in rank order.
//
// Why y[m, n] never depends on M, m, other rows or the tile configuration:
//  * K is cut into 32-wide chunks (one mma k-step each; K % 32 == 0), 4 chunks per 128-block. The
//    slice plan (plan_slices, from N and K only) groups the chunks into S slices of whole 256-k
//    pairs of blocks, so every k-tile (128 or 256 k) of every configuration lies in one slice and
//    block boundaries coincide with k-tile-relative chunk indices c % 4 == 0.
//  * Within a slice, one thread's accumulator element runs exactly: acc = 0; per block (FP8 weight)
//    or chunk (FP4 weight) in increasing k: P = 0, P = mma(A, B, P) per chunk in increasing k,
//    acc = __fadd_rn(acc, __fmul_rn(P, __fmul_rn(sa, sw))). An mma output element depends only on
//    its own A row, B column and accumulator input; scales are per (row, block) and per (column
//    block / column, block / chunk). Every configuration executes this sequence.
//  * Slices: S CTAs of a cluster each run one slice; the partials meet through distributed shared
//    memory, summed from 0 in rank order by __fadd_rn (every configuration, every M). S == 1: acc.
//  * Rows past M / a group's end and columns past N are zero-filled and never stored.
//  * FP4 codes are expanded to e4m3 bytes exactly (every e2m1 value is an e4m3 value) in registers.
//  * The decode alternative fp8_decode_kernel computes the same terms in parallel warps and folds
//    them in the same order (see there); tests/cuda/fp8_gemm_test.cc checks every configuration
//    against the automatic one bit for bit.
//
// Performance note (H200, measured): ptxas lowers mma.sync e4m3 on sm_90 to F2FP.F16.E4M3.UNPACK_B
// conversions + HMMA.16816.F32 (no native FP8 mma.sync on Hopper; native FP8 is wgmma only), which
// caps large-M throughput near 200 TFLOP/s; bits are unaffected (both conversions are exact).
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/fp8_round.cuh"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/pdl.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace deepinfer::backend::cuda::fp8 {
namespace {

namespace cg = cooperative_groups;
using namespace gemm_common;  // cp.async/ldmatrix wrappers, stores, the grouped tile scan, device queries

constexpr int kChunkK = 32;     // k per mma.m16n8k32
constexpr int kBlockK = 128;    // activation / FP8-weight scale block
constexpr int kSliceUnit = 16;  // slice_chunks is a multiple of 16 chunks (512 k, the largest BK)

[[noreturn]] void fail_at(const char* file, int line, const char* what, long long value) {
  std::fprintf(stderr, "%s:%d: deepinfer fp8 gemm: %s (%lld)\n", file, line, what, value);
  std::abort();
}
#define FP8_REQUIRE(cond, what, value) \
  do {                                 \
    if (!(cond)) fail_at(__FILE__, __LINE__, what, static_cast<long long>(value)); \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Slice plan: (N, K) only.
struct SlicePlan {
  int num_chunks;    // K / 32
  int slice_chunks;  // multiple of 8
  int num_slices;    // 1..8
};

SlicePlan plan_slices(int N, int K) {
  const int num_chunks = K / kChunkK;
  const int num_blocks = (num_chunks + 3) / 4;
  // Decode runs one CTA per (32-column tile, slice): aim for >= 512 CTAs, with >= 4 blocks (512 k)
  // per slice. N = 4096, K = 4096 -> 4 slices; N = 2048, K = 4096 -> 8; N = 32768 -> 1.
  const long long column_tiles = (static_cast<long long>(N) + 31) / 32;
  int target = 1;
  while (target < 8 && column_tiles * target < 512) target *= 2;
  target = std::max(1, std::min(target, num_blocks / 4));
  int per_slice = (num_chunks + target - 1) / target;
  per_slice = std::max(kSliceUnit, (per_slice + kSliceUnit - 1) / kSliceUnit * kSliceUnit);
  const int num_slices = std::max(1, (num_chunks + per_slice - 1) / per_slice);
  return {num_chunks, per_slice, num_slices};
}

// ---------------------------------------------------------------------------------------------
// PTX wrappers (the common ones are in gemm_common.cuh).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void st_shared_zero16(uint32_t dst) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0) : "memory");
}

// d = a(16x32, row) * b(32x8, col) + c, e4m3 inputs, fp32 accumulate. In 32-bit words the fragment
// layout equals m16n8k16 bf16's (a word = 4 consecutive k), so the ldmatrix addressing is gemm.cu's
// with a 16-byte vector holding 16 k instead of 8.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(  // no side effects: the compiler may schedule it freely
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four e2m1 codes (16 bits, code i in bits 4i..4i+3: sign bit 3, magnitude bits 0-2) -> four e4m3
// bytes (byte i). Magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} are e4m3 {0x00, 0x30, 0x38, 0x3C, 0x40,
// 0x44, 0x48, 0x4C}; the sign moves to bit 7 of its byte (negative zero -> 0x80).
__device__ __forceinline__ uint32_t e2m1x4_to_e4m3x4(uint32_t x) {
  const uint32_t magnitude = __byte_perm(0x3C383000u, 0x4C484440u, x & 0x7777u);
  const uint32_t sign = ((x & 0x8u) << 4) | ((x & 0x80u) << 8) | ((x & 0x800u) << 12) | ((x & 0x8000u) << 16);
  return magnitude | sign;
}

// Shared-memory tiles: rows of 16-byte vectors, vector v of row r at slot v ^ swizzle(r).
template <int kVecsPerRow>
__device__ __forceinline__ uint32_t tile_offset(int row, int vec) {
  static_assert(kVecsPerRow == 4 || kVecsPerRow == 8 || kVecsPerRow == 16 || kVecsPerRow == 32,
                "row of 4, 8, 16 or 32 vectors");
  const int swizzle = kVecsPerRow >= 8 ? (row & 7) : ((row >> 1) & 3);
  return static_cast<uint32_t>((row * kVecsPerRow + (vec ^ swizzle)) * 16);
}

// ---------------------------------------------------------------------------------------------
template <int BM_, int BN_, int BK_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kWarpM = BM / kWarpsM, kWarpN = BN / kWarpsN;
  static constexpr int kMmaM = kWarpM / 16, kMmaN = kWarpN / 8;
  static constexpr int kChunks = BK / kChunkK;  // per k-tile
  static constexpr int kBlocks = BK / kBlockK;  // per k-tile
  static constexpr int kVecsA = BK / 16;        // 16-byte vectors per A row (and FP8 W row)
  static constexpr int kPartialStride = BN + 8;
  static_assert(BK % kBlockK == 0 && kSliceUnit % kChunks == 0, "k-tiles are whole blocks inside one slice");
  static_assert(kBlockK % BN == 0, "a column tile lies inside one 128-row FP8 weight block");
  static_assert(kWarpM % 16 == 0 && kWarpN % 8 == 0 && (kMmaN == 1 || kMmaN % 2 == 0), "warp tile shape");
  static_assert((BM * kVecsA) % kThreads == 0 && (BN * kVecsA) % kThreads == 0 &&
                    (BN * kVecsA / 2) % kThreads == 0,
                "even tile loads");
};

// Shared-memory layout of one stage for a config and weight format.
template <class Cfg, bool kFp4>
struct Layout {
  static constexpr int kVecsB = kFp4 ? Cfg::BK / 32 : Cfg::BK / 16;
  static constexpr int kABytes = Cfg::BM * Cfg::BK;
  static constexpr int kBBytes = Cfg::BN * kVecsB * 16;
  static constexpr int kSaFloats = Cfg::BM * Cfg::kBlocks;
  static constexpr int kSwFloats = kFp4 ? Cfg::BN * Cfg::kChunks : 4;  // FP8: kBlocks used, padded to 16 bytes
  static constexpr int kBOffset = kABytes;
  static constexpr int kSaOffset = kBOffset + kBBytes;
  static constexpr int kSwOffset = kSaOffset + kSaFloats * 4;
  static constexpr int kStageBytes = kSwOffset + kSwFloats * 4;
  static constexpr int kPartialBytes = Cfg::BM * Cfg::kPartialStride * 4;
  static constexpr int kSmemBytes = std::max(Cfg::kStages * kStageBytes, kPartialBytes);
  static_assert(kSaOffset % 16 == 0 && kSwOffset % 16 == 0 && kStageBytes % 16 == 0, "16-byte aligned regions");
  static_assert(Cfg::kBlocks <= 4, "FP8 weight scales per stage");
};

// Decode (M <= 16): 32 columns per CTA, 256-k tiles, 4 CTAs per SM.
using CfgDecode = TileConfig<16, 32, 256, 1, 4, 4, 4>;
// Decode alternative: 128-k tiles, 6 stages.
using CfgDecodeK128 = TileConfig<16, 32, 128, 1, 4, 6, 4>;
// Small / medium M.
using CfgMedium = TileConfig<64, 64, 128, 2, 2, 4, 2>;
// Large M.
using CfgLarge = TileConfig<128, 128, 128, 2, 4, 4, 1>;

enum ConfigId { kDecode, kDecodeK128, kMedium, kLarge, kDecodeSplit, kNumConfigs };
constexpr const char* kConfigNames[kNumConfigs] = {"m16n32k256", "m16n32k128", "m64n64k128", "m128n128k128",
                                                   "m16n32k512_warpsplit"};

struct Params {
  const uint8_t* a;   // [rows, K] e4m3
  const float* sa;    // [rows, KB]
  const uint8_t* w;   // FP8 [N, K] / FP4 [N, K / 2] (dense)
  const float* sw;    // FP8 [ceil(N / 128), KB] / FP4 [N, K / 32] (dense)
  const uint8_t* const* group_w;
  const float* const* group_sw;
  const int* row_offsets;
  void* y;
  int M, N, K, KB, KC;
  int num_groups;
  int num_chunks, slice_chunks, num_slices;
  int m_tiles, n_tiles;
};

// k-tile t of a CTA's slice -> the stage at shared address `st`: A rows, W rows and their scales, by
// cp.async. Out-of-range entries are zero-filled; rows past the end stay zero once every stage has
// been filled (t >= kStages), so they are not rewritten. Used by the tile kernels and the decode
// kernel alike (C: a TileConfig or DecodeCfg, L: its stage layout).
template <class C, class L, bool kFp4>
__device__ __forceinline__ void load_stage(const Params& p, const uint8_t* w, const float* sw, int tid, int t,
                                           uint32_t st, int chunk_begin, int row_begin, int row_end, int n_begin) {
  constexpr int BM = C::BM, BN = C::BN, kChunks = C::kChunks, kBlocks = C::kBlocks, kVecsA = C::kVecsA;
  constexpr int kVecsB = L::kVecsB, kStages = C::kStages, kThreads = C::kThreads;
  const int N = p.N, K = p.K, KB = p.KB, KC = p.KC;
  const uint8_t* a = p.a;
  const float* sa = p.sa;
  const int c0 = chunk_begin + t * kChunks;  // global chunk index of the tile's first chunk
  const int k0 = c0 * kChunkK, kb0 = c0 / 4;
#pragma unroll
  for (int j = 0; j < BM * kVecsA / kThreads; ++j) {
    const int i = tid + j * kThreads;
    const int r = i / kVecsA, v = i % kVecsA, m = row_begin + r, k = k0 + v * 16;
    if (m >= row_end) {  // rows past the end: zeros by plain stores, once per stage (no memory request)
      if (t < kStages) st_shared_zero16(st + tile_offset<kVecsA>(r, v));
      continue;
    }
    const bool ok = k < K;
    cp_async_16(st + tile_offset<kVecsA>(r, v), ok ? a + static_cast<size_t>(m) * K + k : a, ok ? 16 : 0);
  }
#pragma unroll
  for (int j = 0; j < BN * kVecsB / kThreads; ++j) {
    const int i = tid + j * kThreads;
    const int r = i / kVecsB, v = i % kVecsB, n = n_begin + r;
    if (n >= N && t >= kStages) continue;
    if constexpr (kFp4) {
      const int k = k0 + v * 32;  // a vector holds 32 packed codes
      const bool ok = n < N && k < K;
      cp_async_16(st + L::kBOffset + tile_offset<kVecsB>(r, v),
                  ok ? w + static_cast<size_t>(n) * (K / 2) + k / 2 : w, ok ? 16 : 0);
    } else {
      const int k = k0 + v * 16;
      const bool ok = n < N && k < K;
      cp_async_16(st + L::kBOffset + tile_offset<kVecsB>(r, v), ok ? w + static_cast<size_t>(n) * K + k : w,
                  ok ? 16 : 0);
    }
  }
  for (int i = tid; i < BM * kBlocks; i += kThreads) {
    const int r = i / kBlocks, b = i % kBlocks, m = row_begin + r, kb = kb0 + b;
    if (m >= row_end && t >= kStages) continue;
    const bool ok = m < row_end && kb < KB;
    cp_async_4(st + L::kSaOffset + i * 4, ok ? sa + static_cast<size_t>(m) * KB + kb : sa, ok ? 4 : 0);
  }
  if constexpr (kFp4) {
    const auto load_sw = [&](int i) {  // one scale per weight row and chunk
      const int r = i / kChunks, c = i % kChunks, n = n_begin + r, kc = c0 + c;
      const bool ok = n < N && kc < KC;
      cp_async_4(st + L::kSwOffset + i * 4, ok ? sw + static_cast<size_t>(n) * KC + kc : sw, ok ? 4 : 0);
    };
    static_assert((BN * kChunks) % kThreads == 0, "even weight-scale loads");
#pragma unroll
    for (int j = 0; j < BN * kChunks / kThreads; ++j) load_sw(tid + j * kThreads);
  } else {
    if (tid < kBlocks) {  // one scale per 128-row weight block (a column tile lies inside one)
      const int kb = kb0 + tid;
      const bool ok = kb < KB;
      cp_async_4(st + L::kSwOffset + tid * 4, ok ? sw + static_cast<size_t>(n_begin / kBlockK) * KB + kb : sw,
                 ok ? 4 : 0);
    }
  }
}

template <class Cfg, bool kFp4, class OutT, bool kGrouped>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) fp8_gemm_kernel(const Params p) {
  pdl_prologue();
  using L = Layout<Cfg, kFp4>;
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int BM = Cfg::BM, BN = Cfg::BN, kChunks = Cfg::kChunks, kBlocks = Cfg::kBlocks;
  constexpr int kVecsA = Cfg::kVecsA, kVecsB = L::kVecsB;
  constexpr int kStages = Cfg::kStages, kThreads = Cfg::kThreads, kMmaM = Cfg::kMmaM, kMmaN = Cfg::kMmaN;

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int group_id = lane >> 2, tig = lane & 3;
  const int warp_m0 = (warp / Cfg::kWarpsN) * Cfg::kWarpM;
  const int warp_n0 = (warp % Cfg::kWarpsN) * Cfg::kWarpN;

  int tile_index = static_cast<int>(blockIdx.x);
  int slice = 0;
  if (p.num_slices > 1) {
    slice = static_cast<int>(cg::this_cluster().block_rank());
    tile_index /= p.num_slices;
  }
  int n_tile, row_begin, row_end;
  const uint8_t* w;
  const float* sw;
  if constexpr (kGrouped) {
    int group;
    if (!locate_group_rows<kThreads>(p.row_offsets, p.num_groups, BM, static_cast<int>(blockIdx.y), group, row_begin,
                                     row_end))
      return;  // the whole cluster shares blockIdx.y, so it leaves together
    n_tile = tile_index;
    w = p.group_w[group];
    sw = p.group_sw[group];
  } else {
    const int m_tile = raster_tile(tile_index, p.m_tiles, p.n_tiles, n_tile);
    row_begin = m_tile * BM;
    row_end = min(p.M, row_begin + BM);
    w = p.w;
    sw = p.sw;
  }
  const int n_begin = n_tile * BN;
  const int N = p.N;

  const int chunk_begin = slice * p.slice_chunks;
  const int chunk_end = min(chunk_begin + p.slice_chunks, p.num_chunks);
  const int num_k_tiles = (chunk_end - chunk_begin + kChunks - 1) / kChunks;

  const uint32_t smem_base = shared_address(smem);

  auto load_tile = [&](int t, int stage) {
    load_stage<Cfg, L, kFp4>(p, w, sw, tid, t, smem_base + static_cast<uint32_t>(stage * L::kStageBytes), chunk_begin,
                           row_begin, row_end, n_begin);
  };

  float acc[kMmaM][kMmaN][4];  // this slice's running sum of scaled block (chunk) products
  float prod[kMmaM][kMmaN][4];  // the current block's (chunk's) mma accumulator
#pragma unroll
  for (int i = 0; i < kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < kMmaN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][j][e] = 0.0f;
        prod[i][j][e] = 0.0f;
      }

  // acc += prod * (sa * sw) for the block b of the tile (FP8) or the chunk c (FP4); prod = 0.
  auto promote = [&](const unsigned char* st, int c) {
    const float* sa_s = reinterpret_cast<const float*>(st + L::kSaOffset);
    const float* sw_s = reinterpret_cast<const float*>(st + L::kSwOffset);
    const int b = c >> 2;
    if constexpr (kFp4) {
      float wscale[kMmaN][2];
#pragma unroll
      for (int j = 0; j < kMmaN; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) wscale[j][e] = sw_s[(warp_n0 + j * 8 + 2 * tig + e) * kChunks + c];
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float as = sa_s[(warp_m0 + i * 16 + group_id + 8 * h) * kBlocks + b];
#pragma unroll
          for (int j = 0; j < kMmaN; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float s = __fmul_rn(as, wscale[j][e]);
              acc[i][j][2 * h + e] = __fadd_rn(acc[i][j][2 * h + e], __fmul_rn(prod[i][j][2 * h + e], s));
              prod[i][j][2 * h + e] = 0.0f;
            }
        }
    } else {
      const float ws = sw_s[b];
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float s = __fmul_rn(sa_s[(warp_m0 + i * 16 + group_id + 8 * h) * kBlocks + b], ws);
#pragma unroll
          for (int j = 0; j < kMmaN; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              acc[i][j][2 * h + e] = __fadd_rn(acc[i][j][2 * h + e], __fmul_rn(prod[i][j][2 * h + e], s));
              prod[i][j][2 * h + e] = 0.0f;
            }
        }
    }
  };

  // The first `valid` chunks of the k-tile in `stage`, in increasing k; a block (FP8) ends at
  // c % 4 == 3 or at the tile's last valid chunk (the end of K or of the slice).
  auto mma_tile = [&](int stage, int valid) {
    const uint32_t st = smem_base + static_cast<uint32_t>(stage * L::kStageBytes);
    const unsigned char* st_ptr = smem + stage * L::kStageBytes;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (c < valid) {
        uint32_t af[kMmaM][4];
        uint32_t bf[kMmaN][2];
#pragma unroll
        for (int i = 0; i < kMmaM; ++i)
          ldmatrix_x4(af[i], st + tile_offset<kVecsA>(warp_m0 + i * 16 + (lane & 15), 2 * c + (lane >> 4)));
        if constexpr (kFp4) {
          // b0: k = 4 tig .. 4 tig + 3 of column group_id = packed bytes 2 tig, 2 tig + 1 of the chunk's
          // vector; b1: k + 16 = bytes 8 + 2 tig.
#pragma unroll
          for (int j = 0; j < kMmaN; ++j) {
            const unsigned char* v =
                st_ptr + L::kBOffset + tile_offset<kVecsB>(warp_n0 + j * 8 + group_id, c);
            const uint32_t lo = *reinterpret_cast<const uint16_t*>(v + 2 * tig);
            const uint32_t hi = *reinterpret_cast<const uint16_t*>(v + 8 + 2 * tig);
            bf[j][0] = e2m1x4_to_e4m3x4(lo);
            bf[j][1] = e2m1x4_to_e4m3x4(hi);
          }
        } else if constexpr (kMmaN == 1) {
          ldmatrix_x2(bf[0][0], bf[0][1],
                      st + L::kBOffset + tile_offset<kVecsB>(warp_n0 + (lane & 7), 2 * c + ((lane >> 3) & 1)));
        } else {
#pragma unroll
          for (int j = 0; j < kMmaN; j += 2) {
            uint32_t r[4];
            ldmatrix_x4(r, st + L::kBOffset +
                               tile_offset<kVecsB>(warp_n0 + j * 8 + ((lane >> 4) << 3) + (lane & 7),
                                                   2 * c + ((lane >> 3) & 1)));
            bf[j][0] = r[0];
            bf[j][1] = r[1];
            bf[j + 1][0] = r[2];
            bf[j + 1][1] = r[3];
          }
        }
#pragma unroll
        for (int i = 0; i < kMmaM; ++i)
#pragma unroll
          for (int j = 0; j < kMmaN; ++j) mma_e4m3(prod[i][j], af[i], bf[j][0], bf[j][1]);
        if constexpr (kFp4) {
          promote(st_ptr, c);
        } else {
          if ((c & 3) == 3 || c == valid - 1) promote(st_ptr, c);
        }
      }
    }
  };

  // --- Main loop: kStages-deep cp.async pipeline, one barrier per k-tile.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k_tiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int t = 0; t < num_k_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (t + kStages - 1 < num_k_tiles) load_tile(t + kStages - 1, (t + kStages - 1) % kStages);
    cp_async_commit();
    const int valid = chunk_end - (chunk_begin + t * kChunks);
    if (valid >= kChunks)
      mma_tile(t % kStages, kChunks);
    else
      mma_tile(t % kStages, valid);
  }

  OutT* y = static_cast<OutT*>(p.y);

  if (p.num_slices > 1) {
    // This slice's partial -> own shared memory [BM][kPartialStride] (pipeline buffers reused).
    cp_async_wait<0>();
    __syncthreads();
    float* partial = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < kMmaN; ++j) {
        const int r = warp_m0 + i * 16 + group_id, c = warp_n0 + j * 8 + 2 * tig;
        *reinterpret_cast<float2*>(partial + r * Cfg::kPartialStride + c) = make_float2(acc[i][j][0], acc[i][j][1]);
        *reinterpret_cast<float2*>(partial + (r + 8) * Cfg::kPartialStride + c) =
            make_float2(acc[i][j][2], acc[i][j][3]);
      }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    sum_cluster_partials<BM, BN, Cfg::kPartialStride, kThreads, OutT>(cluster, partial, p.num_slices, slice, row_begin,
                                                                      row_end, n_begin, N, TileOut<OutT>{y, N, 0, 0});
    cluster.sync();  // keep this CTA's shared memory alive until every rank has read it
    return;
  }

  // Direct epilogue: c0, c1 at (row group_id, cols 2 tig, 2 tig + 1), c2, c3 at row group_id + 8.
#pragma unroll
  for (int i = 0; i < kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < kMmaN; ++j) {
      const int n = n_begin + warp_n0 + j * 8 + 2 * tig;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = row_begin + warp_m0 + i * 16 + group_id + 8 * h;
        if (m >= row_end || n >= N) continue;
        store_two(y + static_cast<size_t>(m) * N + n, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Decode kernel (M <= 16 per tile): the same operation sequence with the k-tile's blocks spread over
// the warps. A CTA owns 16 rows x 32 columns; a k-tile is 512 k = 4 blocks; warp w computes block w of
// the tile for all 32 columns (4 independent mma chains), scales its products and writes the terms
// t = P * (sa * sw) (one per block, FP8 weight; one per chunk, FP4 weight) to shared memory; then the
// threads fold the terms of the tile into their running sums in increasing k: acc = acc + t. That is
// exactly the fold of the other configurations (acc is the same chain of __fadd_rn over the same
// terms in the same order), only the terms are computed in parallel, so the dependent chain per warp
// is 4x shorter and each warp has 4 independent mma chains.
struct DecodeCfg {
  static constexpr int BM = 16, BN = 32, BK = 512, kThreads = 128, kStages = 3;
  static constexpr int kChunks = BK / kChunkK, kBlocks = BK / kBlockK;  // 16, 4
  static constexpr int kVecsA = BK / 16;                                // 32
  static constexpr int kPartialStride = BN + 8;
  static constexpr int kTermStride = BN + 8;  // floats per row of a term tile
};
static_assert(kSliceUnit % DecodeCfg::kChunks == 0, "decode k-tiles lie inside one slice");

template <bool kFp4>
struct DecodeLayout {
  using C = DecodeCfg;
  static constexpr int kVecsB = kFp4 ? C::BK / 32 : C::BK / 16;
  static constexpr int kBOffset = C::BM * C::BK;
  static constexpr int kSaOffset = kBOffset + C::BN * kVecsB * 16;
  static constexpr int kSwOffset = kSaOffset + C::BM * C::kBlocks * 4;
  static constexpr int kStageBytes = kSwOffset + (kFp4 ? C::BN * C::kChunks : 4) * 4;
  static constexpr int kTerms = kFp4 ? C::kChunks : C::kBlocks;
  static constexpr int kTermOffset = C::kStages * kStageBytes;
  static constexpr int kTermBytes = kTerms * C::BM * C::kTermStride * 4;
  static constexpr int kSmemBytes = kTermOffset + kTermBytes;
  static_assert(kSaOffset % 16 == 0 && kSwOffset % 16 == 0 && kStageBytes % 16 == 0, "16-byte aligned regions");
  static_assert(C::BM * C::kPartialStride * 4 <= kTermOffset, "the slice partial fits in the stages");
};

template <bool kFp4, class OutT, bool kGrouped>
__global__ void __launch_bounds__(DecodeCfg::kThreads, 2) fp8_decode_kernel(const Params p) {
  pdl_prologue();
  using C = DecodeCfg;
  using L = DecodeLayout<kFp4>;
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int BM = C::BM, BN = C::BN, kChunks = C::kChunks, kBlocks = C::kBlocks, kThreads = C::kThreads;
  constexpr int kVecsA = C::kVecsA, kVecsB = L::kVecsB, kStages = C::kStages;
  constexpr int kElems = BM * BN / kThreads;  // folded elements per thread

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int group_id = lane >> 2, tig = lane & 3;

  int tile_index = static_cast<int>(blockIdx.x);
  int slice = 0;
  if (p.num_slices > 1) {
    slice = static_cast<int>(cg::this_cluster().block_rank());
    tile_index /= p.num_slices;
  }
  int n_tile, row_begin, row_end;
  const uint8_t* w;
  const float* sw;
  if constexpr (kGrouped) {
    int group;
    if (!locate_group_rows<kThreads>(p.row_offsets, p.num_groups, BM, static_cast<int>(blockIdx.y), group, row_begin,
                                     row_end))
      return;
    n_tile = tile_index;
    w = p.group_w[group];
    sw = p.group_sw[group];
  } else {
    n_tile = tile_index % p.n_tiles;
    row_begin = (tile_index / p.n_tiles) * BM;
    row_end = min(p.M, row_begin + BM);
    w = p.w;
    sw = p.sw;
  }
  const int rows = row_end - row_begin;
  const int n_begin = n_tile * BN;
  const int N = p.N;

  const int chunk_begin = slice * p.slice_chunks;
  const int chunk_end = min(chunk_begin + p.slice_chunks, p.num_chunks);
  const int num_k_tiles = (chunk_end - chunk_begin + kChunks - 1) / kChunks;
  const uint32_t smem_base = shared_address(smem);

  auto load_tile = [&](int t, int stage) {
    load_stage<C, L, kFp4>(p, w, sw, tid, t, smem_base + static_cast<uint32_t>(stage * L::kStageBytes), chunk_begin,
                           row_begin, row_end, n_begin);
  };

  float* const terms = reinterpret_cast<float*>(smem + L::kTermOffset);
  float acc[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) acc[e] = 0.0f;

  // Warp `warp` computes block `warp` of the tile (chunks 4 warp .. 4 warp + 3 that are < valid).
  auto compute_block = [&](int stage, int valid) {
    const uint32_t st = smem_base + static_cast<uint32_t>(stage * L::kStageBytes);
    const unsigned char* st_ptr = smem + stage * L::kStageBytes;
    const float* sa_s = reinterpret_cast<const float*>(st_ptr + L::kSaOffset);
    const float* sw_s = reinterpret_cast<const float*>(st_ptr + L::kSwOffset);
    const int b = warp;
    float prod[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) prod[j][e] = 0.0f;
    const float as[2] = {sa_s[group_id * kBlocks + b], sa_s[(group_id + 8) * kBlocks + b]};
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) {
      const int c = 4 * b + cc;
      if (c < valid) {
        uint32_t af[4];
        uint32_t bf[4][2];
        ldmatrix_x4(af, st + tile_offset<kVecsA>(lane & 15, 2 * c + (lane >> 4)));
        if constexpr (kFp4) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const unsigned char* v = st_ptr + L::kBOffset + tile_offset<kVecsB>(j * 8 + group_id, c);
            bf[j][0] = e2m1x4_to_e4m3x4(*reinterpret_cast<const uint16_t*>(v + 2 * tig));
            bf[j][1] = e2m1x4_to_e4m3x4(*reinterpret_cast<const uint16_t*>(v + 8 + 2 * tig));
          }
        } else {
#pragma unroll
          for (int j = 0; j < 4; j += 2) {
            uint32_t r[4];
            ldmatrix_x4(r, st + L::kBOffset +
                               tile_offset<kVecsB>(j * 8 + ((lane >> 4) << 3) + (lane & 7), 2 * c + ((lane >> 3) & 1)));
            bf[j][0] = r[0];
            bf[j][1] = r[1];
            bf[j + 1][0] = r[2];
            bf[j + 1][1] = r[3];
          }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_e4m3(prod[j], af, bf[j][0], bf[j][1]);
        if constexpr (kFp4) {
          // Term of chunk c: P_c * (sa * sw4[n, c]); the chunk's accumulator restarts at 0.
          float* tc = terms + c * BM * C::kTermStride;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int col = j * 8 + 2 * tig;
            const float w0 = sw_s[col * kChunks + c], w1 = sw_s[(col + 1) * kChunks + c];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float t0 = __fmul_rn(prod[j][2 * h], __fmul_rn(as[h], w0));
              const float t1 = __fmul_rn(prod[j][2 * h + 1], __fmul_rn(as[h], w1));
              *reinterpret_cast<float2*>(tc + (group_id + 8 * h) * C::kTermStride + col) = make_float2(t0, t1);
              prod[j][2 * h] = 0.0f;
              prod[j][2 * h + 1] = 0.0f;
            }
          }
        }
      }
    }
    if constexpr (!kFp4) {
      if (4 * b < valid) {  // the block has at least one chunk: term P_b * (sa * sw)
        float* tb = terms + b * BM * C::kTermStride;
        const float ws = sw_s[b];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float s = __fmul_rn(as[h], ws);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int col = j * 8 + 2 * tig;
            *reinterpret_cast<float2*>(tb + (group_id + 8 * h) * C::kTermStride + col) =
                make_float2(__fmul_rn(prod[j][2 * h], s), __fmul_rn(prod[j][2 * h + 1], s));
          }
        }
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k_tiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int t = 0; t < num_k_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t landed; the previous tile's terms have been folded
    if (t + kStages - 1 < num_k_tiles) load_tile(t + kStages - 1, (t + kStages - 1) % kStages);
    cp_async_commit();
    const int valid = min(kChunks, chunk_end - (chunk_begin + t * kChunks));
    compute_block(t % kStages, valid);
    __syncthreads();  // all terms of the tile written
    const int num_terms = kFp4 ? valid : (valid + 3) / 4;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int idx = tid + e * kThreads, r = idx / BN, c = idx % BN;
      if (r < rows) {
        for (int term = 0; term < num_terms; ++term)
          acc[e] = __fadd_rn(acc[e], terms[(term * BM + r) * C::kTermStride + c]);
      }
    }
  }

  OutT* y = static_cast<OutT*>(p.y);
  if (p.num_slices > 1) {
    cp_async_wait<0>();
    __syncthreads();
    float* partial = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int idx = tid + e * kThreads;
      partial[(idx / BN) * C::kPartialStride + idx % BN] = acc[e];
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    sum_cluster_partials<BM, BN, C::kPartialStride, kThreads, OutT>(cluster, partial, p.num_slices, slice, row_begin,
                                                                    row_end, n_begin, N, TileOut<OutT>{y, N, 0, 0});
    cluster.sync();
    return;
  }
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    const int idx = tid + e * kThreads, r = idx / BN, c = idx % BN;
    const int m = row_begin + r, n = n_begin + c;
    if (m < row_end && n < N) store_one(y + static_cast<size_t>(m) * N + n, acc[e]);
  }
}

// ---------------------------------------------------------------------------------------------
// Quantizer: one warp per 128-value block.

// The e4m3fn code of a value on the e4m3 grid (|q| <= 448) or NaN (0x7F).
__device__ inline uint8_t e4m3_code(float q) {
  if (isnan(q)) return 0x7F;
  const unsigned bits = __float_as_uint(q);
  const unsigned sign = (bits >> 24) & 0x80u;
  const float a = fabsf(q);
  if (a == 0.0f) return static_cast<uint8_t>(sign);
  if (a < 0.015625f) {  // subnormal e4m3: a = m * 2^-9, m in 1..7
    return static_cast<uint8_t>(sign | static_cast<unsigned>(__fmul_rn(a, 512.0f)));
  }
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127;  // -6..8
  const unsigned mantissa = (bits >> 20) & 7u;
  return static_cast<uint8_t>(sign | (static_cast<unsigned>(exponent + 7) << 3) | mantissa);
}

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(bf16 v) { return __bfloat162float(v); }

template <class T>
__global__ void quantize_kernel(const T* x, int M, int K, uint8_t* codes, float* scales) {
  pdl_prologue();
  const int blocks_per_row = (K + kBlockK - 1) / kBlockK;
  const long long warp_index = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (warp_index >= static_cast<long long>(M) * blocks_per_row) return;
  const int m = static_cast<int>(warp_index / blocks_per_row), kb = static_cast<int>(warp_index % blocks_per_row);
  const int b = kb * kBlockK, e = min(b + kBlockK, K);
  const T* xr = x + static_cast<size_t>(m) * K;
  uint8_t* cr = codes + static_cast<size_t>(m) * K;
  float amax = 0.0f;
  for (int i = b + lane; i < e; i += 32) amax = fmaxf(amax, fabsf(to_float(xr[i])));
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = pow2_ceil_scale_f32(fmaxf(amax, 1e-4f), 1.0f / 448.0f);
  for (int i = b + lane; i < e; i += 32) cr[i] = e4m3_code(round_e4m3(__fdiv_rn(to_float(xr[i]), s)));
  if (lane == 0) scales[static_cast<size_t>(m) * blocks_per_row + kb] = s;
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Grid and launch shared by both kernels; `kernel` takes Params by value.
template <class KernelPtr>
void launch_kernel(KernelPtr kernel, int threads, int smem_bytes, int bm, int bn, bool grouped,
                   std::atomic<uint64_t>& smem_attribute_devices, Params p, int grouped_max_rows,
                   cudaStream_t stream) {
  opt_in_shared_memory(kernel, smem_bytes, smem_attribute_devices);
  p.n_tiles = (p.N + bn - 1) / bn;
  if (!grouped) p.m_tiles = (p.M + bm - 1) / bm;
  cudaLaunchConfig_t config;
  cudaLaunchAttribute attribute[1];
  if (!gemm_launch_config(grouped, p.m_tiles, p.n_tiles, p.num_slices, grouped_max_rows, p.num_groups, bm, threads,
                          smem_bytes, stream, config, attribute))
    return;
  (void)cudaLaunchKernelEx(&config, kernel, p);  // errors surface at the caller's next CUDA call
}

template <class Cfg, bool kFp4, class OutT, bool kGrouped>
void launch(const Params& p, int grouped_max_rows, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_attribute_devices{0};
  launch_kernel(fp8_gemm_kernel<Cfg, kFp4, OutT, kGrouped>, Cfg::kThreads, Layout<Cfg, kFp4>::kSmemBytes, Cfg::BM,
                Cfg::BN, kGrouped, smem_attribute_devices, p, grouped_max_rows, stream);
}

template <bool kFp4, class OutT, bool kGrouped>
void launch_decode(const Params& p, int grouped_max_rows, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_attribute_devices{0};
  launch_kernel(fp8_decode_kernel<kFp4, OutT, kGrouped>, DecodeCfg::kThreads, DecodeLayout<kFp4>::kSmemBytes,
                DecodeCfg::BM, DecodeCfg::BN, kGrouped, smem_attribute_devices, p, grouped_max_rows, stream);
}

int choose_config(int rows, long long total_rows, int N) {
  if (rows <= 16) return kDecode;
  if (rows > 64) {
    const long long tiles = (total_rows + 127) / 128 * ((N + 127) / 128);
    if (tiles >= sm_count()) return kLarge;
  }
  return kMedium;
}

int config_rows(int config) {
  return config == kDecode || config == kDecodeK128 || config == kDecodeSplit ? 16 : config == kMedium ? 64 : 128;
}

template <bool kFp4, class OutT, bool kGrouped>
void dispatch(int config, const Params& p, int grouped_max_rows, cudaStream_t stream) {
  switch (config) {
    case kDecode: launch<CfgDecode, kFp4, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kDecodeK128: launch<CfgDecodeK128, kFp4, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kMedium: launch<CfgMedium, kFp4, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kDecodeSplit: launch_decode<kFp4, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    default: launch<CfgLarge, kFp4, OutT, kGrouped>(p, grouped_max_rows, stream); break;
  }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }
bool aligned4(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 3u) == 0; }

Params make_params(const uint8_t* a, const float* sa, int K, int N, void* y, const SlicePlan& plan) {
  FP8_REQUIRE(K > 0 && K % kChunkK == 0, "K must be a positive multiple of 32", K);
  FP8_REQUIRE(N > 0 && N % 8 == 0, "N must be a positive multiple of 8", N);
  FP8_REQUIRE(aligned16(a), "activation codes must be 16-byte aligned", reinterpret_cast<uintptr_t>(a));
  FP8_REQUIRE(aligned4(sa), "activation scales must be 4-byte aligned", reinterpret_cast<uintptr_t>(sa));
  FP8_REQUIRE(aligned16(y), "output must be 16-byte aligned", reinterpret_cast<uintptr_t>(y));
  Params p = {};
  p.a = a;
  p.sa = sa;
  p.y = y;
  p.N = N;
  p.K = K;
  p.KB = (K + kBlockK - 1) / kBlockK;
  p.KC = K / kChunkK;
  p.num_chunks = plan.num_chunks;
  p.slice_chunks = plan.slice_chunks;
  p.num_slices = plan.num_slices;
  return p;
}

template <bool kFp4, class OutT>
void gemm_impl(int config, const uint8_t* a, const float* sa, int M, int K, const uint8_t* w, const float* sw, int N,
               OutT* y, cudaStream_t stream) {
  FP8_REQUIRE(M >= 0, "M must be >= 0", M);
  if (M == 0) return;
  const SlicePlan plan = plan_slices(N, K);
  Params p = make_params(a, sa, K, N, y, plan);
  FP8_REQUIRE(aligned16(w), "weight codes must be 16-byte aligned", reinterpret_cast<uintptr_t>(w));
  FP8_REQUIRE(aligned4(sw), "weight scales must be 4-byte aligned", reinterpret_cast<uintptr_t>(sw));
  if (config < 0) config = choose_config(M, M, N);
  FP8_REQUIRE(config < kNumConfigs, "unknown tile configuration", config);
  p.M = M;
  p.w = w;
  p.sw = sw;
  dispatch<kFp4, OutT, false>(config, p, 0, stream);
}

template <bool kFp4, class OutT>
void grouped_gemm_impl(int config, const uint8_t* a, const float* sa, const int* row_offsets, int G, int max_rows,
                       int K, const uint8_t* const* w, const float* const* sw, int N, OutT* y, cudaStream_t stream) {
  FP8_REQUIRE(G >= 0 && max_rows >= 0, "negative group count or max_rows", G < 0 ? G : max_rows);
  if (G == 0 || max_rows == 0) return;
  const SlicePlan plan = plan_slices(N, K);
  Params p = make_params(a, sa, K, N, y, plan);
  if (config < 0) config = choose_config((max_rows + G - 1) / G, max_rows, N);
  FP8_REQUIRE(config < kNumConfigs, "unknown tile configuration", config);
  if (grouped_slots(max_rows, G, config_rows(config)) > 65535) config = kLarge;
  p.row_offsets = row_offsets;
  p.num_groups = G;
  p.group_w = w;
  p.group_sw = sw;
  dispatch<kFp4, OutT, true>(config, p, max_rows, stream);
}

template <class T>
void quantize_impl(const T* x, int M, int K, uint8_t* codes, float* scales, cudaStream_t stream) {
  FP8_REQUIRE(M >= 0 && K > 0, "quantize_fp8_rows: bad shape", M < 0 ? M : K);
  const long long warps = static_cast<long long>(M) * ((K + kBlockK - 1) / kBlockK);
  if (warps == 0) return;
  const long long blocks = (warps * 32 + 255) / 256;
  FP8_REQUIRE(blocks <= 0x7fffffffLL, "quantize_fp8_rows: too many rows", blocks);
  quantize_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, M, K, codes, scales);
}

}  // namespace

void gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, float* y, cudaStream_t stream) {
  gemm_impl<false>(-1, codes_a, scales_a, M, K, w_codes, w_scales, N, y, stream);
}
void gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, bf16* y, cudaStream_t stream) {
  gemm_impl<false>(-1, codes_a, scales_a, M, K, w_codes, w_scales, N, y, stream);
}
void gemm_fp4(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_packed,
              const float* w_scales, int N, float* y, cudaStream_t stream) {
  gemm_impl<true>(-1, codes_a, scales_a, M, K, w_packed, w_scales, N, y, stream);
}
void gemm_fp4(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_packed,
              const float* w_scales, int N, bf16* y, cudaStream_t stream) {
  gemm_impl<true>(-1, codes_a, scales_a, M, K, w_packed, w_scales, N, y, stream);
}
void grouped_gemm_fp8(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_codes, const float* const* w_scales, int N, float* y,
                      cudaStream_t stream) {
  grouped_gemm_impl<false>(-1, codes_a, scales_a, row_offsets, G, max_rows, K, w_codes, w_scales, N, y, stream);
}
void grouped_gemm_fp8(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_codes, const float* const* w_scales, int N, bf16* y,
                      cudaStream_t stream) {
  grouped_gemm_impl<false>(-1, codes_a, scales_a, row_offsets, G, max_rows, K, w_codes, w_scales, N, y, stream);
}
void grouped_gemm_fp4(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_packed, const float* const* w_scales, int N, float* y,
                      cudaStream_t stream) {
  grouped_gemm_impl<true>(-1, codes_a, scales_a, row_offsets, G, max_rows, K, w_packed, w_scales, N, y, stream);
}
void grouped_gemm_fp4(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_packed, const float* const* w_scales, int N, bf16* y,
                      cudaStream_t stream) {
  grouped_gemm_impl<true>(-1, codes_a, scales_a, row_offsets, G, max_rows, K, w_packed, w_scales, N, y, stream);
}

void quantize_fp8_rows(const bf16* x, int M, int K, uint8_t* codes, float* scales, cudaStream_t stream) {
  quantize_impl(x, M, K, codes, scales, stream);
}
void quantize_fp8_rows(const float* x, int M, int K, uint8_t* codes, float* scales, cudaStream_t stream) {
  quantize_impl(x, M, K, codes, scales, stream);
}

namespace testing {
int config_count() { return kNumConfigs; }
const char* config_name(int config) { return config >= 0 && config < kNumConfigs ? kConfigNames[config] : "?"; }
int slice_count(int N, int K) { return plan_slices(N, K).num_slices; }
int auto_config(int M, int N, int /*K*/) { return choose_config(M, M, N); }
void gemm_with_config(int config, bool fp4, const uint8_t* codes_a, const float* scales_a, int M, int K,
                      const uint8_t* w, const float* w_scales, int N, void* y, bool bf16_out, cudaStream_t stream) {
  if (fp4) {
    if (bf16_out)
      gemm_impl<true>(config, codes_a, scales_a, M, K, w, w_scales, N, static_cast<bf16*>(y), stream);
    else
      gemm_impl<true>(config, codes_a, scales_a, M, K, w, w_scales, N, static_cast<float*>(y), stream);
  } else {
    if (bf16_out)
      gemm_impl<false>(config, codes_a, scales_a, M, K, w, w_scales, N, static_cast<bf16*>(y), stream);
    else
      gemm_impl<false>(config, codes_a, scales_a, M, K, w, w_scales, N, static_cast<float*>(y), stream);
  }
}
void grouped_gemm_with_config(int config, bool fp4, const uint8_t* codes_a, const float* scales_a,
                              const int* row_offsets, int G, int max_rows, int K, const uint8_t* const* w,
                              const float* const* w_scales, int N, void* y, bool bf16_out, cudaStream_t stream) {
  if (fp4) {
    if (bf16_out)
      grouped_gemm_impl<true>(config, codes_a, scales_a, row_offsets, G, max_rows, K, w, w_scales, N,
                              static_cast<bf16*>(y), stream);
    else
      grouped_gemm_impl<true>(config, codes_a, scales_a, row_offsets, G, max_rows, K, w, w_scales, N,
                              static_cast<float*>(y), stream);
  } else {
    if (bf16_out)
      grouped_gemm_impl<false>(config, codes_a, scales_a, row_offsets, G, max_rows, K, w, w_scales, N,
                               static_cast<bf16*>(y), stream);
    else
      grouped_gemm_impl<false>(config, codes_a, scales_a, row_offsets, G, max_rows, K, w, w_scales, N,
                               static_cast<float*>(y), stream);
  }
}
}  // namespace testing

}  // namespace deepinfer::backend::cuda::fp8
