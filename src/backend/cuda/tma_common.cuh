// Pieces shared by the TMA + wgmma kernels (gemm_wgmma.cu: bf16, fp8_wgmma.cu: e4m3): mbarrier,
// TMA and wgmma PTX wrappers, the K-major 128B-swizzled matrix descriptor, and the host's
// cuTensorMapEncodeTiled. Device code needs sm_90a (wgmma, cp.async.bulk.tensor); the kernels that
// use it are built for it and never selected elsewhere.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only; the encoder comes from the runtime)
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::backend::cuda::tma_common {

// ---------------------------------------------------------------------------------------------
// mbarriers (shared::cta).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(bar)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
// Waits until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// 2D TMA load of the box at (c0 = column, c1 = row) of `map` into shared memory; completes on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// ---------------------------------------------------------------------------------------------
// wgmma bookkeeping.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across wgmma_wait (the tensor cores
// write the registers asynchronously).
template <int kN>
__device__ __forceinline__ void fence_registers(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Matrix descriptor of a K-major 128B-swizzled tile (PTX "Matrix Descriptor Format"): start address
// >> 4 in bits 0-13, leading byte offset (unused for this layout, 1) in 16-29, stride byte offset
// 1024 >> 4 (8 rows x 128 B) in 32-45, swizzle mode 1 (128B) in 62-63.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t addr) {
  uint64_t desc = static_cast<uint64_t>((addr & 0x3FFFFu) >> 4);
  desc |= static_cast<uint64_t>(16u >> 4) << 16;
  desc |= static_cast<uint64_t>(1024u >> 4) << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

// ---------------------------------------------------------------------------------------------
// Host: cuTensorMapEncodeTiled, fetched from the driver through the runtime (no link against
// libcuda); null where the driver has none.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiledFn encoder() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult result{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &result) !=
            cudaSuccess ||
        result != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

}  // namespace deepinfer::backend::cuda::tma_common
