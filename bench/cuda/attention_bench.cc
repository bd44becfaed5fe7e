// Benchmarks of the attention-side kernels on the GPU: sink attention at decode shapes (every
// token its own rows, pointer lists shuffled, L2 flushed before each run so rows come from HBM),
// one prefill shape, and the indexer's scores + top-k. Prints one JSON object per line:
// median of kRuns timed runs (cudaEvent), and bytes of row/key data read per second.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.cuh"

namespace {

using deepinfer::backend::cuda::bf16;
namespace dc = deepinfer::backend::cuda;

constexpr int kRuns = 30;
constexpr int kWarmup = 3;
constexpr size_t kFlushBytes = size_t{256} << 20;  // > L2 (50 MB on H100/H200)

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return p;
}

// Small random bf16 values (|x| in [2^-7, 2^-6), random sign): a random block of up to 4M values
// repeated over the buffer (the values do not matter for timing; generating GBs would).
void fill_random_bf16(void* device, size_t count, unsigned seed) {
  const size_t block = std::min<size_t>(count, size_t{1} << 22);
  std::vector<uint16_t> host(block);
  std::mt19937 rng(seed);
  for (uint16_t& v : host) v = static_cast<uint16_t>((rng() & 0x807f) | 0x3c00);
  for (size_t done = 0; done < count; done += block) {
    const size_t n = std::min(block, count - done);
    CUDA_CHECK(cudaMemcpy(static_cast<uint16_t*>(device) + done, host.data(), n * sizeof(uint16_t),
                          cudaMemcpyHostToDevice));
  }
}

// Median time in microseconds of `fn` run on the default stream, L2 flushed before each run when
// `flush` is set.
template <class Fn>
double median_us(Fn fn, void* flush_buffer, bool flush) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < kRuns; ++i) {
    if (flush) CUDA_CHECK(cudaMemsetAsync(flush_buffer, i & 0xff, kFlushBytes, nullptr));
    CUDA_CHECK(cudaEventRecord(start, nullptr));
    fn();
    CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(1000.0 * ms);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// T tokens with `rows` rows each. Decode: every token has its own rows (distinct sequences).
// Prefill: tokens draw their rows from one shared pool of `pool_rows` (neighbouring tokens share).
void bench_sink_attention(const char* label, int T, int rows, int pool_rows, void* flush_buffer) {
  const int H = 64, d = 512;
  const bool shared_pool = pool_rows > 0;
  const size_t total_pool = shared_pool ? static_cast<size_t>(pool_rows) : static_cast<size_t>(T) * rows;
  void* pool = device_alloc(total_pool * d * sizeof(uint16_t));
  fill_random_bf16(pool, total_pool * d, 1u);
  void* q = device_alloc(static_cast<size_t>(T) * H * d * sizeof(uint16_t));
  fill_random_bf16(q, static_cast<size_t>(T) * H * d, 2u);

  std::mt19937 rng(3);
  std::vector<const bf16*> ptrs;
  std::vector<int> row_begin{0};
  std::vector<int> order(shared_pool ? pool_rows : rows);
  for (int t = 0; t < T; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int r = 0; r < rows; ++r) {
      const size_t row = shared_pool ? static_cast<size_t>(order[r]) : static_cast<size_t>(t) * rows + order[r];
      ptrs.push_back(static_cast<const bf16*>(pool) + row * d);
    }
    row_begin.push_back(static_cast<int>(ptrs.size()));
  }
  void* d_ptrs = device_alloc(ptrs.size() * sizeof(void*));
  CUDA_CHECK(cudaMemcpy(d_ptrs, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
  void* d_begin = device_alloc(row_begin.size() * sizeof(int));
  CUDA_CHECK(cudaMemcpy(d_begin, row_begin.data(), row_begin.size() * sizeof(int), cudaMemcpyHostToDevice));
  std::vector<float> sinks(H, 0.5f);
  void* d_sinks = device_alloc(H * sizeof(float));
  CUDA_CHECK(cudaMemcpy(d_sinks, sinks.data(), H * sizeof(float), cudaMemcpyHostToDevice));
  void* out = device_alloc(static_cast<size_t>(T) * H * d * sizeof(float));
  const size_t ws_bytes = dc::sink_attention_workspace_bytes(T, H, d, rows);
  void* ws = device_alloc(ws_bytes);

  const double us = median_us(
      [&] {
        dc::sink_attention(static_cast<const bf16*>(q), T, H, d, static_cast<const bf16* const*>(d_ptrs),
                           static_cast<const int*>(d_begin), rows, static_cast<const float*>(d_sinks),
                           0.04419417f, static_cast<float*>(out), ws, nullptr);
      },
      flush_buffer, true);
  // Bytes the kernel must move at least: each token's rows (shared pools counted per token: the
  // logical traffic), q in, out (fp32) out.
  const double bytes = static_cast<double>(T) * rows * d * 2 + static_cast<double>(T) * H * d * (2 + 4);
  std::printf(
      "{\"bench\":\"sink_attention\",\"case\":\"%s\",\"T\":%d,\"rows\":%d,\"H\":%d,\"d\":%d,\"us\":%.2f,"
      "\"GBps\":%.1f,\"workspace_MB\":%.2f}\n",
      label, T, rows, H, d, us, bytes / us * 1e-3, ws_bytes / 1048576.0);
  std::fflush(stdout);
  for (void* p : {pool, q, d_ptrs, d_begin, d_sinks, out, ws}) CUDA_CHECK(cudaFree(p));
}

void bench_indexer_topk(int T, int keys, void* flush_buffer) {
  const int heads = 64, dim = 128, k = 512;
  const size_t pool_keys = static_cast<size_t>(T) * keys;
  void* pool = device_alloc(pool_keys * dim * sizeof(uint16_t));
  fill_random_bf16(pool, pool_keys * dim, 4u);
  void* q = device_alloc(static_cast<size_t>(T) * heads * dim * sizeof(uint16_t));
  fill_random_bf16(q, static_cast<size_t>(T) * heads * dim, 5u);
  std::vector<const bf16*> ptrs(pool_keys);
  for (size_t i = 0; i < pool_keys; ++i) ptrs[i] = static_cast<const bf16*>(pool) + i * dim;  // in order (a cache)
  std::vector<int> key_begin(T), num_keys(T, keys);
  for (int t = 0; t < T; ++t) key_begin[t] = t * keys;
  std::vector<float> weights(static_cast<size_t>(T) * heads);
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> wdist(-1.0f, 1.0f);
  for (float& w : weights) w = wdist(rng);
  void* d_ptrs = device_alloc(ptrs.size() * sizeof(void*));
  CUDA_CHECK(cudaMemcpy(d_ptrs, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
  void* d_begin = device_alloc(T * sizeof(int));
  CUDA_CHECK(cudaMemcpy(d_begin, key_begin.data(), T * sizeof(int), cudaMemcpyHostToDevice));
  void* d_num = device_alloc(T * sizeof(int));
  CUDA_CHECK(cudaMemcpy(d_num, num_keys.data(), T * sizeof(int), cudaMemcpyHostToDevice));
  void* d_w = device_alloc(weights.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(d_w, weights.data(), weights.size() * sizeof(float), cudaMemcpyHostToDevice));
  void* score = device_alloc(static_cast<size_t>(T) * keys * sizeof(float));
  void* selected = device_alloc(static_cast<size_t>(T) * k * sizeof(int));
  void* count = device_alloc(T * sizeof(int));
  const size_t ws_bytes = dc::topk_workspace_bytes(T, keys, k);
  void* ws = device_alloc(ws_bytes);

  auto scores = [&] {
    dc::indexer_scores(static_cast<const bf16*>(q), static_cast<const float*>(d_w), T, heads, dim,
                       static_cast<const bf16* const*>(d_ptrs), static_cast<const int*>(d_begin),
                       static_cast<const int*>(d_num), keys, 0.0884f, static_cast<float*>(score), keys, nullptr);
  };
  auto topk = [&] {
    dc::topk_select(static_cast<const float*>(score), T, keys, static_cast<const int*>(d_num), keys, k,
                    static_cast<int*>(selected), static_cast<int*>(count), ws, nullptr);
  };
  const double us_scores = median_us(scores, flush_buffer, true);
  scores();
  const double us_topk = median_us(topk, flush_buffer, false);  // scores were just written: L2-warm as in use
  const double key_bytes = static_cast<double>(T) * keys * dim * 2;
  std::printf(
      "{\"bench\":\"indexer_scores\",\"T\":%d,\"keys\":%d,\"heads\":%d,\"dim\":%d,\"us\":%.2f,\"GBps\":%.1f}\n", T,
      keys, heads, dim, us_scores, key_bytes / us_scores * 1e-3);
  std::printf("{\"bench\":\"topk_select\",\"T\":%d,\"keys\":%d,\"k\":%d,\"us\":%.2f,\"GBps\":%.1f}\n", T, keys, k,
              us_topk, static_cast<double>(T) * keys * 4 / us_topk * 1e-3);
  std::fflush(stdout);
  for (void* p : {pool, q, d_ptrs, d_begin, d_num, d_w, score, selected, count, ws}) CUDA_CHECK(cudaFree(p));
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("{\"bench\":\"attention\",\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  void* flush_buffer = device_alloc(kFlushBytes);
  for (int rows : {640, 384})  // CSA: 128 window + 512 selected; HCA: 128 window + 256 compressed
    for (int T : {1, 8, 64, 256}) bench_sink_attention("decode", T, rows, 0, flush_buffer);
  bench_sink_attention("prefill", 4096, 640, 8192, flush_buffer);
  for (int T : {1, 64})
    for (int keys : {8192, 65536}) bench_indexer_topk(T, keys, flush_buffer);
  CUDA_CHECK(cudaFree(flush_buffer));
  return 0;
}
