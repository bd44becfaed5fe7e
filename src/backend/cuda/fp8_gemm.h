// Batch-invariant block-scaled FP8 GEMMs (sm_90, mma.sync m16n8k32 e4m3) for release numerics:
// DeepSeek's official checkpoint formats, used when a projection's weight is FP8 or FP4.
//
// Operands (device pointers, row-major):
//  * A: e4m3 codes [M, K] (uint8) + scales sa [M, KB] float, KB = ceil(K / 128):
//      a[m, k] = e4m3(codes[m, k]) * sa[m, k / 128].
//  * FP8 weight: e4m3 codes [N, K] + scales sw [ceil(N / 128), KB] float (128 x 128 blocks):
//      w[n, k] = e4m3(codes[n, k]) * sw[n / 128, k / 128].
//  * FP4 weight: e2m1 codes packed two per byte along K (low nibble = even k) [N, K / 2] + scales
//    sw4 [N, K / 32] float: w[n, k] = e2m1(code) * sw4[n, k / 32].
//  * y: [M, N] fp32, or bf16 (the fp32 result rounded to nearest even).
//
// Math (the same operation sequence for every M, row position and tile configuration):
//  * FP8 weight: P_b = sum over the k of 128-block b of codes products (tensor-core mma, fp32
//    accumulator starting at 0 for each block, one m16n8k32 step per 32 k in increasing k), then
//    acc = acc + P_b * (sa[m, b] * sw[n / 128, b]) with separately rounded fp32 operations.
//  * FP4 weight: the same per 32-k chunk c: P_c = one mma from 0, acc = acc + P_c * (sa[m, c / 4] *
//    sw4[n, c]).
//  * K may be cut into S consecutive slices of whole blocks, S and the cut chosen from (N, K) only;
//    slice partials (each an acc starting at 0) are summed in slice order: y = ((0 + p_0) + p_1) ...
//    (y = p_0 when S = 1). So y[m, n] depends only on A's row m, W's row n, their scales, N and K.
//
// Preconditions (checked on the host; a violation prints file:line and aborts): K % 32 == 0, K > 0,
// N % 8 == 0, every pointer 16-byte aligned (codes rows are then 16-byte multiples because of K).
// M (or max_rows) may be 0 (no launch). Asynchronous on `stream`: no allocation, no synchronization,
// capturable in a CUDA graph; launch errors surface at the next CUDA call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::backend::cuda::fp8 {

using bf16 = __nv_bfloat16;

void gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, float* y, cudaStream_t stream);
void gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, bf16* y, cudaStream_t stream);
void gemm_fp4(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_packed,
              const float* w_scales, int N, float* y, cudaStream_t stream);
void gemm_fp4(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_packed,
              const float* w_scales, int N, bf16* y, cudaStream_t stream);

// Grouped (MoE experts): group g owns rows [row_offsets[g], row_offsets[g + 1]) of A, sa and y and
// multiplies them by weight g (w_codes[g], w_scales[g]). row_offsets (G + 1 ints) and the pointer
// arrays (G each) are DEVICE arrays; max_rows is a host bound on row_offsets[G] that sizes the grid.
// Every row equals, bit for bit, the plain call on that row alone with group g's weight.
void grouped_gemm_fp8(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_codes, const float* const* w_scales, int N, float* y,
                      cudaStream_t stream);
void grouped_gemm_fp8(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_codes, const float* const* w_scales, int N, bf16* y,
                      cudaStream_t stream);
void grouped_gemm_fp4(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_packed, const float* const* w_scales, int N, float* y,
                      cudaStream_t stream);
void grouped_gemm_fp4(const uint8_t* codes_a, const float* scales_a, const int* row_offsets, int G, int max_rows,
                      int K, const uint8_t* const* w_packed, const float* const* w_scales, int N, bf16* y,
                      cudaStream_t stream);

// Activation quantizer (release numerics): per row and 128-block, amax = max |x| (NaN ignored),
// s = 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))) (exponent bit trick, model::pow2_ceil_scale),
// code = e4m3(x / s) rounded to nearest even, saturating at +-448 (model::round_e4m3). scales is
// [M, ceil(K / 128)]. e4m3(code) * s equals model::fp8_round_trip's value (and, for bf16 input,
// fp8_round_trip_rows's bf16 output) bit for bit. K > 0, any K; codes rows are K bytes.
void quantize_fp8_rows(const bf16* x, int M, int K, uint8_t* codes, float* scales, cudaStream_t stream);
void quantize_fp8_rows(const float* x, int M, int K, uint8_t* codes, float* scales, cudaStream_t stream);

// Test and tuning hooks (tests/cuda/fp8_gemm_test.cc, bench/cuda/fp8_gemm_bench.cc): run one tile
// configuration by index; config < 0 is the automatic choice. Output is bf16 when `bf16_out`.
namespace testing {
int config_count();
const char* config_name(int config);
int slice_count(int N, int K);
int auto_config(int M, int N, int K);
void gemm_with_config(int config, bool fp4, const uint8_t* codes_a, const float* scales_a, int M, int K,
                      const uint8_t* w, const float* w_scales, int N, void* y, bool bf16_out, cudaStream_t stream);
void grouped_gemm_with_config(int config, bool fp4, const uint8_t* codes_a, const float* scales_a,
                              const int* row_offsets, int G, int max_rows, int K, const uint8_t* const* w,
                              const float* const* w_scales, int N, void* y, bool bf16_out, cudaStream_t stream);
}  // namespace testing

// FP8 weights on Hopper's native FP8 tensor cores (TMA + wgmma m64n128k32 e4m3, sm_90a). The math
// above for FP8 weights, with P_b the wgmma's sum over the block: NOT bitwise the mma.sync functions'
// P_b (ptxas runs those on f16 tensor cores), so one model uses one family for every M. Batch
// invariant within the family: slices of whole blocks chosen from (N, K) only, every tile the same
// sequence per element. Needs K % 128 == 0, 16-byte aligned codes, an sm_90 device; returns false
// (and launches nothing) where it cannot run.
namespace tma {
bool gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, float* y, cudaStream_t stream);
bool gemm_fp8(const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w_codes,
              const float* w_scales, int N, bf16* y, cudaStream_t stream);
namespace testing {
int config_count();
const char* config_name(int config);
int slice_count(int N, int K);
bool gemm_with_config(int config, const uint8_t* codes_a, const float* scales_a, int M, int K, const uint8_t* w,
                      const float* w_scales, int N, void* y, bool bf16_out, cudaStream_t stream);
}  // namespace testing
}  // namespace tma

}  // namespace deepinfer::backend::cuda::fp8
