// Offline throughput of the engine at 1, 2, 4, ... concurrent requests, on the CPU or the GPU.
//
//   ./build/deepinfer_bench_engine [--model DIR] [--device cpu|cuda] [--prompt-len N] [--output-len N]
//                                  [--max-concurrency N] [--cache-mib N] [--threads N] [--async-scheduling 0|1]
//                                  [--json]
//
// For each concurrency c: c requests (random prompt ids, fixed seed), greedy, ignore_eos, all
// submitted at once; prints wall time, output tokens/s, total (prompt + output) tokens/s, mean
// time to first token and mean time per output token. Async scheduling on unless
// --async-scheduling 0 (on the GPU it also chains greedy steps on the device: the JSON's
// overlapped_steps counts the steps enqueued before the previous step's tokens came back). With
// --json, one JSON line per concurrency instead of the table (tools/gpu/report.py reads them: output
// tokens/s per GPU against tokens/s per user = 1 / time per output token).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/engine.h"

int main(int argc, char** argv) {
  deepinfer::EngineOptions o;
  int prompt_len = 64, output_len = 64, max_c = 64;
  bool json = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--json") {
      json = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", argv[i]);
      return 2;
    }
    if (k == "--model") o.model = argv[i + 1];
    else if (k == "--device") o.device = argv[i + 1];
    else if (k == "--cache-mib") o.cache_bytes = std::stoll(argv[i + 1]) << 20;
    else if (k == "--prompt-len") prompt_len = std::stoi(argv[i + 1]);
    else if (k == "--output-len") output_len = std::stoi(argv[i + 1]);
    else if (k == "--max-concurrency") max_c = std::stoi(argv[i + 1]);
    else if (k == "--threads") o.num_threads = std::stoi(argv[i + 1]);
    else if (k == "--async-scheduling") o.async_scheduling = std::stoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  o.max_num_seqs = max_c;
  auto llm = deepinfer::LLM::create(o);
  if (!llm.is_ok()) {
    std::fprintf(stderr, "error: %s\n", llm.status().to_string().c_str());
    return 1;
  }
  const deepinfer::EngineStats st = (*llm)->stats();
  // The model directory's last component (for the JSON; no quotes or backslashes kept).
  std::string model_name = o.model.empty() ? "default" : o.model;
  while (model_name.size() > 1 && model_name.back() == '/') model_name.pop_back();
  model_name = model_name.substr(model_name.find_last_of('/') + 1);
  std::erase_if(model_name, [](char ch) { return ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 32; });
  if (!json) std::printf("model: %s\nstate cache: slot %lld bytes/request, page %lld bytes per %d positions, %d pages\n",
              (*llm)->description().c_str(), static_cast<long long>(st.slot_bytes), static_cast<long long>(st.page_bytes),
              st.block_size, st.num_blocks);
  if (!json) std::printf("prompt %d tokens, output %d tokens, greedy, device %s\n", prompt_len, output_len,
                         st.device.c_str());
  if (!json) std::printf("%11s %9s %13s %13s %10s %10s\n", "concurrency", "wall_s", "out_tok/s", "total_tok/s", "ttft_ms", "tpot_ms");
  std::mt19937 rng(1);
  const int V = (*llm)->vocab_size();
  for (int c = 1; c <= max_c; c *= 2) {
    std::vector<deepinfer::Prompt> prompts;
    for (int i = 0; i < c; ++i) {
      std::vector<int32_t> ids(prompt_len);
      for (auto& t : ids) t = static_cast<int32_t>(2 + rng() % (V - 2));
      prompts.push_back(deepinfer::Prompt::from_token_ids(std::move(ids)));
    }
    deepinfer::SamplingParams sp;
    sp.temperature = 0.0f;
    sp.max_tokens = output_len;
    sp.ignore_eos = true;
    const uint64_t overlapped_before = (*llm)->stats().overlapped_steps, steps_before = (*llm)->stats().steps;
    const auto t0 = std::chrono::steady_clock::now();
    const auto outs = (*llm)->generate(prompts, sp);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double out_tokens = 0, ttft = 0, tpot = 0;
    for (const auto& r : outs) {
      if (r.finish_reason == deepinfer::FinishReason::kError) {
        std::fprintf(stderr, "error: %s\n", r.error.c_str());
        return 1;
      }
      out_tokens += static_cast<double>(r.token_ids.size());
      ttft += r.time_to_first_token;
      tpot += r.time_per_output_token;
    }
    if (json)
      std::printf("{\"bench\":\"engine\",\"model\":\"%s\",\"device\":\"%s\",\"async\":%d,\"concurrency\":%d,\"prompt\":%d,"
                  "\"output\":%d,\"wall_s\":%.4f,\"out_tok_s\":%.2f,\"total_tok_s\":%.2f,\"ttft_ms\":%.3f,"
                  "\"tpot_ms\":%.4f,\"steps\":%llu,\"overlapped_steps\":%llu}\n",
                  model_name.c_str(), (*llm)->stats().device.c_str(), o.async_scheduling ? 1 : 0, c, prompt_len, output_len, wall,
                  out_tokens / wall, (out_tokens + static_cast<double>(c) * prompt_len) / wall, 1e3 * ttft / c,
                  1e3 * tpot / c, static_cast<unsigned long long>((*llm)->stats().steps - steps_before),
                  static_cast<unsigned long long>((*llm)->stats().overlapped_steps - overlapped_before));
    else
      std::printf("%11d %9.3f %13.1f %13.1f %10.1f %10.2f\n", c, wall, out_tokens / wall,
                  (out_tokens + static_cast<double>(c) * prompt_len) / wall, 1e3 * ttft / c, 1e3 * tpot / c);
    std::fflush(stdout);
  }
  return 0;
}
