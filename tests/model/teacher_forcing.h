// Teacher forcing against tests/data/release-numerics/teacher_forcing_p0.safetensors (the official
// code's activations on the official-numerics fixture's prompt p0), for any forward with a tap:
// the CPU model (tests/model/release_numerics_test.cc) and the GPU one (tests/cuda/fixture_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/deepseek_v4.h"
#include "model/state_cache.h"
#include "tensor_util.h"

namespace deepinfer::testing {

using Taps = std::map<std::string, std::vector<float>>;

// p0 of the teacher-forcing file through a forward (prefill, then one decode step, on state slot 0
// with block table {0, 1}) whose tap is
// installed by `set_tap`: every block input the file has ("attn_in", "ffn_in", "h_out") is replaced
// by the official code's; every tapped tensor (after feeding) is recorded under "prefill."/"dec1."
// + its name, and the logits under "prefill.logits" (the file's last rows) and "dec1.logits".
template <class SetTap, class Forward>
Taps teacher_forced_taps(const io::SafetensorsSet& ref, SetTap set_tap, Forward forward) {
  Taps taps;
  std::string phase;
  set_tap([&](const std::string& name, float* data, size_t n) {
    const std::string what = name.substr(name.find('.') + 1);
    if (what == "attn_in" || what == "ffn_in" || what == "h_out") {
      if (const io::TensorView* t = ref.find(phase + name)) {
        const std::vector<float> want = to_floats(*t);
        EXPECT_EQ(want.size(), n) << name;
        if (want.size() == n) std::memcpy(data, want.data(), n * sizeof(float));  // feed the official input
      }
    }
    taps[phase + name].assign(data, data + n);
  });
  const std::vector<int> table = {0, 1};
  const std::vector<int32_t> ids = to_ids(*ref.find("input_ids"));
  std::vector<float> logits;
  phase = "prefill.";
  const model::SeqChunk prefill{ids, 0, 0, table, model::LogitRows::kAll};
  EXPECT_TRUE(forward(prefill, &logits).is_ok());
  const size_t last = ref.find("prefill.logits")->num_elements();
  EXPECT_GE(logits.size(), last);
  if (logits.size() >= last) taps["prefill.logits"].assign(logits.end() - static_cast<long>(last), logits.end());
  phase = "dec1.";
  const std::vector<int32_t> next = to_ids(*ref.find("dec1.token"));
  const model::SeqChunk decode{next, static_cast<int64_t>(ids.size()), 0, table, model::LogitRows::kLast};
  EXPECT_TRUE(forward(decode, &logits).is_ok());
  taps["dec1.logits"] = logits;
  return taps;
}

// The CPU model's taps under teacher forcing, in `numerics`, with a bf16 state cache.
inline Taps cpu_teacher_forced_taps(const model::ModelConfig& c, const model::ModelWeights& w,
                                    model::Numerics numerics, const io::SafetensorsSet& ref) {
  auto backend = backend::make_cpu_backend();
  model::DeepSeekV4 net(c, w, *backend, numerics);
  auto shape = model::make_state_cache_shape(c, model::default_block_size(c), model::KvCacheDtype::kBF16);
  EXPECT_TRUE(shape.is_ok());
  if (!shape.is_ok()) return {};
  model::StateStorage cache(*shape, 1, 2);
  return teacher_forced_taps(
      ref, [&](model::DeepSeekV4::Tap t) { net.set_tap(std::move(t)); },
      [&](const model::SeqChunk& q, std::vector<float>* logits) {
        return net.forward(std::span<const model::SeqChunk>(&q, 1), cache, logits);
      });
}

}  // namespace deepinfer::testing
