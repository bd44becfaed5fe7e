#include "model/default_model.h"

#include <cmath>

namespace deepinfer::model {

namespace {

// splitmix64 + Box-Muller: portable, so every machine generates the same weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  float normal() {
    const double u1 = uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

 private:
  uint64_t s_;
};

Matrix rand_matrix(Rng& r, int rows, int cols) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.data.resize(static_cast<size_t>(rows) * cols);
  const float s = 1.0f / std::sqrt(static_cast<float>(cols));
  for (float& v : m.data) v = r.normal() * s;
  return m;
}

std::vector<float> rand_vec(Rng& r, int n, float mean, float stddev) {
  std::vector<float> v(n);
  for (float& x : v) x = mean + stddev * r.normal();
  return v;
}

CompressorWeights rand_compressor(Rng& r, int width, int head, int ratio, int hidden) {
  CompressorWeights c;
  c.wkv = rand_matrix(r, width, hidden);
  c.wgate = rand_matrix(r, width, hidden);
  c.ape = rand_vec(r, ratio * width, 0.0f, 0.5f);
  c.norm = rand_vec(r, head, 1.0f, 0.1f);
  return c;
}

HyperConnWeights rand_hc(Rng& r, int hc, int hidden) {
  HyperConnWeights w;
  w.fn = rand_matrix(r, (2 + hc) * hc, hc * hidden);
  w.base = rand_vec(r, (2 + hc) * hc, 0.0f, 0.3f);
  w.scale = rand_vec(r, 3, 1.0f, 0.2f);
  return w;
}

ExpertWeights rand_expert(Rng& r, int inter, int hidden) {
  return ExpertWeights{rand_matrix(r, inter, hidden), rand_matrix(r, hidden, inter), rand_matrix(r, inter, hidden)};
}

}  // namespace

ModelConfig default_model_config() {
  ModelConfig c;
  c.vocab_size = 1024;
  c.hidden_size = 128;
  c.num_layers = 4;
  c.num_heads = 4;
  c.head_dim = 64;
  c.rope_head_dim = 16;
  c.q_lora_rank = 64;
  c.o_groups = 2;
  c.o_lora_rank = 32;
  c.sliding_window = 32;
  c.layer_kinds = {AttentionKind::kSliding, AttentionKind::kCsa, AttentionKind::kHca, AttentionKind::kCsa};
  c.compress_ratio = {0, 4, 16, 4};
  c.hash_moe = {true, false, false, false};
  c.index_n_heads = 8;
  c.index_head_dim = 32;
  c.index_topk = 8;
  c.n_routed_experts = 8;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 64;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.rope_main.theta = 10000.0;
  c.rope_compress.theta = 160000.0;
  c.max_position_embeddings = 65536;
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  return c;
}

ModelWeights default_model_weights(const ModelConfig& c, uint64_t seed) {
  Rng r(seed);
  ModelWeights w;
  w.layout = "embedded";
  const int D = c.hidden_size, H = c.num_heads, hd = c.head_dim;
  w.embed = rand_matrix(r, c.vocab_size, D);
  for (float& v : w.embed.data) v *= std::sqrt(static_cast<float>(D));  // unit-variance embeddings
  w.head = rand_matrix(r, c.vocab_size, D);
  w.norm = rand_vec(r, D, 1.0f, 0.1f);
  w.hc_head_fn = rand_matrix(r, c.hc_mult, c.hc_mult * D);
  w.hc_head_base = rand_vec(r, c.hc_mult, 0.0f, 0.3f);
  w.hc_head_scale = rand_vec(r, 1, 1.0f, 0.2f);
  w.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& L = w.layers[l];
    L.hc_attn = rand_hc(r, c.hc_mult, D);
    L.hc_ffn = rand_hc(r, c.hc_mult, D);
    L.attn_norm = rand_vec(r, D, 1.0f, 0.1f);
    L.ffn_norm = rand_vec(r, D, 1.0f, 0.1f);
    L.wq_a = rand_matrix(r, c.q_lora_rank, D);
    L.q_norm = rand_vec(r, c.q_lora_rank, 1.0f, 0.1f);
    L.wq_b = rand_matrix(r, H * hd, c.q_lora_rank);
    L.wkv = rand_matrix(r, hd, D);
    L.kv_norm = rand_vec(r, hd, 1.0f, 0.1f);
    for (int g = 0; g < c.o_groups; ++g) L.wo_a.push_back(rand_matrix(r, c.o_lora_rank, H * hd / c.o_groups));
    L.wo_b = rand_matrix(r, D, c.o_groups * c.o_lora_rank);
    L.attn_sink = rand_vec(r, H, 0.0f, 1.0f);
    const AttentionKind kind = c.layer_kinds[l];
    if (kind != AttentionKind::kSliding) {
      L.has_compressor = true;
      L.compressor = rand_compressor(r, kind == AttentionKind::kCsa ? 2 * hd : hd, hd, c.compress_ratio[l], D);
    }
    if (kind == AttentionKind::kCsa) {
      L.has_indexer = true;
      L.indexer.wq_b = rand_matrix(r, c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      L.indexer.weights_proj = rand_matrix(r, c.index_n_heads, D);
      L.indexer.compressor = rand_compressor(r, 2 * c.index_head_dim, c.index_head_dim, c.compress_ratio[l], D);
    }
    L.gate = rand_matrix(r, c.n_routed_experts, D);
    if (c.hash_moe[l]) {
      L.tid2eid.resize(static_cast<size_t>(c.vocab_size) * c.num_experts_per_tok);
      for (int v = 0; v < c.vocab_size; ++v) {
        const uint64_t first = r.next() % c.n_routed_experts;  // distinct experts per token: consecutive ids
        for (int k = 0; k < c.num_experts_per_tok; ++k)
          L.tid2eid[static_cast<size_t>(v) * c.num_experts_per_tok + k] =
              static_cast<int32_t>((first + k) % c.n_routed_experts);
      }
    } else {
      L.gate_bias = rand_vec(r, c.n_routed_experts, 0.0f, 0.1f);
    }
    for (int e = 0; e < c.n_routed_experts; ++e) L.experts.push_back(rand_expert(r, c.moe_intermediate_size, D));
    L.shared = rand_expert(r, c.shared_intermediate(), D);
  }
  return w;
}

}  // namespace deepinfer::model
