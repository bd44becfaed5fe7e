// The `deepinfer` command line: outputs of `logits` and `generate`, and bad input, each a clear
// error and a non-zero exit (never a crash).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "deepinfer/model.h"
#include "test_util.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using testing::fixture;

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

RunResult run_cli(const std::string& args) {
  RunResult r;
  const std::string cmd = std::string(DEEPINFER_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// run_cli merges stderr into the output; drops the CLI's own "deepinfer: ..." note lines.
std::string without_notes(const std::string& output) {
  std::string out;
  std::istringstream in(output);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("deepinfer:", 0) != 0) out += l + "\n";
  return out;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_cli_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of v4-tiny-a (config + weights) that a test may break.
  std::string copy_tiny(const std::string& name) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    fs::copy_file(fixture("v4-tiny-a/config.json"), d / "config.json");
    fs::copy_file(fixture("v4-tiny-a/model.safetensors"), d / "model.safetensors");
    return d.string();
  }
  std::string out_file() const { return (dir_ / "out.bin").string(); }

  fs::path dir_;
};

TEST_F(CliTest, LogitsWritesEveryRowAndPrintsShape) {
  const RunResult r = run_cli("logits --model " + fixture("v4-tiny-a") + " --ids 5,17,42 --chunk 2 --out " + out_file());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(without_notes(r.output), "3 512\n");
  EXPECT_NE(r.output.find("deepinfer: numerics exact"), std::string::npos) << r.output;
  ASSERT_EQ(fs::file_size(out_file()), 3u * 512u * 4u);
  // Same numbers as the library.
  auto m = Model::load(fixture("v4-tiny-a"));
  ASSERT_TRUE(m.is_ok());
  auto s = (*m)->new_session();
  std::vector<float> want;
  ASSERT_TRUE((*m)->forward(*s, std::vector<int32_t>{5, 17, 42}, &want).is_ok());
  std::vector<float> got(want.size());
  std::ifstream f(out_file(), std::ios::binary);
  f.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * 4));
  EXPECT_TRUE(got == want);
}

TEST_F(CliTest, GenerateMatchesOracleGreedy) {
  testing::Reference ref;
  ASSERT_TRUE(testing::load_reference(fixture("v4-tiny-a/reference.safetensors"), &ref));
  const auto& p = ref.prompts[0];  // margin 0.055: far above the tolerance
  std::string ids;
  for (size_t i = 0; i < p.input_ids.size(); ++i) ids += (i ? "," : "") + std::to_string(p.input_ids[i]);
  const RunResult r = run_cli("generate --model " + fixture("v4-tiny-a") + " --prompt-ids " + ids + " --max-tokens " +
                              std::to_string(p.greedy.size()) + " --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), p.greedy);
}

TEST_F(CliTest, DefaultModelRunsAndSaysSo) {
  const RunResult r = run_cli("generate --prompt-ids 5,17,42 --max-tokens 4 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("using the default model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("models/v4-code-19m"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"token_ids\":["), std::string::npos) << r.output;
}

// The README's first command: the trained default model completes code, printed as plain text.
TEST_F(CliTest, ReadmeFirstCommandPrintsReadableCode) {
  const RunResult r = run_cli("generate --prompt 'def fibonacci(n):' --max-tokens 48");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string out = without_notes(r.output);
  ASSERT_EQ(out.rfind("def fibonacci(n):", 0), 0u) << r.output;
  const std::string completion = out.substr(std::string("def fibonacci(n):").size());
  ASSERT_GT(completion.size(), 60u) << r.output;
  // Readable: printable ASCII and newlines only, mostly letters/spaces, several distinct words.
  size_t letters = 0;
  for (char c : completion) {
    EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << "byte " << static_cast<int>(c) << " in " << r.output;
    letters += std::isalpha(static_cast<unsigned char>(c)) || c == ' ' || c == '\n';
  }
  EXPECT_GT(letters * 10, completion.size() * 6) << r.output;
}

// deepinfer perplexity on the model card's held-out text reproduces the training script's figure.
TEST_F(CliTest, PerplexityOfTheDefaultModelMatchesTheTrainingScript) {
  std::ifstream rep(std::string(DEEPINFER_SOURCE_DIR) + "/tools/train_default_model/results/eval.json");
  ASSERT_TRUE(rep) << "missing tools/train_default_model/results/eval.json";
  const auto want = nlohmann::json::parse(rep);
  const RunResult r =
      run_cli("perplexity --text-file " + std::string(DEEPINFER_SOURCE_DIR) + "/models/v4-code-19m/heldout.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto got = nlohmann::json::parse(without_notes(r.output));
  EXPECT_EQ(got["tokens"], want["heldout_tokens"]);
  // Same tokens, fp32 forward on both sides: the mean NLL agrees to 1e-6 here (the output has 6 decimals).
  EXPECT_NEAR(got["mean_nll"].get<double>(), want["heldout_mean_nll"].get<double>(), 1e-5) << r.output;
  EXPECT_LT(got["perplexity"].get<double>(), 20.0) << "far below the vocabulary size (8192): the model learned";
}


void expect_error(const RunResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.output;
}

TEST_F(CliTest, TruncatedCheckpoint) {
  const std::string d = copy_tiny("trunc");
  fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") / 2);
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()), "past the end");
}

TEST_F(CliTest, GarbledHeader) {
  const std::string d = copy_tiny("garbled");
  std::fstream f(d + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.write("{{{{not json", 12);
  f.close();
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()), "not valid JSON");
}

TEST_F(CliTest, OffsetsPastTheEnd) {
  const std::string d = copy_tiny("offsets");
  auto t = testing::read_raw(d + "/model.safetensors");
  testing::write_raw(d + "/model.safetensors", t);
  // Re-write the header so the last tensor claims bytes beyond the file.
  std::ifstream in(d + "/model.safetensors", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  auto& e = header["head.weight"];
  const uint64_t b = bytes.size() + 1000;  // beyond the end of the file
  e["data_offsets"] = {b, b + 512 * 64 * 4};
  const std::string h = header.dump();
  std::ofstream out(d + "/model.safetensors", std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((h.size() >> (8 * i)) & 0xff));
  out << h;
  out.write(bytes.data() + 8 + n, static_cast<std::streamsize>(bytes.size() - 8 - n));
  out.close();
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()), "'head.weight': data_offsets");
}

TEST_F(CliTest, UnknownDtype) {
  const std::string d = copy_tiny("dtype");
  auto t = testing::read_raw(d + "/model.safetensors");
  t["model.norm.weight"].dtype = "F7";
  testing::write_raw(d + "/model.safetensors", t);
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()), "unknown dtype 'F7'");
}

TEST_F(CliTest, MissingTensor) {
  const std::string d = copy_tiny("missing");
  auto t = testing::read_raw(d + "/model.safetensors");
  t.erase("model.layers.2.attn.indexer.wq_b.weight");
  testing::write_raw(d + "/model.safetensors", t);
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()),
               "missing tensor 'model.layers.2.attn.indexer.wq_b.weight'");
}

TEST_F(CliTest, WrongShape) {
  const std::string d = copy_tiny("shape");
  auto t = testing::read_raw(d + "/model.safetensors");
  auto& w = t["model.layers.1.attn.wkv.weight"];
  w.shape = {32, 64};
  w.bytes.resize(32 * 64 * 4);
  testing::write_raw(d + "/model.safetensors", t);
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()),
               "'model.layers.1.attn.wkv.weight': expected shape [64, 64], found [32, 64]");
}

TEST_F(CliTest, ConfigMissingKey) {
  const std::string d = copy_tiny("nokey");
  std::ifstream in(d + "/config.json");
  auto j = nlohmann::json::parse(in);
  in.close();
  j.erase("hidden_size");
  std::ofstream(d + "/config.json") << j.dump();
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()), "missing required key 'hidden_size'");
}

TEST_F(CliTest, ConfigUnknownLayerType) {
  const std::string d = copy_tiny("layertype");
  std::ifstream in(d + "/config.json");
  auto j = nlohmann::json::parse(in);
  in.close();
  j["layer_types"][3] = "full_attention";
  std::ofstream(d + "/config.json") << j.dump();
  expect_error(run_cli("logits --model " + d + " --ids 1,2 --out " + out_file()),
               "layer_types[3] is an unknown layer type 'full_attention'");
}

TEST_F(CliTest, IdsOutsideVocabulary) {
  expect_error(run_cli("logits --model " + fixture("v4-tiny-a") + " --ids 5,512 --out " + out_file()),
               "token id 512 at index 1 is outside the vocabulary [0, 512)");
  expect_error(run_cli("generate --model " + fixture("v4-tiny-a") + " --prompt-ids 5,999999 --max-tokens 2"),
               "outside the vocabulary");
  expect_error(run_cli("logits --model " + fixture("v4-tiny-a") + " --ids 5,-3 --out " + out_file()),
               "'-3' is not a non-negative token id");
}

TEST_F(CliTest, MissingModelDirectory) {
  expect_error(run_cli("logits --model " + (dir_ / "nope").string() + " --ids 1 --out " + out_file()), "nope");
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

const std::string kDeepSeekTokenizer = testing::fixture("tokenizer/deepseek-v3/tokenizer.json");

TEST_F(CliTest, TokenizeJsonlInOrderWithBadLinesReported) {
  const std::string in = (dir_ / "in.jsonl").string();
  std::ofstream(in) << "{\"text\": \"Hello, world! How are you doing today?\"}\n"
                    << "not json\n"
                    << "{\"text\": \"<｜end▁of▁sentence｜>x\"}\n";
  const RunResult r = run_cli("tokenize --tokenizer " + kDeepSeekTokenizer + " --jsonl " + in);
  EXPECT_EQ(r.exit_code, 1);  // one bad line
  std::vector<std::string> stdout_lines;  // (run_cli merges stderr; its lines start with "deepinfer:")
  std::istringstream lines(r.output);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("deepinfer:", 0) != 0) stdout_lines.push_back(l);
  ASSERT_EQ(stdout_lines.size(), 3u) << r.output;
  EXPECT_EQ(stdout_lines[0], "{\"ids\": [19923, 14, 2058, 3, 1730, 477, 440, 4843, 4316, 33]}");
  EXPECT_EQ(stdout_lines[2], "{\"ids\": [1, 90]}");  // the special-token string is matched
  EXPECT_NE(r.output.find("{\"error\": \"invalid argument: " + in + ":2: not a JSON object with \\\"text\\\"\"}"),
            std::string::npos)
      << r.output;
}

TEST_F(CliTest, DetokenizeAndErrors) {
  RunResult r = run_cli("detokenize --tokenizer " + kDeepSeekTokenizer + " --ids 19923,14,2058,3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "{\"text\": \"Hello, world!\"}\n");
  expect_error(run_cli("detokenize --tokenizer " + kDeepSeekTokenizer + " --ids 5,999999"),
               "token id 999999 at index 1 is outside the vocabulary");
  expect_error(run_cli("tokenize --tokenizer " + (dir_ / "missing.json").string() + " --text hi"), "missing.json");
  expect_error(run_cli("tokenize --text hi"), "give --tokenizer FILE or --model DIR");
}

// Reads `deepinfer generate` JSONL output (stdout lines only) into index -> object.
std::map<int, nlohmann::json> read_generate_output(const std::string& path) {
  std::map<int, nlohmann::json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) {
    auto j = nlohmann::json::parse(l);
    out[j["index"].get<int>()] = j;
  }
  return out;
}

// The needle test through the command line: a request alone and inside batches (other requests
// before and after it, different token budgets, overlap on and off) gives identical token ids.
TEST_F(CliTest, GenerateNeedleAloneAndInBatchesGivesIdenticalTokens) {
  const std::string needle_ids = "[11,22,33,44,55,66,77,88,99,110,121,132,143,154,165,176,187,198,209,220,231]";
  const std::string greedy = "{\"prompt_ids\": " + needle_ids + ", \"sampling_params\": {\"max_tokens\": 20, \"ignore_eos\": true}}";
  const std::string seeded = "{\"prompt_ids\": " + needle_ids +
                             ", \"sampling_params\": {\"max_tokens\": 20, \"temperature\": 0.8, \"top_p\": 0.9, "
                             "\"seed\": 42, \"ignore_eos\": true, \"logprobs\": 1}}";
  for (const std::string& needle : {greedy, seeded}) {
    const std::string alone = (dir_ / "alone.jsonl").string(), alone_out = (dir_ / "alone.out").string();
    std::ofstream(alone) << needle << "\n";
    RunResult r = run_cli("generate --model " + fixture("v4-tiny-a") + " --prompts " + alone + " --out " + alone_out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto want = read_generate_output(alone_out).at(0);
    ASSERT_EQ(want["token_ids"].size(), 20u) << want.dump();

    const std::string batch = (dir_ / "batch.jsonl").string(), batch_out = (dir_ / "batch.out").string();
    {
      std::ofstream f(batch);
      f << "{\"prompt_ids\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34]}\n";
      f << "{\"prompt_ids\": [400, 401], \"sampling_params\": {\"temperature\": 1.0, \"seed\": 7, \"max_tokens\": 30}}\n";
      f << needle << "\n";
      f << "{\"prompt_ids\": [5, 6, 7, 8, 9, 10, 11], \"sampling_params\": {\"max_tokens\": 3}}\n";
    }
    for (const std::string flags : {"--max-num-batched-tokens 7", "--max-num-batched-tokens 64 --no-async", "--chunk 5"}) {
      r = run_cli("generate --model " + fixture("v4-tiny-a") + " --prompts " + batch + " --out " + batch_out + " " + flags);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const auto got = read_generate_output(batch_out);
      ASSERT_EQ(got.size(), 4u);
      EXPECT_EQ(got.at(2)["token_ids"], want["token_ids"]) << flags;
      if (want.contains("logprobs")) {
        EXPECT_EQ(got.at(2)["logprobs"], want["logprobs"]) << flags;
      }
    }
  }
}

TEST_F(CliTest, GenerateJsonlBadLinesFailAlone) {
  const std::string in = (dir_ / "in.jsonl").string(), out = (dir_ / "out.jsonl").string();
  std::ofstream(in) << "{\"prompt_ids\": [5, 6, 7], \"sampling_params\": {\"max_tokens\": 4}}\n"
                    << "{\"prompt_ids\": [5, 6, 7], \"sampling_params\": {\"temperature\": -1}}\n"
                    << "not json\n"
                    << "{\"prompt_ids\": [5, 6, 7], \"sampling_params\": {\"tempreature\": 1}}\n"
                    << "{\"prompt\": \"needs a tokenizer\"}\n"
                    << "{\"prompt_ids\": [5, 6, 7], \"sampling_params\": {\"max_tokens\": 4, \"n\": 1, \"best_of\": null}}\n"
                    << "{\"prompt_ids\": [5, 6, 7], \"sampling_params\": {\"n\": 3}}\n";
  const RunResult r = run_cli("generate --model " + fixture("v4-tiny-a") + " --prompts " + in + " --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto got = read_generate_output(out);
  ASSERT_EQ(got.size(), 7u);
  EXPECT_EQ(got.at(0)["token_ids"].size(), 4u);
  EXPECT_EQ(got.at(0)["token_ids"], got.at(5)["token_ids"]);
  EXPECT_NE(got.at(1)["error"].get<std::string>().find("temperature"), std::string::npos) << got.at(1).dump();
  EXPECT_NE(got.at(2)["error"].get<std::string>().find("not a JSON object"), std::string::npos) << got.at(2).dump();
  EXPECT_NE(got.at(3)["error"].get<std::string>().find("tempreature"), std::string::npos) << got.at(3).dump();
  EXPECT_NE(got.at(4)["error"].get<std::string>().find("tokenizer"), std::string::npos) << got.at(4).dump();
  EXPECT_NE(got.at(6)["error"].get<std::string>().find("does not support"), std::string::npos) << got.at(6).dump();
}

TEST_F(CliTest, GenerateChatAndTextPromptsWithATokenizer) {
  const std::string d = copy_tiny("with_tokenizer");
  std::ofstream(d + "/tokenizer.json") << testing::byte_level_tokenizer_json();
  // --chat wraps the prompt in a user message: BOS, <｜User｜>, "Hi!" (3 bytes), <｜Assistant｜>, </think>.
  RunResult r = run_cli("generate --model " + d + " --prompt Hi! --chat --max-tokens 3 --ignore-eos --no-progress --format jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["num_prompt_tokens"], 7);
  EXPECT_TRUE(j.contains("text"));
  EXPECT_EQ(j["token_ids"].size(), 3u);
  // A plain text prompt: 3 byte tokens.
  r = run_cli("generate --model " + d + " --prompt Hi! --max-tokens 2 --ignore-eos --format jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["num_prompt_tokens"], 3);
}

TEST_F(CliTest, NumericsFlag) {
  expect_error(run_cli("logits --model " + fixture("v4-tiny-a") + " --ids 5 --numerics fp8 --out " + out_file()),
               "numerics must be auto, exact or release");
  const RunResult r = run_cli("generate --model " + fixture("v4-tiny-a") + " --prompt-ids 5,6 --max-tokens 2 --numerics exact");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(without_notes(r.output))["numerics"], "exact");
}

TEST_F(CliTest, PerplexityErrors) {
  expect_error(run_cli("perplexity --text-file " + (dir_ / "missing.txt").string()), "missing.txt");
  expect_error(run_cli("perplexity"), "--text-file is required");
  const std::string d = copy_tiny("no_tokenizer");
  std::ofstream(dir_ / "t.txt") << "hello";
  expect_error(run_cli("perplexity --model " + d + " --text-file " + (dir_ / "t.txt").string()), "tokenizer");
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// `cache-info` prints the library's numbers for each KV cache dtype; V4-Flash's FP8 row is 584 B.
TEST(CliCacheInfo, PrintsTheStateCacheBytesOfEachKvCacheDtype) {
  const std::string cfg = std::string(DEEPINFER_SOURCE_DIR) + "/tools/oracle_configs/v4-flash.json";
  const RunResult r = run_cli("cache-info --config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto want = state_cache_bytes(cfg);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  ASSERT_EQ(want->size(), 3u);
  std::istringstream lines(r.output);
  std::vector<std::string> got;
  for (std::string l; std::getline(lines, l);) got.push_back(l);
  ASSERT_EQ(got.size(), 3u) << r.output;
  for (size_t i = 0; i < 3; ++i) {
    const StateCacheBytes& b = (*want)[i];
    EXPECT_NE(got[i].find("\"kv_cache_dtype\": \"" + b.kv_cache_dtype + "\""), std::string::npos) << got[i];
    EXPECT_NE(got[i].find("\"page_bytes\": " + std::to_string(b.page_bytes) + ","), std::string::npos) << got[i];
    EXPECT_NE(got[i].find("\"slot_bytes\": " + std::to_string(b.slot_bytes) + ","), std::string::npos) << got[i];
  }
  // V4-Flash, 256 positions per page: 21 CSA layers x 64 rows x (KV row + indexer key) + 20 HCA layers x 2 rows.
  EXPECT_EQ((*want)[1].page_bytes, 21 * 64 * (1024 + 256) + 20 * 2 * 1024);  // bf16: 6,880 B per token
  EXPECT_EQ((*want)[2].page_bytes, 21 * 64 * (584 + 68) + 20 * 2 * 584);     // fp8 + fp4 keys
  EXPECT_EQ((*want)[1].window_bytes, 43 * 128 * 1024);
  EXPECT_EQ((*want)[2].window_bytes, 43 * 128 * 584);
  const RunResult bad = run_cli("cache-info --config " + cfg + " --block-size 6");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("not a multiple"), std::string::npos) << bad.output;
  EXPECT_NE(run_cli("cache-info").exit_code, 0);
}

TEST(CliKvCacheDtype, LogitsTakesNumericsAndKvCacheDtype) {
  const std::string d = testing::fixture("v4-small-official-numerics");
  const std::string out = (std::filesystem::temp_directory_path() / ("deepinfer_kvd_" + std::to_string(::getpid()))).string();
  const RunResult r = run_cli("logits --model " + d + " --ids 5,17,42,99 --kv-cache-dtype fp8 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("numerics release, kv cache fp8"), std::string::npos) << r.output;
  const RunResult e = run_cli("logits --model " + d + " --ids 5,17 --numerics exact --out " + out);
  EXPECT_NE(e.output.find("numerics exact, kv cache float32"), std::string::npos) << e.output;
  const RunResult bad = run_cli("logits --model " + d + " --ids 5,17 --kv-cache-dtype fp4 --out " + out);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("kv_cache_dtype must be auto, float32, bfloat16 or fp8, got 'fp4'"), std::string::npos) << bad.output;
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace deepinfer
