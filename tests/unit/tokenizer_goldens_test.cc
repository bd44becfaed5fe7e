// Other byte-level BPE tokenizers (Qwen3, Llama 3, GPT-4o) and DeepSeek-V3 on our own corpus:
// ids and decoded strings exact against goldens made with HuggingFace's tokenizer logic
// (tests/data/tokenizers/README.md). The tokenizer files are fetched by
// tools/fetch_test_tokenizers.sh (tools/install_deps.sh runs it); a missing file fails the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "deepinfer/tokenizer.h"

namespace deepinfer {
namespace {

using nlohmann::json;

struct GoldenCase {
  std::string name;
  std::string tokenizer_json;
};

std::vector<GoldenCase> golden_cases() {
  const std::string tp = DEEPINFER_THIRD_PARTY_DIR "/tokenizers/";
  return {{"qwen3", tp + "qwen3/tokenizer.json"},
          {"llama3", tp + "llama3/tokenizer.json"},
          {"gpt4o", tp + "gpt4o/tokenizer.json"},
          {"deepseek_v3", DEEPINFER_FIXTURES_DIR "/tokenizer/deepseek-v3/tokenizer.json"}};
}

class TokenizerGoldens : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(TokenizerGoldens, IdsAndDecodedExact) {
  const GoldenCase& c = GetParam();
  ASSERT_TRUE(std::filesystem::exists(c.tokenizer_json))
      << c.tokenizer_json << " is missing: run tools/fetch_test_tokenizers.sh (tools/install_deps.sh does)";
  auto tok = Tokenizer::from_file(c.tokenizer_json);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  std::string dir = c.name == "deepseek_v3" ? "deepseek-v3" : c.name;
  std::ifstream in(std::string(DEEPINFER_TEST_DATA_DIR) + "/tokenizers/" + dir + "/golden.jsonl");
  ASSERT_TRUE(in) << "missing golden.jsonl for " << c.name;
  std::string line;
  int n = 0, id_mismatch = 0, text_mismatch = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    const json g = json::parse(line);
    const std::string text = g["text"].get<std::string>();
    const auto want = g["ids"].get<std::vector<int32_t>>();
    auto got = (*tok)->encode(text);
    ASSERT_TRUE(got.is_ok()) << "line " << n << ": " << got.status().to_string();
    if (got.value() != want && ++id_mismatch <= 3) ADD_FAILURE() << c.name << " line " << n << ": " << g["text"].dump();
    auto dec = (*tok)->decode(want);
    ASSERT_TRUE(dec.is_ok()) << dec.status().to_string();
    if (dec.value() != g["decoded"].get<std::string>() && ++text_mismatch <= 3)
      ADD_FAILURE() << c.name << " decode line " << n << ": " << g["text"].dump();
  }
  EXPECT_GT(n, 400);
  EXPECT_EQ(id_mismatch, 0);
  EXPECT_EQ(text_mismatch, 0);
}

INSTANTIATE_TEST_SUITE_P(HfGoldens, TokenizerGoldens, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& i) { return i.param.name; });

}  // namespace
}  // namespace deepinfer
