// ModelConfig: the DeepSeek-V4 hyper-parameters, parsed from a checkpoint's config.json.
// Accepts both the transformers spelling (layer_types, mlp_layer_types, compress_rates,
// rope_parameters {main, compress}, partial_rotary_factor) and the released checkpoint's legacy
// spelling (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling, compress_rate_csa/hca).
// Validation happens here, before any weight is touched: a missing key or an unknown layer type is
// an error naming the field.
#pragma once

#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::model {

enum class AttentionKind { kSliding, kCsa, kHca };
enum class ScoringFunc { kSqrtSoftplus, kSoftmax, kSigmoid };

const char* attention_kind_name(AttentionKind k);

// RoPE frequency table parameters for one rope type ("main" or "compress").
struct RopeParams {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  double original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;  // multiplies cos and sin (V4 forces 1.0 for YaRN)
};

struct ModelConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int head_dim = 0;
  int rope_head_dim = 0;  // trailing dims of each head that get RoPE
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  int sliding_window = 0;  // window rows seen by each query, the query's own row included

  std::vector<AttentionKind> layer_kinds;  // [num_layers]
  std::vector<int> compress_ratio;         // [num_layers]; 0 for sliding layers
  std::vector<bool> hash_moe;              // [num_layers]; true: experts chosen by tid2eid

  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;

  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  ScoringFunc scoring_func = ScoringFunc::kSqrtSoftplus;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;  // 0: no clamp

  int hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;

  RopeParams rope_main;      // sliding-only layers
  RopeParams rope_compress;  // CSA/HCA layers, their compressors and the indexer

  int max_position_embeddings = 0;
  int num_mtp_layers = 0;
  int bos_token_id = -1;
  int eos_token_id = -1;
  bool fp8_quantized = false;  // quantization_config says fp8 (the released checkpoint format)

  bool has_csa() const;
  // Per-layer derived widths.
  int q_dim() const { return num_heads * head_dim; }
  int shared_intermediate() const { return moe_intermediate_size * (n_shared_experts > 0 ? n_shared_experts : 1); }
};

// Parses and validates config.json text. `source` names the file in error messages.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace deepinfer::model
