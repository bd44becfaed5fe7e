// L2 prefetch kernels (l2_prefetch.h): a few threads per SM issue bulk prefetches of 16 KB.
#include "backend/cuda/l2_prefetch.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace deepinfer::backend::cuda {
namespace {

constexpr size_t kChunk = 16384;  // bytes per cp.async.bulk.prefetch
constexpr int kThreads = 32;
constexpr int kMaxBlocks = 256;
constexpr int kMaxExperts = 1024;  // experts past it are not prefetched (a hint, never an error)

__device__ __forceinline__ void prefetch_bulk(const char* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const char* p, size_t bytes) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads * kChunk;
  for (size_t off = (static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x) * kChunk; off < bytes; off += stride)
    prefetch_bulk(p + off, static_cast<uint32_t>(min(kChunk, bytes - off)));
}

__global__ void __launch_bounds__(kThreads) l2_prefetch_experts_kernel(const int32_t* sel, int n, int num_experts,
                                                                      const char* base, size_t expert_bytes,
                                                                      size_t budget) {
  __shared__ unsigned char used[kMaxExperts];
  __shared__ int order[kMaxExperts];
  __shared__ int count;
  const int E = min(num_experts, kMaxExperts);
  for (int e = threadIdx.x; e < E; e += kThreads) used[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int e = sel[i];
    if (e >= 0 && e < E) used[e] = 1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int c = 0;
    for (int e = 0; e < E; ++e)
      if (used[e]) order[c++] = e;
    count = c;
  }
  __syncthreads();
  const size_t total = min(budget, static_cast<size_t>(count) * expert_bytes);
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads * kChunk;
  for (size_t off = (static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x) * kChunk; off < total; off += stride) {
    const size_t idx = off / expert_bytes, within = off % expert_bytes;
    const size_t len = min(min(kChunk, expert_bytes - within), total - off);
    prefetch_bulk(base + static_cast<size_t>(order[idx]) * expert_bytes + within, static_cast<uint32_t>(len));
  }
}

int blocks_for(size_t bytes) {
  const size_t per_block = kChunk * kThreads;
  return static_cast<int>(std::clamp<size_t>((bytes + per_block - 1) / per_block, 1, kMaxBlocks));
}

}  // namespace

void l2_prefetch(const void* p, size_t bytes, cudaStream_t stream) {
  bytes &= ~size_t{15};
  if (bytes == 0 || p == nullptr) return;
  l2_prefetch_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(static_cast<const char*>(p), bytes);
}

void l2_prefetch_experts(const int32_t* sel, int n, int num_experts, const void* base, size_t expert_bytes,
                         size_t budget, cudaStream_t stream) {
  budget &= ~size_t{15};
  if (n <= 0 || num_experts <= 0 || base == nullptr || expert_bytes == 0 || expert_bytes % 16 != 0 || budget == 0)
    return;
  l2_prefetch_experts_kernel<<<blocks_for(budget), kThreads, 0, stream>>>(sel, n, num_experts,
                                                                         static_cast<const char*>(base), expert_bytes,
                                                                         budget);
}

bool is_l2_prefetch_kernel(const void* func) {
  return func == reinterpret_cast<const void*>(l2_prefetch_kernel) ||
         func == reinterpret_cast<const void*>(l2_prefetch_experts_kernel);
}

}  // namespace deepinfer::backend::cuda
