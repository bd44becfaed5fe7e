// CudaModel: the DeepSeek-V4 forward on one GPU, with its weights and its state cache in device
// memory. Same step contract as model::DeepSeekV4::forward (a batch of SeqChunks continuing their
// sequences' states; logits for the rows each chunk asks for) and the same state-cache byte layout
// (model::StateCacheShape with bf16 KV rows), so the scheduler's slots and block tables mean the
// same thing on either backend. With the fp8 KV cache dtype (CudaModelOptions::kv_cache_dtype),
// rows are encoded on the GPU exactly as the CPU encodes them and read dequantized by the attention
// and indexer kernels.
//
// Numerics on the GPU (exact mode): weights bf16 (lossless for bf16, FP8 and FP4 checkpoints: their
// dequantized values are bf16 numbers), GEMM inputs rounded to bf16, fp32 accumulation, residual
// streams, norms, RoPE, mHC, routing and softmax in fp32, KV rows and indexer keys stored as bf16
// (or fp8, see above).
// So results match the CPU backend run with bf16-rounded weights and a bf16 KV cache up to the
// rounding of GEMM inputs (tests/cuda/model_test.cc states the tolerances).
//
// Batch invariance: every kernel computes a token's row from that row's inputs with an operation
// sequence independent of the batch (gemm.h, attention.h, ops.h), so a request's logits are bitwise
// identical alone and in any batch, under any chunking of its prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "deepinfer/status.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/state_cache.h"
#include "model/weights.h"

namespace deepinfer::backend::cuda {

struct CudaModelOptions {
  int num_slots = 1;         // concurrent sequences (state slots)
  int num_blocks = 64;       // pages of block_size positions
  int block_size = 0;        // 0: model::default_block_size
  int max_step_tokens = 8192;  // most tokens one forward() may carry (sizes the activation buffers)
  // Longest sequence (positions): bounds the row lists of padded decode steps. 0: the smaller of the
  // pages' capacity (num_blocks * block_size) and the config's max_position_embeddings.
  int max_model_len = 0;
  int max_logit_rows = 256;    // most logits rows one forward() may return
  // Decode steps (every sequence one token, last-row logits) of up to max_graph_batch sequences run
  // as a CUDA graph per batch size: recorded on the second step of that size, replayed after, with
  // launch parameters padded to fixed bounds so one graph serves every step of that size.
  bool cuda_graphs = true;
  int max_graph_batch = 256;
  // KV rows and indexer keys in the state cache: bfloat16, or fp8 (FP8 KV rows + FP4 indexer keys,
  // model/kv_format.h, byte for byte the CPU backend's layout). float32 is CPU-only.
  model::KvCacheDtype kv_cache_dtype = model::KvCacheDtype::kBF16;
  // Release numerics: projections whose checkpoint weight was FP8 run on the FP8 tensor cores
  // (fp8_gemm.h `tma`: e4m3 codes + one power-of-two scale per 128 x 128 block, activations
  // quantized per 128 values) instead of bf16 GEMMs on FP8-rounded inputs. Same products, another
  // summation (the tensor core's within each block); half the weight bytes. Off: the bf16 path.
  bool fp8_gemm = false;
  // Exact-numerics steps of at most kBranchMaxRows tokens (cuda_model_impl.h) run the chains of a
  // layer that do not feed each other at once, on side streams (a forked CUDA graph when
  // recorded): the KV head and its compressor, the indexer's key compressor and the indexer's
  // queries and top-k, each beside the query path and each other; the shared expert
  // beside the routed ones, the ring store beside the output projection. The same kernels on the
  // same data: bitwise the results of one stream. At one token most of those kernels are a few
  // microseconds of latency each, so the shorter chain hides behind the longer. Off: one stream.
  bool concurrent_branches = true;
  // Each mHC boundary inside the layer stack (a block's post, then the next block's pre) runs its
  // post and the next pre's dot products as one pass over the residual streams (ops.h hc_post_pre:
  // X read and written once instead of read twice and written once; one launch less a boundary).
  // Bitwise the results of the separate passes. Off until measured on a GPU against them.
  bool mhc_one_pass = false;
};

// A logits row's greedy token, computed on the GPU (ops.h greedy_rows): argmax (lowest id on ties)
// and its raw log-probability.
struct GreedyToken {
  int32_t token = 0;
  float logprob = 0.0f;
};

// An input token produced on the device by the previous submitted step: the token at flat index
// `index` of the batch (chunks in order) is that step's greedy row `row`.
struct DeferredToken {
  int32_t index = 0;
  int32_t row = 0;
};

class CudaModel {
 public:
  // Uploads `weights` (converted to bf16) and allocates the state cache (zeroed) and the
  // activation buffers. Errors: no CUDA device, not enough device memory, a numerics mode or
  // config this backend does not implement yet (named).
  static Result<std::unique_ptr<CudaModel>> create(const model::ModelConfig& config,
                                                   const model::ModelWeights& weights, model::Numerics numerics,
                                                   const CudaModelOptions& options);
  // Same, with deterministic random weights generated on the device (uniform, scaled by
  // 1/sqrt(fan-in); norms 1): for benchmarks at sizes whose host copy would not be worth making.
  static Result<std::unique_ptr<CudaModel>> create_random(const model::ModelConfig& config, uint64_t seed,
                                                          const CudaModelOptions& options);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  // One step (model::DeepSeekV4::forward's contract and errors). Synchronous: returns when the
  // outputs are on the host. `logits` (may be null: not copied to the host) gets the logits rows;
  // `greedy` (may be null) gets each logits row's greedy token, computed on the GPU, so a greedy
  // decode step moves 8 bytes per sequence to the host instead of a vocabulary row.
  Status forward(std::span<const model::SeqChunk> batch, std::vector<float>* logits,
                 std::vector<GreedyToken>* greedy = nullptr);

  // Asynchronous greedy steps (the engine's device overlap). submit_greedy enqueues a step that
  // computes each logits row's greedy token and returns without waiting; `deferred` names input
  // tokens that are greedy rows of the previous submitted step (their values in `batch` are
  // ignored; they never visit the host). collect_greedy waits for the oldest submitted step and
  // returns its rows. At most two steps are submitted and not collected; forward() needs none.
  // Errors: forward()'s, a deferred index or row out of range or without a previous greedy step,
  // too many steps in flight; a device error of a step comes back from its collect_greedy.
  Status submit_greedy(std::span<const model::SeqChunk> batch, std::span<const DeferredToken> deferred);
  Status collect_greedy(std::vector<GreedyToken>* greedy);

  // Zeroes one slot (a new sequence reuses it). Pages need no clearing: rows are written before read.
  void reset_slot(int slot);

  const model::ModelConfig& config() const;
  const model::StateCacheShape& cache_shape() const;
  size_t weight_bytes() const;  // device bytes of the weights
  // Decode steps that ran as a CUDA graph replay so far (observability, tests).
  uint64_t graph_replays() const;
  // Steps that forked their layers' projection chains (CudaModelOptions::concurrent_branches; only
  // where a layer's projections form gemm_split sets) so far, graph replays included
  // (observability, tests).
  uint64_t branched_steps() const;
  // mHC boundaries enqueued as one pass (CudaModelOptions::mhc_one_pass, ops.h hc_post_pre) so far,
  // all of them and those whose new streams went to the other buffer (steps of <= 64 tokens): eager
  // steps and graph captures, not replays (observability, tests).
  uint64_t one_pass_boundaries() const;
  uint64_t one_pass_out_of_place_boundaries() const;

  // Diagnostics, model::DeepSeekV4::set_tap's contract on the GPU: when set, forward() runs eagerly
  // (no graphs) and hands the tap, on the host and as fp32, the step's "L{l}.attn_in" [T, D],
  // "L{l}.attn_out", "L{l}.h_mid" [T, hc, D], "L{l}.ffn_in", "L{l}.ffn_out" and "L{l}.h_out", and
  // inside the blocks "qr", "q", "kv", "iq", "iw", "isel", "o" (before the inverse RoPE), "zo",
  // "moe_w", "moe_i" (as the CPU names them; index lists are observation only), each
  // at the point where the CPU taps it; what the tap leaves in the buffer goes back to the device
  // (converted to the tensor's device type: bf16 for attn_in / ffn_in), so a test can feed an
  // outside reference's activations in. Synchronizes at every tap; for tests only.
  using Tap = model::DeepSeekV4::Tap;
  void set_tap(Tap tap);

  struct Impl;

 private:
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::backend::cuda
