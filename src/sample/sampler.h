// Token sampling for one request's logits row. Deterministic and batch invariant by construction:
// the result is a pure function of (logits row, parameters, token history, seed, position), so a
// request samples the same token alone, in any batch, in any step, before or after preemption.
//
// Randomness: Philox4x32-10 keyed by (seed, position) with the token id as counter gives each
// vocabulary entry its own uniform U; sampling is the Gumbel-max trick over the processed
// distribution: argmax_v (logit_v / T - log(-log U_v)) over the tokens the filters keep.
//
// Order of processing (vLLM's): penalties on the raw logits -> temperature -> min-p, top-k,
// top-p filters (on the tempered probabilities) -> Gumbel-max draw. temperature == 0 is greedy
// (argmax of the penalised logits, lowest id on ties). Logprobs are of the raw model distribution
// (log_softmax of the unprocessed logits), as vLLM's default "raw_logprobs".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/request.h"

namespace deepinfer::sample {

struct SamplingConfig {
  float temperature = 1.0f;          // >= 0; 0 means greedy
  int top_k = 0;                     // <= 0: no top-k filter
  float top_p = 1.0f;                // (0, 1]
  float min_p = 0.0f;                // [0, 1]
  float repetition_penalty = 1.0f;   // > 0; over prompt and output tokens (HF/vLLM rule: divide positive logits, multiply negative)
  float presence_penalty = 0.0f;     // over output tokens (OpenAI rule): logit -= presence * [count > 0]
  float frequency_penalty = 0.0f;    // over output tokens: logit -= frequency * count
  uint64_t seed = 0;
  int num_logprobs = 0;              // top logprobs to report besides the sampled token's (0: none)
};

// Philox4x32-10 (Salmon et al., SC'11): one 128-bit block from a 128-bit counter and a 64-bit key.
void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

// The uniform in (0, 1) that drives vocabulary entry `token` when sampling at `position` with `seed`.
double philox_uniform(uint64_t seed, int64_t position, int32_t token);

struct SampleInput {
  std::span<const float> logits;          // [vocab] raw model logits
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;  // generated so far (penalties)
  int64_t position = 0;                   // absolute position of the token being sampled
  std::span<const int32_t> banned_tokens;  // never sampled (min_tokens masks EOS / stop ids)
};

// Samples one token. `result.id` is left 0 for the caller to fill.
core::SampledToken sample_token(const SampleInput& in, const SamplingConfig& config);

}  // namespace deepinfer::sample
