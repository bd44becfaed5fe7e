#include "kv/block_pool.h"

#include "base/check.h"

namespace deepinfer::kv {

BlockPool::BlockPool(int num_blocks) {
  DI_CHECK(num_blocks >= 0, "num_blocks %d", num_blocks);
  refcount_.assign(static_cast<size_t>(num_blocks), 0);
  for (int b = 0; b < num_blocks; ++b) free_.push_back(b);
}

std::optional<int> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int b = free_.front();
  free_.pop_front();
  DI_CHECK(refcount_[static_cast<size_t>(b)] == 0, "block %d in the free queue has refcount %d", b,
           refcount_[static_cast<size_t>(b)]);
  refcount_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::incref(int block) {
  DI_CHECK(block >= 0 && block < num_blocks(), "block %d out of range [0, %d)", block, num_blocks());
  int& rc = refcount_[static_cast<size_t>(block)];
  DI_CHECK(rc > 0, "incref of free block %d", block);
  ++rc;
}

void BlockPool::decref(int block) {
  DI_CHECK(block >= 0 && block < num_blocks(), "block %d out of range [0, %d)", block, num_blocks());
  int& rc = refcount_[static_cast<size_t>(block)];
  DI_CHECK(rc > 0, "decref of free block %d (double free)", block);
  if (--rc == 0) free_.push_back(block);
}

int BlockPool::refcount(int block) const {
  DI_CHECK(block >= 0 && block < num_blocks(), "block %d out of range [0, %d)", block, num_blocks());
  return refcount_[static_cast<size_t>(block)];
}

}  // namespace deepinfer::kv
