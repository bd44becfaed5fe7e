// Helpers shared by the model tests: fixture paths, reference tensors, safetensors writing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/dtype.h"
#include "io/safetensors.h"
#include "tensor_util.h"

namespace deepinfer::testing {

inline std::string fixture(const std::string& name) { return std::string(DEEPINFER_FIXTURES_DIR) + "/" + name; }
inline std::string test_data(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/" + name; }

// Reference tensors of an oracle folder: p{i}.input_ids, p{i}.greedy_tokens, p{i}.logits.
struct Reference {
  struct Prompt {
    std::vector<int32_t> input_ids;
    std::vector<int32_t> greedy;
    std::vector<float> logits;  // [T + N - 1, V]
    int64_t vocab = 0;
  };
  std::vector<Prompt> prompts;
};

// Loads `file` (a reference.safetensors). Returns false if it is absent.
inline bool load_reference(const std::string& file, Reference* ref) {
  if (!std::filesystem::exists(file)) return false;
  auto set = io::SafetensorsSet::open_files({file});
  if (!set.is_ok()) return false;
  for (int i = 0;; ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    const auto* ids = set->find(p + "input_ids");
    if (!ids) break;
    Reference::Prompt pr;
    pr.input_ids = to_ids(*ids);
    pr.greedy = to_ids(*set->find(p + "greedy_tokens"));
    const auto* lg = set->find(p + "logits");
    pr.logits = to_floats(*lg);
    pr.vocab = lg->shape[1];
    ref->prompts.push_back(std::move(pr));
  }
  return !ref->prompts.empty();
}

// A safetensors file being assembled in memory (for writing broken checkpoints in tests).
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline std::map<std::string, RawTensor> read_raw(const std::string& file) {
  std::map<std::string, RawTensor> out;
  auto set = io::SafetensorsSet::open_files({file});
  if (!set.is_ok()) return out;
  for (const auto& [name, v] : set->tensors())
    out[name] = RawTensor{io::dtype_name(v.dtype), v.shape, std::vector<uint8_t>(v.data, v.data + v.num_bytes)};
  return out;
}

inline void write_raw(const std::string& file, const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t off = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  const std::string h = header.dump();
  std::ofstream f(file, std::ios::binary);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) f.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

// A byte-level BPE tokenizer.json without merges: ids 0..255 are the 256 bytes (GPT-2's byte to
// unicode map), then the DeepSeek-V4 chat special tokens. Every id fits a tiny model's vocabulary.
inline std::string byte_level_tokenizer_json() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  auto utf8 = [](int cp) {
    std::string o;
    if (cp < 0x80) {
      o += static_cast<char>(cp);
    } else {
      o += static_cast<char>(0xC0 | (cp >> 6));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return o;
  };
  std::vector<std::string> by_byte(256);
  for (size_t i = 0; i < bs.size(); ++i) by_byte[bs[i]] = utf8(cs[i]);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[by_byte[b]] = b;
  const char* specials[] = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                            "<think>", "</think>"};
  nlohmann::json added = nlohmann::json::array();
  int id = 256;
  for (const char* sp : specials) {
    vocab[sp] = id;
    added.push_back({{"id", id++}, {"content", sp}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  return j.dump();
}

}  // namespace deepinfer::testing
