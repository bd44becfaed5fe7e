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
// KV rows (ring and compressed) and indexer keys are stored in the cache's KvCacheDtype
// (kv_format.h: fp32, bf16, or FP8/FP4); compressor buffers are always fp32. Offsets are in bytes;
// fp32 regions are 16-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "deepinfer/status.h"
#include "model/config.h"
#include "model/kv_format.h"

namespace deepinfer::model {

struct CompressorSlotLayout {
  size_t buf_kv = 0, buf_gate = 0;    // fp32 [ratio, width] byte offsets in the slot
  size_t prev_kv = 0, prev_gate = 0;  // fp32 [ratio, head] (overlapping compressors only)
};

struct LayerCacheLayout {
  size_t window = 0;                 // slot byte offset of the ring: sliding_window KV rows
  CompressorSlotLayout compressor;   // present when the layer has a compressor
  CompressorSlotLayout index_compressor;
  size_t rows = 0;                   // page byte offset of rows_per_page compressed KV rows
  size_t index_keys = 0;             // page byte offset of rows_per_page indexer keys
  int rows_per_page = 0;             // block_size / ratio (0 for sliding layers)
};

struct StateCacheShape {
  int block_size = 0;
  int window_rows = 0;  // ring capacity
  KvRowFormat kv_row;       // every KV row: [head_dim] with qk_rope_head_dim RoPE dims
  IndexRowFormat index_row; // every indexer key: [index_head_dim]
  std::vector<LayerCacheLayout> layers;
  size_t slot_bytes = 0;
  size_t page_bytes = 0;  // 0 when no layer is compressed
};

// The smallest valid block size >= `preferred` (a multiple of every compression ratio).
int default_block_size(const ModelConfig& c, int preferred = 256);

// Error when block_size is not a positive multiple of every compression ratio.
Result<StateCacheShape> make_state_cache_shape(const ModelConfig& c, int block_size,
                                               KvCacheDtype dtype = KvCacheDtype::kF32);

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
  uint8_t* slot(int s) { return slots_ + static_cast<size_t>(s) * shape_.slot_bytes; }
  uint8_t* page(int b) { return pages_ + static_cast<size_t>(b) * shape_.page_bytes; }
  // Adds pages (single-session use: the block table is 0, 1, 2, ...).
  void grow_pages(int num_blocks);

 private:
  StateCacheShape shape_;
  int num_slots_ = 0, num_blocks_ = 0;
  uint8_t* slots_ = nullptr;
  uint8_t* pages_ = nullptr;
};

}  // namespace deepinfer::model
