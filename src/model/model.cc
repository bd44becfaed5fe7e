// Implements the public deepinfer::Model over the CPU backend and model::DeepSeekV4.
#include <algorithm>
#include <memory>

#include "backend/backend.h"
#include "deepinfer/model.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/default_model.h"
#include "model/weights.h"

namespace deepinfer {

namespace {

constexpr uint64_t kDefaultModelSeed = 20260424;

class SessionImpl final : public Session {
 public:
  explicit SessionImpl(model::DecodeState s) : state(std::move(s)) {}
  int64_t num_tokens() const override { return state.num_tokens; }
  model::DecodeState state;
};

class ModelImpl final : public Model {
 public:
  ModelImpl(model::ModelConfig config, model::ModelWeights weights, ModelInfo info, io::SafetensorsSet files = {})
      : files_(std::move(files)),
        config_(std::move(config)),
        weights_(std::move(weights)),
        backend_(backend::make_cpu_backend()),
        net_(config_, weights_, *backend_),
        info_(std::move(info)) {}

  const ModelInfo& info() const override { return info_; }

  std::unique_ptr<Session> new_session() const override { return std::make_unique<SessionImpl>(net_.new_state()); }

  Status forward(Session& session, std::span<const int32_t> tokens, std::vector<float>* logits) const override {
    auto* s = dynamic_cast<SessionImpl*>(&session);
    if (s == nullptr) return Status::invalid_argument("session was not created by this model");
    return net_.forward(s->state, tokens, logits);
  }

  Result<std::vector<int32_t>> generate_greedy(std::span<const int32_t> prompt, int max_tokens, int chunk,
                                               bool stop_at_eos) const override {
    if (prompt.empty()) return Status::invalid_argument("prompt is empty");
    if (max_tokens < 1) return Status::invalid_argument("max_tokens must be at least 1");
    auto session = new_session();
    std::vector<float> logits;
    const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : prompt.size();
    for (size_t b = 0; b < prompt.size(); b += step) {
      const size_t n = std::min(step, prompt.size() - b);
      DI_RETURN_IF_ERROR(forward(*session, prompt.subspan(b, n), &logits));
    }
    const int V = config_.vocab_size;
    std::vector<int32_t> out;
    for (int i = 0; i < max_tokens; ++i) {
      const float* last = logits.data() + logits.size() - V;
      const int32_t tok = static_cast<int32_t>(std::max_element(last, last + V) - last);  // first max on ties
      out.push_back(tok);
      if (stop_at_eos && tok == config_.eos_token_id) break;
      if (i + 1 == max_tokens) break;
      const int32_t one[1] = {tok};
      DI_RETURN_IF_ERROR(forward(*session, one, &logits));
    }
    return out;
  }

 private:
  io::SafetensorsSet files_;  // keeps the mappings that ModelWeights::mtp views point into
  model::ModelConfig config_;
  model::ModelWeights weights_;
  std::unique_ptr<backend::Backend> backend_;
  model::DeepSeekV4 net_;
  ModelInfo info_;
};

ModelInfo make_info(const model::ModelConfig& c, const std::string& layout, const std::string& description) {
  ModelInfo i;
  i.vocab_size = c.vocab_size;
  i.hidden_size = c.hidden_size;
  i.num_layers = c.num_layers;
  i.eos_token_id = c.eos_token_id;
  i.layout = layout;
  i.description = description;
  return i;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& dir) {
  DI_ASSIGN_OR_RETURN(model::ModelConfig config, model::load_model_config(dir));
  DI_ASSIGN_OR_RETURN(io::SafetensorsSet set, io::SafetensorsSet::open_dir(dir, {"reference.safetensors"}));
  DI_ASSIGN_OR_RETURN(model::ModelWeights weights, model::load_weights(set, config));
  const std::string layout = weights.layout;
  ModelInfo info = make_info(config, layout, "DeepSeek-V4 from " + dir + " (" + layout + " layout, " +
                                                 std::to_string(config.num_layers) + " layers, hidden " +
                                                 std::to_string(config.hidden_size) + ", " +
                                                 std::to_string(weights.mtp.size()) + " MTP tensors kept)");
  return std::unique_ptr<Model>(new ModelImpl(std::move(config), std::move(weights), std::move(info), std::move(set)));
}

Result<std::unique_ptr<Model>> Model::load_default() {
  model::ModelConfig config = model::default_model_config();
  model::ModelWeights weights = model::default_model_weights(config, kDefaultModelSeed);
  ModelInfo info = make_info(config, "embedded",
                             "embedded default model: a small DeepSeek-V4 with deterministic random weights (not trained)");
  return std::unique_ptr<Model>(new ModelImpl(std::move(config), std::move(weights), std::move(info)));
}

}  // namespace deepinfer
