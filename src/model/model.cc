// Implements the public deepinfer::Model over the CPU backend and model::DeepSeekV4.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "deepinfer/model.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "base/check.h"
#include "model/deepseek_v4.h"
#include "model/kv_format.h"
#include "model/loaded_model.h"
#include "model/numerics.h"
#include "model/weights.h"

namespace deepinfer {

namespace {

// A session is a one-slot state cache whose pages grow as the sequence does (block table 0, 1, ...).
class SessionImpl final : public Session {
 public:
  explicit SessionImpl(const model::StateCacheShape& shape) : storage(shape, 1, 0) {}
  int64_t num_tokens() const override { return num_tokens_; }
  model::StateStorage storage;
  int64_t num_tokens_ = 0;
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

model::StateCacheShape make_shape(const model::ModelConfig& c, model::KvCacheDtype kv) {
  Result<model::StateCacheShape> s = model::make_state_cache_shape(c, model::default_block_size(c), kv);
  DI_CHECK(s.is_ok(), "default block size is valid by construction");
  return std::move(s).value();
}

class ModelImpl final : public Model {
 public:
  ModelImpl(std::unique_ptr<model::LoadedModel> m, model::Numerics numerics, model::KvCacheDtype kv)
      : m_(std::move(m)),
        config_(m_->config),
        backend_(backend::make_cpu_backend()),
        net_(m_->config, m_->weights, *backend_, numerics),
        shape_(make_shape(m_->config, kv)),
        info_(make_info(m_->config, m_->layout, m_->description)) {
    info_.numerics = model::numerics_name(numerics);
    info_.kv_cache_dtype = model::kv_cache_dtype_name(kv);
  }

  const ModelInfo& info() const override { return info_; }

  std::unique_ptr<Session> new_session() const override { return std::make_unique<SessionImpl>(shape_); }

  Status forward(Session& session, std::span<const int32_t> tokens, std::vector<float>* logits) const override {
    auto* s = dynamic_cast<SessionImpl*>(&session);
    if (s == nullptr) return Status::invalid_argument("session was not created by this model");
    const int64_t end = s->num_tokens_ + static_cast<int64_t>(tokens.size());
    const int pages = shape_.page_bytes > 0 ? static_cast<int>((end + shape_.block_size - 1) / shape_.block_size) : 0;
    s->storage.grow_pages(pages);
    std::vector<int> table(s->storage.num_blocks());
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
    const model::SeqChunk chunk{tokens, s->num_tokens_, 0, table, model::LogitRows::kAll};
    Status st = net_.forward(std::span<const model::SeqChunk>(&chunk, 1), s->storage, logits);
    if (!st.is_ok()) return st;
    s->num_tokens_ = end;
    return st;
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
  std::unique_ptr<model::LoadedModel> m_;
  const model::ModelConfig& config_;
  std::unique_ptr<backend::Backend> backend_;
  model::DeepSeekV4 net_;
  model::StateCacheShape shape_;
  ModelInfo info_;
};


}  // namespace

Result<NumericsMode> parse_numerics(const std::string& name) {
  if (name == "auto") return NumericsMode::kAuto;
  if (name == "exact") return NumericsMode::kExact;
  if (name == "release") return NumericsMode::kRelease;
  return Status::invalid_argument("numerics must be auto, exact or release, got '" + name + "'");
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, NumericsMode numerics) {
  LoadOptions o;
  o.numerics = numerics;
  return load(dir, o);
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const LoadOptions& options) {
  if (options.kv_cache_dtype != "auto" && !model::kv_cache_dtype_from_name(options.kv_cache_dtype))
    return Status::invalid_argument("kv_cache_dtype must be auto, float32, bfloat16 or fp8, got '" +
                                    options.kv_cache_dtype + "'");
  DI_ASSIGN_OR_RETURN(std::unique_ptr<model::LoadedModel> m, model::load_model_dir(dir));
  const NumericsMode nm = options.numerics;
  const model::Numerics n = model::resolve_numerics(nm == NumericsMode::kAuto    ? "auto"
                                                    : nm == NumericsMode::kExact ? "exact"
                                                                                 : "release",
                                                    m->config);
  const model::KvCacheDtype kv = model::resolve_kv_cache_dtype(options.kv_cache_dtype, n == model::Numerics::kRelease);
  return std::unique_ptr<Model>(new ModelImpl(std::move(m), n, kv));
}

Result<std::vector<StateCacheBytes>> state_cache_bytes(const std::string& config_json, int block_size) {
  std::string path = config_json;
  if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "config.json").string();
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::not_found("cannot read " + path);
  std::stringstream text;
  text << f.rdbuf();
  // A bare architecture config (the oracle configs' style) may leave out model_type.
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && !j.contains("model_type")) j["model_type"] = "deepseek_v4";
  DI_ASSIGN_OR_RETURN(model::ModelConfig c, model::parse_model_config(j.is_object() ? j.dump() : text.str(), path));
  if (block_size < 0) return Status::invalid_argument("block_size must be >= 0, got " + std::to_string(block_size));
  const int bs = block_size > 0 ? block_size : model::default_block_size(c);
  std::vector<StateCacheBytes> out;
  for (model::KvCacheDtype d : {model::KvCacheDtype::kF32, model::KvCacheDtype::kBF16, model::KvCacheDtype::kFP8}) {
    DI_ASSIGN_OR_RETURN(model::StateCacheShape s, model::make_state_cache_shape(c, bs, d));
    StateCacheBytes b;
    b.kv_cache_dtype = model::kv_cache_dtype_name(d);
    b.block_size = bs;
    b.slot_bytes = static_cast<int64_t>(s.slot_bytes);
    b.window_bytes = static_cast<int64_t>(c.num_layers) * c.sliding_window * static_cast<int64_t>(s.kv_row.bytes());
    b.page_bytes = static_cast<int64_t>(s.page_bytes);
    out.push_back(b);
  }
  return out;
}

Result<std::unique_ptr<Model>> Model::load_default() {
  return std::unique_ptr<Model>(
      new ModelImpl(model::load_embedded_model(), model::Numerics::kExact, model::KvCacheDtype::kF32));
}

}  // namespace deepinfer
