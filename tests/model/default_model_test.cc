// The trained default model (models/v4-code-19m) against transformers on the same checkpoint:
// logits of the first 64 held-out positions, computed by tools/train_default_model/evaluate.py on
// the H200 in fp32 on the checkpoint's bf16 weights (tests/data/default-model).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "deepinfer/model.h"
#include "test_util.h"

namespace deepinfer {
namespace {

// Observed 1.3e-5 (logits span [-14.4, 13.3]); the bound leaves room for summation-order noise.
constexpr double kTolerance = 1e-3;

TEST(DefaultModel, LogitsMatchTransformersOnHeldOutText) {
  const std::string dir = std::string(DEEPINFER_SOURCE_DIR) + "/models/v4-code-19m";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ((*model)->info().vocab_size, 8192);
  EXPECT_EQ((*model)->info().num_layers, 6);

  const auto ref = testing::read_raw(testing::test_data("default-model/heldout_logits.safetensors"));
  ASSERT_TRUE(ref.count("input_ids") && ref.count("logits"));
  const auto& ids_t = ref.at("input_ids");
  std::vector<int32_t> ids(ids_t.bytes.size() / 8);
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t v;
    std::memcpy(&v, ids_t.bytes.data() + 8 * i, 8);
    ids[i] = static_cast<int32_t>(v);
  }
  std::vector<float> want(ref.at("logits").bytes.size() / 4);
  std::memcpy(want.data(), ref.at("logits").bytes.data(), want.size() * 4);
  ASSERT_EQ(want.size(), ids.size() * 8192u);

  auto session = (*model)->new_session();
  std::vector<float> got;
  ASSERT_TRUE((*model)->forward(*session, ids, &got).is_ok());
  ASSERT_EQ(got.size(), want.size());
  double max_abs = 0.0;
  int argmax_equal = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const float* g = &got[t * 8192];
    const float* w = &want[t * 8192];
    size_t ag = 0, aw = 0;
    for (size_t v = 0; v < 8192; ++v) {
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(g[v] - w[v])));
      if (g[v] > g[ag]) ag = v;
      if (w[v] > w[aw]) aw = v;
    }
    argmax_equal += ag == aw;
  }
  // Logits span about [-15, 15]; both sides compute in fp32 from the same bf16 weights.
  EXPECT_LT(max_abs, kTolerance) << "max abs difference " << max_abs;
  EXPECT_EQ(argmax_equal, static_cast<int>(ids.size()));
  std::printf("default model vs transformers: max abs %.3g over %zu x 8192 logits\n", max_abs, ids.size());
}

}  // namespace
}  // namespace deepinfer
