// DeepSeek-V4-specific kernels of the CUDA backend that know the state-cache layout
// (model/state_cache.h): compressor pooling and buffer updates, the attention and indexer row
// lists, the sliding-window ring store, the grouped output projection's re-layouts, and random
// weight initialisation for benchmarks. Device pointers throughout; asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::backend::cuda {

using bf16 = __nv_bfloat16;

// One sequence of the step, as the kernels see it.
struct SeqMeta {
  int64_t start;     // p0: position of the chunk's first token
  int32_t offset;    // b: index of the chunk's first token in the step
  int32_t count;     // n: tokens in the chunk
  int32_t slot;      // state slot
  int32_t bt_begin;  // its block table is block_tables[bt_begin ..)
};

// The step's metadata and the state cache, for the kernels.
struct StepView {
  int T = 0, S = 0;
  const int32_t* tok_seq = nullptr;  // [T] sequence of each token
  const int64_t* pos = nullptr;      // [T] absolute positions
  const SeqMeta* seqs = nullptr;     // [S]
  const int32_t* block_tables = nullptr;
  uint8_t* slots = nullptr;  // num_slots * slot_bytes
  uint8_t* pages = nullptr;  // num_blocks * page_bytes
  size_t slot_bytes = 0, page_bytes = 0;
  int window = 0;  // sliding window rows (ring capacity)
};

// One compressor of one layer as the kernels see it. ab: the step's stacked projection
// [T, 2 * width] (columns [0, width) = kv series, [width, 2 width) = gate), fp32; ape [ratio, width].
struct CompressorView {
  const float* ab = nullptr;
  const float* ape = nullptr;
  int ratio = 0, head = 0, width = 0;  // width = 2 * head when overlapping (CSA), else head
  bool overlap = false;
  size_t buf_kv = 0, buf_gate = 0, prev_kv = 0, prev_gate = 0;  // slot byte offsets (state_cache.h)
};

// Rows that close in this step: rows[j] = (sequence, row index) for j < R. Lists of rows, sequences
// and tokens may be padded with entries whose sequence / token is -1 (decode steps recorded as CUDA
// graphs use fixed list lengths): kernels skip them.
struct NewRow {
  int32_t seq;
  int32_t row;
};

// out[j, c] (fp32 [R, head]) = the gated softmax pool of new row j's window (CpuBackend::
// compress_pool over the slots DeepSeekV4::compress gathers), its inputs read from the chunk's
// projections, the slot's open-window buffer or the previous window's series A.
void compress_pool(const StepView& st, const CompressorView& cv, const NewRow* rows, int R, float* out,
                   cudaStream_t stream);
// After compress_pool: for every sequence that closed a row in this step, keeps series A of its
// last closed window (overlapping compressors only), then stores the chunk's tokens of each
// sequence's still-open window in the slot buffer. `open_tokens` [n_open] lists those tokens.
void compress_update(const StepView& st, const CompressorView& cv, const int32_t* closed_seqs, int n_closed,
                     const int32_t* open_tokens, int n_open, cudaStream_t stream);

// Writes rows src [R, dims] (fp32) as bf16 into pages: row j goes to page block_tables[seq's
// bt_begin + row / rows_per_page] at byte page_offset + (row % rows_per_page) * dims * 2.
void store_page_rows(const StepView& st, const NewRow* rows, int R, const float* src, int dims, size_t page_offset,
                     int rows_per_page, cudaStream_t stream);

// Attention row lists. For token t, rows[row_begin[t] ..): its window rows oldest first (ring rows
// of earlier steps at slot byte offset ring_offset, the chunk's own rows from chunk_rows [T] rows of
// row_bytes each), then its compressed rows: all (pos + 1) / ratio of them when `selected` is null
// (HCA), else selected[t * topk + j] for j < row_begin[t + 1] - row_begin[t] - window rows (CSA).
// Compressed row r is in page block_tables[bt_begin + r / rows_per_page] at page_offset +
// (r % rows_per_page) * row_bytes. Sliding-only layers have no compressed rows. Rows of any KV cache
// dtype (row_bytes = the row format's bytes).
void fill_attention_rows(const StepView& st, const int* row_begin, size_t ring_offset, const uint8_t* chunk_rows,
                         size_t row_bytes, const int* selected, int topk, size_t page_offset, int rows_per_page,
                         const void** rows, cudaStream_t stream);
// Indexer key lists: sequence s's keys 0 .. (start + count) / ratio - 1 go to keys[key_seq_begin[s] ..).
void fill_key_rows(const StepView& st, const int* key_seq_begin, int max_keys_per_seq, int ratio, size_t page_offset,
                   int rows_per_page, size_t row_bytes, const void** keys, cudaStream_t stream);

// Ring store: for each token in `tokens` [n], its row of chunk_rows (row_bytes each, already in the
// cache's format) goes to its sequence's ring row pos % window.
void store_ring(const StepView& st, const int32_t* tokens, int n, const uint8_t* chunk_rows, size_t row_bytes,
                size_t ring_offset, cudaStream_t stream);

// out[j] = the page address of new row j (as store_page_rows places it, rows of row_bytes), or null
// for padding entries (seq -1): the destinations of an encoder (kv_fp8.h).
void page_row_pointers(const StepView& st, const NewRow* rows, int R, size_t page_offset, int rows_per_page,
                       size_t row_bytes, uint8_t** out, cudaStream_t stream);

// Grouped output projection layout: split o [T, G * gw] fp32 into og [G, T, gw] bf16 (the GEMM
// writes its groups' outputs back side by side, grouped_gemm_stacked_side_by_side).
void split_groups(const float* o, int T, int G, int gw, bf16* og, cudaStream_t stream);
// rope(o, T, H, hd, pos, inv_freq, rope_dim, attention_factor, inverse = true) then split_groups(o,
// T, G, H * hd / G, og) in one pass (o is left as it was), bit for bit (the same rotation,
// rope_common.cuh). Returns false, launching nothing, where the one-pass form does not apply (hd,
// rope_dim, the group width not multiples of 4; unaligned; more than 65535 rows).
bool rope_inverse_split_groups(const float* o, int T, int H, int hd, const int64_t* pos, const float* inv_freq,
                               int rope_dim, float attention_factor, int G, bf16* og, cudaStream_t stream);

// y[t, :] = x[t, :] * s (fp32, in place).
void scale_rows(float* x, size_t n, float s, cudaStream_t stream);

// Deterministic uniform values in [-scale, scale] (counter-based hash of seed and index).
void fill_uniform_bf16(bf16* x, size_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_uniform_f32(float* x, size_t n, uint64_t seed, float scale, float offset, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda
