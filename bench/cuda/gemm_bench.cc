// Benchmark of the batch-invariant bf16 GEMMs (backend/cuda/gemm.h) against cuBLAS on the same
// cases. One JSON object per line on stdout:
//   {"bench":"copy", ...}   device-to-device cudaMemcpy of 4 GiB: the memory ceiling
//   {"bench":"gemm", ...}   per (shape, M): our time, GB/s, TFLOP/s and cuBLAS's, side by side
//   {"bench":"gemm_config", ...}   with --configs: every tile configuration forced (for tuning)
// Usage: deepinfer_bench_gemm [--quick] [--fp32] [--configs] [--ms M1,M2,...] [--shapes NAME,...]
//                             [--config-match SUBSTRING]
//   --quick    M in {1, 64, 4096} only
//   --fp32     fp32 output (default bf16 output)
//   --configs  also time each tile configuration of gemm.cu on each case
//   --shapes   only the named shapes (e.g. 4096x4096x32g,4096x8192)
//   --config-match  with --configs, only the tiles whose name contains the string (e.g. wgmma)
//
// Timing: a sample is `batch` back-to-back launches between two cudaEvents (batch sized so that a
// sample lasts >= ~200 us, which hides event resolution for 2 us decode kernels); the reported time
// is the median over 20 samples of time / batch. Each launch uses the next of several weight copies
// (>= 256 MiB in total, 5x the 50 MB L2), so decode shapes stream weights from HBM as in a real
// forward pass; x and y stay the same buffers (activations are usually L2-resident too).
// Bytes counted: weights + x + y; FLOPs: 2 M N K.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_testing.h"

namespace {

using deepinfer::backend::cuda::bf16;
namespace dc = deepinfer::backend::cuda;

#define CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                         \
    const cublasStatus_t deepinfer_cublas_status_ = (expr);                                    \
    if (deepinfer_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                   \
      std::fprintf(stderr, "%s:%d: cuBLAS status %d in %s\n", __FILE__, __LINE__,              \
                   static_cast<int>(deepinfer_cublas_status_), #expr);                         \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

constexpr size_t kMaxActivationBytes = size_t{2} << 30;  // cases whose x or y exceed 2 GiB are skipped
constexpr size_t kWeightRotationBytes = size_t{256} << 20;
constexpr int kSamples = 20;

struct Options {
  bool quick = false;
  bool fp32_out = false;
  bool configs = false;
  std::vector<int> ms;  // --ms 1,384,1536: the row counts to time (default: see main)
  std::vector<std::string> shapes;  // --shapes a,b: only these shape names (default: all)
  std::string config_match;         // --config-match s: with --configs, only tiles whose name contains s
};

struct Shape {
  const char* name;
  int N, K, groups;
};

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return p;
}

// Random bf16 bits in [-1, 1) written on the host once, then replicated on the device.
void fill_random_bf16(void* device, size_t count, uint32_t seed) {
  std::vector<uint16_t> host(std::min<size_t>(count, size_t{1} << 24));
  uint32_t s = seed * 2654435761u + 1u;
  for (uint16_t& v : host) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint16_t>((s >> 16 & 0x8000u) | (0x3C00u + (s >> 8 & 0x3FFu)));  // +-[2^-7, 2)
  }
  for (size_t done = 0; done < count; done += host.size()) {
    const size_t n = std::min(host.size(), count - done);
    CUDA_CHECK(cudaMemcpy(static_cast<uint16_t*>(device) + done, host.data(), n * 2, cudaMemcpyHostToDevice));
  }
}

// Median over kSamples of the per-launch time (us) of launch(i), i counting launches.
double time_launches(cudaStream_t stream, const std::function<void(int)>& launch) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  int counter = 0;
  for (int i = 0; i < 3; ++i) launch(counter++);  // warm-up (module load, attributes, clocks)
  CUDA_CHECK(cudaEventRecord(start, stream));
  launch(counter++);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float first_ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&first_ms, start, stop));
  const int batch = std::clamp(static_cast<int>(0.2 / std::max(first_ms, 1e-4f)), 1, 500);
  std::vector<double> per_launch_us;
  for (int s = 0; s < kSamples; ++s) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int b = 0; b < batch; ++b) launch(counter++);
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    per_launch_us.push_back(1000.0 * ms / batch);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(per_launch_us.begin(), per_launch_us.end());
  return per_launch_us[per_launch_us.size() / 2];
}

void bench_copy(cudaStream_t stream) {
  const size_t bytes = size_t{4} << 30;
  void* a = device_alloc(bytes);
  void* b = device_alloc(bytes);
  CUDA_CHECK(cudaMemset(a, 1, bytes));
  const double us = time_launches(stream, [&](int i) {
    CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  // A copy reads and writes every byte.
  std::printf("{\"bench\":\"copy\",\"bytes\":%zu,\"us\":%.1f,\"gbps\":%.1f}\n", bytes, us, 2.0 * bytes / us / 1e3);
  std::fflush(stdout);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
}

struct Measure {
  double us, gbps, weight_gbps, tflops;
};

Measure measure(double us, double weight_bytes, double other_bytes, double flops) {
  return {us, (weight_bytes + other_bytes) / us / 1e3, weight_bytes / us / 1e3, flops / us / 1e6};
}

void bench_shape(const Shape& shape, const std::vector<int>& ms, const Options& opt, cublasHandle_t cublas,
                 cudaStream_t stream) {
  const int N = shape.N, K = shape.K, G = shape.groups;
  const size_t weight_set_bytes = static_cast<size_t>(N) * K * 2 * G;  // all groups' weights, contiguous
  const int copies = static_cast<int>(std::clamp<size_t>(kWeightRotationBytes / weight_set_bytes + 1, 2, 64));
  std::vector<void*> weights(copies);
  for (int c = 0; c < copies; ++c) {
    weights[c] = device_alloc(weight_set_bytes);
    if (c == 0)
      fill_random_bf16(weights[0], weight_set_bytes / 2, 7u);
    else
      CUDA_CHECK(cudaMemcpy(weights[c], weights[0], weight_set_bytes, cudaMemcpyDeviceToDevice));
  }
  const size_t out_size = opt.fp32_out ? 4 : 2;
  const cudaDataType_t out_type = opt.fp32_out ? CUDA_R_32F : CUDA_R_16BF;

  for (const int M : ms) {
    const size_t x_bytes = static_cast<size_t>(M) * K * 2, y_bytes = static_cast<size_t>(M) * N * out_size;
    if (x_bytes > kMaxActivationBytes || y_bytes > kMaxActivationBytes) continue;
    void* x = device_alloc(x_bytes);
    void* y = device_alloc(y_bytes);
    fill_random_bf16(x, x_bytes / 2, 11u + M);

    // Groups: rows split as evenly as possible; weights counted only for groups that have rows.
    std::vector<int> offsets(G + 1, 0);
    for (int g = 0; g < G; ++g) offsets[g + 1] = offsets[g] + M / G + (g < M % G ? 1 : 0);
    const int used_groups = std::min(G, M);
    int* d_offsets = nullptr;
    if (G > 1) {
      d_offsets = static_cast<int*>(device_alloc((G + 1) * sizeof(int)));
      CUDA_CHECK(cudaMemcpy(d_offsets, offsets.data(), (G + 1) * sizeof(int), cudaMemcpyHostToDevice));
    }

    const auto ours = [&](int config) {
      return [&, config](int i) {
        const int c = i % copies;
        const bf16* xb = static_cast<const bf16*>(x);
        if (G > 1 && config < 0) {
          if (opt.fp32_out)
            dc::grouped_gemm_stacked(xb, d_offsets, G, M, K, static_cast<const bf16*>(weights[c]), N,
                                     static_cast<float*>(y), stream);
          else
            dc::grouped_gemm_stacked(xb, d_offsets, G, M, K, static_cast<const bf16*>(weights[c]), N,
                                     static_cast<bf16*>(y), stream);
        } else if (G > 1) {
          if (opt.fp32_out)
            dc::gemm_testing::grouped_gemm_stacked_with_config(config, xb, d_offsets, G, M, K,
                                                               static_cast<const bf16*>(weights[c]), N,
                                                               static_cast<float*>(y), stream);
          else
            dc::gemm_testing::grouped_gemm_stacked_with_config(config, xb, d_offsets, G, M, K,
                                                               static_cast<const bf16*>(weights[c]), N,
                                                               static_cast<bf16*>(y), stream);
        } else if (config < 0) {
          if (opt.fp32_out)
            dc::gemm(xb, M, K, static_cast<const bf16*>(weights[c]), N, static_cast<float*>(y), stream);
          else
            dc::gemm(xb, M, K, static_cast<const bf16*>(weights[c]), N, static_cast<bf16*>(y), stream);
        } else {
          if (opt.fp32_out)
            dc::gemm_testing::gemm_with_config(config, xb, M, K, static_cast<const bf16*>(weights[c]), N,
                                               static_cast<float*>(y), stream);
          else
            dc::gemm_testing::gemm_with_config(config, xb, M, K, static_cast<const bf16*>(weights[c]), N,
                                               static_cast<bf16*>(y), stream);
        }
      };
    };
    // cuBLAS (column-major): y^T[N, M] = W^T... i.e. C(N x M, ld N) = op(A)=W^T (A: K x N, ld K) * B (K x M, ld K).
    const auto peer = [&](int i) {
      const int c = i % copies;
      const float alpha = 1.0f, beta = 0.0f;
      const bf16* w = static_cast<const bf16*>(weights[c]);
      if (G == 1) {
        CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, CUDA_R_16BF, K, x,
                                  CUDA_R_16BF, K, &beta, y, out_type, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      } else if (M % G == 0) {
        const int rows = M / G;
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            cublas, CUBLAS_OP_T, CUBLAS_OP_N, N, rows, K, &alpha, w, CUDA_R_16BF, K, static_cast<long long>(N) * K, x,
            CUDA_R_16BF, K, static_cast<long long>(rows) * K, &beta, y, out_type, N, static_cast<long long>(rows) * N,
            G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      } else {
        for (int g = 0; g < G; ++g) {
          const int rows = offsets[g + 1] - offsets[g];
          if (rows == 0) continue;
          CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, N, rows, K, &alpha,
                                    w + static_cast<size_t>(g) * N * K, CUDA_R_16BF, K,
                                    static_cast<const bf16*>(x) + static_cast<size_t>(offsets[g]) * K, CUDA_R_16BF, K,
                                    &beta, static_cast<char*>(y) + static_cast<size_t>(offsets[g]) * N * out_size,
                                    out_type, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
      }
    };

    const double weight_bytes = static_cast<double>(N) * K * 2 * used_groups;
    const double other_bytes = static_cast<double>(x_bytes + y_bytes);
    const double flops = 2.0 * M * N * K;
    const Measure a = measure(time_launches(stream, ours(-1)), weight_bytes, other_bytes, flops);
    const Measure b = measure(time_launches(stream, peer), weight_bytes, other_bytes, flops);
    const char* config = G > 1 ? "grouped" : dc::gemm_testing::config_name(dc::gemm_testing::auto_config(M, N, K));
    std::printf(
        "{\"bench\":\"gemm\",\"shape\":\"%s\",\"N\":%d,\"K\":%d,\"groups\":%d,\"M\":%d,\"out\":\"%s\","
        "\"config\":\"%s\",\"slices\":%d,\"us\":%.2f,\"gbps\":%.1f,\"weight_gbps\":%.1f,\"tflops\":%.1f,"
        "\"cublas_us\":%.2f,\"cublas_gbps\":%.1f,\"cublas_tflops\":%.1f,\"speedup_vs_cublas\":%.3f}\n",
        shape.name, N, K, G, M, opt.fp32_out ? "fp32" : "bf16", config, dc::gemm_testing::slice_count(N, K), a.us,
        a.gbps, a.weight_gbps, a.tflops, b.us, b.gbps, b.tflops, b.us / a.us);
    std::fflush(stdout);

    if (opt.configs) {
      for (int cfg = 0; cfg < dc::gemm_testing::config_count(); ++cfg) {
        if (!dc::gemm_testing::config_runs_as_is(cfg, N, K)) continue;
        if (!opt.config_match.empty() &&
            std::string(dc::gemm_testing::config_name(cfg)).find(opt.config_match) == std::string::npos)
          continue;
        const Measure f = measure(time_launches(stream, ours(cfg)), weight_bytes, other_bytes, flops);
        std::printf(
            "{\"bench\":\"gemm_config\",\"shape\":\"%s\",\"M\":%d,\"config\":\"%s\",\"us\":%.2f,\"gbps\":%.1f,"
            "\"weight_gbps\":%.1f,\"tflops\":%.1f}\n",
            shape.name, M, dc::gemm_testing::config_name(cfg), f.us, f.gbps, f.weight_gbps, f.tflops);
        std::fflush(stdout);
      }
    }

    if (d_offsets) CUDA_CHECK(cudaFree(d_offsets));
    CUDA_CHECK(cudaFree(x));
    CUDA_CHECK(cudaFree(y));
  }
  for (void* w : weights) CUDA_CHECK(cudaFree(w));
}

// "a,b,,c" -> {"a", "b", "c"} (the list arguments).
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> items;
  for (size_t b = 0; b <= list.size();) {
    const size_t e = std::min(list.find(',', b), list.size());
    if (e > b) items.push_back(list.substr(b, e - b));
    b = e + 1;
  }
  return items;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      opt.quick = true;
    } else if (arg == "--fp32") {
      opt.fp32_out = true;
    } else if (arg == "--configs") {
      opt.configs = true;
    } else if (arg == "--ms" && i + 1 < argc) {
      for (const std::string& m : split_commas(argv[++i])) opt.ms.push_back(std::atoi(m.c_str()));
    } else if (arg == "--shapes" && i + 1 < argc) {
      opt.shapes = split_commas(argv[++i]);
    } else if (arg == "--config-match" && i + 1 < argc) {
      opt.config_match = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--fp32] [--configs] [--ms M1,M2,...] [--shapes NAME,...] "
                   "[--config-match SUBSTRING]\n",
                   argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t cublas;
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));

  bench_copy(stream);

  const std::vector<Shape> shapes = {
      {"1024x4096", 1024, 4096, 1},      {"32768x1024", 32768, 1024, 1}, {"512x4096", 512, 4096, 1},
      {"1024x4096x8g", 1024, 4096, 8},   {"4096x4096x32g", 4096, 4096, 32}, {"4096x2048x32g", 4096, 2048, 32}, {"4096x8192", 4096, 8192, 1},   {"4096x2048", 4096, 2048, 1},
      {"4096x4096", 4096, 4096, 1},      {"8192x1024", 8192, 1024, 1},   {"129280x4096", 129280, 4096, 1},
  };
  const std::vector<int> ms = !opt.ms.empty() ? opt.ms
                              : opt.quick   ? std::vector<int>{1, 64, 4096}
                                            : std::vector<int>{1, 8, 64, 256, 512, 4096, 32768};
  // Timed only when --shapes names them: the concatenated projections the model runs as one
  // gemm_split (V4-Flash: a compressed-sparse-attention layer's inputs, its q and indexer-q
  // up-projections, the MoE block's shared expert + router).
  const std::vector<Shape> named_only = {
      {"4160x4096", 4160, 4096, 1}, {"40960x1024", 40960, 1024, 1}, {"4128x4096", 4128, 4096, 1}};
  const auto named = [&](const Shape& shape) {
    return std::count(opt.shapes.begin(), opt.shapes.end(), shape.name) > 0;
  };
  for (const Shape& shape : named_only)
    if (named(shape)) bench_shape(shape, ms, opt, cublas, stream);
  for (const Shape& shape : shapes) {
    const bool wanted = opt.shapes.empty() || named(shape);
    if (wanted) bench_shape(shape, ms, opt, cublas, stream);
  }

  CUBLAS_CHECK(cublasDestroy(cublas));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
