#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace deepinfer::model {

using nlohmann::json;

const char* attention_kind_name(AttentionKind k) {
  switch (k) {
    case AttentionKind::kSliding: return "sliding_attention";
    case AttentionKind::kCsa: return "compressed_sparse_attention";
    case AttentionKind::kHca: return "heavily_compressed_attention";
  }
  return "?";
}

bool ModelConfig::has_csa() const {
  for (auto k : layer_kinds)
    if (k == AttentionKind::kCsa) return true;
  return false;
}

namespace {

// Small typed accessors that turn JSON shape errors into Status messages naming the field.
class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  Status get_int(const char* key, int* out, bool required, int fallback = 0) const {
    if (!has(key)) {
      if (required) return Status::invalid_argument(source_ + ": missing required key '" + key + "'");
      *out = fallback;
      return Status::ok();
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer()) return Status::invalid_argument(source_ + ": key '" + key + "' must be an integer");
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x > (int64_t{1} << 30)) return Status::invalid_argument(source_ + ": key '" + key + "' is out of range");
    *out = static_cast<int>(x);
    return Status::ok();
  }

  Status get_double(const json& obj, const char* key, double* out, bool required, double fallback,
                    const std::string& where) const {
    if (!obj.contains(key) || obj.at(key).is_null()) {
      if (required) return Status::invalid_argument(source_ + ": missing required key '" + where + key + "'");
      *out = fallback;
      return Status::ok();
    }
    const json& v = obj.at(key);
    if (!v.is_number()) return Status::invalid_argument(source_ + ": key '" + where + key + "' must be a number");
    *out = v.get<double>();
    if (!std::isfinite(*out)) return Status::invalid_argument(source_ + ": key '" + where + key + "' is not finite");
    return Status::ok();
  }
  Status get_double(const char* key, double* out, bool required, double fallback = 0) const {
    return get_double(j_, key, out, required, fallback, "");
  }

  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_;
};

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// One rope-parameter dict (nested "main"/"compress" entry, or the flat legacy dict).
// `force_attention_factor_one` reproduces transformers' V4 rule: a flat YaRN dict gets
// attention_factor 1.0 unless it names one.
Status parse_rope_dict(const Reader& r, const json& d, double theta_default, bool theta_from_dict,
                       bool force_attention_factor_one, int max_pos, const std::string& where, RopeParams* out) {
  RopeParams p;
  if (!d.is_object()) return Status::invalid_argument(r.source() + ": '" + where + "' must be an object");
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (d.contains(key) && d.at(key).is_string()) {
      type = d.at(key).get<std::string>();
      break;
    }
  }
  p.theta = theta_default;
  if (theta_from_dict) DI_RETURN_IF_ERROR(r.get_double(d, "rope_theta", &p.theta, false, theta_default, where + "."));
  if (type == "default") {
    *out = p;
    return Status::ok();
  }
  if (type != "yarn")
    return Status::unsupported(r.source() + ": '" + where + "' rope_type '" + type + "' is not supported (default or yarn)");
  p.yarn = true;
  DI_RETURN_IF_ERROR(r.get_double(d, "original_max_position_embeddings", &p.original_max_position_embeddings, false,
                                  max_pos, where + "."));
  if (p.original_max_position_embeddings <= 0)
    return Status::invalid_argument(r.source() + ": '" + where + ".original_max_position_embeddings' must be positive");
  double factor = 0;
  if (d.contains("factor") && !d.at("factor").is_null()) {
    DI_RETURN_IF_ERROR(r.get_double(d, "factor", &factor, true, 0, where + "."));
  } else {
    factor = max_pos / p.original_max_position_embeddings;
  }
  if (!(factor > 0)) return Status::invalid_argument(r.source() + ": '" + where + ".factor' must be positive");
  p.factor = factor;
  double bf = 0, bs = 0;
  DI_RETURN_IF_ERROR(r.get_double(d, "beta_fast", &bf, false, 0, where + "."));
  DI_RETURN_IF_ERROR(r.get_double(d, "beta_slow", &bs, false, 0, where + "."));
  p.beta_fast = bf != 0 ? bf : 32.0;  // transformers: `get("beta_fast") or 32`
  p.beta_slow = bs != 0 ? bs : 1.0;
  if (d.contains("attention_factor") && !d.at("attention_factor").is_null()) {
    DI_RETURN_IF_ERROR(r.get_double(d, "attention_factor", &p.attention_factor, true, 1.0, where + "."));
  } else if (force_attention_factor_one) {
    p.attention_factor = 1.0;
  } else {
    double ms = 0, msa = 0;
    DI_RETURN_IF_ERROR(r.get_double(d, "mscale", &ms, false, 0, where + "."));
    DI_RETURN_IF_ERROR(r.get_double(d, "mscale_all_dim", &msa, false, 0, where + "."));
    p.attention_factor = (ms != 0 && msa != 0) ? yarn_mscale(factor, ms) / yarn_mscale(factor, msa) : yarn_mscale(factor, 1.0);
  }
  *out = p;
  return Status::ok();
}

Status parse_layer_type(const Reader& r, const json& v, size_t i, AttentionKind* out) {
  if (!v.is_string()) return Status::invalid_argument(r.source() + ": layer_types[" + std::to_string(i) + "] must be a string");
  const std::string s = v.get<std::string>();
  if (s == "sliding_attention") *out = AttentionKind::kSliding;
  else if (s == "compressed_sparse_attention") *out = AttentionKind::kCsa;
  else if (s == "heavily_compressed_attention") *out = AttentionKind::kHca;
  else
    return Status::invalid_argument(r.source() + ": layer_types[" + std::to_string(i) + "] is an unknown layer type '" + s +
                                    "' (expected sliding_attention, compressed_sparse_attention or heavily_compressed_attention)");
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalid_argument(source + ": not valid JSON");
  if (!j.is_object()) return Status::invalid_argument(source + ": top level must be a JSON object");
  Reader r(j, source);
  ModelConfig c;

  if (!r.has("model_type")) return Status::invalid_argument(source + ": missing required key 'model_type'");
  if (!j["model_type"].is_string() || j["model_type"].get<std::string>() != "deepseek_v4")
    return Status::unsupported(source + ": model_type must be 'deepseek_v4'");

  DI_RETURN_IF_ERROR(r.get_int("vocab_size", &c.vocab_size, true));
  DI_RETURN_IF_ERROR(r.get_int("hidden_size", &c.hidden_size, true));
  DI_RETURN_IF_ERROR(r.get_int("num_hidden_layers", &c.num_layers, true));
  DI_RETURN_IF_ERROR(r.get_int("num_attention_heads", &c.num_heads, true));
  DI_RETURN_IF_ERROR(r.get_int("head_dim", &c.head_dim, true));
  DI_RETURN_IF_ERROR(r.get_int("q_lora_rank", &c.q_lora_rank, true));
  DI_RETURN_IF_ERROR(r.get_int("o_groups", &c.o_groups, true));
  DI_RETURN_IF_ERROR(r.get_int("o_lora_rank", &c.o_lora_rank, true));
  DI_RETURN_IF_ERROR(r.get_int("sliding_window", &c.sliding_window, true));
  DI_RETURN_IF_ERROR(r.get_int("n_routed_experts", &c.n_routed_experts, true));
  DI_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", &c.num_experts_per_tok, true));
  DI_RETURN_IF_ERROR(r.get_int("moe_intermediate_size", &c.moe_intermediate_size, true));
  DI_RETURN_IF_ERROR(r.get_int("hc_mult", &c.hc_mult, true));
  DI_RETURN_IF_ERROR(r.get_int("n_shared_experts", &c.n_shared_experts, false, 1));
  DI_RETURN_IF_ERROR(r.get_int("hc_sinkhorn_iters", &c.hc_sinkhorn_iters, false, 20));
  DI_RETURN_IF_ERROR(r.get_int("max_position_embeddings", &c.max_position_embeddings, false, 1048576));
  DI_RETURN_IF_ERROR(r.get_int("num_nextn_predict_layers", &c.num_mtp_layers, false, 0));
  DI_RETURN_IF_ERROR(r.get_double("hc_eps", &c.hc_eps, false, 1e-6));
  DI_RETURN_IF_ERROR(r.get_double("rms_norm_eps", &c.rms_norm_eps, false, 1e-6));
  DI_RETURN_IF_ERROR(r.get_double("routed_scaling_factor", &c.routed_scaling_factor, false, 1.5));
  DI_RETURN_IF_ERROR(r.get_double("swiglu_limit", &c.swiglu_limit, false, 10.0));
  if (r.has("num_key_value_heads")) {
    int kvh = 0;
    DI_RETURN_IF_ERROR(r.get_int("num_key_value_heads", &kvh, true));
    if (kvh != 1) return Status::unsupported(source + ": num_key_value_heads must be 1 (V4 shares one KV head)");
  }
  if (r.has("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"].get<int>();
  if (r.has("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_id = e.get<int>();
    else if (e.is_array() && !e.empty() && e[0].is_number_integer()) c.eos_token_id = e[0].get<int>();
  }

  std::string scoring = "sqrtsoftplus";
  if (r.has("scoring_func")) {
    if (!j["scoring_func"].is_string()) return Status::invalid_argument(source + ": 'scoring_func' must be a string");
    scoring = j["scoring_func"].get<std::string>();
  }
  if (scoring == "sqrtsoftplus") c.scoring_func = ScoringFunc::kSqrtSoftplus;
  else if (scoring == "softmax") c.scoring_func = ScoringFunc::kSoftmax;
  else if (scoring == "sigmoid") c.scoring_func = ScoringFunc::kSigmoid;
  else return Status::unsupported(source + ": scoring_func '" + scoring + "' is not one of sqrtsoftplus, softmax, sigmoid");

  const int n = c.num_layers;
  if (n < 1) return Status::invalid_argument(source + ": num_hidden_layers must be at least 1");

  // Compression rates per attention kind.
  int csa_rate = 4, hca_rate = 128;
  if (r.has("compress_rates")) {
    const json& cr = j["compress_rates"];
    if (!cr.is_object()) return Status::invalid_argument(source + ": 'compress_rates' must be an object");
    for (auto it = cr.begin(); it != cr.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 1 || it.value().get<int64_t>() > (1 << 20))
        return Status::invalid_argument(source + ": compress_rates['" + it.key() + "'] must be a positive integer");
      if (it.key() == "compressed_sparse_attention") csa_rate = it.value().get<int>();
      else if (it.key() == "heavily_compressed_attention") hca_rate = it.value().get<int>();
      else return Status::invalid_argument(source + ": compress_rates has an unknown layer type '" + it.key() + "'");
    }
  }
  if (r.has("compress_rate_csa")) DI_RETURN_IF_ERROR(r.get_int("compress_rate_csa", &csa_rate, true));
  if (r.has("compress_rate_hca")) DI_RETURN_IF_ERROR(r.get_int("compress_rate_hca", &hca_rate, true));
  if (csa_rate < 1 || hca_rate < 1) return Status::invalid_argument(source + ": compression rates must be positive");

  if (r.has("layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array()) return Status::invalid_argument(source + ": 'layer_types' must be an array");
    if (lt.size() < static_cast<size_t>(n))
      return Status::invalid_argument(source + ": 'layer_types' has " + std::to_string(lt.size()) + " entries, expected " +
                                      std::to_string(n));
    for (int i = 0; i < n; ++i) {
      AttentionKind k;
      DI_RETURN_IF_ERROR(parse_layer_type(r, lt[i], i, &k));
      c.layer_kinds.push_back(k);
      c.compress_ratio.push_back(k == AttentionKind::kSliding ? 0 : k == AttentionKind::kCsa ? csa_rate : hca_rate);
    }
  } else if (r.has("compress_ratios")) {
    const json& cr = j["compress_ratios"];
    if (!cr.is_array()) return Status::invalid_argument(source + ": 'compress_ratios' must be an array");
    if (cr.size() < static_cast<size_t>(n))
      return Status::invalid_argument(source + ": 'compress_ratios' has " + std::to_string(cr.size()) +
                                      " entries, expected at least " + std::to_string(n));
    for (int i = 0; i < n; ++i) {
      if (!cr[i].is_number_integer() || cr[i].get<int64_t>() < 0 || cr[i].get<int64_t>() > (1 << 20))
        return Status::invalid_argument(source + ": compress_ratios[" + std::to_string(i) + "] must be a non-negative integer");
      const int ratio = cr[i].get<int>();
      // 0: sliding window only; the CSA rate (4): overlapping windows + indexer; else HCA at that ratio.
      const AttentionKind k = ratio == 0 ? AttentionKind::kSliding : ratio == csa_rate ? AttentionKind::kCsa : AttentionKind::kHca;
      c.layer_kinds.push_back(k);
      c.compress_ratio.push_back(ratio);
    }
  } else {
    return Status::invalid_argument(source + ": missing required key 'layer_types' (or legacy 'compress_ratios')");
  }

  if (r.has("mlp_layer_types")) {
    const json& mt = j["mlp_layer_types"];
    if (!mt.is_array() || mt.size() < static_cast<size_t>(n))
      return Status::invalid_argument(source + ": 'mlp_layer_types' must be an array with " + std::to_string(n) + " entries");
    for (int i = 0; i < n; ++i) {
      const std::string s = mt[i].is_string() ? mt[i].get<std::string>() : "";
      if (s == "hash_moe") c.hash_moe.push_back(true);
      else if (s == "moe") c.hash_moe.push_back(false);
      else
        return Status::invalid_argument(source + ": mlp_layer_types[" + std::to_string(i) + "] is an unknown MLP type '" + s +
                                        "' (expected hash_moe or moe)");
    }
  } else {
    int n_hash = 3;
    DI_RETURN_IF_ERROR(r.get_int("num_hash_layers", &n_hash, false, 3));
    for (int i = 0; i < n; ++i) c.hash_moe.push_back(i < n_hash);
  }

  // Partial RoPE width.
  double prf = 0;
  if (r.has("partial_rotary_factor")) {
    DI_RETURN_IF_ERROR(r.get_double("partial_rotary_factor", &prf, true));
    if (!(prf >= 0.0 && prf <= 1.0))
      return Status::invalid_argument(source + ": 'partial_rotary_factor' must be between 0 and 1");
    c.rope_head_dim = static_cast<int>(c.head_dim * prf);
  } else if (r.has("qk_rope_head_dim")) {
    DI_RETURN_IF_ERROR(r.get_int("qk_rope_head_dim", &c.rope_head_dim, true));
  } else {
    c.rope_head_dim = static_cast<int>(c.head_dim * (64.0 / 512.0));
  }

  // RoPE tables: nested {main, compress} as transformers saves them, or a flat dict
  // (rope_parameters or legacy rope_scaling) that describes the compress rope.
  double rope_theta = 10000.0, compress_theta = 160000.0;
  DI_RETURN_IF_ERROR(r.get_double("rope_theta", &rope_theta, false, 10000.0));
  DI_RETURN_IF_ERROR(r.get_double("compress_rope_theta", &compress_theta, false, 160000.0));
  const json* rp = nullptr;
  if (r.has("rope_scaling")) rp = &j["rope_scaling"];
  else if (r.has("rope_parameters")) rp = &j["rope_parameters"];
  if (rp != nullptr && !rp->is_object()) return Status::invalid_argument(source + ": 'rope_parameters' must be an object");
  if (rp != nullptr && rp->contains("main") && rp->contains("compress") && (*rp)["main"].is_object() &&
      (*rp)["compress"].is_object()) {
    DI_RETURN_IF_ERROR(parse_rope_dict(r, (*rp)["main"], rope_theta, true, false, c.max_position_embeddings,
                                       "rope_parameters.main", &c.rope_main));
    DI_RETURN_IF_ERROR(parse_rope_dict(r, (*rp)["compress"], compress_theta, true, false, c.max_position_embeddings,
                                       "rope_parameters.compress", &c.rope_compress));
    for (const char* key : {"main", "compress"}) {
      const json& d = (*rp)[key];
      if (!d.contains("partial_rotary_factor")) continue;
      const json& f = d["partial_rotary_factor"];
      const double v = f.is_number() ? f.get<double>() : -1.0;
      if (!(v >= 0.0 && v <= 1.0))
        return Status::invalid_argument(source + ": 'rope_parameters." + key +
                                        ".partial_rotary_factor' must be a number between 0 and 1");
      if (static_cast<int>(c.head_dim * v) != c.rope_head_dim)
        return Status::unsupported(source + ": rope_parameters." + key +
                                   ".partial_rotary_factor disagrees with the model's RoPE width");
    }
  } else {
    c.rope_main.theta = rope_theta;
    json flat = rp != nullptr ? *rp : json::object();
    flat.erase("main");
    flat.erase("compress");
    DI_RETURN_IF_ERROR(parse_rope_dict(r, flat, compress_theta, false, true, c.max_position_embeddings,
                                       rp != nullptr && r.has("rope_scaling") ? "rope_scaling" : "rope_parameters",
                                       &c.rope_compress));
  }

  if (r.has("quantization_config") && j["quantization_config"].is_object()) {
    const json& q = j["quantization_config"];
    c.fp8_quantized = q.contains("quant_method") && q["quant_method"] == "fp8";
  }

  if (c.has_csa()) {
    DI_RETURN_IF_ERROR(r.get_int("index_n_heads", &c.index_n_heads, true));
    DI_RETURN_IF_ERROR(r.get_int("index_head_dim", &c.index_head_dim, true));
    DI_RETURN_IF_ERROR(r.get_int("index_topk", &c.index_topk, true));
  }

  // Structural checks: every later shape computation relies on these.
  auto bad = [&](const std::string& what) { return Status::invalid_argument(source + ": " + what); };
  if (c.vocab_size < 1 || c.hidden_size < 1 || c.num_heads < 1 || c.head_dim < 1 || c.q_lora_rank < 1)
    return bad("vocab_size, hidden_size, num_attention_heads, head_dim and q_lora_rank must be positive");
  if (c.rope_head_dim < 0 || c.rope_head_dim > c.head_dim || c.rope_head_dim % 2 != 0)
    return bad("RoPE width " + std::to_string(c.rope_head_dim) + " must be even and at most head_dim");
  if (c.o_groups < 1 || c.num_heads % c.o_groups != 0) return bad("num_attention_heads must be a multiple of o_groups");
  if (c.o_lora_rank < 1) return bad("o_lora_rank must be positive");
  if (c.sliding_window < 1) return bad("sliding_window must be positive");
  if (c.n_routed_experts < 1 || c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.n_routed_experts)
    return bad("num_experts_per_tok must be between 1 and n_routed_experts");
  if (c.moe_intermediate_size < 1) return bad("moe_intermediate_size must be positive");
  if (c.hc_mult < 1) return bad("hc_mult must be positive");
  if (c.has_csa()) {
    if (c.index_n_heads < 1 || c.index_head_dim < 1 || c.index_topk < 1)
      return bad("index_n_heads, index_head_dim and index_topk must be positive");
    if (c.index_head_dim < c.rope_head_dim) return bad("index_head_dim must be at least the RoPE width");
  }
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) return Status::not_found("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

}  // namespace deepinfer::model
