// The DeepSeek-V4 forward pass, written once against backend::Backend.
//
// forward() consumes a chunk of tokens that continue a request whose state is in DecodeState, and
// returns the logits of every position of the chunk. A whole prompt, any chunking of it and
// token-by-token decode give the same logits bitwise: every op computes a token's row with an
// arithmetic sequence that does not depend on the chunk (see backend.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "deepinfer/status.h"
#include "model/config.h"
#include "model/weights.h"

namespace deepinfer::model {

// Compressor state between chunks (one per compressor: the main one and the indexer's).
struct CompressorState {
  std::vector<float> buf_kv;    // [n_buf, width] projections of the open window's tokens
  std::vector<float> buf_gate;  // [n_buf, width] gate projections + ape (position-in-window bias)
  int n_buf = 0;
  // CSA only: series A (first head dims) of the last closed window, kv and gate(+ape): [ratio, head].
  std::vector<float> prev_kv, prev_gate;
  bool has_prev = false;
  int n_rows = 0;  // compressed rows emitted so far
};

// What one request keeps per layer between forward calls.
struct LayerState {
  std::vector<float> window;      // [n, head_dim] raw KV rows of the last n <= sliding_window-1 positions, oldest first
  std::vector<float> compressed;  // [rows, head_dim] compressed KV rows (after norm and RoPE)
  CompressorState compressor;
  std::vector<float> index_keys;  // [rows, index_head_dim] indexer keys (CSA)
  CompressorState index_compressor;
};

struct DecodeState {
  int64_t num_tokens = 0;  // positions consumed so far
  std::vector<LayerState> layers;
};

class DeepSeekV4 {
 public:
  DeepSeekV4(const ModelConfig& config, const ModelWeights& weights, backend::Backend& backend);

  DecodeState new_state() const;

  // tokens[T] continue `state`; logits[T, vocab] are written (resized). Token ids must be in range
  // (checked: an out-of-range id is an error naming it, and the state is left unchanged).
  Status forward(DecodeState& state, std::span<const int32_t> tokens, std::vector<float>* logits) const;

  const ModelConfig& config() const { return config_; }

 private:
  void attention(const LayerWeights& L, int layer, LayerState& S, const float* x, int T, const int64_t* pos,
                 float* out) const;
  void run_compressor(const CompressorWeights& w, int ratio, bool overlap, int head, const float* x, int T,
                      const int64_t* pos, CompressorState& cs, std::vector<float>* rows_out) const;
  void moe(const LayerWeights& L, int layer, const float* x, int T, std::span<const int32_t> tokens, float* out) const;

  const ModelConfig& config_;
  const ModelWeights& weights_;
  backend::Backend& backend_;
  backend::RopeTable rope_main_, rope_compress_;
};

}  // namespace deepinfer::model
