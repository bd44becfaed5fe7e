// Private to the CUDA model (cuda_model.cu: the forward and the step; cuda_model_weights.cu:
// weight buffers, upload, random weights): the device-side layout of the model and its Impl.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_model.h"
#include "backend/cuda/v4_kernels.h"
#include "model/numerics.h"

namespace deepinfer::backend::cuda {

using model::AttentionKind;
using model::ModelConfig;
using model::SeqChunk;

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status::internal(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")");
}
#define DI_CUDA_RETURN(expr) DI_RETURN_IF_ERROR(cuda_status((expr), #expr))

// Owns device allocations; frees them all on destruction.
class DeviceArena {
 public:
  ~DeviceArena() {
    for (void* p : ptrs_) cudaFree(p);
  }
  template <typename T>
  Status alloc(T** out, size_t count) {
    *out = nullptr;
    if (count == 0) return Status::ok();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, count * sizeof(T));
    if (e != cudaSuccess)
      return Status::internal("cannot allocate " + std::to_string(count * sizeof(T)) + " bytes of device memory: " +
                              cudaGetErrorString(e));
    ptrs_.push_back(p);
    bytes_ += count * sizeof(T);
    *out = static_cast<T*>(p);
    return Status::ok();
  }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<void*> ptrs_;
  size_t bytes_ = 0;
};

struct DevMatrix {
  bf16* w = nullptr;
  int rows = 0, cols = 0;
  bool quantized = false;  // FP8/FP4 in the checkpoint: release numerics quantize its input to FP8
  // FP8 form for the FP8 tensor cores (CudaModelOptions::fp8_gemm): e4m3 codes [rows, cols] and
  // scales [ceil(rows / 128), cols / 128]; null when the bf16 path runs this projection.
  uint8_t* fp8 = nullptr;
  float* fp8_scales = nullptr;
};

struct DevCompressor {
  DevMatrix wkv_gate;  // [2 * width, hidden]: wkv rows, then wgate rows
  float* ape = nullptr;
  float* norm = nullptr;
  int ratio = 0, head = 0, width = 0;
  bool overlap = false;
};

struct DevHyperConn {
  float* fn = nullptr;  // fp32 [(2 + hc) * hc, hc * hidden] (or [hc, hc * hidden] for the head)
  float* base = nullptr;
  float* scale = nullptr;
};

// Steps of at most this many tokens run a layer's same-input projections as one gemm_split
// (DevLayer::attn_in). H100, v4-mid, A/B inside one call, each variant with the same GEMM library:
// all three sets split against none, batch 1 -4.6%, batch 64 -2.5%; the q up-projections (wq_b +
// the indexer's wq_b) gained nothing at any batch and cost 2.4% at batch 256, so they stay apart;
// at a 4k prefill every set cost 0.3-1.2% (separate calls already fill the GPU there).
constexpr int kSplitMaxRows = 256;
// Steps of at most this many tokens fork the layer's independent chains onto the side stream
// (CudaModelOptions::concurrent_branches); only with the gemm_split forms (whose one launch makes
// every input of both chains). Larger steps fill the GPU with each kernel already.
constexpr int kBranchMaxRows = 64;
// With the mHC one pass (CudaModelOptions::mhc_one_pass), steps of at most this many tokens write
// each boundary's new streams to the other of X / X_alt (hc_post_pre out of place: hc times the CTAs,
// each stream's lanes reading the old streams from L2), larger ones update X in place. Not measured.
constexpr int kOnePassOutOfPlaceMaxRows = 64;

struct DevLayer {
  DevHyperConn hc_attn, hc_ffn;
  float *attn_norm = nullptr, *ffn_norm = nullptr;
  DevMatrix wq_a, wq_b, wkv, wo_b;
  float *q_norm = nullptr, *kv_norm = nullptr, *sinks = nullptr;
  std::vector<DevMatrix> wo_a;  // o_groups x [o_lora, heads * head_dim / o_groups], back to back from wo_a[0].w
  bool has_compressor = false, has_indexer = false;
  DevCompressor compressor, index_compressor;
  DevMatrix index_wq_b, index_weights_proj;
  DevMatrix gate;
  float* gate_bias = nullptr;
  int32_t* tid2eid = nullptr;
  // Per expert: [2 * inter, hidden] (w1 rows then w3 rows) and [hidden, inter], each kind stored back
  // to back from w13[0].w / w2[0].w (grouped_gemm_stacked: one TMA descriptor covers every expert).
  std::vector<DevMatrix> w13, w2;
  // w13's w1 and w3 rows interleaved in blocks of kGateUpBlock (swiglu.cuh; where inter is a multiple
  // of it): the routed experts' SwiGLU then runs in the w13 GEMM's epilogue
  // (grouped_gemm_stacked_swiglu), or reads the interleaved columns (swiglu(..., true)).
  bool w13_interleaved = false;
  DevMatrix shared_w13, shared_w2;
  // The projections of the attention block's normed rows stored back to back from attn_in: wq_a,
  // wkv, then (if present) compressor.wkv_gate, index_compressor.wkv_gate, index_weights_proj; and
  // the MoE block's from ffn_in: shared_w13, then gate. Where *_split (gemm_split's layout rules
  // hold and it gives each projection's own bits, gemm.h), exact numerics run a set as one
  // gemm_split at steps of at most kSplitMaxRows tokens: one launch streams them all (at one token
  // five small projections otherwise cost five launches' latency); larger steps run them apart.
  bf16* attn_in = nullptr;
  bf16* ffn_in = nullptr;
  bool attn_in_split = false, ffn_in_split = false;
};

// Where the step's metadata sits inside the packed buffer (byte offsets).
struct MetaLayout {
  size_t bytes = 0;
  size_t add(size_t n) {
    const size_t at = (bytes + 255) / 256 * 256;
    bytes = at + n;
    return at;
  }
};

// Per (attention kind, ratio): the step's attention row counts.
struct RowPlan {
  std::vector<int> row_begin;  // [T + 1]
  int max_rows = 0;
  size_t off = 0;
};
// Per compression ratio: rows that close in this step, and the compressor bookkeeping.
struct CompressPlan {
  std::vector<NewRow> rows;
  std::vector<int64_t> row_pos;    // first position of each new row's window (its RoPE position)
  std::vector<int32_t> closed_seqs;
  std::vector<int32_t> open_tokens;
  std::vector<int> key_seq_begin;  // [S]: the sequence's first key pointer (indexer)
  std::vector<int> key_begin, num_keys;  // [T]
  int total_keys = 0, max_keys = 0, max_keys_per_seq = 0;
  size_t off_rows = 0, off_pos = 0, off_closed = 0, off_open = 0, off_kseq = 0, off_kbegin = 0, off_nkeys = 0;
};


struct CudaModel::Impl {
  ModelConfig config;
  model::StateCacheShape shape;
  CudaModelOptions opt;
  bool release = false;  // release numerics (model/numerics.h), else exact
  int max_model_len = 0;
  cudaStream_t stream = nullptr;
  // The side streams of concurrent_branches (highest priority: their chains are the longer ones,
  // and their small kernels should take SMs as soon as the main chain's GEMM frees any): [0] the KV
  // head and compressor (and the shared expert, the ring store), [1] the indexer's key compressor,
  // [2] the indexer's queries, scores and top-k. fork_event forks them from `stream`; side_done[k]
  // marks side stream k's work so far (joins, and one side stream waiting for another);
  // handoff_event passes qr_bf from `stream` to [2].
  static constexpr int kSideStreams = 3;
  cudaStream_t side[kSideStreams] = {};
  cudaEvent_t side_done[kSideStreams] = {};
  cudaEvent_t fork_event = nullptr, handoff_event = nullptr;
  DeviceArena weights_arena, cache_arena, work_arena;

  // Weights.
  bf16* embed_table = nullptr;
  DevMatrix head;
  float* final_norm = nullptr;
  DevHyperConn head_mix;
  std::vector<DevLayer> layers;
  float *rope_main = nullptr, *rope_compress = nullptr;
  float rope_main_factor = 1.0f, rope_compress_factor = 1.0f;

  // State cache.
  uint8_t *slots = nullptr, *pages = nullptr;

  // Activations, sized for opt.max_step_tokens tokens.
  float *X = nullptr, *collapsed = nullptr, *post = nullptr, *comb = nullptr, *sub_out = nullptr;
  float* X_alt = nullptr;  // mhc_one_pass: X's twin for steps of <= kOnePassOutOfPlaceMaxRows tokens
  bf16* normed = nullptr;
  bf16* xq = nullptr;  // release: a GEMM input rounded through FP8 (blocks of 128)
  uint8_t* act_fp8 = nullptr;  // fp8_gemm: a GEMM input as e4m3 codes [T, K] ...
  float* act_fp8_scales = nullptr;  // ... and its per-128 scales [T, K / 128]
  float *qr = nullptr, *q = nullptr, *kv = nullptr, *o = nullptr;
  bf16 *qr_bf = nullptr, *q_bf = nullptr, *kv_bf = nullptr, *og = nullptr, *zo_bf = nullptr;
  float *comp_ab = nullptr, *comp_ab_index = nullptr, *fresh = nullptr;  // compressor, indexer compressor
  float* fresh_index = nullptr;  // the indexer compressor's new rows (fresh is the KV compressor's)
  float *qi = nullptr, *wts = nullptr, *scores = nullptr;
  bf16* qi_bf = nullptr;
  int* selected = nullptr;
  const void** rows = nullptr;  // attention rows (bf16 or FP8 KV rows)
  const void** keys = nullptr;  // indexer keys (bf16 or FP4)
  uint8_t* kv8 = nullptr;       // fp8 cache: the chunk's own KV rows, encoded [T, kv row bytes]
  uint8_t** fresh_ptrs = nullptr;  // fp8 cache: page addresses of the step's new compressed rows
  uint8_t** fresh_ptrs_index = nullptr;  // ... of the new indexer keys
  size_t fresh_ptrs_capacity = 0, fresh_ptrs_index_capacity = 0, fresh_index_capacity = 0;
  size_t rows_capacity = 0, keys_capacity = 0, scores_capacity = 0, fresh_rows_capacity = 0;
  void* attn_ws = nullptr;
  void* topk_ws = nullptr;
  float* hc_ws = nullptr;  // mHC partial dot products (ops.h hc_workspace_bytes)
  size_t attn_ws_bytes = 0, topk_ws_bytes = 0;
  float *gate_logits = nullptr, *route_w = nullptr, *perm_w = nullptr, *gu = nullptr, *y = nullptr, *ys = nullptr,
        *gu_s = nullptr;
  int *route_sel = nullptr, *offsets = nullptr, *perm_token = nullptr, *row_of = nullptr;
  bf16 *xin = nullptr, *h = nullptr, *h_s = nullptr;
  float *head_in = nullptr, *logits = nullptr;
  bf16* head_in_bf = nullptr;

  // Step metadata: packed on the host (pinned), one copy to the device. Two host buffers, used by
  // alternate steps (`parity`): a step may be packed while the previous one's copy is pending;
  // meta_sent[p] marks when buffer p's last copy has been made.
  uint8_t* meta_host[2] = {nullptr, nullptr};
  cudaEvent_t meta_sent[2] = {nullptr, nullptr};
  uint8_t* meta_dev = nullptr;
  size_t meta_capacity = 0;
  float* logits_host = nullptr;  // pinned [max_logit_rows, vocab]
  int32_t* greedy_tok = nullptr;  // [max_logit_rows]
  float* greedy_lp = nullptr;     // [max_logit_rows]
  float* greedy_ws = nullptr;     // greedy_rows' per-part partials
  // pinned, per parity: [max_logit_rows] token ids, then [max_logit_rows] log-probs
  GreedyToken* greedy_host = nullptr;
  cudaEvent_t step_done[2] = {nullptr, nullptr};  // the step of that parity's outputs are on the host
  // Submitted, not yet collected asynchronous steps (submit_greedy), oldest first.
  struct InFlight {
    int parity = 0;
    int rows = 0;
  };
  std::deque<InFlight> in_flight;
  int next_parity = 0;
  int prev_greedy_rows = -1;  // greedy rows of the previous launched step (-1: it computed none)

  // CUDA graphs of decode steps, per batch size. A graph bakes in buffer addresses: any
  // reallocation bumps `epoch`, which retires the graphs recorded before it.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t epoch = 0;
    size_t meta_bytes = 0;
    bool warmed = false;  // one eager step of this size ran (kernels loaded, attributes set)
  };
  std::map<std::tuple<int, int64_t, int>, Graph> graphs;  // (batch size, context bucket, outputs wanted)
  uint64_t epoch = 1;
  bool graphs_broken = false;  // a capture failed once: run eagerly from then on
  uint64_t replays = 0;
  uint64_t branched = 0;  // steps that forked (branched_steps)
  uint64_t in_place_count = 0, out_of_place_count = 0;  // one-pass boundaries (one_pass_boundaries)
  CudaModel::Tap tap;  // diagnostics (CudaModel::set_tap)

  ~Impl() {
    for (auto& [b, g] : graphs)
      if (g.exec) cudaGraphExecDestroy(g.exec);
    for (int p = 0; p < 2; ++p) {
      if (meta_host[p]) cudaFreeHost(meta_host[p]);
      if (meta_sent[p]) cudaEventDestroy(meta_sent[p]);
      if (step_done[p]) cudaEventDestroy(step_done[p]);
    }
    if (logits_host) cudaFreeHost(logits_host);
    // The step-sized work buffers (ensure_capacity; the arenas free the rest).
    for (void* p : {static_cast<void*>(meta_dev), static_cast<void*>(rows), static_cast<void*>(keys),
                    static_cast<void*>(fresh_ptrs), static_cast<void*>(scores), static_cast<void*>(fresh), attn_ws,
                    topk_ws, static_cast<void*>(fresh_index), static_cast<void*>(fresh_ptrs_index)})
      if (p) cudaFree(p);
    if (greedy_host) cudaFreeHost(greedy_host);
    if (stream) cudaStreamDestroy(stream);
    for (int k = 0; k < kSideStreams; ++k) {
      if (side[k]) cudaStreamDestroy(side[k]);
      if (side_done[k]) cudaEventDestroy(side_done[k]);
    }
    for (cudaEvent_t e : {fork_event, handoff_event})
      if (e) cudaEventDestroy(e);
  }

  Status allocate();
  Status upload(const model::ModelWeights& w);
  // CudaModelOptions::fp8_gemm: the FP8 forms of the FP8-checkpoint projections (after upload).
  Status upload_fp8_forms(const model::ModelWeights& w);
  Status randomize(uint64_t seed);
  Status allocate_cache_and_work();
  Status forward(std::span<const SeqChunk> batch, std::vector<float>* logits_out, std::vector<GreedyToken>* greedy_out);
  // Enqueues one step with outputs for parity `parity` (logits to logits_host, greedy rows to
  // greedy_host's half) and records step_done[parity]; waits for nothing.
  Status launch(std::span<const SeqChunk> batch, std::span<const DeferredToken> deferred, bool want_logits,
                bool want_greedy, int parity, int* rows_out);
  Status ensure_meta(size_t bytes);
  Status ensure_capacity(void** ptr, size_t* capacity, size_t bytes);

  template <typename T>
  T* meta_ptr(size_t off) const {
    return reinterpret_cast<T*>(meta_dev + off);
  }
};

}  // namespace deepinfer::backend::cuda
