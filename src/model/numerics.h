// Numerics modes and the rounding steps of the release's quantization-aware inference.
//
// kExact: weights dequantized, every activation in fp32 — transformers' DeepseekV4ForCausalLM.
// kRelease (work in progress, issue #6: implemented per the official code's description but not yet
// reproducing the official fixture): what DeepSeek's official inference code does with the released
// checkpoint:
//   - FP8 e4m3 activations, blocks of 128 along the input dim with power-of-two (ue8m0) scales,
//     before every FP8/FP4 weight GEMM; the product itself is exact (fp32 accumulate);
//   - the non-RoPE dims of every KV row (window and compressed) rounded through FP8 in blocks of 64;
//   - indexer queries and compressed indexer keys Walsh–Hadamard rotated and rounded through FP4
//     e2m1 in blocks of 32;
//   - bf16 activations where the official code keeps bf16.
// Scales: s = 2^ceil(log2(max(amax, floor) / qmax)) (qmax 448 for e4m3, 6 for e2m1); casts round to
// nearest, ties to even, saturating. Power-of-two scales make dequantization exact.
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
// "auto" is exact for now (release for FP8 checkpoints once it reproduces the official fixture).
// The name must be valid (callers validate user input with numerics_from_name or "auto").
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
