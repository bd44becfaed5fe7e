// Programmatic dependent launch (sm_90) for the kernels of a captured step. Every kernel of the
// CUDA backend starts with pdl_prologue(): wait until the grids it depends on have completed and
// their writes are visible, then allow the grids that depend on it to be scheduled (they run the
// same prologue, so they still wait for this one). cuda_model.cu turns the kernel-to-kernel edges
// of its decode graphs programmatic, so a kernel's blocks are dispatched while its predecessor
// drains instead of after it; launched any other way, both instructions return at once.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deepinfer::backend::cuda {

__device__ __forceinline__ void pdl_prologue() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Called before pdl_prologue for data no kernel of the step writes (weights, RoPE tables): the
// grid's first CTA requests [p, p + bytes) into L2, one prefetch per 128-byte line spread over its
// threads. A decode step streams ~3 GB of weights through a 50 MB L2, so a small weight read after
// the wait is a DRAM miss on the step's chain; in a graph the CTAs start while the predecessor
// drains, and the miss overlaps that instead. Changes no value; p null or bytes 0: nothing.
__device__ __forceinline__ void prefetch_l2(const void* p, size_t bytes) {
  if (p == nullptr || bytes == 0 || blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0) return;
  const size_t threads = static_cast<size_t>(blockDim.x) * blockDim.y * blockDim.z;
  const size_t t = threadIdx.x + static_cast<size_t>(blockDim.x) * (threadIdx.y + static_cast<size_t>(blockDim.y) * threadIdx.z);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t a = (reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127}) + 128 * t; a < end; a += 128 * threads)
    asm volatile("prefetch.L2 [%0];\n" ::"l"(a));
}

}  // namespace deepinfer::backend::cuda
