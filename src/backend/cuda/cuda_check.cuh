// CUDA_CHECK(expr): evaluates a CUDA runtime call once; on any error prints file:line, the
// expression and cudaGetErrorString, then aborts. For internal invariants only: host helpers that
// must report errors to a caller return them as Status instead (cuda_model.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(expr)                                                                                      \
  do {                                                                                                        \
    const cudaError_t deepinfer_cuda_err_ = (expr);                                                           \
    if (deepinfer_cuda_err_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", __FILE__, __LINE__,                          \
                   cudaGetErrorName(deepinfer_cuda_err_), cudaGetErrorString(deepinfer_cuda_err_), #expr);    \
      std::abort();                                                                                           \
    }                                                                                                         \
  } while (0)
