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
// The 32 fp32 accumulators of an m64n64 wgmma fragment as asm operands ("+f"); an m64n128 fragment
// is two of them (DEEPINFER_WGMMA_ACC64), an m64n192 instruction's last 64 columns one (operands
// %64..%95 after a 64-accumulator fragment).
#define DEEPINFER_WGMMA_ACC32(d) \
  "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), "+f"((d)[4]), "+f"((d)[5]), \
  "+f"((d)[6]), "+f"((d)[7]), "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), \
  "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]), "+f"((d)[16]), "+f"((d)[17]), \
  "+f"((d)[18]), "+f"((d)[19]), "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]), \
  "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), "+f"((d)[28]), "+f"((d)[29]), \
  "+f"((d)[30]), "+f"((d)[31])
// The 64 fp32 accumulators of one thread's m64n128 wgmma fragment as asm operands ("+f"), and their
// placeholders %0..%63 / %64..%127 (an m64n256 instruction takes two fragments back to back), shared
// by the wgmma wrappers of gemm_wgmma.cu and fp8_wgmma.cu.
#define DEEPINFER_WGMMA_ACC64(d) DEEPINFER_WGMMA_ACC32(d), DEEPINFER_WGMMA_ACC32((d) + 32)
#define DEEPINFER_WGMMA_ACC64_PLACEHOLDERS_0 \
  "%0, %1, %2, %3, %4, %5, %6, %7," \
  "%8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23," \
  "%24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35, %36, %37, %38, %39," \
  "%40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55," \
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define DEEPINFER_WGMMA_ACC32_PLACEHOLDERS_64 \
  "%64, %65, %66, %67, %68, %69, %70, %71," \
  "%72, %73, %74, %75, %76, %77, %78, %79," \
  "%80, %81, %82, %83, %84, %85, %86, %87," \
  "%88, %89, %90, %91, %92, %93, %94, %95"
#define DEEPINFER_WGMMA_ACC64_PLACEHOLDERS_64 \
  DEEPINFER_WGMMA_ACC32_PLACEHOLDERS_64 "," \
  "%96, %97, %98, %99, %100, %101, %102, %103," \
  "%104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119," \
  "%120, %121, %122, %123, %124, %125, %126, %127"

// d[64 x 256] += A[64 x 16] * B[16 x 256], both operands from shared memory (descriptors), fp32
// accumulate. A is K-major; B is K-major ([256 x 16], kTransB false: the GEMMs' weight tiles) or
// MN-major ([16 x 256], imm-trans-b: attention_wgmma.cu's V rows). d[4 j + 2 h + e] is (row 16 warp +
// lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e) of the warpgroup's fragment. (The GEMMs' 256-wide
// consumer reads A once instead of once per n128 half.)
template <bool kTransB = false>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{" DEEPINFER_WGMMA_ACC64_PLACEHOLDERS_0 "," DEEPINFER_WGMMA_ACC64_PLACEHOLDERS_64 "}, "
      "%128, %129, p, 1, 1, 0, %131;\n"
      "}\n"
      : DEEPINFER_WGMMA_ACC64(d), DEEPINFER_WGMMA_ACC64(d + 64)
      : "l"(desc_a), "l"(desc_b), "n"(1), "n"(kTransB ? 1 : 0));
}

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
