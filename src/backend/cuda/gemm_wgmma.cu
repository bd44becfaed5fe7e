// Large-M bf16 GEMM tiles on Hopper (sm_90a): TMA loads into 128B-swizzled shared memory, a
// producer warp and two consumer warpgroups issuing wgmma.mma_async m64n128k16 (bf16 in, fp32
// accumulate), synchronised by mbarriers. The contract (and why the bits equal the mma.sync tiles of
// gemm.cu) is in gemm_wgmma.h.
//
// Tile: 128 rows of x (consumer warpgroup c owns rows [64 c, 64 c + 64)) by BN = 128, 192 or 256
// weight rows (one m64nBNk16 instruction per k16 step), k-tiles of 64 (128 bytes per row = one swizzle
// row). K % 64 == 0, so every k-tile is whole and the 4 k16 steps of a tile are all real: no padded
// step is ever issued (the mma.sync tiles skip chunks past K, so a padded +0 step could flip the
// sign of an exact zero).
//
// Slices (gemm.cu's plan: S consecutive slices of C k-tiles, C a multiple of 4): the accumulator
// restarts at zero at each slice start and, with S > 1, is folded into a register total that starts
// at zero: total = (((0 + p_0) + p_1) + ...), the order of every other tile of gemm.cu.
//
// Shared memory (1024-aligned): kStages x {A tile 128 x 64 bf16 (16 KB), B tile BN x 64 bf16}, then
// 2 x kStages mbarriers ("full": TMA bytes landed; "empty": both consumers done reading).
// Matrix descriptor of a K-major 128B-swizzled tile (PTX "Matrix Descriptor Format"): start address
// >> 4 in bits 0-13, leading byte offset (unused for this layout, 1) in 16-29, stride byte offset
// 1024 >> 4 (8 rows x 128 B) in 32-45, swizzle mode 1 (128B) in 62-63; the k16 step kk of a k-tile
// starts 32 kk bytes into the row (descriptor + 2 kk).
#include "backend/cuda/gemm_wgmma.h"

#include <cuda.h>  // CUtensorMap and its enums (types only; the encoder comes from the runtime)
#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tma_common.cuh"

namespace deepinfer::backend::cuda::wgmma_path {
namespace {

using namespace gemm_common;
using namespace tma_common;

constexpr int kTileK = 64;
constexpr int kStepsPerTile = 4;  // k16 steps
constexpr int kWarpgroup = 128;
constexpr int kMaxSlices = 8;  // portable cluster size (gemm.cu's plan never exceeds it)

// How the S slice partials of a tile meet (see gemm.cu): kFold — one CTA runs every slice and folds
// its accumulators into a register total; kNone — plans with S == 1 only; kCluster — the S CTAs of a
// thread-block cluster run one slice each and sum the partials through distributed shared memory in
// rank order (small M: S times more CTAs stream the weights).
enum class Mode { kFold, kNone, kCluster };

// kConsumers warpgroups, consumer c owning x rows [64 c, 64 c + 64) of the tile and all BN columns
// (BN / 128 n128 instructions per k16 step); one producer warpgroup (a single thread issues TMA).
template <int kConsumers_, int BN_, Mode kMode_, int kSmemBudgetKB = 200>
struct Config {
  static constexpr int kConsumers = kConsumers_, BN = BN_, BM = 64 * kConsumers;
  static constexpr Mode kMode = kMode_;
  static constexpr int kThreads = kWarpgroup * (kConsumers + 1);
  static constexpr int kAcc = BN / 2;  // fp32 accumulators a consumer thread holds (m64nBN fragment)
  static constexpr int kMinBlocks = kSmemBudgetKB <= 113 ? 2 : 1;  // CTAs an SM must hold (registers)
  // The 128 x 192 fold holds 96 accumulators + 96 totals a consumer thread, more than the 168
  // registers a 384-thread CTA gets at launch: setmaxnreg moves 128 registers a thread from the
  // producer warpgroup (which needs few) to the consumers (168 -> 232; 2 x 128 x 64 = 128 x 128).
  // The 64 x 128 fold at two CTAs an SM (128 registers a thread at launch) holds 64 accumulators +
  // 64 totals a thread and spilled ~100 bytes a thread without the shift (ptxas -v); there the
  // consumers get 216 (128 x 40 + 128 x 216 = 256 x 128).
  static constexpr bool kRegisterShift = kMode == Mode::kFold && (BN > 128 || kMinBlocks == 2);
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 216;
  static constexpr int kATileBytes = BM * kTileK * 2, kBTileBytes = BN * kTileK * 2;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kStages = (kSmemBudgetKB * 1024) / kStageBytes;
  static constexpr int kPipelineBytes = kStages * kStageBytes;
  static constexpr int kPartialStride = BN + 8;  // floats; +8 keeps the float2 stores conflict-free
  static constexpr int kPartialBytes = kMode == Mode::kCluster ? BM * kPartialStride * 4 : 0;
  static constexpr int kBarrierOffset = kPipelineBytes > kPartialBytes ? kPipelineBytes : kPartialBytes;
  static constexpr int kSmemBytes = kBarrierOffset + 16 * kStages + 1024;  // + slack for 1024 alignment
  static_assert(kStages >= 3 && kSmemBytes <= 232448, "shared memory per block");
  static_assert(BN == 128 || BN == 192 || BN == 256, "one m64nBNk16 instruction per k16 step");
  static_assert(kMode != Mode::kFold || BN <= 192, "96 accumulators + 96 totals per thread at most");
  // setmaxnreg moves registers inside the CTA's launch allocation: 65536 / (threads x CTAs an SM)
  // a thread, rounded down to 8.
  static_assert(!kRegisterShift || kWarpgroup * (kProducerRegs + kConsumers * kConsumerRegs) <=
                                       kThreads * (65536 / (kThreads * kMinBlocks) / 8 * 8),
                "setmaxnreg split beyond the launch allocation");
};

using CfgM128N128Fold = Config<2, 128, Mode::kFold>;
// Large M with several slices: 128 x 192 reads 20% fewer operand bytes from L2 per multiply-add than
// 128 x 128 (x once per 192 weight rows) and still folds its slices in registers (setmaxnreg).
using CfgM128N192Fold = Config<2, 192, Mode::kFold>;
using CfgM128N256 = Config<2, 256, Mode::kNone>;
using CfgM64N128Cluster = Config<1, 128, Mode::kCluster>;
// Half the stages (4 x 24 KB), two CTAs per SM: one CTA's pipeline fill overlaps the other's stream.
using CfgM64N128ClusterTwoPerSm = Config<1, 128, Mode::kCluster, 100>;
// Mid M (a few hundred rows, too few 128-row tiles for a wave without slices): the 128-row tile
// split over cluster slices reads each weight tile once per 128 rows instead of once per 64.
using CfgM128N128Cluster = Config<2, 128, Mode::kCluster>;
// Grouped experts at a few dozen rows each: x is re-read once per 256 weight rows instead of 128.
using CfgM64N256Cluster = Config<1, 256, Mode::kCluster>;
// Large M where the 128 x 256 tile cannot fold its slices in registers (128 accumulators a thread
// leave no room for 128 totals): the S CTAs of a cluster take one slice each of a 128 x 256 tile.
using CfgM128N256Cluster = Config<2, 256, Mode::kCluster>;
// Grouped experts at a few dozen rows each, memory-bound: one CTA streams a 128-row weight tile
// through every slice (4x the bytes a CTA of the cluster tile streams for K = 4096), so its launch,
// pipeline fill and epilogue are paid once per tile instead of once per slice; two CTAs per SM
// overlap one's fill with the other's stream.
using CfgM64N128FoldTwoPerSm = Config<1, 128, Mode::kFold, 100>;
// Dense, about one wave of 64 x 128 tiles over a deep K (256 rows of 4096-wide weights): the same
// fold at one CTA per SM, 8 stages of 24 KB in flight (no register cap, no spills).
using CfgM64N128Fold = Config<1, 128, Mode::kFold, 200>;

struct Params {
  const int* row_offsets;  // grouped: [G + 1]
  OutTarget out;
  int M;  // dense rows
  int N, K, num_groups;
  int num_ktiles, slice_ktiles, num_slices;
  int m_tiles, n_tiles;
};

// d[64 x 128] += A[64 x 16] * B[128 x 16]^T, both K-major in shared memory, fp32 accumulate.
// Fragment: d[4 j + 2 h + e] is (row 16 warp + lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e).
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{" DEEPINFER_WGMMA_ACC64_PLACEHOLDERS_0 "}, "
      "%64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : DEEPINFER_WGMMA_ACC64(d)
      : "l"(desc_a), "l"(desc_b), "n"(1));
}

// d[64 x 192] += A[64 x 16] * B[192 x 16]^T. The m64nN fragment continues the m64n128 one column-wise:
// d[4 j + 2 h + e] is (row 16 warp + lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e), j < N / 8.
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
      "{" DEEPINFER_WGMMA_ACC64_PLACEHOLDERS_0 "," DEEPINFER_WGMMA_ACC32_PLACEHOLDERS_64 "}, "
      "%96, %97, p, 1, 1, 0, 0;\n"
      "}\n"
      : DEEPINFER_WGMMA_ACC64(d), DEEPINFER_WGMMA_ACC32(d + 64)
      : "l"(desc_a), "l"(desc_b), "n"(1));
}

// One k16 step of a consumer's m64nBN fragment.
template <int BN>
__device__ __forceinline__ void wgmma_step(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (BN == 128)
    wgmma_m64n128k16(d, desc_a, desc_b);
  else if constexpr (BN == 192)
    wgmma_m64n192k16(d, desc_a, desc_b);
  else
    wgmma_m64n256k16(d, desc_a, desc_b);
}

template <class Cfg, class OutT, bool kGrouped>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                      const Params p) {
  // Programmatic dependent launch: grouped calls wait for their predecessors at once (the row
  // offsets come from earlier kernels); dense calls first start streaming their weights (which no
  // kernel writes) and wait only before the first x load and before storing y.
  if constexpr (kGrouped)
    pdl_prologue();
  else
    allow_dependent_launch();
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)p;
  __trap();  // built for a device without wgmma: usable() never selects this path there
#else
  namespace cg = cooperative_groups;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int BM = Cfg::BM, BN = Cfg::BN, kAcc = Cfg::kAcc, kStages = Cfg::kStages;
  constexpr int kConsumers = Cfg::kConsumers, kThreads = Cfg::kThreads;
  constexpr bool kFold = Cfg::kMode == Mode::kFold, kCluster = Cfg::kMode == Mode::kCluster;
  // The dynamic base rounded up to 1024 bytes (the group scan's static shared memory may precede it).
  const uint32_t raw_base = shared_address(smem_raw);
  const uint32_t smem_base = (raw_base + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (smem_base - raw_base);
  const uint32_t full_bar = smem_base + Cfg::kBarrierOffset;
  const uint32_t empty_bar = full_bar + 8 * kStages;

  const int tid = static_cast<int>(threadIdx.x);
  const int warpgroup = tid / kWarpgroup;  // 0..kConsumers-1: consumers; kConsumers: producer

  // --- Which tile, which slice (cluster: the S CTAs of a cluster share the tile, slice = rank).
  int tile_index = static_cast<int>(blockIdx.x), slice = 0;
  if constexpr (kCluster) {
    if (p.num_slices > 1) {
      slice = static_cast<int>(cg::this_cluster().block_rank());
      tile_index /= p.num_slices;
    }
  }
  int n_tile, row_begin, row_end, w_row_begin, group = 0, group_row0 = 0;
  if constexpr (kGrouped) {
    // Same blockIdx.y for every CTA of a cluster, so a whole cluster leaves together.
    if (!locate_group_rows<kThreads>(p.row_offsets, p.num_groups, BM, static_cast<int>(blockIdx.y), group, row_begin,
                                     row_end, &group_row0))
      return;
    n_tile = tile_index;
    w_row_begin = group * p.N + n_tile * BN;  // rows of the stacked weights
  } else {
    const int m_tile = raster_tile(tile_index, p.m_tiles, p.n_tiles, n_tile);
    row_begin = m_tile * BM;
    row_end = min(p.M, row_begin + BM);
    w_row_begin = n_tile * BN;
  }
  const int n_begin = n_tile * BN, N = p.N;
  int kt_begin = 0, kt_end = p.num_ktiles;
  if constexpr (kCluster) {
    kt_begin = slice * p.slice_ktiles;
    kt_end = min(kt_begin + p.slice_ktiles, p.num_ktiles);
  }
  const int num_tiles = kt_end - kt_begin;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);                // the producer's arrive + the TMA bytes
      mbar_init(empty_bar + 8 * s, 4 * kConsumers);  // lane 0 of every consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  float acc[kAcc];  // consumers: this thread's m64nBN fragment (set to zero in their branch)

  if (warpgroup == kConsumers) {
    // ===================== Producer: one thread issues both TMA loads of every k-tile.
    if constexpr (Cfg::kRegisterShift)
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Cfg::kProducerRegs) : "memory");
    if (tid == kConsumers * kWarpgroup) {
      // k-tile t into its stage: the stage's barrier expects both tiles' bytes (x and weights).
      const auto stage_tile = [&](int t) { return smem_base + static_cast<uint32_t>(t % kStages * Cfg::kStageBytes); };
      const auto full = [&](int t) { return full_bar + 8 * (t % kStages); };
      const auto load_x = [&](int t) { tma_load_2d(stage_tile(t), &map_x, (kt_begin + t) * kTileK, row_begin, full(t)); };
      const auto load_w = [&](int t) {
        tma_load_2d(stage_tile(t) + Cfg::kATileBytes, &map_w, (kt_begin + t) * kTileK, w_row_begin, full(t));
      };
      // Dense: the first stages' weight tiles before griddepcontrol.wait (a stage completes only
      // once its x tile, loaded after the wait, lands too).
      const int preloaded = kGrouped ? 0 : min(kStages, num_tiles);
      for (int t = 0; t < preloaded; ++t) {
        mbar_arrive_expect_tx(full(t), Cfg::kStageBytes);
        load_w(t);
      }
      if constexpr (!kGrouped) grid_dependency_wait();
      for (int t = 0; t < preloaded; ++t) load_x(t);
      for (int t = preloaded; t < num_tiles; ++t) {
        if (t >= kStages) mbar_wait(empty_bar + 8 * (t % kStages), static_cast<uint32_t>((t / kStages - 1) & 1));
        mbar_arrive_expect_tx(full(t), Cfg::kStageBytes);
        load_x(t);
        load_w(t);
      }
    }
    // After a register shift the producer must not reach code the consumers run with 232
    // registers (ptxas cannot allocate a join of both); a fold tile's producer has nothing left to do.
    if constexpr (Cfg::kRegisterShift) return;
  } else {
    // ===================== Consumers.
    if constexpr (Cfg::kRegisterShift)
      asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Cfg::kConsumerRegs) : "memory");
#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc[e] = 0.0f;
    [[maybe_unused]] float total[kFold ? kAcc : 1];
#pragma unroll
    for (int e = 0; e < kAcc; ++e)
      if constexpr (kFold) total[e] = 0.0f;
    const int lane = tid & 31;
    const uint32_t a_offset = static_cast<uint32_t>(warpgroup * 64 * 128);  // this consumer's 64 rows
    int pending = -1;  // k-tile whose wgmma group may still be reading its stage
    for (int t = 0; t < num_tiles; ++t) {
      const int stage = t % kStages;
      if constexpr (kFold) {
        if (t > 0 && t % p.slice_ktiles == 0) {
          // Slice boundary: total += p_s; the next slice's partial restarts at zero.
          wgmma_wait<0>();
          fence_registers(acc);
#pragma unroll
          for (int e = 0; e < kAcc; ++e) {
            total[e] += acc[e];
            acc[e] = 0.0f;
          }
          if (pending >= 0 && lane == 0) mbar_arrive(empty_bar + 8 * (pending % kStages));
          pending = -1;
        }
      }
      mbar_wait(full_bar + 8 * stage, static_cast<uint32_t>((t / kStages) & 1));
      const uint32_t a_tile = smem_base + static_cast<uint32_t>(stage * Cfg::kStageBytes);
      const uint64_t desc_a = smem_descriptor(a_tile + a_offset);
      const uint64_t desc_b = smem_descriptor(a_tile + Cfg::kATileBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kStepsPerTile; ++kk) wgmma_step<BN>(acc, desc_a + 2 * kk, desc_b + 2 * kk);
      wgmma_commit();
      wgmma_wait<1>();  // the previous k-tile's group has finished reading its stage
      if (pending >= 0 && lane == 0) mbar_arrive(empty_bar + 8 * (pending % kStages));
      pending = t;
    }
    wgmma_wait<0>();
    fence_registers(acc);
    if constexpr (kFold) {
      if (p.num_slices > 1) {
#pragma unroll
        for (int e = 0; e < kAcc; ++e) acc[e] = total[e] + acc[e];
      }
    }
  }

  // Dense: y may still be read by a predecessor until it completes (a no-op once the producer's
  // wait returned, which every consumer's first full barrier already implies; cheap insurance).
  if constexpr (!kGrouped) grid_dependency_wait();
  const int lane = tid & 31, warp_in_group = (tid >> 5) & 3;
  const int frag_row = warpgroup * 64 + warp_in_group * 16 + (lane >> 2);  // + 8 h
  const int frag_col = (lane & 3) * 2;                                      // + 8 j

  const TileOut<OutT> out_tile = tile_output<OutT>(p.out, N, n_begin, group, group_row0);  // once per tile

  if constexpr (kCluster) {
    if (p.num_slices > 1) {
      // This slice's partial -> own shared memory [BM][kPartialStride] fp32 (the pipeline is free:
      // every load has landed and every wgmma completed once all threads pass the barrier).
      __syncthreads();
      float* const partial = reinterpret_cast<float*>(smem);
      if (warpgroup < kConsumers) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(partial + (frag_row + 8 * h) * Cfg::kPartialStride + 8 * j + frag_col) =
                make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // every partial of the cluster written and visible
      sum_cluster_partials<BM, BN, Cfg::kPartialStride, kThreads, OutT>(cluster, partial, p.num_slices, slice,
                                                                        row_begin, row_end, n_begin, N, out_tile);
      cluster.sync();  // keep this CTA's shared memory alive until every rank has read it
      return;
    }
  }
  if (warpgroup == kConsumers) return;

  // Direct epilogue from the fragments: one row pointer per h, the 8 j column steps as constant
  // offsets from it (per-(j, h) pointers would hold 2 x BN / 8 64-bit addresses next to the
  // accumulators).
  if constexpr (kSwigluOut<OutT>) {
    // Gate columns 8 j + frag_col (+1) and their up columns 8 (j + 1) + frag_col (+1), j even: two
    // consecutive h values (N % 16 == 0 and n_begin % 16 == 0, so a block is whole or absent).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = row_begin + frag_row + 8 * h;
      if (m >= row_end) continue;
      bf16* const row = out_tile.at(m, h_column(n_begin) + frag_col);
#pragma unroll
      for (int j = 0; j < BN / 8; j += 2) {
        if (n_begin + 8 * j >= N) break;
        store_swiglu_two(row + 4 * j, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], acc[4 * (j + 1) + 2 * h],
                         acc[4 * (j + 1) + 2 * h + 1], out_tile.limit);
      }
    }
    return;
  }
  const bool pair_store = (N & 1) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = row_begin + frag_row + 8 * h;
    if (m >= row_end) continue;
    const int n0 = n_begin + frag_col;
    auto* const row = out_tile.at(m, n0);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int n = n0 + 8 * j;
      if (n >= N) break;
      const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (pair_store) {
        store_two(row + 8 * j, v0, v1);
      } else {
        store_one(row + 8 * j, v0);
        if (n + 1 < N) store_one(row + 8 * j + 1, v1);
      }
    }
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Row-major bf16 [rows, K] as a 2D tensor map with boxes of 64 k x box_rows rows, 128B swizzle,
// zeros outside.
CUtensorMap make_map(const bf16* base, long long rows, int K, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(K) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kTileK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) fail("wgmma gemm: cuTensorMapEncodeTiled failed", static_cast<long long>(r));
  return map;
}

template <class Cfg, class OutT, bool kGrouped>
void launch(const Problem& pr, cudaStream_t stream) {
  const auto kernel = wgmma_gemm_kernel<Cfg, OutT, kGrouped>;
  static std::atomic<uint64_t> smem_attribute_devices{0};
  opt_in_shared_memory(kernel, Cfg::kSmemBytes, smem_attribute_devices);
  Params p = {};
  p.row_offsets = pr.row_offsets;
  p.out = pr.out;
  p.M = pr.x_rows;
  p.N = pr.N;
  p.K = pr.K;
  p.num_groups = pr.num_groups;
  p.num_ktiles = pr.K / kTileK;
  p.slice_ktiles = pr.slice_ktiles;
  p.num_slices = pr.num_slices;
  p.n_tiles = (pr.N + Cfg::BN - 1) / Cfg::BN;
  p.m_tiles = (pr.x_rows + Cfg::BM - 1) / Cfg::BM;
  const long long w_rows = kGrouped ? static_cast<long long>(pr.num_groups) * pr.N : pr.N;
  const CUtensorMap map_x = make_map(pr.x, pr.x_rows, pr.K, Cfg::BM);
  const CUtensorMap map_w = make_map(pr.w, w_rows, pr.K, Cfg::BN);
  const bool cluster = Cfg::kMode == Mode::kCluster && pr.num_slices > 1;
  if (cluster && pr.num_slices > kMaxSlices) fail("wgmma gemm: more slices than a portable cluster", pr.num_slices);
  cudaLaunchConfig_t config;
  cudaLaunchAttribute attribute[1];
  if (!gemm_launch_config(kGrouped, p.m_tiles, p.n_tiles, cluster ? pr.num_slices : 1, pr.x_rows, pr.num_groups,
                          Cfg::BM, Cfg::kThreads, Cfg::kSmemBytes, stream, config, attribute))
    return;
  (void)cudaLaunchKernelEx(&config, kernel, map_x, map_w, p);  // errors surface at the caller's next CUDA call
}

template <class Cfg>
void run_config(const Problem& pr, cudaStream_t stream) {
  const bool grouped = pr.num_groups > 0;
  if (pr.output == Output::kSwigluBf16) {
    if (!grouped || pr.N % 16 != 0) fail("wgmma gemm: the SwiGLU epilogue needs a grouped call with N % 16 == 0", pr.N);
    launch<Cfg, SwigluPairs, true>(pr, stream);
  } else if (pr.output == Output::kBf16) {
    grouped ? launch<Cfg, bf16, true>(pr, stream) : launch<Cfg, bf16, false>(pr, stream);
  } else {
    grouped ? launch<Cfg, float, true>(pr, stream) : launch<Cfg, float, false>(pr, stream);
  }
}

}  // namespace

bool usable(const bf16* x, const bf16* w, int K) {
  const auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
  return K > 0 && K % kTileK == 0 && aligned(x) && aligned(w) && encoder() != nullptr && device_is_sm90();
}

void run(const Problem& pr, Tile tile, cudaStream_t stream) {
  if (pr.K % kTileK != 0 || pr.slice_ktiles <= 0) fail("wgmma gemm: K must be a multiple of 64", pr.K);
  if (tile == Tile::kM128N256 && pr.num_slices != 1) fail("wgmma gemm: the 128x256 tile folds no slices", pr.num_slices);
  if (pr.x_rows <= 0 || pr.N <= 0) return;
  switch (tile) {
    case Tile::kM128N128Fold: run_config<CfgM128N128Fold>(pr, stream); break;
    case Tile::kM128N192Fold: run_config<CfgM128N192Fold>(pr, stream); break;
    case Tile::kM128N256: run_config<CfgM128N256>(pr, stream); break;
    case Tile::kM64N128Cluster: run_config<CfgM64N128Cluster>(pr, stream); break;
    case Tile::kM64N128ClusterTwoPerSm: run_config<CfgM64N128ClusterTwoPerSm>(pr, stream); break;
    case Tile::kM128N128Cluster: run_config<CfgM128N128Cluster>(pr, stream); break;
    case Tile::kM64N256Cluster: run_config<CfgM64N256Cluster>(pr, stream); break;
    case Tile::kM128N256Cluster: run_config<CfgM128N256Cluster>(pr, stream); break;
    case Tile::kM64N128FoldTwoPerSm: run_config<CfgM64N128FoldTwoPerSm>(pr, stream); break;
    case Tile::kM64N128Fold: run_config<CfgM64N128Fold>(pr, stream); break;
  }
}

}  // namespace deepinfer::backend::cuda::wgmma_path
