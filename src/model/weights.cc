#include "model/weights.h"

#include <cmath>
#include <cstring>

#include "io/dtype.h"

namespace deepinfer::model {

using io::DType;
using io::TensorView;

namespace {

// Official-release name -> name in transformers' saved layout. Rules are tried in order; the
// first whose pattern matches rewrites the name. In a pattern, "#" matches a run of digits.
struct NameRule {
  const char* official;     // pattern over the official name
  const char* transformers; // replacement; "#" is replaced by the matched digits
};
constexpr NameRule kNameRules[] = {
    {"embed.weight", "model.embed_tokens.weight"},
    {"hc_head_fn", "model.hc_head.hc_fn"},
    {"hc_head_base", "model.hc_head.hc_base"},
    {"hc_head_scale", "model.hc_head.hc_scale"},
    {"head.weight", "head.weight"},
    {"layers.#.attn.kv_norm.weight", "model.layers.#.attn.norm.weight"},
};
constexpr const char* kTransformersPrefix = "model.";  // every other name

// Matches `name` against `pattern`; on success stores the digits matched by '#'.
bool match_rule(const std::string& name, const char* pattern, std::string* digits) {
  size_t i = 0;
  for (const char* p = pattern; *p; ++p) {
    if (*p == '#') {
      const size_t start = i;
      while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
      if (i == start) return false;
      *digits = name.substr(start, i - start);
    } else {
      if (i >= name.size() || name[i] != *p) return false;
      ++i;
    }
  }
  return i == name.size();
}

// Layer index of "layers.<n>." (after `prefix`), or -1.
long long layer_index(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix + "layers.", 0) != 0) return -1;
  size_t i = prefix.size() + 7, start = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - start < 9) ++i;
  if (i == start || i >= name.size() || name[i] != '.') return -1;
  return std::stoll(name.substr(start, i - start));
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Binder {
 public:
  Binder(const io::SafetensorsSet& set, bool official) : set_(set), official_(official) {}

  std::string stored_name(const std::string& official) const {
    if (official_) return official;
    std::string digits;
    for (const auto& rule : kNameRules) {
      if (!match_rule(official, rule.official, &digits)) continue;
      std::string out = rule.transformers;
      if (const size_t h = out.find('#'); h != std::string::npos) out.replace(h, 1, digits);
      return out;
    }
    return kTransformersPrefix + official;
  }

  const TensorView* find(const std::string& official) const { return set_.find(stored_name(official)); }

  Status missing(const std::string& official) const {
    return Status::not_found("missing tensor '" + stored_name(official) + "'");
  }

  // Any float dtype -> fp32 vector of exactly `shape`.
  Status vector(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) const {
    const TensorView* t = find(name);
    if (!t) return missing(name);
    if (t->shape != shape)
      return Status::invalid_argument("tensor '" + t->name + "': expected shape " + shape_str(shape) + ", found " +
                                      t->shape_string());
    return to_f32(*t, out);
  }

  Status to_f32(const TensorView& t, std::vector<float>* out) const {
    const size_t n = static_cast<size_t>(t.num_elements());
    out->resize(n);
    float* o = out->data();
    const uint8_t* d = t.data;
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(o, d, n * 4);
        return Status::ok();
      case DType::kBF16:
        for (size_t i = 0; i < n; ++i) o[i] = io::bf16_to_f32(static_cast<uint16_t>(d[2 * i] | (d[2 * i + 1] << 8)));
        return Status::ok();
      case DType::kF16:
        for (size_t i = 0; i < n; ++i) o[i] = io::f16_to_f32(static_cast<uint16_t>(d[2 * i] | (d[2 * i + 1] << 8)));
        return Status::ok();
      case DType::kF8E8M0:
        for (size_t i = 0; i < n; ++i) o[i] = io::e8m0_to_f32(d[i]);
        return Status::ok();
      default:
        return Status::invalid_argument("tensor '" + t.name + "': dtype " + io::dtype_name(t.dtype) +
                                        " where a floating-point tensor was expected");
    }
  }

  const TensorView* find_scale(const std::string& weight_official) const {
    std::string base = weight_official;
    if (base.size() > 7 && base.compare(base.size() - 7, 7, ".weight") == 0) base.resize(base.size() - 7);
    if (const TensorView* s = find(base + ".scale")) return s;
    return find(base + ".weight_scale_inv");
  }

  Status scale_values(const TensorView& s, const std::vector<int64_t>& want, std::vector<float>* out) const {
    if (s.shape != want)
      return Status::invalid_argument("tensor '" + s.name + "': expected scale shape " + shape_str(want) + ", found " +
                                      s.shape_string());
    if (s.dtype != DType::kF8E8M0 && s.dtype != DType::kF32 && s.dtype != DType::kBF16)
      return Status::invalid_argument("tensor '" + s.name + "': scale dtype " + io::dtype_name(s.dtype) +
                                      " (expected F8_E8M0 or F32)");
    return to_f32(s, out);
  }

  // Matrix [rows, cols] stored as float, FP8 e4m3 (+ 128x128 block scale) or packed FP4 (+ per-32 scale).
  Status matrix(const std::string& name, int rows, int cols, Matrix* out) const {
    const TensorView* t = find(name);
    if (!t) return missing(name);
    out->rows = rows;
    out->cols = cols;
    const std::vector<int64_t> want = {rows, cols};
    if (t->dtype == DType::kF32 || t->dtype == DType::kBF16 || t->dtype == DType::kF16) {
      if (t->shape != want)
        return Status::invalid_argument("tensor '" + t->name + "': expected shape " + shape_str(want) + ", found " +
                                        t->shape_string());
      return to_f32(*t, &out->data);
    }
    if (t->dtype == DType::kF8E4M3) {
      if (t->shape != want)
        return Status::invalid_argument("tensor '" + t->name + "': expected shape " + shape_str(want) + ", found " +
                                        t->shape_string());
      const TensorView* s = find_scale(name);
      if (!s) return Status::not_found("tensor '" + t->name + "' is FP8 but its block scale ('.scale') is missing");
      constexpr int kBlock = 128;
      std::vector<float> scale;
      DI_RETURN_IF_ERROR(scale_values(*s, {(rows + kBlock - 1) / kBlock, (cols + kBlock - 1) / kBlock}, &scale));
      out->data.resize(static_cast<size_t>(rows) * cols);
      dequant_fp8_blocks(t->data, scale.data(), rows, cols, kBlock, out->data.data());
      out->quantized = true;
      return Status::ok();
    }
    if (t->dtype == DType::kI8 || t->dtype == DType::kU8) {
      constexpr int kGroup = 32;
      const std::vector<int64_t> packed = {rows, cols / 2};
      if (cols % kGroup != 0 || t->shape != packed)
        return Status::invalid_argument("tensor '" + t->name + "': expected packed FP4 shape " + shape_str(packed) +
                                        " (" + std::to_string(cols) + " inputs, a multiple of 32), found " +
                                        t->shape_string());
      const TensorView* s = find_scale(name);
      if (!s) return Status::not_found("tensor '" + t->name + "' is packed FP4 but its scale ('.scale') is missing");
      std::vector<float> scale;
      DI_RETURN_IF_ERROR(scale_values(*s, {rows, cols / kGroup}, &scale));
      out->data.resize(static_cast<size_t>(rows) * cols);
      dequant_fp4_groups(t->data, scale.data(), rows, cols, kGroup, out->data.data());
      out->quantized = true;
      return Status::ok();
    }
    return Status::invalid_argument("tensor '" + t->name + "': unsupported dtype " + io::dtype_name(t->dtype) +
                                    " for a weight matrix");
  }

 private:
  const io::SafetensorsSet& set_;
  bool official_;
};

// Splits a stacked [groups * r, cols] matrix into `groups` matrices of r rows.
std::vector<Matrix> split_rows(const Matrix& m, int groups) {
  std::vector<Matrix> out(groups);
  const int r = m.rows / groups;
  for (int g = 0; g < groups; ++g) {
    out[g].rows = r;
    out[g].cols = m.cols;
    out[g].data.assign(m.data.begin() + static_cast<size_t>(g) * r * m.cols,
                       m.data.begin() + static_cast<size_t>(g + 1) * r * m.cols);
  }
  return out;
}

Status load_compressor(const Binder& b, const std::string& p, int width, int head, int ratio, int hidden,
                       CompressorWeights* c) {
  DI_RETURN_IF_ERROR(b.matrix(p + "wkv.weight", width, hidden, &c->wkv));
  DI_RETURN_IF_ERROR(b.matrix(p + "wgate.weight", width, hidden, &c->wgate));
  DI_RETURN_IF_ERROR(b.vector(p + "ape", {ratio, width}, &c->ape));
  DI_RETURN_IF_ERROR(b.vector(p + "norm.weight", {head}, &c->norm));
  return Status::ok();
}

Status load_hc(const Binder& b, const std::string& p, const ModelConfig& c, HyperConnWeights* w) {
  const int mix = (2 + c.hc_mult) * c.hc_mult;
  DI_RETURN_IF_ERROR(b.matrix(p + "_fn", mix, c.hc_mult * c.hidden_size, &w->fn));
  DI_RETURN_IF_ERROR(b.vector(p + "_base", {mix}, &w->base));
  DI_RETURN_IF_ERROR(b.vector(p + "_scale", {3}, &w->scale));
  return Status::ok();
}

Status load_expert(const Binder& b, const std::string& p, int inter, int hidden, ExpertWeights* e) {
  DI_RETURN_IF_ERROR(b.matrix(p + "w1.weight", inter, hidden, &e->w1));
  DI_RETURN_IF_ERROR(b.matrix(p + "w2.weight", hidden, inter, &e->w2));
  DI_RETURN_IF_ERROR(b.matrix(p + "w3.weight", inter, hidden, &e->w3));
  return Status::ok();
}

Status load_layer(const Binder& b, const ModelConfig& c, int i, LayerWeights* L) {
  const std::string p = "layers." + std::to_string(i) + ".";
  const int D = c.hidden_size, H = c.num_heads, hd = c.head_dim;
  DI_RETURN_IF_ERROR(load_hc(b, p + "hc_attn", c, &L->hc_attn));
  DI_RETURN_IF_ERROR(load_hc(b, p + "hc_ffn", c, &L->hc_ffn));
  DI_RETURN_IF_ERROR(b.vector(p + "attn_norm.weight", {D}, &L->attn_norm));
  DI_RETURN_IF_ERROR(b.vector(p + "ffn_norm.weight", {D}, &L->ffn_norm));
  const std::string a = p + "attn.";
  DI_RETURN_IF_ERROR(b.matrix(a + "wq_a.weight", c.q_lora_rank, D, &L->wq_a));
  DI_RETURN_IF_ERROR(b.vector(a + "q_norm.weight", {c.q_lora_rank}, &L->q_norm));
  DI_RETURN_IF_ERROR(b.matrix(a + "wq_b.weight", H * hd, c.q_lora_rank, &L->wq_b));
  DI_RETURN_IF_ERROR(b.matrix(a + "wkv.weight", hd, D, &L->wkv));
  DI_RETURN_IF_ERROR(b.vector(a + "kv_norm.weight", {hd}, &L->kv_norm));
  {
    Matrix wo_a;
    DI_RETURN_IF_ERROR(b.matrix(a + "wo_a.weight", c.o_groups * c.o_lora_rank, H * hd / c.o_groups, &wo_a));
    L->wo_a = split_rows(wo_a, c.o_groups);
  }
  DI_RETURN_IF_ERROR(b.matrix(a + "wo_b.weight", D, c.o_groups * c.o_lora_rank, &L->wo_b));
  DI_RETURN_IF_ERROR(b.vector(a + "attn_sink", {H}, &L->attn_sink));
  const AttentionKind kind = c.layer_kinds[i];
  const int ratio = c.compress_ratio[i];
  if (kind != AttentionKind::kSliding) {
    L->has_compressor = true;
    const int width = kind == AttentionKind::kCsa ? 2 * hd : hd;
    DI_RETURN_IF_ERROR(load_compressor(b, a + "compressor.", width, hd, ratio, D, &L->compressor));
  }
  if (kind == AttentionKind::kCsa) {
    L->has_indexer = true;
    const int ih = c.index_head_dim;
    DI_RETURN_IF_ERROR(b.matrix(a + "indexer.wq_b.weight", c.index_n_heads * ih, c.q_lora_rank, &L->indexer.wq_b));
    DI_RETURN_IF_ERROR(b.matrix(a + "indexer.weights_proj.weight", c.index_n_heads, D, &L->indexer.weights_proj));
    DI_RETURN_IF_ERROR(load_compressor(b, a + "indexer.compressor.", 2 * ih, ih, ratio, D, &L->indexer.compressor));
  }
  const std::string f = p + "ffn.";
  const int E = c.n_routed_experts;
  DI_RETURN_IF_ERROR(b.matrix(f + "gate.weight", E, D, &L->gate));
  if (c.hash_moe[i]) {
    const TensorView* t = b.find(f + "gate.tid2eid");
    if (!t) return b.missing(f + "gate.tid2eid");
    const std::vector<int64_t> want = {c.vocab_size, c.num_experts_per_tok};
    if (t->shape != want)
      return Status::invalid_argument("tensor '" + t->name + "': expected shape " + shape_str(want) + ", found " +
                                      t->shape_string());
    const size_t n = static_cast<size_t>(t->num_elements());
    L->tid2eid.resize(n);
    for (size_t k = 0; k < n; ++k) {
      int64_t v;
      if (t->dtype == DType::kI32) {
        int32_t x;
        std::memcpy(&x, t->data + 4 * k, 4);
        v = x;
      } else if (t->dtype == DType::kI64) {
        std::memcpy(&v, t->data + 8 * k, 8);
      } else {
        return Status::invalid_argument("tensor '" + t->name + "': dtype " + io::dtype_name(t->dtype) +
                                        " (expected I32 or I64)");
      }
      if (v < 0 || v >= E)
        return Status::invalid_argument("tensor '" + t->name + "': expert id " + std::to_string(v) + " at entry " +
                                        std::to_string(k) + " is outside [0, " + std::to_string(E) + ")");
      L->tid2eid[k] = static_cast<int32_t>(v);
    }
  } else {
    if (b.find(f + "gate.bias")) DI_RETURN_IF_ERROR(b.vector(f + "gate.bias", {E}, &L->gate_bias));
    else if (b.find(f + "gate.e_score_correction_bias"))
      DI_RETURN_IF_ERROR(b.vector(f + "gate.e_score_correction_bias", {E}, &L->gate_bias));
    else L->gate_bias.assign(E, 0.0f);
  }
  L->experts.resize(E);
  for (int e = 0; e < E; ++e)
    DI_RETURN_IF_ERROR(load_expert(b, f + "experts." + std::to_string(e) + ".", c.moe_intermediate_size, D, &L->experts[e]));
  // The shared expert's width: the official code uses moe_intermediate_size * n_shared_experts,
  // transformers always moe_intermediate_size; they agree for the released n_shared_experts = 1.
  int shared_inter = c.shared_intermediate();
  if (const TensorView* w1 = b.find(f + "shared_experts.w1.weight");
      w1 && !w1->shape.empty() && w1->shape[0] == c.moe_intermediate_size)
    shared_inter = c.moe_intermediate_size;
  DI_RETURN_IF_ERROR(load_expert(b, f + "shared_experts.", shared_inter, D, &L->shared));
  return Status::ok();
}

}  // namespace

void dequant_fp8_blocks(const uint8_t* q, const float* scale, int rows, int cols, int block, float* out) {
  const int scale_cols = (cols + block - 1) / block;
  for (int r = 0; r < rows; ++r)
    for (int col = 0; col < cols; ++col)
      out[static_cast<size_t>(r) * cols + col] =
          io::fp8_e4m3_to_f32(q[static_cast<size_t>(r) * cols + col]) * scale[(r / block) * scale_cols + col / block];
}

void dequant_fp4_groups(const uint8_t* packed, const float* scale, int rows, int cols, int group, float* out) {
  const int groups = cols / group;
  for (int r = 0; r < rows; ++r)
    for (int col = 0; col < cols; ++col) {
      const uint8_t byte = packed[static_cast<size_t>(r) * (cols / 2) + col / 2];
      const uint8_t code = (col % 2 == 0) ? (byte & 0xf) : (byte >> 4);  // low nibble = even column
      out[static_cast<size_t>(r) * cols + col] = io::fp4_e2m1_to_f32(code) * scale[r * groups + col / group];
    }
}

Result<ModelWeights> load_weights(const io::SafetensorsSet& set, const ModelConfig& c) {
  ModelWeights w;
  bool official;
  if (set.find("embed.weight")) official = true;
  else if (set.find("model.embed_tokens.weight")) official = false;
  else return Status::not_found("missing tensor 'embed.weight' (official layout) or 'model.embed_tokens.weight' (transformers layout)");
  w.layout = official ? "official" : "transformers";
  Binder b(set, official);
  const int D = c.hidden_size, V = c.vocab_size;
  DI_RETURN_IF_ERROR(b.matrix("embed.weight", V, D, &w.embed));
  DI_RETURN_IF_ERROR(b.matrix("head.weight", V, D, &w.head));
  DI_RETURN_IF_ERROR(b.vector("norm.weight", {D}, &w.norm));
  DI_RETURN_IF_ERROR(b.matrix("hc_head_fn", c.hc_mult, c.hc_mult * D, &w.hc_head_fn));
  DI_RETURN_IF_ERROR(b.vector("hc_head_base", {c.hc_mult}, &w.hc_head_base));
  DI_RETURN_IF_ERROR(b.vector("hc_head_scale", {1}, &w.hc_head_scale));
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) DI_RETURN_IF_ERROR(load_layer(b, c, i, &w.layers[i]));
  const std::string mtp_prefix = official ? "mtp." : "model.mtp.";
  for (const auto& [name, view] : set.tensors()) {
    if (name.rfind(mtp_prefix, 0) == 0 || name.rfind("mtp.", 0) == 0) {
      w.mtp.emplace(name, view);
      continue;
    }
    const long long layer = layer_index(name, official ? "" : kTransformersPrefix);
    if (layer >= c.num_layers)
      return Status::invalid_argument("tensor '" + name + "' belongs to layer " + std::to_string(layer) +
                                      " but the config has " + std::to_string(c.num_layers) + " layers");
  }
  for (const float x : w.embed.data)
    if (!std::isfinite(x)) return Status::invalid_argument("tensor 'embed.weight' holds a non-finite value");
  return w;
}

}  // namespace deepinfer::model
