#include "model/loaded_model.h"

#include "model/default_model.h"

namespace deepinfer::model {

namespace {
constexpr uint64_t kDefaultModelSeed = 20260424;
}  // namespace

Result<std::unique_ptr<LoadedModel>> load_model_dir(const std::string& dir) {
  auto m = std::make_unique<LoadedModel>();
  DI_ASSIGN_OR_RETURN(m->config, load_model_config(dir));
  DI_ASSIGN_OR_RETURN(m->files, io::SafetensorsSet::open_dir(dir, {"reference.safetensors"}));
  DI_ASSIGN_OR_RETURN(m->weights, load_weights(m->files, m->config));
  m->layout = m->weights.layout;
  m->description = "DeepSeek-V4 from " + dir + " (" + m->layout + " layout, " + std::to_string(m->config.num_layers) +
                   " layers, hidden " + std::to_string(m->config.hidden_size) + ", " +
                   std::to_string(m->weights.mtp.size()) + " MTP tensors kept)";
  return m;
}

std::unique_ptr<LoadedModel> load_embedded_model() {
  auto m = std::make_unique<LoadedModel>();
  m->config = default_model_config();
  m->weights = default_model_weights(m->config, kDefaultModelSeed);
  m->layout = "embedded";
  m->description = "embedded default model: a small DeepSeek-V4 with deterministic random weights (not trained)";
  return m;
}

}  // namespace deepinfer::model
