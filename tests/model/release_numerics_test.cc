// Release numerics (issue #6) against DeepSeek's official inference code.
//
// The reference is the official inference/model.py run with the pure-PyTorch kernels that produced
// ../shared/fixtures/v4-small-official-numerics (re-run on an H200 it reproduces that fixture's logits
// bit for bit; docs/numerics.md). Release numerics is chaotic: FP8 activation quantization turns a
// one-ulp bf16 difference into a one-step FP8 difference of 1/16, so two correct implementations
// whose fp32 sums differ only in order drift apart over the layers (the official code with its fp32
// GEMMs done in float64 differs from its own fixture by up to 0.87, argmax 5/8 on p1). So the
// semantics are checked block by block, each block fed the official activations (teacher forcing,
// tests/data/release-numerics), where the comparison is not chaotic; the free-running logits are
// checked to be far closer to the official ones than exact math is.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>

#include "backend/backend.h"
#include "deepinfer/model.h"
#include "io/safetensors.h"
#include "model/deepseek_v4.h"
#include "model/loaded_model.h"
#include "model/state_cache.h"
#include "teacher_forcing.h"
#include "test_util.h"

namespace deepinfer {
namespace {

std::vector<float> run(Model& m, const std::vector<int32_t>& ids, size_t chunk) {
  auto s = m.new_session();
  std::vector<float> all, part;
  for (size_t b = 0; b < ids.size(); b += chunk) {
    const size_t n = std::min(chunk, ids.size() - b);
    EXPECT_TRUE(m.forward(*s, std::span<const int32_t>(ids).subspan(b, n), &part).is_ok());
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

std::string official_dir() { return testing::fixture("v4-small-official-numerics"); }

TEST(ReleaseNumerics, AutoPicksReleaseForFp8CheckpointsAndExactOtherwise) {
  auto fp8 = Model::load(official_dir());
  ASSERT_TRUE(fp8.is_ok()) << fp8.status().to_string();
  EXPECT_EQ((*fp8)->info().numerics, "release");
  EXPECT_EQ((*fp8)->info().kv_cache_dtype, "bfloat16");
  auto bf16 = Model::load(testing::fixture("v4-tiny-a"));
  ASSERT_TRUE(bf16.is_ok());
  EXPECT_EQ((*bf16)->info().numerics, "exact");
  EXPECT_EQ((*bf16)->info().kv_cache_dtype, "float32");
  LoadOptions o;
  o.numerics = NumericsMode::kExact;
  o.kv_cache_dtype = "fp8";
  auto forced = Model::load(official_dir(), o);
  ASSERT_TRUE(forced.is_ok());
  EXPECT_EQ((*forced)->info().numerics, "exact");
  EXPECT_EQ((*forced)->info().kv_cache_dtype, "fp8");
  o.kv_cache_dtype = "int4";
  auto bad = Model::load(official_dir(), o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("kv_cache_dtype"), std::string::npos);
  EXPECT_NE(bad.status().message().find("int4"), std::string::npos);
}

TEST(ReleaseNumerics, ChunkingInvariantAndDifferentFromExact) {
  for (const char* kv : {"auto", "fp8"}) {
    SCOPED_TRACE(kv);
    LoadOptions o;
    o.numerics = NumericsMode::kRelease;
    o.kv_cache_dtype = kv;
    auto rel = Model::load(official_dir(), o);
    auto ex = Model::load(official_dir(), NumericsMode::kExact);
    ASSERT_TRUE(rel.is_ok() && ex.is_ok());
    std::vector<int32_t> ids(140);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % 1024);
    const auto whole = run(**rel, ids, ids.size());
    const auto chunked = run(**rel, ids, 7);
    const auto single = run(**rel, ids, 1);
    ASSERT_EQ(whole.size(), chunked.size());
    EXPECT_EQ(std::memcmp(whole.data(), chunked.data(), whole.size() * 4), 0);
    EXPECT_EQ(std::memcmp(whole.data(), single.data(), whole.size() * 4), 0);
    const auto exact = run(**ex, ids, ids.size());
    double max_diff = 0.0;
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_TRUE(std::isfinite(whole[i]));
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(whole[i] - exact[i])));
    }
    EXPECT_GT(max_diff, 0.1) << "release numerics should change the logits";
  }
}

// FP8 storage rounds KV rows and indexer keys: different logits from the bf16 cache.
TEST(ReleaseNumerics, Fp8KvCacheChangesTheLogits) {
  LoadOptions o;
  o.numerics = NumericsMode::kRelease;
  auto bf = Model::load(official_dir(), o);
  o.kv_cache_dtype = "fp8";
  auto f8 = Model::load(official_dir(), o);
  ASSERT_TRUE(bf.is_ok() && f8.is_ok());
  std::vector<int32_t> ids(60);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 101 + 7) % 1024);
  const auto a = run(**bf, ids, ids.size());
  const auto b = run(**f8, ids, ids.size());
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_GT(d, 1e-3);
  EXPECT_LT(d, 5.0);
}

// ---- teacher forcing ----

using BlockError = testing::TensorError;
BlockError compare(const float* got, const std::vector<float>& want) {
  return testing::tensor_error(got, want.data(), want.size());
}

// Runs the official-numerics fixture's prompt p0 through our forward (prefill, then one decode step),
// overwriting every block's input with the official activations; records each block's output error
// (attention and MoE outputs) and the logits'.
std::map<std::string, BlockError> teacher_forced(model::Numerics numerics) {
  std::map<std::string, BlockError> errors;
  auto loaded = model::load_model_dir(official_dir());
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  if (!loaded.is_ok()) return errors;
  auto ref = io::SafetensorsSet::open_files({testing::test_data("release-numerics/teacher_forcing_p0.safetensors")});
  EXPECT_TRUE(ref.is_ok()) << ref.status().to_string();
  if (!ref.is_ok()) return errors;
  const testing::Taps taps = testing::cpu_teacher_forced_taps((*loaded)->config, (*loaded)->weights, numerics, *ref);
  for (const auto& [name, got] : taps) {
    if (!name.ends_with("attn_out") && !name.ends_with("ffn_out") && !name.ends_with("logits")) continue;
    const io::TensorView* t = ref->find(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) continue;
    const std::vector<float> want = testing::to_floats(*t);
    EXPECT_EQ(got.size(), want.size()) << name;
    if (got.size() == want.size()) errors[name] = compare(got.data(), want);
  }
  return errors;
}

// Bounds: each block alone is off only where an fp32 sum in a different order flips a bf16 or FP8
// rounding; measured here: the decode step's blocks and every MoE block bitwise equal, prefill
// attention blocks 0.03-0.30% relative rms error, logits 2e-5. Exact math (no FP8 activations, no
// bf16) fed the same inputs is off by more than the bound in every block.
constexpr double kBlockRelRms = 0.006;
constexpr double kLogitsMaxAbs = 0.01;

TEST(ReleaseNumerics, EachBlockFedTheOfficialInputsReproducesTheOfficialOutput) {
  const auto errors = teacher_forced(model::Numerics::kRelease);
  ASSERT_EQ(errors.size(), 2u * 8u + 2u);  // attn_out and ffn_out of 4 layers, prefill and decode, + logits
  for (const auto& [name, e] : errors) {
    SCOPED_TRACE(name);
    RecordProperty(name, std::to_string(e.rel_rms));
    if (name.ends_with("logits")) {
      EXPECT_LT(e.max_abs, kLogitsMaxAbs);
    } else {
      EXPECT_LT(e.rel_rms, kBlockRelRms);
      EXPECT_LT(e.max_abs, 0.05);
    }
    if (name.ends_with("ffn_out")) {
      EXPECT_GT(e.equal, 0.99) << "MoE blocks agree bit for bit but for rare flips";
    }
  }
}

// The same check must fail for math that is not the release's: exact numerics, same inputs.
TEST(ReleaseNumerics, TeacherForcingDetectsExactMathAsDifferent) {
  const auto errors = teacher_forced(model::Numerics::kExact);
  ASSERT_FALSE(errors.empty());
  int blocks_over = 0;
  for (const auto& [name, e] : errors)
    if (!name.ends_with("logits") && e.rel_rms > kBlockRelRms) ++blocks_over;
  EXPECT_EQ(blocks_over, 16) << "every block should exceed the release bound under exact math";
}

// Free running (prefill over the prompt, then teacher-forced decode of the official greedy tokens):
// the chaotic drift above keeps us from the official rows' exact values (measured: mean abs error
// 0.115 / 0.097, max 1.20 / 0.50, argmax 6/8 / 5/8 on p0 / p1), but the release path is closer to
// them than exact math is (mean abs 0.181 / 0.220), and full forward == token by token.
TEST(ReleaseNumerics, FreeRunningLogitsAreMuchCloserToTheOfficialCodeThanExactMath) {
  auto set = io::SafetensorsSet::open_files({official_dir() + "/reference.safetensors"});
  ASSERT_TRUE(set.is_ok());
  auto rel = Model::load(official_dir(), NumericsMode::kRelease);
  auto ex = Model::load(official_dir(), NumericsMode::kExact);
  ASSERT_TRUE(rel.is_ok() && ex.is_ok());
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const std::string key = "p" + std::to_string(p) + ".";
    const auto ids = testing::to_ids(*set->find(key + "input_ids"));
    const auto greedy = testing::to_ids(*set->find(key + "greedy_tokens"));
    const auto want = testing::to_floats(*set->find(key + "logits"));
    const size_t V = 1024, rows = greedy.size();
    std::vector<int32_t> seq = ids;
    seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
    const auto full_rel = run(**rel, seq, seq.size());
    const auto steps_rel = run(**rel, seq, 1);
    ASSERT_EQ(full_rel.size(), steps_rel.size());
    EXPECT_EQ(std::memcmp(full_rel.data(), steps_rel.data(), full_rel.size() * 4), 0);
    const auto full_ex = run(**ex, seq, seq.size());
    double err_rel = 0.0, err_ex = 0.0, max_rel = 0.0;
    int argmax_rel = 0, argmax_ex = 0;
    for (size_t r = 0; r < rows; ++r) {
      const size_t at = (ids.size() - 1 + r) * V;
      size_t a_rel = 0, a_ex = 0, a_want = 0;
      for (size_t v = 0; v < V; ++v) {
        const double w = want[r * V + v];
        err_rel += std::fabs(full_rel[at + v] - w);
        err_ex += std::fabs(full_ex[at + v] - w);
        max_rel = std::max(max_rel, std::fabs(full_rel[at + v] - w));
        if (full_rel[at + v] > full_rel[at + a_rel]) a_rel = v;
        if (full_ex[at + v] > full_ex[at + a_ex]) a_ex = v;
        if (want[r * V + v] > want[r * V + a_want]) a_want = v;
      }
      argmax_rel += a_rel == a_want;
      argmax_ex += a_ex == a_want;
    }
    err_rel /= static_cast<double>(rows * V);
    err_ex /= static_cast<double>(rows * V);
    RecordProperty("p" + std::to_string(p) + "_mean_abs_release", std::to_string(err_rel));
    RecordProperty("p" + std::to_string(p) + "_mean_abs_exact", std::to_string(err_ex));
    RecordProperty("p" + std::to_string(p) + "_max_abs_release", std::to_string(max_rel));
    std::printf("prompt %d: mean |release - official| %.4f (exact math: %.4f), max %.3f, argmax %d/%zu (exact %d/%zu)\n",
                p, err_rel, err_ex, max_rel, argmax_rel, rows, argmax_ex, rows);
    EXPECT_LT(err_rel, 0.75 * err_ex);
  }
}

// Mean abs logit error and argmax agreement of each model against an official run stored in
// tests/data/release-numerics: 8 random prompts of 130-300 tokens, each the prefill's last row and 7
// teacher-forced decode rows (`q{i}.input_ids`, `q{i}.greedy_tokens`, `q{i}.logits`).
struct Agreement {
  double mean_abs = 0.0;
  int argmax = 0, rows = 0;
};
std::vector<Agreement> agreement(const std::string& file, const std::vector<Model*>& models) {
  auto set = io::SafetensorsSet::open_files({testing::test_data("release-numerics/" + file)});
  EXPECT_TRUE(set.is_ok()) << set.status().to_string();
  std::vector<Agreement> out(models.size());
  if (!set.is_ok()) return out;
  const size_t V = 1024;
  for (int p = 0; p < 8; ++p) {
    const std::string key = "q" + std::to_string(p) + ".";
    const auto ids = testing::to_ids(*set->find(key + "input_ids"));
    const auto greedy = testing::to_ids(*set->find(key + "greedy_tokens"));
    const auto want = testing::to_floats(*set->find(key + "logits"));
    std::vector<int32_t> seq = ids;
    seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
    for (size_t m = 0; m < models.size(); ++m) {
      const auto got = run(*models[m], seq, seq.size());
      for (size_t r = 0; r < greedy.size(); ++r) {
        const float* g = got.data() + (ids.size() - 1 + r) * V;
        const float* w = want.data() + r * V;
        for (size_t v = 0; v < V; ++v) out[m].mean_abs += std::fabs(g[v] - w[v]);
        out[m].argmax += std::max_element(g, g + V) - g == std::max_element(w, w + V) - w;
        ++out[m].rows;
      }
    }
  }
  for (Agreement& a : out) a.mean_abs /= static_cast<double>(a.rows) * V;
  return out;
}

struct ThreeModels {
  std::unique_ptr<Model> release_fp8, release, exact;
};
ThreeModels three_models() {
  ThreeModels t;
  LoadOptions o;
  o.numerics = NumericsMode::kRelease;
  o.kv_cache_dtype = "fp8";
  auto f8 = Model::load(official_dir(), o);
  o.kv_cache_dtype = "auto";
  auto bf = Model::load(official_dir(), o);
  auto ex = Model::load(official_dir(), NumericsMode::kExact);
  EXPECT_TRUE(f8.is_ok() && bf.is_ok() && ex.is_ok());
  if (f8.is_ok() && bf.is_ok() && ex.is_ok()) {
    t.release_fp8 = std::move(f8).value();
    t.release = std::move(bf).value();
    t.exact = std::move(ex).value();
  }
  return t;
}

// Free running on 8 more prompts against the official code as it made the fixture. Measured:
// release mean abs 0.123, argmax 52/64; the official code itself with its fp32 GEMMs in float64
// 0.075, 56/64 (over 24 prompts: release 79.2 % argmax, mean 0.105; official float64 82.3 %, 0.090 —
// the same floor); exact math 0.206, 39/64; release with an FP8 cache 0.176, 45/64.
TEST(ReleaseNumerics, FreeRunningOnMorePromptsSitsAtTheOfficialCodesOwnReorderingFloor) {
  ThreeModels m = three_models();
  ASSERT_TRUE(m.exact);
  const auto a = agreement("official_8_prompts.safetensors", {m.release.get(), m.release_fp8.get(), m.exact.get()});
  std::printf("vs official: release %.4f (argmax %d/%d), release+fp8 %.4f (%d), exact %.4f (%d)\n", a[0].mean_abs,
              a[0].argmax, a[0].rows, a[1].mean_abs, a[1].argmax, a[2].mean_abs, a[2].argmax);
  EXPECT_LT(a[0].mean_abs, 0.7 * a[2].mean_abs);
  EXPECT_LT(a[0].mean_abs, 0.8 * a[1].mean_abs);
  EXPECT_GE(a[0].argmax, a[0].rows * 3 / 4);
}

// The official code with real FP8/FP4 casts in its in-place KV and indexer steps (what the kernels'
// names describe; same kind of data) is what release numerics with an FP8 KV cache computes.
// Measured: release + fp8 cache mean abs 0.115, argmax 53/64 (over 24 prompts 80.7 %, mean 0.112,
// against the official float64 run's 81.8 %, 0.099); release with the bf16 cache 0.190, 44/64;
// exact math 0.209, 46/64.
TEST(ReleaseNumerics, Fp8KvCacheMatchesTheOfficialCodeWithRealFp8Rounding) {
  ThreeModels m = three_models();
  ASSERT_TRUE(m.exact);
  const auto a = agreement("official_fp8_rounding_8_prompts.safetensors",
                           {m.release_fp8.get(), m.release.get(), m.exact.get()});
  std::printf("vs official with FP8 casts: release+fp8 %.4f (argmax %d/%d), release %.4f (%d), exact %.4f (%d)\n",
              a[0].mean_abs, a[0].argmax, a[0].rows, a[1].mean_abs, a[1].argmax, a[2].mean_abs, a[2].argmax);
  EXPECT_LT(a[0].mean_abs, 0.65 * a[1].mean_abs);
  EXPECT_LT(a[0].mean_abs, 0.65 * a[2].mean_abs);
  EXPECT_GE(a[0].argmax, a[0].rows * 3 / 4);
}

}  // namespace
}  // namespace deepinfer
