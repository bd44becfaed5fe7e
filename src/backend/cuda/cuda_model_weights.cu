// CudaModel::Impl's weights: the device buffers (shapes from the config), the upload of a
// checkpoint's weights (bf16, plus the FP8 forms release numerics read) and random benchmark weights.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_model_impl.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kv_fp8.h"
#include "backend/cuda/release_kernels.h"
#include "backend/cuda/swiglu.cuh"
#include "backend/cuda/v4_kernels.h"

namespace deepinfer::backend::cuda {

namespace {

std::vector<bf16> to_bf16_host(const float* x, size_t n) {
  std::vector<bf16> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __float2bfloat16_rn(x[i]);
  return out;
}

}  // namespace

// Allocates every weight buffer (shapes from the config).
Status CudaModel::Impl::allocate() {
  const ModelConfig& c = config;
  DeviceArena& A = weights_arena;
  const int D = c.hidden_size, hc = c.hc_mult, hd = c.head_dim, H = c.num_heads;
  auto mat = [&](DevMatrix& m, int rows, int cols) {
    m.rows = rows;
    m.cols = cols;
    return A.alloc(&m.w, static_cast<size_t>(rows) * cols);
  };
  // Matrices of one shape in one allocation, ms[i] at ms[0].w + i * rows * cols.
  auto stacked = [&](std::vector<DevMatrix>& ms, int count, int rows, int cols) -> Status {
    ms.resize(count);
    bf16* base = nullptr;
    const size_t each = static_cast<size_t>(rows) * cols;
    DI_RETURN_IF_ERROR(A.alloc(&base, each * count));
    for (int i = 0; i < count; ++i) ms[i] = DevMatrix{base + i * each, rows, cols, false};
    return Status::ok();
  };
  auto hyper = [&](DevHyperConn& hp, int mixes) -> Status {
    DI_RETURN_IF_ERROR(A.alloc(&hp.fn, static_cast<size_t>(mixes) * hc * D));
    DI_RETURN_IF_ERROR(A.alloc(&hp.base, static_cast<size_t>(mixes)));
    return A.alloc(&hp.scale, 3);
  };
  // A matrix at `at` inside a block allocated for several (see DevLayer::attn_in), `at` moved past it.
  auto carve = [](DevMatrix& m, int rows, int cols, bf16*& at) {
    m.rows = rows;
    m.cols = cols;
    m.w = at;
    at += static_cast<size_t>(rows) * cols;
  };
  const auto compressor_width = [](int head, bool overlap) { return overlap ? 2 * head : head; };
  auto compressor = [&](DevCompressor& cp, int ratio, int head, bool overlap, bf16*& at) -> Status {
    cp.ratio = ratio;
    cp.head = head;
    cp.overlap = overlap;
    cp.width = compressor_width(head, overlap);
    carve(cp.wkv_gate, 2 * cp.width, D, at);
    DI_RETURN_IF_ERROR(A.alloc(&cp.ape, static_cast<size_t>(ratio) * cp.width));
    return A.alloc(&cp.norm, static_cast<size_t>(head));
  };

  DI_RETURN_IF_ERROR(A.alloc(&embed_table, static_cast<size_t>(c.vocab_size) * D));
  DI_RETURN_IF_ERROR(mat(head, c.vocab_size, D));
  DI_RETURN_IF_ERROR(A.alloc(&final_norm, static_cast<size_t>(D)));
  DI_RETURN_IF_ERROR(hyper(head_mix, hc));
  layers.resize(c.num_layers);
  const int mixes = (2 + hc) * hc;
  const int inter = c.moe_intermediate_size, inter_s = c.shared_intermediate();
  const int G = c.o_groups, gw = H * hd / G;
  for (int l = 0; l < c.num_layers; ++l) {
    DevLayer& L = layers[l];
    DI_RETURN_IF_ERROR(hyper(L.hc_attn, mixes));
    DI_RETURN_IF_ERROR(hyper(L.hc_ffn, mixes));
    DI_RETURN_IF_ERROR(A.alloc(&L.attn_norm, static_cast<size_t>(D)));
    DI_RETURN_IF_ERROR(A.alloc(&L.ffn_norm, static_cast<size_t>(D)));
    const AttentionKind kind = c.layer_kinds[l];
    L.has_compressor = kind != AttentionKind::kSliding;
    L.has_indexer = kind == AttentionKind::kCsa;
    const int comp_rows = L.has_compressor ? 2 * compressor_width(hd, kind == AttentionKind::kCsa) : 0;
    const int index_rows = L.has_indexer ? 2 * compressor_width(c.index_head_dim, true) : 0;
    const int index_heads = L.has_indexer ? c.index_n_heads : 0;
    const size_t attn_in_rows = static_cast<size_t>(c.q_lora_rank) + hd + comp_rows + index_rows + index_heads;
    bf16* at = nullptr;
    DI_RETURN_IF_ERROR(A.alloc(&at, attn_in_rows * D));
    L.attn_in = at;
    {
      int widths[5] = {c.q_lora_rank, hd}, n = 2;
      if (L.has_compressor) widths[n++] = comp_rows;
      if (L.has_indexer) {
        widths[n++] = index_rows;
        widths[n++] = index_heads;
      }
      L.attn_in_split = gemm_split_matches_separate(D, widths, n);
    }
    carve(L.wq_a, c.q_lora_rank, D, at);
    carve(L.wkv, hd, D, at);
    if (L.has_compressor)
      DI_RETURN_IF_ERROR(compressor(L.compressor, c.compress_ratio[l], hd, kind == AttentionKind::kCsa, at));
    if (L.has_indexer) {
      DI_RETURN_IF_ERROR(compressor(L.index_compressor, c.compress_ratio[l], c.index_head_dim, true, at));
      carve(L.index_weights_proj, c.index_n_heads, D, at);
      DI_RETURN_IF_ERROR(mat(L.index_wq_b, c.index_n_heads * c.index_head_dim, c.q_lora_rank));
    }
    DI_RETURN_IF_ERROR(A.alloc(&L.q_norm, static_cast<size_t>(c.q_lora_rank)));
    DI_RETURN_IF_ERROR(mat(L.wq_b, H * hd, c.q_lora_rank));
    DI_RETURN_IF_ERROR(A.alloc(&L.kv_norm, static_cast<size_t>(hd)));
    DI_RETURN_IF_ERROR(stacked(L.wo_a, G, c.o_lora_rank, gw));
    DI_RETURN_IF_ERROR(mat(L.wo_b, D, G * c.o_lora_rank));
    DI_RETURN_IF_ERROR(A.alloc(&L.sinks, static_cast<size_t>(H)));
    if (c.hash_moe[l])
      DI_RETURN_IF_ERROR(A.alloc(&L.tid2eid, static_cast<size_t>(c.vocab_size) * c.num_experts_per_tok));
    else
      DI_RETURN_IF_ERROR(A.alloc(&L.gate_bias, static_cast<size_t>(c.n_routed_experts)));
    const int E = c.n_routed_experts;
    DI_RETURN_IF_ERROR(stacked(L.w13, E, 2 * inter, D));
    L.w13_interleaved = inter % kGateUpBlock == 0;
    DI_RETURN_IF_ERROR(stacked(L.w2, E, D, inter));
    DI_RETURN_IF_ERROR(A.alloc(&at, static_cast<size_t>(2 * inter_s + c.n_routed_experts) * D));
    L.ffn_in = at;
    {
      const int widths[2] = {2 * inter_s, c.n_routed_experts};
      L.ffn_in_split = gemm_split_matches_separate(D, widths, 2);
    }
    carve(L.shared_w13, 2 * inter_s, D, at);
    carve(L.gate, c.n_routed_experts, D, at);
    DI_RETURN_IF_ERROR(mat(L.shared_w2, D, inter_s));
  }
  // RoPE tables (the CPU backend's fp32 computation).
  const RopeTable main_t = make_rope_table(c.rope_main, c.rope_head_dim);
  const RopeTable comp_t = make_rope_table(c.rope_compress, c.rope_head_dim);
  DI_RETURN_IF_ERROR(A.alloc(&rope_main, main_t.inv_freq.size()));
  DI_RETURN_IF_ERROR(A.alloc(&rope_compress, comp_t.inv_freq.size()));
  DI_CUDA_RETURN(cudaMemcpy(rope_main, main_t.inv_freq.data(), main_t.inv_freq.size() * 4, cudaMemcpyHostToDevice));
  DI_CUDA_RETURN(cudaMemcpy(rope_compress, comp_t.inv_freq.data(), comp_t.inv_freq.size() * 4, cudaMemcpyHostToDevice));
  rope_main_factor = main_t.attention_factor;
  rope_compress_factor = comp_t.attention_factor;
  return Status::ok();
}

namespace {

Status put_bf16(bf16* dst, const float* src, size_t n, size_t dst_offset = 0) {
  const std::vector<bf16> h = to_bf16_host(src, n);
  return cuda_status(cudaMemcpy(dst + dst_offset, h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice), "weight upload");
}
Status put_f32(float* dst, const std::vector<float>& src) {
  return cuda_status(cudaMemcpy(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice), "weight upload");
}
Status put_matrix(const DevMatrix& d, const model::Matrix& m) {
  if (m.rows != d.rows || m.cols != d.cols)
    return Status::internal("weight shape [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
                            "] does not match the device buffer [" + std::to_string(d.rows) + ", " +
                            std::to_string(d.cols) + "]");
  return put_bf16(d.w, m.data.data(), m.data.size());
}
// Stacks two matrices of equal width into one [a.rows + b.rows, cols] device matrix.
Status put_stacked(const DevMatrix& d, const model::Matrix& a, const model::Matrix& b) {
  if (a.cols != d.cols || b.cols != d.cols || a.rows + b.rows != d.rows)
    return Status::internal("stacked weight shapes do not match the device buffer");
  DI_RETURN_IF_ERROR(put_bf16(d.w, a.data.data(), a.data.size()));
  return put_bf16(d.w, b.data.data(), b.data.size(), a.data.size());
}
// put_stacked with a's and b's rows interleaved in blocks of kGateUpBlock (swiglu.cuh; a.rows ==
// b.rows, a multiple of the block): a's rows [8 i, 8 i + 8), then b's, for each i.
Status put_gate_up_interleaved(const DevMatrix& d, const model::Matrix& a, const model::Matrix& b) {
  if (a.cols != d.cols || b.cols != d.cols || a.rows != b.rows || a.rows + b.rows != d.rows ||
      a.rows % kGateUpBlock != 0)
    return Status::internal("gate/up weight shapes do not match the device buffer or the interleave block");
  const size_t block = static_cast<size_t>(kGateUpBlock) * a.cols;
  std::vector<float> rows(a.data.size() + b.data.size());
  for (size_t i = 0, at = 0; i < a.data.size(); i += block) {
    std::copy_n(a.data.begin() + static_cast<std::ptrdiff_t>(i), block, rows.begin() + static_cast<std::ptrdiff_t>(at));
    at += block;
    std::copy_n(b.data.begin() + static_cast<std::ptrdiff_t>(i), block, rows.begin() + static_cast<std::ptrdiff_t>(at));
    at += block;
  }
  return put_bf16(d.w, rows.data(), rows.size());
}
Status put_hyper(const DevHyperConn& d, const model::Matrix& fn, const std::vector<float>& base,
                 const std::vector<float>& scale) {
  DI_RETURN_IF_ERROR(put_f32(d.fn, fn.data));
  DI_RETURN_IF_ERROR(put_f32(d.base, base));
  std::vector<float> s3(3, 0.0f);
  std::copy(scale.begin(), scale.end(), s3.begin());
  return put_f32(d.scale, s3);
}
Status put_compressor(const DevCompressor& d, const model::CompressorWeights& w) {
  DI_RETURN_IF_ERROR(put_stacked(d.wkv_gate, w.wkv, w.wgate));
  DI_RETURN_IF_ERROR(put_f32(d.ape, w.ape));
  return put_f32(d.norm, w.norm);
}

// The e4m3 code of q, which must be an e4m3 value (|q| <= 448, 3 mantissa bits or a multiple of
// 2^-9 below 2^-6); -0 keeps its sign.
uint8_t e4m3_code_of(float q) {
  const uint8_t sign = std::signbit(q) ? 0x80 : 0x00;
  const float a = std::fabs(q);
  if (a == 0.0f) return sign;
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int exponent = e - 1;         // a = (2 f) * 2^exponent, 2 f in [1, 2)
  if (exponent < -6) return static_cast<uint8_t>(sign | static_cast<int>(std::ldexp(a, 9)));  // subnormal
  const int mantissa = static_cast<int>((2.0f * f - 1.0f) * 8.0f);
  return static_cast<uint8_t>(sign | ((exponent + 7) << 3) | mantissa);
}

// The FP8 form of a weight the checkpoint stored as FP8, from its exactly dequantized fp32 values:
// per 128 x 128 block the smallest power-of-two scale that fits the block's largest magnitude in
// e4m3 (model::pow2_ceil_scale; never above the checkpoint's own scale, so value / scale stays an
// e4m3 value: multiplying an e4m3 value by 2^k, k >= 0, within +-448 keeps it one). Every value is
// checked to round-trip exactly; false (no FP8 form) otherwise, or when cols % 128 != 0.
bool fp8_form(const std::vector<float>& data, int rows, int cols, std::vector<uint8_t>* codes,
              std::vector<float>* scales) {
  if (cols <= 0 || rows <= 0 || cols % 128 != 0) return false;
  const int nb = (rows + 127) / 128, kb = cols / 128;
  codes->assign(static_cast<size_t>(rows) * cols, 0);
  scales->assign(static_cast<size_t>(nb) * kb, 1.0f);
  for (int bi = 0; bi < nb; ++bi)
    for (int bk = 0; bk < kb; ++bk) {
      const int r0 = bi * 128, r1 = std::min(rows, r0 + 128), c0 = bk * 128;
      float amax = 0.0f;
      for (int r = r0; r < r1; ++r)
        for (int k = c0; k < c0 + 128; ++k) amax = std::max(amax, std::fabs(data[static_cast<size_t>(r) * cols + k]));
      if (!std::isfinite(amax)) return false;
      const float scale = amax > 0.0f ? model::pow2_ceil_scale(amax, 1.0f / 448.0f) : 1.0f;
      (*scales)[static_cast<size_t>(bi) * kb + bk] = scale;
      for (int r = r0; r < r1; ++r)
        for (int k = c0; k < c0 + 128; ++k) {
          const float v = data[static_cast<size_t>(r) * cols + k];
          const float q = v / scale;  // exact: scale is a power of two
          if (model::round_e4m3(q) != q || q * scale != v) return false;
          (*codes)[static_cast<size_t>(r) * cols + k] = e4m3_code_of(q);
        }
    }
  return true;
}

}  // namespace

Status CudaModel::Impl::upload_fp8_forms(const model::ModelWeights& w) {
  DeviceArena& A = weights_arena;
  auto form = [&](DevMatrix& d, const std::vector<float>& data, bool quantized) -> Status {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    if (!quantized || !fp8_form(data, d.rows, d.cols, &codes, &scales)) return Status::ok();  // bf16 path
    DI_RETURN_IF_ERROR(A.alloc(&d.fp8, codes.size()));
    DI_RETURN_IF_ERROR(A.alloc(&d.fp8_scales, scales.size()));
    DI_CUDA_RETURN(cudaMemcpy(d.fp8, codes.data(), codes.size(), cudaMemcpyHostToDevice));
    DI_CUDA_RETURN(cudaMemcpy(d.fp8_scales, scales.data(), scales.size() * sizeof(float), cudaMemcpyHostToDevice));
    return Status::ok();
  };
  for (int l = 0; l < config.num_layers; ++l) {
    const model::LayerWeights& W = w.layers[l];
    DevLayer& L = layers[l];
    DI_RETURN_IF_ERROR(form(L.wq_a, W.wq_a.data, W.wq_a.quantized));
    DI_RETURN_IF_ERROR(form(L.wq_b, W.wq_b.data, W.wq_b.quantized));
    DI_RETURN_IF_ERROR(form(L.wkv, W.wkv.data, W.wkv.quantized));
    DI_RETURN_IF_ERROR(form(L.wo_b, W.wo_b.data, W.wo_b.quantized));
    if (L.has_indexer) DI_RETURN_IF_ERROR(form(L.index_wq_b, W.indexer.wq_b.data, W.indexer.wq_b.quantized));
    std::vector<float> w13(W.shared.w1.data);
    w13.insert(w13.end(), W.shared.w3.data.begin(), W.shared.w3.data.end());
    DI_RETURN_IF_ERROR(form(L.shared_w13, w13, W.shared.w1.quantized && W.shared.w3.quantized));
    DI_RETURN_IF_ERROR(form(L.shared_w2, W.shared.w2.data, W.shared.w2.quantized));
  }
  return Status::ok();
}

Status CudaModel::Impl::upload(const model::ModelWeights& w) {
  const ModelConfig& c = config;
  for (int l = 0; l < c.num_layers; ++l) {  // which GEMMs release numerics quantize the input of
    const model::LayerWeights& W = w.layers[l];
    DevLayer& L = layers[l];
    L.wq_a.quantized = W.wq_a.quantized;
    L.wq_b.quantized = W.wq_b.quantized;
    L.wkv.quantized = W.wkv.quantized;
    L.wo_b.quantized = W.wo_b.quantized;
    if (L.has_indexer) L.index_wq_b.quantized = W.indexer.wq_b.quantized;
    if (!W.experts.empty()) {
      L.w13[0].quantized = W.experts[0].w1.quantized;
      L.w2[0].quantized = W.experts[0].w2.quantized;
    }
    L.shared_w13.quantized = W.shared.w1.quantized;
    L.shared_w2.quantized = W.shared.w2.quantized;
  }
  DI_RETURN_IF_ERROR(put_bf16(embed_table, w.embed.data.data(), w.embed.data.size()));
  DI_RETURN_IF_ERROR(put_matrix(head, w.head));
  DI_RETURN_IF_ERROR(put_f32(final_norm, w.norm));
  DI_RETURN_IF_ERROR(put_hyper(head_mix, w.hc_head_fn, w.hc_head_base, w.hc_head_scale));
  for (int l = 0; l < c.num_layers; ++l) {
    const model::LayerWeights& W = w.layers[l];
    DevLayer& L = layers[l];
    DI_RETURN_IF_ERROR(put_hyper(L.hc_attn, W.hc_attn.fn, W.hc_attn.base, W.hc_attn.scale));
    DI_RETURN_IF_ERROR(put_hyper(L.hc_ffn, W.hc_ffn.fn, W.hc_ffn.base, W.hc_ffn.scale));
    DI_RETURN_IF_ERROR(put_f32(L.attn_norm, W.attn_norm));
    DI_RETURN_IF_ERROR(put_f32(L.ffn_norm, W.ffn_norm));
    DI_RETURN_IF_ERROR(put_matrix(L.wq_a, W.wq_a));
    DI_RETURN_IF_ERROR(put_f32(L.q_norm, W.q_norm));
    DI_RETURN_IF_ERROR(put_matrix(L.wq_b, W.wq_b));
    DI_RETURN_IF_ERROR(put_matrix(L.wkv, W.wkv));
    DI_RETURN_IF_ERROR(put_f32(L.kv_norm, W.kv_norm));
    for (size_t g = 0; g < L.wo_a.size(); ++g) DI_RETURN_IF_ERROR(put_matrix(L.wo_a[g], W.wo_a[g]));
    DI_RETURN_IF_ERROR(put_matrix(L.wo_b, W.wo_b));
    DI_RETURN_IF_ERROR(put_f32(L.sinks, W.attn_sink));
    if (L.has_compressor) DI_RETURN_IF_ERROR(put_compressor(L.compressor, W.compressor));
    if (L.has_indexer) {
      DI_RETURN_IF_ERROR(put_compressor(L.index_compressor, W.indexer.compressor));
      DI_RETURN_IF_ERROR(put_matrix(L.index_wq_b, W.indexer.wq_b));
      DI_RETURN_IF_ERROR(put_matrix(L.index_weights_proj, W.indexer.weights_proj));
    }
    DI_RETURN_IF_ERROR(put_matrix(L.gate, W.gate));
    if (L.tid2eid)
      DI_CUDA_RETURN(cudaMemcpy(L.tid2eid, W.tid2eid.data(), W.tid2eid.size() * 4, cudaMemcpyHostToDevice));
    if (L.gate_bias) DI_RETURN_IF_ERROR(put_f32(L.gate_bias, W.gate_bias));
    for (size_t e = 0; e < L.w13.size(); ++e) {
      DI_RETURN_IF_ERROR(L.w13_interleaved ? put_gate_up_interleaved(L.w13[e], W.experts[e].w1, W.experts[e].w3)
                                           : put_stacked(L.w13[e], W.experts[e].w1, W.experts[e].w3));
      DI_RETURN_IF_ERROR(put_matrix(L.w2[e], W.experts[e].w2));
    }
    DI_RETURN_IF_ERROR(put_stacked(L.shared_w13, W.shared.w1, W.shared.w3));
    DI_RETURN_IF_ERROR(put_matrix(L.shared_w2, W.shared.w2));
  }
  return Status::ok();
}

// Benchmark weights: uniform in +-1/sqrt(fan-in) for matrices (so activations keep their scale),
// norms 1, small position biases and mixing parameters, sinks 0, hash routes distinct per token.
Status CudaModel::Impl::randomize(uint64_t seed) {
  const ModelConfig& c = config;
  uint64_t stream_id = seed * 1000003ull;
  auto m = [&](const DevMatrix& d) { fill_uniform_bf16(d.w, static_cast<size_t>(d.rows) * d.cols, ++stream_id, 1.0f / std::sqrt(static_cast<float>(d.cols)), stream); };
  auto ones = [&](float* p, size_t n) { fill_uniform_f32(p, n, ++stream_id, 0.0f, 1.0f, stream); };
  auto small = [&](float* p, size_t n, float s) { fill_uniform_f32(p, n, ++stream_id, s, 0.0f, stream); };
  auto hyper = [&](const DevHyperConn& hp, size_t mixes) {
    small(hp.fn, mixes * c.hc_mult * c.hidden_size, 1.0f / std::sqrt(static_cast<float>(c.hc_mult * c.hidden_size)));
    small(hp.base, mixes, 0.1f);
    ones(hp.scale, 3);
  };
  auto compressor = [&](const DevCompressor& cp) {
    m(cp.wkv_gate);
    small(cp.ape, static_cast<size_t>(cp.ratio) * cp.width, 0.1f);
    ones(cp.norm, static_cast<size_t>(cp.head));
  };
  fill_uniform_bf16(embed_table, static_cast<size_t>(c.vocab_size) * c.hidden_size, ++stream_id, 1.0f, stream);
  m(head);
  ones(final_norm, static_cast<size_t>(c.hidden_size));
  hyper(head_mix, static_cast<size_t>(c.hc_mult));
  const size_t mixes = static_cast<size_t>(2 + c.hc_mult) * c.hc_mult;
  std::mt19937_64 rng(seed);
  for (int l = 0; l < c.num_layers; ++l) {
    DevLayer& L = layers[l];
    hyper(L.hc_attn, mixes);
    hyper(L.hc_ffn, mixes);
    ones(L.attn_norm, static_cast<size_t>(c.hidden_size));
    ones(L.ffn_norm, static_cast<size_t>(c.hidden_size));
    m(L.wq_a);
    ones(L.q_norm, static_cast<size_t>(c.q_lora_rank));
    m(L.wq_b);
    m(L.wkv);
    ones(L.kv_norm, static_cast<size_t>(c.head_dim));
    for (const DevMatrix& g : L.wo_a) m(g);
    m(L.wo_b);
    small(L.sinks, static_cast<size_t>(c.num_heads), 0.0f);
    if (L.has_compressor) compressor(L.compressor);
    if (L.has_indexer) {
      compressor(L.index_compressor);
      m(L.index_wq_b);
      m(L.index_weights_proj);
    }
    m(L.gate);
    if (L.gate_bias) small(L.gate_bias, static_cast<size_t>(c.n_routed_experts), 0.0f);
    if (L.tid2eid) {
      const int K = c.num_experts_per_tok, E = c.n_routed_experts;
      std::vector<int32_t> t(static_cast<size_t>(c.vocab_size) * K);
      std::vector<int> perm(E);
      for (int v = 0; v < c.vocab_size; ++v) {
        std::iota(perm.begin(), perm.end(), 0);
        for (int k = 0; k < K; ++k) std::swap(perm[k], perm[k + static_cast<int>(rng() % static_cast<uint64_t>(E - k))]);
        for (int k = 0; k < K; ++k) t[static_cast<size_t>(v) * K + k] = perm[k];
      }
      DI_CUDA_RETURN(cudaMemcpy(L.tid2eid, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
    }
    for (size_t e = 0; e < L.w13.size(); ++e) {
      m(L.w13[e]);
      m(L.w2[e]);
    }
    m(L.shared_w13);
    m(L.shared_w2);
  }
  if (opt.fp8_gemm) {
    // Benchmarks of the FP8 path: the projections a released checkpoint stores as FP8 get an FP8
    // form quantized from their random bf16 values (codes per row and 128 k; the 128 x 128 block
    // scales are set to the same magnitude, which only scales the result), and run release numerics.
    DeviceArena& A = weights_arena;
    auto form = [&](DevMatrix& d) -> Status {
      if (d.cols % 128 != 0) return Status::ok();
      const size_t kb = static_cast<size_t>(d.cols) / 128, nb = (static_cast<size_t>(d.rows) + 127) / 128;
      float* row_scales = nullptr;
      DI_RETURN_IF_ERROR(A.alloc(&d.fp8, static_cast<size_t>(d.rows) * d.cols));
      DI_RETURN_IF_ERROR(A.alloc(&d.fp8_scales, nb * kb));
      DI_RETURN_IF_ERROR(A.alloc(&row_scales, static_cast<size_t>(d.rows) * kb));
      fp8::quantize_fp8_rows(d.w, d.rows, d.cols, d.fp8, row_scales, stream);
      fill_uniform_f32(d.fp8_scales, nb * kb, ++stream_id, 0.0f, 1.0f / (448.0f * std::sqrt(static_cast<float>(d.cols))), stream);
      d.quantized = true;
      return Status::ok();
    };
    for (DevLayer& L : layers) {
      DI_RETURN_IF_ERROR(form(L.wq_a));
      DI_RETURN_IF_ERROR(form(L.wq_b));
      DI_RETURN_IF_ERROR(form(L.wkv));
      DI_RETURN_IF_ERROR(form(L.wo_b));
      if (L.has_indexer) DI_RETURN_IF_ERROR(form(L.index_wq_b));
      DI_RETURN_IF_ERROR(form(L.shared_w13));
      DI_RETURN_IF_ERROR(form(L.shared_w2));
    }
    release = true;
  }
  DI_CUDA_RETURN(cudaStreamSynchronize(stream));
  return cuda_status(cudaGetLastError(), "random weight initialisation");
}

}  // namespace deepinfer::backend::cuda
