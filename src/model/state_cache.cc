#include "model/state_cache.h"

#include <cstdlib>
#include <cstring>
#include <numeric>

#include "base/check.h"

namespace deepinfer::model {

int default_block_size(const ModelConfig& c, int preferred) {
  int l = 1;
  for (int r : c.compress_ratio)
    if (r > 0) l = std::lcm(l, r);
  const int p = preferred < 1 ? 1 : preferred;
  return (p + l - 1) / l * l;
}

Result<StateCacheShape> make_state_cache_shape(const ModelConfig& c, int block_size) {
  if (block_size < 1) return Status::invalid_argument("block_size must be positive, got " + std::to_string(block_size));
  StateCacheShape s;
  s.block_size = block_size;
  s.window_rows = c.sliding_window;
  s.layers.resize(c.num_layers);
  const size_t hd = static_cast<size_t>(c.head_dim), ih = static_cast<size_t>(c.index_head_dim);
  auto add_compressor = [&](CompressorSlotLayout& cl, size_t ratio, size_t head, bool overlap) {
    const size_t width = overlap ? 2 * head : head;
    cl.buf_kv = s.slot_floats;
    s.slot_floats += ratio * width;
    cl.buf_gate = s.slot_floats;
    s.slot_floats += ratio * width;
    if (overlap) {
      cl.prev_kv = s.slot_floats;
      s.slot_floats += ratio * head;
      cl.prev_gate = s.slot_floats;
      s.slot_floats += ratio * head;
    }
  };
  for (int l = 0; l < c.num_layers; ++l) {
    LayerCacheLayout& L = s.layers[l];
    L.window = s.slot_floats;
    s.slot_floats += static_cast<size_t>(c.sliding_window) * hd;
    const AttentionKind kind = c.layer_kinds[l];
    if (kind == AttentionKind::kSliding) continue;
    const int ratio = c.compress_ratio[l];
    if (block_size % ratio != 0)
      return Status::invalid_argument("block_size " + std::to_string(block_size) + " is not a multiple of layer " +
                                      std::to_string(l) + "'s compression ratio " + std::to_string(ratio));
    const bool csa = kind == AttentionKind::kCsa;
    add_compressor(L.compressor, ratio, hd, csa);
    L.rows_per_page = block_size / ratio;
    L.rows = s.page_floats;
    s.page_floats += static_cast<size_t>(L.rows_per_page) * hd;
    if (csa) {
      add_compressor(L.index_compressor, ratio, ih, true);
      L.index_keys = s.page_floats;
      s.page_floats += static_cast<size_t>(L.rows_per_page) * ih;
    }
  }
  return s;
}

namespace {
float* zeroed(size_t floats) {
  if (floats == 0) return nullptr;
  auto* p = static_cast<float*>(std::calloc(floats, sizeof(float)));
  DI_CHECK(p != nullptr, "out of memory allocating %zu bytes of state cache", floats * sizeof(float));
  return p;
}
}  // namespace

StateStorage::StateStorage(const StateCacheShape& shape, int num_slots, int num_blocks)
    : shape_(shape),
      num_slots_(num_slots),
      num_blocks_(num_blocks),
      slots_(zeroed(static_cast<size_t>(num_slots) * shape.slot_floats)),
      pages_(zeroed(static_cast<size_t>(num_blocks) * shape.page_floats)) {}

StateStorage::~StateStorage() {
  std::free(slots_);
  std::free(pages_);
}

void StateStorage::grow_pages(int num_blocks) {
  if (num_blocks <= num_blocks_ || shape_.page_floats == 0) return;
  float* bigger = zeroed(static_cast<size_t>(num_blocks) * shape_.page_floats);
  if (pages_) std::memcpy(bigger, pages_, static_cast<size_t>(num_blocks_) * shape_.page_floats * sizeof(float));
  std::free(pages_);
  pages_ = bigger;
  num_blocks_ = num_blocks;
}

}  // namespace deepinfer::model
