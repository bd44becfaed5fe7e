// The whole DeepSeek-V4 forward on the GPU (backend/cuda/cuda_model.h):
//  - against transformers on the trained default model (models/v4-code-19m, reference logits from
//    tools/train_default_model/evaluate.py in tests/data/default-model);
//  - against the CPU backend run on the same bf16 weights with a bf16 KV cache (the GPU's only
//    other difference is bf16 GEMM inputs), on the embedded model and at V4-Flash dimensions;
//  - batch invariance on the GPU: prefill == chunked prefill == token-by-token decode, and a request
//    alone == the same request inside batches, bit for bit;
//  - bad input gives errors naming what was wrong.
// Skipped when no CUDA device is present (CI builds these without a GPU).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test_util.h"
#include "model_test_util.h"
#include "backend/cuda/cuda_model.h"
#include "io/safetensors.h"
#include "model/default_model.h"
#include "model/deepseek_v4.h"
#include "model/loaded_model.h"
#include "model/numerics.h"

namespace deepinfer::backend::cuda {
namespace {

TEST(CudaModel, DefaultModelMatchesTransformers) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto loaded = model::load_model_dir(std::string(DEEPINFER_SOURCE_DIR) + "/models/v4-code-19m");
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  const ModelConfig& c = (*loaded)->config;
  CudaModelOptions opt;
  opt.num_blocks = 4;
  opt.max_logit_rows = 256;
  auto gpu = CudaModel::create(c, (*loaded)->weights, model::Numerics::kExact, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();

  auto set = io::SafetensorsSet::open_files({std::string(DEEPINFER_TEST_DATA_DIR) + "/default-model/heldout_logits.safetensors"});
  ASSERT_TRUE(set.is_ok());
  const io::TensorView* ids_t = set->find("input_ids");
  const io::TensorView* lg_t = set->find("logits");
  ASSERT_TRUE(ids_t && lg_t);
  std::vector<int32_t> ids(static_cast<size_t>(ids_t->num_elements()));
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t v;
    std::memcpy(&v, ids_t->data + 8 * i, 8);
    ids[i] = static_cast<int32_t>(v);
  }
  std::vector<float> want(static_cast<size_t>(lg_t->num_elements()));
  std::memcpy(want.data(), lg_t->data, want.size() * 4);

  const std::vector<float> got = gpu_logits(**gpu, ids, 0, 0, opt.num_blocks);
  const Diff d = compare(got, want, c.vocab_size);
  report("GPU vs transformers (default model)", d);
  // bf16 GEMM inputs against transformers' fp32 (logits span about [-15, 15]). Measured on the
  // H200: rel rms 7.0e-3, argmax 64/64, max abs 0.80 in a single row (an expert choice that flips
  // between near-tied router scores moves a whole row; the other rows stay near the rms).
  EXPECT_LT(d.rel_rms, 1.5e-2);
  EXPECT_LT(d.max_abs, 1.5);
  EXPECT_GE(d.argmax_equal, d.rows - 1);
}

// The embedded model, 150 tokens (windows of 32, CSA ratio 4, HCA ratio 16). Its random weights
// make it chaotic: the CPU itself, with its activations rounded to bf16 at the tap points, moves
// its logits by about 6% rel rms (max abs ~2). So the bound here is relative to that measured
// sensitivity: the GPU (bf16 GEMM inputs, bf16 attention probabilities) may differ from the CPU by
// no more than the CPU differs from itself under that perturbation. With index_topk above the
// number of compressed rows the indexer picks every row on both backends; with the model's own
// top-8 of up to 37 rows, near-tied scores can also pick different rows.
void embedded_vs_cpu(int index_topk) {
  ModelConfig c = model::default_model_config();
  if (index_topk > 0) c.index_topk = index_topk;
  ModelWeights w = model::default_model_weights(c, 1234);
  round_gemm_weights_to_bf16(w);
  const std::vector<int32_t> seq = random_tokens(150, c.vocab_size, 7);
  const int blocks = 4;
  const std::vector<float> want = cpu_logits(c, w, seq, 0, blocks);
  const Diff noise = compare(cpu_logits(c, w, seq, 0, blocks, true), want, c.vocab_size);
  CudaModelOptions opt;
  opt.num_blocks = blocks;
  auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  const Diff d = compare(gpu_logits(**gpu, seq, 0, 0, blocks), want, c.vocab_size);
  report("CPU with bf16-rounded activations vs CPU (the model's own sensitivity)", noise);
  report(index_topk > 0 ? "GPU vs CPU (embedded model, 150 tokens, indexer picks every row)"
                        : "GPU vs CPU (embedded model, 150 tokens, indexer top-8)",
         d);
  EXPECT_LT(d.rel_rms, 1.2 * noise.rel_rms);
  EXPECT_LT(d.max_abs, 1.2 * noise.max_abs);
  EXPECT_GE(d.argmax_equal, d.rows * 9 / 10);
}

TEST(CudaModel, MatchesTheCpuBackendWithinTheModelsOwnBf16Sensitivity) {
  SKIP_WITHOUT_CUDA_DEVICE();
  embedded_vs_cpu(64);
}

TEST(CudaModel, MatchesTheCpuBackendWithRealIndexerSelection) {
  SKIP_WITHOUT_CUDA_DEVICE();
  embedded_vs_cpu(0);
}

// A 120-token prompt's logits are bitwise the same in one prefill as in chunks of 1 (token-by-token
// decode), 7 and 32 tokens.
void expect_chunkings_bitwise_equal(CudaModel& gpu, int vocab, unsigned seed, int blocks, const std::string& what) {
  const std::vector<int32_t> seq = random_tokens(120, vocab, seed);
  const std::vector<float> whole = gpu_logits(gpu, seq, 0, 0, blocks);
  for (size_t chunk : {1u, 7u, 32u}) {
    const std::vector<float> parts = gpu_logits(gpu, seq, chunk, 0, blocks);
    ASSERT_EQ(parts.size(), whole.size());
    EXPECT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * 4), 0) << what << "chunk " << chunk;
  }
}

TEST(CudaModel, PrefillChunkedAndDecodeAreBitwiseEqual) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 99);
  CudaModelOptions opt;
  opt.num_blocks = 4;
  for (model::Numerics numerics : {model::Numerics::kExact, model::Numerics::kRelease}) {
    auto gpu = CudaModel::create(c, w, numerics, opt);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    expect_chunkings_bitwise_equal(**gpu, c.vocab_size, 3, opt.num_blocks,
                                   std::string(model::numerics_name(numerics)) + ", ");
  }
}

TEST(CudaModel, ARequestIsBitwiseIdenticalAloneAndInBatches) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 5);
  CudaModelOptions opt;
  opt.num_slots = 8;
  opt.num_blocks = 64;
  auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  CudaModel& m = **gpu;
  const std::vector<int32_t> needle = random_tokens(90, c.vocab_size, 11);
  const std::vector<float> alone = gpu_logits(m, needle, 0, 0, 4);

  std::mt19937 rng(2024);
  for (int trial = 0; trial < 4; ++trial) {
    // The needle in slot 3 (pages 20..23) beside 1..5 other requests, everything chunked at random.
    const int others = 1 + static_cast<int>(rng() % 5);
    struct Req {
      std::vector<int32_t> tokens;
      int slot;
      std::vector<int> table;
      size_t done = 0;
    };
    std::vector<Req> reqs;
    reqs.push_back({needle, 3, {20, 21, 22, 23}});
    for (int i = 0; i < others; ++i) {
      Req r{random_tokens(10 + static_cast<int>(rng() % 120), c.vocab_size, 100 + trial * 10 + i), i < 3 ? i : i + 1, {}};
      for (int b = 0; b < 4; ++b) r.table.push_back(30 + 4 * i + b);
      reqs.push_back(r);
    }
    for (Req& r : reqs) m.reset_slot(r.slot);
    std::vector<float> got;
    while (true) {
      std::vector<SeqChunk> batch;
      std::vector<int> who;
      for (size_t i = 0; i < reqs.size(); ++i) {
        Req& r = reqs[i];
        if (r.done == r.tokens.size()) continue;
        const size_t n = std::min<size_t>(1 + rng() % 40, r.tokens.size() - r.done);
        batch.push_back(SeqChunk{std::span<const int32_t>(r.tokens).subspan(r.done, n), static_cast<int64_t>(r.done),
                                 r.slot, r.table, LogitRows::kAll});
        who.push_back(static_cast<int>(i));
        r.done += n;
      }
      if (batch.empty()) break;
      std::vector<float> logits;
      ASSERT_TRUE(m.forward(batch, &logits).is_ok());
      size_t row = 0;
      for (size_t k = 0; k < batch.size(); ++k) {
        const size_t n = batch[k].tokens.size();
        if (who[k] == 0)
          got.insert(got.end(), logits.begin() + static_cast<long>(row * c.vocab_size),
                     logits.begin() + static_cast<long>((row + n) * c.vocab_size));
        row += n;
      }
    }
    ASSERT_EQ(got.size(), alone.size());
    EXPECT_EQ(std::memcmp(got.data(), alone.data(), alone.size() * 4), 0) << "trial " << trial;
  }
}

// V4-Flash's per-layer dimensions (hidden 4096, 64 heads of 512, q rank 1024, 8 output groups,
// indexer 64 x 128 with top-512, window 128), two layers (CSA ratio 4, HCA ratio 128), 8 experts.
ModelConfig v4_flash_dims_two_layers() {
  ModelConfig c = model::default_model_config();
  c.vocab_size = 2048;
  c.hidden_size = 4096;
  c.num_layers = 2;
  c.num_heads = 64;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.q_lora_rank = 1024;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.sliding_window = 128;
  c.layer_kinds = {model::AttentionKind::kCsa, model::AttentionKind::kHca};
  c.compress_ratio = {4, 128};
  c.hash_moe = {true, false};
  c.index_n_heads = 64;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 6;
  c.moe_intermediate_size = 2048;
  return c;
}

TEST(CudaModel, RealDimensionsMatchTheCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = v4_flash_dims_two_layers();
  ModelWeights w = model::default_model_weights(c, 77);
  round_gemm_weights_to_bf16(w);
  const std::vector<int32_t> seq = random_tokens(300, c.vocab_size, 8);
  const int blocks = 2;  // 256-position pages
  const std::vector<float> want = cpu_logits(c, w, seq, 100, blocks);
  CudaModelOptions opt;
  opt.num_blocks = blocks;
  opt.max_logit_rows = 300;
  auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  const Diff d = compare(gpu_logits(**gpu, seq, 100, 0, blocks), want, c.vocab_size);
  report("GPU vs CPU (V4-Flash dims, 2 layers, 300 tokens)", d);
  // Measured on the H200: rel rms 3.4e-3, max abs 0.017, argmax 294/300.
  EXPECT_LT(d.rel_rms, 1e-2);
  EXPECT_GE(d.argmax_equal, d.rows * 95 / 100);
}

// Decode steps run as CUDA graphs (recorded on the second step of a batch size, replayed after):
// a batch of 3 sequences decoded 40 steps gives bitwise the logits of the same steps run eagerly,
// and the graphs do replay.
// Graph replays against eager steps, and concurrent branches (side streams, a forked graph) against
// one stream: the same kernels on the same data, so the same bits. The default model's projections
// are not gemm_split sets (q_lora_rank 64 is not a multiple of 256), so here only the ring store
// forks; ConcurrentBranchesAreBitwiseOneStreamAtRealDimensions covers the projection chains.
TEST(CudaModel, DecodeGraphsReplayBitwiseLikeEagerSteps) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 21);
  std::vector<std::vector<float>> runs;
  for (int variant = 0; variant < 4; ++variant) {
    const bool graphs = variant & 1, branches = variant & 2;
    CudaModelOptions opt;
    opt.num_slots = 3;
    opt.num_blocks = 12;
    opt.cuda_graphs = graphs;
    opt.concurrent_branches = branches;
    auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    std::vector<std::vector<int32_t>> seqs;
    std::vector<std::vector<int>> tables;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back(random_tokens(20 + 7 * i + 40, c.vocab_size, 50 + i));
      tables.push_back({4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3});
    }
    std::vector<float> all, part;
    // Prompts (different lengths) in one step, then 40 one-token steps for all three.
    std::vector<SeqChunk> batch;
    for (int i = 0; i < 3; ++i)
      batch.push_back(SeqChunk{std::span<const int32_t>(seqs[i]).first(20 + 7 * i), 0, i, tables[i], LogitRows::kLast});
    ASSERT_TRUE((*gpu)->forward(batch, &part).is_ok());
    all.insert(all.end(), part.begin(), part.end());
    for (int step = 0; step < 40; ++step) {
      batch.clear();
      for (int i = 0; i < 3; ++i) {
        const int p = 20 + 7 * i + step;
        batch.push_back(SeqChunk{std::span<const int32_t>(seqs[i]).subspan(p, 1), p, i, tables[i], LogitRows::kLast});
      }
      ASSERT_TRUE((*gpu)->forward(batch, &part).is_ok());
      all.insert(all.end(), part.begin(), part.end());
    }
    if (graphs) EXPECT_GE((*gpu)->graph_replays(), 38u);
    else EXPECT_EQ((*gpu)->graph_replays(), 0u);
    EXPECT_EQ((*gpu)->branched_steps(), 0u);
    runs.push_back(all);
  }
  for (int variant = 1; variant < 4; ++variant) {
    ASSERT_EQ(runs[0].size(), runs[variant].size());
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[variant].data(), runs[0].size() * 4), 0) << "variant " << variant;
  }
}

// Concurrent branches at V4-Flash dimensions, where every block forks its projection chains (the KV
// head, compressors and indexer beside the queries; the shared expert beside the routed experts):
// prefill chunks of 40 tokens and one-token decode steps, eager and as graphs, give bitwise the
// logits of one stream.
TEST(CudaModel, ConcurrentBranchesAreBitwiseOneStreamAtRealDimensions) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = v4_flash_dims_two_layers();
  const ModelWeights w = model::default_model_weights(c, 78);
  const std::vector<int32_t> seq = random_tokens(200, c.vocab_size, 12);
  const std::vector<int> table = {0, 1};  // 256-position pages
  std::vector<std::vector<float>> runs;
  for (int variant = 0; variant < 3; ++variant) {  // one stream; branches, eager; branches and graphs
    const bool branches = variant > 0, graphs = variant == 2;
    CudaModelOptions opt;
    opt.num_blocks = static_cast<int>(table.size());
    opt.cuda_graphs = graphs;
    opt.concurrent_branches = branches;
    auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    CudaModel& m = **gpu;
    std::vector<float> all, part;
    // 160 tokens in chunks of 40 (every row's logits), then 40 one-token steps.
    for (size_t b = 0; b < seq.size();) {
      const size_t n = b < 160 ? 40 : 1;
      const SeqChunk sc{std::span<const int32_t>(seq).subspan(b, n), static_cast<int64_t>(b), 0, table,
                        n == 1 ? LogitRows::kLast : LogitRows::kAll};
      const Status st = m.forward(std::span<const SeqChunk>(&sc, 1), &part);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      all.insert(all.end(), part.begin(), part.end());
      b += n;
    }
    EXPECT_EQ(m.branched_steps(), branches ? 44u : 0u);
    if (graphs) {
      EXPECT_GE(m.graph_replays(), 38u);
    } else {
      EXPECT_EQ(m.graph_replays(), 0u);
    }
    runs.push_back(std::move(all));
  }
  for (int variant = 1; variant < 3; ++variant) {
    ASSERT_EQ(runs[0].size(), runs[variant].size());
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[variant].data(), runs[0].size() * 4), 0) << "variant " << variant;
  }
}

// The mHC one pass (CudaModelOptions::mhc_one_pass) at V4-Flash dimensions: each post with the next
// block's dot products in one pass over the streams (the attention posts and the first layer's MoE
// post) gives bitwise the logits of the separate passes, in exact and release numerics (whose X and
// combine roundings the one pass does too): a prefill chunk of 80 tokens (streams updated in place),
// one of 20 and one-token decode steps as graphs (streams alternating between two buffers).
TEST(CudaModel, MhcOnePassIsBitwiseTheSeparatePasses) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = v4_flash_dims_two_layers();
  const ModelWeights w = model::default_model_weights(c, 79);
  const std::vector<int32_t> seq = random_tokens(120, c.vocab_size, 13);
  const std::vector<int> table = {0};  // a 256-position page
  for (const model::Numerics numerics : {model::Numerics::kExact, model::Numerics::kRelease}) {
    std::vector<float> runs[2];
    for (int one_pass = 0; one_pass < 2; ++one_pass) {
      CudaModelOptions opt;
      opt.num_blocks = static_cast<int>(table.size());
      opt.mhc_one_pass = one_pass == 1;
      auto gpu = CudaModel::create(c, w, numerics, opt);
      ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
      CudaModel& m = **gpu;
      std::vector<float> part;
      // Chunks of 80 and 20 tokens (every row's logits), then 20 one-token steps.
      for (size_t b = 0; b < seq.size();) {
        const size_t n = b < 80 ? 80 : b < 100 ? 20 : 1;
        const SeqChunk sc{std::span<const int32_t>(seq).subspan(b, n), static_cast<int64_t>(b), 0, table,
                          n == 1 ? LogitRows::kLast : LogitRows::kAll};
        const Status st = m.forward(std::span<const SeqChunk>(&sc, 1), &part);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        runs[one_pass].insert(runs[one_pass].end(), part.begin(), part.end());
        b += n;
      }
      EXPECT_GE(m.graph_replays(), 15u);
      // Two layers: three boundaries a step (two attention posts, the first MoE post); enqueued: the
      // 2 prefill chunks, the first decode step (eager) and the second (captured).
      if (one_pass == 1) {
        EXPECT_GE(m.one_pass_boundaries(), 4u * 3u);
        EXPECT_EQ(m.one_pass_boundaries() - m.one_pass_out_of_place_boundaries(), 3u);  // the 80-token chunk
      } else {
        EXPECT_EQ(m.one_pass_boundaries(), 0u);
      }
    }
    const char* what = numerics == model::Numerics::kExact ? "exact" : "release";
    ASSERT_EQ(runs[0].size(), runs[1].size()) << what;
    ASSERT_EQ(runs[0].size(), static_cast<size_t>(100 + 20) * c.vocab_size) << what;
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0) << what;
  }
}

// Dimensions outside what the kernels are written for are refused with the config field named,
// before the GPU is touched (this runs without a device too).
TEST(CudaModel, UnsupportedDimensionsAreNamed) {
  ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 1);
  c.index_head_dim = 24;  // the exact indexer kernel takes multiples of 16
  auto r = CudaModel::create(c, w, model::Numerics::kExact, CudaModelOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("index_head_dim = 24"), std::string::npos) << r.status().to_string();
  c = model::default_model_config();
  c.head_dim = 32;
  r = CudaModel::create(c, w, model::Numerics::kExact, CudaModelOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("head_dim = 32"), std::string::npos) << r.status().to_string();
}

TEST(CudaModel, BadInputIsAnErrorNamingIt) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 1);
  CudaModelOptions opt;
  opt.num_blocks = 2;
  opt.max_step_tokens = 64;
  auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  std::vector<float> logits;
  const std::vector<int> table = {0, 1};
  const std::vector<int32_t> bad = {1, 2, c.vocab_size};
  SeqChunk sc{bad, 0, 0, table, LogitRows::kLast};
  Status st = (*gpu)->forward(std::span<const SeqChunk>(&sc, 1), &logits);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.to_string();
  const std::vector<int32_t> ok = {1, 2, 3};
  sc = SeqChunk{ok, 0, 5, table, LogitRows::kLast};
  st = (*gpu)->forward(std::span<const SeqChunk>(&sc, 1), &logits);
  EXPECT_NE(st.message().find("state slot 5"), std::string::npos) << st.to_string();
  const std::vector<int32_t> many(65, 3);
  sc = SeqChunk{many, 0, 0, table, LogitRows::kLast};
  st = (*gpu)->forward(std::span<const SeqChunk>(&sc, 1), &logits);
  EXPECT_NE(st.message().find("max_step_tokens"), std::string::npos) << st.to_string();
  // The model still works after the errors.
  sc = SeqChunk{ok, 0, 0, table, LogitRows::kLast};
  EXPECT_TRUE((*gpu)->forward(std::span<const SeqChunk>(&sc, 1), &logits).is_ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>(c.vocab_size));
}

// Calls q on every GEMM weight that an FP8 checkpoint stores as FP8 (release numerics quantize
// those GEMMs' inputs), and flags it.
template <class Q>
void for_fp8_checkpoint_weights(ModelWeights& w, Q q) {
  auto flag = [&](model::Matrix& m) {
    q(m);
    m.quantized = true;
  };
  for (model::LayerWeights& L : w.layers) {
    flag(L.wq_a);
    flag(L.wq_b);
    flag(L.wkv);
    flag(L.wo_b);
    if (L.has_indexer) flag(L.indexer.wq_b);
    for_each_expert_matrix(L, flag);
  }
}

// Weights as an FP8 checkpoint has them, rounded through FP8 in blocks of 128 along each row
// (power-of-two scales).
void make_fp8_checkpoint(ModelWeights& w) {
  for_fp8_checkpoint_weights(w, [](model::Matrix& m) {
    for (int r = 0; r < m.rows; ++r) model::fp8_round_trip(&m.data[static_cast<size_t>(r) * m.cols], m.cols, 128);
  });
}

// The released checkpoints' FP8 layout instead: one power-of-two scale per 128 x 128 block (what
// CudaModelOptions::fp8_gemm recovers), on the same projections.
void make_fp8_block_checkpoint(ModelWeights& w) {
  for_fp8_checkpoint_weights(w, [](model::Matrix& m) {
    for (int r0 = 0; r0 < m.rows; r0 += 128)
      for (int c0 = 0; c0 < m.cols; c0 += 128) {
        const int r1 = std::min(m.rows, r0 + 128), c1 = std::min(m.cols, c0 + 128);
        float amax = 0.0f;
        for (int r = r0; r < r1; ++r)
          for (int k = c0; k < c1; ++k) amax = std::max(amax, std::fabs(m.data[static_cast<size_t>(r) * m.cols + k]));
        const float scale = model::pow2_ceil_scale(std::max(amax, 1e-4f), 1.0f / 448.0f);
        for (int r = r0; r < r1; ++r)
          for (int k = c0; k < c1; ++k) {
            float& v = m.data[static_cast<size_t>(r) * m.cols + k];
            v = model::round_e4m3(v / scale) * scale;
          }
      }
  });
}

// Release numerics on the GPU against the CPU's (itself checked against DeepSeek's official code:
// docs/numerics.md). Release numerics are chaotic (an FP8 rounding turns a one-ulp difference into
// a 1/16 step), so the bound is the model's own amplification of a one-ulp nudge, measured on the
// CPU in the same test; the GPU's remaining differences are summation orders and its bf16
// attention probabilities.
void release_vs_cpu(const ModelConfig& c, uint64_t seed, int tokens, size_t chunk, int blocks, const char* what,
                    model::KvCacheDtype kv = model::KvCacheDtype::kBF16, bool fp8_gemm = false) {
  ModelWeights w = model::default_model_weights(c, seed);
  round_gemm_weights_to_bf16(w);
  if (fp8_gemm)
    make_fp8_block_checkpoint(w);
  else
    make_fp8_checkpoint(w);
  const std::vector<int32_t> seq = random_tokens(tokens, c.vocab_size, 17);
  const auto R = model::Numerics::kRelease;
  const std::vector<float> want = cpu_logits(c, w, seq, chunk, blocks, false, R, false, kv);
  const Diff noise = compare(cpu_logits(c, w, seq, chunk, blocks, false, R, true, kv), want, c.vocab_size);
  CudaModelOptions opt;
  opt.num_blocks = blocks;
  opt.max_logit_rows = tokens;
  opt.kv_cache_dtype = kv;
  opt.fp8_gemm = fp8_gemm;
  auto gpu = CudaModel::create(c, w, R, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  const std::vector<float> got = gpu_logits(**gpu, seq, chunk, 0, blocks);
  const Diff d = compare(got, want, c.vocab_size);
  report("CPU release with a one-ulp nudge vs CPU release (the model's own sensitivity)", noise);
  report(what, d);
  EXPECT_LT(d.rel_rms, 1.5 * noise.rel_rms + 1e-3);
  EXPECT_GE(d.argmax_equal, noise.argmax_equal - d.rows / 20);
  if (fp8_gemm) {  // the FP8 tensor cores really ran: their block sums are not the bf16 path's
    opt.fp8_gemm = false;
    auto bf16_path = CudaModel::create(c, w, R, opt);
    ASSERT_TRUE(bf16_path.is_ok()) << bf16_path.status().to_string();
    const std::vector<float> other = gpu_logits(**bf16_path, seq, chunk, 0, blocks);
    ASSERT_EQ(other.size(), got.size());
    EXPECT_NE(std::memcmp(other.data(), got.data(), got.size() * sizeof(float)), 0);
    report("GPU release, FP8 tensor cores vs the bf16 path", compare(got, other, c.vocab_size));
  }
}

TEST(CudaModel, ReleaseNumericsMatchTheCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  release_vs_cpu(model::default_model_config(), 1234, 150, 0, 4, "GPU release vs CPU release (embedded model, FP8 weights)");
}

TEST(CudaModel, ReleaseNumericsMatchTheCpuBackendAtRealDimensions) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = v4_flash_dims_two_layers();
  release_vs_cpu(c, 77, 300, 100, 2, "GPU release vs CPU release (V4-Flash dims, FP8 weights, 300 tokens)");
}

// Release numerics with the FP8-weight projections on the FP8 tensor cores (fp8_gemm): as close to
// the CPU as the bf16 path, and still batch invariant (prefill == chunks == token-by-token decode).
TEST(CudaModel, Fp8GemmReleaseMatchesTheCpuBackendAtRealDimensions) {
  SKIP_WITHOUT_CUDA_DEVICE();
  release_vs_cpu(v4_flash_dims_two_layers(), 77, 300, 100, 2,
                 "GPU release on FP8 tensor cores vs CPU release (V4-Flash dims, 128x128-block FP8 weights)",
                 model::KvCacheDtype::kBF16, true);
}

TEST(CudaModel, Fp8GemmKeepsPrefillChunkedAndDecodeBitwiseEqual) {
  SKIP_WITHOUT_CUDA_DEVICE();
  ModelConfig c = v4_flash_dims_two_layers();
  c.index_topk = 16;
  ModelWeights w = model::default_model_weights(c, 98);
  make_fp8_block_checkpoint(w);
  CudaModelOptions opt;
  opt.num_blocks = 2;
  opt.fp8_gemm = true;
  auto gpu = CudaModel::create(c, w, model::Numerics::kRelease, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  expect_chunkings_bitwise_equal(**gpu, c.vocab_size, 4, opt.num_blocks, "");
}

// The FP8 KV cache (FP8 KV rows, FP4 indexer keys) on the GPU: encoded as the CPU encodes them and
// read dequantized, so the GPU with an fp8 cache tracks the CPU with an fp8 cache like the bf16
// cases above (release numerics: the validated setup of the official code).
TEST(CudaModel, Fp8KvCacheMatchesTheCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  release_vs_cpu(v4_flash_dims_two_layers(), 77, 300, 100, 2,
                 "GPU release + fp8 cache vs CPU release + fp8 cache (V4-Flash dims, 300 tokens)",
                 model::KvCacheDtype::kFP8);
}

// Batch invariance holds with the fp8 cache too: prefill == chunks == token-by-token decode, bit for
// bit, in both numerics. A head whose FP8 row is not a multiple of 8 bytes is refused, named.
TEST(CudaModel, Fp8KvCacheKeepsPrefillChunkedAndDecodeBitwiseEqual) {
  SKIP_WITHOUT_CUDA_DEVICE();
  ModelConfig c = v4_flash_dims_two_layers();  // fp8 rows of 584 bytes (the kernels read 8-byte units)
  c.index_topk = 16;                           // so the indexer selects among the 30 compressed rows
  const ModelWeights w = model::default_model_weights(c, 99);
  for (model::Numerics numerics : {model::Numerics::kExact, model::Numerics::kRelease}) {
    CudaModelOptions opt;
    opt.num_blocks = 2;
    opt.kv_cache_dtype = model::KvCacheDtype::kFP8;
    auto gpu = CudaModel::create(c, w, numerics, opt);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    expect_chunkings_bitwise_equal(**gpu, c.vocab_size, 3, opt.num_blocks,
                                   std::string(model::numerics_name(numerics)) + ", ");
  }
  CudaModelOptions small;
  small.kv_cache_dtype = model::KvCacheDtype::kFP8;
  const ModelConfig e = model::default_model_config();
  auto refused = CudaModel::create(e, model::default_model_weights(e, 1), model::Numerics::kExact, small);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("head_dim"), std::string::npos) << refused.status().to_string();
}

// Greedy tokens computed on the GPU equal the argmax of the logits rows the same step returns, and
// the log-probability is the raw log-softmax value (checked in double on the host).
TEST(CudaModel, GreedyOnTheGpuIsTheArgmaxOfTheLogits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 8);
  CudaModelOptions opt;
  opt.num_slots = 4;
  opt.num_blocks = 16;
  auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::vector<int>> tables;
  std::vector<SeqChunk> batch;
  for (int i = 0; i < 4; ++i) {
    seqs.push_back(random_tokens(20 + 9 * i, c.vocab_size, 40 + i));
    tables.push_back({4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3});
  }
  for (int i = 0; i < 4; ++i)
    batch.push_back(SeqChunk{seqs[i], 0, i, tables[i], i == 2 ? LogitRows::kAll : LogitRows::kLast});
  std::vector<float> logits;
  std::vector<GreedyToken> greedy;
  ASSERT_TRUE((*gpu)->forward(batch, &logits, &greedy).is_ok());
  const int rows = static_cast<int>(logits.size() / c.vocab_size);
  ASSERT_EQ(rows, 3 + 38);
  ASSERT_EQ(static_cast<int>(greedy.size()), rows);
  for (int r = 0; r < rows; ++r) {
    const float* x = &logits[static_cast<size_t>(r) * c.vocab_size];
    const int best = static_cast<int>(std::max_element(x, x + c.vocab_size) - x);  // first max: lowest id
    double mx = x[best], sum = 0;
    for (int v = 0; v < c.vocab_size; ++v) sum += std::exp(static_cast<double>(x[v]) - mx);
    EXPECT_EQ(greedy[r].token, best) << "row " << r;
    EXPECT_NEAR(greedy[r].logprob, static_cast<double>(x[best]) - mx - std::log(sum), 1e-4) << "row " << r;
  }
}

// Asynchronous greedy steps: prompts, then 30 decode steps each submitted before the previous one
// is collected, its input tokens named as the previous step's greedy rows (they never visit the
// host). The tokens and log-probabilities are bitwise those of synchronous forward() steps fed the
// tokens on the host, with and without CUDA graphs; misuse is an error and leaves the model usable.
TEST(CudaModel, AsyncGreedyStepsChainOnTheDeviceLikeSynchronousSteps) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 9);
  constexpr int kSeqs = 3, kSteps = 30;
  for (bool graphs : {false, true}) {
    std::vector<std::vector<GreedyToken>> runs[2];
    for (int async = 0; async < 2; ++async) {
      CudaModelOptions opt;
      opt.num_slots = kSeqs;
      opt.num_blocks = 12;
      opt.cuda_graphs = graphs;
      auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
      ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
      std::vector<std::vector<int32_t>> seqs;
      std::vector<std::vector<int>> tables;
      for (int i = 0; i < kSeqs; ++i) {
        seqs.push_back(random_tokens(15 + 6 * i, c.vocab_size, 70 + i));
        tables.push_back({4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3});
      }
      std::vector<SeqChunk> batch;
      for (int i = 0; i < kSeqs; ++i) batch.push_back(SeqChunk{seqs[i], 0, i, tables[i], LogitRows::kLast});
      std::vector<GreedyToken> g;
      std::vector<std::vector<GreedyToken>>& out = runs[async];
      const std::vector<int32_t> placeholder(1, 0);
      if (async) {
        ASSERT_TRUE((*gpu)->submit_greedy(batch, {}).is_ok());
        for (int step = 0; step < kSteps; ++step) {
          batch.clear();
          std::vector<DeferredToken> deferred;
          for (int i = 0; i < kSeqs; ++i) {
            const int p = static_cast<int>(seqs[i].size()) + step;
            batch.push_back(SeqChunk{placeholder, p, i, tables[i], LogitRows::kLast});
            deferred.push_back(DeferredToken{i, i});
          }
          ASSERT_TRUE((*gpu)->submit_greedy(batch, deferred).is_ok()) << "step " << step;
          if (step == 0) {  // a third step in flight, and forward() with steps in flight, are refused
            EXPECT_FALSE((*gpu)->submit_greedy(batch, deferred).is_ok());
            std::vector<float> logits;
            EXPECT_FALSE((*gpu)->forward(batch, &logits).is_ok());
          }
          ASSERT_TRUE((*gpu)->collect_greedy(&g).is_ok());
          out.push_back(g);
        }
        ASSERT_TRUE((*gpu)->collect_greedy(&g).is_ok());
        out.push_back(g);
        EXPECT_FALSE((*gpu)->collect_greedy(&g).is_ok());  // nothing in flight
      } else {
        std::vector<std::vector<int32_t>> next(kSeqs);
        ASSERT_TRUE((*gpu)->forward(batch, nullptr, &g).is_ok());
        out.push_back(g);
        for (int step = 0; step < kSteps; ++step) {
          batch.clear();
          for (int i = 0; i < kSeqs; ++i) {
            next[i].assign(1, g[i].token);
            const int p = static_cast<int>(seqs[i].size()) + step;
            batch.push_back(SeqChunk{next[i], p, i, tables[i], LogitRows::kLast});
          }
          ASSERT_TRUE((*gpu)->forward(batch, nullptr, &g).is_ok());
          out.push_back(g);
        }
      }
      if (graphs) {
        EXPECT_GE((*gpu)->graph_replays(), static_cast<uint64_t>(kSteps - 2));
      }
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    for (size_t st = 0; st < runs[0].size(); ++st) {
      ASSERT_EQ(runs[0][st].size(), static_cast<size_t>(kSeqs));
      ASSERT_EQ(runs[1][st].size(), static_cast<size_t>(kSeqs));
      for (int i = 0; i < kSeqs; ++i) {
        EXPECT_EQ(runs[0][st][i].token, runs[1][st][i].token) << "graphs " << graphs << " step " << st << " seq " << i;
        EXPECT_EQ(std::memcmp(&runs[0][st][i].logprob, &runs[1][st][i].logprob, 4), 0) << "step " << st << " seq " << i;
      }
    }
  }
}

// Deferred tokens that name nothing are errors naming the field; the model keeps working.
TEST(CudaModel, DeferredTokensOutOfRangeAreErrors) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ModelConfig c = model::default_model_config();
  const ModelWeights w = model::default_model_weights(c, 2);
  CudaModelOptions opt;
  opt.num_blocks = 4;
  auto gpu = CudaModel::create(c, w, model::Numerics::kExact, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  const std::vector<int32_t> prompt = {5, 6, 7}, one = {0};
  const std::vector<int> table = {0, 1};
  SeqChunk sc{prompt, 0, 0, table, LogitRows::kLast};
  const DeferredToken row0{0, 0};
  Status st = (*gpu)->submit_greedy(std::span<const SeqChunk>(&sc, 1), std::span<const DeferredToken>(&row0, 1));
  EXPECT_NE(st.message().find("previous step computed no greedy rows"), std::string::npos) << st.to_string();
  ASSERT_TRUE((*gpu)->submit_greedy(std::span<const SeqChunk>(&sc, 1), {}).is_ok());
  sc = SeqChunk{one, 3, 0, table, LogitRows::kLast};
  const DeferredToken bad_row{0, 1}, bad_index{1, 0};
  st = (*gpu)->submit_greedy(std::span<const SeqChunk>(&sc, 1), std::span<const DeferredToken>(&bad_row, 1));
  EXPECT_NE(st.message().find("row 1 beyond the previous step's 1 greedy rows"), std::string::npos) << st.to_string();
  st = (*gpu)->submit_greedy(std::span<const SeqChunk>(&sc, 1), std::span<const DeferredToken>(&bad_index, 1));
  EXPECT_NE(st.message().find("index 1 outside the step's 1 tokens"), std::string::npos) << st.to_string();
  ASSERT_TRUE((*gpu)->submit_greedy(std::span<const SeqChunk>(&sc, 1), std::span<const DeferredToken>(&row0, 1)).is_ok());
  std::vector<GreedyToken> g;
  ASSERT_TRUE((*gpu)->collect_greedy(&g).is_ok());
  ASSERT_TRUE((*gpu)->collect_greedy(&g).is_ok());
  EXPECT_EQ(g.size(), 1u);
}

}  // namespace
}  // namespace deepinfer::backend::cuda
