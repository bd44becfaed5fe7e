#include "model/topk.h"

#include <gtest/gtest.h>

namespace deepinfer::model {
namespace {

TEST(TopK, OrdersByScoreThenLowerIndexOnTies) {
  const float s[] = {0.5f, 2.0f, 0.5f, 2.0f, -1.0f, 0.5f};
  EXPECT_EQ(topk_indices(s, 6, 3), (std::vector<int>{1, 3, 0}));
  EXPECT_EQ(topk_indices(s, 6, 5), (std::vector<int>{1, 3, 0, 2, 5}));
}

TEST(TopK, AllTiedAtZeroPicksLowestIndices) {
  // The indexer's ReLU sum ties exactly at 0 when no head fires.
  const std::vector<float> s(10, 0.0f);
  EXPECT_EQ(topk_indices(s.data(), 10, 4), (std::vector<int>{0, 1, 2, 3}));
}

TEST(TopK, KClampedToN) {
  const float s[] = {1.0f, 3.0f};
  EXPECT_EQ(topk_indices(s, 2, 5), (std::vector<int>{1, 0}));
  EXPECT_TRUE(topk_indices(s, 2, 0).empty());
}

}  // namespace
}  // namespace deepinfer::model
