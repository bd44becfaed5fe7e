// Backend: the fused, DeepSeek-V4-specific ops the forward pass is written against.
// The forward (model/deepseek_v4.cc) orchestrates; a backend computes. CpuBackend is the
// reference (fp32, plain loops, fixed reduction orders); a CUDA backend implements the same
// contracts and is tested against it.
//
// Batch invariance contract: every op computes each output row with an arithmetic sequence that
// depends only on that row's inputs, never on how many rows are in the call. So a token's result
// is bitwise identical whether it is processed alone, in a prefill, in a chunk, or in a batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/weights.h"

namespace deepinfer::backend {

// Precomputed RoPE inverse frequencies for one rope type (fp32, as transformers computes them).
struct RopeTable {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  float attention_factor = 1.0f;
  int rope_dim = 0;
};
RopeTable make_rope_table(const model::RopeParams& p, int rope_dim);

// Per-token mHC mixing weights produced by hc_pre and consumed by hc_post.
struct HcMix {
  std::vector<float> post;  // [M, hc]
  std::vector<float> comb;  // [M, hc, hc]; comb[j][k]: input stream j -> output stream k
};

class Backend {
 public:
  virtual ~Backend() = default;

  // y[M, W.rows] = x[M, W.cols] * W^T.
  virtual void linear(const float* x, int M, const model::Matrix& W, float* y) = 0;

  // y[M, n] = x * rsqrt(mean(x^2) + eps) (* weight if non-null). In-place allowed.
  virtual void rms_norm(const float* x, int M, int n, const float* weight, float eps, float* y) = 0;

  // Rotates the trailing table.rope_dim dims of each of `heads` vectors (stride head_stride, width
  // head_dim) of row m by position pos[m]: interleaved pairs (2i, 2i+1). inverse: rotate by -angle.
  virtual void rope(float* x, int M, int heads, int head_dim, const int64_t* pos, const RopeTable& table,
                    bool inverse) = 0;

  // mHC pre-mix: from streams X[M, hc, D] computes collapsed[M, D] = sum_i pre_i X_i and the
  // post/comb weights (Sinkhorn-normalised comb).
  virtual void hc_pre(const float* X, int M, int hc, int D, const model::HyperConnWeights& w, int sinkhorn_iters,
                      float hc_eps, float norm_eps, float* collapsed, HcMix* mix) = 0;
  // X[M, hc, D] <- post_k * o + sum_j comb[j][k] X_j   (in place).
  virtual void hc_post(float* X, const float* o, int M, int hc, int D, const HcMix& mix) = 0;
  // Final hyper-head collapse: out[M, D].
  virtual void hc_head(const float* X, int M, int hc, int D, const model::Matrix& fn, const float* base,
                       const float* scale, float hc_eps, float norm_eps, float* out) = 0;

  // Sparse attention with a learned sink, one shared K=V head.
  //   q[M, H, d]; rows: for query m, the KV rows it attends to are row_ptrs[row_begin[m] .. row_begin[m+1]),
  //   each a pointer to d floats. out[M, H, d]. softmax scale `scale`; sink logit per head.
  virtual void sink_attention(const float* q, int M, int H, int d, const std::vector<const float*>& row_ptrs,
                              const std::vector<int>& row_begin, const float* sinks, float scale, float* out) = 0;

  // Gated softmax pooling of one compressor window per output row.
  //   For output row r: slots s in [0, num_slots): kv_ptr[r*num_slots + s], gate_ptr[...] point at
  //   `width` floats each (null = empty slot, weight 0). out[r, c] = sum_s softmax_s(gate[s][c]) kv[s][c].
  virtual void compress_pool(const std::vector<const float*>& kv_ptr, const std::vector<const float*>& gate_ptr,
                             int rows, int num_slots, int width, float* out) = 0;

  // Lightning-indexer scores: score[m, w] = sum_h weights[m, h] * relu(q[m, h, :] . keys[w, :]) * scale
  // for w < num_keys[m]; (rows of `keys` are index_dim wide). score has stride `score_stride`.
  virtual void indexer_scores(const float* q, const float* weights, int M, int heads, int index_dim, const float* keys,
                              const int* num_keys, float scale, float* score, int score_stride) = 0;

  // SwiGLU expert with clamp: y[M, D] = W2 (silu(min(W1 x, limit)) * clamp(W3 x, -limit, limit)).
  virtual void swiglu_expert(const float* x, int M, const model::ExpertWeights& e, float limit, float* y) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace deepinfer::backend
