// Attention-side kernels of the CUDA backend (sm_90): sparse attention with a learned sink over
// one shared KV head, and the lightning indexer's scoring and top-k.
//
// Rows are given as device arrays of row pointers, so one kernel serves the sliding window (ring
// rows of earlier steps and the chunk's own new rows), HCA (every compressed row) and CSA (the
// indexer's picks) without knowing the cache layout. Every pointer is 16-byte aligned.
//
// Batch invariance: a token's outputs depend only on its own q, rows, keys and weights, computed
// with an operation sequence chosen from its own row count (any split of the rows into chunks has a
// size that depends on the row count alone, and partial results combine in a fixed order), never
// from T or from other tokens.
// All entry points are asynchronous on `stream`, allocate nothing, and never synchronize.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::backend::cuda {

using bf16 = __nv_bfloat16;

// For token t and head h (q: [T, H, d] bf16; rows[row_begin[t] .. row_begin[t + 1]) point at d bf16
// values each, K == V; row_begin: [T + 1] device ints; sinks: [H] fp32):
//   s_r = scale * dot(q[t, h], row_r)            (fp32 accumulation)
//   mx  = max(sinks[h], max_r s_r)
//   out[t, h] = sum_r exp(s_r - mx) * row_r / (exp(sinks[h] - mx) + sum_r exp(s_r - mx))   (fp32)
// A token with no rows gets zeros. d is 512 in DeepSeek-V4 (any multiple of 64 up to 512 must work;
// tests use 64 and 512), H is 64 (any H >= 1). max_rows: host bound on any token's row count.
// `workspace` (>= sink_attention_workspace_bytes(T, H, d, max_rows) bytes, 256-byte aligned) holds
// split partial results.
// The probabilities exp(s_r - mx) enter the P V product as bf16 (kBf16: relative error <= 2^-9 each;
// the denominator sums the same bf16 values) or as bf16 hi + lo pairs (kBf16HiLo: ~2^-17, twice the
// P V tensor work; what release numerics uses, the official code's softmax being fp32).
enum class AttnProbabilities { kBf16, kBf16HiLo };
size_t sink_attention_workspace_bytes(int T, int H, int d, int max_rows);
void sink_attention(const bf16* q, int T, int H, int d, const bf16* const* rows, const int* row_begin, int max_rows,
                    const float* sinks, float scale, float* out, void* workspace, cudaStream_t stream,
                    AttnProbabilities probs = AttnProbabilities::kBf16);

// sink_attention over FP8 KV rows (model::KvRowFormat with kFP8, dims d, `rope_dims` RoPE dims:
// kv_fp8_row_bytes(d, rope_dims) bytes, kv_fp8.h), decoded to bf16 while loading. Bitwise equal to
// sink_attention on bf16 rows holding decode(row) (every decoded value is a bf16 value). Same
// workspace (sink_attention_workspace_bytes). Requires rope_dims % 8 == 0, rope_dims <= d and a row
// size that is a multiple of 8 bytes (584 for d = 512, rope_dims = 64); every row pointer 8-byte aligned.
void sink_attention_fp8(const bf16* q, int T, int H, int d, int rope_dims, const uint8_t* const* rows,
                        const int* row_begin, int max_rows, const float* sinks, float scale, float* out,
                        void* workspace, cudaStream_t stream, AttnProbabilities probs = AttnProbabilities::kBf16);

// Lightning-indexer scores (q: [T, heads, dim] bf16; weights: [T, heads] fp32; token t's keys are
// keys[key_begin[t] + w] for w < num_keys[t], each `dim` bf16 values):
//   score[t * score_stride + w] = sum_h (max(dot(q[t, h], key_w), 0) * scale) * weights[t, h]
// summed over h in ascending order, fp32. Entries w >= num_keys[t] are not written. dim is 128
// (any multiple of 16 up to 256), heads 64 (any >= 1). max_keys: host bound on num_keys.
void indexer_scores(const bf16* q, const float* weights, int T, int heads, int dim, const bf16* const* keys,
                    const int* key_begin, const int* num_keys, int max_keys, float scale, float* score,
                    int score_stride, cudaStream_t stream);

// indexer_scores over FP4 keys (model::IndexRowFormat with kFP8: index_fp4_row_bytes(dim) bytes,
// kv_fp8.h), decoded to bf16 while loading; bitwise equal to indexer_scores on bf16 keys holding
// decode(key). Each key pointer must be aligned to the largest power of two <= 16 dividing the
// key size (as keys packed from a 16-byte-aligned base are: 4 bytes for dim 128, 2 for dim 64).
void indexer_scores_fp4(const bf16* q, const float* weights, int T, int heads, int dim, const uint8_t* const* keys,
                        const int* key_begin, const int* num_keys, int max_keys, float scale, float* score,
                        int score_stride, cudaStream_t stream);

// selected[t * k + j], j < min(k, num_keys[t]): the indices of the min(k, num_keys[t]) largest of
// score[t * score_stride + 0 .. num_keys[t]) (ties go to the lower index), written in ascending
// index order; the remaining entries are -1. count[t] = min(k, num_keys[t]) when count != nullptr.
// k is 512 in DeepSeek-V4 (any 1..2048); num_keys up to 262144 (a 1M-token context at ratio 4).
// `workspace` >= topk_workspace_bytes(T, max_keys, k) bytes.
size_t topk_workspace_bytes(int T, int max_keys, int k);
void topk_select(const float* score, int T, int score_stride, const int* num_keys, int max_keys, int k, int* selected,
                 int* count, void* workspace, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda
