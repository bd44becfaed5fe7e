// Pieces shared by the GEMM kernels of gemm.cu (mma.sync) and gemm_wgmma.cu (TMA + wgmma): PTX
// wrappers, output stores, the grouped-GEMM tile scan and host-side device queries. Internal to the
// GEMM library; device code needs sm_80+ (cp.async, ldmatrix), all of it present on sm_90.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

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

__device__ __forceinline__ void store_one(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_one(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_two(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store_two(bf16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_four(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void store_four(bf16* p, float4 v) {
  store_two(p, v.x, v.y);
  store_two(p + 2, v.z, v.w);
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

// ---------------------------------------------------------------------------------------------
// Host side.
constexpr int kMaxCachedDevices = 64;

inline int current_device() {
  int device = 0;
  (void)cudaGetDevice(&device);
  return device;
}

inline int sm_count() {
  static std::atomic<int> cache[kMaxCachedDevices];  // 0 = not queried yet
  const int device = current_device();
  const bool cached = device >= 0 && device < kMaxCachedDevices;
  if (cached) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();  // not a launch error of the caller's; assume an H100/H200
    count = 132;
  }
  if (cached) cache[device].store(count, std::memory_order_relaxed);
  return count;
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

}  // namespace deepinfer::backend::cuda::gemm_common
