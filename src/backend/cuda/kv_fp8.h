// The FP8 KV cache on the GPU: encoders for FP8 KV rows and FP4 indexer keys, byte for byte the
// formats of model::KvRowFormat / model::IndexRowFormat with KvCacheDtype::kFP8 (model/kv_format.h):
//   KV row:      [(d - r) e4m3 codes][ceil((d - r) / 64) ue8m0 scales][pad to even][r bf16 RoPE values]
//   indexer key: [ceil(dims / 2) bytes of e2m1 pairs, low nibble = even dim][ceil(dims / 32) ue8m0 scales]
// with the CPU's block scales (2^ceil(log2(max(amax, floor) / qmax)) by the fp32 bit trick), RNE
// saturating casts and RNE bf16 RoPE values. Readers: sink_attention_fp8 / indexer_scores_fp4
// (attention.h) and indexer_scores_release_fp4 below.
//
// Encoders: row j of the source is src + j * src_stride (elements, fp32 or bf16; a bf16 source
// encodes like its values widened to fp32). Its bytes go either to dst_rows[j] (a device array of
// R row pointers, e.g. page addresses computed on the device; nullptr entries are skipped) or to
// dst + j * dst_stride (a contiguous [R, row_bytes] scratch when dst_stride == row bytes). No
// alignment is required of any destination. NaN or infinite inputs are outside the contract.
// Device pointers; asynchronous on `stream`; nothing allocated.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::backend::cuda {

using bf16 = __nv_bfloat16;

// model::KvRowFormat{kFP8, dims, rope_dims}.bytes(): 584 for 512 / 64.
constexpr size_t kv_fp8_row_bytes(int dims, int rope_dims) {
  const int nope = dims - rope_dims;
  const size_t head = static_cast<size_t>(nope) + static_cast<size_t>((nope + 63) / 64);
  return (head + 1) / 2 * 2 + static_cast<size_t>(rope_dims) * 2;
}
// model::IndexRowFormat{kFP8, dims}.bytes(): 68 for 128.
constexpr size_t index_fp4_row_bytes(int dims) {
  return static_cast<size_t>(dims + 1) / 2 + static_cast<size_t>((dims + 31) / 32);
}

// FP8 KV rows (0 <= rope_dims <= dims).
void encode_kv_rows_fp8(const float* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* const* dst_rows,
                        cudaStream_t stream);
void encode_kv_rows_fp8(const float* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* dst,
                        size_t dst_stride, cudaStream_t stream);
void encode_kv_rows_fp8(const bf16* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* const* dst_rows,
                        cudaStream_t stream);
void encode_kv_rows_fp8(const bf16* src, size_t src_stride, int R, int dims, int rope_dims, uint8_t* dst,
                        size_t dst_stride, cudaStream_t stream);

// FP4 indexer keys (dims >= 1).
void encode_index_rows_fp4(const float* src, size_t src_stride, int R, int dims, uint8_t* const* dst_rows,
                           cudaStream_t stream);
void encode_index_rows_fp4(const float* src, size_t src_stride, int R, int dims, uint8_t* dst, size_t dst_stride,
                           cudaStream_t stream);
void encode_index_rows_fp4(const bf16* src, size_t src_stride, int R, int dims, uint8_t* const* dst_rows,
                           cudaStream_t stream);
void encode_index_rows_fp4(const bf16* src, size_t src_stride, int R, int dims, uint8_t* dst, size_t dst_stride,
                           cudaStream_t stream);

// indexer_scores_release (release_kernels.h) over FP4 keys (index_fp4_row_bytes(dim) bytes each, any
// alignment): bitwise equal to it on bf16 keys holding decode(key). Same operation order: per head a
// sequential fp32 dot over the dims, bf(max(bf(dot), 0) * weight) summed over heads ascending, bf(sum).
void indexer_scores_release_fp4(const bf16* q, const float* weights, int T, int heads, int dim,
                                const uint8_t* const* keys, const int* key_begin, const int* num_keys, int max_keys,
                                float* score, int score_stride, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda
