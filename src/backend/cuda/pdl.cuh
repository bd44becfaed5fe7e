// Programmatic dependent launch (sm_90) for the kernels of a captured step. Every kernel of the
// CUDA backend starts with pdl_prologue(): wait until the grids it depends on have completed and
// their writes are visible, then allow the grids that depend on it to be scheduled (they run the
// same prologue, so they still wait for this one). cuda_model.cu turns the kernel-to-kernel edges
// of its decode graphs programmatic, so a kernel's blocks are dispatched while its predecessor
// drains instead of after it; launched any other way, both instructions return at once.
#pragma once

namespace deepinfer::backend::cuda {

__device__ __forceinline__ void pdl_prologue() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace deepinfer::backend::cuda
