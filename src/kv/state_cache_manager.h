// Who holds which part of the DeepSeek-V4 state cache. Host-side bookkeeping only.
//
// A V4 request's cache has two parts (see src/model/state_cache.h for the bytes):
//  - a state slot of bounded size: the raw KV of the sliding window (only the window is kept, as a
//    ring) and the compressors' open-window buffers, for every layer. One per running request.
//  - pages that grow with the sequence: compressed KV rows (every compressed layer) and indexer
//    keys (CSA layers). Page i holds what token positions [i * block_size, (i+1) * block_size)
//    produce. Reference counted through BlockPool so that prefix caching can share them later.
#pragma once

#include <cstdint>
#include <deque>

#include "core/request.h"
#include "kv/block_pool.h"

namespace deepinfer::kv {

struct CacheLayout {
  int block_size = 256;  // token positions per page (a multiple of every compression ratio)
  int num_blocks = 0;    // pages in the pool
  int num_slots = 0;     // state slots (bounds the number of running requests)
  bool uses_pages = true;  // false for a model without compressed layers: no pages are ever needed
};

class StateCacheManager {
 public:
  explicit StateCacheManager(const CacheLayout& layout);

  const CacheLayout& layout() const { return layout_; }
  int num_free_blocks() const { return pool_.num_free(); }
  int num_free_slots() const { return static_cast<int>(free_slots_.size()); }

  // Pages a request needs to hold positions [0, num_tokens).
  int blocks_needed(int64_t num_tokens) const;

  // Makes `req` hold a slot and pages covering positions [0, num_tokens). All or nothing: returns
  // false and changes nothing if the slot or the pages are not available.
  bool allocate(core::Request& req, int64_t num_tokens);
  // Returns the slot and every page `req` holds (req.slot = -1, req.block_table cleared).
  void free(core::Request& req);

  const BlockPool& pool() const { return pool_; }

 private:
  CacheLayout layout_;
  BlockPool pool_;
  std::deque<int> free_slots_;  // FIFO like the pool
};

}  // namespace deepinfer::kv
