// Numerics modes and the rounding steps of the release's quantization-aware inference.
//
// kExact: weights dequantized, every activation in fp32 — transformers' DeepseekV4ForCausalLM.
// kRelease: what DeepSeek's official inference code (inference/model.py of the release, run with the
// pure-PyTorch kernels that produced the official-numerics fixture) computes with the released
// checkpoint — checked on an H200 to reproduce that fixture bit for bit (docs/numerics.md):
//   - FP8 e4m3 activations, blocks of 128 along the input dim with power-of-two (ue8m0) scales,
//     before every FP8/FP4 weight GEMM; the product itself is exact (fp32 accumulate), bf16 out;
//   - bf16 activations where the official code keeps bf16 (residual streams, norms' outputs, q, KV,
//     attention output, expert hidden states, the indexer's scores);
//   - indexer queries and compressed keys Walsh–Hadamard rotated (in bf16).
// The official code also calls quantize-dequantize steps on the KV rows' non-RoPE dims (FP8, blocks
// of 64) and on indexer queries/keys (FP4, blocks of 32); in the reference those keep the bf16 values
// unchanged, so release numerics does too. Rounding through those formats comes with an FP8 KV
// cache (kv_format.h), which stores them so.
// Scales: s = 2^ceil(log2(max(amax, floor) * (1/qmax))) (qmax 448 for e4m3, 6 for e2m1); casts round
// to nearest, ties to even, saturating. Power-of-two scales make dequantization exact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::model {

enum class Numerics { kExact, kRelease };
const char* numerics_name(Numerics n);  // "exact" / "release"
std::optional<Numerics> numerics_from_name(std::string_view name);
struct ModelConfig;
// "auto" is release for checkpoints whose config carries an fp8 quantization_config (the released
// format), exact otherwise. The name must be valid (callers validate user input with
// numerics_from_name or "auto").
Numerics resolve_numerics(std::string_view name, const ModelConfig& config);

// Round to the nearest bf16 value (ties to even), returned as fp32.
float round_bf16(float x);
void round_bf16(float* x, size_t n);

// The nearest e4m3fn value (ties to even, saturating at +-448; subnormal step 2^-9).
float round_e4m3(float x);
// The nearest e2m1 value (ties to even, saturating at +-6).
float round_e2m1(float x);
// 2^ceil(log2(a * (1/qmax))) with the product in fp32 (the official kernels' bit trick).
float pow2_ceil_scale(float a, float inv_qmax);

// In place: each block of `block` values becomes e4m3(x / s) * s with s from its amax (floor 1e-4).
void fp8_round_trip(float* x, int n, int block);
// In place: each block of `block` values becomes e2m1(x / s) * s (amax floor 6 * 2^-126).
void fp4_round_trip(float* x, int n, int block);
// In place Walsh–Hadamard transform of n (a power of two) values, times `scale`, in fp32.
void hadamard(float* x, int n, float scale);

}  // namespace deepinfer::model
