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

Result<StateCacheShape> make_state_cache_shape(const ModelConfig& c, int block_size, KvCacheDtype dtype) {
  if (block_size < 1) return Status::invalid_argument("block_size must be positive, got " + std::to_string(block_size));
  StateCacheShape s;
  s.block_size = block_size;
  s.window_rows = c.sliding_window;
  s.kv_row = KvRowFormat{dtype, c.head_dim, c.rope_head_dim};
  s.index_row = IndexRowFormat{dtype, c.index_head_dim};
  s.layers.resize(c.num_layers);
  const size_t kv_bytes = s.kv_row.bytes(), ik_bytes = s.index_row.bytes();
  auto align16 = [](size_t& n) { n = (n + 15) / 16 * 16; };
  auto add_floats = [&](size_t& at, size_t floats) {
    align16(s.slot_bytes);
    at = s.slot_bytes;
    s.slot_bytes += floats * sizeof(float);
  };
  auto add_compressor = [&](CompressorSlotLayout& cl, size_t ratio, size_t head, bool overlap) {
    const size_t width = overlap ? 2 * head : head;
    add_floats(cl.buf_kv, ratio * width);
    add_floats(cl.buf_gate, ratio * width);
    if (overlap) {
      add_floats(cl.prev_kv, ratio * head);
      add_floats(cl.prev_gate, ratio * head);
    }
  };
  const size_t hd = static_cast<size_t>(c.head_dim), ih = static_cast<size_t>(c.index_head_dim);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerCacheLayout& L = s.layers[l];
    align16(s.slot_bytes);
    L.window = s.slot_bytes;
    s.slot_bytes += static_cast<size_t>(c.sliding_window) * kv_bytes;
    const AttentionKind kind = c.layer_kinds[l];
    if (kind == AttentionKind::kSliding) continue;
    const int ratio = c.compress_ratio[l];
    if (block_size % ratio != 0)
      return Status::invalid_argument("block_size " + std::to_string(block_size) + " is not a multiple of layer " +
                                      std::to_string(l) + "'s compression ratio " + std::to_string(ratio));
    const bool csa = kind == AttentionKind::kCsa;
    add_compressor(L.compressor, ratio, hd, csa);
    L.rows_per_page = block_size / ratio;
    align16(s.page_bytes);
    L.rows = s.page_bytes;
    s.page_bytes += static_cast<size_t>(L.rows_per_page) * kv_bytes;
    if (csa) {
      add_compressor(L.index_compressor, ratio, ih, true);
      align16(s.page_bytes);
      L.index_keys = s.page_bytes;
      s.page_bytes += static_cast<size_t>(L.rows_per_page) * ik_bytes;
    }
  }
  align16(s.slot_bytes);
  align16(s.page_bytes);
  return s;
}

namespace {
// 16-byte aligned (calloc's alignment on the platforms we build for), zeroed lazily by the OS.
uint8_t* zeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  auto* p = static_cast<uint8_t*>(std::calloc(bytes, 1));
  DI_CHECK(p != nullptr, "out of memory allocating %zu bytes of state cache", bytes);
  DI_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "calloc returned memory that is not 16-byte aligned");
  return p;
}
}  // namespace

StateStorage::StateStorage(const StateCacheShape& shape, int num_slots, int num_blocks)
    : shape_(shape),
      num_slots_(num_slots),
      num_blocks_(num_blocks),
      slots_(zeroed(static_cast<size_t>(num_slots) * shape.slot_bytes)),
      pages_(zeroed(static_cast<size_t>(num_blocks) * shape.page_bytes)) {}

StateStorage::~StateStorage() {
  std::free(slots_);
  std::free(pages_);
}

void StateStorage::grow_pages(int num_blocks) {
  if (num_blocks <= num_blocks_ || shape_.page_bytes == 0) return;
  uint8_t* bigger = zeroed(static_cast<size_t>(num_blocks) * shape_.page_bytes);
  if (pages_) std::memcpy(bigger, pages_, static_cast<size_t>(num_blocks_) * shape_.page_bytes);
  std::free(pages_);
  pages_ = bigger;
  num_blocks_ = num_blocks;
}

}  // namespace deepinfer::model
