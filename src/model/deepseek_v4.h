// The DeepSeek-V4 forward pass, written once against backend::Backend.
//
// forward() runs one step over a batch of sequences: each contributes a chunk of tokens that
// continues its state in the paged state cache (a prompt chunk, a whole prompt, or one decode
// token), all in one flattened pass: every token-wise op (projections, norms, mHC, MoE) runs over
// the concatenated tokens; attention, the compressors and the indexer run per sequence against its
// slot and pages. A sequence's logits are bitwise the same alone, in any batch, under any chunking:
// every op computes a token's row with an arithmetic sequence that depends only on that row and on
// the sequence's own state (see backend.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "deepinfer/status.h"
#include "model/config.h"
#include "model/numerics.h"
#include "model/state_cache.h"
#include "model/weights.h"

namespace deepinfer::model {

enum class LogitRows { kNone, kLast, kAll };

// One sequence's part of a step: tokens at positions [start, start + tokens.size()).
struct SeqChunk {
  std::span<const int32_t> tokens;
  int64_t start = 0;
  int slot = 0;                      // state slot in the StateStorage
  std::span<const int> block_table;  // pages; must cover every position up to start + tokens.size()
  LogitRows logits = LogitRows::kLast;  // which positions' logits rows to produce
};

class DeepSeekV4 {
 public:
  DeepSeekV4(const ModelConfig& config, const ModelWeights& weights, backend::Backend& backend,
             Numerics numerics = Numerics::kExact);

  // Runs the batch; logits gets one [vocab] row per requested position, sequences in order
  // (every row, the last one or none, as each SeqChunk asks). Errors (nothing changed): a token id
  // outside the vocabulary (naming sequence and position), a bad slot, a block table too short.
  Status forward(std::span<const SeqChunk> batch, StateStorage& cache, std::vector<float>* logits) const;

  const ModelConfig& config() const { return config_; }
  Numerics numerics() const { return numerics_; }

 private:
  // How a linear's input and output are treated under release numerics: kQuantized — FP8 block
  // quantization of the input when the weight was FP8/FP4 in the checkpoint, bf16 output; kBf16 —
  // bf16 output; kF32 — nothing. Under exact numerics all three are a plain fp32 GEMM.
  enum class Lin { kQuantized, kBf16, kF32 };
  void lin(const float* x, int M, const Matrix& W, float* y, Lin kind) const;
  // bf16 rounding under release numerics, nothing under exact.
  void bf(float* x, size_t n) const;
  // What happens to new compressed rows after norm and RoPE (release numerics only).
  enum class RowQuant { kNone, kKvFp8, kIndexerFp4 };
  void release_expert(const float* x, int n, const ExpertWeights& e, const float* row_weight, float* y) const;

  struct Step;  // the flattened batch: positions, offsets, sequence of each token

  void attention(const LayerWeights& L, int layer, const Step& st, StateStorage& cache, const float* x,
                 float* out) const;
  // Feeds one sequence's T projections (a: kv, z: gate, [T, width] each) through a compressor whose
  // state is in `slot`; each window that closes yields one row, normed, rotated and stored in the
  // sequence's pages at `page_offset` (rows_per_page rows of `head` floats per page).
  void compress(const CompressorWeights& w, const CompressorSlotLayout& cl, int ratio, bool overlap, int head,
                const float* a, const float* z, int T, int64_t start, float* slot, StateStorage& cache,
                std::span<const int> block_table, size_t page_offset, int rows_per_page, RowQuant quant) const;
  void moe(const LayerWeights& L, int layer, const float* x, int T, std::span<const int32_t> tokens, float* out) const;

  const ModelConfig& config_;
  const ModelWeights& weights_;
  backend::Backend& backend_;
  backend::RopeTable rope_main_, rope_compress_;
  Numerics numerics_;
  bool release_ = false;
};

}  // namespace deepinfer::model
