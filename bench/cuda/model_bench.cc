// Whole-model GPU benchmark: decode steps at a fixed batch and context, and prefill, on a
// DeepSeek-V4 config with random bf16 weights generated on the device (CudaModel::create_random).
// Prints one JSON object per line (tools/gpu/report.py turns them into docs/perf tables):
//   {"kind":"bandwidth", "gbs":...}                        device-to-device copy of 4 GB
//   {"kind":"decode", "batch":B, "context":C, "step_ms":..., "tok_s":..., "chained_ms":..., "weight_bytes":..., "kv_bytes":...}
//   {"kind":"prefill", "tokens":N, "ms":..., "tok_s":..., "flops":...}
// Decode steps take each sequence's greedy token on the GPU (CudaModel::forward's `greedy` output,
// what the engine does for greedy requests): 8 bytes per sequence come back, not a vocabulary row.
// Decode at context C starts each sequence at position C over a zero-filled state cache instead
// of prefilling it first: the step reads exactly the rows (window, compressed, indexer keys) a
// real context of C tokens would make it read, at a fraction of the set-up time.
//
// Usage: deepinfer_bench_model --config CONFIG.json [--batches 1,8,64,256] [--contexts 1024,32768]
//        [--prefill 512,4096,32768] [--steps 20] [--profile 1] [--fp8-gemm 1] [--trace FILE]
//        [--mhc-one-pass 1]
// step_ms: one synchronous forward() (host bookkeeping, copies and the wait included); chained_ms:
// steps enqueued two deep as the engine runs them (the GPU's time a step while the host keeps up).
// --profile 1 brackets the last decode step of each (batch, context) and the last prefill with
// cudaProfilerStart/Stop, for `ncu --profile-from-start off` (tools/gpu/profile.sh).
// --trace FILE runs one more, untimed decode step per (batch, context) and one more prefill per
// length, and writes their kernel timelines (start and end of every kernel, not serialized: CUPTI
// concurrent-kernel records, kernel_trace.h) to FILE; tools/gpu/trace_table.py turns that into
// where a step's time goes (busy, idle gaps, overlap, per kernel).
// --mhc-one-pass 1 sets CudaModelOptions::mhc_one_pass (the mHC posts and the next pre's dots in one
// pass over the streams); the header line says which ran.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_model.h"
#include "kernel_trace.h"
#include "model/config.h"

using deepinfer::backend::cuda::CudaModel;
using deepinfer::backend::cuda::CudaModelOptions;
using deepinfer::model::AttentionKind;
using deepinfer::model::LogitRows;
using deepinfer::model::ModelConfig;
using deepinfer::model::SeqChunk;

namespace {

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

// Median of a sample (the upper middle one for an even count; 0 for none).
template <typename T>
double median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : static_cast<double>(v[v.size() / 2]);
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t{4} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  std::vector<float> ms;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(e0);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    ms.push_back(t);
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (median(ms) * 1e-3) / 1e9;  // read + write
}

// Weight bytes of everything but the routed experts, and of one routed expert.
void weight_bytes(const ModelConfig& c, double* dense, double* expert) {
  const double D = c.hidden_size, H = c.num_heads, hd = c.head_dim, q = c.q_lora_rank;
  double per_layer = D * q + q * H * hd + D * hd + H * hd * c.o_lora_rank + c.o_groups * c.o_lora_rank * D +
                     c.n_routed_experts * D + 3.0 * D * c.shared_intermediate();
  double total = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    double x = per_layer;
    if (c.layer_kinds[l] != AttentionKind::kSliding) {
      const double width = c.layer_kinds[l] == AttentionKind::kCsa ? 2 * hd : hd;
      x += 2 * width * D;
    }
    if (c.layer_kinds[l] == AttentionKind::kCsa)
      x += 2 * 2.0 * c.index_head_dim * D + q * c.index_n_heads * c.index_head_dim + c.index_n_heads * D;
    total += x;
  }
  total += static_cast<double>(c.vocab_size) * D;  // head (the embedding reads one row per token)
  *dense = 2 * total;
  *expert = 2 * 3.0 * D * c.moe_intermediate_size;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  std::vector<int> batches = {1, 8, 64, 256}, contexts = {1024, 32768}, prefills = {512, 4096, 32768};
  int steps = 20;
  bool profile = false, fp8_gemm = false, mhc_one_pass = false;
  std::string trace_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--config") config_path = v;
    else if (a == "--batches") batches = parse_list(v);
    else if (a == "--contexts") contexts = parse_list(v);
    else if (a == "--prefill") prefills = parse_list(v);
    else if (a == "--steps") steps = std::stoi(v);
    else if (a == "--profile") profile = std::stoi(v) != 0;
    else if (a == "--fp8-gemm") fp8_gemm = std::stoi(v) != 0;
    else if (a == "--mhc-one-pass") mhc_one_pass = std::stoi(v) != 0;
    else if (a == "--trace") trace_path = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  std::ifstream f(config_path);
  if (!f) {
    std::fprintf(stderr, "usage: %s --config CONFIG.json [...]\n", argv[0]);
    return 2;
  }
  std::stringstream text;
  text << f.rdbuf();
  auto parsed = deepinfer::model::parse_model_config(text.str(), config_path);
  if (!parsed.is_ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().to_string().c_str());
    return 1;
  }
  const ModelConfig c = *parsed;
  std::FILE* trace_file = nullptr;
  if (!trace_path.empty() && (trace_file = std::fopen(trace_path.c_str(), "w")) == nullptr) {
    std::fprintf(stderr, "--trace: cannot write %s\n", trace_path.c_str());
    return 2;
  }
  deepinfer::bench::KernelTrace trace;
  // With --trace: runs `work` once more, untimed (CUPTI's first enable costs host time), and writes
  // the kernels it enqueues, to the device's idle point, as `label`.
  auto traced = [&](const std::string& label, auto&& work) -> deepinfer::Status {
    if (trace_file == nullptr) return deepinfer::Status::ok();
    std::string error;
    const bool tracing = trace.start(&error);
    if (!tracing) std::fprintf(stderr, "--trace: %s\n", error.c_str());
    const deepinfer::Status st = work();
    if (tracing) {
      cudaDeviceSynchronize();
      trace.stop(label, trace_file);
    }
    return st;
  };
  std::printf("{\"kind\":\"bandwidth\",\"gbs\":%.1f}\n", copy_bandwidth_gbs());
  std::fflush(stdout);

  auto largest = [](const std::vector<int>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); };
  const int max_batch = std::max(1, largest(batches));
  const int max_ctx = std::max(largest(contexts) + steps + 8, largest(prefills));
  const int block = deepinfer::model::default_block_size(c);
  const int pages_per_seq = (max_ctx + block - 1) / block;
  // Pages: enough for max_batch sequences at the largest decode context (they share the pool
  // across runs; a run's sequences use disjoint pages).
  const int max_dec_ctx = largest(contexts) + steps + 8;
  const int dec_pages = (max_dec_ctx + block - 1) / block;
  CudaModelOptions opt;
  opt.num_slots = max_batch;
  opt.num_blocks = std::max(max_batch * dec_pages, pages_per_seq);
  opt.max_step_tokens = 8192;
  opt.max_logit_rows = std::max(max_batch, 1);
  opt.max_model_len = max_ctx;
  opt.fp8_gemm = fp8_gemm;  // release numerics with the FP8-checkpoint projections on FP8 tensor cores
  opt.mhc_one_pass = mhc_one_pass;
  const auto t0 = std::chrono::steady_clock::now();
  auto made = CudaModel::create_random(c, 1234, opt);
  if (!made.is_ok()) {
    std::fprintf(stderr, "%s\n", made.status().to_string().c_str());
    return 1;
  }
  CudaModel& m = **made;
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double dense = 0, expert = 0;
  weight_bytes(c, &dense, &expert);
  std::printf("{\"kind\":\"model\",\"device_weight_bytes\":%zu,\"dense_bytes\":%.0f,\"expert_bytes\":%.0f,"
              "\"setup_s\":%.2f,\"cache_pages\":%d,\"block_size\":%d,\"fp8_gemm\":%d,\"mhc_one_pass\":%d}\n",
              m.weight_bytes(), dense, expert, setup_s, opt.num_blocks, block, fp8_gemm ? 1 : 0, mhc_one_pass ? 1 : 0);
  std::fflush(stdout);

  // Decode.
  for (int ctx : contexts)
    for (int B : batches) {
      std::vector<std::vector<int32_t>> tok(B, std::vector<int32_t>(1));
      std::vector<std::vector<int>> tables(B);
      for (int b = 0; b < B; ++b) {
        for (int p = 0; p < dec_pages; ++p) tables[b].push_back(b * dec_pages + p);
        m.reset_slot(b);
      }
      // Step s: every sequence at position ctx + s (tokens the chained steps take from the device).
      auto step_batch = [&](int s) {
        std::vector<SeqChunk> batch(B);
        for (int b = 0; b < B; ++b) {
          tok[b][0] = static_cast<int32_t>((b * 7919 + s * 104729) % c.vocab_size);
          batch[b] = SeqChunk{tok[b], static_cast<int64_t>(ctx + s), b, tables[b], LogitRows::kLast};
        }
        return batch;
      };
      auto failed = [&](const char* what, const deepinfer::Status& st) {
        if (st.is_ok()) return false;
        std::fprintf(stderr, "%s B=%d ctx=%d: %s\n", what, B, ctx, st.to_string().c_str());
        return true;
      };
      std::vector<deepinfer::backend::cuda::GreedyToken> greedy;
      std::vector<double> ms;
      for (int s = 0; s < steps + 3; ++s) {
        const std::vector<SeqChunk> batch = step_batch(s);
        const bool profiled = profile && s == steps + 2;
        if (profiled) cudaProfilerStart();
        const auto a = std::chrono::steady_clock::now();
        const auto st = m.forward(batch, nullptr, &greedy);
        const auto e = std::chrono::steady_clock::now();
        if (profiled) cudaProfilerStop();
        if (failed("decode", st)) return 1;
        if (s >= 3) ms.push_back(std::chrono::duration<double, std::milli>(e - a).count());
      }
      if (failed("decode", traced("decode_b" + std::to_string(B) + "_ctx" + std::to_string(ctx),
                                  [&] { return m.forward(step_batch(steps + 3), nullptr, &greedy); })))
        return 1;
      const double med = median(ms), fastest = *std::min_element(ms.begin(), ms.end());
      // Chained steps, as the engine runs them (CudaModel::submit_greedy / collect_greedy): step s
      // is enqueued before step s - 1 is collected, its tokens step s - 1's greedy rows taken on the
      // device, so the host's work on a step overlaps the GPU's on the one before. A step's time: the
      // interval between two collections (median), i.e. the GPU's time a step when the host keeps up.
      for (int b = 0; b < B; ++b) m.reset_slot(b);
      std::vector<deepinfer::backend::cuda::DeferredToken> deferred(B);
      for (int b = 0; b < B; ++b) deferred[b] = {b, b};
      std::vector<double> chained;
      if (failed("chained decode", m.submit_greedy(step_batch(0), {}))) return 1;
      auto last_collect = std::chrono::steady_clock::now();
      for (int s = 1; s < steps + 3; ++s) {
        if (failed("chained decode", m.submit_greedy(step_batch(s), deferred))) return 1;
        if (failed("chained decode", m.collect_greedy(&greedy))) return 1;  // step s - 1
        const auto now = std::chrono::steady_clock::now();
        if (s >= 4) chained.push_back(std::chrono::duration<double, std::milli>(now - last_collect).count());
        last_collect = now;
      }
      if (failed("chained decode", m.collect_greedy(&greedy))) return 1;
      const double chained_med = median(chained);
      // Bytes a step must read: dense weights, the distinct routed experts (expected for uniform
      // routing: E (1 - (1 - K/E)^B) per layer), and the KV rows / indexer keys of every sequence.
      const double E = c.n_routed_experts, K = c.num_experts_per_tok;
      const double experts = c.num_layers * E * (1 - std::pow(1 - K / E, B));
      double kv = 0;
      for (int l = 0; l < c.num_layers; ++l) {
        const double win = std::min(ctx + 1, c.sliding_window);
        double rows = win;
        if (c.layer_kinds[l] == AttentionKind::kHca) rows += (ctx + 1) / c.compress_ratio[l];
        if (c.layer_kinds[l] == AttentionKind::kCsa) {
          rows += std::min((ctx + 1) / c.compress_ratio[l], c.index_topk);
          kv += static_cast<double>((ctx + 1) / c.compress_ratio[l]) * c.index_head_dim * 2;
        }
        kv += rows * c.head_dim * 2;
      }
      kv *= B;
      // FLOPs: every token multiplies the dense weights and K experts per layer, and attends.
      double attn_rows = 0;
      for (int l = 0; l < c.num_layers; ++l) {
        attn_rows += std::min(ctx + 1, c.sliding_window);
        if (c.layer_kinds[l] == AttentionKind::kHca) attn_rows += (ctx + 1) / c.compress_ratio[l];
        if (c.layer_kinds[l] == AttentionKind::kCsa) attn_rows += std::min((ctx + 1) / c.compress_ratio[l], c.index_topk);
      }
      const double flops = B * (dense + c.num_layers * K * expert + 4.0 * c.num_heads * c.head_dim * attn_rows);
      std::printf("{\"kind\":\"decode\",\"batch\":%d,\"context\":%d,\"step_ms\":%.4f,\"min_ms\":%.4f,\"tok_s\":%.1f,"
                  "\"chained_ms\":%.4f,\"weight_bytes\":%.0f,\"kv_bytes\":%.0f,\"flops\":%.4g}\n",
                  B, ctx, med, fastest, B / (med * 1e-3), chained_med, dense + experts * expert, kv, flops);
      std::fflush(stdout);
    }

  // Prefill of one sequence, in chunks of max_step_tokens.
  for (int n : prefills) {
    std::vector<int32_t> seq(n);
    for (int i = 0; i < n; ++i) seq[i] = static_cast<int32_t>((i * 2654435761u) % static_cast<unsigned>(c.vocab_size));
    std::vector<int> table(pages_per_seq);
    for (int p = 0; p < pages_per_seq; ++p) table[p] = p;
    // One prefill of the sequence, chunk by chunk.
    auto prefill = [&]() -> deepinfer::Status {
      m.reset_slot(0);
      std::vector<float> logits;
      for (int b = 0; b < n; b += opt.max_step_tokens) {
        const int len = std::min(opt.max_step_tokens, n - b);
        SeqChunk sc{std::span<const int32_t>(seq).subspan(b, len), b, 0, table, LogitRows::kLast};
        DI_RETURN_IF_ERROR(m.forward(std::span<const SeqChunk>(&sc, 1), &logits));
      }
      return deepinfer::Status::ok();
    };
    auto prefill_failed = [&](const deepinfer::Status& st) {
      if (st.is_ok()) return false;
      std::fprintf(stderr, "prefill %d: %s\n", n, st.to_string().c_str());
      return true;
    };
    std::vector<double> ms;
    for (int rep = 0; rep < 3; ++rep) {
      if (profile && rep == 2) cudaProfilerStart();
      const auto a = std::chrono::steady_clock::now();
      if (prefill_failed(prefill())) return 1;
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
      if (profile && rep == 2) cudaProfilerStop();
    }
    if (prefill_failed(traced("prefill_" + std::to_string(n), prefill))) return 1;
    // FLOPs: 2 x the weights a token multiplies (dense minus the head, plus K routed experts; the
    // head runs for one row) plus attention (scores and values over each token's rows, 64 heads)
    // and the indexer's scores.
    const double per_token_weights = (dense - 2.0 * c.vocab_size * c.hidden_size + c.num_layers * c.num_experts_per_tok * expert) / 2;
    double attn = 0;
    for (int t = 0; t < n; ++t)
      for (int l = 0; l < c.num_layers; ++l) {
        double rows = std::min(t + 1, c.sliding_window);
        if (c.layer_kinds[l] == AttentionKind::kHca) rows += (t + 1) / c.compress_ratio[l];
        if (c.layer_kinds[l] == AttentionKind::kCsa) {
          rows += std::min((t + 1) / c.compress_ratio[l], c.index_topk);
          attn += 2.0 * c.index_n_heads * c.index_head_dim * ((t + 1) / c.compress_ratio[l]);
        }
        attn += 4.0 * c.num_heads * c.head_dim * rows;
      }
    const double flops = 2.0 * per_token_weights * n + attn, med = median(ms);
    std::printf("{\"kind\":\"prefill\",\"tokens\":%d,\"ms\":%.3f,\"tok_s\":%.1f,\"flops\":%.4g}\n", n, med,
                n / (med * 1e-3), flops);
    std::fflush(stdout);
  }
  return 0;
}
