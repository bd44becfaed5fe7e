// Weight binding details that the oracle tests do not reach: MTP tensors are recognised and
// kept, stray layers are rejected, and the two tensor layouts resolve the same logical names.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/config.h"
#include "model/weights.h"
#include "test_util.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_weights_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(WeightsTest, MtpTensorsAreKeptAndStrayLayersRejected) {
  const std::string src = testing::fixture("v4-tiny-a-official");
  auto config = load_model_config(src);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  auto tensors = testing::read_raw(src + "/model-00001-of-00002.safetensors");
  auto second = testing::read_raw(src + "/model-00002-of-00002.safetensors");
  tensors.insert(second.begin(), second.end());
  testing::RawTensor mtp{"F32", {4, 4}, std::vector<uint8_t>(64, 0)};
  tensors["mtp.0.e_proj.weight"] = mtp;
  tensors["mtp.0.enorm.weight"] = testing::RawTensor{"F32", {4}, std::vector<uint8_t>(16, 0)};
  const std::string file = (dir_ / "all.safetensors").string();
  testing::write_raw(file, tensors);
  {
    auto set = io::SafetensorsSet::open_files({file});
    ASSERT_TRUE(set.is_ok());
    auto w = load_weights(set.value(), config.value());
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_EQ(w->layout, "official");
    ASSERT_EQ(w->mtp.size(), 2u);
    EXPECT_EQ(w->mtp.at("mtp.0.e_proj.weight").shape, (std::vector<int64_t>{4, 4}));
  }
  tensors["layers.7.attn_norm.weight"] = testing::RawTensor{"F32", {64}, std::vector<uint8_t>(256, 0)};
  testing::write_raw(file, tensors);
  auto set = io::SafetensorsSet::open_files({file});
  ASSERT_TRUE(set.is_ok());
  auto w = load_weights(set.value(), config.value());
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("'layers.7.attn_norm.weight' belongs to layer 7 but the config has 5 layers"),
            std::string::npos)
      << w.status().message();
}

TEST_F(WeightsTest, Fp8WithoutScaleIsAnErrorNamingTheTensor) {
  const std::string src = testing::fixture("v4-tiny-a-official");
  auto config = load_model_config(src);
  ASSERT_TRUE(config.is_ok());
  auto tensors = testing::read_raw(src + "/model-00001-of-00002.safetensors");
  auto second = testing::read_raw(src + "/model-00002-of-00002.safetensors");
  tensors.insert(second.begin(), second.end());
  ASSERT_EQ(tensors.count("layers.0.attn.wq_a.scale"), 1u);
  tensors.erase("layers.0.attn.wq_a.scale");
  const std::string file = (dir_ / "noscale.safetensors").string();
  testing::write_raw(file, tensors);
  auto set = io::SafetensorsSet::open_files({file});
  ASSERT_TRUE(set.is_ok());
  auto w = load_weights(set.value(), config.value());
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("'layers.0.attn.wq_a.weight' is FP8 but its block scale"), std::string::npos)
      << w.status().message();
}

}  // namespace
}  // namespace deepinfer::model
