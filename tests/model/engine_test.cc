// Engine tests through the public API: batch invariance (the needle test), determinism, stop
// conditions, preemption, abort, bad requests. Models: v4-tiny-a (window 16, CSA ratio 4, HCA 16)
// with small pages so that requests span many pages, and the embedded default model.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "test_util.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using testing::fixture;

// A temporary copy of v4-tiny-a (config + weights) that a test adds a tokenizer to; removed at scope end.
class TinyModelDir {
 public:
  explicit TinyModelDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("deepinfer_engine_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
    fs::copy_file(fixture("v4-tiny-a/config.json"), path_ / "config.json");
    fs::copy_file(fixture("v4-tiny-a/model.safetensors"), path_ / "model.safetensors");
  }
  ~TinyModelDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

EngineOptions tiny_options() {
  EngineOptions o;
  o.model = fixture("v4-tiny-a");
  o.block_size = 16;  // many pages per request
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 256;
  return o;
}

// Every caller goes on to use the engine, so a failed creation ends the test here (gtest reports
// the exception as a failure of the test) instead of each caller checking for null.
std::unique_ptr<LLM> make(const EngineOptions& o) {
  auto r = LLM::create(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) throw std::runtime_error("LLM::create failed: " + r.status().to_string());
  return std::move(r).value();
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int len, int vocab) {
  std::uniform_int_distribution<int> tok(2, vocab - 1);  // avoid BOS/EOS ids 0 and 1
  std::vector<int32_t> p(len);
  for (auto& t : p) t = tok(rng);
  return p;
}

// Bitwise equality of two outputs' tokens and logprobs.
void expect_same(const RequestOutput& a, const RequestOutput& b, const std::string& what) {
  ASSERT_EQ(a.token_ids, b.token_ids) << what;
  ASSERT_EQ(a.finish_reason, b.finish_reason) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a.logprobs[i].logprob, &b.logprobs[i].logprob, sizeof(float)), 0) << what << " token " << i;
    ASSERT_EQ(a.logprobs[i].top.size(), b.logprobs[i].top.size()) << what;
    for (size_t k = 0; k < a.logprobs[i].top.size(); ++k) {
      ASSERT_EQ(a.logprobs[i].top[k].first, b.logprobs[i].top[k].first) << what;
      ASSERT_EQ(std::memcmp(&a.logprobs[i].top[k].second, &b.logprobs[i].top[k].second, sizeof(float)), 0) << what;
    }
  }
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 3;
  return p;
}

// The engine on the GPU, or null where the build has no CUDA backend or the machine no GPU (the
// error then has to say CUDA).
std::unique_ptr<LLM> cuda_engine_or_none(const EngineOptions& o) {
  auto gpu = LLM::create(o);
  if (gpu.is_ok()) return std::move(gpu).value();
  EXPECT_NE(gpu.status().message().find("CUDA"), std::string::npos) << gpu.status().to_string();
  return nullptr;
}

// Greedy with nothing to report but the tokens: the CUDA engine takes these on the device.
SamplingParams plain_greedy(int max_tokens) {
  SamplingParams p = greedy(max_tokens);
  p.logprobs.reset();
  return p;
}

SamplingParams seeded(int max_tokens, uint64_t seed) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.top_k = 100;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.2f;
  return p;
}

// The needle test: one request alone, then inside random batches of random size with random other
// requests, random token budgets (so random chunk sizes), overlap on and off: bitwise-identical
// tokens and logprobs.
void needle_test(const SamplingParams& needle_params, uint32_t seed, const std::string& kv_cache_dtype = "auto") {
  std::mt19937 rng(seed);
  const std::vector<int32_t> needle = random_prompt(rng, 70, 512);  // > window, several HCA rows, 5 pages
  EngineOptions solo = tiny_options();
  solo.max_num_seqs = 1;
  solo.async_scheduling = false;
  solo.kv_cache_dtype = kv_cache_dtype;
  auto llm = make(solo);
  ASSERT_TRUE(llm);
  const RequestOutput ref = llm->generate({Prompt::from_token_ids(needle)}, needle_params)[0];
  ASSERT_EQ(ref.finish_reason, FinishReason::kLength) << ref.error;
  ASSERT_EQ(static_cast<int>(ref.token_ids.size()), needle_params.max_tokens);

  for (int trial = 0; trial < 6; ++trial) {
    EngineOptions o = tiny_options();
    o.max_num_batched_tokens = std::uniform_int_distribution<int>(8, 160)(rng);
    o.long_prefill_token_threshold = std::uniform_int_distribution<int>(0, 1)(rng) ? 0 : std::uniform_int_distribution<int>(1, 40)(rng);
    o.async_scheduling = trial % 2 == 0;
    o.max_num_seqs = std::uniform_int_distribution<int>(2, 12)(rng);
    o.kv_cache_dtype = kv_cache_dtype;
    auto batch_llm = make(o);
    ASSERT_TRUE(batch_llm);
    const int n = std::uniform_int_distribution<int>(2, 10)(rng);
    const int at = std::uniform_int_distribution<int>(0, n - 1)(rng);
    std::vector<Prompt> prompts;
    std::vector<SamplingParams> params;
    for (int i = 0; i < n; ++i) {
      if (i == at) {
        prompts.push_back(Prompt::from_token_ids(needle));
        params.push_back(needle_params);
        continue;
      }
      prompts.push_back(Prompt::from_token_ids(random_prompt(rng, std::uniform_int_distribution<int>(1, 90)(rng), 512)));
      SamplingParams f = i % 2 ? greedy(std::uniform_int_distribution<int>(1, 30)(rng))
                               : seeded(std::uniform_int_distribution<int>(1, 30)(rng), rng());
      params.push_back(f);
    }
    const std::vector<RequestOutput> outs = batch_llm->generate(prompts, params);
    ASSERT_EQ(outs.size(), prompts.size());
    for (const auto& o2 : outs) ASSERT_TRUE(o2.finished) << o2.error;
    expect_same(ref, outs[at],
                "trial " + std::to_string(trial) + ": batch of " + std::to_string(n) + ", budget " +
                    std::to_string(o.max_num_batched_tokens) + ", chunk cap " +
                    std::to_string(o.long_prefill_token_threshold) + (o.async_scheduling ? ", async" : ", sync"));
  }
}

TEST(EngineNeedle, GreedyIsBatchInvariant) { needle_test(greedy(24), 1); }
TEST(EngineNeedle, SeededSamplingIsBatchInvariant) { needle_test(seeded(24, 1234), 2); }
// Encoded rows are a function of the row alone, so an FP8 cache keeps batch invariance.
TEST(EngineNeedle, GreedyIsBatchInvariantWithAnFp8KvCache) { needle_test(greedy(24), 3, "fp8"); }

TEST(Engine, KvCacheDtypeIsChosenReportedAndChecked) {
  EngineOptions o = tiny_options();
  std::mt19937 rng(21);
  const Prompt p = Prompt::from_token_ids(random_prompt(rng, 40, 512));
  auto dflt = make(o);
  EXPECT_EQ(dflt->stats().kv_cache_dtype, "float32");  // exact numerics (a bf16 checkpoint): lossless fp32
  const RequestOutput a = dflt->generate({p}, greedy(16))[0];
  EXPECT_EQ(a.kv_cache_dtype, "float32");
  EXPECT_EQ(a.numerics, "exact");
  o.kv_cache_dtype = "fp8";
  auto f8 = make(o);
  EXPECT_EQ(f8->stats().kv_cache_dtype, "fp8");
  EXPECT_LT(f8->stats().page_bytes * 3, dflt->stats().page_bytes);  // FP8/FP4 rows vs fp32 rows
  const RequestOutput b = f8->generate({p}, greedy(16))[0];
  EXPECT_EQ(b.kv_cache_dtype, "fp8");
  ASSERT_TRUE(b.finished) << b.error;
  o.kv_cache_dtype = "fp16";
  auto bad = LLM::create(o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("kv_cache_dtype"), std::string::npos);
  EXPECT_NE(bad.status().message().find("fp16"), std::string::npos);
}

// device: "cpu" or "cuda". Where the build has no CUDA backend or the machine no GPU, "cuda" is an
// error that says so; where it runs, the GPU engine decodes the trained default model like the CPU
// engine (bf16 GEMM inputs: the first greedy tokens agree) and its decode steps replay CUDA graphs.
TEST(Engine, DeviceIsCheckedAndCudaRunsWhereAvailable) {
  EngineOptions o;
  o.model = std::string(DEEPINFER_SOURCE_DIR) + "/models/v4-code-19m";
  o.max_num_seqs = 4;
  o.cache_bytes = 64ll << 20;
  o.device = "tpu";
  auto bad = LLM::create(o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("device must be cpu or cuda"), std::string::npos) << bad.status().to_string();

  o.device = "cuda";
  auto gpu = LLM::create(o);
  if (!gpu.is_ok()) {
    EXPECT_NE(gpu.status().message().find("CUDA"), std::string::npos) << gpu.status().to_string();
    return;
  }
  std::mt19937 rng(9);
  const Prompt p = Prompt::from_token_ids(random_prompt(rng, 40, 8192));
  const RequestOutput g = (*gpu)->generate({p}, greedy(16))[0];
  ASSERT_TRUE(g.finished) << g.error;
  EXPECT_EQ((*gpu)->stats().device, "cuda");
  EXPECT_GT((*gpu)->stats().cuda_graph_replays, 0u);
  o.device = "cpu";
  auto cpu = make(o);
  const RequestOutput c = cpu->generate({p}, greedy(16))[0];
  ASSERT_EQ(g.token_ids.size(), c.token_ids.size());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(g.token_ids[i], c.token_ids[i]) << "token " << i;
}

// On the GPU (where there is one): greedy tokens taken on the device (only token ids reach the
// host) are the same for a request alone and inside a batch of concurrent requests with staggered
// lengths; a request asking for logprobs takes the host sampler and gets the same tokens. The
// default model's 64-wide heads make 82-byte FP8 rows, which the GPU's fp8 cache refuses by name.
TEST(Engine, CudaGreedyOnTheDeviceIsBatchInvariant) {
  EngineOptions o;
  o.model = std::string(DEEPINFER_SOURCE_DIR) + "/models/v4-code-19m";
  o.max_num_seqs = 8;
  o.cache_bytes = 256ll << 20;
  o.device = "cuda";
  std::unique_ptr<LLM> gpu = cuda_engine_or_none(o);
  if (!gpu) return;
  o.kv_cache_dtype = "fp8";
  auto fp8 = LLM::create(o);
  ASSERT_FALSE(fp8.is_ok());
  EXPECT_NE(fp8.status().message().find("head_dim = 64"), std::string::npos) << fp8.status().to_string();
  std::mt19937 rng(21);
  std::vector<Prompt> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(Prompt::from_token_ids(random_prompt(rng, 10 + 13 * i, 8192)));
  const std::vector<RequestOutput> together = gpu->generate(prompts, plain_greedy(24));
  ASSERT_EQ(together.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); i += 3) {
    const RequestOutput alone = gpu->generate({prompts[i]}, plain_greedy(24))[0];
    ASSERT_TRUE(alone.finished) << alone.error;
    EXPECT_EQ(alone.token_ids, together[i].token_ids) << "prompt " << i;
  }
  SamplingParams with_logprobs = plain_greedy(24);
  with_logprobs.logprobs = 0;
  const RequestOutput host = gpu->generate({prompts[1]}, with_logprobs)[0];
  EXPECT_EQ(host.token_ids, together[1].token_ids);
  EXPECT_EQ(host.logprobs.size(), host.token_ids.size());
}

// On the GPU (where there is one): with asynchronous scheduling, greedy steps chain on the device
// (step N+1 is enqueued before step N's tokens reach the host, its inputs named as step N's greedy
// rows) and the outputs are those of the engine without asynchronous scheduling, token for token,
// for staggered concurrent requests (prefills joining running decodes), one that ends early and one
// whose logprobs make its steps sample on the host.
TEST(Engine, CudaOverlapsGreedyStepsOnTheDeviceWithIdenticalOutputs) {
  EngineOptions o;
  o.model = std::string(DEEPINFER_SOURCE_DIR) + "/models/v4-code-19m";
  o.max_num_seqs = 4;
  o.cache_bytes = 256ll << 20;
  o.device = "cuda";
  std::unique_ptr<LLM> overlapped = cuda_engine_or_none(o);
  if (!overlapped) return;
  o.async_scheduling = false;
  auto plain = LLM::create(o);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  std::mt19937 rng(33);
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 7; ++i) {  // more requests than max_num_seqs: later ones join running decodes
    prompts.push_back(Prompt::from_token_ids(random_prompt(rng, 12 + 17 * i, 8192)));
    // request 5 asks for logprobs: its steps sample on the host, between device-chained ones
    params.push_back(i == 5 ? greedy(20) : plain_greedy(i == 2 ? 5 : 20));
  }
  const std::vector<RequestOutput> a = overlapped->generate(prompts, params);
  const std::vector<RequestOutput> b = (*plain)->generate(prompts, params);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].finished && a[i].error.empty()) << a[i].error;
    EXPECT_EQ(a[i].token_ids, b[i].token_ids) << "prompt " << i;
  }
  EXPECT_EQ(a[2].token_ids.size(), 5u);
  EXPECT_GT(overlapped->stats().overlapped_steps, 10u);
  EXPECT_EQ((*plain)->stats().overlapped_steps, 0u);
}

TEST(Engine, GreedyMatchesModelForward) {
  // The engine's greedy path against the plain single-session forward (public Model API).
  auto model = Model::load(fixture("v4-tiny-a"));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = random_prompt(rng, 40, 512);
  auto want = (*model)->generate_greedy(prompt, 20, 0, false);
  ASSERT_TRUE(want.is_ok());
  auto llm = make(tiny_options());
  const RequestOutput got = llm->generate({Prompt::from_token_ids(prompt)}, greedy(20))[0];
  EXPECT_EQ(got.token_ids, *want);
}

TEST(Engine, SameSeedSameOutputDifferentSeedDifferentOutput) {
  auto llm = make(tiny_options());
  std::mt19937 rng(9);
  const Prompt p = Prompt::from_token_ids(random_prompt(rng, 12, 512));
  const auto a = llm->generate({p}, seeded(32, 77))[0];
  const auto b = llm->generate({p}, seeded(32, 77))[0];
  const auto c = llm->generate({p}, seeded(32, 78))[0];
  expect_same(a, b, "same seed");
  EXPECT_NE(a.token_ids, c.token_ids);
  EXPECT_EQ(a.seed, 77u);
  // Without a seed the engine picks one, reports it, and that seed reproduces the output.
  SamplingParams unseeded = seeded(32, 0);
  unseeded.seed.reset();
  const auto d = llm->generate({p}, unseeded)[0];
  SamplingParams replay = unseeded;
  replay.seed = d.seed;
  expect_same(d, llm->generate({p}, replay)[0], "reported seed");
}

TEST(Engine, PreemptionUnderATightCacheGivesIdenticalOutputs) {
  std::mt19937 rng(11);
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(Prompt::from_token_ids(random_prompt(rng, std::uniform_int_distribution<int>(10, 60)(rng), 512)));
    params.push_back(i % 2 ? greedy(40) : seeded(40, 100 + i));
  }
  auto roomy = make(tiny_options());
  const auto want = roomy->generate(prompts, params);
  EXPECT_EQ(roomy->stats().preemptions, 0u);

  EngineOptions tight = tiny_options();
  tight.max_num_seqs = 8;
  auto probe = make(tight);
  const EngineStats s = probe->stats();
  // 8 slots plus 14 pages: a request needs up to 7 pages (100 positions / 16), so 8 at once cannot fit.
  tight.cache_bytes = s.slot_bytes * 8 + s.page_bytes * 14;
  for (bool async : {false, true}) {
    tight.async_scheduling = async;
    auto llm = make(tight);
    ASSERT_EQ(llm->stats().num_blocks, 14);
    const auto got = llm->generate(prompts, params);
    EXPECT_GT(llm->stats().preemptions, 0u) << "the cache was meant to force preemption";
    for (size_t i = 0; i < prompts.size(); ++i) expect_same(want[i], got[i], "request " + std::to_string(i));
  }
}

TEST(Engine, MaxTokensAndStopTokenIds) {
  auto llm = make(tiny_options());
  std::mt19937 rng(3);
  const Prompt p = Prompt::from_token_ids(random_prompt(rng, 20, 512));
  const auto full = llm->generate({p}, greedy(20))[0];
  ASSERT_EQ(full.token_ids.size(), 20u);
  EXPECT_EQ(full.finish_reason, FinishReason::kLength);
  // Stop at the first occurrence of the 6th token (the stop id is kept, as in vLLM).
  const int32_t stop_id = full.token_ids[5];
  const size_t first = std::find(full.token_ids.begin(), full.token_ids.end(), stop_id) - full.token_ids.begin();
  SamplingParams sp = greedy(20);
  sp.stop_token_ids = {stop_id};
  const auto stopped = llm->generate({p}, sp)[0];
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.stop_reason, std::to_string(stop_id));
  EXPECT_EQ(stopped.token_ids, std::vector<int32_t>(full.token_ids.begin(), full.token_ids.begin() + first + 1));
  // min_tokens masks the stop id for the first tokens.
  sp.min_tokens = static_cast<int>(first) + 3;
  const auto held = llm->generate({p}, sp)[0];
  ASSERT_GE(held.token_ids.size(), static_cast<size_t>(sp.min_tokens));
  for (int i = 0; i < sp.min_tokens; ++i) EXPECT_NE(held.token_ids[i], stop_id) << i;
}

TEST(Engine, StopsAtEosUnlessIgnored) {
  // Find (deterministically) a seed whose hot sampling emits EOS (id 1) within 300 tokens.
  auto llm = make(tiny_options());
  const Prompt p = Prompt::from_token_ids({5, 17, 42});
  SamplingParams sp;
  sp.temperature = 3.0f;
  sp.max_tokens = 300;
  sp.ignore_eos = true;
  RequestOutput with_eos;
  size_t at = 0;
  for (uint64_t seed = 0; seed < 40 && with_eos.token_ids.empty(); ++seed) {
    sp.seed = seed;
    RequestOutput o = llm->generate({p}, sp)[0];
    auto it = std::find(o.token_ids.begin(), o.token_ids.end(), 1);
    if (it != o.token_ids.end()) {
      at = static_cast<size_t>(it - o.token_ids.begin());
      with_eos = std::move(o);
    }
  }
  ASSERT_FALSE(with_eos.token_ids.empty()) << "no seed in 0..39 sampled EOS";
  sp.seed = with_eos.seed;
  sp.ignore_eos = false;
  const auto stopped = llm->generate({p}, sp)[0];
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.token_ids, std::vector<int32_t>(with_eos.token_ids.begin(), with_eos.token_ids.begin() + at + 1));
}

TEST(Engine, StopStringsWithATokenizer) {
  // v4-tiny-a beside the DeepSeek-V3 tokenizer (ids < 512 are short ASCII pieces there).
  const TinyModelDir dir("tok");
  fs::copy_file(fixture("tokenizer/deepseek-v3/tokenizer.json"), dir.path() / "tokenizer.json");
  EngineOptions o = tiny_options();
  o.model = dir.path().string();
  auto llm = make(o);
  ASSERT_NE(llm->tokenizer(), nullptr);
  SamplingParams sp = greedy(24);
  const Prompt prompt = Prompt::from_token_ids({100, 200, 300, 400});
  const auto full = llm->generate({prompt}, sp)[0];
  ASSERT_EQ(full.token_ids.size(), 24u) << full.error;
  ASSERT_GT(full.text.size(), 8u);
  // A text prompt needs every id inside the model's small vocabulary: outside it is an error.
  const auto text_out = llm->generate({Prompt::from_text("Hello world")}, sp)[0];
  EXPECT_TRUE(text_out.finish_reason == FinishReason::kLength ||
              text_out.error.find("outside the vocabulary") != std::string::npos) << text_out.error;
  // A stop string taken from the middle of the text: output text ends right before it.
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  const size_t cut = full.text.find(stop);
  sp.stop = {stop};
  const auto stopped = llm->generate({prompt}, sp)[0];
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.stop_reason, stop);
  EXPECT_EQ(stopped.text, full.text.substr(0, cut));
  EXPECT_LE(stopped.token_ids.size(), full.token_ids.size());
  sp.include_stop_str_in_output = true;
  const auto with_stop = llm->generate({prompt}, sp)[0];
  EXPECT_EQ(with_stop.text, full.text.substr(0, cut) + stop);
  EXPECT_EQ(with_stop.token_ids, stopped.token_ids);
}

TEST(Engine, AbortEndsOneRequestOthersUnaffected) {
  std::mt19937 rng(21);
  std::vector<Prompt> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(Prompt::from_token_ids(random_prompt(rng, 30, 512)));
  auto ref_llm = make(tiny_options());
  const auto want = ref_llm->generate(prompts, greedy(30));
  for (bool async : {false, true}) {
    EngineOptions o = tiny_options();
    o.async_scheduling = async;
    auto llm = make(o);
    std::vector<std::string> ids;
    for (const auto& p : prompts) ids.push_back(*llm->add_request(p, greedy(30)));
    std::map<std::string, RequestOutput> done;
    int steps = 0;
    while (llm->has_unfinished_requests()) {
      if (++steps == 5) {
        ASSERT_TRUE(llm->abort(ids[1]).is_ok());
      }
      auto outs = llm->step();
      ASSERT_TRUE(outs.is_ok()) << outs.status().to_string();
      for (auto& x : *outs)
        if (x.finished) done[x.request_id] = x;
    }
    ASSERT_EQ(done.size(), 3u);
    EXPECT_EQ(done[ids[1]].finish_reason, FinishReason::kAbort);
    EXPECT_LT(done[ids[1]].token_ids.size(), 30u);
    expect_same(want[0], done[ids[0]], "request 0");
    expect_same(want[2], done[ids[2]], "request 2");
    EXPECT_FALSE(llm->abort(ids[1]).is_ok()) << "aborting a finished request is an error";
  }
}

TEST(Engine, BadRequestsFailAloneWithClearErrors) {
  EngineOptions o = tiny_options();
  o.max_model_len = 100;
  auto llm = make(o);
  const Prompt good = Prompt::from_token_ids({5, 6, 7, 8});
  struct Bad {
    Prompt prompt;
    SamplingParams params;
    std::string needle;
  };
  std::vector<Bad> bad;
  auto with = [&](auto f) {
    SamplingParams p = greedy(5);
    f(p);
    return p;
  };
  bad.push_back({good, with([](SamplingParams& p) { p.temperature = -0.5f; }), "temperature"});
  bad.push_back({good, with([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p"});
  bad.push_back({good, with([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p"});
  bad.push_back({good, with([](SamplingParams& p) { p.max_tokens = 0; }), "max_tokens"});
  bad.push_back({Prompt::from_token_ids(std::vector<int32_t>(100, 3)), greedy(5), "context"});
  bad.push_back({Prompt::from_token_ids({5, 512, 7}), greedy(5), "outside the vocabulary"});
  bad.push_back({Prompt::from_token_ids({5, -1}), greedy(5), "outside the vocabulary"});
  bad.push_back({Prompt::from_token_ids({}), greedy(5), "empty"});
  bad.push_back({Prompt::from_text("hello"), greedy(5), "tokenizer"});
  std::vector<Prompt> prompts{good};
  std::vector<SamplingParams> params{greedy(5)};
  for (const auto& b : bad) {
    prompts.push_back(b.prompt);
    params.push_back(b.params);
  }
  prompts.push_back(good);
  params.push_back(greedy(5));
  const auto outs = llm->generate(prompts, params);
  ASSERT_EQ(outs.size(), prompts.size());
  EXPECT_EQ(outs.front().finish_reason, FinishReason::kLength);
  EXPECT_EQ(outs.back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(outs.front().token_ids, outs.back().token_ids);
  for (size_t i = 0; i < bad.size(); ++i) {
    const RequestOutput& o2 = outs[i + 1];
    EXPECT_EQ(o2.finish_reason, FinishReason::kError) << i;
    EXPECT_NE(o2.error.find(bad[i].needle), std::string::npos) << "case " << i << ": " << o2.error;
    EXPECT_TRUE(o2.token_ids.empty());
  }
}

TEST(Engine, GenerationStopsAtTheContextLength) {
  EngineOptions o = tiny_options();
  o.max_model_len = 40;
  auto llm = make(o);
  const auto out = llm->generate({Prompt::from_token_ids(std::vector<int32_t>(30, 9))}, greedy(50))[0];
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.token_ids.size(), 10u);
}

TEST(Engine, CacheBudgetTooSmallIsAnError) {
  EngineOptions o = tiny_options();
  o.cache_bytes = 1000;
  auto r = LLM::create(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cache budget"), std::string::npos) << r.status().to_string();
}

TEST(Engine, RequestLongerThanTheWholeCacheIsRejected) {
  EngineOptions o = tiny_options();
  auto probe = make(o);
  o.cache_bytes = probe->stats().slot_bytes * o.max_num_seqs + probe->stats().page_bytes * 3;  // 48 positions
  auto llm = make(o);
  const auto outs = llm->generate({Prompt::from_token_ids(std::vector<int32_t>(40, 3)), Prompt::from_token_ids({3, 4})},
                                  greedy(20));
  EXPECT_EQ(outs[0].finish_reason, FinishReason::kError);
  EXPECT_EQ(outs[1].finish_reason, FinishReason::kLength);
}

TEST(Engine, StreamingStepReportsProgress) {
  auto llm = make(tiny_options());
  auto id = llm->add_request(Prompt::from_token_ids({5, 6, 7}), greedy(6));
  ASSERT_TRUE(id.is_ok());
  size_t last = 0;
  bool finished = false;
  while (llm->has_unfinished_requests()) {
    auto outs = llm->step();
    ASSERT_TRUE(outs.is_ok());
    for (const auto& o2 : *outs) {
      EXPECT_GE(o2.token_ids.size(), last);
      last = o2.token_ids.size();
      finished = finished || o2.finished;
      if (o2.finished) {
        EXPECT_GE(o2.time_to_first_token, 0.0);
        EXPECT_GE(o2.total_time, o2.time_to_first_token);
      }
    }
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(last, 6u);
}

TEST(Engine, ChatMessagesAreRenderedWithTheV4Encoding) {
  // v4-tiny-a beside a byte-level tokenizer whose ids (bytes + chat specials) fit its vocabulary.
  const TinyModelDir dir("chat");
  std::ofstream(dir.path() / "tokenizer.json") << testing::byte_level_tokenizer_json();
  EngineOptions o = tiny_options();
  o.model = dir.path().string();
  auto llm = make(o);
  ASSERT_TRUE(llm);
  ASSERT_NE(llm->tokenizer(), nullptr);
  const std::string messages = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}])";
  const auto out = llm->generate({Prompt::from_messages_json(messages)}, greedy(8))[0];
  ASSERT_EQ(out.finish_reason, FinishReason::kLength) << out.error;
  // The V4 chat encoding of this conversation (chat mode), tokenized.
  auto want = llm->tokenizer()->encode("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi!<｜Assistant｜></think>");
  ASSERT_TRUE(want.is_ok());
  EXPECT_EQ(out.prompt_token_ids, *want);
  EXPECT_EQ(out.token_ids.size(), 8u);
  const auto bad = llm->generate({Prompt::from_messages_json(R"([{"role": "wizard", "content": "x"}])")}, greedy(4))[0];
  EXPECT_EQ(bad.finish_reason, FinishReason::kError);
  EXPECT_NE(bad.error.find("role"), std::string::npos) << bad.error;
}

}  // namespace
}  // namespace deepinfer
