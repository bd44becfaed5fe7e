// Fixed pool of cache pages with reference counts. Host-side bookkeeping only: a block id names a
// page of the runner's storage; this class never touches that memory.
//
// Free blocks form a FIFO queue (allocate from the front, freed blocks go to the back), so the
// ids handed out are a deterministic function of the allocate/free sequence (tests pin exact ids)
// and a just-freed page is reused last (what prefix caching will want).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace deepinfer::kv {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(refcount_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }

  // Takes the front free block with reference count 1; nullopt when none is free.
  std::optional<int> allocate();
  // Another holder of an allocated block. Aborts (DI_CHECK) on a free or out-of-range id.
  void incref(int block);
  // Drops one reference; at zero the block returns to the back of the free queue. Aborts on a
  // free block (double free) or an out-of-range id.
  void decref(int block);
  int refcount(int block) const;

 private:
  std::vector<int> refcount_;
  std::deque<int> free_;
};

}  // namespace deepinfer::kv
