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

DeepSeekV4::DeepSeekV4(const ModelConfig& config, const ModelWeights& weights, backend::Backend& backend)
    : config_(config),
      weights_(weights),
      backend_(backend),
      rope_main_(backend::make_rope_table(config.rope_main, config.rope_head_dim)),
      rope_compress_(backend::make_rope_table(config.rope_compress, config.rope_head_dim)) {}

DecodeState DeepSeekV4::new_state() const {
  DecodeState s;
  s.layers.resize(config_.num_layers);
  return s;
}

Status DeepSeekV4::forward(DecodeState& state, std::span<const int32_t> tokens, std::vector<float>* logits) const {
  const ModelConfig& c = config_;
  const int T = static_cast<int>(tokens.size());
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      return Status::invalid_argument("token id " + std::to_string(tokens[t]) + " at position " +
                                      std::to_string(state.num_tokens + t) + " is outside the vocabulary [0, " +
                                      std::to_string(c.vocab_size) + ")");
  if (state.layers.size() != static_cast<size_t>(c.num_layers))
    return Status::invalid_argument("decode state does not belong to this model");
  logits->assign(static_cast<size_t>(T) * c.vocab_size, 0.0f);
  if (T == 0) return Status::ok();

  const int D = c.hidden_size, hc = c.hc_mult;
  std::vector<int64_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = state.num_tokens + t;

  // Residual streams X[T, hc, D]: hc copies of the embedding (§4.1).
  std::vector<float> X(static_cast<size_t>(T) * hc * D);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < hc; ++i)
      std::memcpy(&X[(static_cast<size_t>(t) * hc + i) * D], &weights_.embed.data[static_cast<size_t>(tokens[t]) * D],
                  D * sizeof(float));

  std::vector<float> collapsed(static_cast<size_t>(T) * D), normed(collapsed.size()), sub_out(collapsed.size());
  HcMix mix;
  const float norm_eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = weights_.layers[l];
    backend_.hc_pre(X.data(), T, hc, D, L.hc_attn, c.hc_sinkhorn_iters, hc_eps, norm_eps, collapsed.data(), &mix);
    backend_.rms_norm(collapsed.data(), T, D, L.attn_norm.data(), norm_eps, normed.data());
    attention(L, l, state.layers[l], normed.data(), T, pos.data(), sub_out.data());
    backend_.hc_post(X.data(), sub_out.data(), T, hc, D, mix);

    backend_.hc_pre(X.data(), T, hc, D, L.hc_ffn, c.hc_sinkhorn_iters, hc_eps, norm_eps, collapsed.data(), &mix);
    backend_.rms_norm(collapsed.data(), T, D, L.ffn_norm.data(), norm_eps, normed.data());
    moe(L, l, normed.data(), T, tokens, sub_out.data());
    backend_.hc_post(X.data(), sub_out.data(), T, hc, D, mix);
  }
  backend_.hc_head(X.data(), T, hc, D, weights_.hc_head_fn, weights_.hc_head_base.data(),
                   weights_.hc_head_scale.data(), hc_eps, norm_eps, collapsed.data());
  backend_.rms_norm(collapsed.data(), T, D, weights_.norm.data(), norm_eps, normed.data());
  backend_.linear(normed.data(), T, weights_.head, logits->data());
  state.num_tokens += T;
  return Status::ok();
}

// Feeds T tokens' projections through one compressor (§4.6) and appends one pooled row for every
// window that closes. HCA (overlap=false): a row pools the `ratio` tokens of its window. CSA
// (overlap=true, width = 2*head): a row pools series A of the previous window and series B of its
// own, 2*ratio slots under one softmax per channel. New rows are normed, rotated to the position of
// their window's first token and appended to `rows_out` ([rows, head]).
void DeepSeekV4::run_compressor(const CompressorWeights& w, int ratio, bool overlap, int head, const float* x, int T,
                                const int64_t* pos, CompressorState& cs, std::vector<float>* rows_out) const {
  DI_CHECK(rows_out->size() == static_cast<size_t>(cs.n_rows) * head, "compressed rows out of step with their compressor");
  const int width = overlap ? 2 * head : head;
  std::vector<float> a(static_cast<size_t>(T) * width), z(a.size());
  backend_.linear(x, T, w.wkv, a.data());
  backend_.linear(x, T, w.wgate, z.data());
  cs.buf_kv.resize(static_cast<size_t>(ratio) * width);
  cs.buf_gate.resize(cs.buf_kv.size());
  std::vector<const float*> kv_ptr, gate_ptr;
  std::vector<float> row(head);
  for (int t = 0; t < T; ++t) {
    const int slot = static_cast<int>(pos[t] % ratio);
    DI_CHECK(slot == cs.n_buf, "compressor buffer out of step: slot %d, buffered %d", slot, cs.n_buf);
    float* bk = &cs.buf_kv[static_cast<size_t>(slot) * width];
    float* bg = &cs.buf_gate[static_cast<size_t>(slot) * width];
    const float* ape = &w.ape[static_cast<size_t>(slot) * width];
    for (int i = 0; i < width; ++i) {
      bk[i] = a[static_cast<size_t>(t) * width + i];
      bg[i] = z[static_cast<size_t>(t) * width + i] + ape[i];
    }
    if (++cs.n_buf < ratio) continue;
    // Window closed: pool it.
    kv_ptr.clear();
    gate_ptr.clear();
    if (overlap) {
      for (int s = 0; s < ratio; ++s) {  // series A of the previous window (absent for row 0)
        kv_ptr.push_back(cs.has_prev ? &cs.prev_kv[static_cast<size_t>(s) * head] : nullptr);
        gate_ptr.push_back(cs.has_prev ? &cs.prev_gate[static_cast<size_t>(s) * head] : nullptr);
      }
      for (int s = 0; s < ratio; ++s) {  // series B of this window
        kv_ptr.push_back(&cs.buf_kv[static_cast<size_t>(s) * width + head]);
        gate_ptr.push_back(&cs.buf_gate[static_cast<size_t>(s) * width + head]);
      }
    } else {
      for (int s = 0; s < ratio; ++s) {
        kv_ptr.push_back(&cs.buf_kv[static_cast<size_t>(s) * width]);
        gate_ptr.push_back(&cs.buf_gate[static_cast<size_t>(s) * width]);
      }
    }
    backend_.compress_pool(kv_ptr, gate_ptr, 1, static_cast<int>(kv_ptr.size()), head, row.data());
    rows_out->insert(rows_out->end(), row.begin(), row.end());
    if (overlap) {  // keep series A of this window for the next row
      cs.prev_kv.resize(static_cast<size_t>(ratio) * head);
      cs.prev_gate.resize(cs.prev_kv.size());
      for (int s = 0; s < ratio; ++s) {
        std::memcpy(&cs.prev_kv[static_cast<size_t>(s) * head], &cs.buf_kv[static_cast<size_t>(s) * width],
                    head * sizeof(float));
        std::memcpy(&cs.prev_gate[static_cast<size_t>(s) * head], &cs.buf_gate[static_cast<size_t>(s) * width],
                    head * sizeof(float));
      }
      cs.has_prev = true;
    }
    cs.n_buf = 0;
  }
  const int first_row = cs.n_rows;
  const int n_new = static_cast<int>(rows_out->size() / head) - first_row;
  if (n_new == 0) return;
  float* fresh = rows_out->data() + static_cast<size_t>(first_row) * head;
  backend_.rms_norm(fresh, n_new, head, w.norm.data(), static_cast<float>(config_.rms_norm_eps), fresh);
  std::vector<int64_t> rpos(n_new);
  for (int r = 0; r < n_new; ++r) rpos[r] = static_cast<int64_t>(first_row + r) * ratio;
  backend_.rope(fresh, n_new, 1, head, rpos.data(), rope_compress_, false);
  cs.n_rows += n_new;
}

void DeepSeekV4::attention(const LayerWeights& L, int layer, LayerState& S, const float* x, int T, const int64_t* pos,
                           float* out) const {
  const ModelConfig& c = config_;
  const int H = c.num_heads, hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const AttentionKind kind = c.layer_kinds[layer];
  const int ratio = c.compress_ratio[layer];
  const backend::RopeTable& rope = kind == AttentionKind::kSliding ? rope_main_ : rope_compress_;

  // Queries (§4.4): low-rank q with q_norm, per-head unweighted RMS norm, RoPE on the tail.
  std::vector<float> qr(static_cast<size_t>(T) * c.q_lora_rank);
  backend_.linear(x, T, L.wq_a, qr.data());
  backend_.rms_norm(qr.data(), T, c.q_lora_rank, L.q_norm.data(), eps, qr.data());
  std::vector<float> q(static_cast<size_t>(T) * H * hd);
  backend_.linear(qr.data(), T, L.wq_b, q.data());
  backend_.rms_norm(q.data(), T * H, hd, nullptr, eps, q.data());
  backend_.rope(q.data(), T, H, hd, pos, rope, false);

  // The single shared KV head: K == V.
  std::vector<float> kv(static_cast<size_t>(T) * hd);
  backend_.linear(x, T, L.wkv, kv.data());
  backend_.rms_norm(kv.data(), T, hd, L.kv_norm.data(), eps, kv.data());
  backend_.rope(kv.data(), T, 1, hd, pos, rope, false);

  // Compressed rows (§4.6): emitted for every window that closes inside this chunk.
  if (L.has_compressor)
    run_compressor(L.compressor, ratio, kind == AttentionKind::kCsa, hd, x, T, pos, S.compressor, &S.compressed);

  // Lightning indexer (§4.7): its own compressor gives keys; queries pick top-k visible rows.
  std::vector<std::vector<int>> selected(T);
  if (L.has_indexer) {
    const int ih = c.index_head_dim, nI = c.index_n_heads;
    run_compressor(L.indexer.compressor, ratio, true, ih, x, T, pos, S.index_compressor, &S.index_keys);
    std::vector<float> qi(static_cast<size_t>(T) * nI * ih), wts(static_cast<size_t>(T) * nI);
    backend_.linear(qr.data(), T, L.indexer.wq_b, qi.data());
    backend_.rope(qi.data(), T, nI, ih, pos, rope_compress_, false);
    backend_.linear(x, T, L.indexer.weights_proj, wts.data());
    const float wscale = 1.0f / std::sqrt(static_cast<float>(nI));
    for (float& v : wts) v *= wscale;
    const int total = S.index_compressor.n_rows;
    std::vector<int> nvis(T);
    for (int t = 0; t < T; ++t) nvis[t] = std::min<int>(static_cast<int>((pos[t] + 1) / ratio), total);
    std::vector<float> score(static_cast<size_t>(T) * std::max(total, 1));
    backend_.indexer_scores(qi.data(), wts.data(), T, nI, ih, S.index_keys.data(), nvis.data(),
                            1.0f / std::sqrt(static_cast<float>(ih)), score.data(), std::max(total, 1));
    for (int t = 0; t < T; ++t) {
      const float* sc = &score[static_cast<size_t>(t) * std::max(total, 1)];
      std::vector<int> idx = topk_indices(sc, nvis[t], c.index_topk);
      std::sort(idx.begin(), idx.end());  // attend in row order: a fixed summation order
      selected[t] = std::move(idx);
    }
  }

  // KV rows each query attends to: window rows (oldest first), then compressed rows (§4.5).
  const int W = c.sliding_window;
  const int n_old = static_cast<int>(S.window.size() / hd);
  const int64_t p0 = pos[0];
  std::vector<const float*> rows;
  std::vector<int> row_begin(T + 1, 0);
  for (int t = 0; t < T; ++t) {
    row_begin[t] = static_cast<int>(rows.size());
    const int64_t first = std::max<int64_t>(0, pos[t] - W + 1);
    for (int64_t p = first; p <= pos[t]; ++p) {
      if (p < p0) {
        const int64_t i = n_old - (p0 - p);
        DI_CHECK(i >= 0, "window row for position %lld was evicted", static_cast<long long>(p));
        rows.push_back(&S.window[static_cast<size_t>(i) * hd]);
      } else {
        rows.push_back(&kv[static_cast<size_t>(p - p0) * hd]);
      }
    }
    if (kind == AttentionKind::kHca) {
      const int n = static_cast<int>((pos[t] + 1) / ratio);
      for (int r = 0; r < n; ++r) rows.push_back(&S.compressed[static_cast<size_t>(r) * hd]);
    } else if (kind == AttentionKind::kCsa) {
      for (int r : selected[t]) rows.push_back(&S.compressed[static_cast<size_t>(r) * hd]);
    }
  }
  row_begin[T] = static_cast<int>(rows.size());
  std::vector<float> o(static_cast<size_t>(T) * H * hd);
  backend_.sink_attention(q.data(), T, H, hd, rows, row_begin, L.attn_sink.data(), 1.0f / std::sqrt(static_cast<float>(hd)),
                          o.data());
  // V carried RoPE on its tail; rotating the output back by the query position makes it relative.
  backend_.rope(o.data(), T, H, hd, pos, rope, true);

  // Grouped low-rank output projection: heads split into o_groups groups, each to o_lora_rank.
  const int G = c.o_groups, gw = H * hd / G, R = c.o_lora_rank;
  std::vector<float> gin(static_cast<size_t>(T) * gw), gout(static_cast<size_t>(T) * R), z(static_cast<size_t>(T) * G * R);
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < T; ++t)
      std::memcpy(&gin[static_cast<size_t>(t) * gw], &o[static_cast<size_t>(t) * H * hd + static_cast<size_t>(g) * gw],
                  gw * sizeof(float));
    backend_.linear(gin.data(), T, L.wo_a[g], gout.data());
    for (int t = 0; t < T; ++t)
      std::memcpy(&z[(static_cast<size_t>(t) * G + g) * R], &gout[static_cast<size_t>(t) * R], R * sizeof(float));
  }
  backend_.linear(z.data(), T, L.wo_b, out);

  // Keep the last W-1 raw rows for the next chunk.
  const int keep = W - 1;
  std::vector<float> win;
  const int total_rows = n_old + T;
  const int start = std::max(0, total_rows - keep);
  win.reserve(static_cast<size_t>(total_rows - start) * hd);
  for (int r = start; r < total_rows; ++r) {
    const float* src = r < n_old ? &S.window[static_cast<size_t>(r) * hd] : &kv[static_cast<size_t>(r - n_old) * hd];
    win.insert(win.end(), src, src + hd);
  }
  S.window = std::move(win);
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
  // Routed experts in ascending expert order; each token's sum therefore has a fixed order.
  std::fill(out, out + static_cast<size_t>(T) * D, 0.0f);
  const float limit = static_cast<float>(c.swiglu_limit);
  std::vector<float> xin, yout;
  std::vector<int> who;
  std::vector<float> wgt;
  for (int e = 0; e < E; ++e) {
    who.clear();
    wgt.clear();
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < K; ++k)
        if (sel[static_cast<size_t>(t) * K + k] == e) {
          who.push_back(t);
          wgt.push_back(wsel[static_cast<size_t>(t) * K + k]);
        }
    if (who.empty()) continue;
    const int n = static_cast<int>(who.size());
    xin.resize(static_cast<size_t>(n) * D);
    yout.resize(static_cast<size_t>(n) * D);
    for (int i = 0; i < n; ++i) std::memcpy(&xin[static_cast<size_t>(i) * D], x + static_cast<size_t>(who[i]) * D, D * sizeof(float));
    backend_.swiglu_expert(xin.data(), n, L.experts[e], limit, yout.data());
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < D; ++d) out[static_cast<size_t>(who[i]) * D + d] += yout[static_cast<size_t>(i) * D + d] * wgt[i];
  }
  yout.resize(static_cast<size_t>(T) * D);
  backend_.swiglu_expert(x, T, L.shared, limit, yout.data());
  for (size_t i = 0; i < static_cast<size_t>(T) * D; ++i) out[i] += yout[i];
}

}  // namespace deepinfer::model
