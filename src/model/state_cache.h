// The bytes of the DeepSeek-V4 state cache and where each piece lives.
//
// A request's state has two parts (ownership is kv::StateCacheManager's business):
//  - one state slot, bounded in size whatever the context length:
//      per layer, the raw KV rows of the sliding window as a ring of `sliding_window` rows
//      (position p at ring row p % sliding_window), and for each compressor of the layer its
//      open-window buffers (kv and gate+ape projections of the tokens of the unfinished window,
//      [ratio, width] each) plus, for overlapping (CSA) compressors, series A of the last closed
//      window ([ratio, head] kv and gate);
//  - pages that grow with the sequence: page b holds the compressed KV rows of every compressed
//    layer and the indexer keys of every CSA layer produced by token positions
//    [b * block_size, (b + 1) * block_size) — block_size / ratio rows per layer.
// Everything is fp32 on the CPU backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "deepinfer/status.h"
#include "model/config.h"

namespace deepinfer::model {

struct CompressorSlotLayout {
  size_t buf_kv = 0, buf_gate = 0;    // [ratio, width] offsets in the slot
  size_t prev_kv = 0, prev_gate = 0;  // [ratio, head] (overlapping compressors only)
};

struct LayerCacheLayout {
  size_t window = 0;                 // slot offset of the ring [sliding_window, head_dim]
  CompressorSlotLayout compressor;   // present when the layer has a compressor
  CompressorSlotLayout index_compressor;
  size_t rows = 0;                   // page offset of [rows_per_page, head_dim] compressed rows
  size_t index_keys = 0;             // page offset of [rows_per_page, index_head_dim] indexer keys
  int rows_per_page = 0;             // block_size / ratio (0 for sliding layers)
};

struct StateCacheShape {
  int block_size = 0;
  int window_rows = 0;  // ring capacity
  std::vector<LayerCacheLayout> layers;
  size_t slot_floats = 0;
  size_t page_floats = 0;  // 0 when no layer is compressed

  size_t slot_bytes() const { return slot_floats * sizeof(float); }
  size_t page_bytes() const { return page_floats * sizeof(float); }
};

// The smallest valid block size >= `preferred` (a multiple of every compression ratio).
int default_block_size(const ModelConfig& c, int preferred = 256);

// Error when block_size is not a positive multiple of every compression ratio.
Result<StateCacheShape> make_state_cache_shape(const ModelConfig& c, int block_size);

// Host memory for `num_slots` slots and `num_blocks` pages. Zero-filled lazily (calloc: the OS
// maps pages on first touch), so a large budget costs nothing until it is used.
class StateStorage {
 public:
  StateStorage(const StateCacheShape& shape, int num_slots, int num_blocks);
  ~StateStorage();
  StateStorage(const StateStorage&) = delete;
  StateStorage& operator=(const StateStorage&) = delete;

  const StateCacheShape& shape() const { return shape_; }
  int num_slots() const { return num_slots_; }
  int num_blocks() const { return num_blocks_; }
  float* slot(int s) { return slots_ + static_cast<size_t>(s) * shape_.slot_floats; }
  float* page(int b) { return pages_ + static_cast<size_t>(b) * shape_.page_floats; }
  // Adds pages (single-session use: the block table is 0, 1, 2, ...).
  void grow_pages(int num_blocks);

 private:
  StateCacheShape shape_;
  int num_slots_ = 0, num_blocks_ = 0;
  float* slots_ = nullptr;
  float* pages_ = nullptr;
};

}  // namespace deepinfer::model
