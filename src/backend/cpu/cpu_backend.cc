// CpuBackend: the reference implementation of every Backend op, fp32 throughout.
// Reductions run in a fixed order per output row (see backend.h), threads split rows with OpenMP.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "base/check.h"

namespace deepinfer::backend {

RopeTable make_rope_table(const model::RopeParams& p, int rope_dim) {
  // Mirrors transformers' fp32 computation: base ** (arange(0, dim, 2) / dim), and for YaRN the
  // linear-ramp blend between interpolated (/factor) and extrapolated frequencies.
  RopeTable t;
  t.rope_dim = rope_dim;
  t.attention_factor = static_cast<float>(p.attention_factor);
  const int half = rope_dim / 2;
  t.inv_freq.resize(half);
  const float base = static_cast<float>(p.theta);
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    pos_freqs[i] = std::pow(base, e);
  }
  if (!p.yarn) {
    for (int i = 0; i < half; ++i) t.inv_freq[i] = 1.0f / pos_freqs[i];
    return t;
  }
  const double dim = rope_dim;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(p.original_max_position_embeddings / (rotations * 2 * M_PI))) / (2 * std::log(p.theta));
  };
  double low = std::floor(correction_dim(p.beta_fast));
  double high = std::ceil(correction_dim(p.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  const float factor = static_cast<float>(p.factor);
  for (int i = 0; i < half; ++i) {
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrap_factor = 1.0f - ramp;
    const float extrap = 1.0f / pos_freqs[i];
    const float interp = 1.0f / (factor * pos_freqs[i]);
    t.inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  return t;
}

namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

class CpuBackend final : public Backend {
 public:
  void linear(const float* x, int M, const model::Matrix& W, float* y) override {
    cpu::gemm_nt(x, M, W.cols, W.data.data(), W.rows, y);
  }

  void rms_norm(const float* x, int M, int n, const float* weight, float eps, float* y) override {
    for (int m = 0; m < M; ++m) {
      const float* xr = x + static_cast<size_t>(m) * n;
      float* yr = y + static_cast<size_t>(m) * n;
      float ss = 0.0f;
      for (int i = 0; i < n; ++i) ss += xr[i] * xr[i];
      const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      if (weight)
        for (int i = 0; i < n; ++i) yr[i] = weight[i] * (xr[i] * r);
      else
        for (int i = 0; i < n; ++i) yr[i] = xr[i] * r;
    }
  }

  void rope(float* x, int M, int heads, int head_dim, const int64_t* pos, const RopeTable& t, bool inverse) override {
    const int half = t.rope_dim / 2;
    std::vector<float> c(half), s(half);
    for (int m = 0; m < M; ++m) {
      const float p = static_cast<float>(pos[m]);
      for (int i = 0; i < half; ++i) {
        const float angle = t.inv_freq[i] * p;
        c[i] = std::cos(angle) * t.attention_factor;
        s[i] = std::sin(angle) * t.attention_factor;
        if (inverse) s[i] = -s[i];
      }
      for (int h = 0; h < heads; ++h) {
        float* v = x + (static_cast<size_t>(m) * heads + h) * head_dim + (head_dim - t.rope_dim);
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = b * c[i] + a * s[i];
        }
      }
    }
  }

  void hc_pre(const float* X, int M, int hc, int D, const model::HyperConnWeights& w, int iters, float hc_eps,
              float norm_eps, float* collapsed, HcMix* mix) override {
    const int width = hc * D;
    const int nmix = (2 + hc) * hc;
    std::vector<float> xn(static_cast<size_t>(M) * width), mixes(static_cast<size_t>(M) * nmix);
    rms_norm(X, M, width, nullptr, norm_eps, xn.data());
    linear(xn.data(), M, w.fn, mixes.data());
    mix->post.resize(static_cast<size_t>(M) * hc);
    mix->comb.resize(static_cast<size_t>(M) * hc * hc);
    std::vector<float> pre(hc);
    for (int m = 0; m < M; ++m) {
      const float* mx = mixes.data() + static_cast<size_t>(m) * nmix;
      for (int i = 0; i < hc; ++i) pre[i] = sigmoid(mx[i] * w.scale[0] + w.base[i]) + hc_eps;
      float* post = mix->post.data() + static_cast<size_t>(m) * hc;
      for (int i = 0; i < hc; ++i) post[i] = 2.0f * sigmoid(mx[hc + i] * w.scale[1] + w.base[hc + i]);
      float* C = mix->comb.data() + static_cast<size_t>(m) * hc * hc;
      for (int j = 0; j < hc; ++j) {  // softmax over k for each row j, then + eps
        float* row = C + j * hc;
        float mxv = -std::numeric_limits<float>::infinity();
        for (int k = 0; k < hc; ++k) {
          row[k] = mx[2 * hc + j * hc + k] * w.scale[2] + w.base[2 * hc + j * hc + k];
          mxv = std::max(mxv, row[k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < hc; ++k) {
          row[k] = std::exp(row[k] - mxv);
          sum += row[k];
        }
        for (int k = 0; k < hc; ++k) row[k] = row[k] / sum + hc_eps;
      }
      auto col_norm = [&] {
        for (int k = 0; k < hc; ++k) {
          float s = 0.0f;
          for (int j = 0; j < hc; ++j) s += C[j * hc + k];
          for (int j = 0; j < hc; ++j) C[j * hc + k] /= (s + hc_eps);
        }
      };
      auto row_norm = [&] {
        for (int j = 0; j < hc; ++j) {
          float s = 0.0f;
          for (int k = 0; k < hc; ++k) s += C[j * hc + k];
          for (int k = 0; k < hc; ++k) C[j * hc + k] /= (s + hc_eps);
        }
      };
      col_norm();
      for (int it = 0; it < iters - 1; ++it) {
        row_norm();
        col_norm();
      }
      float* out = collapsed + static_cast<size_t>(m) * D;
      const float* Xm = X + static_cast<size_t>(m) * width;
      for (int d = 0; d < D; ++d) {
        float s = 0.0f;
        for (int i = 0; i < hc; ++i) s += pre[i] * Xm[i * D + d];
        out[d] = s;
      }
    }
  }

  void hc_post(float* X, const float* o, int M, int hc, int D, const HcMix& mix) override {
    std::vector<float> old(static_cast<size_t>(hc) * D);
    for (int m = 0; m < M; ++m) {
      float* Xm = X + static_cast<size_t>(m) * hc * D;
      std::memcpy(old.data(), Xm, old.size() * sizeof(float));
      const float* post = mix.post.data() + static_cast<size_t>(m) * hc;
      const float* C = mix.comb.data() + static_cast<size_t>(m) * hc * hc;
      const float* om = o + static_cast<size_t>(m) * D;
      for (int k = 0; k < hc; ++k)
        for (int d = 0; d < D; ++d) {
          float s = 0.0f;
          for (int j = 0; j < hc; ++j) s += C[j * hc + k] * old[j * D + d];
          Xm[k * D + d] = post[k] * om[d] + s;
        }
    }
  }

  void hc_head(const float* X, int M, int hc, int D, const model::Matrix& fn, const float* base, const float* scale,
               float hc_eps, float norm_eps, float* out) override {
    const int width = hc * D;
    std::vector<float> xn(static_cast<size_t>(M) * width), mixes(static_cast<size_t>(M) * hc);
    rms_norm(X, M, width, nullptr, norm_eps, xn.data());
    linear(xn.data(), M, fn, mixes.data());
    std::vector<float> pre(hc);
    for (int m = 0; m < M; ++m) {
      for (int i = 0; i < hc; ++i) pre[i] = sigmoid(mixes[static_cast<size_t>(m) * hc + i] * scale[0] + base[i]) + hc_eps;
      const float* Xm = X + static_cast<size_t>(m) * width;
      for (int d = 0; d < D; ++d) {
        float s = 0.0f;
        for (int i = 0; i < hc; ++i) s += pre[i] * Xm[i * D + d];
        out[static_cast<size_t>(m) * D + d] = s;
      }
    }
  }

  void sink_attention(const float* q, int M, int H, int d, const std::vector<const float*>& rows,
                      const std::vector<int>& row_begin, const float* sinks, float scale, float* out) override {
    // Threads only pay off above ~100k multiply-adds (fork/join costs microseconds).
    const long long work = static_cast<long long>(row_begin[M]) * H * d;
#pragma omp parallel for schedule(dynamic, 1) if (M * H > 1 && work > (1 << 17))
    for (int mh = 0; mh < M * H; ++mh) {
      const int m = mh / H, h = mh % H;
      const float* qv = q + (static_cast<size_t>(m) * H + h) * d;
      float* o = out + (static_cast<size_t>(m) * H + h) * d;
      const int b = row_begin[m], e = row_begin[m + 1];
      thread_local std::vector<float> s;  // per OpenMP thread: no allocation per (token, head)
      s.resize(static_cast<size_t>(e - b));
      float mx = sinks[h];
      for (int r = b; r < e; ++r) {
        s[r - b] = cpu::dot(qv, rows[r], d) * scale;
        mx = std::max(mx, s[r - b]);
      }
      float denom = std::exp(sinks[h] - mx);
      for (int r = b; r < e; ++r) {
        s[r - b] = std::exp(s[r - b] - mx);
        denom += s[r - b];
      }
      for (int i = 0; i < d; ++i) o[i] = 0.0f;
      for (int r = b; r < e; ++r) {
        const float p = s[r - b] / denom;
        const float* kv = rows[r];
        for (int i = 0; i < d; ++i) o[i] += p * kv[i];
      }
    }
  }

  void compress_pool(const std::vector<const float*>& kv_ptr, const std::vector<const float*>& gate_ptr, int rows,
                     int num_slots, int width, float* out) override {
    std::vector<float> p(num_slots);
    for (int r = 0; r < rows; ++r) {
      const float* const* kv = kv_ptr.data() + static_cast<size_t>(r) * num_slots;
      const float* const* g = gate_ptr.data() + static_cast<size_t>(r) * num_slots;
      for (int c = 0; c < width; ++c) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int s = 0; s < num_slots; ++s)
          if (g[s]) mx = std::max(mx, g[s][c]);
        float sum = 0.0f;
        for (int s = 0; s < num_slots; ++s) {
          p[s] = g[s] ? std::exp(g[s][c] - mx) : 0.0f;
          sum += p[s];
        }
        float acc = 0.0f;
        for (int s = 0; s < num_slots; ++s)
          if (g[s]) acc += kv[s][c] * (p[s] / sum);
        out[static_cast<size_t>(r) * width + c] = acc;
      }
    }
  }

  void indexer_scores(const float* q, const float* weights, int M, int heads, int index_dim, const float* keys,
                      const int* num_keys, float scale, float* score, int score_stride) override {
    long long work = 0;
    for (int m = 0; m < M; ++m) work += static_cast<long long>(num_keys[m]) * heads * index_dim;
#pragma omp parallel for schedule(dynamic, 1) if (M > 1 && work > (1 << 17))
    for (int m = 0; m < M; ++m) {
      for (int w = 0; w < num_keys[m]; ++w) {
        const float* k = keys + static_cast<size_t>(w) * index_dim;
        float s = 0.0f;
        for (int h = 0; h < heads; ++h) {
          const float dp = cpu::dot(q + (static_cast<size_t>(m) * heads + h) * index_dim, k, index_dim);
          s += (std::max(dp, 0.0f) * scale) * weights[static_cast<size_t>(m) * heads + h];
        }
        score[static_cast<size_t>(m) * score_stride + w] = s;
      }
    }
  }

  void swiglu_expert(const float* x, int M, const model::ExpertWeights& e, float limit, float* y) override {
    const int inter = e.w1.rows;
    std::vector<float> g(static_cast<size_t>(M) * inter), u(static_cast<size_t>(M) * inter);
    linear(x, M, e.w1, g.data());
    linear(x, M, e.w3, u.data());
    for (size_t i = 0; i < g.size(); ++i) {
      const float gate = std::min(g[i], limit);
      const float up = std::clamp(u[i], -limit, limit);
      g[i] = (gate * sigmoid(gate)) * up;
    }
    linear(g.data(), M, e.w2, y);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace deepinfer::backend
