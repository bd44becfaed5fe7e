#include "kv/state_cache_manager.h"

#include <climits>

#include "base/check.h"

namespace deepinfer::kv {

StateCacheManager::StateCacheManager(const CacheLayout& layout) : layout_(layout), pool_(layout.num_blocks) {
  DI_CHECK(layout.block_size > 0, "block_size %d", layout.block_size);
  DI_CHECK(layout.num_slots >= 0, "num_slots %d", layout.num_slots);
  for (int s = 0; s < layout.num_slots; ++s) free_slots_.push_back(s);
}

int StateCacheManager::blocks_needed(int64_t num_tokens) const {
  if (!layout_.uses_pages || num_tokens <= 0) return 0;
  const int64_t n = (num_tokens + layout_.block_size - 1) / layout_.block_size;
  return n > INT_MAX ? INT_MAX : static_cast<int>(n);  // saturates: more than any pool holds
}

bool StateCacheManager::allocate(core::Request& req, int64_t num_tokens) {
  const bool needs_slot = req.slot < 0;
  const int64_t have = static_cast<int64_t>(req.block_table.size());
  const int64_t new_blocks = blocks_needed(num_tokens) - have;
  if (needs_slot && free_slots_.empty()) return false;
  if (new_blocks > pool_.num_free()) return false;
  if (needs_slot) {
    req.slot = free_slots_.front();
    free_slots_.pop_front();
  }
  for (int64_t i = 0; i < new_blocks; ++i) {
    const std::optional<int> b = pool_.allocate();
    DI_CHECK(b.has_value(), "pool ran dry after reporting %d free blocks", pool_.num_free());
    req.block_table.push_back(*b);
  }
  return true;
}

void StateCacheManager::free(core::Request& req) {
  for (const int b : req.block_table) pool_.decref(b);
  req.block_table.clear();
  if (req.slot >= 0) {
    DI_CHECK(req.slot < layout_.num_slots, "request %llu holds slot %d of %d",
             static_cast<unsigned long long>(req.id), req.slot, layout_.num_slots);
    free_slots_.push_back(req.slot);
    req.slot = -1;
  }
}

}  // namespace deepinfer::kv
