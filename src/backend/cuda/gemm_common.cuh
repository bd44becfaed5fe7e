// Pieces shared by the GEMM kernels of gemm.cu (mma.sync) and gemm_wgmma.cu (TMA + wgmma): PTX
// wrappers, output stores, the grouped-GEMM tile scan and host-side device queries. Internal to the
// GEMM library; device code needs sm_80+ (cp.async, ldmatrix), all of it present on sm_90.
#pragma once

#include "backend/cuda/gemm_output.h"
#include "backend/cuda/swiglu.cuh"

#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace deepinfer::backend::cuda::gemm_common {

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_80+ instructions, all available on sm_90).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy global -> shared; src_bytes == 0 writes zeros without reading src.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
// d += a(16x16, row) * b(16x8, col), fp32 accumulate.
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared-memory tiles are [rows][BK] bf16 stored as 16-byte vectors; vector c of row r sits at
// slot c ^ swizzle(r), so the 8 rows an ldmatrix phase reads hit 8 distinct 16-byte bank groups.
template <int kVecsPerRow>
__device__ __forceinline__ uint32_t tile_offset(int row, int vec) {
  static_assert(kVecsPerRow == 4 || kVecsPerRow == 8 || kVecsPerRow == 16 || kVecsPerRow == 32,
                "BK must be 32, 64, 128 or 256");
  const int swizzle = kVecsPerRow >= 8 ? (row & 7) : ((row >> 1) & 3);
  return static_cast<uint32_t>((row * kVecsPerRow + (vec ^ swizzle)) * 16);
}

// Programmatic dependent launch (sm_90): wait until the grids this one depends on have completed
// and their writes are visible (returns at once for a grid launched without the PDL attribute);
// let the grids that depend on this one start launching (they still wait before reading its output).
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// Output stores (global memory). The pair and quad forms are explicit vector instructions: an
// aggregate store through a float2* may be split into scalar stores when the compiler loses the
// pointer's alignment, which cost the fp32-output epilogues up to a third of their time (2026-12-05:
// the 128 x 256 tile's 4k-prefill q up-projection 2.26 -> 3.35 ms). p must be 8 (pair) or 16 (quad)
// byte aligned, as the callers' (even / multiple-of-4 column, even / multiple-of-4 row stride) are.
__device__ __forceinline__ void store_one(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_one(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_two(float* p, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void store_two(bf16* p, float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  asm volatile("st.global.b32 [%0], %1;\n" ::"l"(p), "r"(*reinterpret_cast<const uint32_t*>(&v)) : "memory");
}
__device__ __forceinline__ void store_four(float* p, float4 v) {
  asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void store_four(bf16* p, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(p), "r"(*reinterpret_cast<const uint32_t*>(&lo)),
               "r"(*reinterpret_cast<const uint32_t*>(&hi))
               : "memory");
}

// ---------------------------------------------------------------------------------------------
// Dense tiles in raster groups of kRasterM m-tiles: CTAs that run together share W columns in L2.
// Returns the m tile of `tile_index` (of m_tiles x n_tiles) and sets n_tile.
constexpr int kRasterM = 8;
__device__ __forceinline__ int raster_tile(int tile_index, int m_tiles, int n_tiles, int& n_tile) {
  const int group_size = kRasterM * n_tiles;
  const int first_m = (tile_index / group_size) * kRasterM;
  const int group_m = min(m_tiles - first_m, kRasterM);
  const int in_group = tile_index % group_size;
  n_tile = in_group / group_m;
  return first_m + in_group % group_m;
}

// ---------------------------------------------------------------------------------------------
// Grouped: slot `slot` is the slot-th non-empty (group, row tile) pair in group order. Every CTA
// recomputes the per-group tile counts from the device offsets with a block-wide scan (O(G)).
template <int kThreads>
__device__ bool locate_group_tile(const int* row_offsets, int num_groups, int bm, int slot, int& group, int& tile) {
  constexpr int kWarps = kThreads / 32;
  __shared__ int warp_sums[kWarps];
  __shared__ int found_group, found_tile;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  if (tid == 0) found_group = -1;
  int tiles_before = 0;  // tiles of the groups of earlier passes
  for (int base = 0; base < num_groups; base += kThreads) {
    const int g = base + tid;
    int tiles = 0;
    if (g < num_groups) {
      const int rows = row_offsets[g + 1] - row_offsets[g];
      tiles = rows > 0 ? (rows + bm - 1) / bm : 0;
    }
    int inclusive = tiles;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += v;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    int before_warp = 0, pass_total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int s = warp_sums[w];
      before_warp += w < warp ? s : 0;
      pass_total += s;
    }
    const int end = tiles_before + before_warp + inclusive;
    if (tiles > 0 && slot >= end - tiles && slot < end) {
      found_group = g;
      found_tile = slot - (end - tiles);
    }
    tiles_before += pass_total;
    __syncthreads();  // found_* visible to all; warp_sums free for the next pass
    if (found_group >= 0 || tiles_before > slot) break;
  }
  group = found_group;
  tile = found_tile;
  return group >= 0;
}
// locate_group_tile, and the tile's rows: [row_begin, row_end) of the row-stacked input, at most bm;
// `group_begin` (optional) receives the group's first row, row_offsets[group].
template <int kThreads>
__device__ bool locate_group_rows(const int* row_offsets, int num_groups, int bm, int slot, int& group,
                                  int& row_begin, int& row_end, int* group_begin = nullptr) {
  int tile;
  if (!locate_group_tile<kThreads>(row_offsets, num_groups, bm, slot, group, tile)) return false;
  const int begin = row_offsets[group];
  if (group_begin != nullptr) *group_begin = begin;
  row_begin = begin + tile * bm;
  row_end = min(row_offsets[group + 1], row_begin + bm);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Output type tag of the SwiGLU epilogue (OutTarget::swiglu_limit): the kernels instantiated with
// OutT = SwigluPairs write bf16 h [rows, N / 2], h[m, i] = swiglu_act(y[m, gate col], y[m, up col])
// over the gate|up interleaved columns of swiglu.cuh, instead of y. Requires N % 16 == 0.
struct SwigluPairs {};
template <class OutT>
inline constexpr bool kSwigluOut = std::is_same_v<OutT, SwigluPairs>;
// Element type of the array a tile writes.
template <class OutT>
using StoredT = std::conditional_t<kSwigluOut<OutT>, bf16, OutT>;

// h[i], h[i + 1] from the gate values (g0, g1) of columns 8 j + c, 8 j + c + 1 and the up values
// (u0, u1) of columns 8 (j + 1) + c, ... (j even): one 4-byte store, p 4-byte aligned.
__device__ __forceinline__ void store_swiglu_two(bf16* p, float g0, float g1, float u0, float u1, float limit) {
  store_two(p, swiglu_act(g0, u0, limit), swiglu_act(g1, u1, limit));
}

// ---------------------------------------------------------------------------------------------
// One tile's output (resolved once per tile from an OutTarget, gemm_output.h): element (m, n) at
// y[(m - row0) * ld + n - col0]. A plain target gives (y, N, 0, 0); gemm_split's the run holding the
// tile; a side-by-side grouped target (y + g N, group_ld, 0, row_offsets[g]) for the tile's group g
// (`group`, `group_row0`: 0 for dense calls). SwiGLU (SwigluPairs): (h, N / 2, 0, 0), and `at` takes
// an h column (swiglu.cuh's h_column), not a GEMM column.
template <class OutT>
struct TileOut {
  StoredT<OutT>* y;
  int ld, col0, row0;
  float limit;  // SwigluPairs only
  __device__ __forceinline__ StoredT<OutT>* at(int m, int n) const {
    return y + static_cast<size_t>(m - row0) * ld + (n - col0);
  }
};
template <class OutT>
__device__ __forceinline__ TileOut<OutT> tile_output(const OutTarget& t, int N, int n_begin, int group = 0,
                                                     int group_row0 = 0) {
  if constexpr (kSwigluOut<OutT>) {
    return {static_cast<bf16*>(t.y), N / 2, 0, 0, t.swiglu_limit};
  } else {
    if (t.group_ld > 0)
      return {static_cast<OutT*>(t.y) + static_cast<size_t>(group) * N, t.group_ld, 0, group_row0, 0.0f};
    TileOut<OutT> o{static_cast<OutT*>(t.y), N, 0, 0, 0.0f};
#pragma unroll
    for (int j = 0; j < kMaxOutputRuns; ++j)
      if (j < t.runs && n_begin >= t.run_begin[j])
        o = {static_cast<OutT*>(t.run_y[j]), t.run_width[j], t.run_begin[j], 0, 0.0f};
    return o;
  }
}

// ---------------------------------------------------------------------------------------------
// The slice partials of a cluster meet (the tiles that spread K slices over the CTAs of a
// thread-block cluster): the CTA of rank `rank` sums rows [rank * ceil(BM / S), ...) of the BM x BN
// tile over the partials of ranks 0..S-1 in rank order, starting from zero (the register fold's
// order), and stores the rows that exist (row_begin + r < row_end, n_begin + c < N) through the
// tile's output (a plain [rows, N] array is TileOut{y, N, 0}). `partial` is
// this CTA's [BM][kStride] fp32 tile in shared memory; call it between two cluster.sync()s (the
// first makes every partial visible, the second keeps them alive until every rank has read them).
template <int BM, int BN, int kStride, int kThreads, class OutT>
__device__ void sum_cluster_partials(cooperative_groups::cluster_group& cluster, float* partial, int num_slices,
                                     int rank, int row_begin, int row_end, int n_begin, int N,
                                     const TileOut<OutT>& out_tile) {
  const int tid = static_cast<int>(threadIdx.x);
  const int rows_per_rank = (BM + num_slices - 1) / num_slices;
  const int r0 = rank * rows_per_rank, r1 = min(BM, r0 + rows_per_rank);
  const auto sum_ranks = [&](int offset) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = 0; q < num_slices; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(partial, q) + offset);
      sum.x = __fadd_rn(sum.x, v.x);
      sum.y = __fadd_rn(sum.y, v.y);
      sum.z = __fadd_rn(sum.z, v.z);
      sum.w = __fadd_rn(sum.w, v.w);
    }
    return sum;
  };
  if constexpr (kSwigluOut<OutT>) {
    // Four gate columns c .. c + 3 (c % 16 in {0, 4}) with their up columns c + 8 .. c + 11, summed
    // over the ranks alike, give four consecutive h values (N % 16 == 0: the up columns exist too).
    static_assert(BN % (2 * kGateUpBlock) == 0, "whole gate|up blocks per tile");
    constexpr int kGateVec4PerRow = BN / 8;
    for (int i = tid; i < (r1 - r0) * kGateVec4PerRow; i += kThreads) {
      const int r = r0 + i / kGateVec4PerRow, q = i % kGateVec4PerRow;
      const int c = (q / 2) * 2 * kGateUpBlock + (q % 2) * 4;
      const int m = row_begin + r, n = n_begin + c;
      if (m >= row_end || n >= N) continue;
      const float4 g = sum_ranks(r * kStride + c), u = sum_ranks(r * kStride + c + kGateUpBlock);
      const float4 h = make_float4(swiglu_act(g.x, u.x, out_tile.limit), swiglu_act(g.y, u.y, out_tile.limit),
                                   swiglu_act(g.z, u.z, out_tile.limit), swiglu_act(g.w, u.w, out_tile.limit));
      store_four(out_tile.at(m, h_column(n)), h);
    }
    return;
  }
  constexpr int kVec4PerRow = BN / 4;
  const bool vector_store = (N & 3) == 0;
  for (int i = tid; i < (r1 - r0) * kVec4PerRow; i += kThreads) {
    const int r = r0 + i / kVec4PerRow, c = (i % kVec4PerRow) * 4;
    const int m = row_begin + r, n = n_begin + c;
    if (m >= row_end || n >= N) continue;  // padding rows / columns: nothing to store
    const float4 sum = sum_ranks(r * kStride + c);
    auto* const out = out_tile.at(m, n);
    if (vector_store && n + 3 < N) {
      store_four(out, sum);
    } else {
      const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
      for (int e = 0; e < 4 && n + e < N; ++e) store_one(out + e, vals[e]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
constexpr int kMaxCachedDevices = 64;

inline int current_device() {
  int device = 0;
  (void)cudaGetDevice(&device);
  return device;
}

// An attribute of the current device, queried once per device; `fallback` where the query fails
// (not a launch error of the caller's, so the error state is cleared).
template <cudaDeviceAttr kAttribute>
int device_attribute(int fallback) {
  static std::atomic<int> cache[kMaxCachedDevices];  // value + 1; 0 = not queried yet
  const int device = current_device();
  const bool cached = device >= 0 && device < kMaxCachedDevices;
  if (cached) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known - 1;
  }
  int value = fallback;
  if (cudaDeviceGetAttribute(&value, kAttribute, device) != cudaSuccess) {
    (void)cudaGetLastError();
    value = fallback;
  }
  if (cached) cache[device].store(value + 1, std::memory_order_relaxed);
  return value;
}
inline int sm_count() { return device_attribute<cudaDevAttrMultiProcessorCount>(132); }  // else an H100/H200
inline bool device_is_sm90() {
  return device_attribute<cudaDevAttrComputeCapabilityMajor>(0) == 9 &&
         device_attribute<cudaDevAttrComputeCapabilityMinor>(-1) == 0;
}

[[noreturn]] inline void fail(const char* what, long long value) {
  std::fprintf(stderr, "deepinfer cuda gemm: %s (%lld)\n", what, value);
  std::abort();
}

// Grouped row-tile slots: sum_g ceil(rows_g / BM) < max_rows / BM + G, and each non-empty tile
// holds at least one row.
inline long long grouped_slots(int max_rows, int num_groups, int bm) {
  return std::min<long long>((static_cast<long long>(max_rows) + bm - 1) / bm + num_groups, max_rows);
}

// Opts `kernel` in to `bytes` of dynamic shared memory, once per device (devices: a per-kernel
// bit set of the devices already done).
template <class KernelPtr>
void opt_in_shared_memory(KernelPtr kernel, int bytes, std::atomic<uint64_t>& devices) {
  const int device = current_device();
  const uint64_t device_bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (device_bit == 0 || (devices.load(std::memory_order_relaxed) & device_bit) == 0) {
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    devices.fetch_or(device_bit, std::memory_order_relaxed);
  }
}

// Launch setup shared by the GEMM kernels: grid = (dense: m_tiles x n_tiles, grouped: n_tiles) x
// cta_per_tile CTAs by (grouped: the row-tile slots of max_rows rows in num_groups groups of
// bm-row tiles); with cluster_slices > 1 the CTAs of a tile form a cluster of that size (attribute
// written to attrs[0]). Returns false when there is nothing to launch; aborts past the grid limits.
inline bool gemm_launch_config(bool grouped, long long m_tiles, long long n_tiles, int cluster_slices,
                               int grouped_max_rows, int num_groups, int bm, int threads, int smem_bytes,
                               cudaStream_t stream, cudaLaunchConfig_t& config, cudaLaunchAttribute* attrs) {
  const int ctas_per_tile = cluster_slices > 1 ? cluster_slices : 1;
  long long grid_x = n_tiles * ctas_per_tile, grid_y = 1;
  if (grouped) {
    grid_y = grouped_slots(grouped_max_rows, num_groups, bm);
    if (grid_y > 65535) fail("grouped_gemm: too many row tiles for grid.y", grid_y);
  } else {
    grid_x *= m_tiles;
  }
  if (grid_x > 0x7fffffffLL) fail("gemm: too many tiles for grid.x", grid_x);
  if (grid_x == 0 || grid_y == 0) return false;
  config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y), 1);
  config.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 0;
  if (cluster_slices > 1) {
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = static_cast<unsigned>(cluster_slices);
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    config.numAttrs = 1;
  }
  return true;
}

}  // namespace deepinfer::backend::cuda::gemm_common
