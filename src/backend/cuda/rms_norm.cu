// Row-wise RMSNorm, fp32. One block per row; each row's sum of squares is reduced in a fixed
// order that depends only on n (the block size is a compile-time constant), so a row's result is
// bitwise identical whatever M is (batch invariance), and identical from run to run.

#include <cstddef>
#include <string>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_ops.h"

namespace deepinfer::backend::cuda {
namespace {

constexpr int kBlock = 256;  // threads per row; fixed, part of the reduction order
constexpr int kWarps = kBlock / 32;
static_assert(kBlock % 32 == 0 && kWarps <= 32, "block must be whole warps, at most 32 of them");

__global__ void __launch_bounds__(kBlock) rms_norm_kernel(const float* x, int n, const float* weight, float eps,
                                                          float* y) {
  const size_t row = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(n);
  const float* xr = x + row;
  float* yr = y + row;
  const int tid = static_cast<int>(threadIdx.x);

  // 1) Per-thread partial sums: thread t sums x[t], x[t + kBlock], ... in increasing order.
  float ss = 0.0f;
  for (int i = tid; i < n; i += kBlock) {
    const float v = xr[i];
    ss += v * v;
  }
  // 2) Butterfly within each warp (fixed pattern), 3) warp totals combined by warp 0 in the
  //    same fixed pattern. Every lane ends with the same value.
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  __shared__ float warp_sum[kWarps];
  __shared__ float inv_rms;
  const int warp = tid / 32, lane = tid % 32;
  if (lane == 0) warp_sum[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float t = lane < kWarps ? warp_sum[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    // Same expression as the CPU reference: 1 / sqrt(ss / n + eps), IEEE div and sqrt.
    if (lane == 0) inv_rms = 1.0f / sqrtf(t / static_cast<float>(n) + eps);
  }
  __syncthreads();  // also orders every read of x above before the writes below (in-place safe)
  const float r = inv_rms;

  if (weight != nullptr) {
    for (int i = tid; i < n; i += kBlock) yr[i] = weight[i] * (xr[i] * r);
  } else {
    for (int i = tid; i < n; i += kBlock) yr[i] = xr[i] * r;
  }
}

}  // namespace

void rms_norm_cuda(const float* x, int M, int n, const float* weight, float eps, float* y, cudaStream_t stream) {
  if (M <= 0 || n <= 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(M), kBlock, 0, stream>>>(x, n, weight, eps, y);
}

std::string rms_norm_cuda_host(const float* x, int M, int n, const float* weight, float eps, float* y) {
  if (M < 0 || n < 0) return "rms_norm_cuda_host: negative shape";
  if (M == 0 || n == 0) return "";
  const size_t elems = static_cast<size_t>(M) * static_cast<size_t>(n);
  const size_t bytes = elems * sizeof(float);
  float* d_x = nullptr;
  float* d_w = nullptr;
  float* d_y = nullptr;
  std::string err;
  auto check = [&err](cudaError_t e, const char* what) {
    if (e != cudaSuccess && err.empty()) err = std::string(what) + ": " + cudaGetErrorString(e);
    return err.empty();
  };
  if (check(cudaMalloc(&d_x, bytes), "cudaMalloc(x)") && check(cudaMalloc(&d_y, bytes), "cudaMalloc(y)") &&
      (weight == nullptr || check(cudaMalloc(&d_w, static_cast<size_t>(n) * sizeof(float)), "cudaMalloc(weight)")) &&
      check(cudaMemcpy(d_x, x, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(x)") &&
      (weight == nullptr ||
       check(cudaMemcpy(d_w, weight, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice),
             "cudaMemcpy(weight)"))) {
    rms_norm_cuda(d_x, M, n, d_w, eps, d_y, nullptr);
    if (check(cudaGetLastError(), "rms_norm_kernel launch") && check(cudaDeviceSynchronize(), "rms_norm_kernel"))
      check(cudaMemcpy(y, d_y, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(y)");
  }
  // Free whatever was allocated; a failure here is reported only if nothing failed before.
  if (d_x != nullptr) check(cudaFree(d_x), "cudaFree(x)");
  if (d_w != nullptr) check(cudaFree(d_w), "cudaFree(weight)");
  if (d_y != nullptr) check(cudaFree(d_y), "cudaFree(y)");
  return err;
}

}  // namespace deepinfer::backend::cuda
