// BlockPool (FIFO free queue, reference counts) and StateCacheManager (slots + pages, all or nothing).
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "kv/state_cache_manager.h"

namespace deepinfer::kv {
namespace {

std::vector<int> take(BlockPool& pool, int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) {
    const std::optional<int> b = pool.allocate();
    if (!b) break;
    ids.push_back(*b);
  }
  return ids;
}

TEST(BlockPool, HandsOutIdsInOrderThenRunsDry) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_blocks(), 4);
  EXPECT_EQ(pool.num_free(), 4);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(pool.refcount(b), 0);
  EXPECT_EQ(take(pool, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(pool.num_free(), 0);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(BlockPool, EmptyPool) {
  BlockPool pool(0);
  EXPECT_EQ(pool.num_blocks(), 0);
  EXPECT_EQ(pool.allocate(), std::nullopt);
}

TEST(BlockPool, FreedBlocksGoToTheBackFifo) {
  BlockPool pool(5);
  EXPECT_EQ(take(pool, 3), (std::vector<int>{0, 1, 2}));  // free: 3 4
  pool.decref(2);                                          // free: 3 4 2
  pool.decref(0);                                          // free: 3 4 2 0
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.refcount(0), 0);
  EXPECT_EQ(pool.refcount(2), 0);
  EXPECT_EQ(take(pool, 2), (std::vector<int>{3, 4}));  // a just-freed block is reused last
  pool.decref(1);                                      // free: 2 0 1
  EXPECT_EQ(take(pool, 3), (std::vector<int>{2, 0, 1}));
  EXPECT_EQ(pool.allocate(), std::nullopt);
}

TEST(BlockPool, IncrefDecrefKeepsBlockUntilLastReference) {
  BlockPool pool(3);
  EXPECT_EQ(take(pool, 1), (std::vector<int>{0}));
  pool.incref(0);
  pool.incref(0);
  EXPECT_EQ(pool.refcount(0), 3);
  pool.decref(0);
  EXPECT_EQ(pool.refcount(0), 2);
  pool.decref(0);
  EXPECT_EQ(pool.refcount(0), 1);
  EXPECT_EQ(pool.num_free(), 2);  // still held
  pool.decref(0);
  EXPECT_EQ(pool.refcount(0), 0);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(take(pool, 3), (std::vector<int>{1, 2, 0}));
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  BlockPool pool(2);
  EXPECT_EQ(take(pool, 1), (std::vector<int>{0}));
  pool.decref(0);
  EXPECT_DEATH(pool.decref(0), "double free");
  EXPECT_DEATH(pool.decref(1), "double free");  // never allocated
}

TEST(BlockPoolDeathTest, IncrefOfFreeBlockAborts) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.incref(1), "incref of free block 1");
}

TEST(BlockPoolDeathTest, OutOfRangeAborts) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.decref(2), "out of range");
  EXPECT_DEATH(pool.decref(-1), "out of range");
  EXPECT_DEATH(pool.incref(7), "out of range");
  EXPECT_DEATH((void)pool.refcount(2), "out of range");
}

CacheLayout layout(int block_size, int num_blocks, int num_slots, bool uses_pages = true) {
  CacheLayout l;
  l.block_size = block_size;
  l.num_blocks = num_blocks;
  l.num_slots = num_slots;
  l.uses_pages = uses_pages;
  return l;
}

core::Request req_with_id(core::RequestId id) {
  core::Request r;
  r.id = id;
  return r;
}

TEST(StateCacheManager, BlocksNeeded) {
  StateCacheManager paged(layout(4, 8, 2));
  EXPECT_EQ(paged.blocks_needed(0), 0);
  EXPECT_EQ(paged.blocks_needed(1), 1);
  EXPECT_EQ(paged.blocks_needed(4), 1);
  EXPECT_EQ(paged.blocks_needed(5), 2);
  EXPECT_EQ(paged.blocks_needed(8), 2);
  EXPECT_EQ(paged.blocks_needed(9), 3);
  EXPECT_GT(paged.blocks_needed(int64_t{1} << 50), 8);  // saturates, never wraps
  StateCacheManager unpaged(layout(4, 0, 2, false));
  EXPECT_EQ(unpaged.blocks_needed(0), 0);
  EXPECT_EQ(unpaged.blocks_needed(1000), 0);
}

TEST(StateCacheManager, ScriptedAllocateFreeExactIds) {
  StateCacheManager m(layout(4, 6, 2));
  EXPECT_EQ(m.num_free_blocks(), 6);
  EXPECT_EQ(m.num_free_slots(), 2);
  core::Request a = req_with_id(1), b = req_with_id(2), c = req_with_id(3);

  ASSERT_TRUE(m.allocate(a, 5));  // slot 0, pages 0 1
  EXPECT_EQ(a.slot, 0);
  EXPECT_EQ(a.block_table, (std::vector<int>{0, 1}));
  ASSERT_TRUE(m.allocate(b, 4));  // slot 1, page 2
  EXPECT_EQ(b.slot, 1);
  EXPECT_EQ(b.block_table, (std::vector<int>{2}));
  EXPECT_EQ(m.num_free_blocks(), 3);
  EXPECT_EQ(m.num_free_slots(), 0);

  // No slot left: nothing changes, not even the pages.
  EXPECT_FALSE(m.allocate(c, 1));
  EXPECT_EQ(c.slot, -1);
  EXPECT_TRUE(c.block_table.empty());
  EXPECT_EQ(m.num_free_blocks(), 3);

  ASSERT_TRUE(m.allocate(a, 8));  // still 2 pages: no change
  EXPECT_EQ(a.block_table, (std::vector<int>{0, 1}));
  EXPECT_EQ(a.slot, 0);
  ASSERT_TRUE(m.allocate(a, 9));  // grows by one
  EXPECT_EQ(a.block_table, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(m.num_free_blocks(), 2);  // 4 5

  // Needs 3 more pages, only 2 free: all or nothing.
  EXPECT_FALSE(m.allocate(b, 16));
  EXPECT_EQ(b.block_table, (std::vector<int>{2}));
  EXPECT_EQ(b.slot, 1);
  EXPECT_EQ(m.num_free_blocks(), 2);

  m.free(a);  // free pages: 4 5 0 1 3; free slots: 0
  EXPECT_EQ(a.slot, -1);
  EXPECT_TRUE(a.block_table.empty());
  EXPECT_EQ(m.num_free_blocks(), 5);
  EXPECT_EQ(m.num_free_slots(), 1);
  for (int blk : {0, 1, 3}) EXPECT_EQ(m.pool().refcount(blk), 0);

  ASSERT_TRUE(m.allocate(c, 12));
  EXPECT_EQ(c.slot, 0);
  EXPECT_EQ(c.block_table, (std::vector<int>{4, 5, 0}));
  EXPECT_FALSE(m.allocate(b, 16));  // needs 3 more, 2 free (1 3)
  ASSERT_TRUE(m.allocate(b, 12));
  EXPECT_EQ(b.block_table, (std::vector<int>{2, 1, 3}));
  EXPECT_EQ(m.num_free_blocks(), 0);
  for (int blk = 0; blk < 6; ++blk) EXPECT_EQ(m.pool().refcount(blk), 1);

  m.free(b);  // pages: 2 1 3; slots: 1
  m.free(c);  // pages: 2 1 3 4 5 0; slots: 1 0
  EXPECT_EQ(m.num_free_blocks(), 6);
  EXPECT_EQ(m.num_free_slots(), 2);
  ASSERT_TRUE(m.allocate(a, 1));
  EXPECT_EQ(a.slot, 1);
  EXPECT_EQ(a.block_table, (std::vector<int>{2}));
  ASSERT_TRUE(m.allocate(b, 9));
  EXPECT_EQ(b.slot, 0);
  EXPECT_EQ(b.block_table, (std::vector<int>{1, 3, 4}));
}

TEST(StateCacheManager, NotEnoughPagesForANewRequestTakesNoSlot) {
  StateCacheManager m(layout(2, 2, 3));
  core::Request a = req_with_id(1);
  EXPECT_FALSE(m.allocate(a, 5));
  EXPECT_EQ(a.slot, -1);
  EXPECT_TRUE(a.block_table.empty());
  EXPECT_EQ(m.num_free_slots(), 3);
  EXPECT_EQ(m.num_free_blocks(), 2);
  ASSERT_TRUE(m.allocate(a, 4));
  EXPECT_EQ(a.slot, 0);
  EXPECT_EQ(a.block_table, (std::vector<int>{0, 1}));
}

TEST(StateCacheManager, ZeroTokensTakesOnlyASlot) {
  StateCacheManager m(layout(4, 2, 1));
  core::Request a = req_with_id(1);
  ASSERT_TRUE(m.allocate(a, 0));
  EXPECT_EQ(a.slot, 0);
  EXPECT_TRUE(a.block_table.empty());
  m.free(a);
  m.free(a);  // holding nothing: a no-op
  EXPECT_EQ(m.num_free_slots(), 1);
  EXPECT_EQ(m.num_free_blocks(), 2);
}

TEST(StateCacheManager, WithoutPagesOnlySlotsBound) {
  StateCacheManager m(layout(4, 0, 2, false));
  core::Request a = req_with_id(1), b = req_with_id(2), c = req_with_id(3);
  ASSERT_TRUE(m.allocate(a, 1000));
  ASSERT_TRUE(m.allocate(b, 1));
  EXPECT_TRUE(a.block_table.empty());
  EXPECT_EQ(a.slot, 0);
  EXPECT_EQ(b.slot, 1);
  EXPECT_FALSE(m.allocate(c, 1));
  m.free(a);
  ASSERT_TRUE(m.allocate(c, 5000));
  EXPECT_EQ(c.slot, 0);
}

}  // namespace
}  // namespace deepinfer::kv
