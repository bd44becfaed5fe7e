// The forward pass against transformers' DeepseekV4ForCausalLM (fp32): every fixture prompt
// through prefill, chunked prefill (1, 7, 32) and token-by-token decode within 1e-4 max abs, the
// paths bitwise equal to each other, and greedy decoding equal to the oracle's wherever the
// oracle's own top-1/top-2 margin is above the tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "deepinfer/model.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using testing::Reference;

constexpr float kTolerance = 1e-4f;

struct Case {
  std::string name;
  std::string model_dir;
  std::string reference;
  bool greedy_from_same_math = true;  // false: the oracle's greedy tokens came from another precision
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

std::vector<Case> cases() {
  using testing::fixture;
  using testing::test_data;
  return {
      {"tiny_a", fixture("v4-tiny-a"), fixture("v4-tiny-a/reference.safetensors")},
      {"tiny_yarn", fixture("v4-tiny-yarn"), fixture("v4-tiny-yarn/reference.safetensors")},
      {"tiny_a_official_fp8_fp4", fixture("v4-tiny-a-official"), fixture("v4-tiny-a-official/reference.safetensors")},
      // Made by tools/make_oracle_cases.sh (see tests/data/README.md).
      {"dims_b", test_data("v4-dims-b"), test_data("v4-dims-b/reference.safetensors")},
      {"yarn_b", test_data("v4-yarn-b"), test_data("v4-yarn-b/reference.safetensors")},
      {"yarn_b_official", test_data("v4-yarn-b-official"), test_data("v4-yarn-b-official/reference.safetensors")},
      {"bf16_checkpoint", test_data("v4-tiny-bf16"), test_data("v4-tiny-bf16/reference_fp32.safetensors"), false},
  };
}

class FixtureTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::load_reference(GetParam().reference, &ref_)) << "missing reference " << GetParam().reference;
    // transformers' fixtures check exact numerics (FP8 checkpoints default to release).
    auto m = Model::load(GetParam().model_dir, NumericsMode::kExact);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    model_ = std::move(m).value();
  }

  // Logits of every position of `seq`, fed `chunk` tokens at a time (0: all at once).
  std::vector<float> run(const std::vector<int32_t>& seq, size_t chunk) {
    auto session = model_->new_session();
    std::vector<float> all, part;
    const size_t step = chunk ? chunk : seq.size();
    for (size_t b = 0; b < seq.size(); b += step) {
      const size_t n = std::min(step, seq.size() - b);
      Status s = model_->forward(*session, std::span<const int32_t>(seq).subspan(b, n), &part);
      EXPECT_TRUE(s.is_ok()) << s.to_string();
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  }

  Reference ref_;
  std::unique_ptr<Model> model_;
};

TEST_P(FixtureTest, AllPathsMatchOracleAndEachOther) {
  for (size_t p = 0; p < ref_.prompts.size(); ++p) {
    const auto& pr = ref_.prompts[p];
    std::vector<int32_t> seq = pr.input_ids;
    seq.insert(seq.end(), pr.greedy.begin(), pr.greedy.end() - 1);
    ASSERT_EQ(static_cast<int64_t>(pr.logits.size()), static_cast<int64_t>(seq.size()) * pr.vocab);
    const std::vector<float> full = run(seq, 0);
    ASSERT_EQ(full.size(), pr.logits.size());
    float worst = 0.0f;
    for (size_t i = 0; i < full.size(); ++i) worst = std::max(worst, std::abs(full[i] - pr.logits[i]));
    EXPECT_LT(worst, kTolerance) << "prompt " << p << " (T=" << seq.size() << ") prefill";
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{32}}) {
      const std::vector<float> chunked = run(seq, chunk);
      // The design promises more than the tolerance: identical arithmetic per token, so bitwise equal.
      EXPECT_TRUE(chunked == full) << "prompt " << p << ": chunk " << chunk << " differs from prefill";
    }
  }
}

// Only cases whose greedy tokens were chosen by the same (fp32) math as their logits.
class GreedyTest : public FixtureTest {};

TEST_P(GreedyTest, GreedyMatchesOracleWhereMarginAllows) {
  for (size_t p = 0; p < ref_.prompts.size(); ++p) {
    const auto& pr = ref_.prompts[p];
    const int T = static_cast<int>(pr.input_ids.size());
    const int N = static_cast<int>(pr.greedy.size());
    auto got = model_->generate_greedy(pr.input_ids, N, /*chunk=*/0, /*stop_at_eos=*/false);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_EQ(static_cast<int>(got->size()), N);
    for (int k = 0; k < N; ++k) {
      if ((*got)[k] == pr.greedy[k]) continue;
      // A different argmax is only acceptable where the oracle's own top-2 margin is within tolerance.
      const float* row = pr.logits.data() + static_cast<size_t>(T - 1 + k) * pr.vocab;
      std::vector<float> r(row, row + pr.vocab);
      std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<float>());
      EXPECT_LT(r[0] - r[1], 2 * kTolerance) << "prompt " << p << " step " << k << ": got " << (*got)[k]
                                             << ", oracle " << pr.greedy[k];
      break;  // later tokens continue a different sequence
    }
  }
}

std::vector<Case> greedy_cases() {
  std::vector<Case> out;
  for (const Case& c : cases())
    if (c.greedy_from_same_math) out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Oracle, FixtureTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });
INSTANTIATE_TEST_SUITE_P(Oracle, GreedyTest, ::testing::ValuesIn(greedy_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// v4-small-official-numerics: released layout at larger dims (hidden 512, window 128, HCA ratio
// 128, YaRN via legacy rope_scaling, FP8/FP4). Its `hf_logits` are transformers fp32 on the
// dequantized weights: rows T-1 (end of prefill) and the 7 teacher-forced decode steps after it.
TEST(SmallOfficialExact, PrefillThenDecodeMatchesTransformers) {
  const std::string dir = testing::fixture("v4-small-official-numerics");
  auto set = io::SafetensorsSet::open_files({dir + "/reference.safetensors"});
  ASSERT_TRUE(set.is_ok()) << set.status().to_string();
  auto m = Model::load(dir, NumericsMode::kExact);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ((*m)->info().numerics, "exact");
  EXPECT_EQ((*m)->info().kv_cache_dtype, "float32");
  for (int p = 0; p < 2; ++p) {
    const std::string key = "p" + std::to_string(p) + ".";
    const auto ids = testing::to_ids(*set->find(key + "input_ids"));
    const auto greedy = testing::to_ids(*set->find(key + "greedy_tokens"));
    const auto* hf = set->find(key + "hf_logits");
    ASSERT_NE(hf, nullptr);
    const auto want = testing::to_floats(*hf);
    const int64_t rows = hf->shape[0], V = hf->shape[1];
    auto session = (*m)->new_session();
    std::vector<float> logits;
    ASSERT_TRUE((*m)->forward(*session, ids, &logits).is_ok());
    float worst = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* got = r == 0 ? logits.data() + (ids.size() - 1) * V : logits.data();
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::abs(got[v] - want[r * V + v]));
      if (r + 1 < rows) {
        const int32_t next[1] = {greedy[r]};
        ASSERT_TRUE((*m)->forward(*session, next, &logits).is_ok());
      }
    }
    EXPECT_LT(worst, kTolerance) << "prompt " << p;
  }
}

}  // namespace
}  // namespace deepinfer
