// Byte-level BPE tokenizer from a HuggingFace tokenizer.json, exact against HF `tokenizers`.
//
// Encode pipeline (HF's order):
//   text ─► added tokens that match the raw text (normalized=false) split the text
//        ─► each remaining segment: normalizer ─► added tokens that match normalized text split it
//        ─► pre-tokenizers (Split / ByteLevel / Digits, in sequence) ─► BPE per piece (bytes)
//        ─► post-processor (only with add_special_tokens)
// The BPE runs on raw bytes: the vocabulary's byte-level strings (GPT-2's byte<->char table) are
// turned back into bytes at load, so no per-call character mapping is needed.
#include <algorithm>
#include <array>
#include <climits>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utf8proc.h>

#include "deepinfer/tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

namespace tokenizer {
namespace {

using nlohmann::json;

// GPT-2's reversible byte <-> printable character table.
struct ByteLevelTable {
  std::array<char32_t, 256> byte_to_cp{};
  std::unordered_map<char32_t, uint8_t> cp_to_byte;
  ByteLevelTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteLevelTable& byte_level() {
  static const ByteLevelTable t;
  return t;
}

// Byte-level string (vocab/merges spelling) -> raw bytes. False if a character is not in the table.
bool byte_level_decode(std::string_view s, std::string* out) {
  const auto& t = byte_level();
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    size_t bad;
    bool trunc;
    if (utf8_char_len(s, i, &bad, &trunc) == 0) return false;
    const char32_t cp = utf8_next(s, &i);
    auto it = t.cp_to_byte.find(cp);
    if (it == t.cp_to_byte.end()) return false;
    out->push_back(static_cast<char>(it->second));
  }
  return true;
}

// HF's definition of whitespace for lstrip/rstrip (Rust char::is_whitespace).
bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) ||
         (cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME);
}

// Open-addressing map (pair of token ids) -> (rank, merged id): the BPE inner loop's only lookup.
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Slot());
    mask_ = cap - 1;
  }
  // Keeps the first insertion of a key (the lowest rank).
  void insert(uint64_t key, int32_t rank, int32_t merged) {
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0) {
        slots_[i] = {key, rank, merged};
        return;
      }
      if (slots_[i].key == key) return;
    }
  }
  void prefetch(uint64_t key) const { __builtin_prefetch(&slots_[mix(key) & mask_]); }
  // Returns false if the pair has no merge.
  bool find(uint64_t key, int32_t* rank, int32_t* merged) const {
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.rank < 0) return false;
      if (s.key == key) {
        *rank = s.rank;
        *merged = s.merged;
        return true;
      }
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t rank = -1;  // -1: empty
    int32_t merged = 0;
  };
  static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return x ^ (x >> 33);
  }
  std::vector<Slot> slots_ = std::vector<Slot>(16);
  size_t mask_ = 15;
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// Leftmost-longest matcher over a set of added tokens (a byte trie).
class AddedTokenMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->content.empty()) return;
    int node = 0;
    for (unsigned char c : t->content) {
      auto it = nodes_[node].next.find(c);
      if (it != nodes_[node].next.end()) {
        node = it->second;
        continue;
      }
      const int created = static_cast<int>(nodes_.size());
      nodes_.push_back({});
      nodes_[node].next[c] = created;
      node = created;
    }
    nodes_[node].token = t;
    first_byte_[static_cast<unsigned char>(t->content[0])] = true;
    empty_ = false;
  }
  bool empty() const { return empty_; }

  // Longest token starting at s[i], or null.
  const AddedToken* match_at(std::string_view s, size_t i, size_t* len) const {
    if (!first_byte_[static_cast<unsigned char>(s[i])]) return nullptr;
    int node = 0;
    const AddedToken* best = nullptr;
    for (size_t k = i; k < s.size(); ++k) {
      auto it = nodes_[node].next.find(static_cast<unsigned char>(s[k]));
      if (it == nodes_[node].next.end()) break;
      node = it->second;
      if (nodes_[node].token) {
        best = nodes_[node].token;
        *len = k + 1 - i;
      }
    }
    return best;
  }

 private:
  struct Node {
    std::map<unsigned char, int> next;
    const AddedToken* token = nullptr;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<bool, 256> first_byte_{};
  bool empty_ = true;
};

// One piece of the split text: either an added token or text still to be tokenized.
struct Segment {
  std::string_view text;
  const AddedToken* token = nullptr;
};

// Splits `s` on the matcher's tokens, honouring lstrip/rstrip/single_word.
void split_added(std::string_view s, const AddedTokenMatcher& m, std::vector<Segment>* out) {
  if (m.empty()) {
    if (!s.empty()) out->push_back({s, nullptr});
    return;
  }
  size_t start = 0, i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const AddedToken* t = m.match_at(s, i, &len);
    if (t && t->single_word) {
      bool ok = true;
      if (i > 0) {  // previous character
        size_t p = i - 1;
        while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        size_t q = p;
        ok = !is_word_char(utf8_next(s, &q));
      }
      if (ok && i + len < s.size()) {
        size_t q = i + len;
        ok = !is_word_char(utf8_next(s, &q));
      }
      if (!ok) t = nullptr;
    }
    if (!t) {
      ++i;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
      continue;
    }
    size_t b = i, e = i + len;
    if (t->lstrip) {
      while (b > start) {
        size_t p = b - 1;
        while (p > start && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        size_t q = p;
        if (!is_unicode_whitespace(utf8_next(s, &q))) break;
        b = p;
      }
    }
    if (t->rstrip) {
      while (e < s.size()) {
        size_t q = e;
        if (!is_unicode_whitespace(utf8_next(s, &q))) break;
        e = q;
      }
    }
    if (b > start) out->push_back({s.substr(start, b - start), nullptr});
    out->push_back({s.substr(b, e - b), t});
    start = i = e;
  }
  if (start < s.size()) out->push_back({s.substr(start), nullptr});
}

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kDigits } kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
};

struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip } kind = Kind::kNfc;
  std::unique_ptr<Regex> pattern;  // kReplace
  std::string content;             // kReplace replacement, kPrepend text
  bool strip_left = false, strip_right = false;
};

// Pieces produced by the pre-tokenizers: views into the segment text or into `arena`.
struct Pieces {
  std::vector<std::string_view> views;
  std::list<std::string> arena;  // stable storage for pieces that had to be rewritten
};

void apply_split(const Regex& re, SplitBehavior behavior, bool invert, std::string_view s,
                 std::vector<std::string_view>* out) {
  // (begin, end, is_match) covering s.
  struct Span {
    size_t b, e;
    bool match;
  };
  thread_local std::vector<Span> spans;  // reused: this runs once per piece
  spans.clear();
  size_t prev = 0;
  re.for_each_match(s, [&](size_t b, size_t e) {
    if (b > prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  });
  if (prev < s.size()) spans.push_back({prev, s.size(), false});
  if (invert)
    for (auto& sp : spans) sp.match = !sp.match;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& sp : spans)
        if (!sp.match) out->push_back(s.substr(sp.b, sp.e - sp.b));
      break;
    case SplitBehavior::kIsolated:
      for (const auto& sp : spans) out->push_back(s.substr(sp.b, sp.e - sp.b));
      break;
    case SplitBehavior::kMergedWithPrevious: {
      size_t b = std::string_view::npos, e = 0;
      for (const auto& sp : spans) {
        if (sp.match && b != std::string_view::npos) {
          e = sp.e;
          continue;
        }
        if (b != std::string_view::npos) out->push_back(s.substr(b, e - b));
        b = sp.b;
        e = sp.e;
      }
      if (b != std::string_view::npos) out->push_back(s.substr(b, e - b));
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      size_t b = std::string_view::npos;
      for (const auto& sp : spans) {
        if (b == std::string_view::npos) b = sp.b;
        if (sp.match) continue;  // wait for the next piece
        out->push_back(s.substr(b, sp.e - b));
        b = std::string_view::npos;
      }
      if (b != std::string_view::npos) out->push_back(s.substr(b));
      break;
    }
    case SplitBehavior::kContiguous: {
      size_t b = std::string_view::npos, e = 0;
      bool in_match = false;
      for (const auto& sp : spans) {
        if (sp.match && in_match) {
          e = sp.e;
          continue;
        }
        if (b != std::string_view::npos) out->push_back(s.substr(b, e - b));
        b = sp.b;
        e = sp.e;
        in_match = sp.match;
      }
      if (b != std::string_view::npos) out->push_back(s.substr(b, e - b));
      break;
    }
  }
}

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Optional typed fields of a tokenizer.json object: missing or null gives `def`; any other type is
// an error naming the field (nlohmann's value() would throw instead).
Status opt_bool(const json& obj, const char* key, bool def, const std::string& where, bool* out) {
  *out = def;
  if (!obj.contains(key) || obj[key].is_null()) return Status::ok();
  if (!obj[key].is_boolean()) return Status::invalid_argument(where + ": '" + key + "' must be true or false");
  *out = obj[key].get<bool>();
  return Status::ok();
}
Status opt_string(const json& obj, const char* key, const std::string& def, const std::string& where, std::string* out) {
  *out = def;
  if (!obj.contains(key) || obj[key].is_null()) return Status::ok();
  if (!obj[key].is_string()) return Status::invalid_argument(where + ": '" + key + "' must be a string");
  *out = obj[key].get<std::string>();
  return Status::ok();
}

// The `pattern` of a Split pre-tokenizer or Replace normalizer: {"String": literal} or {"Regex": re}.
Result<std::unique_ptr<Regex>> compile_pattern(const json& obj, const std::string& where) {
  const json& p = obj.contains("pattern") ? obj["pattern"] : json();
  if (p.is_object() && p.contains("String") && p["String"].is_string())
    return Regex::compile(Regex::escape(p["String"].get<std::string>()), where);
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) return Regex::compile(p["Regex"].get<std::string>(), where);
  return Status::invalid_argument(where + " needs pattern {String|Regex}");
}

std::atomic<uint64_t> g_tokenizer_serial{1};

struct PostProcessor {
  std::vector<int32_t> prefix, suffix;  // ids around the sequence (single-sequence templates)
};

class BpeTokenizer final : public Tokenizer {
 public:
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const override;
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  Result<std::string> token_bytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size_ || !has_id_[id])
      return Status::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                      std::to_string(vocab_size_) + ")");
    return id_bytes_[id];
  }
  bool is_special(int32_t id) const override { return id >= 0 && id < vocab_size_ && special_[id]; }
  int vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (const auto& t : added_)
      if (t.content == token) return t.id;
    if (auto lit = literal_vocab_.find(std::string(token)); lit != literal_vocab_.end()) return lit->second;
    std::string bytes;
    if (byte_level_decode(token, &bytes)) {
      auto it = vocab_.find(bytes);
      if (it != vocab_.end()) return it->second;
    }
    return std::nullopt;
  }
  std::optional<int32_t> bos_token_id() const override { return bos_; }
  std::optional<int32_t> eos_token_id() const override { return eos_; }
  bool add_bos_token() const override { return add_bos_; }

  Status load(const json& j, const json* cfg, const std::string& src);

 private:
  Status load_model(const json& m, const std::string& src);
  Status load_normalizer(const json& n, const std::string& src);
  Status load_pre_tokenizer(const json& p, const std::string& src);
  Status load_post_processor(const json& p, const std::string& src);
  Status check_decoder(const json& d, const std::string& src);
  void normalize(std::string_view in, std::string* out) const;
  void pre_tokenize(std::string_view s, Pieces* pieces) const;
  // `hash` is hash_bytes(piece) (computed ahead so the cache slot can be prefetched).
  void bpe(std::string_view piece, uint64_t hash, std::vector<int32_t>* out) const;
  struct BpeCache& bpe_cache() const;
  void bpe_uncached(std::string_view piece, std::vector<int32_t>* out) const;
  static constexpr int kSmallPiece = 96;
  void bpe_small(std::string_view piece, std::vector<int32_t>* out) const;

  std::unordered_map<std::string, int32_t> vocab_;        // raw bytes -> id
  std::unordered_map<std::string, int32_t> literal_vocab_;  // vocab entries not in byte-level spelling
  MergeTable merges_;  // (left id, right id) -> (rank, merged id)
  std::array<int32_t, 256> byte_id_{};                     // id of each single byte (-1 if absent)
  std::optional<int32_t> unk_;
  bool ignore_merges_ = false;

  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::vector<NormalizerStep> normalizers_;
  std::vector<PreTokenizerStep> pre_tokenizers_;
  PostProcessor post_;

  int32_t vocab_size_ = 0;
  std::vector<std::string> id_bytes_;  // decoder output of each id
  std::vector<bool> has_id_, special_;
  std::optional<int32_t> bos_, eos_;
  bool add_bos_ = false;

  // Distinguishes tokenizers that reuse a freed one's address, for the per-thread BPE cache.
  const uint64_t serial_ = g_tokenizer_serial.fetch_add(1);
};

Status BpeTokenizer::load_model(const json& m, const std::string& src) {
  if (!m.is_object()) return Status::invalid_argument(src + ": 'model' must be an object");
  std::string type;
  DI_RETURN_IF_ERROR(opt_string(m, "type", "BPE", src + ": model", &type));
  if (type != "BPE")
    return Status::unsupported(src + ": model type '" + type + "' is not supported (only byte-level BPE)");
  // Set = present and not null/false/"" (an empty prefix or suffix changes nothing).
  auto truthy = [&](const char* k) {
    if (!m.contains(k) || m[k].is_null()) return false;
    if (m[k].is_boolean()) return m[k].get<bool>();
    if (m[k].is_string()) return !m[k].get<std::string>().empty();
    return true;
  };
  if (truthy("dropout") && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    return Status::unsupported(src + ": model.dropout is not supported");
  if (truthy("continuing_subword_prefix") || truthy("end_of_word_suffix"))
    return Status::unsupported(src + ": model.continuing_subword_prefix / end_of_word_suffix are not supported");
  if (truthy("byte_fallback")) return Status::unsupported(src + ": model.byte_fallback is not supported");
  ignore_merges_ = m.contains("ignore_merges") && m["ignore_merges"].is_boolean() && m["ignore_merges"].get<bool>();
  if (!m.contains("vocab") || !m["vocab"].is_object()) return Status::invalid_argument(src + ": model.vocab must be an object");
  std::string bytes;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > (1 << 26))
      return Status::invalid_argument(src + ": model.vocab['" + it.key() + "'] must be a non-negative integer id");
    const int32_t id = static_cast<int32_t>(it.value().get<int64_t>());
    vocab_size_ = std::max(vocab_size_, id + 1);
    // Entries outside the byte-level alphabet (special tokens listed in the vocab) can never come
    // out of merges; they only decode, to their own text (the ByteLevel decoder's fallback).
    if (byte_level_decode(it.key(), &bytes)) vocab_.emplace(bytes, id);
    else literal_vocab_.emplace(it.key(), id);
  }
  byte_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it != vocab_.end()) byte_id_[b] = it->second;
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    std::string u;
    if (byte_level_decode(m["unk_token"].get<std::string>(), &u) && vocab_.count(u)) unk_ = vocab_[u];
  }
  if (!m.contains("merges") || !m["merges"].is_array()) return Status::invalid_argument(src + ": model.merges must be an array");
  int32_t rank = 0;
  std::string a, b;
  merges_.reserve(m["merges"].size());
  for (const json& mg : m["merges"]) {
    std::string left, right;
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return Status::invalid_argument(src + ": merge " + std::to_string(rank) + " '" + s + "' is not two tokens");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      left = mg[0].get<std::string>();
      right = mg[1].get<std::string>();
    } else {
      return Status::invalid_argument(src + ": merge " + std::to_string(rank) + " must be \"a b\" or [a, b]");
    }
    if (!byte_level_decode(left, &a) || !byte_level_decode(right, &b))
      return Status::unsupported(src + ": merge " + std::to_string(rank) + " is not byte-level encoded");
    auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
      return Status::invalid_argument(src + ": merge " + std::to_string(rank) + " ('" + left + "', '" + right +
                                      "') refers to tokens missing from the vocabulary");
    merges_.insert(pair_key(ia->second, ib->second), rank, iab->second);  // first (lowest) rank wins
    ++rank;
  }
  return Status::ok();
}

Status BpeTokenizer::load_normalizer(const json& n, const std::string& src) {
  if (n.is_null()) return Status::ok();
  if (!n.is_object() || !n.contains("type") || !n["type"].is_string())
    return Status::invalid_argument(src + ": normalizer must be an object with a type");
  const std::string t = n["type"].get<std::string>();
  NormalizerStep s;
  if (t == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array())
      return Status::invalid_argument(src + ": Sequence normalizer needs 'normalizers'");
    for (const json& c : n["normalizers"]) DI_RETURN_IF_ERROR(load_normalizer(c, src));
    return Status::ok();
  }
  if (t == "NFC") s.kind = NormalizerStep::Kind::kNfc;
  else if (t == "NFD") s.kind = NormalizerStep::Kind::kNfd;
  else if (t == "NFKC") s.kind = NormalizerStep::Kind::kNfkc;
  else if (t == "NFKD") s.kind = NormalizerStep::Kind::kNfkd;
  else if (t == "Lowercase") s.kind = NormalizerStep::Kind::kLowercase;
  else if (t == "Prepend") {
    s.kind = NormalizerStep::Kind::kPrepend;
    DI_RETURN_IF_ERROR(opt_string(n, "prepend", "", src + ": Prepend normalizer", &s.content));
  } else if (t == "Strip") {
    s.kind = NormalizerStep::Kind::kStrip;
    DI_RETURN_IF_ERROR(opt_bool(n, "strip_left", false, src + ": Strip normalizer", &s.strip_left));
    DI_RETURN_IF_ERROR(opt_bool(n, "strip_right", false, src + ": Strip normalizer", &s.strip_right));
  } else if (t == "Replace") {
    s.kind = NormalizerStep::Kind::kReplace;
    DI_ASSIGN_OR_RETURN(s.pattern, compile_pattern(n, src + ": Replace normalizer"));
    DI_RETURN_IF_ERROR(opt_string(n, "content", "", src + ": Replace normalizer", &s.content));
  } else {
    return Status::unsupported(src + ": normalizer type '" + t + "' is not supported");
  }
  normalizers_.push_back(std::move(s));
  return Status::ok();
}

Status BpeTokenizer::load_pre_tokenizer(const json& p, const std::string& src) {
  if (p.is_null()) return Status::ok();
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
    return Status::invalid_argument(src + ": pre_tokenizer must be an object with a type");
  const std::string t = p["type"].get<std::string>();
  if (t == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      return Status::invalid_argument(src + ": Sequence pre_tokenizer needs 'pretokenizers'");
    for (const json& c : p["pretokenizers"]) DI_RETURN_IF_ERROR(load_pre_tokenizer(c, src));
    return Status::ok();
  }
  PreTokenizerStep s;
  if (t == "Split") {
    s.kind = PreTokenizerStep::Kind::kSplit;
    const std::string where = src + ": Split pre_tokenizer";
    DI_ASSIGN_OR_RETURN(s.regex, compile_pattern(p, where));
    std::string b;
    DI_RETURN_IF_ERROR(opt_string(p, "behavior", "Isolated", where, &b));
    if (b == "Removed") s.behavior = SplitBehavior::kRemoved;
    else if (b == "Isolated") s.behavior = SplitBehavior::kIsolated;
    else if (b == "MergedWithPrevious") s.behavior = SplitBehavior::kMergedWithPrevious;
    else if (b == "MergedWithNext") s.behavior = SplitBehavior::kMergedWithNext;
    else if (b == "Contiguous") s.behavior = SplitBehavior::kContiguous;
    else return Status::unsupported(src + ": Split behavior '" + b + "' is not supported");
    DI_RETURN_IF_ERROR(opt_bool(p, "invert", false, where, &s.invert));
  } else if (t == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::kByteLevel;
    bool use_regex = true;
    DI_RETURN_IF_ERROR(opt_bool(p, "add_prefix_space", false, src + ": ByteLevel pre_tokenizer", &s.add_prefix_space));
    DI_RETURN_IF_ERROR(opt_bool(p, "use_regex", true, src + ": ByteLevel pre_tokenizer", &use_regex));
    if (use_regex) {
      DI_ASSIGN_OR_RETURN(s.regex, Regex::compile(kGpt2Pattern, src + ": ByteLevel"));
    }
  } else if (t == "Digits") {
    s.kind = PreTokenizerStep::Kind::kDigits;
    DI_ASSIGN_OR_RETURN(s.regex, Regex::compile("\\p{N}", src + ": Digits"));
    bool individual = false;
    DI_RETURN_IF_ERROR(opt_bool(p, "individual_digits", false, src + ": Digits pre_tokenizer", &individual));
    s.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else {
    return Status::unsupported(src + ": pre_tokenizer type '" + t + "' is not supported");
  }
  pre_tokenizers_.push_back(std::move(s));
  return Status::ok();
}

Status BpeTokenizer::load_post_processor(const json& p, const std::string& src) {
  if (p.is_null()) return Status::ok();
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
    return Status::invalid_argument(src + ": post_processor must be an object with a type");
  const std::string t = p["type"].get<std::string>();
  if (t == "ByteLevel") return Status::ok();  // offsets only
  if (t == "Sequence") {
    if (!p.contains("processors") || !p["processors"].is_array())
      return Status::invalid_argument(src + ": Sequence post_processor needs 'processors'");
    for (const json& c : p["processors"]) DI_RETURN_IF_ERROR(load_post_processor(c, src));
    return Status::ok();
  }
  if (t == "TemplateProcessing") {
    if (!p.contains("single") || !p["single"].is_array()) return Status::invalid_argument(src + ": TemplateProcessing needs 'single'");
    const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
    bool seen_sequence = false;
    for (const json& piece : p["single"]) {
      if (piece.is_object() && piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object() ||
          !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string())
        return Status::invalid_argument(src + ": TemplateProcessing piece must be Sequence or SpecialToken");
      const std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (!specials.is_object() || !specials.contains(name) || !specials[name].is_object() ||
          !specials[name].contains("ids") || !specials[name]["ids"].is_array())
        return Status::invalid_argument(src + ": TemplateProcessing special token '" + name + "' has no ids");
      for (const json& id : specials[name]["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 26))
          return Status::invalid_argument(src + ": TemplateProcessing special token '" + name + "' has a bad id");
        (seen_sequence ? post_.suffix : post_.prefix).push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    }
    return Status::ok();
  }
  if (t == "RobertaProcessing" || t == "BertProcessing") {
    auto id_of = [&](const char* k) -> std::optional<int32_t> {
      if (p.contains(k) && p[k].is_array() && p[k].size() == 2 && p[k][1].is_number_integer()) return p[k][1].get<int32_t>();
      return std::nullopt;
    };
    auto cls = id_of("cls"), sep = id_of("sep");
    if (!cls || !sep) return Status::invalid_argument(src + ": " + t + " needs cls and sep");
    post_.prefix.push_back(*cls);
    post_.suffix.push_back(*sep);
    return Status::ok();
  }
  return Status::unsupported(src + ": post_processor type '" + t + "' is not supported");
}

Status BpeTokenizer::check_decoder(const json& d, const std::string& src) {
  if (d.is_null()) return Status::unsupported(src + ": a tokenizer without a decoder is not supported (need ByteLevel)");
  std::string t;
  if (d.is_object()) DI_RETURN_IF_ERROR(opt_string(d, "type", "", src + ": decoder", &t));
  if (t == "ByteLevel") return Status::ok();
  if (t == "Sequence" && d.contains("decoders") && d["decoders"].is_array()) {
    bool byte_level_seen = false;
    for (const json& c : d["decoders"]) {
      std::string ct;
      if (c.is_object()) DI_RETURN_IF_ERROR(opt_string(c, "type", "", src + ": decoder", &ct));
      if (ct == "ByteLevel") byte_level_seen = true;
      else return Status::unsupported(src + ": decoder '" + ct + "' inside Sequence is not supported");
    }
    if (byte_level_seen) return Status::ok();
  }
  return Status::unsupported(src + ": decoder type '" + t + "' is not supported (need ByteLevel)");
}

Status BpeTokenizer::load(const json& j, const json* cfg, const std::string& src) {
  if (!j.is_object()) return Status::invalid_argument(src + ": top level must be a JSON object");
  if (!j.contains("model")) return Status::invalid_argument(src + ": missing 'model'");
  DI_RETURN_IF_ERROR(load_model(j["model"], src));
  DI_RETURN_IF_ERROR(load_normalizer(j.contains("normalizer") ? j["normalizer"] : json(), src));
  DI_RETURN_IF_ERROR(load_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), src));
  DI_RETURN_IF_ERROR(load_post_processor(j.contains("post_processor") ? j["post_processor"] : json(), src));
  DI_RETURN_IF_ERROR(check_decoder(j.contains("decoder") ? j["decoder"] : json(), src));
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) return Status::invalid_argument(src + ": 'added_tokens' must be an array");
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string() || a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > (1 << 26))
        return Status::invalid_argument(src + ": every added token needs an integer 'id' and a string 'content'");
      AddedToken t;
      t.id = a["id"].get<int32_t>();
      t.content = a["content"].get<std::string>();
      if (utf8_first_invalid(t.content) != std::string::npos)
        return Status::invalid_argument(src + ": added token " + std::to_string(t.id) + " is not valid UTF-8");
      const std::string where = src + ": added token " + std::to_string(t.id);
      DI_RETURN_IF_ERROR(opt_bool(a, "special", false, where, &t.special));
      DI_RETURN_IF_ERROR(opt_bool(a, "lstrip", false, where, &t.lstrip));
      DI_RETURN_IF_ERROR(opt_bool(a, "rstrip", false, where, &t.rstrip));
      DI_RETURN_IF_ERROR(opt_bool(a, "single_word", false, where, &t.single_word));
      DI_RETURN_IF_ERROR(opt_bool(a, "normalized", !t.special, where, &t.normalized));
      added_.push_back(std::move(t));
      vocab_size_ = std::max(vocab_size_, added_.back().id + 1);
    }
  }
  for (const auto& t : added_) (t.normalized && !normalizers_.empty() ? normalized_matcher_ : raw_matcher_).add(&t);
  // Decoder output of every id (ByteLevel decoder: a token whose characters all belong to the
  // byte-level table decodes to those bytes, any other token to its own UTF-8).
  id_bytes_.assign(vocab_size_, std::string());
  has_id_.assign(vocab_size_, false);
  special_.assign(vocab_size_, false);
  for (const auto& [bytes, id] : vocab_) {
    id_bytes_[id] = bytes;
    has_id_[id] = true;
  }
  for (const auto& [text, id] : literal_vocab_) {
    id_bytes_[id] = text;
    has_id_[id] = true;
  }
  for (const auto& t : added_) {
    std::string b;
    id_bytes_[t.id] = byte_level_decode(t.content, &b) ? b : t.content;
    has_id_[t.id] = true;
    special_[t.id] = t.special;
  }
  // tokenizer_config.json: BOS/EOS and whether prompts start with BOS.
  if (cfg && cfg->is_object()) {
    auto token_of = [&](const char* key) -> std::optional<int32_t> {
      if (!cfg->contains(key)) return std::nullopt;
      const json& v = (*cfg)[key];
      std::string content;
      if (v.is_string()) content = v.get<std::string>();
      else if (v.is_object() && v.contains("content") && v["content"].is_string()) content = v["content"].get<std::string>();
      else return std::nullopt;
      return token_to_id(content);
    };
    bos_ = token_of("bos_token");
    eos_ = token_of("eos_token");
    add_bos_ = cfg->contains("add_bos_token") && (*cfg)["add_bos_token"].is_boolean() && (*cfg)["add_bos_token"].get<bool>();
  }
  return Status::ok();
}

void BpeTokenizer::normalize(std::string_view in, std::string* out) const {
  out->assign(in);
  for (const auto& n : normalizers_) {
    switch (n.kind) {
      case NormalizerStep::Kind::kNfc:
      case NormalizerStep::Kind::kNfd:
      case NormalizerStep::Kind::kNfkc:
      case NormalizerStep::Kind::kNfkd: {
        int opts = UTF8PROC_STABLE;
        if (n.kind == NormalizerStep::Kind::kNfc) opts |= UTF8PROC_COMPOSE;
        if (n.kind == NormalizerStep::Kind::kNfd) opts |= UTF8PROC_DECOMPOSE;
        if (n.kind == NormalizerStep::Kind::kNfkc) opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        if (n.kind == NormalizerStep::Kind::kNfkd) opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        // ASCII is invariant under every normalization form: skip the library call.
        if (std::all_of(out->begin(), out->end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) break;
        utf8proc_uint8_t* res = nullptr;
        const auto len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(out->data()),
                                      static_cast<utf8proc_ssize_t>(out->size()), &res, static_cast<utf8proc_option_t>(opts));
        if (len >= 0) out->assign(reinterpret_cast<char*>(res), static_cast<size_t>(len));
        std::free(res);
        break;
      }
      case NormalizerStep::Kind::kLowercase: {
        std::string lower;
        size_t i = 0;
        while (i < out->size()) utf8_append(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(utf8_next(*out, &i)))), &lower);
        *out = std::move(lower);
        break;
      }
      case NormalizerStep::Kind::kReplace: {
        std::string r;
        size_t prev = 0;
        n.pattern->for_each_match(*out, [&](size_t b, size_t e) {
          r.append(*out, prev, b - prev);
          r.append(n.content);
          prev = e;
        });
        r.append(*out, prev, std::string::npos);
        *out = std::move(r);
        break;
      }
      case NormalizerStep::Kind::kPrepend:
        if (!out->empty()) out->insert(0, n.content);
        break;
      case NormalizerStep::Kind::kStrip: {
        size_t b = 0, e = out->size();
        while (n.strip_left && b < e) {
          size_t q = b;
          if (!is_unicode_whitespace(utf8_next(*out, &q))) break;
          b = q;
        }
        while (n.strip_right && e > b) {
          size_t p = e - 1;
          while (p > b && (static_cast<unsigned char>((*out)[p]) & 0xC0) == 0x80) --p;
          size_t q = p;
          if (!is_unicode_whitespace(utf8_next(*out, &q))) break;
          e = p;
        }
        *out = out->substr(b, e - b);
        break;
      }
    }
  }
}

void BpeTokenizer::pre_tokenize(std::string_view s, Pieces* pieces) const {
  pieces->views.assign(1, s);
  thread_local std::vector<std::string_view> next;
  for (const auto& step : pre_tokenizers_) {
    next.clear();
    for (std::string_view piece : pieces->views) {
      if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
        if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
          pieces->arena.push_back(" " + std::string(piece));
          piece = pieces->arena.back();
        }
        if (step.regex) apply_split(*step.regex, SplitBehavior::kIsolated, false, piece, &next);
        else next.push_back(piece);
      } else {
        apply_split(*step.regex, step.behavior, step.invert, piece, &next);
      }
    }
    pieces->views.swap(next);
  }
}

// Short pieces (nearly all of them): the same merge order as the heap version below, with the
// rank of every adjacent pair kept in an array; each step merges the leftmost lowest-ranked pair
// and looks up only the two pairs it changed. No allocation.
void BpeTokenizer::bpe_small(std::string_view piece, std::vector<int32_t>* out) const {
  const int n = static_cast<int>(piece.size());
  int32_t id[kSmallPiece];
  int32_t rank[kSmallPiece];    // rank[i]: rank of the pair (id[i], id[i+1]); INT32_MAX: none
  int32_t merged[kSmallPiece];  // its merged id
  int m = n;
  for (int i = 0; i < n; ++i) id[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  for (int i = 0; i + 1 < n; ++i) merges_.prefetch(pair_key(id[i], id[i + 1]));  // independent lookups: overlap them
  auto lookup = [&](int i) {
    rank[i] = INT32_MAX;
    if (id[i] >= 0 && id[i + 1] >= 0) merges_.find(pair_key(id[i], id[i + 1]), &rank[i], &merged[i]);
  };
  for (int i = 0; i + 1 < m; ++i) lookup(i);
  while (m > 1) {
    int best = -1;
    int32_t best_rank = INT32_MAX;
    for (int i = 0; i + 1 < m; ++i)
      if (rank[i] < best_rank) best_rank = rank[i], best = i;
    if (best < 0) break;
    id[best] = merged[best];
    for (int i = best + 1; i + 1 < m; ++i) {  // close the gap
      id[i] = id[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --m;
    if (best > 0) lookup(best - 1);
    if (best + 1 < m) lookup(best);
  }
  for (int i = 0; i < m; ++i) {
    if (id[i] >= 0) out->push_back(id[i]);
    else if (unk_) out->push_back(*unk_);
  }
}

void BpeTokenizer::bpe_uncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const int n = static_cast<int>(piece.size());
  if (n <= kSmallPiece) {
    bpe_small(piece, out);
    return;
  }
  // Symbols: a doubly linked list over the piece's bytes, merged lowest rank first (leftmost on
  // ties), exactly as HF's BPE::merge_word.
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> sym;
  sym.reserve(n);
  for (int i = 0; i < n; ++i) {
    const int32_t id = byte_id_[static_cast<unsigned char>(piece[i])];
    sym.push_back({id, i - 1, i + 1 < n ? i + 1 : -1, true});
  }
  struct Cand {
    int32_t rank;
    int pos;        // left symbol
    int32_t right;  // right symbol's id when queued (to detect staleness)
    int32_t left;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto push = [&](int i) {
    const int j = sym[i].next;
    if (j < 0 || sym[i].id < 0 || sym[j].id < 0) return;
    int32_t rank = 0, merged = 0;
    if (merges_.find(pair_key(sym[i].id, sym[j].id), &rank, &merged)) q.push({rank, i, sym[j].id, sym[i].id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    Sym& L = sym[c.pos];
    if (!L.alive || L.id != c.left || L.next < 0 || sym[L.next].id != c.right) continue;  // stale
    const int r = L.next;
    int32_t rank = 0, merged = 0;
    merges_.find(pair_key(L.id, sym[r].id), &rank, &merged);
    L.id = merged;
    sym[r].alive = false;
    L.next = sym[r].next;
    if (L.next >= 0) sym[L.next].prev = c.pos;
    if (L.prev >= 0) push(L.prev);
    push(c.pos);
  }
  for (int i = 0; i >= 0 && i < n; i = sym[i].next) {
    if (sym[i].id >= 0) out->push_back(sym[i].id);
    else if (unk_) out->push_back(*unk_);
  }
}

// Per-thread cache of BPE results for short pieces (text reuses few distinct words: 12 MB of mixed
// text has ~90 K distinct pieces). Open addressing with linear probing, so every piece that fits
// stays until the table fills; then it is cleared. No locks: each thread owns its cache, reset
// when the thread switches to another tokenizer.
struct BpeCache {
  static constexpr size_t kSlots = 1 << 18;
  static constexpr size_t kMaxFill = kSlots / 2;
  static constexpr size_t kMaxKey = 22, kMaxIds = 8;
  struct Slot {
    uint64_t hash = 0;
    uint8_t key_len = 0xff;  // 0xff: empty
    uint8_t num_ids = 0;
    char key[kMaxKey];
    int32_t ids[kMaxIds];
  };
  const void* owner = nullptr;
  uint64_t owner_serial = 0;
  std::vector<Slot> slots;
  size_t used = 0;
  // Longer pieces (CJK runs, long identifiers, punctuation lines) are fewer but costly to merge.
  static constexpr size_t kMaxLongKey = 512, kMaxLongEntries = 1 << 16;
  std::unordered_map<std::string, std::vector<int32_t>> long_pieces;
};

uint64_t hash_bytes(std::string_view s) {  // 8 bytes per step, multiply-xorshift mixing
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

BpeCache& BpeTokenizer::bpe_cache() const {
  thread_local BpeCache cache;
  if (cache.owner != this || cache.owner_serial != serial_) {
    cache.owner = this;
    cache.owner_serial = serial_;
    cache.slots.assign(BpeCache::kSlots, BpeCache::Slot());
    cache.used = 0;
    cache.long_pieces.clear();
  }
  return cache;
}

void BpeTokenizer::bpe(std::string_view piece, uint64_t h, std::vector<int32_t>* out) const {
  BpeCache& cache = bpe_cache();
  if (piece.size() > BpeCache::kMaxKey) {
    if (piece.size() > BpeCache::kMaxLongKey) {
      bpe_uncached(piece, out);
      return;
    }
    std::string key(piece);
    auto it = cache.long_pieces.find(key);
    if (it != cache.long_pieces.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
    const size_t start = out->size();
    bpe_uncached(piece, out);
    if (cache.long_pieces.size() >= BpeCache::kMaxLongEntries) cache.long_pieces.clear();
    cache.long_pieces.emplace(std::move(key), std::vector<int32_t>(out->begin() + static_cast<long>(start), out->end()));
    return;
  }
  constexpr size_t mask = BpeCache::kSlots - 1;
  size_t i = h & mask;
  for (;; i = (i + 1) & mask) {
    const BpeCache::Slot& slot = cache.slots[i];
    if (slot.key_len == 0xff) break;  // not cached
    if (slot.hash == h && slot.key_len == piece.size() && std::memcmp(slot.key, piece.data(), piece.size()) == 0) {
      out->insert(out->end(), slot.ids, slot.ids + slot.num_ids);
      return;
    }
  }
  const size_t start = out->size();
  bpe_uncached(piece, out);
  const size_t n = out->size() - start;
  if (n > BpeCache::kMaxIds) return;
  if (cache.used >= BpeCache::kMaxFill) {  // full: start over (the hot pieces come back at once)
    for (auto& sl : cache.slots) sl.key_len = 0xff;
    cache.used = 0;
    i = h & mask;
  }
  BpeCache::Slot& slot = cache.slots[i];
  slot.hash = h;
  slot.key_len = static_cast<uint8_t>(piece.size());
  std::memcpy(slot.key, piece.data(), piece.size());
  slot.num_ids = static_cast<uint8_t>(n);
  std::copy(out->begin() + static_cast<long>(start), out->end(), slot.ids);
  ++cache.used;
}

Result<std::vector<int32_t>> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const size_t bad = utf8_first_invalid(text); bad != std::string_view::npos)
    return Status::invalid_argument("text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = post_.prefix;
  std::vector<Segment> raw, norm;
  split_added(text, raw_matcher_, &raw);
  std::string normalized;
  Pieces pieces;
  for (const Segment& seg : raw) {
    if (seg.token) {
      ids.push_back(seg.token->id);
      continue;
    }
    std::string_view body = seg.text;
    if (!normalizers_.empty()) {
      normalize(seg.text, &normalized);
      body = normalized;
    }
    norm.clear();
    split_added(body, normalized_matcher_, &norm);
    for (const Segment& s2 : norm) {
      if (s2.token) {
        ids.push_back(s2.token->id);
        continue;
      }
      pieces.arena.clear();
      pre_tokenize(s2.text, &pieces);
      // Hash every piece and prefetch its cache slot first: the lookups then overlap their
      // memory latency instead of paying it one after another.
      thread_local std::vector<uint64_t> hashes;
      hashes.resize(pieces.views.size());
      const BpeCache& cache = bpe_cache();
      for (size_t k = 0; k < pieces.views.size(); ++k) {
        hashes[k] = hash_bytes(pieces.views[k]);
        __builtin_prefetch(&cache.slots[hashes[k] & (BpeCache::kSlots - 1)]);
      }
      for (size_t k = 0; k < pieces.views.size(); ++k)
        if (!pieces.views[k].empty()) bpe(pieces.views[k], hashes[k], &ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), post_.suffix.begin(), post_.suffix.end());
  return ids;
}

Result<std::string> BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_ || !has_id_[id])
      return Status::invalid_argument("token id " + std::to_string(id) + " at index " + std::to_string(i) +
                                      " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
    if (skip_special_tokens && special_[id]) continue;
    bytes += id_bytes_[id];
  }
  return utf8_lossy(bytes);
}

}  // namespace
}  // namespace tokenizer

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                                                       const std::string& source) {
  using nlohmann::json;
  json j = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalid_argument(source + ": not valid JSON");
  json cfg;
  if (!config_json.empty()) {
    cfg = json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (cfg.is_discarded()) return Status::invalid_argument(source + ": tokenizer_config.json is not valid JSON");
  }
  auto t = std::make_unique<tokenizer::BpeTokenizer>();
  DI_RETURN_IF_ERROR(t->load(j, config_json.empty() ? nullptr : &cfg, source));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::string& path) {
  auto read = [](const std::string& p, std::string* out) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return true;
  };
  std::string text, cfg;
  if (!read(path, &text)) return Status::not_found("cannot read tokenizer file " + path);
  const auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path) && !read(cfg_path.string(), &cfg))
    return Status::io_error("cannot read " + cfg_path.string());
  return from_json(text, cfg, path);
}

}  // namespace deepinfer
