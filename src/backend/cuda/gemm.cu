// Batch-invariant bf16 GEMMs for Hopper (sm_90): y[M, N] = x[M, K] * W[N, K]^T on mma.sync tensor
// cores (m16n8k16, bf16 in, fp32 accumulate), cp.async multi-stage pipelines and ldmatrix.
//
// Why every row's result is independent of M (the contract in gemm.h):
//  * The reduction of y[m, n] over K is fixed by (N, K) alone, through a "slice plan": K is cut
//    into 16-wide chunks (one mma k-step each; a last half chunk is zero-padded) and the chunks
//    into S consecutive slices of C chunks (C and S from plan_slices(N, K) only). Slice s's partial
//    p_s starts at 0 and takes one mma per chunk, in increasing k. The result is p_0 when S == 1,
//    else the left fold (((0 + p_0) + p_1) + p_2) + ... in fp32 (the explicit 0 start lets the
//    register fold keep a zero-initialised running total; both fold paths start there).
//  * All tile configurations execute exactly that sequence for every element; they differ only
//    in which elements a CTA owns and in how the slice partials meet:
//      - kRegisterFold: one CTA runs all slices in order, folding its register accumulators into
//        a running total at each slice boundary (large M: no cross-CTA traffic);
//      - kClusterDsmem: the S CTAs of a thread-block cluster each run one slice; rank 0..S-1
//        partials are summed through distributed shared memory in rank order (small M: S times
//        more CTAs stream the weights in parallel, and each dependent mma chain is S times shorter);
//      - kSmemFold: the register fold with the running total kept in shared memory (big tiles whose
//        accumulators leave no registers for a second copy);
//      - kNone: only for plans with S == 1.
//  * An mma output element depends only on its own A row, B column and accumulator, so a row's
//    position inside a tile, the zero padding of rows past M (or past a group's end) and of
//    columns past N cannot change it. The configuration (picked from M) therefore never changes
//    the bits; tests/cuda/gemm_test.cc checks this by forcing every configuration on the same data.
//  * Chunks past K are skipped, never multiplied as zeros, so no configuration adds extra terms.
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/gemm_testing.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/pdl.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace deepinfer::backend::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace gemm_common;  // PTX wrappers, stores, the grouped tile scan, device queries

constexpr int kChunkK = 16;  // k elements per mma.m16n8k16 step

// ---------------------------------------------------------------------------------------------
// Slice plan: depends on (N, K) only. Few output columns means few independent accumulation chains
// when M is small, so small N gets more slices (cluster CTAs at small M, a register fold at large M).
struct SlicePlan {
  int num_chunks;    // ceil(K / 16)
  int slice_chunks;  // C: chunks per slice, a multiple of 16 (so every k-tile of every config lies in one slice)
  int num_slices;    // S = ceil(num_chunks / C) >= 1, at most 8 (the portable cluster size)
};

SlicePlan plan_slices(int N, int K) {
  const int num_chunks = (K + kChunkK - 1) / kChunkK;
  // Decode (M <= 16) runs one CTA per (32-column tile, slice): aim for >= 512 CTAs (about 4 per SM
  // of a 132-SM part) so enough weight bytes are in flight, with at least 64 chunks (1024 k, 8 k-tiles
  // of the decode config) per slice so each CTA's fixed costs stay small. E.g. K = 4096: N = 4096 -> 4
  // slices, N <= 2048 -> 4, N >= 8192 -> 1; K = 8192, N = 4096 -> 4; K = 2048, N = 4096 -> 2.
  const long long column_tiles = (static_cast<long long>(N) + 31) / 32;
  int target = 1;
  while (target < 8 && column_tiles * target < 512) target *= 2;
  target = std::max(1, std::min(target, num_chunks / 64));
  const int per_slice = (num_chunks + target - 1) / target;
  const int slice_chunks = std::max(16, (per_slice + 15) / 16 * 16);
  const int num_slices = std::max(1, (num_chunks + slice_chunks - 1) / slice_chunks);
  return {num_chunks, slice_chunks, num_slices};
}

enum class SliceReduction { kClusterDsmem, kRegisterFold, kSmemFold, kNone };

template <int BM_, int BN_, int BK_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_, SliceReduction kReduction_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr SliceReduction kReduction = kReduction_;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kWarpM = BM / kWarpsM, kWarpN = BN / kWarpsN;  // warp tile
  static constexpr int kMmaM = kWarpM / 16, kMmaN = kWarpN / 8;       // mma tiles per warp
  static constexpr int kChunksPerTile = BK / kChunkK;
  static constexpr int kVecsPerRow = BK / 8;
  static constexpr int kATileBytes = BM * BK * 2, kBTileBytes = BN * BK * 2;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kPartialStride = BN + 8;  // floats; +8 keeps half-warp float2 stores conflict-free
  static constexpr int kPartialBytes = kReduction == SliceReduction::kClusterDsmem ? BM * kPartialStride * 4 : 0;
  static constexpr int kPipelineBytes = kStages * kStageBytes;
  static constexpr int kTotalBytes = kReduction == SliceReduction::kSmemFold ? BM * BN * 4 : 0;  // after the stages
  static constexpr int kSmemBytes = std::max(kPipelineBytes + kTotalBytes, kPartialBytes);
  static_assert(kWarpM % 16 == 0 && kWarpN % 8 == 0 && (kMmaN == 1 || kMmaN % 2 == 0), "warp tile shape");
  static_assert(16 % kChunksPerTile == 0, "a k-tile must never straddle a slice (slice_chunks % 16 == 0)");
  static_assert(BN % 4 == 0 && kStages >= 2, "tile shape");
  static_assert((BM * kVecsPerRow) % kThreads == 0 && (BN * kVecsPerRow) % kThreads == 0, "even tile loads");
};

// Decode (M <= 16): 32 columns per CTA, deep pipeline of wide k-tiles to keep weight bytes in flight.
using CfgM16N32 = TileConfig<16, 32, 128, 1, 4, 8, 2, SliceReduction::kClusterDsmem>;
// Decode alternatives (timed by the bench's --configs): 512-byte row segments per stage; 4 CTAs per SM.
using CfgM16N32K256 = TileConfig<16, 32, 256, 1, 4, 4, 2, SliceReduction::kClusterDsmem>;
using CfgM16N32S4 = TileConfig<16, 32, 128, 1, 4, 4, 4, SliceReduction::kClusterDsmem>;
// Small/medium M (and large M when big tiles would not fill the GPU).
using CfgM64N64 = TileConfig<64, 64, 64, 2, 2, 6, 2, SliceReduction::kClusterDsmem>;
using CfgM64N64K128 = TileConfig<64, 64, 128, 2, 2, 3, 2, SliceReduction::kClusterDsmem>;  // 256-byte row segments
// Large M.
using CfgM128N128 = TileConfig<128, 128, 32, 2, 4, 4, 1, SliceReduction::kNone>;
using CfgM128N128Fold = TileConfig<128, 128, 32, 2, 4, 4, 1, SliceReduction::kRegisterFold>;
using CfgM128N256 = TileConfig<128, 256, 32, 2, 4, 4, 1, SliceReduction::kNone>;
using CfgM128N256Fold = TileConfig<128, 256, 32, 2, 4, 4, 1, SliceReduction::kSmemFold>;  // 96 + 128 KB smem
using CfgM128N256K64 = TileConfig<128, 256, 64, 2, 4, 4, 1, SliceReduction::kNone>;  // half the barriers per k

enum ConfigId {
  kM16N32, kM64N64, kM128N128, kM128N128Fold, kM128N256, kM128N256Fold, kM16N32K256, kM16N32S4, kM64N64K128,
  kM128N256K64, kWgmmaN128, kWgmmaN256, kWgmmaM64Cluster, kWgmmaM64Cluster2, kWgmmaM128Cluster,
  kWgmmaM64N256Cluster, kWgmmaM128N256Cluster, kWgmmaM64Fold2, kWgmmaM64Fold1, kWgmmaN192Fold, kNumConfigs
};
constexpr const char* kConfigNames[] = {
    "m16n32k128_cluster", "m64n64k64_cluster",  "m128n128k32",          "m128n128k32_fold",  "m128n256k32",
    "m128n256k32_sfold",  "m16n32k256_cluster", "m16n32k128s4_cluster", "m64n64k128_cluster", "m128n256k64",
    "wgmma_tma_m128n128_fold", "wgmma_tma_m128n256", "wgmma_tma_m64n128_cluster",
    "wgmma_tma_m64n128_cluster_2cta", "wgmma_tma_m128n128_cluster", "wgmma_tma_m64n256_cluster",
    "wgmma_tma_m128n256_cluster", "wgmma_tma_m64n128_fold_2cta", "wgmma_tma_m64n128_fold",
    "wgmma_tma_m128n192_fold"};
static_assert(sizeof(kConfigNames) / sizeof(kConfigNames[0]) == kNumConfigs, "one name per tile configuration");

struct GemmParams {
  const bf16* x;                     // [rows, K]
  const bf16* w;                     // [N, K] (dense); grouped with group_weights == nullptr: [G * N, K]
  const bf16* const* group_weights;  // [G] device pointers (grouped), or nullptr (stacked weights)
  long long group_stride;            // stacked: elements between consecutive groups' weights (N * K)
  const int* row_offsets;            // [G + 1] device (grouped)
  OutTarget out;                     // y [rows, N] (float or bf16), or gemm_split's column runs
  int M, N, K;                       // M: rows (dense) / unused (grouped)
  int num_groups;
  int num_chunks, slice_chunks, num_slices;
  int m_tiles, n_tiles;
};


// One CTA computes a BM x BN tile of y over one slice (cluster configs) or all slices of K.
template <class Cfg, class OutT, bool kGrouped>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) gemm_kernel(const GemmParams p) {
  // Programmatic dependent launch: the grids after this one may be scheduled now (they wait for
  // this one's completion); this grid itself waits for its predecessors only where it first reads
  // their output (grid_dependency_wait below), so the dense form streams weights before that.
  allow_dependent_launch();
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int BM = Cfg::BM, BN = Cfg::BN, kChunks = Cfg::kChunksPerTile, kVecs = Cfg::kVecsPerRow;
  constexpr int kStages = Cfg::kStages, kThreads = Cfg::kThreads, kMmaM = Cfg::kMmaM, kMmaN = Cfg::kMmaN;
  constexpr bool kCluster = Cfg::kReduction == SliceReduction::kClusterDsmem;
  constexpr bool kFold = Cfg::kReduction == SliceReduction::kRegisterFold;
  constexpr bool kSmemFold = Cfg::kReduction == SliceReduction::kSmemFold;

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_m0 = (warp / Cfg::kWarpsN) * Cfg::kWarpM;
  const int warp_n0 = (warp % Cfg::kWarpsN) * Cfg::kWarpN;

  // --- Which tile, which slice. The CTAs of a cluster share the tile and take slice = rank.
  int tile_index = static_cast<int>(blockIdx.x);
  int slice = 0;
  if constexpr (kCluster) {
    if (p.num_slices > 1) {
      slice = static_cast<int>(cg::this_cluster().block_rank());
      tile_index /= p.num_slices;
    }
  }
  int n_tile, row_begin, row_end, group = 0, group_row0 = 0;
  const bf16* w;
  if constexpr (kGrouped) {
    grid_dependency_wait();  // the row offsets come from earlier kernels (a no-op without PDL)
    // Same (blockIdx.y) for all CTAs of a cluster, so the whole cluster leaves together.
    if (!locate_group_rows<kThreads>(p.row_offsets, p.num_groups, BM, static_cast<int>(blockIdx.y), group, row_begin,
                                     row_end, &group_row0))
      return;
    n_tile = tile_index;
    w = p.group_weights ? p.group_weights[group] : p.w + group * p.group_stride;
  } else {
    const int m_tile = raster_tile(tile_index, p.m_tiles, p.n_tiles, n_tile);
    row_begin = m_tile * BM;
    row_end = min(p.M, row_begin + BM);
    w = p.w;
  }
  const int n_begin = n_tile * BN;
  const int N = p.N, K = p.K;
  const bf16* x = p.x;

  int chunk_begin = 0, chunk_end = p.num_chunks;
  if constexpr (kCluster) {
    chunk_begin = slice * p.slice_chunks;
    chunk_end = min(chunk_begin + p.slice_chunks, p.num_chunks);
  }
  const int num_k_tiles = (chunk_end - chunk_begin + kChunks - 1) / kChunks;

  const uint32_t smem_base = shared_address(smem);

  // x rows [row_begin, row_end) and W rows [n_begin, n_begin + BN) of k-tile t -> stage `stage`;
  // rows out of range and k >= K become zeros (K % 8 == 0, so a 16-byte vector is all in or all out).
  // Out-of-range rows stay zero in every stage once each stage has been filled (t >= kStages), so
  // they are not rewritten (at M = 1, 15 of the 16 x rows).
  // Compile-time trip counts (the vectors divide evenly over the threads), so the loops unroll fully.
  auto load_a = [&](int t, int stage) {
    const int k0 = (chunk_begin + t * kChunks) * kChunkK;
    const uint32_t a_tile = smem_base + static_cast<uint32_t>(stage * Cfg::kStageBytes);
#pragma unroll
    for (int j = 0; j < BM * kVecs / kThreads; ++j) {
      const int i = tid + j * kThreads;
      const int r = i / kVecs, v = i % kVecs, m = row_begin + r, k = k0 + v * 8;
      if (m >= row_end && t >= kStages) continue;
      const bool ok = m < row_end && k < K;
      cp_async_16(a_tile + tile_offset<kVecs>(r, v), ok ? x + static_cast<size_t>(m) * K + k : x, ok ? 16 : 0);
    }
  };
  auto load_b = [&](int t, int stage) {
    const int k0 = (chunk_begin + t * kChunks) * kChunkK;
    const uint32_t b_tile = smem_base + static_cast<uint32_t>(stage * Cfg::kStageBytes) + Cfg::kATileBytes;
#pragma unroll
    for (int j = 0; j < BN * kVecs / kThreads; ++j) {
      const int i = tid + j * kThreads;
      const int r = i / kVecs, v = i % kVecs, n = n_begin + r, k = k0 + v * 8;
      if (n >= N && t >= kStages) continue;
      const bool ok = n < N && k < K;
      cp_async_16(b_tile + tile_offset<kVecs>(r, v), ok ? w + static_cast<size_t>(n) * K + k : w, ok ? 16 : 0);
    }
  };

  float acc[kMmaM][kMmaN][4];
  [[maybe_unused]] float total[kFold ? kMmaM : 1][kFold ? kMmaN : 1][4];
#pragma unroll
  for (int i = 0; i < kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < kMmaN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][j][e] = 0.0f;
        if constexpr (kFold) total[i][j][e] = 0.0f;
      }

  // The first `valid` chunks of the k-tile in `stage`, each one mma k-step in increasing k.
  auto mma_tile = [&](int stage, int valid) {
    const uint32_t a_tile = smem_base + static_cast<uint32_t>(stage * Cfg::kStageBytes);
    const uint32_t b_tile = a_tile + Cfg::kATileBytes;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (c < valid) {
        uint32_t a[kMmaM][4];
        uint32_t b[kMmaN][2];
        // A 16x16: lanes 0-15 address rows 0-15 of k 0-7, lanes 16-31 rows 0-15 of k 8-15.
#pragma unroll
        for (int i = 0; i < kMmaM; ++i)
          ldmatrix_x4(a[i], a_tile + tile_offset<kVecs>(warp_m0 + i * 16 + (lane & 15), 2 * c + (lane >> 4)));
        if constexpr (kMmaN == 1) {
          ldmatrix_x2(b[0][0], b[0][1], b_tile + tile_offset<kVecs>(warp_n0 + (lane & 7), 2 * c + ((lane >> 3) & 1)));
        } else {
          // Two n8 tiles per x4: lanes 0-7 n 0-7 k 0-7, 8-15 n 0-7 k 8-15, 16-23 n 8-15 k 0-7, 24-31 n 8-15 k 8-15.
#pragma unroll
          for (int j = 0; j < kMmaN; j += 2) {
            uint32_t r[4];
            ldmatrix_x4(r, b_tile + tile_offset<kVecs>(warp_n0 + j * 8 + ((lane >> 4) << 3) + (lane & 7),
                                                       2 * c + ((lane >> 3) & 1)));
            b[j][0] = r[0];
            b[j][1] = r[1];
            b[j + 1][0] = r[2];
            b[j + 1][1] = r[3];
          }
        }
#pragma unroll
        for (int i = 0; i < kMmaM; ++i)
#pragma unroll
          for (int j = 0; j < kMmaN; ++j) mma_bf16_m16n8k16(acc[i][j], a[i], b[j][0], b[j][1]);
      }
    }
  };

  // Running total of the slice partials (kSmemFold): this thread's own fp32 slots after the
  // pipeline stages, [element][thread] so a warp's accesses hit 32 distinct banks.
  [[maybe_unused]] float* const smem_total = reinterpret_cast<float*>(smem + Cfg::kPipelineBytes);
  [[maybe_unused]] const bool multi_slice = p.num_slices > 1;
  [[maybe_unused]] const auto total_slot = [&](int i, int j, int e) -> float& {
    return smem_total[((i * kMmaN + j) * 4 + e) * kThreads + tid];
  };
  if constexpr (kSmemFold) {
    if (multi_slice) {
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) total_slot(i, j, e) = 0.0f;
    }
  }
  [[maybe_unused]] int next_fold_chunk = p.slice_chunks;  // fold configs: chunk index of the next slice boundary

  // --- Main loop: kStages-deep cp.async pipeline, one barrier per k-tile.
  // Prologue: the weight tiles first. Weights never depend on earlier kernels, so under programmatic
  // dependent launch (dense calls) they stream while the previous kernel finishes; x is read only
  // after griddepcontrol.wait. (A stage's weights sit in an earlier or the same commit group as its
  // x, so waiting for the stage's group still covers both.)
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < num_k_tiles) load_b(s, s);
  grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k_tiles) load_a(s, s);
    cp_async_commit();
  }
  for (int t = 0; t < num_k_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t landed for all threads; everyone is done with the stage refilled below
    if (t + kStages - 1 < num_k_tiles) {
      load_a(t + kStages - 1, (t + kStages - 1) % kStages);
      load_b(t + kStages - 1, (t + kStages - 1) % kStages);
    }
    cp_async_commit();

    const int tile_chunk0 = chunk_begin + t * kChunks;
    if constexpr (kFold || kSmemFold) {
      // Slice boundary: total += p_s (total starts at 0); the next slice's partial restarts at 0.
      // chunk_begin == 0 and k-tiles of kChunks | 16 | slice_chunks chunks, so tile_chunk0 meets it exactly.
      if (tile_chunk0 == next_fold_chunk) {
        next_fold_chunk += p.slice_chunks;
#pragma unroll
        for (int i = 0; i < kMmaM; ++i)
#pragma unroll
          for (int j = 0; j < kMmaN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if constexpr (kFold) {
                total[i][j][e] += acc[i][j][e];
              } else {
                total_slot(i, j, e) += acc[i][j][e];
              }
              acc[i][j][e] = 0.0f;
            }
      }
    }
    const int valid = chunk_end - tile_chunk0;
    if (valid >= kChunks)
      mma_tile(t % kStages, kChunks);  // constant count: the per-chunk test folds away
    else
      mma_tile(t % kStages, valid);  // the last tile of K
  }

  if constexpr (kFold) {
    if (p.num_slices > 1) {  // fold the last slice's partial
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e] + acc[i][j][e];
    }
  }
  if constexpr (kSmemFold) {
    if (multi_slice) {  // fold the last slice's partial
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = total_slot(i, j, e) + acc[i][j][e];
    }
  }

  const TileOut<OutT> out_tile = tile_output<OutT>(p.out, N, n_begin, group, group_row0);  // once per tile

  if constexpr (kCluster) {
    if (p.num_slices > 1) {
      // Partial of this slice -> own shared memory [BM][kPartialStride] fp32 (pipeline buffers reused).
      cp_async_wait<0>();
      __syncthreads();
      float* partial = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j) {
          const int r = warp_m0 + i * 16 + (lane >> 2), c = warp_n0 + j * 8 + (lane & 3) * 2;
          *reinterpret_cast<float2*>(partial + r * Cfg::kPartialStride + c) = make_float2(acc[i][j][0], acc[i][j][1]);
          *reinterpret_cast<float2*>(partial + (r + 8) * Cfg::kPartialStride + c) =
              make_float2(acc[i][j][2], acc[i][j][3]);
        }
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // all partials of the cluster written and visible
      sum_cluster_partials<BM, BN, Cfg::kPartialStride, kThreads, OutT>(cluster, partial, p.num_slices, slice,
                                                                        row_begin, row_end, n_begin, N, out_tile);
      cluster.sync();  // keep this CTA's shared memory alive until every rank has read it
      return;
    }
  }

  // --- Direct epilogue from the mma accumulator layout: c0,c1 at (row g, cols 2q, 2q+1), c2,c3 at row g + 8.
  const bool pair_store = (N & 1) == 0;
#pragma unroll
  for (int i = 0; i < kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < kMmaN; ++j) {
      const int n = n_begin + warp_n0 + j * 8 + (lane & 3) * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = row_begin + warp_m0 + i * 16 + (lane >> 2) + h * 8;
        if (m >= row_end || n >= N) continue;
        OutT* out = out_tile.at(m, n);
        if (pair_store && n + 1 < N) {
          store_two(out, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        } else {
          store_one(out, acc[i][j][2 * h]);
          if (n + 1 < N) store_one(out + 1, acc[i][j][2 * h + 1]);
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

template <class Cfg, class OutT, bool kGrouped>
void launch(GemmParams p, int grouped_max_rows, cudaStream_t stream) {
  const auto kernel = gemm_kernel<Cfg, OutT, kGrouped>;
  // Opt in to > 48 KB of dynamic shared memory once per device for this kernel.
  static std::atomic<uint64_t> smem_attribute_devices{0};
  opt_in_shared_memory(kernel, Cfg::kSmemBytes, smem_attribute_devices);

  const bool cluster = Cfg::kReduction == SliceReduction::kClusterDsmem && p.num_slices > 1;
  p.n_tiles = (p.N + Cfg::BN - 1) / Cfg::BN;
  if constexpr (!kGrouped) p.m_tiles = (p.M + Cfg::BM - 1) / Cfg::BM;
  cudaLaunchConfig_t config;
  cudaLaunchAttribute attribute[2];
  if (!gemm_launch_config(kGrouped, p.m_tiles, p.n_tiles, cluster ? p.num_slices : 1, grouped_max_rows, p.num_groups,
                          Cfg::BM, Cfg::kThreads, Cfg::kSmemBytes, stream, config, attribute))
    return;
  // Dense calls may start while the previous kernel is still running (programmatic dependent
  // launch): they prefetch weights, then wait for it (griddepcontrol.wait) before reading x.
  if constexpr (!kGrouped) {
    attribute[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs += 1;
  }
  // Errors (if any) are left for the caller's next CUDA call, as for <<<>>>.
  (void)cudaLaunchKernelEx(&config, kernel, p);
}

// Largest tiles that still give at least one full wave; `rows` is M (dense) or the mean rows per
// group (grouped), `total_rows` the rows of the whole call, `groups` the groups (0: dense). `tma`: the TMA + wgmma tiles can run
// this call (K % 64 == 0, aligned operands, dense or stacked weights, an sm_90 device).
int choose_config(int rows, long long total_rows, int groups, int N, const SlicePlan& plan, bool tma) {
  // Every rule below is a timing choice only (any configuration gives the same bits). Numbers: H200,
  // `deepinfer_bench_gemm --configs --ms 1,6,64,256,384,1536`, us per call; "Ng" = N groups (experts).
  const long long k = static_cast<long long>(plan.num_chunks) * 16, weight_elems = static_cast<long long>(N) * k;
  const bool grouped = total_rows > rows;
  constexpr long long k16M = 16ll << 20, k64M = 64ll << 20;
  if (grouped && rows <= 64 && tma) {
    // Experts at decode. One or two rows an expert: the 64 x 256 tile (x read once per 256 weight
    // rows, one m64n256 wgmma a k16 step): 4096x4096x32g at 6 rows 61.8 (64x128 two-CTA 68.0, decode
    // tile 65.9), at 64 rows 281.9 (293.0); 1024x4096x8g at 6 rows 19.7 (the 16-row tile 34.2).
    // More rows: the 64 x 128 tile at two CTAs per SM (4096x2048x32g at 384 rows 147.3, the 16-row
    // tile 253.4; 1024x4096x8g at 64 rows 28.4, 64x256 29.4).
    // When the groups fill four waves of 64 x 128 tiles, the two-CTA/SM fold tile: one CTA streams
    // its 128 weight rows through every slice (launch, pipeline fill and epilogue paid once per tile,
    // not once per slice): 4096x4096x32g at 1536 rows 280.8 vs 291.0, at 384 272.8 vs 280.0;
    // 4096x2048x32g at 1536 148.4 vs 152.9; decode batch 64 3.08 -> 3.02 ms, batch 256 4.39 -> 4.31.
    // Few groups of one or two rows over a deep K, all 64 x 128 tiles in one wave: the one-CTA/SM fold
    // (8 stages in flight, every slice in one CTA). H100, 1024x4096x8g at one row a group (the
    // grouped output projection at batch 1): 30.8 us against 34.5 on the 64 x 256 tile.
    if (rows <= 2 && k >= 4096 && static_cast<long long>(groups) * ((N + 127) / 128) <= sm_count())
      return kWgmmaM64Fold1;
    if (rows <= 2) return kWgmmaM64N256Cluster;
    return static_cast<long long>(groups) * ((N + 127) / 128) >= 4LL * sm_count() ? kWgmmaM64Fold2
                                                                                  : kWgmmaM64Cluster2;
  }
  if (rows <= 16) {
    if (grouped) return kM16N32S4;  // no TMA: 4096x2048x32g at 6 rows 33.6 (the 8-stage tile 53.8)
    // One token, dense: 16M..64M weights with K >= 4096 on the 64 x 256 TMA tile (4096x4096 13.8 vs
    // 16.2 on the 4-stage decode tile, 4096x8192 22.0 vs 23.4); other big weights (LM head, 32768 x
    // 1024) on the 4-stage, 4-CTA/SM decode tile (248 / 18.4, the best measured); small ones on the
    // 256-wide k-tile (512x4096 6.0, 8192x1024 6.6, 4096x2048 8.0 vs 6.5 / 7.0 / 8.4 at k 128).
    if (tma && k >= 4096 && weight_elems >= k16M && weight_elems <= k64M) return kWgmmaM64N256Cluster;
    return weight_elems >= k16M ? kM16N32S4 : kM16N32K256;
  }
  if (rows <= 64) {
    // Dense, 17..64 rows: small weights on the one-CTA/SM 64-row tile (64 rows: 1024x4096 8.9 vs 10.3
    // at two CTAs/SM, 4096x2048 10.5 vs 11.7), big ones at two CTAs/SM (4096x4096 15.3 vs 19.2).
    if (tma) return weight_elems < k16M ? kWgmmaM64Cluster : kWgmmaM64Cluster2;
    return kM64N64;
  }
  const long long sms = sm_count();
  const auto tiles = [&](int bm, int bn) { return (total_rows + bm - 1) / bm * ((N + bn - 1) / bn); };
  if (tma) {
    if (plan.num_slices == 1 && tiles(128, 256) >= sms) return kWgmmaN256;
    // Short K (16 k-tiles): the big tiles' fill and drain outweigh their reuse until the 128 x 256
    // tile fills the GPU (8192x1024 at 384 rows: 64x128 two-CTA 19.9, 128x128 26.9).
    if (!grouped && k <= 1024) return kWgmmaM64Cluster2;
    // Up to 256 rows making about one wave of 64 x 128 tiles over a deep K (N = 4096 at 193-256
    // rows): the one-CTA/SM 64 x 128 fold, 8 stages in flight, every slice in one CTA. H200 (H100 in
    // brackets): 4096x4096 at 256 rows 28.6 us (29.2) against 37.2 (40.5) on the 128 x 128 cluster
    // tile, 4096x8192 50.4 (52.0) against 55.7 (61.4). Not with fewer tiles (1024x4096 at 256 rows
    // 27.0 vs 14.4) or a shallower K (4096x2048 17.5 vs 15.0).
    if (!grouped && k >= 4096 && total_rows <= 256 && tiles(64, 128) * 4 >= sms * 3 && tiles(64, 128) <= sms)
      return kWgmmaM64Fold1;
    // From about half a wave of 128 x 128 tiles: the 128 x 128 fold (4096x4096 at 384 rows 38.3,
    // 128-row cluster 46.8; N = 512, M = 4096: 39 vs 78 on the 64-row tile), or, with 2 slices or
    // K >= 8192, the 128 x 256 tile over cluster slices (x read once per 256 weight rows; its 128
    // accumulators a thread leave no room for a register fold): 4096x2048x32g at 24576 rows 820 vs
    // 913, 4096x2048 at 4096 rows 144 vs 166, 4096x8192 at 4096 rows 481 vs 531, at 1536 196 vs
    // 206. With 4 slices the fold stays (4096x4096x32g at 24576 rows 1667 vs 1841, 4096x4096 at
    // 4096 rows 290 vs 302, 1024x4096x8g 79 vs 95: four CTAs of a quarter of K each), and so do
    // experts at a few hundred rows (4096x2048x32g at 128 rows an expert: 193 vs 182).
    const bool n256_cluster = (plan.num_slices == 2 || (plan.num_slices > 1 && k >= 8192)) && (!grouped || rows >= 512);
    // Where 128 x 192 tiles fill a wave and there are slices to fold: the 128 x 192 fold ahead of
    // both (x read once per 192 weight rows and every slice in one CTA; setmaxnreg gives its
    // consumers the registers). H100, us: 4096x4096 at 4096 rows 248 vs 297 (128 x 128 fold), at
    // 24576 1449 vs 1700; 4096x4096x32g at 24576 1482 vs 1706; 4096x8192 at 4096 467 vs 551 (128 x
    // 256 cluster), at 24576 2859 vs 3157; 4096x2048 at 4096 146 vs 157; 4096x2048x32g at 24576 791
    // vs 859. Not for experts of 128 rows (4096x4096x32g at 4096 rows 410 vs 404) nor N = 1024
    // (1024x4096x8g at 4096 rows 85 vs 81). Prefill 4k 36.10 -> 33.93 ms.
    if (plan.num_slices > 1 && N >= 2048 && (!grouped || rows >= 256) && tiles(128, 192) >= sms)
      return kWgmmaN192Fold;
    if (2 * tiles(128, 128) >= sms) return n256_cluster ? kWgmmaM128N256Cluster : kWgmmaN128;
    // One 128-row tile of a wide, deep weight with several slices: the 128 x 256 cluster tile (x read
    // once per 256 weight rows, half the CTAs): at 128 rows 4096x8192 30.9 vs 39.0 on the 128 x 128
    // cluster tile, 4096x4096 20.9 vs 26.1 (at 256 rows the 128 x 128 one stays ahead: 54.8 vs 58.0,
    // 36.8 vs 37.8).
    if (!grouped && total_rows <= 128 && plan.num_slices > 1 && N >= 4096 && k >= 4096) return kWgmmaM128N256Cluster;
    // Fewer rows: 128-row tiles over the cluster slices read each weight tile once per 128 rows (the
    // 64-row tiles twice) when they make at least 64 CTAs (256 rows: 4096x8192 52.8 vs 59.7 two-CTA
    // 64-row, 4096x2048 13.4 vs 16.4, 1024x4096 12.6 vs 13.4).
    if (!grouped && plan.num_slices > 1 && tiles(128, 128) * plan.num_slices >= 64) return kWgmmaM128Cluster;
    return kWgmmaM64Cluster2;
  }
  if (tiles(128, 256) >= sms) return plan.num_slices == 1 ? kM128N256 : kM128N256Fold;
  if (tiles(128, 128) >= sms) return plan.num_slices == 1 ? kM128N128 : kM128N128Fold;
  return kM64N64;
}

// kNone configs cannot combine slices: with S > 1 they are replaced by the same tile with the fold.
// The wgmma tiles need K % 64 == 0 (whole k-tiles); where the TMA path cannot run (`tma` false)
// they are replaced by the mma.sync tile of the same shape.
int legal_config(int config, const SlicePlan& plan, bool tma, bool split = false) {
  if (config < 0 || config >= kNumConfigs) fail("gemm: unknown tile configuration", config);
  if (config == kWgmmaN256 && plan.num_slices > 1) config = kWgmmaN128;
  // A 192-wide tile at n_begin = 192 i would straddle gemm_split's 256-aligned column runs (gemm_output.h).
  if (config == kWgmmaN192Fold && (!tma || split)) config = kWgmmaN128;
  if (config == kWgmmaN128 && !tma) return plan.num_slices > 1 ? kM128N128Fold : kM128N128;
  if (config == kWgmmaN256 && !tma) return kM128N256;
  if ((config == kWgmmaM64Cluster || config == kWgmmaM64Cluster2 || config == kWgmmaM128Cluster ||
       config == kWgmmaM64N256Cluster || config == kWgmmaM64Fold2 || config == kWgmmaM64Fold1) &&
      !tma)
    return kM64N64;
  if (config == kWgmmaM128N256Cluster && !tma) config = kM128N256;  // folded below when S > 1
  if (plan.num_slices > 1 && config == kM128N128) return kM128N128Fold;
  if (plan.num_slices > 1 && (config == kM128N256 || config == kM128N256K64)) return kM128N256Fold;
  return config;
}

template <class OutT>
void run_wgmma(int config, const GemmParams& p, const SlicePlan& plan, int x_rows, cudaStream_t stream) {
  wgmma_path::Problem pr;
  pr.x = p.x;
  pr.x_rows = x_rows;
  pr.w = p.w;
  pr.N = p.N;
  pr.K = p.K;
  pr.row_offsets = p.row_offsets;
  pr.num_groups = p.num_groups;
  pr.out = p.out;
  pr.output = kSwigluOut<OutT>              ? wgmma_path::Output::kSwigluBf16
              : std::is_same_v<OutT, bf16> ? wgmma_path::Output::kBf16
                                           : wgmma_path::Output::kF32;
  pr.slice_ktiles = plan.slice_chunks / 4;
  pr.num_slices = plan.num_slices;
  wgmma_path::run(pr,
                  config == kWgmmaN256          ? wgmma_path::Tile::kM128N256
                  : config == kWgmmaN128        ? wgmma_path::Tile::kM128N128Fold
                  : config == kWgmmaN192Fold    ? wgmma_path::Tile::kM128N192Fold
                  : config == kWgmmaM64Cluster2 ? wgmma_path::Tile::kM64N128ClusterTwoPerSm
                  : config == kWgmmaM128Cluster ? wgmma_path::Tile::kM128N128Cluster
                  : config == kWgmmaM64N256Cluster ? wgmma_path::Tile::kM64N256Cluster
                  : config == kWgmmaM128N256Cluster ? wgmma_path::Tile::kM128N256Cluster
                  : config == kWgmmaM64Fold2    ? wgmma_path::Tile::kM64N128FoldTwoPerSm
                  : config == kWgmmaM64Fold1    ? wgmma_path::Tile::kM64N128Fold
                                                : wgmma_path::Tile::kM64N128Cluster,
                  stream);
}

template <class OutT, bool kGrouped>
void dispatch(int config, const GemmParams& p, const SlicePlan& plan, int grouped_max_rows, cudaStream_t stream) {
  switch (config) {
    case kM16N32: launch<CfgM16N32, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM64N64: launch<CfgM64N64, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM128N128: launch<CfgM128N128, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM128N128Fold: launch<CfgM128N128Fold, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM128N256: launch<CfgM128N256, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM128N256Fold: launch<CfgM128N256Fold, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM16N32K256: launch<CfgM16N32K256, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM16N32S4: launch<CfgM16N32S4, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM64N64K128: launch<CfgM64N64K128, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    case kM128N256K64: launch<CfgM128N256K64, OutT, kGrouped>(p, grouped_max_rows, stream); break;
    default: run_wgmma<OutT>(config, p, plan, kGrouped ? grouped_max_rows : p.M, stream); break;
  }
}

GemmParams make_params(const bf16* x, int K, int N, void* y, const SlicePlan& plan) {
  GemmParams p = {};
  p.x = x;
  p.out.y = y;
  p.N = N;
  p.K = K;
  p.num_chunks = plan.num_chunks;
  p.slice_chunks = plan.slice_chunks;
  p.num_slices = plan.num_slices;
  return p;
}

// `split`: gemm_split's column runs (y unused), or nullptr for the plain [M, N] output y.
template <class OutT>
void gemm_impl(int config, const bf16* x, int M, int K, const bf16* W, int N, OutT* y, cudaStream_t stream,
               const OutTarget* split = nullptr) {
  if (M <= 0 || N <= 0) return;
  const SlicePlan plan = plan_slices(N, K);
  const bool tma = wgmma_path::usable(x, W, K);
  if (config < 0) config = choose_config(M, M, 0, N, plan, tma);
  GemmParams p = make_params(x, K, N, y, plan);
  if (split != nullptr) p.out = *split;
  p.M = M;
  p.w = W;
  dispatch<OutT, false>(legal_config(config, plan, tma, split != nullptr), p, plan, 0, stream);
}

// gemm_split's layout rules (gemm.h): 1..kMaxOutputRuns widths, each a positive multiple of 4, all
// but the last a multiple of kOutputRunAlign.
bool split_layout_ok(const int* widths, int count) {
  if (count < 1 || count > kMaxOutputRuns) return false;
  for (int i = 0; i < count; ++i)
    if (widths[i] <= 0 || widths[i] % 4 != 0 || (i + 1 < count && widths[i] % kOutputRunAlign != 0)) return false;
  return true;
}

void gemm_split_impl(int config, const bf16* x, int M, int K, const bf16* W, const GemmOutput* outputs, int count,
                     cudaStream_t stream) {
  int widths[kMaxOutputRuns] = {};
  if (count < 1 || count > kMaxOutputRuns) fail("gemm_split: output count out of range", count);
  for (int i = 0; i < count; ++i) widths[i] = outputs[i].n;
  if (!split_layout_ok(widths, count)) fail("gemm_split: output widths break the layout rules of gemm.h", count);
  OutTarget target;
  target.runs = count;
  int N = 0;
  for (int i = 0; i < count; ++i) {
    if (outputs[i].y == nullptr || (reinterpret_cast<uintptr_t>(outputs[i].y) & 15u) != 0)
      fail("gemm_split: an output array must be 16-byte aligned", i);
    target.run_begin[i] = N;
    target.run_width[i] = outputs[i].n;
    target.run_y[i] = outputs[i].y;
    N += outputs[i].n;
  }
  gemm_impl<float>(config, x, M, K, W, N, nullptr, stream, &target);
}

int config_rows(int config) {
  return config == kM16N32 || config == kM16N32K256 || config == kM16N32S4       ? 16
         : config == kM64N64 || config == kM64N64K128 || config == kWgmmaM64Cluster ||
                   config == kWgmmaM64Cluster2 || config == kWgmmaM64N256Cluster || config == kWgmmaM64Fold2 ||
                   config == kWgmmaM64Fold1
               ? 64
                                                                                   : 128;
}

// The tile a grouped call runs on: `config` (< 0: the automatic choice) made legal, and moved to
// 128-row tiles where the small ones' row-tile slots would overflow grid.y.
int grouped_config(int config, int G, int max_rows, int N, const SlicePlan& plan, bool tma) {
  if (config < 0) config = choose_config((max_rows + G - 1) / G, max_rows, G, N, plan, tma);
  config = legal_config(config, plan, tma);
  const int bm = config_rows(config);
  if (grouped_slots(max_rows, G, bm) > 65535 && bm < 128)
    config = tma ? kWgmmaN128 : plan.num_slices > 1 ? kM128N128Fold : kM128N128;
  return config;
}

// weights: per-group device pointers, or nullptr with `stacked` holding the groups back to back.
template <class OutT>
void grouped_gemm_impl(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                       const bf16* const* weights, const bf16* stacked, int N, OutT* y, cudaStream_t stream,
                       int group_ld = 0) {
  if (G <= 0 || max_rows <= 0 || N <= 0) return;
  const SlicePlan plan = plan_slices(N, K);
  const bool tma = stacked != nullptr && wgmma_path::usable(x, stacked, K);
  config = grouped_config(config, G, max_rows, N, plan, tma);
  GemmParams p = make_params(x, K, N, y, plan);
  p.out.group_ld = group_ld;
  p.row_offsets = row_offsets;
  p.num_groups = G;
  p.group_weights = weights;
  p.w = stacked;
  p.group_stride = static_cast<long long>(N) * K;
  dispatch<OutT, true>(config, p, plan, max_rows, stream);
}

// grouped_gemm_stacked_swiglu (gemm.h): false, launching nothing, where the tile the call would run
// on is not a TMA + wgmma one (only those have the SwiGLU epilogue).
bool grouped_swiglu_impl(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                         const bf16* stacked, int N, float limit, bf16* h, cudaStream_t stream) {
  if (N % (2 * kGateUpBlock) != 0 || (reinterpret_cast<uintptr_t>(h) & 15u) != 0) return false;
  const SlicePlan plan = plan_slices(N, K);
  if (stacked == nullptr || !wgmma_path::usable(x, stacked, K)) return false;
  if (G <= 0 || max_rows <= 0 || N <= 0) return true;  // nothing to compute
  config = grouped_config(config, G, max_rows, N, plan, true);
  if (config < kWgmmaN128) return false;  // an mma.sync tile (the wgmma ids follow them in ConfigId)
  GemmParams p = make_params(x, K, N, h, plan);
  p.out.swiglu_limit = limit;
  p.row_offsets = row_offsets;
  p.num_groups = G;
  p.w = stacked;
  p.group_stride = static_cast<long long>(N) * K;
  run_wgmma<SwigluPairs>(config, p, plan, max_rows, stream);
  return true;
}

}  // namespace

void gemm(const bf16* x, int M, int K, const bf16* W, int N, float* y, cudaStream_t stream) {
  gemm_impl(-1, x, M, K, W, N, y, stream);
}
void gemm(const bf16* x, int M, int K, const bf16* W, int N, bf16* y, cudaStream_t stream) {
  gemm_impl(-1, x, M, K, W, N, y, stream);
}
void gemm_split(const bf16* x, int M, int K, const bf16* W, const GemmOutput* outputs, int count,
                cudaStream_t stream) {
  gemm_split_impl(-1, x, M, K, W, outputs, count, stream);
}
bool gemm_split_matches_separate(int K, const int* widths, int count) {
  if (K <= 0 || !split_layout_ok(widths, count)) return false;
  int N = 0;
  for (int i = 0; i < count; ++i) N += widths[i];
  const SlicePlan whole = plan_slices(N, K);
  for (int i = 0; i < count; ++i) {
    const SlicePlan own = plan_slices(widths[i], K);
    if (own.slice_chunks != whole.slice_chunks || own.num_slices != whole.num_slices) return false;
  }
  return true;
}
void grouped_gemm(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* const* weights,
                  int N, float* y, cudaStream_t stream) {
  grouped_gemm_impl(-1, x, row_offsets, G, max_rows, K, weights, nullptr, N, y, stream);
}
void grouped_gemm(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* const* weights,
                  int N, bf16* y, cudaStream_t stream) {
  grouped_gemm_impl(-1, x, row_offsets, G, max_rows, K, weights, nullptr, N, y, stream);
}
void grouped_gemm_stacked(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* stacked,
                          int N, float* y, cudaStream_t stream) {
  grouped_gemm_impl(-1, x, row_offsets, G, max_rows, K, nullptr, stacked, N, y, stream);
}
void grouped_gemm_stacked(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* stacked,
                          int N, bf16* y, cudaStream_t stream) {
  grouped_gemm_impl(-1, x, row_offsets, G, max_rows, K, nullptr, stacked, N, y, stream);
}
void grouped_gemm_stacked_side_by_side(const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                       const bf16* stacked, int N, bf16* y, cudaStream_t stream) {
  grouped_gemm_impl(-1, x, row_offsets, G, max_rows, K, nullptr, stacked, N, y, stream, G * N);
}
bool grouped_gemm_stacked_swiglu(const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                 const bf16* stacked, int N, float limit, bf16* h, cudaStream_t stream) {
  return grouped_swiglu_impl(-1, x, row_offsets, G, max_rows, K, stacked, N, limit, h, stream);
}

// Hooks for tests/cuda/gemm_test.cc and bench/cuda/gemm_bench.cc (declared there, not in gemm.h):
// run one tile configuration by index, so every configuration can be checked against the others.
namespace gemm_testing {
namespace {
// Whether the TMA tiles run K-wide calls on this device (operands aligned as the tests' are).
bool tma_device(int K) {
  alignas(16) static const bf16 probe[8] = {};
  return wgmma_path::usable(probe, probe, K);
}
}  // namespace
int config_count() { return kNumConfigs; }
const char* config_name(int config) { return config >= 0 && config < kNumConfigs ? kConfigNames[config] : "?"; }
int slice_count(int N, int K) { return plan_slices(N, K).num_slices; }
bool config_runs_as_is(int config, int N, int K) {
  const SlicePlan plan = plan_slices(N, K);
  return legal_config(config, plan, tma_device(K)) == config;
}
int auto_config(int M, int N, int K) {
  const SlicePlan plan = plan_slices(N, K);
  const bool tma = tma_device(K);
  return legal_config(choose_config(M, M, 0, N, plan, tma), plan, tma);
}
void gemm_with_config(int config, const bf16* x, int M, int K, const bf16* W, int N, float* y, cudaStream_t stream) {
  gemm_impl(config, x, M, K, W, N, y, stream);
}
void gemm_with_config(int config, const bf16* x, int M, int K, const bf16* W, int N, bf16* y, cudaStream_t stream) {
  gemm_impl(config, x, M, K, W, N, y, stream);
}
void gemm_split_with_config(int config, const bf16* x, int M, int K, const bf16* W, const GemmOutput* outputs,
                            int count, cudaStream_t stream) {
  gemm_split_impl(config, x, M, K, W, outputs, count, stream);
}
void grouped_gemm_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                              const bf16* const* weights, int N, float* y, cudaStream_t stream) {
  grouped_gemm_impl(config, x, row_offsets, G, max_rows, K, weights, nullptr, N, y, stream);
}
void grouped_gemm_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                              const bf16* const* weights, int N, bf16* y, cudaStream_t stream) {
  grouped_gemm_impl(config, x, row_offsets, G, max_rows, K, weights, nullptr, N, y, stream);
}
void grouped_gemm_stacked_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                      const bf16* stacked, int N, float* y, cudaStream_t stream) {
  grouped_gemm_impl(config, x, row_offsets, G, max_rows, K, nullptr, stacked, N, y, stream);
}
void grouped_gemm_stacked_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                      const bf16* stacked, int N, bf16* y, cudaStream_t stream) {
  grouped_gemm_impl(config, x, row_offsets, G, max_rows, K, nullptr, stacked, N, y, stream);
}
void grouped_gemm_stacked_side_by_side_with_config(int config, const bf16* x, const int* row_offsets, int G,
                                                   int max_rows, int K, const bf16* stacked, int N, bf16* y,
                                                   cudaStream_t stream) {
  grouped_gemm_impl(config, x, row_offsets, G, max_rows, K, nullptr, stacked, N, y, stream, G * N);
}
bool grouped_gemm_stacked_swiglu_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows,
                                             int K, const bf16* stacked, int N, float limit, bf16* h,
                                             cudaStream_t stream) {
  return grouped_swiglu_impl(config, x, row_offsets, G, max_rows, K, stacked, N, limit, h, stream);
}
}  // namespace gemm_testing

}  // namespace deepinfer::backend::cuda
