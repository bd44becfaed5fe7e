// DeepSeek-V4 forward, in the order of the model: embed -> per layer (mHC pre -> attention ->
// mHC post -> mHC pre -> MoE -> mHC post) -> hyper-head -> norm -> head.
// Math follows transformers' DeepseekV4ForCausalLM (the `exact` oracle); comments name the spec
// sections of docs/deepseek_v4.md where the why lives.
#include "model/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "model/topk.h"

namespace deepinfer::model {

using backend::HcMix;

struct DeepSeekV4::Step {
  std::span<const SeqChunk> seqs;
  int T = 0;                    // tokens in the step
  std::vector<int> offset;      // [seqs + 1] first token of each sequence
  std::vector<int64_t> pos;     // [T] absolute positions
  std::vector<int32_t> tokens;  // [T]
};

DeepSeekV4::DeepSeekV4(const ModelConfig& config, const ModelWeights& weights, backend::Backend& backend,
                       Numerics numerics)
    : config_(config),
      weights_(weights),
      backend_(backend),
      rope_main_(backend::make_rope_table(config.rope_main, config.rope_head_dim)),
      rope_compress_(backend::make_rope_table(config.rope_compress, config.rope_head_dim)),
      numerics_(numerics),
      release_(numerics == Numerics::kRelease) {}

void DeepSeekV4::bf(float* x, size_t n) const {
  if (release_) round_bf16(x, n);
}

void DeepSeekV4::lin(const float* x, int M, const Matrix& W, float* y, Lin kind) const {
  if (!release_ || kind == Lin::kF32) {
    backend_.linear(x, M, W, y);
    return;
  }
  if (kind == Lin::kQuantized && W.quantized) {
    // FP8 activations in blocks of 128 along the input; the product of the two dequantized
    // operands is then exact math (power-of-two scales), accumulated in fp32.
    std::vector<float> q(x, x + static_cast<size_t>(M) * W.cols);
    for (int m = 0; m < M; ++m) fp8_round_trip(&q[static_cast<size_t>(m) * W.cols], W.cols, 128);
    backend_.linear(q.data(), M, W, y);
  } else {
    backend_.linear(x, M, W, y);
  }
  round_bf16(y, static_cast<size_t>(M) * W.rows);
}

// Release numerics' expert (the official code's order): w1 and w3 outputs in bf16, the clamped
// SwiGLU and the routing weight in fp32, bf16 before w2, bf16 out.
void DeepSeekV4::release_expert(const float* x, int n, const ExpertWeights& e, const float* row_weight,
                                float* y) const {
  const int inter = e.w1.rows;
  const float limit = static_cast<float>(config_.swiglu_limit);
  std::vector<float> g(static_cast<size_t>(n) * inter), u(g.size());
  lin(x, n, e.w1, g.data(), Lin::kQuantized);
  lin(x, n, e.w3, u.data(), Lin::kQuantized);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < inter; ++i) {
      const size_t k = static_cast<size_t>(r) * inter + i;
      const float gate = std::min(g[k], limit);
      const float up = std::clamp(u[k], -limit, limit);
      g[k] = round_bf16((gate / (1.0f + std::exp(-gate))) * up * (row_weight ? row_weight[r] : 1.0f));
    }
  lin(g.data(), n, e.w2, y, Lin::kQuantized);
}

Status check_seq_chunk(const SeqChunk& q, size_t index, const ModelConfig& c, const StateCacheShape& shape,
                       int num_slots, int num_blocks) {
  const std::string who = "sequence " + std::to_string(index) + " of the batch";
  for (size_t t = 0; t < q.tokens.size(); ++t)
    if (q.tokens[t] < 0 || q.tokens[t] >= c.vocab_size)
      return Status::invalid_argument("token id " + std::to_string(q.tokens[t]) + " at position " +
                                      std::to_string(q.start + static_cast<int64_t>(t)) + " of " + who +
                                      " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  if (q.slot < 0 || q.slot >= num_slots)
    return Status::invalid_argument(who + " names state slot " + std::to_string(q.slot) + " of " +
                                    std::to_string(num_slots));
  const int64_t end = q.start + static_cast<int64_t>(q.tokens.size());
  if (q.start < 0) return Status::invalid_argument(who + " starts at a negative position");
  if (shape.page_bytes > 0) {
    const int64_t need = (end + shape.block_size - 1) / shape.block_size;
    if (static_cast<int64_t>(q.block_table.size()) < need)
      return Status::invalid_argument(who + " needs " + std::to_string(need) + " pages for " + std::to_string(end) +
                                      " positions, its block table has " + std::to_string(q.block_table.size()));
    for (int b : q.block_table)
      if (b < 0 || b >= num_blocks)
        return Status::invalid_argument(who + " names page " + std::to_string(b) + " of " + std::to_string(num_blocks));
  }
  return Status::ok();
}

Status DeepSeekV4::forward(std::span<const SeqChunk> batch, StateStorage& cache, std::vector<float>* logits) const {
  const ModelConfig& c = config_;
  const StateCacheShape& shape = cache.shape();
  if (shape.layers.size() != static_cast<size_t>(c.num_layers) || shape.window_rows != c.sliding_window)
    return Status::invalid_argument("state cache does not belong to this model");
  Step st;
  st.seqs = batch;
  st.offset.push_back(0);
  size_t n_logit_rows = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SeqChunk& q = batch[s];
    DI_RETURN_IF_ERROR(check_seq_chunk(q, s, c, shape, cache.num_slots(), cache.num_blocks()));
    for (size_t t = 0; t < q.tokens.size(); ++t) {
      st.pos.push_back(q.start + static_cast<int64_t>(t));
      st.tokens.push_back(q.tokens[t]);
    }
    st.offset.push_back(static_cast<int>(st.pos.size()));
    n_logit_rows += q.logits == LogitRows::kAll ? q.tokens.size() : (q.tokens.empty() || q.logits == LogitRows::kNone ? 0 : 1);
  }
  st.T = static_cast<int>(st.pos.size());
  logits->assign(n_logit_rows * c.vocab_size, 0.0f);
  if (st.T == 0) return Status::ok();

  const int T = st.T, D = c.hidden_size, hc = c.hc_mult;
  // Residual streams X[T, hc, D]: hc copies of the embedding (§4.1).
  std::vector<float> X(static_cast<size_t>(T) * hc * D);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < hc; ++i)
      std::memcpy(&X[(static_cast<size_t>(t) * hc + i) * D],
                  &weights_.embed.data[static_cast<size_t>(st.tokens[t]) * D], D * sizeof(float));

  bf(X.data(), X.size());
  std::vector<float> collapsed(static_cast<size_t>(T) * D), normed(collapsed.size()), sub_out(collapsed.size());
  HcMix mix;
  const float norm_eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = weights_.layers[l];
    backend_.hc_pre(X.data(), T, hc, D, L.hc_attn, c.hc_sinkhorn_iters, hc_eps, norm_eps, collapsed.data(), &mix);
    bf(collapsed.data(), collapsed.size());
    backend_.rms_norm(collapsed.data(), T, D, L.attn_norm.data(), norm_eps, normed.data());
    bf(normed.data(), normed.size());
    tap(l, "attn_in", normed.data(), normed.size());
    attention(L, l, st, cache, normed.data(), sub_out.data());
    tap(l, "attn_out", sub_out.data(), sub_out.size());
    backend_.hc_post(X.data(), sub_out.data(), T, hc, D, mix);
    bf(X.data(), X.size());
    tap(l, "h_mid", X.data(), X.size());

    backend_.hc_pre(X.data(), T, hc, D, L.hc_ffn, c.hc_sinkhorn_iters, hc_eps, norm_eps, collapsed.data(), &mix);
    bf(collapsed.data(), collapsed.size());
    backend_.rms_norm(collapsed.data(), T, D, L.ffn_norm.data(), norm_eps, normed.data());
    bf(normed.data(), normed.size());
    tap(l, "ffn_in", normed.data(), normed.size());
    moe(L, l, normed.data(), T, st.tokens, sub_out.data());
    tap(l, "ffn_out", sub_out.data(), sub_out.size());
    backend_.hc_post(X.data(), sub_out.data(), T, hc, D, mix);
    bf(X.data(), X.size());
    tap(l, "h_out", X.data(), X.size());
  }
  // Only the rows that produce logits go through the head.
  std::vector<int> rows;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int b = st.offset[s], e = st.offset[s + 1];
    if (b == e || batch[s].logits == LogitRows::kNone) continue;
    for (int t = batch[s].logits == LogitRows::kAll ? b : e - 1; t < e; ++t) rows.push_back(t);
  }
  const int R = static_cast<int>(rows.size());
  if (R == 0) return Status::ok();
  std::vector<float> Xr(static_cast<size_t>(R) * hc * D);
  for (int r = 0; r < R; ++r)
    std::memcpy(&Xr[static_cast<size_t>(r) * hc * D], &X[static_cast<size_t>(rows[r]) * hc * D],
                static_cast<size_t>(hc) * D * sizeof(float));
  backend_.hc_head(Xr.data(), R, hc, D, weights_.hc_head_fn, weights_.hc_head_base.data(),
                   weights_.hc_head_scale.data(), hc_eps, norm_eps, collapsed.data());
  bf(collapsed.data(), static_cast<size_t>(R) * D);
  backend_.rms_norm(collapsed.data(), R, D, weights_.norm.data(), norm_eps, normed.data());
  bf(normed.data(), static_cast<size_t>(R) * D);
  backend_.linear(normed.data(), R, weights_.head, logits->data());
  return Status::ok();
}

// Feeds T tokens' projections through one compressor (§4.6) and stores one pooled row for every
// window that closes. HCA (overlap=false): a row pools the `ratio` tokens of its window. CSA
// (overlap=true, width = 2*head): a row pools series A of the previous window and series B of its
// own, 2*ratio slots under one softmax per channel. New rows are normed, rotated to the position of
// their window's first token, brought to what the cache stores (kv_format.h; indexer keys are first
// Hadamard-rotated when `index_key`) and written to the page of that position.
void DeepSeekV4::compress(const CompressorWeights& w, const CompressorSlotLayout& cl, int ratio, bool overlap,
                          int head, const float* a, const float* z, int T, int64_t start, uint8_t* slot,
                          StateStorage& cache, std::span<const int> block_table, size_t page_offset,
                          int rows_per_page, bool index_key) const {
  const int width = overlap ? 2 * head : head;
  auto floats = [slot](size_t at) { return reinterpret_cast<float*>(slot + at); };  // 16-byte aligned
  float* buf_kv = floats(cl.buf_kv);
  float* buf_gate = floats(cl.buf_gate);
  float* prev_kv = floats(cl.prev_kv);
  float* prev_gate = floats(cl.prev_gate);
  const int first_row = static_cast<int>(start / ratio);
  std::vector<const float*> kv_ptr, gate_ptr;
  std::vector<float> fresh;  // [n_new, head]
  int rows_done = first_row;
  for (int t = 0; t < T; ++t) {
    const int64_t p = start + t;
    const int s = static_cast<int>(p % ratio);
    float* bk = buf_kv + static_cast<size_t>(s) * width;
    float* bg = buf_gate + static_cast<size_t>(s) * width;
    const float* ape = &w.ape[static_cast<size_t>(s) * width];
    for (int i = 0; i < width; ++i) {
      bk[i] = a[static_cast<size_t>(t) * width + i];
      bg[i] = z[static_cast<size_t>(t) * width + i] + ape[i];
    }
    if (s + 1 < ratio) continue;
    // Window closed: pool it.
    kv_ptr.clear();
    gate_ptr.clear();
    if (overlap) {
      const bool has_prev = rows_done > 0;  // series A of the previous window (absent for row 0)
      for (int i = 0; i < ratio; ++i) {
        kv_ptr.push_back(has_prev ? prev_kv + static_cast<size_t>(i) * head : nullptr);
        gate_ptr.push_back(has_prev ? prev_gate + static_cast<size_t>(i) * head : nullptr);
      }
      for (int i = 0; i < ratio; ++i) {  // series B of this window
        kv_ptr.push_back(buf_kv + static_cast<size_t>(i) * width + head);
        gate_ptr.push_back(buf_gate + static_cast<size_t>(i) * width + head);
      }
    } else {
      for (int i = 0; i < ratio; ++i) {
        kv_ptr.push_back(buf_kv + static_cast<size_t>(i) * width);
        gate_ptr.push_back(buf_gate + static_cast<size_t>(i) * width);
      }
    }
    fresh.resize(fresh.size() + head);
    backend_.compress_pool(kv_ptr, gate_ptr, 1, static_cast<int>(kv_ptr.size()), head, fresh.data() + fresh.size() - head);
    if (overlap) {  // keep series A of this window for the next row
      for (int i = 0; i < ratio; ++i) {
        std::memcpy(prev_kv + static_cast<size_t>(i) * head, buf_kv + static_cast<size_t>(i) * width, head * sizeof(float));
        std::memcpy(prev_gate + static_cast<size_t>(i) * head, buf_gate + static_cast<size_t>(i) * width,
                    head * sizeof(float));
      }
    }
    ++rows_done;
  }
  const int n_new = rows_done - first_row;
  if (n_new == 0) return;
  bf(fresh.data(), fresh.size());
  backend_.rms_norm(fresh.data(), n_new, head, w.norm.data(), static_cast<float>(config_.rms_norm_eps), fresh.data());
  bf(fresh.data(), fresh.size());
  std::vector<int64_t> rpos(n_new);
  for (int r = 0; r < n_new; ++r) rpos[r] = static_cast<int64_t>(first_row + r) * ratio;
  backend_.rope(fresh.data(), n_new, 1, head, rpos.data(), rope_compress_, false);
  bf(fresh.data(), fresh.size());
  const StateCacheShape& shape = cache.shape();
  const size_t row_bytes = index_key ? shape.index_row.bytes() : shape.kv_row.bytes();
  for (int r = 0; r < n_new; ++r) {
    float* v = fresh.data() + static_cast<size_t>(r) * head;
    if (index_key && rotate_index(shape)) {
      hadamard(v, head, 1.0f / std::sqrt(static_cast<float>(head)));
      bf(v, head);
    }
    const int row = first_row + r;
    uint8_t* dst = cache.page(block_table[row / rows_per_page]) + page_offset + static_cast<size_t>(row % rows_per_page) * row_bytes;
    if (index_key)
      shape.index_row.encode(v, dst);
    else
      shape.kv_row.encode(v, dst);
  }
}

void DeepSeekV4::attention(const LayerWeights& L, int layer, const Step& st, StateStorage& cache, const float* x,
                           float* out) const {
  const ModelConfig& c = config_;
  const int T = st.T, H = c.num_heads, hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const AttentionKind kind = c.layer_kinds[layer];
  const int ratio = c.compress_ratio[layer];
  const backend::RopeTable& rope = kind == AttentionKind::kSliding ? rope_main_ : rope_compress_;
  const LayerCacheLayout& CL = cache.shape().layers[layer];
  const int64_t* pos = st.pos.data();
  const size_t nseq = st.seqs.size();

  // Queries (§4.4): low-rank q with q_norm, per-head unweighted RMS norm, RoPE on the tail.
  std::vector<float> qr(static_cast<size_t>(T) * c.q_lora_rank);
  lin(x, T, L.wq_a, qr.data(), Lin::kQuantized);
  backend_.rms_norm(qr.data(), T, c.q_lora_rank, L.q_norm.data(), eps, qr.data());
  bf(qr.data(), qr.size());
  tap(layer, "qr", qr.data(), qr.size());
  std::vector<float> q(static_cast<size_t>(T) * H * hd);
  lin(qr.data(), T, L.wq_b, q.data(), Lin::kQuantized);
  if (release_) {
    // The official per-head norm runs in bf16 tensor ops: square, mean (fp32 accumulate, bf16
    // result), + eps, rsqrt, multiply — each rounded to bf16.
    for (int r = 0; r < T * H; ++r) {
      float* v = &q[static_cast<size_t>(r) * hd];
      float ss = 0.0f;
      for (int i = 0; i < hd; ++i) ss += round_bf16(v[i] * v[i]);
      const float ms = round_bf16(round_bf16(ss / static_cast<float>(hd)) + eps);
      const float inv = round_bf16(1.0f / std::sqrt(ms));
      for (int i = 0; i < hd; ++i) v[i] = round_bf16(v[i] * inv);
    }
  } else {
    backend_.rms_norm(q.data(), T * H, hd, nullptr, eps, q.data());
  }
  backend_.rope(q.data(), T, H, hd, pos, rope, false);
  bf(q.data(), q.size());
  tap(layer, "q", q.data(), q.size());

  // The single shared KV head: K == V.
  std::vector<float> kv(static_cast<size_t>(T) * hd);
  lin(x, T, L.wkv, kv.data(), Lin::kQuantized);
  backend_.rms_norm(kv.data(), T, hd, L.kv_norm.data(), eps, kv.data());
  bf(kv.data(), kv.size());
  backend_.rope(kv.data(), T, 1, hd, pos, rope, false);
  bf(kv.data(), kv.size());
  // The chunk's own rows read exactly what the cache will hold for them (kv_format.h).
  const StateCacheShape& shape = cache.shape();
  for (int t = 0; t < T; ++t) shape.kv_row.round_trip(&kv[static_cast<size_t>(t) * hd]);
  tap(layer, "kv", kv.data(), kv.size());

  // Compressed rows (§4.6): emitted for every window that closes inside this chunk.
  if (L.has_compressor) {
    const int width = kind == AttentionKind::kCsa ? 2 * hd : hd;
    std::vector<float> a(static_cast<size_t>(T) * width), z(a.size());
    backend_.linear(x, T, L.compressor.wkv, a.data());
    backend_.linear(x, T, L.compressor.wgate, z.data());
    for (size_t s = 0; s < nseq; ++s) {
      const int b = st.offset[s], n = st.offset[s + 1] - b;
      if (n == 0) continue;
      compress(L.compressor, CL.compressor, ratio, kind == AttentionKind::kCsa, hd, &a[static_cast<size_t>(b) * width],
               &z[static_cast<size_t>(b) * width], n, st.seqs[s].start, cache.slot(st.seqs[s].slot), cache,
               st.seqs[s].block_table, CL.rows, CL.rows_per_page, false);
    }
  }
  const size_t kv_bytes = shape.kv_row.bytes(), key_bytes = shape.index_row.bytes();
  auto compressed_row = [&](size_t s, int r) -> const uint8_t* {
    return cache.page(st.seqs[s].block_table[r / CL.rows_per_page]) + CL.rows + static_cast<size_t>(r % CL.rows_per_page) * kv_bytes;
  };

  // Lightning indexer (§4.7): its own compressor gives keys; queries pick top-k visible rows.
  std::vector<std::vector<int>> selected(T);
  if (L.has_indexer) {
    const int ih = c.index_head_dim, nI = c.index_n_heads;
    std::vector<float> a(static_cast<size_t>(T) * 2 * ih), z(a.size());
    backend_.linear(x, T, L.indexer.compressor.wkv, a.data());
    backend_.linear(x, T, L.indexer.compressor.wgate, z.data());
    std::vector<float> qi(static_cast<size_t>(T) * nI * ih), wts(static_cast<size_t>(T) * nI);
    lin(qr.data(), T, L.indexer.wq_b, qi.data(), Lin::kQuantized);
    backend_.rope(qi.data(), T, nI, ih, pos, rope_compress_, false);
    bf(qi.data(), qi.size());
    lin(x, T, L.indexer.weights_proj, wts.data(), Lin::kBf16);
    if (rotate_index(shape)) {
      // Queries rotated like the keys (and, with an FP8 cache, rounded through FP4 like them).
      for (size_t h = 0; h < static_cast<size_t>(T) * nI; ++h) {
        float* v = &qi[h * ih];
        hadamard(v, ih, 1.0f / std::sqrt(static_cast<float>(ih)));
        bf(v, ih);
        if (shape.index_row.dtype == KvCacheDtype::kFP8) fp4_round_trip(v, ih, 32);
      }
    }
    if (release_) {  // both scales folded into the weights, in bf16
      const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ih)) / std::sqrt(static_cast<double>(nI)));
      for (float& v : wts) v = round_bf16(v * wscale);
    } else {
      const float wscale = 1.0f / std::sqrt(static_cast<float>(nI));
      for (float& v : wts) v *= wscale;
    }
    tap(layer, "iq", qi.data(), qi.size());
    tap(layer, "iw", wts.data(), wts.size());
    std::vector<float> keys, score;
    for (size_t s = 0; s < nseq; ++s) {
      const int b = st.offset[s], n = st.offset[s + 1] - b;
      if (n == 0) continue;
      const SeqChunk& sq = st.seqs[s];
      compress(L.indexer.compressor, CL.index_compressor, ratio, true, ih, &a[static_cast<size_t>(b) * 2 * ih],
               &z[static_cast<size_t>(b) * 2 * ih], n, sq.start, cache.slot(sq.slot), cache, sq.block_table,
               CL.index_keys, CL.rows_per_page, true);
      // This sequence's keys, gathered from its pages into one [total, ih] array.
      const int total = static_cast<int>((sq.start + n) / ratio);
      keys.resize(static_cast<size_t>(std::max(total, 1)) * ih);
      for (int r = 0; r < total; ++r)
        shape.index_row.decode(cache.page(sq.block_table[r / CL.rows_per_page]) + CL.index_keys +
                                   static_cast<size_t>(r % CL.rows_per_page) * key_bytes,
                               &keys[static_cast<size_t>(r) * ih]);
      std::vector<int> nvis(n);
      for (int t = 0; t < n; ++t) nvis[t] = std::min<int>(static_cast<int>((pos[b + t] + 1) / ratio), total);
      const int stride = std::max(total, 1);
      score.resize(static_cast<size_t>(n) * stride);
      if (release_) {
        // The official code's bf16 chain: bf(q.k) -> relu -> bf(* w) -> bf(sum over heads).
        for (int t = 0; t < n; ++t)
          for (int w = 0; w < nvis[t]; ++w) {
            float sum = 0.0f;
            for (int h = 0; h < nI; ++h) {
              const float* qv = &qi[(static_cast<size_t>(b + t) * nI + h) * ih];
              float d = 0.0f;
              for (int i = 0; i < ih; ++i) d += qv[i] * keys[static_cast<size_t>(w) * ih + i];
              sum += round_bf16(std::max(round_bf16(d), 0.0f) * wts[static_cast<size_t>(b + t) * nI + h]);
            }
            score[static_cast<size_t>(t) * stride + w] = round_bf16(sum);
          }
      } else {
        backend_.indexer_scores(&qi[static_cast<size_t>(b) * nI * ih], &wts[static_cast<size_t>(b) * nI], n, nI, ih,
                                keys.data(), nvis.data(), 1.0f / std::sqrt(static_cast<float>(ih)), score.data(),
                                stride);
      }
      for (int t = 0; t < n; ++t) {
        std::vector<int> idx = topk_indices(&score[static_cast<size_t>(t) * stride], nvis[t], c.index_topk);
        std::sort(idx.begin(), idx.end());  // attend in row order: a fixed summation order
        selected[b + t] = std::move(idx);
      }
      if (tap_) {  // observation only: [n, index_topk], ascending, -1 past the visible rows
        std::vector<float> ids(static_cast<size_t>(n) * c.index_topk, -1.0f);
        for (int t = 0; t < n; ++t)
          for (size_t j = 0; j < selected[b + t].size(); ++j)
            ids[static_cast<size_t>(t) * c.index_topk + j] = static_cast<float>(selected[b + t][j]);
        tap(layer, "isel", ids.data(), ids.size());
      }
    }
  }

  // KV rows each query attends to: window rows (oldest first), then compressed rows (§4.5). Window
  // rows before the chunk come from the sequence's ring, the chunk's own rows from `kv`. Stored rows
  // are read in place when the cache is fp32, else decoded once per sequence into `decoded`.
  const int W = c.sliding_window;
  const bool in_place = shape.kv_row.dtype == KvCacheDtype::kF32;
  std::vector<std::vector<float>> decoded(nseq);
  std::vector<const float*> rows;
  std::vector<int> row_begin(T + 1, 0), at;
  for (size_t s = 0; s < nseq; ++s) {
    const int b = st.offset[s], e = st.offset[s + 1];
    if (b == e) continue;
    const int64_t p0 = st.seqs[s].start;
    const uint8_t* ring = cache.slot(st.seqs[s].slot) + CL.window;
    auto stored_ring_row = [&](int64_t p) { return ring + static_cast<size_t>(p % W) * kv_bytes; };
    const int64_t ring_first = std::max<int64_t>(0, p0 - W + 1);  // the chunk reads ring positions [ring_first, p0)
    const int ring_rows = in_place ? 0 : static_cast<int>(p0 - ring_first);
    // Compressed rows this sequence's queries read, numbered in first-use order.
    int n_comp = 0;
    at.assign(kind == AttentionKind::kSliding ? 0 : static_cast<size_t>((pos[e - 1] + 1) / ratio), -1);
    if (kind == AttentionKind::kHca) {
      for (int& a : at) a = n_comp++;
    } else if (kind == AttentionKind::kCsa) {
      for (int t = b; t < e; ++t)
        for (int r : selected[t])
          if (at[r] < 0) at[r] = n_comp++;
    }
    std::vector<float>& buf = decoded[s];
    if (!in_place) {
      buf.resize(static_cast<size_t>(ring_rows + n_comp) * hd);
      for (int64_t p = ring_first; p < p0; ++p) shape.kv_row.decode(stored_ring_row(p), &buf[static_cast<size_t>(p - ring_first) * hd]);
      for (size_t r = 0; r < at.size(); ++r)
        if (at[r] >= 0) shape.kv_row.decode(compressed_row(s, static_cast<int>(r)), &buf[static_cast<size_t>(ring_rows + at[r]) * hd]);
    }
    auto ring_row = [&](int64_t p) -> const float* {
      return in_place ? reinterpret_cast<const float*>(stored_ring_row(p)) : &buf[static_cast<size_t>(p - ring_first) * hd];
    };
    auto comp_row = [&](int r) -> const float* {
      return in_place ? reinterpret_cast<const float*>(compressed_row(s, r)) : &buf[static_cast<size_t>(ring_rows + at[r]) * hd];
    };
    for (int t = b; t < e; ++t) {
      row_begin[t] = static_cast<int>(rows.size());
      const int64_t first = std::max<int64_t>(0, pos[t] - W + 1);
      for (int64_t p = first; p <= pos[t]; ++p)
        rows.push_back(p < p0 ? ring_row(p) : &kv[static_cast<size_t>(b + (p - p0)) * hd]);
      if (kind == AttentionKind::kHca) {
        const int n = static_cast<int>((pos[t] + 1) / ratio);
        for (int r = 0; r < n; ++r) rows.push_back(comp_row(r));
      } else if (kind == AttentionKind::kCsa) {
        for (int r : selected[t]) rows.push_back(comp_row(r));
      }
    }
  }
  row_begin[T] = static_cast<int>(rows.size());
  std::vector<float> o(static_cast<size_t>(T) * H * hd);
  const float att_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (release_) {
    // The official code's order: fp32 scores, max, exp, the sink only in the denominator, normalized
    // fp32 probabilities times V.
    std::vector<float> sc;
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const float* qv = &q[(static_cast<size_t>(t) * H + h) * hd];
        float* ov = &o[(static_cast<size_t>(t) * H + h) * hd];
        const int b = row_begin[t], e = row_begin[t + 1];
        sc.resize(static_cast<size_t>(e - b));
        float mx = -INFINITY;
        for (int r = b; r < e; ++r) {
          float d = 0.0f;
          for (int i = 0; i < hd; ++i) d += qv[i] * rows[r][i];
          sc[r - b] = d * att_scale;
          mx = std::max(mx, sc[r - b]);
        }
        float sum = 0.0f;
        for (int r = b; r < e; ++r) {
          sc[r - b] = std::exp(sc[r - b] - mx);
          sum += sc[r - b];
        }
        sum += std::exp(L.attn_sink[h] - mx);
        std::fill(ov, ov + hd, 0.0f);
        for (int r = b; r < e; ++r) {
          const float p = sc[r - b] / sum;
          for (int i = 0; i < hd; ++i) ov[i] += p * rows[r][i];
        }
      }
  } else {
    backend_.sink_attention(q.data(), T, H, hd, rows, row_begin, L.attn_sink.data(), att_scale, o.data());
  }
  // Now that every query has read the ring, store each sequence's newest W raw rows in it.
  for (size_t s = 0; s < nseq; ++s) {
    const int b = st.offset[s], e = st.offset[s + 1];
    uint8_t* ring = cache.slot(st.seqs[s].slot) + CL.window;
    for (int t = std::max(b, e - W); t < e; ++t)
      shape.kv_row.encode(&kv[static_cast<size_t>(t) * hd], ring + static_cast<size_t>(pos[t] % W) * kv_bytes);
  }
  bf(o.data(), o.size());
  tap(layer, "o", o.data(), o.size());
  // V carried RoPE on its tail; rotating the output back by the query position makes it relative.
  backend_.rope(o.data(), T, H, hd, pos, rope, true);
  bf(o.data(), o.size());
  tap(layer, "o_rot", o.data(), o.size());

  // Grouped low-rank output projection: heads split into o_groups groups, each to o_lora_rank.
  const int G = c.o_groups, gw = H * hd / G, R = c.o_lora_rank;
  std::vector<float> gin(static_cast<size_t>(T) * gw), gout(static_cast<size_t>(T) * R), zo(static_cast<size_t>(T) * G * R);
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < T; ++t)
      std::memcpy(&gin[static_cast<size_t>(t) * gw], &o[static_cast<size_t>(t) * H * hd + static_cast<size_t>(g) * gw],
                  gw * sizeof(float));
    lin(gin.data(), T, L.wo_a[g], gout.data(), Lin::kBf16);
    for (int t = 0; t < T; ++t)
      std::memcpy(&zo[(static_cast<size_t>(t) * G + g) * R], &gout[static_cast<size_t>(t) * R], R * sizeof(float));
  }
  tap(layer, "zo", zo.data(), zo.size());
  lin(zo.data(), T, L.wo_b, out, Lin::kQuantized);
}

void DeepSeekV4::moe(const LayerWeights& L, int layer, const float* x, int T, std::span<const int32_t> tokens,
                     float* out) const {
  const ModelConfig& c = config_;
  const int D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
  std::vector<float> logits(static_cast<size_t>(T) * E);
  backend_.linear(x, T, L.gate, logits.data());
  // Router scores (§4.8), then per-token selection: hash table or top-k of score + bias.
  std::vector<int> sel(static_cast<size_t>(T) * K);
  std::vector<float> wsel(static_cast<size_t>(T) * K);
  std::vector<float> biased(E);
  for (int t = 0; t < T; ++t) {
    float* s = &logits[static_cast<size_t>(t) * E];
    switch (c.scoring_func) {
      case ScoringFunc::kSqrtSoftplus:
        for (int e = 0; e < E; ++e) s[e] = std::sqrt(s[e] > 20.0f ? s[e] : std::log1p(std::exp(s[e])));
        break;
      case ScoringFunc::kSigmoid:
        for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
        break;
      case ScoringFunc::kSoftmax: {
        const float mx = *std::max_element(s, s + E);
        float sum = 0.0f;
        for (int e = 0; e < E; ++e) sum += (s[e] = std::exp(s[e] - mx));
        for (int e = 0; e < E; ++e) s[e] /= sum;
        break;
      }
    }
    int* idx = &sel[static_cast<size_t>(t) * K];
    if (c.hash_moe[layer]) {
      for (int k = 0; k < K; ++k) idx[k] = L.tid2eid[static_cast<size_t>(tokens[t]) * K + k];
    } else {
      for (int e = 0; e < E; ++e) biased[e] = s[e] + L.gate_bias[e];  // bias steers selection only
      const std::vector<int> top = topk_indices(biased.data(), E, K);
      for (int k = 0; k < K; ++k) idx[k] = top[k];
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += s[idx[k]];
    for (int k = 0; k < K; ++k)
      wsel[static_cast<size_t>(t) * K + k] =
          s[idx[k]] / (sum + 1e-20f) * static_cast<float>(c.routed_scaling_factor);
  }
  if (tap_) {  // observation only: routing is not overwritten
    tap(layer, "moe_w", wsel.data(), wsel.size());
    std::vector<float> ids(sel.begin(), sel.end());
    tap(layer, "moe_i", ids.data(), ids.size());
  }
  // Routed experts in ascending expert order; each token's sum therefore has a fixed order. One
  // pass buckets the (token, slot) choices by expert, keeping token order inside a bucket.
  std::vector<int> bucket_begin(static_cast<size_t>(E) + 1, 0), who(static_cast<size_t>(T) * K);
  std::vector<float> wgt(who.size());
  for (int i : sel) ++bucket_begin[static_cast<size_t>(i) + 1];
  for (int e = 0; e < E; ++e) bucket_begin[e + 1] += bucket_begin[e];
  {
    std::vector<int> fill(bucket_begin.begin(), bucket_begin.end() - 1);
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>(t) * K + k;
        const int at = fill[sel[i]]++;
        who[at] = t;
        wgt[at] = wsel[i];
      }
  }
  std::fill(out, out + static_cast<size_t>(T) * D, 0.0f);
  const float limit = static_cast<float>(c.swiglu_limit);
  std::vector<float> xin, yout;
  for (int e = 0; e < E; ++e) {
    const int b = bucket_begin[e], n = bucket_begin[e + 1] - b;
    if (n == 0) continue;
    xin.resize(static_cast<size_t>(n) * D);
    yout.resize(static_cast<size_t>(n) * D);
    for (int i = 0; i < n; ++i)
      std::memcpy(&xin[static_cast<size_t>(i) * D], x + static_cast<size_t>(who[b + i]) * D, D * sizeof(float));
    if (release_) {
      // The official order: the routing weight multiplies inside the expert, before w2.
      release_expert(xin.data(), n, L.experts[e], &wgt[b], yout.data());
      for (int i = 0; i < n; ++i)
        for (int d = 0; d < D; ++d) out[static_cast<size_t>(who[b + i]) * D + d] += yout[static_cast<size_t>(i) * D + d];
    } else {
      backend_.swiglu_expert(xin.data(), n, L.experts[e], limit, yout.data());
      for (int i = 0; i < n; ++i)
        for (int d = 0; d < D; ++d)
          out[static_cast<size_t>(who[b + i]) * D + d] += yout[static_cast<size_t>(i) * D + d] * wgt[b + i];
    }
  }
  yout.resize(static_cast<size_t>(T) * D);
  if (release_) {
    // The combination is accumulated in fp32 and rounded to bf16 once.
    release_expert(x, T, L.shared, nullptr, yout.data());
    for (size_t i = 0; i < static_cast<size_t>(T) * D; ++i) out[i] = round_bf16(out[i] + yout[i]);
  } else {
    backend_.swiglu_expert(x, T, L.shared, limit, yout.data());
    for (size_t i = 0; i < static_cast<size_t>(T) * D; ++i) out[i] += yout[i];
  }
}

}  // namespace deepinfer::model
