// The embedded default model: a small DeepSeek-V4 (every layer kind, hash and learned MoE, mHC)
// whose weights are generated in process from a fixed seed, so the engine runs with no download.
// It is not trained: its output is deterministic but meaningless text-wise.
#pragma once

#include "model/config.h"
#include "model/weights.h"

namespace deepinfer::model {

ModelConfig default_model_config();
ModelWeights default_model_weights(const ModelConfig& config, uint64_t seed);

}  // namespace deepinfer::model
