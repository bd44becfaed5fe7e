// Token sampling: see sampler.h for the contract. Everything here is a pure function of its
// arguments (no static state, no global RNG), so it is thread-safe and batch invariant.
//
// Processing order (the header's, vLLM's):
//   1. banned tokens are removed from the candidate set (unless that would remove every token,
//      then the ban is ignored); they are never sampled, greedy included;
//   2. penalties on the raw logits, in vLLM's order: repetition (prompt ∪ output, each distinct
//      token once: x > 0 ? x / r : x * r), then frequency (x -= f * count), then presence
//      (x -= p * [count > 0]), in float32 like vLLM;
//   3. temperature == 0 (or any non-positive / NaN temperature): greedy argmax of the penalised
//      logits, lowest id on ties; the filters and the seed play no part;
//   4. otherwise scaled s_v = double(x_v) / double(T), and the filters, in this order:
//        min_p  on the full tempered distribution: drop v when p_v < min_p * p_max, evaluated
//               in the log domain as s_v - s_max < log(min_p) (same inequality, no exp needed;
//               renormalisation does not change it since the ratio p_v / p_max is invariant);
//        top_k  keep the k highest s_v (ties by lower id) among the min_p survivors; rank-based,
//               so no renormalisation is needed;
//        top_p  on the distribution renormalised over the min_p ∩ top_k survivors: sort by p
//               descending (ties by lower id) and keep the smallest prefix whose cumulative
//               probability reaches top_p (at least one token);
//      this is vLLM's order (min-p logits processor, then top-k, then top-p on the renormalised
//      top-k survivors), and the three filters intersect;
//   5. Gumbel-max draw over the survivors: argmax_v (s_v - log(-log U_v)),
//      U_v = philox_uniform(seed, position, v), ties by lower id.
//
// Logprobs are of the raw model distribution: log_softmax of the unprocessed logits, with
// max-subtraction and a sequential double-precision sum (same bits every call).
//
// Token ids outside [0, vocab) in prompt / output / banned lists are ignored.
// Logits that are NaN are never sampled (unless every candidate is NaN).
#include "sample/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace deepinfer::sample {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
// Fourth counter word: a domain-separation salt for "sampling" (ASCII "samp"), so other users of
// Philox keyed by the same seed never see the same stream.
constexpr uint32_t kSamplingSalt = 0x73616D70u;

inline void philox_round(uint32_t c[4], uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k0;
  const uint32_t n2 = hi0 ^ c[3] ^ k1;
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

// 64 random bits for (seed, position, token): words 0 and 1 of the Philox block.
inline uint64_t philox_bits(uint64_t seed, int64_t position, int32_t token) {
  const uint64_t pos = static_cast<uint64_t>(position);
  const uint32_t ctr[4] = {static_cast<uint32_t>(token), static_cast<uint32_t>(pos),
                           static_cast<uint32_t>(pos >> 32), kSamplingSalt};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  uint32_t out[4];
  philox4x32(ctr, key, out);
  return (static_cast<uint64_t>(out[1]) << 32) | out[0];
}

// philox_bits for kLanes tokens at once: the same rounds as philox4x32, lane-interleaved so the
// independent multiply chains overlap (and can use SIMD).
constexpr int kLanes = 8;
inline void philox_bits_lanes(uint64_t seed, int64_t position, const int32_t* tokens, uint64_t* out) {
  const uint64_t pos = static_cast<uint64_t>(position);
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    c0[l] = static_cast<uint32_t>(tokens[l]);
    c1[l] = static_cast<uint32_t>(pos);
    c2[l] = static_cast<uint32_t>(pos >> 32);
    c3[l] = kSamplingSalt;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0[l];
      const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0;
      c1[l] = static_cast<uint32_t>(p1);
      c2[l] = n2;
      c3[l] = static_cast<uint32_t>(p0);
    }
  }
  for (int l = 0; l < kLanes; ++l) out[l] = (static_cast<uint64_t>(c1[l]) << 32) | c0[l];
}

// U = (a + 1/2) * 2^-52 with a = the top 52 bits. Every value is exact in a double (a + 1/2 needs
// 53 significant bits), so U lies in [2^-53, 1 - 2^-53]: strictly inside (0, 1), and log(U) and
// log(-log U) are finite. (53 bits, (a + 1/2) * 2^-53, would round a + 1/2 for a >= 2^52 and
// can reach exactly 1.0.)
constexpr int kUniformBits = 52;
inline double bits_to_uniform(uint64_t x) {
  return (static_cast<double>(x >> (64 - kUniformBits)) + 0.5) * 0x1p-52;
}

constexpr double kLn2 = 0.6931471805599453;

// Upper bound (exact math) on the Gumbel noise -log(-log U) for the U built from bits x:
// with m = 2^52 - a >= 1, 1 - U = (m - 1/2) 2^-52 >= m 2^-53 >= 2^(L - 53), L = floor(log2 m),
// and -log U >= 1 - U, so -log(-log U) <= (53 - L) ln 2.
inline double gumbel_upper_bound(uint64_t x) {
  const uint64_t a = x >> (64 - kUniformBits);
  const uint64_t m = (uint64_t{1} << kUniformBits) - a;
  const int l = static_cast<int>(std::bit_width(m)) - 1;
  return static_cast<double>(kUniformBits + 1 - l) * kLn2;
}
constexpr double kGumbelMax = (kUniformBits + 1) * kLn2;  // bound over every U

struct Patch {
  int32_t id;
  float value;  // penalised logit
};

// Penalised logits for the few tokens penalties touch, sorted by id (empty when no penalty).
std::vector<Patch> penalty_patches(const SampleInput& in, const SamplingConfig& cfg) {
  std::vector<Patch> patches;
  const bool rep = cfg.repetition_penalty != 1.0f;
  const bool out_pen = cfg.presence_penalty != 0.0f || cfg.frequency_penalty != 0.0f;
  if (!rep && !out_pen) return patches;
  const int64_t vocab = static_cast<int64_t>(in.logits.size());
  auto in_range = [vocab](int32_t t) { return t >= 0 && t < vocab; };

  std::vector<int32_t> out;  // sorted output tokens (with repeats) for the counts
  out.reserve(in.output_tokens.size());
  for (int32_t t : in.output_tokens)
    if (in_range(t)) out.push_back(t);
  std::sort(out.begin(), out.end());

  std::vector<int32_t> ids = out;
  if (rep) {
    for (int32_t t : in.prompt_tokens)
      if (in_range(t)) ids.push_back(t);
    std::sort(ids.begin(), ids.end());
  }
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

  patches.reserve(ids.size());
  auto it = out.begin();
  for (int32_t t : ids) {
    float x = in.logits[static_cast<size_t>(t)];
    if (rep) x = x > 0.0f ? x / cfg.repetition_penalty : x * cfg.repetition_penalty;
    it = std::lower_bound(it, out.end(), t);
    const auto end = std::upper_bound(it, out.end(), t);
    const auto count = static_cast<int64_t>(end - it);
    it = end;
    if (count > 0) {
      x = x - cfg.frequency_penalty * static_cast<float>(count);
      x = x - cfg.presence_penalty;
    }
    patches.push_back({t, x});
  }
  return patches;
}

// Sorted distinct in-range banned ids; empty when banning would remove every token.
std::vector<int32_t> banned_ids(const SampleInput& in) {
  std::vector<int32_t> banned;
  if (in.banned_tokens.empty()) return banned;
  const int64_t vocab = static_cast<int64_t>(in.logits.size());
  banned.reserve(in.banned_tokens.size());
  for (int32_t t : in.banned_tokens)
    if (t >= 0 && t < vocab) banned.push_back(t);
  std::sort(banned.begin(), banned.end());
  banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
  if (static_cast<int64_t>(banned.size()) == vocab) banned.clear();
  return banned;
}

// Walks the non-banned tokens in ascending id order without materialising the penalised row:
// run(a, b) for each maximal range [a, b) of untouched tokens (raw logits), one(id, value) for
// each penalised, non-banned token in between.
template <class Run, class One>
void walk_candidates(std::span<const float> logits, const std::vector<Patch>& patches,
                     const std::vector<int32_t>& banned, Run&& run, One&& one) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  size_t pi = 0, bi = 0;
  int32_t v = 0;
  while (true) {
    int32_t next = vocab;
    if (pi < patches.size()) next = std::min(next, patches[pi].id);
    if (bi < banned.size()) next = std::min(next, banned[bi]);
    if (v < next) run(v, next);
    v = next;
    if (v >= vocab) break;
    const bool is_banned = bi < banned.size() && banned[bi] == v;
    const bool is_patched = pi < patches.size() && patches[pi].id == v;
    if (!is_banned) one(v, patches[pi].value);  // not banned and special: patched
    bi += is_banned;
    pi += is_patched;
    ++v;
  }
}

// Largest value of x[0, n), NaN ignored (-inf when none). Eight independent lanes so the
// compiler vectorises it; max is exact, so the lane order does not matter.
float lane_max(const float* x, size_t n) {
  constexpr int kW = 8;
  float acc[kW];
  for (float& a : acc) a = -std::numeric_limits<float>::infinity();
  size_t i = 0;
  for (; i + kW <= n; i += kW)
    for (int l = 0; l < kW; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (float a : acc) m = a > m ? a : m;
  return m;
}

// Greedy: argmax of the penalised logits over non-banned tokens, lowest id on ties; NaN never
// wins; when nothing beats -inf (all -inf / NaN) the lowest candidate id.
int32_t greedy_token(std::span<const float> logits, const std::vector<Patch>& patches,
                     const std::vector<int32_t>& banned) {
  const float* x = logits.data();
  float best = -std::numeric_limits<float>::infinity();
  int32_t best_id = -1, first_id = -1;
  walk_candidates(
      logits, patches, banned,
      [&](int32_t a, int32_t b) {
        if (first_id < 0) first_id = a;
        const float m = lane_max(x + a, static_cast<size_t>(b - a));
        if (m > best) {  // strict: an earlier (lower) id keeps a tie
          int32_t j = a;
          while (!(x[j] == m)) ++j;
          best = m;
          best_id = j;
        }
      },
      [&](int32_t v, float value) {
        if (first_id < 0) first_id = v;
        if (value > best) {
          best = value;
          best_id = v;
        }
      });
  return best_id >= 0 ? best_id : first_id;
}

struct Cand {
  double s;  // scaled (tempered) penalised logit
  double e;  // exp(s - s_max), filled for top-p only
  int32_t id;
};

int32_t sample_tempered(const SampleInput& in, const SamplingConfig& cfg,
                        const std::vector<Patch>& patches, const std::vector<int32_t>& banned) {
  const double temp = static_cast<double>(cfg.temperature);
  std::vector<Cand> cand;
  cand.reserve(in.logits.size() - banned.size());
  int32_t first_id = -1;
  auto add = [&](int32_t v, float x) {
    const double s = static_cast<double>(x) / temp;
    if (!std::isnan(s)) cand.push_back({s, 0.0, v});
  };
  walk_candidates(
      in.logits, patches, banned,
      [&](int32_t a, int32_t b) {
        if (first_id < 0) first_id = a;
        for (int32_t v = a; v < b; ++v) add(v, in.logits[static_cast<size_t>(v)]);
      },
      [&](int32_t v, float x) {
        if (first_id < 0) first_id = v;
        add(v, x);
      });
  if (cand.empty()) return first_id;  // every candidate logit is NaN

  // Highest scaled logit, lowest id on ties (cand is in ascending id order here).
  size_t top = 0;
  for (size_t i = 1; i < cand.size(); ++i)
    if (cand[i].s > cand[top].s) top = i;
  const double s_max = cand[top].s;
  // +inf (or all -inf): every Gumbel key among the maxima is the same infinity, so the draw is
  // the lowest id among them, i.e. this argmax.
  if (!std::isfinite(s_max)) return cand[top].id;

  // min_p: p_v < min_p * p_max  <=>  s_v - s_max < log(min_p).
  if (cfg.min_p > 0.0f) {
    const double thr = std::log(std::min(static_cast<double>(cfg.min_p), 1.0));
    std::erase_if(cand, [&](const Cand& c) { return c.s - s_max < thr; });  // keeps the argmax
  }

  // top_k: the k highest s (ties by lower id), O(n): a bounded heap for small k (one compare
  // rejects most tokens), nth_element otherwise. Ids are re-sorted only when top_p follows (its
  // Z is summed in id order).
  auto by_s = [](const Cand& a, const Cand& b) { return a.s > b.s || (a.s == b.s && a.id < b.id); };
  const bool use_top_p = cfg.top_p < 1.0f;
  if (cfg.top_k > 0 && static_cast<size_t>(cfg.top_k) < cand.size()) {
    const auto k = static_cast<size_t>(cfg.top_k);
    if (k <= 1024) {
      std::vector<Cand> heap(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k));
      std::make_heap(heap.begin(), heap.end(), by_s);  // front: the worst kept
      for (size_t i = k; i < cand.size(); ++i) {
        if (!by_s(cand[i], heap.front())) continue;
        std::pop_heap(heap.begin(), heap.end(), by_s);
        heap.back() = cand[i];
        std::push_heap(heap.begin(), heap.end(), by_s);
      }
      cand.swap(heap);
    } else {
      std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k), cand.end(), by_s);
      cand.resize(k);
    }
    if (use_top_p) std::sort(cand.begin(), cand.end(), [](const Cand& a, const Cand& b) { return a.id < b.id; });
  }

  // top_p on the survivors' renormalised distribution. Z is a sequential sum in id order. The
  // kept prefix is defined by the exact cumulative sum in (p desc, id asc) order, but only the
  // head has to be sorted: a histogram of the p's binary exponents (one pass) tells which
  // power-of-two bands hold the top_p mass; those are partitioned out (one pass) and sorted. If
  // rounding leaves the sorted head just short of the target, the rest is sorted too.
  if (use_top_p && cand.size() > 1) {
    double z = 0.0;
    for (Cand& c : cand) {
      c.e = std::exp(c.s - s_max);  // in [0, 1]; 1 for the argmax
      z += c.e;
    }
    const double target = static_cast<double>(cfg.top_p) * z;
    constexpr int kBands = 2048;  // biased exponent field of a double
    auto band = [](double e) { return static_cast<int>((std::bit_cast<uint64_t>(e) >> 52) & 0x7ff); };
    std::vector<double> band_mass(kBands, 0.0);
    for (const Cand& c : cand) band_mass[static_cast<size_t>(band(c.e))] += c.e;
    int cut = kBands - 1;
    for (double acc = 0.0; cut > 0; --cut) {
      acc += band_mass[static_cast<size_t>(cut)];
      if (acc >= target) break;
    }
    auto by_p = [](const Cand& a, const Cand& b) { return a.e > b.e || (a.e == b.e && a.id < b.id); };
    const auto head_end = cut == 0 ? cand.end()
                                   : std::partition(cand.begin(), cand.end(), [&](const Cand& c) { return band(c.e) >= cut; });
    std::sort(cand.begin(), head_end, by_p);
    const size_t n = cand.size();
    size_t keep = n;  // stays n if rounding leaves cum just short of target: keep all
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (cand.begin() + static_cast<std::ptrdiff_t>(i) == head_end) std::sort(head_end, cand.end(), by_p);
      cum += cand[i].e;
      if (cum >= target) {
        keep = i + 1;
        break;
      }
    }
    cand.resize(keep);
  }
  if (cand.size() == 1) return cand[0].id;

  // Gumbel-max: argmax (s - log(-log U)), ties by lower id. Start from the highest s (a strong
  // incumbent), then skip every token whose key provably stays below the best so far: first
  // without drawing (s + largest possible noise < best), then from the Philox bits alone (bound
  // from the leading zeros of 1 - U), and take the two logs only for the rest. The margin covers
  // rounding in the computed keys, so skipping never changes the result. Philox runs on blocks of
  // kLanes tokens at once (independent multiply chains), the bulk of the cost at full vocabulary.
  size_t inc = 0;
  for (size_t i = 1; i < cand.size(); ++i)
    if (by_s(cand[i], cand[inc])) inc = i;
  auto key_of = [](double s, uint64_t bits) { return s - std::log(-std::log(bits_to_uniform(bits))); };
  int32_t best_id = cand[inc].id;
  double best = key_of(cand[inc].s, philox_bits(cfg.seed, in.position, best_id));
  auto margin = [](double s, double b) { return 1e-6 + 1e-12 * (std::fabs(s) + std::fabs(b)); };

  int32_t lane_id[kLanes];
  uint32_t lane_idx[kLanes];
  uint64_t lane_bits[kLanes];
  const size_t n = cand.size();
  size_t i = 0;
  while (i < n) {
    int lanes = 0;
    for (; i < n && lanes < kLanes; ++i) {
      const Cand& c = cand[i];
      if (i == inc || c.s + kGumbelMax + margin(c.s, best) < best) continue;
      lane_id[lanes] = c.id;
      lane_idx[lanes] = static_cast<uint32_t>(i);
      ++lanes;
    }
    if (lanes == 0) break;
    for (int l = lanes; l < kLanes; ++l) lane_id[l] = 0;  // padding, unused
    philox_bits_lanes(cfg.seed, in.position, lane_id, lane_bits);
    for (int l = 0; l < lanes; ++l) {
      const Cand& c = cand[lane_idx[l]];
      if (c.s + gumbel_upper_bound(lane_bits[l]) + margin(c.s, best) < best) continue;
      const double key = key_of(c.s, lane_bits[l]);
      if (key > best || (key == best && c.id < best_id)) {
        best = key;
        best_id = c.id;
      }
    }
  }
  return best_id;
}

}  // namespace

void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    philox_round(c, k0, k1);
  }
  out[0] = c[0];
  out[1] = c[1];
  out[2] = c[2];
  out[3] = c[3];
}

double philox_uniform(uint64_t seed, int64_t position, int32_t token) {
  return bits_to_uniform(philox_bits(seed, position, token));
}

core::SampledToken sample_token(const SampleInput& in, const SamplingConfig& config) {
  const std::span<const float> logits = in.logits;
  DI_CHECK(!logits.empty(), "sample_token: empty logits row");
  DI_CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), "vocab too large");

  const std::vector<int32_t> banned = banned_ids(in);
  const std::vector<Patch> patches = penalty_patches(in, config);

  core::SampledToken result;
  result.token = config.temperature > 0.0f ? sample_tempered(in, config, patches, banned)
                                           : greedy_token(logits, patches, banned);

  // Raw log_softmax: max-subtracted, sequential double sum in id order.
  const size_t vocab = logits.size();
  const double md = static_cast<double>(lane_max(logits.data(), vocab));
  double log_z = md;
  if (std::isfinite(md)) {
    double sum = 0.0;
    for (size_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - md);
    log_z = md + std::log(sum);
  }
  auto logprob = [&](size_t v) { return static_cast<float>(static_cast<double>(logits[v]) - log_z); };
  result.logprob = logprob(static_cast<size_t>(result.token));

  if (config.num_logprobs > 0) {
    const size_t n = std::min(static_cast<size_t>(config.num_logprobs), vocab);
    // Bounded heap whose front is the worst kept entry; order (logprob desc, id asc).
    auto better = [](const core::TopLogprob& a, const core::TopLogprob& b) {
      return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
    };
    std::vector<core::TopLogprob>& top = result.top;
    top.reserve(n);
    for (size_t v = 0; v < vocab; ++v) {
      const core::TopLogprob e{static_cast<int32_t>(v), logprob(v)};
      if (std::isnan(e.logprob)) continue;  // not rankable
      if (top.size() < n) {
        top.push_back(e);
        std::push_heap(top.begin(), top.end(), better);
      } else if (better(e, top.front())) {
        std::pop_heap(top.begin(), top.end(), better);
        top.back() = e;
        std::push_heap(top.begin(), top.end(), better);
      }
    }
    std::sort_heap(top.begin(), top.end(), better);
  }
  return result;
}

}  // namespace deepinfer::sample
