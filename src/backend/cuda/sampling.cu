// Greedy sampling and token hand-over on the GPU (the contracts are in ops.h): greedy_rows picks
// each row's argmax and its log-probability in a batch-invariant order; scatter_tokens feeds those
// tokens to the next step's inputs on the device.
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cuda/ops.h"
#include "backend/cuda/ops_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "base/check.h"

namespace deepinfer::backend::cuda {
namespace {

using namespace ops_common;

// ---------------------------------------------------------------------------------------------
// greedy_rows: each row cut into P parts (P from V alone: batch invariance), one CTA per (part,
// row). Thread t scans the part's ids t, t + 256, ... (strict > keeps the lowest id), (value, id)
// pairs meet in a fixed tree (larger value wins, the lower id on equal values), then the part's
// sum of exp(x - part max) in a fixed order. A second kernel, one warp per row, takes the parts'
// best in part order and the total sum_p s_p exp(m_p - max) in part order. (One CTA per row left a
// batch-1 step's 129k-logit row to a single SM: ~20 us.)

constexpr int kGreedyThreads = 256;
constexpr int kGreedyPartIds = 4096;  // ids a part covers, about
constexpr int kGreedyMaxParts = 32;
constexpr int kGreedyRegs = 16;  // ids a thread holds in registers (4096 a part)

__host__ __device__ constexpr int greedy_parts(int V) {
  return (V + kGreedyPartIds - 1) / kGreedyPartIds < 1                ? 1
         : (V + kGreedyPartIds - 1) / kGreedyPartIds > kGreedyMaxParts ? kGreedyMaxParts
                                                                        : (V + kGreedyPartIds - 1) / kGreedyPartIds;
}

struct ValId {
  float v;
  int id;
};
__device__ __forceinline__ ValId better(ValId a, ValId b) {
  return (b.v > a.v || (b.v == a.v && b.id < a.id)) ? b : a;
}

// part_out[(row * P + part) * 3 + {0, 1, 2}] = part max, its id (as int bits), sum exp(x - part max).
__global__ void __launch_bounds__(kGreedyThreads)
    greedy_parts_kernel(const float* __restrict__ logits, int V, float* __restrict__ part_out) {
  pdl_prologue();
  __shared__ ValId warp_best[kGreedyThreads / 32];
  __shared__ float warp_sum_s[kGreedyThreads / 32];
  __shared__ ValId best_s;
  const int P = static_cast<int>(gridDim.x), part = static_cast<int>(blockIdx.x), row = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int begin = static_cast<int>(static_cast<long long>(V) * part / P);
  const int end = static_cast<int>(static_cast<long long>(V) * (part + 1) / P);
  const float* x = logits + static_cast<size_t>(row) * V;
  // Parts of up to kGreedyThreads * kGreedyRegs ids (every V up to 131072) hold their values in
  // registers: all loads in flight at once and one read of the row instead of two. Same ids per
  // thread in the same order as the loop below, so the same bits.
  const bool in_registers = end - begin <= kGreedyThreads * kGreedyRegs;
  float vals[kGreedyRegs];
  ValId b{-INFINITY, INT_MAX};
  if (in_registers) {
#pragma unroll
    for (int i = 0; i < kGreedyRegs; ++i) {
      const int v = begin + tid + i * kGreedyThreads;
      vals[i] = v < end ? x[v] : -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < kGreedyRegs; ++i)
      if (vals[i] > b.v) b = ValId{vals[i], begin + tid + i * kGreedyThreads};
  } else {
    for (int v = begin + tid; v < end; v += kGreedyThreads) {
      const float a = x[v];
      if (a > b.v) b = ValId{a, v};
    }
  }
  for (int off = 16; off > 0; off >>= 1)
    b = better(b, ValId{__shfl_xor_sync(kFullMask, b.v, off), __shfl_xor_sync(kFullMask, b.id, off)});
  if (lane == 0) warp_best[warp] = b;
  __syncthreads();
  if (tid == 0) {
    ValId r = warp_best[0];
    for (int w = 1; w < kGreedyThreads / 32; ++w) r = better(r, warp_best[w]);
    best_s = r;
  }
  __syncthreads();
  const ValId r = best_s;
  const bool finite = isfinite(r.v);
  float sum = 0.0f;
  if (finite && in_registers) {
#pragma unroll
    for (int i = 0; i < kGreedyRegs; ++i)
      if (begin + tid + i * kGreedyThreads < end) sum += expf(vals[i] - r.v);
  } else if (finite) {
    for (int v = begin + tid; v < end; v += kGreedyThreads) sum += expf(x[v] - r.v);
  }
  sum = warp_sum(sum);
  if (lane == 0) warp_sum_s[warp] = sum;
  __syncthreads();
  if (tid == 0) {
    float total = 0.0f;
    for (int w = 0; w < kGreedyThreads / 32; ++w) total += warp_sum_s[w];
    float* out = part_out + (static_cast<size_t>(row) * P + part) * 3;
    out[0] = r.v;
    out[1] = __int_as_float(r.id);
    out[2] = total;
  }
}

__global__ void __launch_bounds__(32)
    greedy_combine_kernel(const float* __restrict__ logits, int V, int P, const float* __restrict__ part_in,
                          int32_t* token, float* logprob) {
  pdl_prologue();
  const int row = static_cast<int>(blockIdx.x), lane = static_cast<int>(threadIdx.x);
  const float* in = part_in + static_cast<size_t>(row) * P * 3;
  ValId b{-INFINITY, INT_MAX};
  if (lane < P) b = ValId{in[3 * lane], __float_as_int(in[3 * lane + 1])};
  for (int off = 16; off > 0; off >>= 1)
    b = better(b, ValId{__shfl_xor_sync(kFullMask, b.v, off), __shfl_xor_sync(kFullMask, b.id, off)});
  if (lane != 0) return;
  if (!(b.v > -INFINITY)) b = ValId{-INFINITY, 0};
  const bool finite = isfinite(b.v);
  float total = 0.0f;
  if (finite)
    for (int p = 0; p < P; ++p)  // part order
      if (in[3 * p] > -INFINITY) total += in[3 * p + 2] * expf(in[3 * p] - b.v);
  const float log_z = finite ? b.v + logf(total) : b.v;
  token[row] = b.id;
  logprob[row] = logits[static_cast<size_t>(row) * V + b.id] - log_z;
}

}  // namespace

size_t greedy_workspace_bytes(int R, int V) {
  return static_cast<size_t>(std::max(R, 0)) * greedy_parts(std::max(V, 1)) * 3 * sizeof(float);
}

void greedy_rows(const float* logits, int R, int V, int32_t* token, float* logprob, void* workspace,
                 cudaStream_t stream) {
  if (R <= 0) return;
  DI_CHECK(V > 0 && workspace != nullptr, "V = %d", V);
  DI_CHECK(R <= 65535, "R = %d", R);
  const int P = greedy_parts(V);
  float* parts = static_cast<float*>(workspace);
  greedy_parts_kernel<<<dim3(static_cast<unsigned>(P), static_cast<unsigned>(R)), kGreedyThreads, 0, stream>>>(
      logits, V, parts);
  greedy_combine_kernel<<<static_cast<unsigned>(R), 32, 0, stream>>>(logits, V, P, parts, token, logprob);
}

namespace {
__global__ void scatter_tokens_kernel(int32_t* tokens, const int32_t* pairs, int n, const int32_t* source) {
  pdl_prologue();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) tokens[pairs[2 * i]] = source[pairs[2 * i + 1]];
}
}  // namespace

void scatter_tokens(int32_t* tokens, const int32_t* pairs, int n, const int32_t* source, cudaStream_t stream) {
  if (n <= 0) return;
  scatter_tokens_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(tokens, pairs, n, source);
}

}  // namespace deepinfer::backend::cuda
