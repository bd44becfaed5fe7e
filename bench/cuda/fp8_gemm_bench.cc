// Benchmark of the block-scaled FP8 / FP4-weight GEMMs (backend/cuda/fp8_gemm.h). One JSON object
// per line on stdout:
//   {"impl":"fp8"|"fp4","M":..,"N":..,"K":..,"us":..,"tbps":..,"tflops":..,"config":".."}
//   grouped cases add "groups" (M is then the total rows).
// Usage: deepinfer_bench_fp8_gemm [--quick] [--configs] [--fp32] [--graph] [--ms 1,64] [--no-grouped]
//   --graph    time launches replayed from one CUDA graph (kernel time without host launch cost)
//   --ms LIST  the M values (default 1 4 16 32 64 256 1024 4096)
//   --quick    M in {1, 64, 4096} only
//   --configs  also time every tile configuration (field "config"; "auto" otherwise)
//   --fp32     fp32 output (default bf16)
// Timing: a sample is `batch` back-to-back launches between two events (>= ~200 us); the time is the
// median of 15 samples / batch. Each launch uses the next of several weight copies (>= 256 MiB in
// all, 5x the L2), so decode streams weights from HBM. tbps counts weight codes + weight scales +
// A codes + A scales + y bytes; tflops is 2 M N K.

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
#include "backend/cuda/fp8_gemm.h"

namespace {

namespace f8 = deepinfer::backend::cuda::fp8;

constexpr size_t kWeightRotationBytes = size_t{256} << 20;
constexpr int kSamples = 15;
cudaStream_t g_stream = nullptr;
bool g_graph = false;  // --graph: time `batch` launches captured in one CUDA graph (no host launch cost)

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  return p;
}

void fill_random_bytes(void* device, size_t bytes, uint32_t seed, bool e4m3) {
  std::vector<uint8_t> host(std::min<size_t>(bytes, size_t{1} << 24));
  uint32_t s = seed * 2654435761u + 1u;
  for (uint8_t& v : host) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(s >> 24);
    if (e4m3 && (v & 0x7F) == 0x7F) v = 0x38;
  }
  for (size_t done = 0; done < bytes; done += host.size()) {
    const size_t n = std::min(host.size(), bytes - done);
    CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(device) + done, host.data(), n, cudaMemcpyHostToDevice));
  }
}

void fill_scales(float* device, size_t count, float value) {
  std::vector<float> host(count, value);
  CUDA_CHECK(cudaMemcpy(device, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
}

double time_us(const std::function<void(int)>& launch, int copies) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch(i % copies);
  CUDA_CHECK(cudaDeviceSynchronize());
  // Batch size from one timed launch group.
  CUDA_CHECK(cudaEventRecord(start, g_stream));
  for (int i = 0; i < 10; ++i) launch(i % copies);
  CUDA_CHECK(cudaEventRecord(stop, g_stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const double per = std::max(1e-3, static_cast<double>(ms) * 1000.0 / 10.0);
  const int batch = std::max(1, std::min(2000, static_cast<int>(200.0 / per) + 1));
  std::vector<double> samples;
  int next = 0;
  cudaGraphExec_t exec = nullptr;
  if (g_graph) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < batch; ++i) launch(next++ % copies);
    CUDA_CHECK(cudaStreamEndCapture(g_stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaGraphLaunch(exec, g_stream));
  }
  for (int s = 0; s < kSamples; ++s) {
    CUDA_CHECK(cudaEventRecord(start, g_stream));
    if (g_graph)
      CUDA_CHECK(cudaGraphLaunch(exec, g_stream));
    else
      for (int i = 0; i < batch; ++i) launch(next++ % copies);
    CUDA_CHECK(cudaEventRecord(stop, g_stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(static_cast<double>(ms) * 1000.0 / batch);
  }
  CUDA_CHECK(cudaGetLastError());
  if (exec != nullptr) CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

struct Weights {
  std::vector<void*> codes, scales;
  size_t code_bytes = 0, scale_count = 0;
  ~Weights() {
    for (void* p : codes) (void)cudaFree(p);
    for (void* p : scales) (void)cudaFree(p);
  }
};

// `count` weights [N, K] of the format, at least enough copies to exceed the rotation size.
void make_weights(Weights& w, bool fp4, int N, int K, int count) {
  w.code_bytes = fp4 ? static_cast<size_t>(N) * K / 2 : static_cast<size_t>(N) * K;
  w.scale_count = fp4 ? static_cast<size_t>(N) * (K / 32) : static_cast<size_t>((N + 127) / 128) * ((K + 127) / 128);
  for (int i = 0; i < count; ++i) {
    w.codes.push_back(device_alloc(w.code_bytes));
    fill_random_bytes(w.codes.back(), w.code_bytes, 17u + static_cast<uint32_t>(i), !fp4);
    w.scales.push_back(device_alloc(w.scale_count * sizeof(float)));
    fill_scales(static_cast<float*>(w.scales.back()), w.scale_count, 1.0f / 64);
  }
}

void print(const char* impl, int M, int N, int K, int groups, double us, double bytes, const char* config) {
  const double tbps = bytes / (us * 1e-6) / 1e12;
  const double tflops = 2.0 * M * N * static_cast<double>(K) / (us * 1e-6) / 1e12;
  if (groups > 0)
    std::printf("{\"impl\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d,\"groups\":%d,\"us\":%.3f,\"tbps\":%.3f,\"tflops\":%.2f,"
                "\"config\":\"%s\"}\n",
                impl, M, N, K, groups, us, tbps, tflops, config);
  else
    std::printf("{\"impl\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d,\"us\":%.3f,\"tbps\":%.3f,\"tflops\":%.2f,\"config\":\"%s\"}\n",
                impl, M, N, K, us, tbps, tflops, config);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, configs = false, fp32_out = false, grouped = true;
  std::vector<int> ms_arg;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--configs") == 0) configs = true;
    else if (std::strcmp(argv[i], "--fp32") == 0) fp32_out = true;
    else if (std::strcmp(argv[i], "--graph") == 0) g_graph = true;
    else if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      ms_arg.clear();
      for (const char* c = argv[++i]; *c != 0;) {
        ms_arg.push_back(std::atoi(c));
        while (*c != 0 && *c != ',') ++c;
        if (*c == ',') ++c;
      }
    } else if (std::strcmp(argv[i], "--no-grouped") == 0) grouped = false;
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--configs] [--fp32] [--graph] [--ms 1,64] [--no-grouped]\n", argv[0]);
      return 2;
    }
  }
  const int shapes[][2] = {{4096, 4096}, {32768, 1024}, {4096, 8192}, {2048, 4096}};
  CUDA_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  std::vector<int> Ms = !ms_arg.empty() ? ms_arg : quick ? std::vector<int>{1, 64, 4096} : std::vector<int>{1, 4, 16, 32, 64, 256, 1024, 4096};
  const int max_m = 4096;
  const int max_k = 8192;
  const size_t out_size = fp32_out ? 4 : 2;

  uint8_t* a = static_cast<uint8_t*>(device_alloc(static_cast<size_t>(max_m) * max_k));
  fill_random_bytes(a, static_cast<size_t>(max_m) * max_k, 3, true);
  float* sa = static_cast<float*>(device_alloc(static_cast<size_t>(max_m) * (max_k / 128) * sizeof(float)));
  fill_scales(sa, static_cast<size_t>(max_m) * (max_k / 128), 1.0f / 32);
  void* y = device_alloc(static_cast<size_t>(max_m) * 32768 * 4);

  const int num_configs = configs ? f8::testing::config_count() : 0;
  for (bool fp4 : {false, true}) {
    for (const auto& s : shapes) {
      const int N = s[0], K = s[1];
      Weights w;
      const size_t per = fp4 ? static_cast<size_t>(N) * K / 2 : static_cast<size_t>(N) * K;
      make_weights(w, fp4, N, K, static_cast<int>(std::max<size_t>(2, kWeightRotationBytes / per + 1)));
      const int copies = static_cast<int>(w.codes.size());
      for (int M : Ms) {
        const double bytes = static_cast<double>(w.code_bytes) + w.scale_count * 4.0 +
                             static_cast<double>(M) * K + M * ((K + 127) / 128) * 4.0 +
                             static_cast<double>(M) * N * out_size;
        for (int config = -1; config < num_configs; ++config) {
          const auto launch = [&](int i) {
            f8::testing::gemm_with_config(config, fp4, a, sa, M, K, static_cast<const uint8_t*>(w.codes[i]),
                                          static_cast<const float*>(w.scales[i]), N, y, !fp32_out, g_stream);
          };
          const double us = time_us(launch, copies);
          print(fp4 ? "fp4" : "fp8", M, N, K, 0, us, bytes,
                config < 0 ? "auto" : f8::testing::config_name(config));
        }
        // The TMA + wgmma family (FP8 weights, K % 128 == 0): automatic tile, then each tile with --configs.
        if (!fp4 && K % 128 == 0) {
          const int tma_configs = configs ? f8::tma::testing::config_count() : 0;
          for (int config = -1; config < tma_configs; ++config) {
            const auto launch = [&](int i) {
              f8::tma::testing::gemm_with_config(config, a, sa, M, K, static_cast<const uint8_t*>(w.codes[i]),
                                                 static_cast<const float*>(w.scales[i]), N, y, !fp32_out, g_stream);
            };
            const double us = time_us(launch, copies);
            print("fp8_tma", M, N, K, 0, us, bytes, config < 0 ? "auto" : f8::tma::testing::config_name(config));
          }
        }
      }
    }
  }

  // Grouped (MoE experts): G = 32 groups of 1..48 rows (deterministic pseudo-random), N = 2048,
  // K = 4096, FP4 and FP8 weights.
  if (grouped) {
    const int G = 32, N = 2048, K = 4096;
    for (int max_per_group : {1, 8, 48}) {
      std::vector<int> offsets(G + 1, 0);
      uint32_t r = 12345u;
      for (int g = 0; g < G; ++g) {
        r = r * 1664525u + 1013904223u;
        offsets[g + 1] = offsets[g] + 1 + static_cast<int>((r >> 16) % static_cast<uint32_t>(max_per_group));
      }
      const int total = offsets[G];
      int* d_offsets = static_cast<int*>(device_alloc((G + 1) * sizeof(int)));
      CUDA_CHECK(cudaMemcpy(d_offsets, offsets.data(), (G + 1) * sizeof(int), cudaMemcpyHostToDevice));
      for (bool fp4 : {true, false}) {
        Weights w;
        const size_t per = fp4 ? static_cast<size_t>(N) * K / 2 : static_cast<size_t>(N) * K;
        const int sets = static_cast<int>(std::max<size_t>(2, kWeightRotationBytes / (per * G) + 1));
        make_weights(w, fp4, N, K, G * sets);
        std::vector<void**> d_codes, d_scales;
        for (int set = 0; set < sets; ++set) {
          d_codes.push_back(static_cast<void**>(device_alloc(G * sizeof(void*))));
          d_scales.push_back(static_cast<void**>(device_alloc(G * sizeof(void*))));
          CUDA_CHECK(cudaMemcpy(d_codes.back(), w.codes.data() + set * G, G * sizeof(void*), cudaMemcpyHostToDevice));
          CUDA_CHECK(cudaMemcpy(d_scales.back(), w.scales.data() + set * G, G * sizeof(void*), cudaMemcpyHostToDevice));
        }
        const double bytes = (static_cast<double>(w.code_bytes) + w.scale_count * 4.0) * G +
                             static_cast<double>(total) * K + total * (K / 128) * 4.0 +
                             static_cast<double>(total) * N * out_size;
        for (int config = -1; config < num_configs; ++config) {
          const auto launch = [&](int i) {
            f8::testing::grouped_gemm_with_config(config, fp4, a, sa, d_offsets, G, total, K,
                                                  reinterpret_cast<const uint8_t* const*>(d_codes[i]),
                                                  reinterpret_cast<const float* const*>(d_scales[i]), N, y, !fp32_out,
                                                  g_stream);
          };
          const double us = time_us(launch, sets);
          print(fp4 ? "fp4" : "fp8", total, N, K, G, us, bytes, config < 0 ? "auto" : f8::testing::config_name(config));
        }
        for (void** p : d_codes) CUDA_CHECK(cudaFree(p));
        for (void** p : d_scales) CUDA_CHECK(cudaFree(p));
      }
      CUDA_CHECK(cudaFree(d_offsets));
    }
  }

  // Quantizer: M x K bf16 -> codes + scales.
  {
    for (int M : {1, 64, 4096}) {
      const int K = 7168;
      void* x = device_alloc(static_cast<size_t>(M) * K * 2);
      CUDA_CHECK(cudaMemset(x, 0x3c, static_cast<size_t>(M) * K * 2));
      uint8_t* codes = static_cast<uint8_t*>(device_alloc(static_cast<size_t>(M) * K));
      float* scales = static_cast<float*>(device_alloc(static_cast<size_t>(M) * (K / 128) * 4));
      const auto launch = [&](int) {
        f8::quantize_fp8_rows(static_cast<const f8::bf16*>(x), M, K, codes, scales, g_stream);
      };
      const double us = time_us(launch, 1);
      const double bytes = static_cast<double>(M) * K * 3 + M * (K / 128) * 4.0;
      std::printf("{\"impl\":\"quantize_bf16\",\"M\":%d,\"N\":0,\"K\":%d,\"us\":%.3f,\"tbps\":%.3f,\"tflops\":0}\n", M, K,
                  us, bytes / (us * 1e-6) / 1e12);
      CUDA_CHECK(cudaFree(x));
      CUDA_CHECK(cudaFree(codes));
      CUDA_CHECK(cudaFree(scales));
    }
  }
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(sa));
  CUDA_CHECK(cudaFree(y));
  return 0;
}
