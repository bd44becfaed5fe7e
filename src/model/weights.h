// ModelWeights: every DeepSeek-V4 parameter, bound by name from a checkpoint, checked against the
// config and converted to fp32 for the CPU backend.
//
// Two tensor layouts are understood through one name table (kNameRules in weights.cc):
//   official release  : embed.weight, hc_head_fn, layers.{i}.attn.kv_norm.weight, *.scale, mtp.*
//   transformers saved: model.embed_tokens.weight, model.hc_head.hc_fn, model.layers.{i}.attn.norm.weight
// Quantized weights are dequantized exactly: FP8 e4m3 x 2^(ue8m0 - 127) per 128x128 block, FP4 e2m1
// (two codes per byte along the input dim, low nibble first) x 2^(ue8m0 - 127) per 32 inputs.
// All checks run before any compute; a mismatch names the tensor, the expectation and what was found.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace deepinfer::model {

// Row-major fp32 matrix [out, in]: y = W x.
struct Matrix {
  std::vector<float> data;
  int rows = 0;  // out features
  int cols = 0;  // in features
  bool quantized = false;  // stored as FP8 or FP4 in the checkpoint (release numerics quantize its input)
};

struct CompressorWeights {
  Matrix wkv;                 // [width, hidden]; width = 2*head (CSA: series A | B) or head (HCA)
  Matrix wgate;               // [width, hidden]
  std::vector<float> ape;     // [ratio, width] position-in-window bias added to the gate
  std::vector<float> norm;    // [head]
};

struct IndexerWeights {
  Matrix wq_b;          // [index_heads * index_head_dim, q_lora_rank]
  Matrix weights_proj;  // [index_heads, hidden]
  CompressorWeights compressor;
};

struct ExpertWeights {
  Matrix w1;  // gate [inter, hidden]
  Matrix w2;  // down [hidden, inter]
  Matrix w3;  // up   [inter, hidden]
};

struct HyperConnWeights {
  Matrix fn;                // [(2 + hc) * hc, hc * hidden]
  std::vector<float> base;  // [(2 + hc) * hc]
  std::vector<float> scale; // [3]
};

struct LayerWeights {
  HyperConnWeights hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;  // [hidden]
  Matrix wq_a;                  // [q_lora_rank, hidden]
  std::vector<float> q_norm;    // [q_lora_rank]
  Matrix wq_b;                  // [heads * head_dim, q_lora_rank]
  Matrix wkv;                   // [head_dim, hidden]
  std::vector<float> kv_norm;   // [head_dim]
  std::vector<Matrix> wo_a;     // o_groups x [o_lora_rank, heads * head_dim / o_groups] (checkpoint: one stacked matrix)
  Matrix wo_b;                  // [hidden, o_groups * o_lora_rank]
  std::vector<float> attn_sink; // [heads]
  bool has_compressor = false;
  CompressorWeights compressor;
  bool has_indexer = false;
  IndexerWeights indexer;
  Matrix gate;                  // [experts, hidden]
  std::vector<float> gate_bias; // [experts] (learned routing only)
  std::vector<int32_t> tid2eid; // [vocab, top_k] (hash routing only)
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;         // intermediate = moe_intermediate_size * n_shared_experts
};

struct ModelWeights {
  Matrix embed;                    // [vocab, hidden]
  Matrix head;                     // [vocab, hidden]
  std::vector<float> norm;         // [hidden]
  Matrix hc_head_fn;               // [hc, hc * hidden]
  std::vector<float> hc_head_base; // [hc]
  std::vector<float> hc_head_scale;// [1]
  std::vector<LayerWeights> layers;
  // Recognised `mtp.*` tensors (the multi-token-prediction block), kept as views for the
  // speculative-decoding work; valid while the SafetensorsSet they came from lives.
  std::map<std::string, io::TensorView> mtp;
  std::string layout;                         // "official" or "transformers"
};

// Binds and converts every tensor the config calls for. Extra tensors other than mtp.* are an
// error only if they look like model weights of a layer index beyond num_layers.
Result<ModelWeights> load_weights(const io::SafetensorsSet& set, const ModelConfig& config);

// Dequantization helpers, exposed for tests.
// FP8 e4m3 weight [rows, cols] with scale [ceil(rows/block), ceil(cols/block)] (fp32 values).
void dequant_fp8_blocks(const uint8_t* q, const float* scale, int rows, int cols, int block, float* out);
// FP4 e2m1 weight packed [rows, cols/2] with scale [rows, cols/group] (fp32 values).
void dequant_fp4_groups(const uint8_t* packed, const float* scale, int rows, int cols, int group, float* out);

}  // namespace deepinfer::model
