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
#include <functional>
#include <span>
#include <string>
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

// Checks sequence `index` of a step against the vocabulary and the cache (slot and pages in range,
// a block table covering every position); the error names the sequence and what was wrong. Shared
// by every backend's forward.
Status check_seq_chunk(const SeqChunk& q, size_t index, const ModelConfig& c, const StateCacheShape& shape,
                       int num_slots, int num_blocks);

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

  // Diagnostics: when set, forward() hands the tap the step's intermediate activations, all tokens
  // at once, before they are used: per layer l "L{l}.attn_in" [T, D] (normed attention input),
  // "L{l}.qr" [T, q_lora], "L{l}.q" [T, H, head] (after RoPE), "L{l}.kv" [T, head], "L{l}.iq"
  // [T, index heads, index dim], "L{l}.iw" [T, index heads] and "L{l}.isel" [n, index_topk] (CSA
  // layers; isel once per sequence: selected rows ascending, -1 padded), "L{l}.o" [T, H, head]
  // (attention output), "L{l}.o_rot" (after the inverse RoPE), "L{l}.zo" [T, groups * o_lora],
  // "L{l}.attn_out" [T, D], "L{l}.h_mid" [T, hc, D] (streams after attention), "L{l}.ffn_in",
  // "L{l}.moe_w" / "L{l}.moe_i" [T, top-k] (routing weights, expert ids), "L{l}.ffn_out",
  // "L{l}.h_out". The tap may overwrite the data: a test feeds an outside reference's activations
  // in (teacher forcing) to check each block alone. Costs nothing when unset.
  using Tap = std::function<void(const std::string& name, float* data, size_t n)>;
  void set_tap(Tap tap) { tap_ = std::move(tap); }

 private:
  // How a linear's input and output are treated under release numerics: kQuantized — FP8 block
  // quantization of the input when the weight was FP8/FP4 in the checkpoint, bf16 output; kBf16 —
  // bf16 output; kF32 — nothing. Under exact numerics all three are a plain fp32 GEMM.
  enum class Lin { kQuantized, kBf16, kF32 };
  void lin(const float* x, int M, const Matrix& W, float* y, Lin kind) const;
  // bf16 rounding under release numerics, nothing under exact.
  void bf(float* x, size_t n) const;
  // Indexer queries and keys are Walsh–Hadamard rotated under release numerics (the official code
  // does) and whenever keys are stored as FP4 (the rotation is what FP4 is meant to see).
  bool rotate_index(const StateCacheShape& s) const { return release_ || s.index_row.dtype == KvCacheDtype::kFP8; }
  void release_expert(const float* x, int n, const ExpertWeights& e, const float* row_weight, float* y) const;

  struct Step;  // the flattened batch: positions, offsets, sequence of each token

  void attention(const LayerWeights& L, int layer, const Step& st, StateStorage& cache, const float* x,
                 float* out) const;
  // Feeds one sequence's T projections (a: kv, z: gate, [T, width] each) through a compressor whose
  // state is in `slot`; each window that closes yields one row, normed, rotated and stored in the
  // sequence's pages at `page_offset` (rows_per_page encoded rows per page: KV rows, or indexer keys
  // when `index_key`).
  void compress(const CompressorWeights& w, const CompressorSlotLayout& cl, int ratio, bool overlap, int head,
                const float* a, const float* z, int T, int64_t start, uint8_t* slot, StateStorage& cache,
                std::span<const int> block_table, size_t page_offset, int rows_per_page, bool index_key) const;
  void moe(const LayerWeights& L, int layer, const float* x, int T, std::span<const int32_t> tokens, float* out) const;

  const ModelConfig& config_;
  const ModelWeights& weights_;
  backend::Backend& backend_;
  backend::RopeTable rope_main_, rope_compress_;
  Numerics numerics_;
  bool release_ = false;
  Tap tap_;
  void tap(int layer, const char* what, float* data, size_t n) const {
    if (tap_) tap_("L" + std::to_string(layer) + "." + what, data, n);
  }
};

}  // namespace deepinfer::model
