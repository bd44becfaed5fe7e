// Kernels that know the V4 state-cache layout (v4_kernels.h). All are memory-bound gathers and
// scatters; each output element is produced by one thread with a fixed operation order, so results
// never depend on the batch.

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/v4_kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_common.cuh"

namespace deepinfer::backend::cuda {
namespace {

inline unsigned blocks_for(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

__device__ inline float* slot_floats(const StepView& st, int slot, size_t offset) {
  return reinterpret_cast<float*>(st.slots + static_cast<size_t>(slot) * st.slot_bytes + offset);
}

// One value (kv or gate) of window position q, column c of the compressor's width, for sequence s.
// Rule (see DeepSeekV4::compress): positions of this chunk come from the step's projections (gate
// plus ape); earlier positions of the window that was open when the chunk began come from the slot
// buffer (gate already has ape); anything older is the previous window's series A (`prev`, head wide).
struct WindowSource {
  const StepView& st;
  const CompressorView& cv;
  const SeqMeta& sm;
  __device__ float kv(int64_t q, int c, int prev_i) const { return value(q, c, prev_i, false); }
  __device__ float gate(int64_t q, int c, int prev_i) const { return value(q, c, prev_i, true); }
  __device__ float value(int64_t q, int c, int prev_i, bool is_gate) const {
    const int64_t rows_done = sm.start / cv.ratio;
    const int in_window = static_cast<int>(q % cv.ratio);
    if (q >= sm.start) {
      const size_t t = static_cast<size_t>(sm.offset + (q - sm.start));
      const float* row = cv.ab + t * 2 * cv.width;
      return is_gate ? row[cv.width + c] + cv.ape[static_cast<size_t>(in_window) * cv.width + c] : row[c];
    }
    if (q >= rows_done * cv.ratio) {
      const float* buf = slot_floats(st, sm.slot, is_gate ? cv.buf_gate : cv.buf_kv);
      return buf[static_cast<size_t>(in_window) * cv.width + c];
    }
    const float* prev = slot_floats(st, sm.slot, is_gate ? cv.prev_gate : cv.prev_kv);
    return prev[static_cast<size_t>(prev_i) * cv.head + c];
  }
};

// One thread per (new row, channel). Three passes over the window's slots (max, sum, weighted
// sum), in the CPU's slot order: series A of window r - 1 (overlapping compressors; absent for
// r == 0), then series B (or the whole width) of window r. Gates are re-read rather than kept in a
// run-time indexed array, which would live in local memory.
__global__ void compress_pool_kernel(StepView st, CompressorView cv, const NewRow* rows, float* out) {
  prefetch_l2(cv.ape, static_cast<size_t>(cv.ratio) * cv.width * sizeof(float));
  pdl_prologue();
  const NewRow nr = rows[blockIdx.y];
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (nr.seq < 0 || c >= cv.head) return;
  const SeqMeta sm = st.seqs[nr.seq];
  const WindowSource src{st, cv, sm};
  const int64_t r = nr.row;
  const bool has_a = cv.overlap && r > 0;
  const int col = cv.overlap ? cv.head : 0;  // series B's columns
  float mx = -INFINITY;
  if (has_a)
    for (int i = 0; i < cv.ratio; ++i) mx = fmaxf(mx, src.gate((r - 1) * cv.ratio + i, c, i));
  for (int i = 0; i < cv.ratio; ++i) mx = fmaxf(mx, src.gate(r * cv.ratio + i, col + c, i));
  float sum = 0.0f;
  if (has_a)
    for (int i = 0; i < cv.ratio; ++i) sum += expf(src.gate((r - 1) * cv.ratio + i, c, i) - mx);
  for (int i = 0; i < cv.ratio; ++i) sum += expf(src.gate(r * cv.ratio + i, col + c, i) - mx);
  float acc = 0.0f;
  if (has_a)
    for (int i = 0; i < cv.ratio; ++i) {
      const int64_t q = (r - 1) * cv.ratio + i;
      acc += src.kv(q, c, i) * (expf(src.gate(q, c, i) - mx) / sum);
    }
  for (int i = 0; i < cv.ratio; ++i) {
    const int64_t q = r * cv.ratio + i;
    acc += src.kv(q, col + c, i) * (expf(src.gate(q, col + c, i) - mx) / sum);
  }
  out[static_cast<size_t>(blockIdx.y) * cv.head + c] = acc;
}

// Series A (the first `head` columns) of each closing sequence's last closed window -> prev.
__global__ void keep_series_a_kernel(StepView st, CompressorView cv, const int32_t* closed_seqs) {
  pdl_prologue();
  if (closed_seqs[blockIdx.y] < 0) return;
  const SeqMeta sm = st.seqs[closed_seqs[blockIdx.y]];
  const WindowSource src{st, cv, sm};
  const int64_t last = (sm.start + sm.count) / cv.ratio - 1;  // its last closed window
  float* prev_kv = slot_floats(st, sm.slot, cv.prev_kv);
  float* prev_gate = slot_floats(st, sm.slot, cv.prev_gate);
  for (int idx = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); idx < cv.ratio * cv.head;
       idx += static_cast<int>(gridDim.x * blockDim.x)) {
    const int i = idx / cv.head, c = idx % cv.head;
    const int64_t q = last * cv.ratio + i;
    prev_kv[idx] = src.kv(q, c, i);
    prev_gate[idx] = src.gate(q, c, i);
  }
}

// The chunk's tokens of a still-open window -> the slot buffer (gate + ape).
__global__ void store_open_kernel(StepView st, CompressorView cv, const int32_t* open_tokens) {
  pdl_prologue();
  const int t = open_tokens[blockIdx.y];
  if (t < 0) return;
  const SeqMeta sm = st.seqs[st.tok_seq[t]];
  const int in_window = static_cast<int>(st.pos[t] % cv.ratio);
  float* buf_kv = slot_floats(st, sm.slot, cv.buf_kv) + static_cast<size_t>(in_window) * cv.width;
  float* buf_gate = slot_floats(st, sm.slot, cv.buf_gate) + static_cast<size_t>(in_window) * cv.width;
  const float* row = cv.ab + static_cast<size_t>(t) * 2 * cv.width;
  const float* ape = cv.ape + static_cast<size_t>(in_window) * cv.width;
  for (int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); c < cv.width;
       c += static_cast<int>(gridDim.x * blockDim.x)) {
    buf_kv[c] = row[c];
    buf_gate[c] = row[cv.width + c] + ape[c];
  }
}

__device__ inline uint8_t* page_row(const StepView& st, const SeqMeta& sm, int64_t r, size_t page_offset,
                                    int rows_per_page, size_t row_bytes) {
  const int block = st.block_tables[sm.bt_begin + static_cast<int>(r / rows_per_page)];
  return st.pages + static_cast<size_t>(block) * st.page_bytes + page_offset +
         static_cast<size_t>(r % rows_per_page) * row_bytes;
}

__global__ void store_page_rows_kernel(StepView st, const NewRow* rows, const float* src, int dims,
                                       size_t page_offset, int rows_per_page) {
  pdl_prologue();
  const NewRow nr = rows[blockIdx.y];
  if (nr.seq < 0) return;
  const SeqMeta sm = st.seqs[nr.seq];
  bf16* dst = reinterpret_cast<bf16*>(page_row(st, sm, nr.row, page_offset, rows_per_page, static_cast<size_t>(dims) * 2));
  for (int c = static_cast<int>(threadIdx.x); c < dims; c += static_cast<int>(blockDim.x))
    dst[c] = __float2bfloat16_rn(src[static_cast<size_t>(blockIdx.y) * dims + c]);
}

__global__ void fill_attention_rows_kernel(StepView st, const int* row_begin, size_t ring_offset,
                                           const uint8_t* chunk_rows, size_t row_bytes, const int* selected, int topk,
                                           size_t page_offset, int rows_per_page, const void** rows) {
  pdl_prologue();
  const int t = static_cast<int>(blockIdx.x);
  const SeqMeta sm = st.seqs[st.tok_seq[t]];
  const int64_t pos = st.pos[t];
  const int64_t first = pos - st.window + 1 > 0 ? pos - st.window + 1 : 0;
  const int n_window = static_cast<int>(pos - first + 1);
  const int begin = row_begin[t], count = row_begin[t + 1] - begin;
  const uint8_t* ring = st.slots + static_cast<size_t>(sm.slot) * st.slot_bytes + ring_offset;
  for (int j = static_cast<int>(threadIdx.x); j < count; j += static_cast<int>(blockDim.x)) {
    const void* row;
    if (j < n_window) {
      const int64_t p = first + j;
      row = p < sm.start ? ring + static_cast<size_t>(p % st.window) * row_bytes
                         : chunk_rows + static_cast<size_t>(sm.offset + (p - sm.start)) * row_bytes;
    } else {
      const int k = j - n_window;
      const int64_t r = selected ? selected[static_cast<size_t>(t) * topk + k] : k;
      row = page_row(st, sm, r, page_offset, rows_per_page, row_bytes);
    }
    rows[begin + j] = row;
  }
}

__global__ void fill_key_rows_kernel(StepView st, const int* key_seq_begin, int ratio, size_t page_offset,
                                     int rows_per_page, size_t row_bytes, const void** keys) {
  pdl_prologue();
  const int s = static_cast<int>(blockIdx.y);
  const SeqMeta sm = st.seqs[s];
  const int64_t total = (sm.start + sm.count) / ratio;
  for (int64_t r = blockIdx.x * blockDim.x + threadIdx.x; r < total; r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    keys[key_seq_begin[s] + r] = page_row(st, sm, r, page_offset, rows_per_page, row_bytes);
}

// Copies whole rows in units of U bytes (row_bytes % sizeof(U) == 0, both ends U-aligned).
template <class U>
__global__ void store_ring_kernel(StepView st, const int32_t* tokens, const uint8_t* chunk_rows, size_t row_bytes,
                                  size_t ring_offset) {
  pdl_prologue();
  const int t = tokens[blockIdx.x];
  const SeqMeta sm = st.seqs[st.tok_seq[t]];
  auto* dst = reinterpret_cast<U*>(st.slots + static_cast<size_t>(sm.slot) * st.slot_bytes + ring_offset +
                                   static_cast<size_t>(st.pos[t] % st.window) * row_bytes);
  const auto* src = reinterpret_cast<const U*>(chunk_rows + static_cast<size_t>(t) * row_bytes);
  const int n = static_cast<int>(row_bytes / sizeof(U));
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) dst[i] = src[i];
}

__global__ void page_row_pointers_kernel(StepView st, const NewRow* rows, int R, size_t page_offset, int rows_per_page,
                                         size_t row_bytes, uint8_t** out) {
  pdl_prologue();
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= R) return;
  const NewRow nr = rows[j];
  out[j] = nr.seq < 0 ? nullptr : page_row(st, st.seqs[nr.seq], nr.row, page_offset, rows_per_page, row_bytes);
}

__global__ void split_groups_kernel(const float* o, int T, int G, int gw, bf16* og) {
  pdl_prologue();
  const size_t n = static_cast<size_t>(T) * G * gw;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = i / (static_cast<size_t>(G) * gw), rem = i % (static_cast<size_t>(G) * gw);
    const size_t g = rem / gw, c = rem % gw;
    og[(g * T + t) * gw + c] = __float2bfloat16_rn(o[i]);
  }
}

// Vectorized forms (4 columns per thread, 32-bit index math; row t = blockIdx.y): the same
// conversions as the scalar kernels, for widths that are multiples of 4 and 16-byte aligned rows.
__global__ void split_groups_vec4_kernel(const float* o, int T, int G, int gw, bf16* og) {
  pdl_prologue();
  const int t = static_cast<int>(blockIdx.y);
  const int j = 4 * static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= G * gw) return;
  const int g = j / gw, c = j % gw;
  const float4 v = *reinterpret_cast<const float4*>(o + static_cast<size_t>(t) * G * gw + j);
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(og + (static_cast<size_t>(g) * T + t) * gw + c);
  dst[0] = __floats2bfloat162_rn(v.x, v.y);
  dst[1] = __floats2bfloat162_rn(v.z, v.w);
}
// split_groups with the inverse RoPE of each head's tail (rope_common.cuh's pair arithmetic: the
// same bits as rope(inverse) then split_groups, the fallback) applied on the way: o [T, H * hd]
// fp32 -> og [G, T, gw] bf16. 4 columns per thread, row t = blockIdx.y; hd, rope_dim, gw multiples of 4.
__global__ void rope_inverse_split_groups_vec4_kernel(const float* o, int T, int H, int hd, const int64_t* pos,
                                                      const float* inv_freq, int rope_dim, float attention_factor,
                                                      int G, int gw, bf16* og) {
  prefetch_l2(inv_freq, static_cast<size_t>(rope_dim / 2) * sizeof(float));
  pdl_prologue();
  const int t = static_cast<int>(blockIdx.y);
  const int j = 4 * static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= H * hd) return;
  const float4 v = *reinterpret_cast<const float4*>(o + static_cast<size_t>(t) * H * hd + j);
  float2 lo = make_float2(v.x, v.y), hi = make_float2(v.z, v.w);
  const int d = j % hd, first = hd - rope_dim;
  if (d >= first) {
    const float p = static_cast<float>(pos[t]);
    const int i = (d - first) / 2;  // pairs i and i + 1
    lo = rope_common::rope_rotate(lo, rope_common::rope_cos_sin(inv_freq[i], p, attention_factor, true));
    hi = rope_common::rope_rotate(hi, rope_common::rope_cos_sin(inv_freq[i + 1], p, attention_factor, true));
  }
  const int g = j / gw, c = j % gw;
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(og + (static_cast<size_t>(g) * T + t) * gw + c);
  dst[0] = __floats2bfloat162_rn(lo.x, lo.y);
  dst[1] = __floats2bfloat162_rn(hi.x, hi.y);
}
__global__ void scale_kernel(float* x, size_t n, float s) {
  pdl_prologue();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] *= s;
}

// splitmix64 of (seed, index): a counter-based generator, so any element can be made alone.
__device__ inline float uniform_pm1(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_uniform_bf16_kernel(bf16* x, size_t n, uint64_t seed, float scale) {
  pdl_prologue();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(uniform_pm1(seed, i) * scale);
}

__global__ void fill_uniform_f32_kernel(float* x, size_t n, uint64_t seed, float scale, float offset) {
  pdl_prologue();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = offset + uniform_pm1(seed, i) * scale;
}

constexpr unsigned kGridCap = 4096;
inline unsigned capped_blocks(size_t n, unsigned threads) {
  const unsigned b = blocks_for(n, threads);
  return b == 0 ? 1 : (b > kGridCap ? kGridCap : b);
}

}  // namespace

void compress_pool(const StepView& st, const CompressorView& cv, const NewRow* rows, int R, float* out,
                   cudaStream_t stream) {
  if (R == 0) return;
  const unsigned threads = 128;
  compress_pool_kernel<<<dim3(blocks_for(static_cast<size_t>(cv.head), threads), static_cast<unsigned>(R)), threads, 0,
                         stream>>>(st, cv, rows, out);
}

void compress_update(const StepView& st, const CompressorView& cv, const int32_t* closed_seqs, int n_closed,
                     const int32_t* open_tokens, int n_open, cudaStream_t stream) {
  // Order matters: series A may be read from the open-window buffer that the second kernel overwrites.
  if (cv.overlap && n_closed > 0)
    keep_series_a_kernel<<<dim3(blocks_for(static_cast<size_t>(cv.ratio) * cv.head, 256), static_cast<unsigned>(n_closed)),
                           256, 0, stream>>>(st, cv, closed_seqs);
  if (n_open > 0)
    store_open_kernel<<<dim3(blocks_for(static_cast<size_t>(cv.width), 256), static_cast<unsigned>(n_open)), 256, 0,
                        stream>>>(st, cv, open_tokens);
}

void store_page_rows(const StepView& st, const NewRow* rows, int R, const float* src, int dims, size_t page_offset,
                     int rows_per_page, cudaStream_t stream) {
  if (R == 0) return;
  store_page_rows_kernel<<<dim3(1, static_cast<unsigned>(R)), 256, 0, stream>>>(st, rows, src, dims, page_offset,
                                                                               rows_per_page);
}

void fill_attention_rows(const StepView& st, const int* row_begin, size_t ring_offset, const uint8_t* chunk_rows,
                         size_t row_bytes, const int* selected, int topk, size_t page_offset, int rows_per_page,
                         const void** rows, cudaStream_t stream) {
  if (st.T == 0) return;
  fill_attention_rows_kernel<<<static_cast<unsigned>(st.T), 128, 0, stream>>>(
      st, row_begin, ring_offset, chunk_rows, row_bytes, selected, topk, page_offset, rows_per_page, rows);
}

void fill_key_rows(const StepView& st, const int* key_seq_begin, int max_keys_per_seq, int ratio, size_t page_offset,
                   int rows_per_page, size_t row_bytes, const void** keys, cudaStream_t stream) {
  if (st.S == 0 || max_keys_per_seq == 0) return;
  fill_key_rows_kernel<<<dim3(capped_blocks(static_cast<size_t>(max_keys_per_seq), 256), static_cast<unsigned>(st.S)), 256,
                         0, stream>>>(st, key_seq_begin, ratio, page_offset, rows_per_page, row_bytes, keys);
}

void store_ring(const StepView& st, const int32_t* tokens, int n, const uint8_t* chunk_rows, size_t row_bytes,
                size_t ring_offset, cudaStream_t stream) {
  if (n == 0) return;
  if (row_bytes % 16 == 0)
    store_ring_kernel<uint4><<<static_cast<unsigned>(n), 64, 0, stream>>>(st, tokens, chunk_rows, row_bytes, ring_offset);
  else if (row_bytes % 8 == 0)
    store_ring_kernel<uint2><<<static_cast<unsigned>(n), 64, 0, stream>>>(st, tokens, chunk_rows, row_bytes, ring_offset);
  else
    store_ring_kernel<uint8_t><<<static_cast<unsigned>(n), 128, 0, stream>>>(st, tokens, chunk_rows, row_bytes,
                                                                             ring_offset);
}

void page_row_pointers(const StepView& st, const NewRow* rows, int R, size_t page_offset, int rows_per_page,
                       size_t row_bytes, uint8_t** out, cudaStream_t stream) {
  if (R == 0) return;
  page_row_pointers_kernel<<<static_cast<unsigned>((R + 127) / 128), 128, 0, stream>>>(st, rows, R, page_offset,
                                                                                       rows_per_page, row_bytes, out);
}

void split_groups(const float* o, int T, int G, int gw, bf16* og, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(T) * G * gw;
  if (n == 0) return;
  const bool vec = gw % 4 == 0 && (reinterpret_cast<uintptr_t>(o) & 15u) == 0 &&
                   (reinterpret_cast<uintptr_t>(og) & 7u) == 0 && T <= 65535 && static_cast<long long>(G) * gw < (1ll << 30);
  if (vec) {
    const int quads = G * gw / 4;
    split_groups_vec4_kernel<<<dim3(static_cast<unsigned>((quads + 255) / 256), static_cast<unsigned>(T)), 256, 0, stream>>>(
        o, T, G, gw, og);
    return;
  }
  split_groups_kernel<<<capped_blocks(n, 256), 256, 0, stream>>>(o, T, G, gw, og);
}

bool rope_inverse_split_groups(const float* o, int T, int H, int hd, const int64_t* pos, const float* inv_freq,
                               int rope_dim, float attention_factor, int G, bf16* og, cudaStream_t stream) {
  if (T <= 0) return true;
  const int gw = H * hd / G;
  const bool vec = hd % 4 == 0 && rope_dim % 4 == 0 && rope_dim <= hd && gw % 4 == 0 && G * gw == H * hd &&
                   (reinterpret_cast<uintptr_t>(o) & 15u) == 0 && (reinterpret_cast<uintptr_t>(og) & 7u) == 0 &&
                   T <= 65535 && static_cast<long long>(H) * hd < (1ll << 30);
  if (!vec) return false;
  const int quads = H * hd / 4;
  rope_inverse_split_groups_vec4_kernel<<<dim3(static_cast<unsigned>((quads + 255) / 256), static_cast<unsigned>(T)), 256,
                                          0, stream>>>(o, T, H, hd, pos, inv_freq, rope_dim, attention_factor, G, gw, og);
  return true;
}

void scale_rows(float* x, size_t n, float s, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<capped_blocks(n, 256), 256, 0, stream>>>(x, n, s);
}

void fill_uniform_bf16(bf16* x, size_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n == 0) return;
  fill_uniform_bf16_kernel<<<capped_blocks(n, 256), 256, 0, stream>>>(x, n, seed, scale);
}

void fill_uniform_f32(float* x, size_t n, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  if (n == 0) return;
  fill_uniform_f32_kernel<<<capped_blocks(n, 256), 256, 0, stream>>>(x, n, seed, scale, offset);
}

}  // namespace deepinfer::backend::cuda
