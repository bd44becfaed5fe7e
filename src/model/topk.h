// Deterministic top-k used by the MoE router and the lightning indexer.
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

namespace deepinfer::model {

// Indices of the k largest of score[0..n), ordered by score descending; ties go to the lower
// index. (torch.topk leaves tie order unspecified; a fixed rule keeps outputs reproducible.)
inline std::vector<int> topk_indices(const float* score, int n, int k) {
  k = std::clamp(k, 0, n);
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
  idx.resize(k);
  return idx;
}

}  // namespace deepinfer::model
