// A checkpoint in memory: its config, its weights (views into the mapped files where possible) and
// the mappings that keep those views alive. Shared by the public Model and the engine.
#pragma once

#include <memory>
#include <string>

#include "deepinfer/status.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"

namespace deepinfer::model {

struct LoadedModel {
  io::SafetensorsSet files;  // keeps the mappings that weight views point into
  ModelConfig config;
  ModelWeights weights;
  std::string layout;        // "official", "transformers" or "embedded"
  std::string description;   // one line for logs
};

// Loads config.json and the safetensors (single file or sharded) of `dir`; every tensor is checked
// against the config.
Result<std::unique_ptr<LoadedModel>> load_model_dir(const std::string& dir);
// The embedded default model (deterministic random weights generated in process).
std::unique_ptr<LoadedModel> load_embedded_model();

}  // namespace deepinfer::model
