// Helpers shared by the GPU model tests (model_test.cc, fixture_test.cc): logits of a sequence on
// the CPU backend and on a CudaModel, their comparison (max abs, relative rms, argmax agreement),
// and the bf16 rounding of GEMM weights that puts the CPU on the GPU's weights.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_model.h"
#include "model/deepseek_v4.h"
#include "model/numerics.h"
#include "model/state_cache.h"

namespace deepinfer::backend::cuda {

using model::LogitRows;
using model::ModelConfig;
using model::ModelWeights;
using model::SeqChunk;

// Calls f on every expert matrix of a layer: w1, w2, w3 of each routed expert, then the shared one's.
template <class F>
void for_each_expert_matrix(model::LayerWeights& L, F&& f) {
  for (model::ExpertWeights& e : L.experts) {
    f(e.w1);
    f(e.w2);
    f(e.w3);
  }
  f(L.shared.w1);
  f(L.shared.w2);
  f(L.shared.w3);
}

// The GPU keeps GEMM weights as bf16 (mHC mixing matrices stay fp32): the CPU reference gets the
// same values.
inline void round_gemm_weights_to_bf16(ModelWeights& w) {
  auto r = [](model::Matrix& m) { model::round_bf16(m.data.data(), m.data.size()); };
  auto comp = [&](model::CompressorWeights& c) {
    r(c.wkv);
    r(c.wgate);
  };
  r(w.embed);
  r(w.head);
  for (model::LayerWeights& L : w.layers) {
    r(L.wq_a);
    r(L.wq_b);
    r(L.wkv);
    for (model::Matrix& g : L.wo_a) r(g);
    r(L.wo_b);
    if (L.has_compressor) comp(L.compressor);
    if (L.has_indexer) {
      comp(L.indexer.compressor);
      r(L.indexer.wq_b);
      r(L.indexer.weights_proj);
    }
    r(L.gate);
    for_each_expert_matrix(L, r);
  }
}

struct Diff {
  double max_abs = 0, rel_rms = 0;
  int rows = 0, argmax_equal = 0;
  int worst_row = -1;  // the row holding max_abs
  double worst_row_rel_rms = 0;
};
inline Diff compare(const std::vector<float>& got, const std::vector<float>& want, int vocab) {
  Diff d;
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  d.rows = static_cast<int>(want.size() / vocab);
  for (int r = 0; r < d.rows; ++r) {
    const float* g = &got[static_cast<size_t>(r) * vocab];
    const float* w = &want[static_cast<size_t>(r) * vocab];
    int ag = 0, aw = 0;
    double rn = 0, rd = 0;
    for (int v = 0; v < vocab; ++v) {
      const double e = static_cast<double>(g[v]) - w[v];
      if (std::fabs(e) > d.max_abs) {
        d.max_abs = std::fabs(e);
        d.worst_row = r;
      }
      rn += e * e;
      rd += static_cast<double>(w[v]) * w[v];
      if (g[v] > g[ag]) ag = v;
      if (w[v] > w[aw]) aw = v;
    }
    num += rn;
    den += rd;
    if (r == d.worst_row) d.worst_row_rel_rms = std::sqrt(rn / std::max(rd, 1e-30));
    d.argmax_equal += ag == aw;
  }
  d.rel_rms = std::sqrt(num / std::max(den, 1e-30));
  return d;
}

inline std::vector<int32_t> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int& x : t) x = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  return t;
}

inline std::vector<int> identity_table(int n) {
  std::vector<int> b(n);
  for (int i = 0; i < n; ++i) b[i] = i;
  return b;
}

// Logits of every position of `seq`, fed in chunks of `chunk` (0: at once) through the CPU backend.
// With `bf16_activations`, every activation the forward exposes through its tap (block inputs and
// outputs, q, KV, attention output, ...: deepseek_v4.h) is rounded to bf16: a perturbation of the
// size the GPU's bf16 GEMM inputs make, to measure how strongly a model amplifies such noise.
inline std::vector<float> cpu_logits(const ModelConfig& c, const ModelWeights& w, const std::vector<int32_t>& seq,
                              size_t chunk, int blocks, bool bf16_activations = false,
                              model::Numerics numerics = model::Numerics::kExact, bool nudge = false,
                              model::KvCacheDtype kv_dtype = model::KvCacheDtype::kBF16) {
  auto backend = make_cpu_backend();
  model::DeepSeekV4 net(c, w, *backend, numerics);
  if (bf16_activations) net.set_tap([](const std::string&, float* d, size_t n) { model::round_bf16(d, n); });
  // `nudge`: layer 0's attention input moved by about one bf16 ulp (x (1 + 2^-8), rounded), the
  // smallest perturbation release numerics can see: measures how strongly it amplifies noise.
  if (nudge)
    net.set_tap([](const std::string& name, float* d, size_t n) {
      if (name == "L0.attn_in")
        for (size_t i = 0; i < n; ++i) d[i] = model::round_bf16(d[i] * (1.0f + 1.0f / 256.0f));
    });
  auto shape = model::make_state_cache_shape(c, model::default_block_size(c), kv_dtype);
  EXPECT_TRUE(shape.is_ok());
  model::StateStorage cache(*shape, 1, blocks);
  const std::vector<int> table = identity_table(blocks);
  std::vector<float> all, part;
  const size_t step = chunk ? chunk : seq.size();
  for (size_t b = 0; b < seq.size(); b += step) {
    const size_t n = std::min(step, seq.size() - b);
    SeqChunk sc{std::span<const int32_t>(seq).subspan(b, n), static_cast<int64_t>(b), 0, table, LogitRows::kAll};
    EXPECT_TRUE(net.forward(std::span<const SeqChunk>(&sc, 1), cache, &part).is_ok());
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

inline std::vector<float> gpu_logits(CudaModel& m, const std::vector<int32_t>& seq, size_t chunk, int slot, int blocks,
                              int first_block = 0) {
  m.reset_slot(slot);
  std::vector<int> table(blocks);
  for (int i = 0; i < blocks; ++i) table[i] = first_block + i;
  std::vector<float> all, part;
  const size_t step = chunk ? chunk : seq.size();
  for (size_t b = 0; b < seq.size(); b += step) {
    const size_t n = std::min(step, seq.size() - b);
    SeqChunk sc{std::span<const int32_t>(seq).subspan(b, n), static_cast<int64_t>(b), slot, table, LogitRows::kAll};
    const Status st = m.forward(std::span<const SeqChunk>(&sc, 1), &part);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

inline void report(const char* what, const Diff& d) {
  std::printf("%s: rows %d, max abs %.4g (row %d, whose rel rms is %.3g), rel rms %.4g, argmax equal %d/%d\n", what,
              d.rows, d.max_abs, d.worst_row, d.worst_row_rel_rms, d.rel_rms, d.argmax_equal, d.rows);
}

}  // namespace deepinfer::backend::cuda
