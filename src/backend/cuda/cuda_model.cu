// CudaModel: the device state cache and the V4 forward as a sequence of kernel launches on one
// stream (the weight buffers, their upload and random weights: cuda_model_weights.cu; the layout
// both share: cuda_model_impl.h). The order of operations mirrors model::DeepSeekV4::forward (exact
// numerics) step for step; comments name the CPU function each block corresponds to.
//
// Per step the host does only bookkeeping that depends on positions (row counts, new compressed
// rows, open-window tokens, ring stores); it packs all of it into one pinned buffer and sends it with
// one copy. Everything that depends on activations (routing, top-k selection, row pointer lists)
// is computed on the GPU, so the host never waits inside a step.

#include "backend/cuda/cuda_model.h"
#include "backend/cuda/cuda_model_impl.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kv_fp8.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/release_kernels.h"
#include "backend/cuda/v4_kernels.h"
#include "model/numerics.h"

namespace deepinfer::backend::cuda {

namespace {

// Every kernel-to-kernel edge of a captured step becomes programmatic (pdl.cuh): the downstream
// kernel may be scheduled once every block of the upstream one has started (and run its
// pdl_prologue), and waits in its own prologue for the upstream kernel's completion and memory.
// Edges from or to other nodes (copies) stay full dependencies. False if the graph could not be
// rewritten (then it must not be used).
bool make_kernel_edges_programmatic(cudaGraph_t graph) {
  size_t n = 0;
  if (cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n) != cudaSuccess) return false;
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n > 0 && cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n) != cudaSuccess) return false;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType a, b;
    if (cudaGraphNodeGetType(from[i], &a) != cudaSuccess || cudaGraphNodeGetType(to[i], &b) != cudaSuccess) return false;
    if (a != cudaGraphNodeTypeKernel || b != cudaGraphNodeTypeKernel || data[i].type != cudaGraphDependencyTypeDefault)
      continue;
    cudaGraphEdgeData programmatic = {};
    programmatic.from_port = cudaGraphKernelNodePortProgrammatic;
    programmatic.type = cudaGraphDependencyTypeProgrammatic;
    if (cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1) != cudaSuccess) return false;
    if (cudaGraphAddDependencies(graph, &from[i], &to[i], &programmatic, 1) != cudaSuccess) return false;
  }
  return true;
}

}  // namespace

Status CudaModel::Impl::allocate_cache_and_work() {
  const ModelConfig& c = config;
  if (shape.kv_row.dtype == model::KvCacheDtype::kF32)
    return Status::unsupported("the CUDA backend stores KV rows as bfloat16 or fp8, not float32");
  DI_RETURN_IF_ERROR(cache_arena.alloc(&slots, static_cast<size_t>(opt.num_slots) * shape.slot_bytes));
  DI_RETURN_IF_ERROR(cache_arena.alloc(&pages, static_cast<size_t>(opt.num_blocks) * shape.page_bytes));
  if (slots) DI_CUDA_RETURN(cudaMemset(slots, 0, static_cast<size_t>(opt.num_slots) * shape.slot_bytes));
  if (pages) DI_CUDA_RETURN(cudaMemset(pages, 0, static_cast<size_t>(opt.num_blocks) * shape.page_bytes));

  DeviceArena& A = work_arena;
  const size_t T = static_cast<size_t>(opt.max_step_tokens);
  const size_t D = c.hidden_size, hc = c.hc_mult, hd = c.head_dim, H = c.num_heads;
  const size_t K = c.num_experts_per_tok, inter = c.moe_intermediate_size, inter_s = c.shared_intermediate();
  const size_t G = c.o_groups, R = c.o_lora_rank, nI = std::max(c.index_n_heads, 1), ih = std::max(c.index_head_dim, 1);
  DI_RETURN_IF_ERROR(A.alloc(&X, T * hc * D));
  if (opt.mhc_one_pass)
    DI_RETURN_IF_ERROR(A.alloc(&X_alt, std::min<size_t>(T, kOnePassOutOfPlaceMaxRows) * hc * D));
  DI_RETURN_IF_ERROR(A.alloc(&collapsed, T * D));
  DI_RETURN_IF_ERROR(A.alloc(&post, T * hc));
  DI_RETURN_IF_ERROR(A.alloc(&comb, T * hc * hc));
  DI_RETURN_IF_ERROR(A.alloc(&hc_ws, hc_workspace_bytes(static_cast<int>(std::max<size_t>(T, opt.max_logit_rows)),
                                                        c.hc_mult, c.hidden_size, false) / sizeof(float)));
  DI_RETURN_IF_ERROR(A.alloc(&sub_out, T * D));
  DI_RETURN_IF_ERROR(A.alloc(&normed, T * D));
  const size_t max_k = std::max({D, G * R, static_cast<size_t>(c.q_lora_rank), inter_s});
  DI_RETURN_IF_ERROR(A.alloc(&xq, T * max_k));
  if (opt.fp8_gemm) {
    DI_RETURN_IF_ERROR(A.alloc(&act_fp8, T * max_k));
    DI_RETURN_IF_ERROR(A.alloc(&act_fp8_scales, T * ((max_k + 127) / 128)));
  }
  DI_RETURN_IF_ERROR(A.alloc(&qr, T * c.q_lora_rank));
  DI_RETURN_IF_ERROR(A.alloc(&qr_bf, T * c.q_lora_rank));
  DI_RETURN_IF_ERROR(A.alloc(&q, T * H * hd));
  DI_RETURN_IF_ERROR(A.alloc(&q_bf, T * H * hd));
  DI_RETURN_IF_ERROR(A.alloc(&kv, T * hd));
  DI_RETURN_IF_ERROR(A.alloc(&kv_bf, T * hd));
  if (shape.kv_row.dtype == model::KvCacheDtype::kFP8) DI_RETURN_IF_ERROR(A.alloc(&kv8, T * shape.kv_row.bytes()));
  DI_RETURN_IF_ERROR(A.alloc(&o, T * H * hd));
  DI_RETURN_IF_ERROR(A.alloc(&og, T * H * hd));
  DI_RETURN_IF_ERROR(A.alloc(&zo_bf, T * G * R));
  DI_RETURN_IF_ERROR(A.alloc(&comp_ab, T * 4 * hd));
  DI_RETURN_IF_ERROR(A.alloc(&comp_ab_index, T * 4 * ih));
  DI_RETURN_IF_ERROR(A.alloc(&qi, T * nI * ih));
  DI_RETURN_IF_ERROR(A.alloc(&qi_bf, T * nI * ih));
  DI_RETURN_IF_ERROR(A.alloc(&wts, T * nI));
  DI_RETURN_IF_ERROR(A.alloc(&selected, T * std::max(c.index_topk, 1)));
  DI_RETURN_IF_ERROR(A.alloc(&gate_logits, T * c.n_routed_experts));
  DI_RETURN_IF_ERROR(A.alloc(&route_sel, T * K));
  DI_RETURN_IF_ERROR(A.alloc(&route_w, T * K));
  DI_RETURN_IF_ERROR(A.alloc(&offsets, static_cast<size_t>(c.n_routed_experts) + 1));
  DI_RETURN_IF_ERROR(A.alloc(&perm_token, T * K));
  DI_RETURN_IF_ERROR(A.alloc(&perm_w, T * K));
  DI_RETURN_IF_ERROR(A.alloc(&row_of, T * K));
  DI_RETURN_IF_ERROR(A.alloc(&xin, T * K * D));
  DI_RETURN_IF_ERROR(A.alloc(&gu, T * K * 2 * inter));
  DI_RETURN_IF_ERROR(A.alloc(&h, T * K * inter));
  DI_RETURN_IF_ERROR(A.alloc(&y, T * K * D));
  DI_RETURN_IF_ERROR(A.alloc(&gu_s, T * 2 * inter_s));
  DI_RETURN_IF_ERROR(A.alloc(&h_s, T * inter_s));
  DI_RETURN_IF_ERROR(A.alloc(&ys, T * D));
  const size_t LR = static_cast<size_t>(opt.max_logit_rows);
  DI_RETURN_IF_ERROR(A.alloc(&head_in, LR * D));
  DI_RETURN_IF_ERROR(A.alloc(&head_in_bf, LR * D));
  DI_RETURN_IF_ERROR(A.alloc(&logits, LR * c.vocab_size));
  DI_CUDA_RETURN(cudaMallocHost(&logits_host, LR * c.vocab_size * sizeof(float)));
  DI_RETURN_IF_ERROR(A.alloc(&greedy_tok, LR));
  DI_RETURN_IF_ERROR(A.alloc(&greedy_lp, LR));
  DI_RETURN_IF_ERROR(A.alloc(&greedy_ws, greedy_workspace_bytes(static_cast<int>(LR), c.vocab_size) / sizeof(float)));
  DI_CUDA_RETURN(cudaMallocHost(&greedy_host, 2 * LR * 2 * sizeof(float)));
  for (int p = 0; p < 2; ++p) {
    DI_CUDA_RETURN(cudaEventCreateWithFlags(&meta_sent[p], cudaEventDisableTiming));
    DI_CUDA_RETURN(cudaEventCreateWithFlags(&step_done[p], cudaEventDisableTiming));
  }
  DI_CUDA_RETURN(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int least = 0, greatest = 0;
  DI_CUDA_RETURN(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  for (int k = 0; k < kSideStreams; ++k) {
    DI_CUDA_RETURN(cudaStreamCreateWithPriority(&side[k], cudaStreamNonBlocking, greatest));
    DI_CUDA_RETURN(cudaEventCreateWithFlags(&side_done[k], cudaEventDisableTiming));
  }
  for (cudaEvent_t* e : {&fork_event, &handoff_event})
    DI_CUDA_RETURN(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  return Status::ok();
}

Status CudaModel::Impl::ensure_meta(size_t bytes) {
  if (bytes <= meta_capacity && meta_host[0] && meta_host[1]) return Status::ok();
  void* d = meta_dev;
  DI_RETURN_IF_ERROR(ensure_capacity(&d, &meta_capacity, bytes));  // synchronizes: the old host copies are idle
  meta_dev = static_cast<uint8_t*>(d);
  for (uint8_t*& h : meta_host) {
    if (h) cudaFreeHost(h);
    h = nullptr;
    DI_CUDA_RETURN(cudaMallocHost(&h, meta_capacity));  // same size as the device copy
  }
  return Status::ok();
}

// Grows a work buffer (step-dependent sizes: row lists, scores). The old buffer is freed only
// after the stream has drained, since earlier launches may still read it.
Status CudaModel::Impl::ensure_capacity(void** ptr, size_t* capacity, size_t bytes) {
  if (bytes <= *capacity && *ptr) return Status::ok();
  ++epoch;
  DI_CUDA_RETURN(cudaStreamSynchronize(stream));
  if (*ptr) cudaFree(*ptr);
  *ptr = nullptr;
  *capacity = 0;
  const size_t cap = std::max<size_t>({bytes, 256, *capacity + *capacity / 2});  // headroom: fewer regrowths
  DI_CUDA_RETURN(cudaMalloc(ptr, cap));
  *capacity = cap;
  return Status::ok();
}

Status CudaModel::Impl::launch(std::span<const SeqChunk> batch, std::span<const DeferredToken> deferred,
                               bool want_logits, bool want_greedy, int parity, int* rows_out) {
  const ModelConfig& c = config;
  const cudaStream_t s = stream;
  const bool fp8_cache = shape.kv_row.dtype == model::KvCacheDtype::kFP8;
  // --- Validation (DeepSeekV4::forward's errors) and the flattened step.
  std::vector<int32_t> tokens, tok_seq;
  std::vector<int64_t> pos;
  std::vector<SeqMeta> seqs;
  std::vector<int32_t> block_tables;
  std::vector<int32_t> logit_rows;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqChunk& q = batch[i];
    DI_RETURN_IF_ERROR(model::check_seq_chunk(q, i, c, shape, opt.num_slots, opt.num_blocks));
    const int64_t end = q.start + static_cast<int64_t>(q.tokens.size());
    if (end > max_model_len)
      return Status::invalid_argument("sequence " + std::to_string(i) + " of the batch reaches position " +
                                      std::to_string(end) + ", beyond the CUDA backend's max_model_len " +
                                      std::to_string(max_model_len));
    SeqMeta sm{q.start, static_cast<int32_t>(tokens.size()), static_cast<int32_t>(q.tokens.size()), q.slot,
               static_cast<int32_t>(block_tables.size())};
    seqs.push_back(sm);
    block_tables.insert(block_tables.end(), q.block_table.begin(), q.block_table.end());
    for (size_t t = 0; t < q.tokens.size(); ++t) {
      tokens.push_back(q.tokens[t]);
      tok_seq.push_back(static_cast<int32_t>(i));
      pos.push_back(q.start + static_cast<int64_t>(t));
    }
    const int b = sm.offset, e = sm.offset + sm.count;
    if (b < e && q.logits != model::LogitRows::kNone)
      for (int t = q.logits == model::LogitRows::kAll ? b : e - 1; t < e; ++t) logit_rows.push_back(t);
  }
  const int T = static_cast<int>(tokens.size()), S = static_cast<int>(seqs.size());
  const int NR = static_cast<int>(logit_rows.size());
  if (T > opt.max_step_tokens)
    return Status::invalid_argument("the step has " + std::to_string(T) + " tokens, more than the CUDA backend's " +
                                    "max_step_tokens " + std::to_string(opt.max_step_tokens));
  if (NR > opt.max_logit_rows)
    return Status::invalid_argument("the step asks for " + std::to_string(NR) + " logits rows, more than " +
                                    std::to_string(opt.max_logit_rows));
  for (size_t i = 0; i < deferred.size(); ++i) {
    if (deferred[i].index < 0 || deferred[i].index >= T)
      return Status::invalid_argument("deferred token " + std::to_string(i) + ": index " +
                                      std::to_string(deferred[i].index) + " outside the step's " + std::to_string(T) +
                                      " tokens");
    if (deferred[i].row < 0 || deferred[i].row >= prev_greedy_rows)
      return Status::invalid_argument("deferred token " + std::to_string(i) + ": row " + std::to_string(deferred[i].row) +
                                      (prev_greedy_rows < 0 ? std::string(", but the previous step computed no greedy rows")
                                                            : " beyond the previous step's " +
                                                                  std::to_string(prev_greedy_rows) + " greedy rows"));
  }
  *rows_out = NR;
  if (T == 0) {
    prev_greedy_rows = -1;
    DI_CUDA_RETURN(cudaEventRecord(step_done[parity], s));
    return Status::ok();
  }

  // A decode step (one token per sequence, last-row logits) runs with every list padded to a fixed
  // length and every grid sized from fixed bounds, so that a CUDA graph recorded once per batch
  // size replays for any positions. Kernels skip the padding (v4_kernels.h); bounds change which
  // CTA computes a value, never its arithmetic (attention.h), so padded and unpadded steps agree bit
  // for bit.
  bool padded = opt.cuda_graphs && !graphs_broken && S <= opt.max_graph_batch && !tap;
  for (size_t i = 0; i < batch.size() && padded; ++i)
    padded = batch[i].tokens.size() == 1 && batch[i].logits == model::LogitRows::kLast;
  const int max_pages = shape.page_bytes > 0 ? (max_model_len + shape.block_size - 1) / shape.block_size : 0;
  if (padded) {  // fixed-stride block tables
    block_tables.assign(static_cast<size_t>(S) * max_pages, 0);
    for (int i = 0; i < S; ++i) {
      const auto& bt = batch[i].block_table;
      std::copy(bt.begin(), bt.begin() + std::min<size_t>(bt.size(), max_pages), block_tables.begin() + i * max_pages);
      seqs[i].bt_begin = i * max_pages;
    }
  }
  // Longest compressed-row list a query can have, for fixed grids: from the batch's context bucket
  // (the next power of two >= its furthest position, at least 1024, at most max_model_len), so a
  // graph serves every step until a sequence crosses into the next bucket.
  int64_t furthest = 0;
  for (const SeqMeta& sm : seqs) furthest = std::max<int64_t>(furthest, sm.start + sm.count);
  int64_t bucket = 1024;
  while (bucket < furthest) bucket *= 2;
  bucket = std::min<int64_t>(bucket, max_model_len);
  auto bound_keys = [&](int ratio) { return std::max(1, static_cast<int>(bucket / ratio)); };

  // --- Position-only bookkeeping: row counts per attention kind, compressor rows per ratio.
  const int W = c.sliding_window;
  std::map<std::pair<int, int>, RowPlan> row_plans;  // (kind, ratio)
  std::map<int, CompressPlan> comp_plans;            // ratio
  for (int l = 0; l < c.num_layers; ++l) {
    const int kind = static_cast<int>(c.layer_kinds[l]), ratio = c.compress_ratio[l];
    row_plans[{kind, ratio}];
    if (ratio > 0) comp_plans[ratio];
  }
  for (auto& [key, rp] : row_plans) {
    const auto kind = static_cast<AttentionKind>(key.first);
    const int ratio = key.second;
    rp.row_begin.assign(static_cast<size_t>(T) + 1, 0);
    for (int t = 0; t < T; ++t) {
      const int64_t p = pos[t];
      int n = static_cast<int>(std::min<int64_t>(p + 1, W));
      if (kind == AttentionKind::kHca) n += static_cast<int>((p + 1) / ratio);
      if (kind == AttentionKind::kCsa) n += static_cast<int>(std::min<int64_t>((p + 1) / ratio, c.index_topk));
      rp.max_rows = std::max(rp.max_rows, n);
      rp.row_begin[t + 1] = rp.row_begin[t] + n;
    }
    if (padded)
      rp.max_rows = W + (kind == AttentionKind::kHca   ? bound_keys(ratio)
                         : kind == AttentionKind::kCsa ? std::min(bound_keys(ratio), c.index_topk)
                                                       : 0);
  }
  for (auto& [ratio, cp] : comp_plans) {
    cp.key_seq_begin.resize(S);
    for (int i = 0; i < S; ++i) {
      const SeqMeta& sm = seqs[i];
      const int64_t done = sm.start / ratio, after = (sm.start + sm.count) / ratio;
      for (int64_t r = done; r < after; ++r) {
        cp.rows.push_back(NewRow{i, static_cast<int32_t>(r)});
        cp.row_pos.push_back(r * ratio);
      }
      if (after > done) cp.closed_seqs.push_back(i);
      for (int t = sm.offset; t < sm.offset + sm.count; ++t)
        if (pos[t] >= after * ratio) cp.open_tokens.push_back(t);
      cp.key_seq_begin[i] = cp.total_keys;
      cp.total_keys += static_cast<int>(after);
      cp.max_keys_per_seq = std::max(cp.max_keys_per_seq, static_cast<int>(after));
    }
    cp.key_begin.resize(T);
    cp.num_keys.resize(T);
    for (int t = 0; t < T; ++t) {
      cp.key_begin[t] = cp.key_seq_begin[tok_seq[t]];
      cp.num_keys[t] = static_cast<int>((pos[t] + 1) / ratio);
      cp.max_keys = std::max(cp.max_keys, cp.num_keys[t]);
    }
    if (padded) {  // one token per sequence closes at most one row and leaves at most one open
      cp.rows.resize(S, NewRow{-1, 0});
      cp.row_pos.resize(S, 0);
      cp.closed_seqs.resize(S, -1);
      cp.open_tokens.resize(S, -1);
      cp.max_keys = cp.max_keys_per_seq = bound_keys(ratio);
      cp.total_keys = S * bound_keys(ratio);
    }
  }
  std::vector<int32_t> ring_tokens;  // each sequence's newest W tokens: stored in the ring after attention
  for (const SeqMeta& sm : seqs)
    for (int t = std::max(sm.offset, sm.offset + sm.count - W); t < sm.offset + sm.count; ++t) ring_tokens.push_back(t);

  // --- Pack and send the metadata.
  MetaLayout ml;
  const size_t off_tokens = ml.add(T * 4), off_seq = ml.add(T * 4), off_pos = ml.add(T * 8);
  const size_t off_seqs = ml.add(S * sizeof(SeqMeta)), off_bt = ml.add(block_tables.size() * 4);
  const size_t off_ring = ml.add(ring_tokens.size() * 4), off_lrows = ml.add(std::max(NR, 1) * 4);
  // Row offsets of the grouped output projection: group g owns rows [g T, (g + 1) T) of og.
  std::vector<int32_t> group_rows(static_cast<size_t>(c.o_groups) + 1);
  for (int g = 0; g <= c.o_groups; ++g) group_rows[g] = g * T;
  const size_t off_groups = ml.add(group_rows.size() * 4);
  for (auto& [key, rp] : row_plans) rp.off = ml.add((static_cast<size_t>(T) + 1) * 4);
  for (auto& [ratio, cp] : comp_plans) {
    cp.off_rows = ml.add(cp.rows.size() * sizeof(NewRow));
    cp.off_pos = ml.add(cp.row_pos.size() * 8);
    cp.off_closed = ml.add(cp.closed_seqs.size() * 4);
    cp.off_open = ml.add(cp.open_tokens.size() * 4);
    cp.off_kseq = ml.add(static_cast<size_t>(S) * 4);
    cp.off_kbegin = ml.add(static_cast<size_t>(T) * 4);
    cp.off_nkeys = ml.add(static_cast<size_t>(T) * 4);
  }
  // The graphs' kernels read everything above (its layout is part of what a graph bakes in); the
  // deferred-token pairs after it are read before the graph runs.
  const size_t graph_meta_bytes = ml.bytes;
  const size_t off_deferred = ml.add(deferred.size() * sizeof(DeferredToken));
  DI_RETURN_IF_ERROR(ensure_meta(ml.bytes));
  // This parity's host buffer is free once its previous copy (two steps ago) has been made.
  DI_CUDA_RETURN(cudaEventSynchronize(meta_sent[parity]));
  uint8_t* const mh = meta_host[parity];
  auto put = [&](size_t off, const void* src, size_t n) {
    if (n) std::memcpy(mh + off, src, n);
  };
  put(off_tokens, tokens.data(), T * 4);
  put(off_seq, tok_seq.data(), T * 4);
  put(off_pos, pos.data(), T * 8);
  put(off_seqs, seqs.data(), S * sizeof(SeqMeta));
  put(off_bt, block_tables.data(), block_tables.size() * 4);
  put(off_ring, ring_tokens.data(), ring_tokens.size() * 4);
  put(off_lrows, logit_rows.data(), NR * 4);
  put(off_groups, group_rows.data(), group_rows.size() * 4);
  put(off_deferred, deferred.data(), deferred.size() * sizeof(DeferredToken));
  for (auto& [key, rp] : row_plans) put(rp.off, rp.row_begin.data(), rp.row_begin.size() * 4);
  for (auto& [ratio, cp] : comp_plans) {
    put(cp.off_rows, cp.rows.data(), cp.rows.size() * sizeof(NewRow));
    put(cp.off_pos, cp.row_pos.data(), cp.row_pos.size() * 8);
    put(cp.off_closed, cp.closed_seqs.data(), cp.closed_seqs.size() * 4);
    put(cp.off_open, cp.open_tokens.data(), cp.open_tokens.size() * 4);
    put(cp.off_kseq, cp.key_seq_begin.data(), static_cast<size_t>(S) * 4);
    put(cp.off_kbegin, cp.key_begin.data(), static_cast<size_t>(T) * 4);
    put(cp.off_nkeys, cp.num_keys.data(), static_cast<size_t>(T) * 4);
  }
  // --- Step-sized work buffers.
  size_t max_rows_total = 0;
  int max_rows = 0;
  for (auto& [key, rp] : row_plans) {
    max_rows_total = std::max(max_rows_total, padded ? static_cast<size_t>(T) * rp.max_rows : static_cast<size_t>(rp.row_begin[T]));
    max_rows = std::max(max_rows, rp.max_rows);
  }
  size_t max_keys_total = 0, max_scores = 0, max_fresh = 0;
  int max_keys = 0;
  for (auto& [ratio, cp] : comp_plans) {
    max_keys_total = std::max(max_keys_total, static_cast<size_t>(cp.total_keys));
    max_scores = std::max(max_scores, static_cast<size_t>(T) * std::max(cp.max_keys, 1));
    max_keys = std::max(max_keys, cp.max_keys);
    max_fresh = std::max(max_fresh, cp.rows.size());
  }
  DI_RETURN_IF_ERROR(ensure_capacity(reinterpret_cast<void**>(&rows), &rows_capacity, max_rows_total * sizeof(void*)));
  DI_RETURN_IF_ERROR(ensure_capacity(reinterpret_cast<void**>(&keys), &keys_capacity, max_keys_total * sizeof(void*)));
  if (fp8_cache) {
    DI_RETURN_IF_ERROR(ensure_capacity(reinterpret_cast<void**>(&fresh_ptrs), &fresh_ptrs_capacity,
                                       std::max<size_t>(max_fresh, 1) * sizeof(uint8_t*)));
    DI_RETURN_IF_ERROR(ensure_capacity(reinterpret_cast<void**>(&fresh_ptrs_index), &fresh_ptrs_index_capacity,
                                       std::max<size_t>(max_fresh, 1) * sizeof(uint8_t*)));
  }
  DI_RETURN_IF_ERROR(ensure_capacity(reinterpret_cast<void**>(&scores), &scores_capacity, max_scores * sizeof(float)));
  DI_RETURN_IF_ERROR(ensure_capacity(reinterpret_cast<void**>(&fresh), &fresh_rows_capacity,
                                     std::max<size_t>(max_fresh, 1) * c.head_dim * sizeof(float)));
  if (c.index_topk > 0)
    DI_RETURN_IF_ERROR(ensure_capacity(reinterpret_cast<void**>(&fresh_index), &fresh_index_capacity,
                                       std::max<size_t>(max_fresh, 1) * std::max(c.index_head_dim, 1) * sizeof(float)));
  DI_RETURN_IF_ERROR(ensure_capacity(&attn_ws, &attn_ws_bytes,
                                     sink_attention_workspace_bytes(T, c.num_heads, c.head_dim, std::max(max_rows, 1))));
  if (c.index_topk > 0)
    DI_RETURN_IF_ERROR(ensure_capacity(&topk_ws, &topk_ws_bytes, topk_workspace_bytes(T, std::max(max_keys, 1), c.index_topk)));

  // Diagnostics (set_tap; never while recording a graph): the device tensor to the host as fp32,
  // through the tap, and back.
  Status tap_status = Status::ok();
  std::vector<float> tap_host;
  std::vector<bf16> tap_bf16;
  // (Each returns its first failure; tap_status keeps the step's first one.)
  auto tap_name = [](int layer, const char* what) {
    std::string name = std::to_string(layer);  // "L{layer}.{what}" (built in steps: GCC 12's
    name.insert(0, 1, 'L');                      // -Wrestrict misfires on the chained +)
    name.append(1, '.').append(what);
    return name;
  };
  auto tap_io = [&](int layer, const char* what, void* dev, size_t n, bool is_bf16) -> Status {
    const size_t bytes = n * (is_bf16 ? sizeof(bf16) : sizeof(float));
    tap_host.resize(n);
    if (is_bf16) tap_bf16.resize(n);
    void* host = is_bf16 ? static_cast<void*>(tap_bf16.data()) : static_cast<void*>(tap_host.data());
    DI_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s), "tap"));
    DI_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "tap"));
    if (is_bf16)
      for (size_t i = 0; i < n; ++i) tap_host[i] = __bfloat162float(tap_bf16[i]);
    tap(tap_name(layer, what), tap_host.data(), n);
    if (is_bf16)
      for (size_t i = 0; i < n; ++i) tap_bf16[i] = __float2bfloat16_rn(tap_host[i]);
    // On the step's stream and waited for: a plain cudaMemcpy from pageable memory may return before
    // its DMA lands, and the stream's next kernel (say the inverse RoPE after "o") would race it.
    DI_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s), "tap"));
    return cuda_status(cudaStreamSynchronize(s), "tap");
  };
  auto tap_f32 = [&](int layer, const char* what, float* dev, size_t n) {
    if (tap && tap_status.is_ok()) (void)(tap_status = tap_io(layer, what, dev, n, false));
  };
  auto tap_bf = [&](int layer, const char* what, bf16* dev, size_t n) {
    if (tap && tap_status.is_ok()) (void)(tap_status = tap_io(layer, what, dev, n, true));
  };
  // Index lists (observation only: the tap sees them as floats, nothing goes back).
  auto tap_ints = [&](int layer, const char* what, const int32_t* dev, size_t n) {
    if (!tap || !tap_status.is_ok()) return;
    std::vector<int32_t> ids(n);
    (void)(tap_status = cuda_status(cudaMemcpyAsync(ids.data(), dev, n * sizeof(int32_t), cudaMemcpyDeviceToHost, s), "tap"));
    if (tap_status.is_ok()) (void)(tap_status = cuda_status(cudaStreamSynchronize(s), "tap"));
    if (!tap_status.is_ok()) return;
    tap_host.assign(ids.begin(), ids.end());
    tap(tap_name(layer, what), tap_host.data(), n);
  };

  // Concurrent branches (CudaModelOptions::concurrent_branches; the forward below forks and joins).
  const bool branches = opt.concurrent_branches && !release && !tap && T <= kBranchMaxRows;

  // Everything from here to the logits copy is launches only (no allocation, no synchronization),
  // so it can be recorded into a CUDA graph.
  auto enqueue = [&]() {
  StepView st;
  st.T = T;
  st.S = S;
  st.tok_seq = meta_ptr<int32_t>(off_seq);
  st.pos = meta_ptr<int64_t>(off_pos);
  st.seqs = meta_ptr<SeqMeta>(off_seqs);
  st.block_tables = meta_ptr<int32_t>(off_bt);
  st.slots = slots;
  st.pages = pages;
  st.slot_bytes = shape.slot_bytes;
  st.page_bytes = shape.page_bytes;
  st.window = W;
  const int32_t* d_tokens = meta_ptr<int32_t>(off_tokens);

  // --- The forward (DeepSeekV4::forward).
  const int D = c.hidden_size, hc = c.hc_mult, H = c.num_heads, hd = c.head_dim, rd = c.rope_head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
  // Release numerics (DeepSeekV4's bf() and Lin::kQuantized): bf16 rounding where the official
  // code keeps bf16, FP8 rounding of the input of every GEMM whose weight was FP8/FP4.
  const bool rel = release;
  auto rb = [&](float* x, size_t n) {
    if (rel) round_bf16(x, n, s);
  };
  auto qin = [&](const bf16* x, int M, int K, const DevMatrix& W) -> const bf16* {
    if (!rel || !W.quantized) return x;
    fp8_round_trip_rows(x, M, K, xq, s);
    return xq;
  };
  // y = x W^T for a projection: on the FP8 tensor cores when W has its FP8 form (release numerics,
  // CudaModelOptions::fp8_gemm), else the bf16 GEMM on the FP8-rounded input (the same products).
  // x may be overwritten (the FP8 path leaves it alone; qin writes xq).
  // `on`: the stream of the chain it belongs to (release numerics never fork: its scratch xq and
  // act_fp8 serve every projection).
  auto proj = [&](const bf16* x, int M, int K, const DevMatrix& W, int N, float* y, cudaStream_t on) {
    if (rel && W.fp8 != nullptr) {
      fp8::quantize_fp8_rows(x, M, K, act_fp8, act_fp8_scales, on);
      if (fp8::tma::gemm_fp8(act_fp8, act_fp8_scales, M, K, W.fp8, W.fp8_scales, N, y, on)) return;
    }
    gemm(qin(x, M, K, W), M, K, W.w, N, y, on);
  };
  // Concurrent branches (CudaModelOptions::concurrent_branches): fork(n) starts side streams
  // 0..n-1 after everything enqueued on s so far; wait_side(on, k) makes stream `on` wait for side stream k's
  // work so far; join_all() makes s wait for every side stream. Each branch uses its own buffers.
  // Every fork is joined before the step's last kernel, so a recorded graph ends on s and a
  // synchronisation of s covers the side streams' work.
  bool side_open[kSideStreams] = {};
  auto fork = [&](int n) {
    cudaEventRecord(fork_event, s);
    for (int k = 0; k < n; ++k) {
      cudaStreamWaitEvent(side[k], fork_event, 0);
      side_open[k] = true;
    }
  };
  auto wait_side = [&](cudaStream_t on, int k) {
    if (!side_open[k] || on == side[k]) return;
    cudaEventRecord(side_done[k], side[k]);
    cudaStreamWaitEvent(on, side_done[k], 0);
  };
  auto join_all = [&]() {
    for (int k = 0; k < kSideStreams; ++k) {
      wait_side(s, k);
      side_open[k] = false;
    }
  };
  // The residual streams [T, hc, D]: X, or X_alt after an out-of-place one-pass boundary (below).
  float* Xs = X;
  embed(d_tokens, T, embed_table, D, hc, Xs, s);
  rb(Xs, static_cast<size_t>(T) * hc * D);
  // One pass (CudaModelOptions::mhc_one_pass): each mHC boundary inside the stack (a block's post,
  // the next block's pre) is one hc_post_pre, the post and the next pre's dot products in one pass
  // over the streams, unless a tap must see them between the two. attn_pre_done: the previous
  // layer's MoE post already ran this layer's attention pre. Steps of at most
  // kOnePassOutOfPlaceMaxRows tokens write each boundary's new streams to the other buffer.
  const bool one_pass = opt.mhc_one_pass && !tap;
  const bool out_of_place = one_pass && X_alt != nullptr && T <= kOnePassOutOfPlaceMaxRows;
  auto next_streams = [&]() { return out_of_place ? (Xs == X ? X_alt : X) : Xs; };
  bool attn_pre_done = false;
  for (int l = 0; l < c.num_layers; ++l) {
    const DevLayer& L = layers[l];
    const model::LayerCacheLayout& CL = shape.layers[l];
    const AttentionKind kind = c.layer_kinds[l];
    const int ratio = c.compress_ratio[l];
    const float* rope_t = kind == AttentionKind::kSliding ? rope_main : rope_compress;
    const float rope_f = kind == AttentionKind::kSliding ? rope_main_factor : rope_compress_factor;

    // Attention block: mHC pre, norm, attention (DeepSeekV4::attention), mHC post.
    // (+ (release) bf16 rounding of the collapsed rows and attn_norm into `normed`, fused where it can be)
    if (!attn_pre_done) {
      const HcNorm attn_norm{L.attn_norm, eps, rel, normed, true};
      hc_pre(Xs, T, hc, D, L.hc_attn.fn, L.hc_attn.base, L.hc_attn.scale, c.hc_sinkhorn_iters, hc_eps, eps, collapsed,
             post, comb, hc_ws, s, &attn_norm);
    }
    tap_bf(l, "attn_in", normed, static_cast<size_t>(T) * D);
    // Exact numerics: every projection of `normed` in one launch (DevLayer::attn_in). Release keeps
    // them apart: a quantized weight's input is FP8-rounded first, some run on the FP8 tensor cores.
    const bool split_in = !rel && L.attn_in_split && T <= kSplitMaxRows;
    if (split_in) {
      GemmOutput outs[5];
      int n = 0;
      outs[n++] = {qr, c.q_lora_rank};
      outs[n++] = {kv, hd};
      if (L.has_compressor) outs[n++] = {comp_ab, 2 * L.compressor.width};
      if (L.has_indexer) {
        outs[n++] = {comp_ab_index, 2 * L.index_compressor.width};
        outs[n++] = {wts, c.index_n_heads};
      }
      gemm_split(normed, T, D, L.attn_in, outs, n, s);
    }
    // Four chains from here to the attention when forked: the queries (s); the KV head and its
    // compressor (kv_s, side stream 0); the indexer's key compressor (ikey_s, 1); the indexer's
    // queries, scores and top-k (iq_s, 2), which need qr_bf from the first chain (handoff_event)
    // and the new keys from the third. The attention row lists follow the last chain to finish
    // its inputs. Unforked, all four are s in this order.
    const bool fork_attn = branches && split_in;
    const cudaStream_t kv_s = fork_attn ? side[0] : s;
    const cudaStream_t ikey_s = fork_attn && L.has_indexer ? side[1] : s;
    const cudaStream_t iq_s = fork_attn && L.has_indexer ? side[2] : s;
    if (fork_attn) fork(L.has_indexer ? 3 : 1);
    // Queries: low-rank q with q_norm, per-head RMS norm, RoPE.
    if (!split_in) proj(normed, T, D, L.wq_a, c.q_lora_rank, qr, s);
    rb(qr, static_cast<size_t>(T) * c.q_lora_rank);
    rms_norm(qr, T, c.q_lora_rank, L.q_norm, eps, nullptr, qr_bf, s);
    tap_bf(l, "qr", qr_bf, static_cast<size_t>(T) * c.q_lora_rank);
    if (fork_attn) cudaEventRecord(handoff_event, s);  // qr_bf, the indexer's queries' input
    proj(qr_bf, T, c.q_lora_rank, L.wq_b, H * hd, q, s);
    if (rel) {
      round_bf16(q, static_cast<size_t>(T) * H * hd, s);
      q_head_norm_release(q, T * H, hd, eps, s);
      rope(q, T, H, hd, st.pos, rope_t, rd, rope_f, false, s);
      to_bf16(q, static_cast<size_t>(T) * H * hd, q_bf, s);
    } else {  // norm, RoPE and the bf16 cast in one pass (q is T x 64 x 512 fp32 in prefill)
      norm_rope(q, T, H, hd, nullptr, eps, false, st.pos, rope_t, rd, rope_f, nullptr, q_bf, s);
    }
    tap_bf(l, "q", q_bf, static_cast<size_t>(T) * H * hd);
    // The shared KV head.
    if (!split_in) proj(normed, T, D, L.wkv, hd, kv, kv_s);
    rb(kv, static_cast<size_t>(T) * hd);
    norm_rope(kv, T, 1, hd, L.kv_norm, eps, rel, st.pos, rope_t, rd, rope_f, kv, kv_bf, kv_s);
    tap_bf(l, "kv", kv_bf, static_cast<size_t>(T) * hd);
    // Compressed rows of windows that close in this step (DeepSeekV4::compress).
    auto run_compressor = [&](const DevCompressor& dc, const model::CompressorSlotLayout& sl, const CompressPlan& cp,
                              size_t page_offset, int dims, bool index_key) {
      float* const ab = index_key ? comp_ab_index : comp_ab;
      const cudaStream_t ss = index_key ? ikey_s : kv_s;
      float* const new_rows = index_key ? fresh_index : fresh;  // each compressor its own buffers
      uint8_t** const new_row_ptrs = index_key ? fresh_ptrs_index : fresh_ptrs;
      CompressorView cv;
      cv.ab = ab;
      cv.ape = dc.ape;
      cv.ratio = dc.ratio;
      cv.head = dc.head;
      cv.width = dc.width;
      cv.overlap = dc.overlap;
      cv.buf_kv = sl.buf_kv;
      cv.buf_gate = sl.buf_gate;
      cv.prev_kv = sl.prev_kv;
      cv.prev_gate = sl.prev_gate;
      if (!split_in) gemm(normed, T, D, dc.wkv_gate.w, 2 * dc.width, ab, ss);
      const int R = static_cast<int>(cp.rows.size());
      const NewRow* d_rows = meta_ptr<NewRow>(cp.off_rows);
      compress_pool(st, cv, d_rows, R, new_rows, ss);
      compress_update(st, cv, meta_ptr<int32_t>(cp.off_closed), static_cast<int>(cp.closed_seqs.size()),
                      meta_ptr<int32_t>(cp.off_open), static_cast<int>(cp.open_tokens.size()), ss);
      if (R == 0) return;
      const size_t n = static_cast<size_t>(R) * dims;
      rb(new_rows, n);
      // Norm, (release) bf16 rounding and RoPE of the new rows in one pass.
      norm_rope(new_rows, R, 1, dims, dc.norm, eps, rel, meta_ptr<int64_t>(cp.off_pos), rope_compress, rd,
                rope_compress_factor, new_rows, nullptr, ss);
      if (index_key && rel) {  // indexer keys are Hadamard-rotated under release numerics
        round_bf16(new_rows, n, ss);
        hadamard_rows_bf16(new_rows, R, dims, 1.0f / std::sqrt(static_cast<float>(dims)), ss);
      }
      if (fp8_cache) {  // FP8 KV rows / FP4 indexer keys, encoded straight into their pages
        const size_t rb_bytes = index_key ? shape.index_row.bytes() : shape.kv_row.bytes();
        page_row_pointers(st, d_rows, R, page_offset, CL.rows_per_page, rb_bytes, new_row_ptrs, ss);
        if (index_key)
          encode_index_rows_fp4(new_rows, static_cast<size_t>(dims), R, dims, new_row_ptrs, ss);
        else
          encode_kv_rows_fp8(new_rows, static_cast<size_t>(dims), R, dims, rd, new_row_ptrs, ss);
      } else {
        store_page_rows(st, d_rows, R, new_rows, dims, page_offset, CL.rows_per_page, ss);
      }
    };
    const int* sel = nullptr;
    if (L.has_compressor) {
      const CompressPlan& cp = comp_plans.at(ratio);
      run_compressor(L.compressor, CL.compressor, cp, CL.rows, hd, false);
      if (L.has_indexer) {
        // Lightning indexer: keys from its own compressor, queries from qr, top-k per query.
        const int nI = c.index_n_heads, ih = c.index_head_dim;
        run_compressor(L.index_compressor, CL.index_compressor, cp, CL.index_keys, ih, true);
        // The query weights and the key pointers first: neither waits for qr_bf.
        if (!split_in) gemm(normed, T, D, L.index_weights_proj.w, nI, wts, iq_s);
        if (rel) {  // both scales folded into the weights, in bf16 (the official code's order)
          round_bf16(wts, static_cast<size_t>(T) * nI, iq_s);
          scale_rows(wts, static_cast<size_t>(T) * nI,
                     static_cast<float>(1.0 / std::sqrt(static_cast<double>(ih)) / std::sqrt(static_cast<double>(nI))), iq_s);
          round_bf16(wts, static_cast<size_t>(T) * nI, iq_s);
        } else {
          scale_rows(wts, static_cast<size_t>(T) * nI, 1.0f / std::sqrt(static_cast<float>(nI)), iq_s);
        }
        fill_key_rows(st, meta_ptr<int>(cp.off_kseq), cp.max_keys_per_seq, ratio, CL.index_keys, CL.rows_per_page,
                      shape.index_row.bytes(), keys, iq_s);
        if (fork_attn) cudaStreamWaitEvent(iq_s, handoff_event, 0);
        proj(qr_bf, T, c.q_lora_rank, L.index_wq_b, nI * ih, qi, iq_s);
        const size_t nq = static_cast<size_t>(T) * nI * ih;
        if (rel) {  // rotated like the keys
          round_bf16(qi, nq, iq_s);
          rope(qi, T, nI, ih, st.pos, rope_compress, rd, rope_compress_factor, false, iq_s);
          round_bf16(qi, nq, iq_s);
          hadamard_rows_bf16(qi, T * nI, ih, 1.0f / std::sqrt(static_cast<float>(ih)), iq_s);
          to_bf16(qi, nq, qi_bf, iq_s);
        } else {
          rope_to_bf16(qi, T, nI, ih, st.pos, rope_compress, rd, rope_compress_factor, qi_bf, iq_s);
        }
        tap_bf(l, "iq", qi_bf, nq);
        tap_f32(l, "iw", wts, static_cast<size_t>(T) * nI);  // after "iq", where the CPU taps it
        const auto* keys_bf = reinterpret_cast<const bf16* const*>(keys);
        const auto* keys_fp4 = reinterpret_cast<const uint8_t* const*>(keys);
        const int stride = std::max(cp.max_keys, 1);
        const int* kb = meta_ptr<int>(cp.off_kbegin);
        const int* nk = meta_ptr<int>(cp.off_nkeys);
        const float iscale = 1.0f / std::sqrt(static_cast<float>(ih));
        wait_side(iq_s, 1);  // the step's new keys are in their pages
        if (rel && fp8_cache)
          indexer_scores_release_fp4(qi_bf, wts, T, nI, ih, keys_fp4, kb, nk, cp.max_keys, scores, stride, iq_s);
        else if (rel)
          indexer_scores_release(qi_bf, wts, T, nI, ih, keys_bf, kb, nk, cp.max_keys, scores, stride, iq_s);
        else if (fp8_cache)
          indexer_scores_fp4(qi_bf, wts, T, nI, ih, keys_fp4, kb, nk, cp.max_keys, iscale, scores, stride, iq_s);
        else
          indexer_scores(qi_bf, wts, T, nI, ih, keys_bf, kb, nk, cp.max_keys, iscale, scores, stride, iq_s);
        topk_select(scores, T, stride, meta_ptr<int>(cp.off_nkeys), std::max(cp.max_keys, 1), c.index_topk, selected,
                    nullptr, topk_ws, iq_s);
        sel = selected;
        tap_ints(l, "isel", selected, static_cast<size_t>(T) * c.index_topk);
      }
    }
    const RowPlan& rp = row_plans.at({static_cast<int>(kind), ratio});
    // The row lists on the chain that finishes last (the indexer's with one), after the KV head's.
    const cudaStream_t rows_s = L.has_indexer ? iq_s : kv_s;
    wait_side(rows_s, 0);
    // The chunk's own rows as the cache holds them (fp8: encoded, so its queries read the rounded rows).
    const uint8_t* chunk_rows = fp8_cache ? kv8 : reinterpret_cast<const uint8_t*>(kv_bf);
    if (fp8_cache) {  // release: from the bf16 values, as the official code (and the CPU) encode them
      rb(kv, static_cast<size_t>(T) * hd);
      encode_kv_rows_fp8(kv, static_cast<size_t>(hd), T, hd, rd, kv8, shape.kv_row.bytes(), rows_s);
    }
    fill_attention_rows(st, meta_ptr<int>(rp.off), CL.window, chunk_rows, shape.kv_row.bytes(), sel, c.index_topk,
                        CL.rows, CL.rows_per_page, rows, rows_s);
    join_all();  // the attention reads every chain's outputs
    const float ascale = 1.0f / std::sqrt(static_cast<float>(hd));
    // Release numerics: the official softmax is fp32; bf16 probabilities alone move a block by ~1%.
    const AttnProbabilities probs = rel ? AttnProbabilities::kBf16HiLo : AttnProbabilities::kBf16;
    if (fp8_cache)
      sink_attention_fp8(q_bf, T, H, hd, rd, reinterpret_cast<const uint8_t* const*>(rows), meta_ptr<int>(rp.off),
                         std::max(rp.max_rows, 1), L.sinks, ascale, o, attn_ws, s, probs);
    else
      sink_attention(q_bf, T, H, hd, reinterpret_cast<const bf16* const*>(rows), meta_ptr<int>(rp.off),
                     std::max(rp.max_rows, 1), L.sinks, ascale, o, attn_ws, s, probs);
    // Every query has read the ring: store each sequence's newest rows in it (beside the output
    // projection when forked; nothing writes chunk_rows before the MoE block's join).
    if (branches) fork(1);
    store_ring(st, meta_ptr<int32_t>(off_ring), static_cast<int>(ring_tokens.size()), chunk_rows, shape.kv_row.bytes(),
               CL.window, branches ? side[0] : s);
    // V carried RoPE: rotate the output back by the query position.
    rb(o, static_cast<size_t>(T) * H * hd);
    tap_f32(l, "o", o, static_cast<size_t>(T) * H * hd);
    // Grouped low-rank output projection (its bf16 group layout made in the same pass).
    const int G = c.o_groups, gw = H * hd / G, OR = c.o_lora_rank;
    if (!rope_inverse_split_groups(o, T, H, hd, st.pos, rope_t, rd, rope_f, G, og, s)) {
      rope(o, T, H, hd, st.pos, rope_t, rd, rope_f, true, s);
      split_groups(o, T, G, gw, og, s);
    }
    // The groups' bf16 outputs side by side: [T, G OR], wo_b's input.
    grouped_gemm_stacked_side_by_side(og, meta_ptr<int>(off_groups), G, G * T, gw, L.wo_a[0].w, OR, zo_bf, s);
    tap_bf(l, "zo", zo_bf, static_cast<size_t>(T) * G * OR);
    proj(zo_bf, T, G * OR, L.wo_b, D, sub_out, s);
    rb(sub_out, static_cast<size_t>(T) * D);
    tap_f32(l, "attn_out", sub_out, static_cast<size_t>(T) * D);
    // mHC post, then the MoE block's pre (DeepSeekV4::moe).
    const HcNorm ffn_norm{L.ffn_norm, eps, rel, normed, true};
    if (!one_pass) {
      hc_post(Xs, sub_out, T, hc, D, post, comb, s);
      rb(Xs, static_cast<size_t>(T) * hc * D);
      tap_f32(l, "h_mid", Xs, static_cast<size_t>(T) * hc * D);
      hc_pre(Xs, T, hc, D, L.hc_ffn.fn, L.hc_ffn.base, L.hc_ffn.scale, c.hc_sinkhorn_iters, hc_eps, eps, collapsed,
             post, comb, hc_ws, s, &ffn_norm);
    } else {
      HcBlockOutput attn_out;
      attn_out.o = sub_out;
      float* const to = next_streams();
      if (hc_post_pre(Xs, to, attn_out, T, hc, D, post, comb, rel, L.hc_ffn.fn, L.hc_ffn.base, L.hc_ffn.scale,
                      c.hc_sinkhorn_iters, hc_eps, eps, collapsed, post, comb, hc_ws, s, &ffn_norm))
        ++(to != Xs ? out_of_place_count : in_place_count);
      Xs = to;
    }
    tap_bf(l, "ffn_in", normed, static_cast<size_t>(T) * D);
    const int E = c.n_routed_experts, K = c.num_experts_per_tok, inter = c.moe_intermediate_size;
    const int inter_s = c.shared_intermediate();
    const float limit = static_cast<float>(c.swiglu_limit);
    // Exact numerics: the shared expert's w13 and the router in one launch (DevLayer::ffn_in).
    const bool split_ffn = !rel && L.ffn_in_split && T <= kSplitMaxRows;
    if (split_ffn) {
      const GemmOutput outs[2] = {{gu_s, 2 * inter_s}, {gate_logits, E}};
      gemm_split(normed, T, D, L.ffn_in, outs, 2, s);
    } else {
      gemm(normed, T, D, L.gate.w, E, gate_logits, s);
    }
    // Two chains to the combine: the shared expert (shared_s: the side stream when forked) and the
    // routed experts (s).
    const bool fork_ffn = branches && split_ffn;
    if (fork_ffn) fork(1);
    const cudaStream_t shared_s = fork_ffn ? side[0] : s;
    const Scoring scoring = c.scoring_func == model::ScoringFunc::kSqrtSoftplus ? Scoring::kSqrtSoftplus
                            : c.scoring_func == model::ScoringFunc::kSigmoid   ? Scoring::kSigmoid
                                                                                : Scoring::kSoftmax;
    // At a few tokens the routing kernel also writes the permutation, unless a tap may change the
    // routing weights after it (the "moe_w" tap below): then moe_permute reads them as tapped.
    const MoePermutation permutation{offsets, perm_token, perm_w, row_of};
    const bool permuted = moe_route(gate_logits, T, E, K, scoring, L.gate_bias, L.tid2eid, d_tokens,
                                    static_cast<float>(c.routed_scaling_factor), route_sel, route_w, s,
                                    tap ? nullptr : &permutation);
    tap_f32(l, "moe_w", route_w, static_cast<size_t>(T) * K);
    tap_ints(l, "moe_i", route_sel, static_cast<size_t>(T) * K);
    if (!permuted) moe_permute(route_sel, route_w, T, K, E, offsets, perm_token, perm_w, row_of, s);
    if (!rel) {
      // The shared expert on the side stream when forked, else before the routed ones (the same
      // bits either way).
      if (!split_ffn) gemm(normed, T, D, L.shared_w13.w, 2 * inter_s, gu_s, shared_s);
      swiglu(gu_s, T, inter_s, limit, nullptr, h_s, shared_s);
      gemm(h_s, T, inter_s, L.shared_w2.w, D, ys, shared_s);
      gather_rows(normed, perm_token, T * K, D, xin, s);
      // From two tokens on, the SwiGLU in the w13 GEMM's epilogue where its tile has one (the fp32 gu
      // never written; the same bits as the two steps). At one token the separate swiglu costs ~1 us
      // of the chain, and the fused GEMM, ending later beside the shared expert's w2, cost more
      // (H100, 2026-12-07: batch 1 +3.1% with it, batches 64 / 256 and the 4k prefill -0.7 / -1.7 /
      // -1.4%).
      if (T < 2 || !L.w13_interleaved ||
          !grouped_gemm_stacked_swiglu(xin, offsets, E, T * K, D, L.w13[0].w, 2 * inter, limit, h, s)) {
        grouped_gemm_stacked(xin, offsets, E, T * K, D, L.w13[0].w, 2 * inter, gu, s);
        swiglu(gu, T * K, inter, limit, nullptr, h, s, L.w13_interleaved);
      }
      grouped_gemm_stacked(h, offsets, E, T * K, inter, L.w2[0].w, D, y, s);
    } else {
      // The official expert: FP8 inputs, bf16 w1/w3 outputs, the routing weight applied before w2
      // (fp32, then bf16), bf16 w2 output; routed outputs summed in fp32 with the shared expert's,
      // rounded once.
      const bf16* xe = qin(normed, T, D, L.w13[0]);
      gather_rows(xe, perm_token, T * K, D, xin, s);
      grouped_gemm_stacked(xin, offsets, E, T * K, D, L.w13[0].w, 2 * inter, gu, s);
      round_bf16(gu, static_cast<size_t>(T) * K * 2 * inter, s);
      swiglu(gu, T * K, inter, limit, perm_w, h, s, L.w13_interleaved);
      if (L.w2[0].quantized) fp8_round_trip_rows(h, T * K, inter, h, s);
      grouped_gemm_stacked(h, offsets, E, T * K, inter, L.w2[0].w, D, y, s);
      round_bf16(y, static_cast<size_t>(T) * K * D, s);
      proj(normed, T, D, L.shared_w13, 2 * inter_s, gu_s, s);
      round_bf16(gu_s, static_cast<size_t>(T) * 2 * inter_s, s);
      swiglu(gu_s, T, inter_s, limit, nullptr, h_s, s);
      if (L.shared_w2.fp8 != nullptr) {
        proj(h_s, T, inter_s, L.shared_w2, D, ys, s);
      } else {
        if (L.shared_w2.quantized) fp8_round_trip_rows(h_s, T, inter_s, h_s, s);
        gemm(h_s, T, inter_s, L.shared_w2.w, D, ys, s);
      }
      round_bf16(ys, static_cast<size_t>(T) * D, s);
    }
    // Routed rows summed in ascending expert order (weighted in exact numerics; release applied the
    // weight before w2) + the shared expert (release: rounded to bf16 once), then mHC post. One kernel
    // unless a tap must see the block's output.
    const float* combine_w = rel ? nullptr : route_w;
    join_all();  // the shared expert's rows, and the ring store of the attention block
    attn_pre_done = false;
    if (tap) {
      moe_combine(y, row_of, route_sel, combine_w, ys, T, K, D, sub_out, s);
      rb(sub_out, static_cast<size_t>(T) * D);
      tap_f32(l, "ffn_out", sub_out, static_cast<size_t>(T) * D);
      hc_post(Xs, sub_out, T, hc, D, post, comb, s);
      rb(Xs, static_cast<size_t>(T) * hc * D);
    } else if (one_pass && l + 1 < c.num_layers) {  // with the next layer's attention pre
      const DevLayer& N = layers[l + 1];
      const HcNorm next_norm{N.attn_norm, eps, rel, normed, true};
      const HcBlockOutput moe_out{nullptr, y, row_of, route_sel, combine_w, ys, K, rel};
      float* const to = next_streams();
      if (hc_post_pre(Xs, to, moe_out, T, hc, D, post, comb, rel, N.hc_attn.fn, N.hc_attn.base, N.hc_attn.scale,
                      c.hc_sinkhorn_iters, hc_eps, eps, collapsed, post, comb, hc_ws, s, &next_norm))
        ++(to != Xs ? out_of_place_count : in_place_count);
      Xs = to;
      attn_pre_done = true;
    } else {
      hc_post_moe(Xs, y, row_of, route_sel, combine_w, ys, T, K, hc, D, post, comb, rel, rel, s);
    }
    tap_f32(l, "h_out", Xs, static_cast<size_t>(T) * hc * D);
  }
  // Head: only the rows that produce logits.
  if (NR > 0) {
    const HcNorm head_norm{final_norm, eps, rel, head_in_bf, true};
    hc_head(Xs, meta_ptr<int32_t>(off_lrows), NR, hc, D, head_mix.fn, head_mix.base, head_mix.scale, hc_eps, eps,
            head_in, hc_ws, s, &head_norm);
    gemm(head_in_bf, NR, D, head.w, c.vocab_size, logits, s);
    if (want_greedy) greedy_rows(logits, NR, c.vocab_size, greedy_tok, greedy_lp, greedy_ws, s);
  }
  };  // enqueue

  // Metadata in (outside the graphs: the host buffer alternates), then the deferred tokens: greedy
  // rows of the previous step, still in greedy_tok (this step's greedy_rows runs after).
  cudaMemcpyAsync(meta_dev, mh, ml.bytes, cudaMemcpyHostToDevice, s);
  cudaEventRecord(meta_sent[parity], s);
  if (!deferred.empty())
    scatter_tokens(meta_ptr<int32_t>(off_tokens), meta_ptr<int32_t>(off_deferred), static_cast<int>(deferred.size()),
                   greedy_tok, s);

  bool ran = false;
  if (padded) {
    Graph& g = graphs[{S, bucket, (want_logits ? 1 : 0) | (want_greedy ? 2 : 0)}];
    if (!g.warmed) {
      g.warmed = true;  // the first step of this size runs eagerly
    } else {
      if (!g.exec || g.epoch != epoch || g.meta_bytes != graph_meta_bytes) {
        if (g.exec) cudaGraphExecDestroy(g.exec);
        g.exec = nullptr;
        cudaGraph_t graph = nullptr;
        bool ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess;
        if (ok) {
          enqueue();
          ok = cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr;
        }
        ok = ok && make_kernel_edges_programmatic(graph);
        // Node priorities: the side stream's kernels keep its priority in the replays.
        if (ok && cudaGraphInstantiate(&g.exec, graph, cudaGraphInstantiateFlagUseNodePriority) != cudaSuccess) {
          cudaGetLastError();
          ok = cudaGraphInstantiate(&g.exec, graph, 0) == cudaSuccess;
        }
        if (graph) cudaGraphDestroy(graph);
        if (!ok) {  // run eagerly from now on; clear the capture's error state
          graphs_broken = true;
          g.exec = nullptr;
          cudaGetLastError();
        }
        g.epoch = epoch;
        g.meta_bytes = graph_meta_bytes;
      }
      if (g.exec) {
        DI_CUDA_RETURN(cudaGraphLaunch(g.exec, s));
        ran = true;
        ++replays;
      }
    }
  }
  if (!ran) enqueue();
  // (The same condition as the forward's forks of the projection chains: gemm_split sets.)
  if (branches && std::any_of(layers.begin(), layers.end(),
                              [](const DevLayer& L) { return L.attn_in_split || L.ffn_in_split; }))
    ++branched;
  DI_RETURN_IF_ERROR(tap_status);
  // Outputs out. Logits have one host buffer: only synchronous steps (forward) ask for them.
  if (want_logits && NR > 0)
    cudaMemcpyAsync(logits_host, logits, static_cast<size_t>(NR) * c.vocab_size * sizeof(float), cudaMemcpyDeviceToHost, s);
  if (want_greedy && NR > 0) {
    int32_t* tok = reinterpret_cast<int32_t*>(greedy_host) + static_cast<size_t>(parity) * 2 * opt.max_logit_rows;
    cudaMemcpyAsync(tok, greedy_tok, static_cast<size_t>(NR) * sizeof(int32_t), cudaMemcpyDeviceToHost, s);
    cudaMemcpyAsync(tok + opt.max_logit_rows, greedy_lp, static_cast<size_t>(NR) * sizeof(float), cudaMemcpyDeviceToHost, s);
  }
  prev_greedy_rows = want_greedy ? NR : -1;
  DI_CUDA_RETURN(cudaEventRecord(step_done[parity], s));
  return cuda_status(cudaGetLastError(), "the forward's launches");
}

// The host copy of a launched step's greedy rows (after step_done[parity]).
static void read_greedy(const GreedyToken* host, int max_rows, int parity, int rows, std::vector<GreedyToken>* out) {
  const int32_t* tok = reinterpret_cast<const int32_t*>(host) + static_cast<size_t>(parity) * 2 * max_rows;
  const float* lp = reinterpret_cast<const float*>(tok + max_rows);
  out->resize(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) (*out)[r] = GreedyToken{tok[r], lp[r]};
}

Status CudaModel::Impl::forward(std::span<const SeqChunk> batch, std::vector<float>* logits_out,
                                std::vector<GreedyToken>* greedy_out) {
  if (!in_flight.empty())
    return Status::invalid_argument("forward() while " + std::to_string(in_flight.size()) +
                                    " submitted steps are not collected");
  const int parity = next_parity;
  next_parity ^= 1;
  int rows = 0;
  DI_RETURN_IF_ERROR(launch(batch, {}, logits_out != nullptr, greedy_out != nullptr, parity, &rows));
  DI_CUDA_RETURN(cudaEventSynchronize(step_done[parity]));
  DI_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "the forward's kernels"));
  if (logits_out) {
    logits_out->resize(static_cast<size_t>(rows) * config.vocab_size);
    std::memcpy(logits_out->data(), logits_host, static_cast<size_t>(rows) * config.vocab_size * sizeof(float));
  }
  if (greedy_out) read_greedy(greedy_host, opt.max_logit_rows, parity, rows, greedy_out);
  return Status::ok();
}

// --- CudaModel ------------------------------------------------------------------------------

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

namespace {

// The dimensions the kernels are written for (gemm.h, attention.h, ops.h); V4-Flash and V4-Pro are
// inside them. Checked before anything touches the GPU, so the error names the config field.
Status check_supported(const ModelConfig& c, bool release) {
  auto need = [](bool ok, const std::string& what) { return ok ? Status::ok() : Status::unsupported("CUDA backend: " + what); };
  const int gw = c.o_groups > 0 ? c.num_heads * c.head_dim / c.o_groups : 0;
  for (const auto& [name, k] : std::initializer_list<std::pair<const char*, int>>{
           {"hidden_size", c.hidden_size}, {"q_lora_rank", c.q_lora_rank}, {"moe_intermediate_size", c.moe_intermediate_size},
           {"o_groups * o_lora_rank", c.o_groups * c.o_lora_rank}, {"num_heads * head_dim / o_groups", gw}})
    DI_RETURN_IF_ERROR(need(k > 0 && k % 8 == 0, std::string(name) + " = " + std::to_string(k) +
                                                      " must be a positive multiple of 8 (GEMM rows of 16 bytes)"));
  DI_RETURN_IF_ERROR(need(c.head_dim % 64 == 0 && c.head_dim <= 512,
                          "head_dim = " + std::to_string(c.head_dim) + " must be a multiple of 64, at most 512"));
  if (c.has_csa()) {
    const int d = c.index_head_dim;
    DI_RETURN_IF_ERROR(need(release ? (d > 0 && (d & (d - 1)) == 0 && d <= 1024) : (d % 16 == 0 && d > 0 && d <= 256),
                            "index_head_dim = " + std::to_string(d) +
                                (release ? " must be a power of two up to 1024" : " must be a multiple of 16, at most 256")));
    DI_RETURN_IF_ERROR(need(c.index_topk >= 1 && c.index_topk <= 2048,
                            "index_topk = " + std::to_string(c.index_topk) + " must be in 1..2048"));
  }
  DI_RETURN_IF_ERROR(need(c.hc_mult >= 1 && c.hc_mult <= 8, "hc_mult = " + std::to_string(c.hc_mult) + " must be in 1..8"));
  DI_RETURN_IF_ERROR(need(c.n_routed_experts <= 1024 && c.num_experts_per_tok <= 16 &&
                              c.num_experts_per_tok <= c.n_routed_experts,
                          "n_routed_experts <= 1024 and num_experts_per_tok <= 16 are required"));
  return Status::ok();
}

Result<std::unique_ptr<CudaModel::Impl>> make_impl(const ModelConfig& config, const CudaModelOptions& options,
                                                   bool release) {
  DI_RETURN_IF_ERROR(check_supported(config, release));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return Status::unsupported("no CUDA device is available");
  if (options.num_slots < 1 || options.num_blocks < 0 || options.max_step_tokens < 1 || options.max_logit_rows < 1)
    return Status::invalid_argument("CudaModelOptions: num_slots, max_step_tokens and max_logit_rows must be positive");
  auto impl = std::make_unique<CudaModel::Impl>();
  impl->config = config;
  impl->opt = options;
  const int block = options.block_size > 0 ? options.block_size : model::default_block_size(config);
  if (options.kv_cache_dtype == model::KvCacheDtype::kF32)
    return Status::unsupported("the CUDA backend stores KV rows as bfloat16 or fp8, not float32");
  DI_ASSIGN_OR_RETURN(impl->shape, model::make_state_cache_shape(config, block, options.kv_cache_dtype));
  if (options.kv_cache_dtype == model::KvCacheDtype::kFP8 && impl->shape.kv_row.bytes() % 8 != 0)
    return Status::unsupported("CUDA backend: an fp8 KV cache needs FP8 KV rows of a multiple of 8 bytes; head_dim = " +
                               std::to_string(config.head_dim) + " with qk_rope_head_dim = " +
                               std::to_string(config.rope_head_dim) + " gives " +
                               std::to_string(impl->shape.kv_row.bytes()) + " (use kv cache dtype bfloat16)");
  const int64_t capacity = impl->shape.page_bytes > 0 ? static_cast<int64_t>(options.num_blocks) * block
                                                      : config.max_position_embeddings;
  impl->max_model_len = static_cast<int>(std::min<int64_t>(capacity, config.max_position_embeddings));
  if (options.max_model_len > 0) impl->max_model_len = static_cast<int>(std::min<int64_t>(capacity, options.max_model_len));
  return Result<std::unique_ptr<CudaModel::Impl>>(std::move(impl));
}

}  // namespace

Result<std::unique_ptr<CudaModel>> CudaModel::create(const ModelConfig& config, const model::ModelWeights& weights,
                                                     model::Numerics numerics, const CudaModelOptions& options) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, make_impl(config, options, numerics == model::Numerics::kRelease));
  impl->release = numerics == model::Numerics::kRelease;
  DI_RETURN_IF_ERROR(impl->allocate_cache_and_work());
  DI_RETURN_IF_ERROR(impl->allocate());
  DI_RETURN_IF_ERROR(impl->upload(weights));
  if (impl->release && options.fp8_gemm) DI_RETURN_IF_ERROR(impl->upload_fp8_forms(weights));
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

Result<std::unique_ptr<CudaModel>> CudaModel::create_random(const ModelConfig& config, uint64_t seed,
                                                            const CudaModelOptions& options) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, make_impl(config, options, false));
  DI_RETURN_IF_ERROR(impl->allocate_cache_and_work());
  DI_RETURN_IF_ERROR(impl->allocate());
  DI_RETURN_IF_ERROR(impl->randomize(seed));
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

Status CudaModel::forward(std::span<const SeqChunk> batch, std::vector<float>* logits,
                          std::vector<GreedyToken>* greedy) {
  return impl_->forward(batch, logits, greedy);
}

static_assert(sizeof(DeferredToken) == 2 * sizeof(int32_t), "scatter_tokens reads (index, row) pairs");

Status CudaModel::submit_greedy(std::span<const SeqChunk> batch, std::span<const DeferredToken> deferred) {
  Impl& m = *impl_;
  if (m.in_flight.size() >= 2)
    return Status::invalid_argument("submit_greedy: two submitted steps are not collected yet");
  const int parity = m.next_parity;
  m.next_parity ^= 1;
  int rows = 0;
  DI_RETURN_IF_ERROR(m.launch(batch, deferred, /*want_logits=*/false, /*want_greedy=*/true, parity, &rows));
  m.in_flight.push_back(Impl::InFlight{parity, rows});
  return Status::ok();
}

Status CudaModel::collect_greedy(std::vector<GreedyToken>* greedy) {
  Impl& m = *impl_;
  if (m.in_flight.empty()) return Status::invalid_argument("collect_greedy: no submitted step");
  const Impl::InFlight f = m.in_flight.front();
  m.in_flight.pop_front();
  DI_CUDA_RETURN(cudaEventSynchronize(m.step_done[f.parity]));
  DI_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "the forward's kernels"));
  read_greedy(m.greedy_host, m.opt.max_logit_rows, f.parity, f.rows, greedy);
  return Status::ok();
}

void CudaModel::reset_slot(int slot) {
  if (slot < 0 || slot >= impl_->opt.num_slots || impl_->shape.slot_bytes == 0) return;
  cudaMemsetAsync(impl_->slots + static_cast<size_t>(slot) * impl_->shape.slot_bytes, 0, impl_->shape.slot_bytes,
                  impl_->stream);
}

const ModelConfig& CudaModel::config() const { return impl_->config; }
const model::StateCacheShape& CudaModel::cache_shape() const { return impl_->shape; }
size_t CudaModel::weight_bytes() const { return impl_->weights_arena.bytes(); }
uint64_t CudaModel::graph_replays() const { return impl_->replays; }
uint64_t CudaModel::branched_steps() const { return impl_->branched; }
uint64_t CudaModel::one_pass_boundaries() const { return impl_->in_place_count + impl_->out_of_place_count; }
uint64_t CudaModel::one_pass_out_of_place_boundaries() const { return impl_->out_of_place_count; }
void CudaModel::set_tap(Tap tap) { impl_->tap = std::move(tap); }

}  // namespace deepinfer::backend::cuda
