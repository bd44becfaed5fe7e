// Token-wise ops of the CUDA backend (sm_90): embedding, RMSNorm, RoPE, mHC hyper-connections,
// SwiGLU, MoE routing / permutation / combination, casts.
//
// Each op computes the same math as the CpuBackend op (or forward code) named in its comment, in
// fp32, and is batch invariant: row m's result depends only on row m's inputs, with a fixed
// reduction order chosen from the row width alone (never from M). Results need not be bitwise
// equal to the CPU's (different summation trees, fused multiply-adds) but must be within fp32
// rounding of it. All pointers are device pointers; every entry point is asynchronous on `stream`,
// allocates nothing and never synchronizes. M (or T) may be 0 (no launch).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::backend::cuda {

using bf16 = __nv_bfloat16;

// X[t, i, :] = fp32(table[tokens[t], :]) for each of the hc streams i. X: [T, hc, D].
void embed(const int32_t* tokens, int T, const bf16* table, int D, int hc, float* X, cudaStream_t stream);

// y[m, :] = x[m, :] * rsqrt(mean(x[m, :]^2) + eps) (* weight): CpuBackend::rms_norm. Writes y_f32
// and/or y_bf16 (either may be null; y_f32 may alias x). Row stride n.
void rms_norm(const float* x, int M, int n, const float* weight, float eps, float* y_f32, bf16* y_bf16,
              cudaStream_t stream);

// In-place RoPE on the trailing rope_dim dims of each of `heads` vectors of width head_dim in row m
// (row stride heads * head_dim), rotated by angle inv_freq[i] * pos[m] (pairs 2i, 2i + 1),
// cos/sin scaled by attention_factor, by -angle when inverse: CpuBackend::rope. pos: [M] int64.
void rope(float* x, int M, int heads, int head_dim, const int64_t* pos, const float* inv_freq, int rope_dim,
          float attention_factor, bool inverse, cudaStream_t stream);

// mHC pre-mix (CpuBackend::hc_pre): per token, xn = rmsnorm(X[m] as hc * D values, no weight,
// norm_eps); mixes = fn . xn with fn [(2 + hc) * hc, hc * D] fp32; pre_i = sigmoid(mixes[i] *
// scale[0] + base[i]) + hc_eps; post_i = 2 sigmoid(mixes[hc + i] * scale[1] + base[hc + i]); comb =
// row softmax of (mixes[2hc + j hc + k] * scale[2] + base[...]) + hc_eps, then Sinkhorn (column
// normalisation, then iters - 1 times row then column), dividing by (sum + hc_eps);
// collapsed[m, d] = sum_i pre_i X[m, i, d]. Outputs: collapsed [M, D], post [M, hc], comb [M, hc, hc]
// (comb[j][k]: input stream j -> output stream k). hc <= 8. `workspace`: at least
// hc_workspace_bytes(M, hc, D, false) bytes, 16-byte aligned (partial dot products).
size_t hc_workspace_bytes(int M, int hc, int D, bool head);
// The RMS norm that follows hc_pre / hc_head (attention, ffn or final norm), optionally done by them:
// the collapsed rows are rounded to bf16 in place when round_collapsed (release numerics), then
// normed = rms_norm(collapsed, M, D, weight, eps, nullptr, normed) bit for bit. In the collapse kernel
// itself when D > 2048 (rms_norm's block form), as the separate passes otherwise.
// discard_collapsed: the caller reads only `normed`; then the collapsed rows may be left unwritten
// (the collapse kernel keeps them on chip where the norm runs there for more than 256 rows; M*D*4
// bytes less to write). The collapsed buffer must still be given (the separate passes use it).
struct HcNorm {
  const float* weight = nullptr;  // [D] or null
  float eps = 0.0f;
  bool round_collapsed = false;
  bf16* normed = nullptr;  // [M, D]
  bool discard_collapsed = false;
};
void hc_pre(const float* X, int M, int hc, int D, const float* fn, const float* base, const float* scale, int iters,
            float hc_eps, float norm_eps, float* collapsed, float* post, float* comb, void* workspace,
            cudaStream_t stream, const HcNorm* norm = nullptr);
// X[m, k, d] <- post[m, k] * o[m, d] + sum_j comb[m, j, k] * X[m, j, d]  (in place; CpuBackend::hc_post).
void hc_post(float* X, const float* o, int M, int hc, int D, const float* post, const float* comb,
             cudaStream_t stream);
// Final collapse for the rows that produce logits (CpuBackend::hc_head), reading X rows rows[r]
// (device [R] ints, indices into X's token dimension): fn [hc, hc * D], base [hc], scale [1];
// out [R, D]. `workspace`: at least hc_workspace_bytes(R, hc, D, true) bytes.
void hc_head(const float* X, const int* rows, int R, int hc, int D, const float* fn, const float* base,
             const float* scale, float hc_eps, float norm_eps, float* out, void* workspace, cudaStream_t stream,
             const HcNorm* norm = nullptr);

// SwiGLU with clamp on a fused gate|up projection gu [M, 2 * inter] (columns [0, inter) = W1 x,
// [inter, 2 inter) = W3 x): out[m, i] = bf16(silu(min(g, limit)) * clamp(u, -limit, limit)
// (* row_weight[m] when non-null)). CpuBackend::swiglu_expert's middle step.
// gate_up_interleaved: gu's columns are instead in blocks of 8 gate then 8 up columns (the layout of
// w1|w3 weights interleaved for grouped_gemm_stacked_swiglu, swiglu.cuh); needs inter % 8 == 0 and
// 16-byte aligned gu. The same bits as the plain layout holding the same values.
void swiglu(const float* gu, int M, int inter, float limit, const float* row_weight, bf16* out, cudaStream_t stream,
            bool gate_up_interleaved = false);

enum class Scoring { kSqrtSoftplus, kSigmoid, kSoftmax };

// MoE routing (the forward's DeepSeekV4::moe, first half), per token t:
//   s = score(logits[t, :E]) (sqrt(softplus) with softplus(x) = x for x > 20; sigmoid; softmax)
//   hash routing (tid2eid != null, [vocab, K]): sel = tid2eid[tokens[t]]
//   learned routing: sel = top-K of s + bias (ties to the lower expert id), in descending order
//   w_k = s[sel_k] / (sum_k s[sel_k] + 1e-20) * routed_scale
// sel, w: [T, K]. E <= 1024, K <= 16.
// `permutation` (optional): moe_permute's outputs for sel and w (its perm_weight may be null), which
// moe_route writes as well where one CTA routes every token (T <= 4: decode at batch <= 4, one
// launch less). Returns whether it did; if not, moe_permute must still run.
struct MoePermutation {
  int* row_offsets;    // [E + 1]
  int* perm_token;     // [T * K]
  float* perm_weight;  // [T * K] or null
  int* row_of;         // [T * K]
};
bool moe_route(const float* logits, int T, int E, int K, Scoring scoring, const float* bias, const int32_t* tid2eid,
               const int32_t* tokens, float routed_scale, int* sel, float* w, cudaStream_t stream,
               const MoePermutation* permutation = nullptr);

// Buckets the T * K choices by expert, keeping token order inside a bucket (a stable counting
// sort): row_offsets [E + 1], perm_token[i] = token of permuted row i, perm_weight[i] its routing
// weight, row_of[t * K + k] = permuted row of choice (t, k). Deterministic.
void moe_permute(const int* sel, const float* w, int T, int K, int E, int* row_offsets, int* perm_token,
                 float* perm_weight, int* row_of, cudaStream_t stream);

// out[r, :] = src[idx[r], :] for r < R (bf16 rows of `width`).
void gather_rows(const bf16* src, const int* idx, int R, int width, bf16* out, cudaStream_t stream);

// out[t, :] = sum over the token's K choices in ascending expert id of y[row_of[t, k], :]
// (* w[t, k] when w != null), then + shared[t, :] when shared != null; fp32. y: [T * K, D].
void moe_combine(const float* y, const int* row_of, const int* sel, const float* w, const float* shared, int T,
                 int K, int D, float* out, cudaStream_t stream);

// moe_combine into a temporary o, o rounded to bf16 when round_o, hc_post(X, o, ...), X rounded to
// bf16 when round_x — the same bits as those passes in turn, in one kernel (o is never stored).
void hc_post_moe(float* X, const float* y, const int* row_of, const int* sel, const float* w, const float* shared,
                 int T, int K, int hc, int D, const float* post, const float* comb, bool round_o, bool round_x,
                 cudaStream_t stream);

// The output of the block an mHC post closes: an attention block's rows o [M, D], or (o null) the
// MoE block's moe_combine inputs (y, row_of, sel, w, shared, K), whose sum is rounded to bf16 when
// round_o, as in hc_post_moe.
struct HcBlockOutput {
  const float* o = nullptr;
  const float* y = nullptr;
  const int* row_of = nullptr;
  const int* sel = nullptr;
  const float* w = nullptr;
  const float* shared = nullptr;
  int K = 0;
  bool round_o = false;
};
// One mHC boundary: hc_post of `out` into X (hc_post_moe for a MoE output), X rounded to bf16 when
// round_x, then hc_pre of the new X for the next block (fn ... norm as for hc_pre; next_post and
// next_comb may be `post` and `comb`: they are written after the last read) — the same bits as those
// calls in turn. The new streams go to X_out: X itself (in place), or another [M, hc, D] buffer (X's
// contents are then unspecified afterwards), which lets small steps spread the pass over hc times
// more CTAs. Where hc <= 4, D % 4 == 0 and every buffer is 16-byte aligned (V4's shapes), the post
// and the next block's dot products are one pass (hc_post_dots: X read and written once) and it
// returns true; otherwise it makes those calls (then a copy to X_out) and returns false.
bool hc_post_pre(float* X, float* X_out, const HcBlockOutput& out, int M, int hc, int D, const float* post,
                 const float* comb, bool round_x, const float* fn, const float* base, const float* scale, int iters,
                 float hc_eps, float norm_eps, float* collapsed, float* next_post, float* next_comb, void* workspace,
                 cudaStream_t stream, const HcNorm* norm = nullptr);

// rope(x, ..., inverse = false) then to_bf16 of the M rows into y [M, heads * head_dim], in one pass,
// bitwise what the two give; x is left unchanged. head_dim and rope_dim even.
void rope_to_bf16(const float* x, int M, int heads, int head_dim, const int64_t* pos, const float* inv_freq,
                  int rope_dim, float attention_factor, bf16* y, cudaStream_t stream);

// rms_norm (weight may be null) of each of the M * heads rows of n values (row stride n), then, when
// round_mid, bf16 rounding, then RoPE of the trailing rope_dim values of row (t, h) at pos[t] (as
// rope(), forward), written to y_f32 (may alias x) and/or y_bf16 (either may be null): what
// rms_norm, round_bf16, rope and to_bf16 do in turn, in one pass (one warp per row) when n and
// rope_dim are multiples of 4, n <= 2048 and the rows are 16-byte aligned; otherwise by those
// passes, in place in x (so x may be overwritten).
void norm_rope(float* x, int M, int heads, int n, const float* weight, float eps, bool round_mid, const int64_t* pos,
               const float* inv_freq, int rope_dim, float attention_factor, float* y_f32, bf16* y_bf16,
               cudaStream_t stream);

// Casts and roundings.
void to_bf16(const float* x, size_t n, bf16* y, cudaStream_t stream);
void round_bf16(float* x, size_t n, cudaStream_t stream);  // in place: x = fp32(bf16(x))

// Greedy token of each logits row (logits [R, V] fp32): token[r] = argmax (lowest id on ties; NaN
// never wins; 0 when no value beats -inf) and logprob[r] = its raw log-softmax value,
// logits[r, token] - (max + log(sum_v exp(logits[r, v] - max))) (the sum in a fixed order per row:
// batch-invariant, not the CPU sampler's double sum). R <= 65535; `workspace` >=
// greedy_workspace_bytes(R, V) bytes, 4-byte aligned.
size_t greedy_workspace_bytes(int R, int V);
void greedy_rows(const float* logits, int R, int V, int32_t* token, float* logprob, void* workspace,
                 cudaStream_t stream);

// tokens[pairs[2 i]] = source[pairs[2 i + 1]] for i < n: a step's input tokens that are greedy rows
// of the previous step (ops' greedy_rows `token` output), filled in on the device.
void scatter_tokens(int32_t* tokens, const int32_t* pairs, int n, const int32_t* source, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda
