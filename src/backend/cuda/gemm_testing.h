// Test and tuning hooks of gemm.cu (not part of the gemm.h contract): run one tile configuration
// by index, ask which configuration and how many K slices the automatic choice uses. Used by
// tests/cuda/gemm_test.cc (every configuration must match the automatic one bitwise) and
// bench/cuda/gemm_bench.cc (--configs).
#pragma once

#include "backend/cuda/gemm.h"

namespace deepinfer::backend::cuda::gemm_testing {

int config_count();
const char* config_name(int config);
int slice_count(int N, int K);
bool config_runs_as_is(int config, int N, int K);
int auto_config(int M, int N, int K);
void gemm_with_config(int config, const bf16* x, int M, int K, const bf16* W, int N, float* y, cudaStream_t stream);
void gemm_with_config(int config, const bf16* x, int M, int K, const bf16* W, int N, bf16* y, cudaStream_t stream);
void grouped_gemm_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                              const bf16* const* weights, int N, float* y, cudaStream_t stream);
void grouped_gemm_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                              const bf16* const* weights, int N, bf16* y, cudaStream_t stream);
void gemm_split_with_config(int config, const bf16* x, int M, int K, const bf16* W, const GemmOutput* outputs,
                            int count, cudaStream_t stream);

void grouped_gemm_stacked_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                      const bf16* stacked, int N, float* y, cudaStream_t stream);
void grouped_gemm_stacked_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                      const bf16* stacked, int N, bf16* y, cudaStream_t stream);
void grouped_gemm_stacked_side_by_side_with_config(int config, const bf16* x, const int* row_offsets, int G,
                                                   int max_rows, int K, const bf16* stacked, int N, bf16* y,
                                                   cudaStream_t stream);
bool grouped_gemm_stacked_swiglu_with_config(int config, const bf16* x, const int* row_offsets, int G, int max_rows,
                                             int K, const bf16* stacked, int N, float limit, bf16* h,
                                             cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::gemm_testing
