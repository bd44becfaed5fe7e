// config.json parsing (model/config.h): transformers spelling, released (legacy) spelling, YaRN
// rope dicts and errors that name the offending field.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;
using AK = AttentionKind;

// Modeled on fixtures/v4-tiny-a/config.json (transformers 5.17 spelling).
const char* kModern = R"({
  "architectures": ["DeepseekV4ForCausalLM"],
  "bos_token_id": 0,
  "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
  "compress_rope_theta": 160000.0,
  "eos_token_id": 1,
  "hc_eps": 1e-06,
  "hc_mult": 4,
  "hc_sinkhorn_iters": 20,
  "head_dim": 64,
  "hidden_size": 64,
  "index_head_dim": 16,
  "index_n_heads": 8,
  "index_topk": 6,
  "layer_types": ["sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention",
                  "heavily_compressed_attention", "compressed_sparse_attention"],
  "max_position_embeddings": 4096,
  "mlp_layer_types": ["hash_moe", "hash_moe", "moe", "moe", "moe"],
  "model_type": "deepseek_v4",
  "moe_intermediate_size": 32,
  "n_routed_experts": 8,
  "n_shared_experts": 1,
  "num_attention_heads": 4,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 5,
  "num_key_value_heads": 1,
  "num_nextn_predict_layers": 1,
  "o_groups": 2,
  "o_lora_rank": 32,
  "partial_rotary_factor": 0.25,
  "q_lora_rank": 48,
  "qk_rope_head_dim": 16,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "compress": {"partial_rotary_factor": 0.25, "rope_theta": 160000.0, "rope_type": "default"},
    "main": {"partial_rotary_factor": 0.25, "rope_theta": 10000.0, "rope_type": "default"}
  },
  "rope_theta": 10000.0,
  "routed_scaling_factor": 1.5,
  "scoring_func": "sqrtsoftplus",
  "sliding_window": 16,
  "swiglu_limit": 2.0,
  "vocab_size": 512
})";

// Modeled on fixtures/v4-tiny-a-official/config.json (the released checkpoint's spelling).
const char* kLegacy = R"({
  "bos_token_id": 0,
  "compress_rope_theta": 160000.0,
  "eos_token_id": 1,
  "hc_eps": 1e-06,
  "hc_mult": 4,
  "hc_sinkhorn_iters": 20,
  "head_dim": 64,
  "hidden_size": 64,
  "index_head_dim": 16,
  "index_n_heads": 8,
  "index_topk": 6,
  "max_position_embeddings": 4096,
  "model_type": "deepseek_v4",
  "moe_intermediate_size": 32,
  "n_routed_experts": 8,
  "n_shared_experts": 1,
  "num_attention_heads": 4,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 5,
  "num_key_value_heads": 1,
  "num_nextn_predict_layers": 1,
  "o_groups": 2,
  "o_lora_rank": 32,
  "pad_token_id": null,
  "q_lora_rank": 48,
  "qk_rope_head_dim": 16,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "routed_scaling_factor": 1.5,
  "scoring_func": "sqrtsoftplus",
  "sliding_window": 16,
  "swiglu_limit": 2.0,
  "vocab_size": 512,
  "compress_ratios": [0, 16, 4, 16, 4, 0],
  "num_hash_layers": 2,
  "torch_dtype": "bfloat16",
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
})";

Result<ModelConfig> parse_json(const json& j) { return parse_model_config(j.dump(), "cfg.json"); }

void expect_error(const json& j, std::initializer_list<std::string> needles) {
  auto r = parse_json(j);
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning '" << *needles.begin() << "'";
  for (const auto& n : needles) EXPECT_NE(r.status().message().find(n), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("cfg.json"), std::string::npos) << "message names the source";
}

TEST(ModelConfig, ModernSpelling) {
  auto r = parse_model_config(kModern, "config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelConfig& c = r.value();
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_head_dim, 16);  // 64 * 0.25
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 32);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_kinds, (std::vector<AK>{AK::kSliding, AK::kHca, AK::kCsa, AK::kHca, AK::kCsa}));
  EXPECT_EQ(c.compress_ratio, (std::vector<int>{0, 16, 4, 16, 4}));
  EXPECT_EQ(c.hash_moe, (std::vector<bool>{true, true, false, false, false}));
  EXPECT_TRUE(c.has_csa());
  EXPECT_EQ(c.index_n_heads, 8);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_topk, 6);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSqrtSoftplus);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.swiglu_limit, 2.0);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_FALSE(c.fp8_quantized);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_EQ(c.rope_main.attention_factor, 1.0);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_EQ(c.q_dim(), 256);
  EXPECT_EQ(c.shared_intermediate(), 32);
}

TEST(ModelConfig, LegacySpelling) {
  auto r = parse_model_config(kLegacy, "config.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelConfig& c = r.value();
  EXPECT_EQ(c.num_layers, 5);
  // compress_ratios has 6 entries: 5 layers + the MTP layer, which is not a main layer.
  EXPECT_EQ(c.layer_kinds, (std::vector<AK>{AK::kSliding, AK::kHca, AK::kCsa, AK::kHca, AK::kCsa}));
  EXPECT_EQ(c.compress_ratio, (std::vector<int>{0, 16, 4, 16, 4}));
  EXPECT_EQ(c.hash_moe, (std::vector<bool>{true, true, false, false, false}));  // num_hash_layers 2
  EXPECT_EQ(c.rope_head_dim, 16);  // qk_rope_head_dim
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);  // compress_rope_theta
  EXPECT_FALSE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_TRUE(c.fp8_quantized);
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_EQ(c.index_n_heads, 8);
}

TEST(ModelConfig, LegacyHashLayersDefaultAndRatioClassification) {
  json j = json::parse(kLegacy);
  j.erase("num_hash_layers");  // default 3
  j["num_hidden_layers"] = 6;
  j["compress_ratios"] = {0, 0, 4, 128, 4, 128, 0};
  auto r = parse_json(j);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelConfig& c = r.value();
  EXPECT_EQ(c.hash_moe, (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(c.layer_kinds, (std::vector<AK>{AK::kSliding, AK::kSliding, AK::kCsa, AK::kHca, AK::kCsa, AK::kHca}));
  EXPECT_EQ(c.compress_ratio, (std::vector<int>{0, 0, 4, 128, 4, 128}));
}

TEST(ModelConfig, LegacyRopeScalingYarnAppliesToCompressRopeOnly) {
  json j = json::parse(kLegacy);
  j["max_position_embeddings"] = 1048576;
  j["rope_scaling"] = {{"type", "yarn"},
                       {"factor", 16},
                       {"original_max_position_embeddings", 65536},
                       {"beta_fast", 32},
                       {"beta_slow", 1}};
  auto r = parse_json(j);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelConfig& c = r.value();
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 65536.0);
  EXPECT_EQ(c.rope_compress.beta_fast, 32.0);
  EXPECT_EQ(c.rope_compress.beta_slow, 1.0);
  // V4 forces no magnitude scaling (the generic YaRN formula would give 0.1*ln(16)+1 = 1.277).
  EXPECT_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_EQ(c.rope_main.factor, 1.0);
  EXPECT_EQ(c.rope_main.attention_factor, 1.0);
}

TEST(ModelConfig, LegacyRopeScalingYarnDefaultsFactorAndBetas) {
  json j = json::parse(kLegacy);
  j["max_position_embeddings"] = 8192;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 2048}};
  auto r = parse_json(j);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const RopeParams& p = r.value().rope_compress;
  EXPECT_TRUE(p.yarn);
  EXPECT_EQ(p.factor, 4.0);  // max_position_embeddings / original
  EXPECT_EQ(p.beta_fast, 32.0);
  EXPECT_EQ(p.beta_slow, 1.0);
  EXPECT_EQ(p.attention_factor, 1.0);
}

TEST(ModelConfig, NestedYarnCompressRope) {
  // fixtures/v4-tiny-yarn spelling: nested main/compress, explicit attention_factor.
  json j = json::parse(kModern);
  j["rope_parameters"]["compress"] = {{"attention_factor", 1.0}, {"beta_fast", 32},  {"beta_slow", 1},
                                      {"factor", 16.0},          {"original_max_position_embeddings", 256},
                                      {"partial_rotary_factor", 0.25}, {"rope_theta", 160000.0}, {"rope_type", "yarn"}};
  auto r = parse_json(j);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelConfig& c = r.value();
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 256.0);
  EXPECT_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  // An explicit attention_factor is honoured as written.
  j["rope_parameters"]["compress"]["attention_factor"] = 0.75;
  auto r2 = parse_json(j);
  ASSERT_TRUE(r2.is_ok()) << r2.status().to_string();
  EXPECT_EQ(r2.value().rope_compress.attention_factor, 0.75);
}

TEST(ModelConfig, ErrorMissingHiddenSize) {
  json j = json::parse(kModern);
  j.erase("hidden_size");
  expect_error(j, {"missing required key 'hidden_size'"});
  json l = json::parse(kLegacy);
  l["hidden_size"] = nullptr;
  expect_error(l, {"'hidden_size'"});
}

TEST(ModelConfig, ErrorUnknownLayerType) {
  json j = json::parse(kModern);
  j["layer_types"][3] = "full_attention";
  expect_error(j, {"layer_types[3]", "unknown layer type 'full_attention'"});
}

TEST(ModelConfig, ErrorWrongModelType) {
  json j = json::parse(kModern);
  j["model_type"] = "deepseek_v3";
  expect_error(j, {"model_type", "deepseek_v4"});
  j.erase("model_type");
  expect_error(j, {"missing required key 'model_type'"});
}

TEST(ModelConfig, ErrorBadMlpLayerType) {
  json j = json::parse(kModern);
  j["mlp_layer_types"][2] = "dense";
  expect_error(j, {"mlp_layer_types[2]", "'dense'"});
  j["mlp_layer_types"][2] = 7;
  expect_error(j, {"mlp_layer_types[2]"});
  j["mlp_layer_types"] = {"moe", "moe"};  // too short for 5 layers
  expect_error(j, {"mlp_layer_types"});
}

TEST(ModelConfig, ErrorNotJson) {
  auto r = parse_model_config("{\"model_type\": \"deepseek_v4\", ", "cfg.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cfg.json"), std::string::npos);
  EXPECT_NE(r.status().message().find("not valid JSON"), std::string::npos) << r.status().message();
  auto r2 = parse_model_config("", "cfg.json");
  ASSERT_FALSE(r2.is_ok());
  EXPECT_NE(r2.status().message().find("not valid JSON"), std::string::npos) << r2.status().message();
  auto r3 = parse_model_config("[1, 2]", "cfg.json");
  ASSERT_FALSE(r3.is_ok());
  EXPECT_NE(r3.status().message().find("object"), std::string::npos) << r3.status().message();
}

TEST(ModelConfig, ErrorsNameTheField) {
  {
    json j = json::parse(kModern);
    j["num_attention_heads"] = "four";
    expect_error(j, {"'num_attention_heads'", "integer"});
  }
  {
    json j = json::parse(kModern);
    j["vocab_size"] = -5;
    expect_error(j, {"'vocab_size'", "out of range"});
  }
  {
    json j = json::parse(kModern);
    j.erase("layer_types");
    expect_error(j, {"layer_types"});
  }
  {
    json j = json::parse(kModern);
    j["layer_types"].erase(4);  // 4 entries for 5 layers
    expect_error(j, {"'layer_types' has 4 entries", "expected 5"});
  }
  {
    json j = json::parse(kLegacy);
    j["compress_ratios"] = {0, 16, -4, 16, 4, 0};
    expect_error(j, {"compress_ratios[2]"});
  }
  {
    json j = json::parse(kModern);
    j["scoring_func"] = "relu";
    expect_error(j, {"scoring_func", "'relu'"});
  }
  {
    json j = json::parse(kModern);
    j["num_key_value_heads"] = 2;
    expect_error(j, {"num_key_value_heads"});
  }
  {
    json j = json::parse(kModern);
    j.erase("index_topk");  // required because the model has CSA layers
    expect_error(j, {"missing required key 'index_topk'"});
  }
  {
    json j = json::parse(kModern);
    j["rope_parameters"]["compress"]["rope_type"] = "longrope";
    expect_error(j, {"rope_parameters.compress", "'longrope'"});
  }
  {
    json j = json::parse(kModern);
    j["rope_parameters"]["main"]["partial_rotary_factor"] = 0.5;  // 32 != 16
    expect_error(j, {"rope_parameters.main.partial_rotary_factor"});
  }
  {
    json j = json::parse(kLegacy);
    j["qk_rope_head_dim"] = 15;  // odd
    expect_error(j, {"RoPE width 15"});
  }
  {
    json j = json::parse(kModern);
    j["num_attention_heads"] = 3;  // not a multiple of o_groups 2
    expect_error(j, {"o_groups"});
  }
  {
    json j = json::parse(kModern);
    j["num_experts_per_tok"] = 9;  // more than 8 experts
    expect_error(j, {"num_experts_per_tok"});
  }
  {
    json j = json::parse(kModern);
    j["compress_rates"]["full_attention"] = 2;
    expect_error(j, {"compress_rates", "'full_attention'"});
  }
  {
    json j = json::parse(kLegacy);
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", -2}, {"original_max_position_embeddings", 65536}};
    expect_error(j, {"rope_scaling.factor"});
  }
}

}  // namespace
}  // namespace deepinfer::model

namespace deepinfer::model {
namespace {

// Regression: head_dim * partial_rotary_factor was cast to int unchecked (UB for 1e300).
TEST(ModelConfigRanges, HugePartialRotaryFactorIsRejectedByName) {
  json j = json::parse(kModern);
  j.erase("rope_parameters");
  j["partial_rotary_factor"] = 1e300;
  expect_error(j, {"partial_rotary_factor"});
  json nested = json::parse(kModern);
  nested["rope_parameters"]["main"]["partial_rotary_factor"] = -1e300;
  expect_error(nested, {"rope_parameters.main.partial_rotary_factor"});
}

// Regression: 4294967300 (2^32 + 4) was narrowed to a CSA rate of 4 and accepted.
TEST(ModelConfigRanges, CompressRateBeyondIntIsRejected) {
  json j = json::parse(kModern);
  j["compress_rates"]["compressed_sparse_attention"] = 4294967300LL;
  expect_error(j, {"compress_rates"});
}

}  // namespace
}  // namespace deepinfer::model
