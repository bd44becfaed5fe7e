// Block-scaled FP8 GEMM on Hopper's native FP8 tensor cores (sm_90a): TMA loads of e4m3 codes into
// 128B-swizzled stages, one producer thread, one consumer warpgroup issuing wgmma.mma_async
// m64n128k32 e4m3 x e4m3 -> fp32. The contract is fp8_gemm.h's `tma` section.
//
// A k-tile is 128 k = one scale block b (128 bytes per row = one swizzle row). Per block the
// consumer zeroes a partial, issues 4 k32 steps, waits for them (P_b is the tensor core's sum,
// from zero), then promotes in fp32 with separately rounded operations:
//   acc = acc + P_b * (sa[m, b] * sw[n / 128, b]).
// Slices (whole blocks, chosen from (N, K) only): each slice's acc starts at zero; S > 1 partials
// meet as (((0 + p_0) + p_1) + ...) — in registers (fold tile) or through distributed shared memory
// in rank order (cluster tile). Every tile runs this sequence for every element, so y[m, n] depends
// on A's row m, W's row n, their scales, N and K only.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tma_common.cuh"

namespace deepinfer::backend::cuda::fp8::tma {
namespace {

using namespace gemm_common;
using namespace tma_common;

constexpr int kBlockK = 128;  // k per tile = per scale block = bytes per smem row
constexpr int kBM = 64, kBN = 128;
constexpr int kThreads = 256;  // one consumer warpgroup + one producer warpgroup
constexpr int kATileBytes = kBM * kBlockK, kBTileBytes = kBN * kBlockK;
constexpr int kStageBytes = kATileBytes + kBTileBytes;  // 24 KB
constexpr int kStages = 8;
constexpr int kPartialStride = kBN + 8;
constexpr int kPipelineBytes = kStages * kStageBytes;
constexpr int kBarrierOffset = kPipelineBytes;  // > kBM * kPartialStride * 4
constexpr int kSmemBytes = kBarrierOffset + 16 * kStages + 1024;
constexpr int kMaxSlices = 8;
static_assert(kBM * kPartialStride * 4 <= kPipelineBytes, "the cluster partial reuses the pipeline");

enum ConfigId { kCluster, kFold, kNumConfigs };
constexpr const char* kConfigNames[kNumConfigs] = {"tma_m64n128_cluster", "tma_m64n128_fold"};

struct SlicePlan {
  int blocks, slice_blocks, num_slices;
};
// (N, K) only: enough CTAs to stream W at small M (n-tiles x S >= ~128), at least 2 blocks a slice.
SlicePlan plan_slices(int N, int K) {
  const int blocks = K / kBlockK;
  const long long n_tiles = (static_cast<long long>(N) + kBN - 1) / kBN;
  int target = 1;
  while (target < kMaxSlices && n_tiles * target < 128 && blocks / (2 * target) >= 2) target *= 2;
  const int slice_blocks = (blocks + target - 1) / target;
  return {blocks, slice_blocks, (blocks + slice_blocks - 1) / slice_blocks};
}

struct Params {
  const float* sa;  // [M, KB]
  const float* sw;  // [ceil(N / 128), KB]
  void* y;
  int M, N, KB;
  int slice_blocks, num_slices;
  int m_tiles, n_tiles;
};

// d[64 x 128] += A[64 x 32] * B[128 x 32]^T, e4m3 codes K-major in shared memory (FP8 wgmma has no
// transpose operands). Fragment: d[4 j + 2 h + e] is (row 16 warp + lane / 4 + 8 h, column
// 8 j + 2 (lane % 4) + e).
__device__ __forceinline__ void wgmma_e4m3_m64n128k32(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{" DEEPINFER_WGMMA_ACC64_PLACEHOLDERS_0 "}, "
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : DEEPINFER_WGMMA_ACC64(d)
      : "l"(desc_a), "l"(desc_b), "n"(1));
}

template <bool kClusterMode, class OutT>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                     const Params p) {
  pdl_prologue();
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)p;
  __trap();  // built for a device without wgmma: usable() never selects this path there
#else
  namespace cg = cooperative_groups;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw_base = shared_address(smem_raw);
  const uint32_t smem_base = (raw_base + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (smem_base - raw_base);
  const uint32_t full_bar = smem_base + kBarrierOffset;
  const uint32_t empty_bar = full_bar + 8 * kStages;
  const int tid = static_cast<int>(threadIdx.x), warpgroup = tid / 128, lane = tid & 31;

  int tile_index = static_cast<int>(blockIdx.x), slice = 0;
  if constexpr (kClusterMode) {
    if (p.num_slices > 1) {
      slice = static_cast<int>(cg::this_cluster().block_rank());
      tile_index /= p.num_slices;
    }
  }
  int n_tile = 0;
  const int m_tile = raster_tile(tile_index, p.m_tiles, p.n_tiles, n_tile);
  const int row_begin = m_tile * kBM, row_end = min(p.M, row_begin + kBM), n_begin = n_tile * kBN, N = p.N;
  int b_begin = 0, b_end = p.KB;
  if constexpr (kClusterMode) {
    b_begin = slice * p.slice_blocks;
    b_end = min(b_begin + p.slice_blocks, p.KB);
  }
  const int num_tiles = b_end - b_begin;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, 4);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  float acc[64];
#pragma unroll
  for (int e = 0; e < 64; ++e) acc[e] = 0.0f;

  if (warpgroup == 1) {
    // Producer: weights and activations of every block; weights do not depend on earlier kernels.
    if (tid == 128) {
      for (int t = 0; t < num_tiles; ++t) {
        const int stage = t % kStages;
        if (t >= kStages) mbar_wait(empty_bar + 8 * stage, static_cast<uint32_t>((t / kStages - 1) & 1));
        const uint32_t a_tile = smem_base + static_cast<uint32_t>(stage * kStageBytes);
        const int k0 = (b_begin + t) * kBlockK;
        mbar_arrive_expect_tx(full_bar + 8 * stage, kStageBytes);
        tma_load_2d(a_tile + kATileBytes, &map_w, k0, n_begin, full_bar + 8 * stage);
        tma_load_2d(a_tile, &map_a, k0, row_begin, full_bar + 8 * stage);
      }
    }
  } else {
    // Consumer: this thread's rows and the block's scales.
    const int warp = tid >> 5;
    const int r0 = row_begin + warp * 16 + (lane >> 2), r1 = r0 + 8;
    float total[64];
#pragma unroll
    for (int e = 0; e < 64; ++e) total[e] = 0.0f;
    float part[64];
    for (int t = 0; t < num_tiles; ++t) {
      const int stage = t % kStages, b = b_begin + t;
      if constexpr (!kClusterMode) {
        if (t > 0 && t % p.slice_blocks == 0) {  // slice boundary: total += p_s, next slice from zero
#pragma unroll
          for (int e = 0; e < 64; ++e) {
            total[e] = __fadd_rn(total[e], acc[e]);
            acc[e] = 0.0f;
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 64; ++e) part[e] = 0.0f;
      mbar_wait(full_bar + 8 * stage, static_cast<uint32_t>((t / kStages) & 1));
      const uint32_t a_tile = smem_base + static_cast<uint32_t>(stage * kStageBytes);
      const uint64_t desc_a = smem_descriptor(a_tile), desc_b = smem_descriptor(a_tile + kATileBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 32; ++kk) wgmma_e4m3_m64n128k32(part, desc_a + 2 * kk, desc_b + 2 * kk);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(part);
      if (lane == 0) mbar_arrive(empty_bar + 8 * stage);
      // Promotion: acc + P_b * (sa * sw), each operation rounded on its own.
      const float sw = p.sw[static_cast<size_t>(n_tile) * p.KB + b];
      const float sa0 = r0 < row_end ? p.sa[static_cast<size_t>(r0) * p.KB + b] : 0.0f;
      const float sa1 = r1 < row_end ? p.sa[static_cast<size_t>(r1) * p.KB + b] : 0.0f;
      const float s0 = __fmul_rn(sa0, sw), s1 = __fmul_rn(sa1, sw);
#pragma unroll
      for (int e = 0; e < 64; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(part[e], (e & 2) ? s1 : s0));
    }
    if constexpr (!kClusterMode) {
      if (p.num_slices > 1) {
#pragma unroll
        for (int e = 0; e < 64; ++e) acc[e] = __fadd_rn(total[e], acc[e]);
      }
    }
  }

  OutT* const y = static_cast<OutT*>(p.y);
  const int frag_row = (tid >> 5 & 3) * 16 + (lane >> 2);  // + 8 h (consumer threads)
  const int frag_col = (lane & 3) * 2;                     // + 8 j
  if constexpr (kClusterMode) {
    if (p.num_slices > 1) {
      __syncthreads();  // every load landed and every wgmma done: the pipeline memory is free
      float* const partial = reinterpret_cast<float*>(smem);
      if (warpgroup == 0) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(partial + (frag_row + 8 * h) * kPartialStride + 8 * j + frag_col) =
                make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();
      sum_cluster_partials<kBM, kBN, kPartialStride, kThreads, OutT>(cluster, partial, p.num_slices, slice, row_begin,
                                                                     row_end, n_begin, N, TileOut<OutT>{y, N, 0, 0});
      cluster.sync();
      return;
    }
  }
  if (warpgroup == 1) return;
  const bool pair_store = (N & 1) == 0;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int n = n_begin + 8 * j + frag_col;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = row_begin + frag_row + 8 * h;
      if (m >= row_end || n >= N) continue;
      OutT* out = y + static_cast<size_t>(m) * N + n;
      if (pair_store) {
        store_two(out, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      } else {
        store_one(out, acc[4 * j + 2 * h]);
        if (n + 1 < N) store_one(out + 1, acc[4 * j + 2 * h + 1]);
      }
    }
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side.
// Byte matrix [rows, K] as a 2D map with boxes of 128 bytes x box_rows rows, 128B swizzle, zeros outside.
CUtensorMap make_map(const uint8_t* base, long long rows, int K, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(K)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBlockK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) fail("fp8 tma gemm: cuTensorMapEncodeTiled failed", static_cast<long long>(r));
  return map;
}

bool device_is_sm90() {
  static std::atomic<int> cache[kMaxCachedDevices];  // 0 unknown, 1 yes, 2 no
  const int device = current_device();
  const bool cached = device >= 0 && device < kMaxCachedDevices;
  if (cached && cache[device].load(std::memory_order_relaxed) != 0) return cache[device].load() == 1;
  int major = 0, minor = 0;
  bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  ok = ok && major == 9 && minor == 0;
  if (cached) cache[device].store(ok ? 1 : 2, std::memory_order_relaxed);
  return ok;
}

bool usable(const void* a, const void* w, int K, int N) {
  const auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
  return K > 0 && K % kBlockK == 0 && N > 0 && aligned(a) && aligned(w) && encoder() != nullptr && device_is_sm90();
}

template <bool kClusterMode, class OutT>
void launch(const uint8_t* a, const float* sa, int M, int K, const uint8_t* w, const float* sw, int N, OutT* y,
            const SlicePlan& plan, cudaStream_t stream) {
  const auto kernel = fp8_wgmma_kernel<kClusterMode, OutT>;
  static std::atomic<uint64_t> smem_attribute_devices{0};
  opt_in_shared_memory(kernel, kSmemBytes, smem_attribute_devices);
  Params p = {};
  p.sa = sa;
  p.sw = sw;
  p.y = y;
  p.M = M;
  p.N = N;
  p.KB = plan.blocks;
  p.slice_blocks = plan.slice_blocks;
  p.num_slices = plan.num_slices;
  p.m_tiles = (M + kBM - 1) / kBM;
  p.n_tiles = (N + kBN - 1) / kBN;
  const CUtensorMap map_a = make_map(a, M, K, kBM);
  const CUtensorMap map_w = make_map(w, N, K, kBN);
  const int cluster_slices = kClusterMode ? plan.num_slices : 1;
  cudaLaunchConfig_t config;
  cudaLaunchAttribute attribute[1];
  if (!gemm_launch_config(false, p.m_tiles, p.n_tiles, cluster_slices, 0, 0, kBM, kThreads, kSmemBytes, stream, config,
                          attribute))
    return;
  (void)cudaLaunchKernelEx(&config, kernel, map_a, map_w, p);  // errors surface at the caller's next CUDA call
}

int choose_config(int M, int N) {
  const long long tiles = static_cast<long long>((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
  return tiles >= sm_count() ? kFold : kCluster;
}

template <class OutT>
bool gemm_impl(int config, const uint8_t* a, const float* sa, int M, int K, const uint8_t* w, const float* sw, int N,
               OutT* y, cudaStream_t stream) {
  if (!usable(a, w, K, N)) return false;
  if (M <= 0) return true;
  const SlicePlan plan = plan_slices(N, K);
  if (config < 0) config = choose_config(M, N);
  if (config == kFold)
    launch<false>(a, sa, M, K, w, sw, N, y, plan, stream);
  else
    launch<true>(a, sa, M, K, w, sw, N, y, plan, stream);
  return true;
}

}  // namespace

bool gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, float* y, cudaStream_t stream) {
  return gemm_impl(-1, codes_a, scales_a, M, K, w_codes, w_scales, N, y, stream);
}
bool gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, bf16* y, cudaStream_t stream) {
  return gemm_impl(-1, codes_a, scales_a, M, K, w_codes, w_scales, N, y, stream);
}

namespace testing {
int config_count() { return kNumConfigs; }
const char* config_name(int config) { return config >= 0 && config < kNumConfigs ? kConfigNames[config] : "?"; }
int slice_count(int N, int K) { return K > 0 && K % kBlockK == 0 ? plan_slices(N, K).num_slices : 0; }
bool gemm_with_config(int config, const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w,
                      const float* w_scales, int N, void* y, bool bf16_out, cudaStream_t stream) {
  return bf16_out ? gemm_impl(config, codes_a, scales_a, M, K, w, w_scales, N, static_cast<bf16*>(y), stream)
                  : gemm_impl(config, codes_a, scales_a, M, K, w, w_scales, N, static_cast<float*>(y), stream);
}
}  // namespace testing

}  // namespace deepinfer::backend::cuda::fp8::tma
