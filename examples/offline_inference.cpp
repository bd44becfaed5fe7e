// Offline batched inference with deepinfer's C++ API — the counterpart of vLLM's
// examples/offline_inference.py.
//
//   ./build/offline_inference [MODEL_DIR]
//
// Without MODEL_DIR the embedded default model runs on token-id prompts (it has no tokenizer).
#include <cstdio>
#include <string>
#include <vector>

#include "deepinfer/engine.h"

int main(int argc, char** argv) {
  deepinfer::EngineOptions options;
  if (argc > 1) options.model = argv[1];
  auto llm = deepinfer::LLM::create(options);
  if (!llm.is_ok()) {
    std::fprintf(stderr, "error: %s\n", llm.status().to_string().c_str());
    return 1;
  }
  const bool has_tokenizer = (*llm)->tokenizer() != nullptr;

  // Sample prompts: text when the model has a tokenizer, token ids otherwise.
  std::vector<deepinfer::Prompt> prompts;
  if (has_tokenizer) {
    for (const char* p : {"Hello, my name is", "The president of the United States is", "The capital of France is",
                          "The future of AI is"})
      prompts.push_back(deepinfer::Prompt::from_text(p));
  } else {
    prompts = {deepinfer::Prompt::from_token_ids({5, 17, 42}), deepinfer::Prompt::from_token_ids({100, 200, 300, 400}),
               deepinfer::Prompt::from_token_ids({7}), deepinfer::Prompt::from_token_ids({11, 12, 13, 14, 15, 16})};
  }

  // Sampling parameters: the same for every prompt here; generate() also takes one per prompt.
  deepinfer::SamplingParams sampling;
  sampling.temperature = 0.8f;
  sampling.top_p = 0.95f;
  sampling.max_tokens = 16;

  // Generate: requests run together with continuous batching; outputs come back in prompt order.
  const std::vector<deepinfer::RequestOutput> outputs = (*llm)->generate(prompts, sampling);

  std::printf("\nGenerated Outputs:\n------------------------------------------------------------\n");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const deepinfer::RequestOutput& out = outputs[i];
    if (out.finish_reason == deepinfer::FinishReason::kError) {
      std::printf("Request %zu failed: %s\n", i, out.error.c_str());
      continue;
    }
    std::string ids;
    for (int32_t t : out.token_ids) ids += (ids.empty() ? "" : " ") + std::to_string(t);
    std::printf("Prompt %zu:    %s\n", i, has_tokenizer ? prompts[i].text.c_str() : "(token ids)");
    if (has_tokenizer) std::printf("Output:      %s\n", out.text.c_str());
    std::printf("Token ids:   %s\n", ids.c_str());
    std::printf("Finish:      %s   seed %llu   ttft %.1f ms   tpot %.1f ms\n",
                deepinfer::finish_reason_name(out.finish_reason), static_cast<unsigned long long>(out.seed),
                out.time_to_first_token * 1e3, out.time_per_output_token * 1e3);
    std::printf("------------------------------------------------------------\n");
  }
  return 0;
}
