// Byte-level BPE against HuggingFace `tokenizers`: every line of the DeepSeek-V3 reference (ids
// and decoded string), round trips, streaming == whole decoding, other tokenizers' goldens, errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "deepinfer/tokenizer.h"

namespace deepinfer {
namespace {

using nlohmann::json;

std::string fixture(const std::string& rel) { return std::string(DEEPINFER_FIXTURES_DIR) + "/" + rel; }

const Tokenizer& deepseek() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto t = Tokenizer::from_file(fixture("tokenizer/deepseek-v3/tokenizer.json"));
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return t.is_ok() ? std::move(t).value() : nullptr;
  }();
  return *tok;
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// Decodes token by token through the streaming detokenizer.
std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  Detokenizer d(tok);
  std::string out;
  for (int32_t id : ids) {
    auto piece = d.add(id);
    EXPECT_TRUE(piece.is_ok());
    // Only complete UTF-8 is ever emitted.
    out += piece.value();
  }
  return out + d.finish();
}

TEST(DeepSeekTokenizer, ReferenceIdsAndDecodedExact) {
  const auto lines = read_jsonl(fixture("tokenizer/deepseek-v3/reference.jsonl"));
  ASSERT_EQ(lines.size(), 420u);
  int mismatched = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string text = lines[i]["text"].get<std::string>();
    const auto want = lines[i]["ids"].get<std::vector<int32_t>>();
    auto got = deepseek().encode(text);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    if (got.value() != want && ++mismatched <= 5) ADD_FAILURE() << "line " << i << ": " << lines[i]["text"].dump();
    auto dec = deepseek().decode(want);
    ASSERT_TRUE(dec.is_ok());
    EXPECT_EQ(dec.value(), lines[i]["decoded"].get<std::string>()) << "line " << i;
  }
  EXPECT_EQ(mismatched, 0);
}

TEST(DeepSeekTokenizer, RoundTripAndStreamingEqualWholeDecoding) {
  for (const auto& line : read_jsonl(fixture("tokenizer/corpus.jsonl"))) {
    const std::string text = line["text"].get<std::string>();
    auto ids = deepseek().encode(text);
    ASSERT_TRUE(ids.is_ok());
    auto dec = deepseek().decode(ids.value());
    ASSERT_TRUE(dec.is_ok());
    EXPECT_EQ(dec.value(), text);
    EXPECT_EQ(stream_decode(deepseek(), ids.value()), dec.value());
  }
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// A small byte-level BPE built in the test: the 256 byte tokens (GPT-2 spelling), merges for
// "h e" -> "he", "he l" -> "hel", "l o" -> "lo", "hel lo" -> "hello", and added tokens.
json tiny_tokenizer_json() {
  std::vector<char32_t> cps(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    cps[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
  }
  auto spell = [&](const std::string& bytes) {
    std::string out;
    for (unsigned char c : bytes) {
      const char32_t cp = cps[c];
      if (cp < 0x80) out += static_cast<char>(cp);
      else {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    return out;
  };
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  vocab["hel"] = 257;
  vocab["lo"] = 258;
  vocab["hello"] = 259;
  vocab[spell(" hello")] = 260;
  vocab[spell(" ")+ "h"] = 261;
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab},
                {"merges", json::array({"h e", "he l", "l o", "hel lo", spell(" ") + " h", json::array({spell(" h"), "ello"})})}};
  j["model"]["vocab"]["ello"] = 262;
  j["model"]["merges"].push_back("e l");
  j["model"]["vocab"]["el"] = 263;
  j["model"]["merges"].push_back("el lo");
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array({
      {{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
      {{"id", 301}, {"content", "<L>"}, {"special", true}, {"lstrip", true}, {"normalized", false}},
      {{"id", 302}, {"content", "<R>"}, {"special", true}, {"rstrip", true}, {"normalized", false}},
      {{"id", 303}, {"content", "word"}, {"special", false}, {"single_word", true}, {"normalized", false}},
      {{"id", 304}, {"content", "<|end|>x"}, {"special", true}, {"normalized", false}},
  });
  return j;
}

std::unique_ptr<Tokenizer> tiny(const json& j = tiny_tokenizer_json(), const std::string& cfg = "") {
  auto t = Tokenizer::from_json(j.dump(), cfg, "tiny");
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> enc(const Tokenizer& t, const std::string& s, bool special = false) {
  auto r = t.encode(s, special);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : std::vector<int32_t>{};
}

TEST(BpeTokenizer, MergesByRank) {
  auto t = tiny();
  EXPECT_EQ(enc(*t, "hello"), (std::vector<int32_t>{259}));  // h e -> he, he l -> hel, l o -> lo, hel lo
  EXPECT_EQ(enc(*t, "hel"), (std::vector<int32_t>{257}));
  EXPECT_EQ(enc(*t, "elo"), (std::vector<int32_t>{'e', 258}));  // "l o" (rank 2) outranks "e l" (rank 6)
  EXPECT_EQ(enc(*t, "ell"), (std::vector<int32_t>{263, 'l'}));  // leftmost of equal candidates
  // " h" (rank 4) loses to "h e" (rank 0); the word then merges to "hello", and " "+"hello" has no merge.
  EXPECT_EQ(enc(*t, " hello"), (std::vector<int32_t>{' ', 259}));
}

TEST(BpeTokenizer, AddedTokensLeftmostLongestAndFlags) {
  auto t = tiny();
  EXPECT_EQ(enc(*t, "a<|end|>b"), (std::vector<int32_t>{'a', 300, 'b'}));
  EXPECT_EQ(enc(*t, "a<|end|>x"), (std::vector<int32_t>{'a', 304}));  // longest match wins
  // lstrip swallows whitespace on the left, rstrip on the right.
  EXPECT_EQ(enc(*t, "a  <L>b"), (std::vector<int32_t>{'a', 301, 'b'}));
  EXPECT_EQ(enc(*t, "a<R>  b"), (std::vector<int32_t>{'a', 302, 'b'}));
  // single_word: only matches when not inside a word.
  const auto inside = enc(*t, "swords");
  EXPECT_TRUE(std::find(inside.begin(), inside.end(), 303) == inside.end());
  const auto alone = enc(*t, "a word b");
  EXPECT_TRUE(std::find(alone.begin(), alone.end(), 303) != alone.end());
}

TEST(BpeTokenizer, DecodeSkipsSpecialOnRequestAndRejectsUnknownIds) {
  auto t = tiny();
  EXPECT_EQ(t->decode(std::vector<int32_t>{259, 300, 'a'}).value(), "hello<|end|>a");
  EXPECT_EQ(t->decode(std::vector<int32_t>{259, 300, 'a'}, true).value(), "helloa");
  auto bad = t->decode(std::vector<int32_t>{259, 5000});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("token id 5000 at index 1 is outside the vocabulary"), std::string::npos);
  EXPECT_FALSE(t->decode(std::vector<int32_t>{-1}).is_ok());
  // Lone bytes of a multi-byte character decode to U+FFFD, like HF's lossy decode.
  EXPECT_EQ(t->decode(std::vector<int32_t>{0xE2, 0x82}).value(), "\xEF\xBF\xBD");
  EXPECT_EQ(t->decode(std::vector<int32_t>{0xE2, 0x82, 0xAC}).value(), "\xE2\x82\xAC");
}

TEST(BpeTokenizer, InvalidUtf8TextIsAnErrorNamingTheOffset) {
  auto t = tiny();
  auto r = t->encode(std::string("ok\xC3(", 4));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("not valid UTF-8 (byte offset 2)"), std::string::npos) << r.status().message();
}

TEST(BpeTokenizer, PostProcessorTemplateAndConfigTokens) {
  json j = tiny_tokenizer_json();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {300}}, {"tokens", {"<|end|>"}}}}}}};
  auto t = tiny(j, R"({"add_bos_token": true, "bos_token": {"content": "<|end|>"}, "eos_token": "<R>"})");
  EXPECT_EQ(enc(*t, "hello", true), (std::vector<int32_t>{300, 259}));
  EXPECT_EQ(enc(*t, "hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(t->bos_token_id(), 300);
  EXPECT_EQ(t->eos_token_id(), 302);
  EXPECT_TRUE(t->add_bos_token());
}

TEST(BpeTokenizer, MalformedAndUnsupportedFilesAreClearErrors) {
  auto expect_err = [](const std::string& text, const std::string& needle) {
    auto t = Tokenizer::from_json(text, "", "bad.json");
    ASSERT_FALSE(t.is_ok()) << "accepted: " << text.substr(0, 80);
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  };
  expect_err("{not json", "bad.json: not valid JSON");
  expect_err("[]", "top level must be a JSON object");
  expect_err(R"({"model": {"type": "WordPiece", "vocab": {}}})", "model type 'WordPiece' is not supported");
  expect_err(R"({"model": {"type": "Unigram", "vocab": []}})", "model type 'Unigram' is not supported");
  json j = tiny_tokenizer_json();
  j["model"]["byte_fallback"] = true;
  expect_err(j.dump(), "byte_fallback is not supported");
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_err(j.dump(), "pre_tokenizer type 'Metaspace' is not supported");
  j = tiny_tokenizer_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_err(j.dump(), "normalizer type 'BertNormalizer' is not supported");
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_err(j.dump(), "does not compile");
  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("zz qq");
  expect_err(j.dump(), "refers to tokens missing from the vocabulary");
  j = tiny_tokenizer_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_err(j.dump(), "decoder type 'WordPiece' is not supported");
  // Wrongly typed fields are errors naming the field, not exceptions.
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", 5}};
  expect_err(j.dump(), "Split pre_tokenizer: 'behavior' must be a string");
  j = tiny_tokenizer_json();
  j["added_tokens"][0]["special"] = "yes";
  expect_err(j.dump(), "added token 300: 'special' must be true or false");
  j = tiny_tokenizer_json();
  j["decoder"] = 5;
  expect_err(j.dump(), "decoder type '' is not supported");
  auto missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(Detokenizer, EmitsOnlyCompleteUtf8) {
  auto t = tiny();
  Detokenizer d(*t);
  EXPECT_EQ(d.add(0xE2).value(), "");
  EXPECT_EQ(d.add(0x82).value(), "");
  EXPECT_EQ(d.add(0xAC).value(), "\xE2\x82\xAC");
  EXPECT_EQ(d.add(0xF0).value(), "");
  EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");  // a dangling lead byte ends as U+FFFD, as in decode()
}

TEST(Detokenizer, FindsStopStringsAcrossTokens) {
  auto t = tiny();
  Detokenizer d(*t, {"lo wor", "zzz"});
  std::string out;
  for (int32_t id : enc(*t, "hel")) out += d.add(id).value();
  for (int32_t id : std::vector<int32_t>{'l', 'o', ' ', 'w', 'o'}) out += d.add(id).value();
  EXPECT_FALSE(d.stopped());
  EXPECT_EQ(out, "hel");  // "lo wo" is held back: it may become the stop string
  out += d.add('r').value();
  EXPECT_TRUE(d.stopped());
  EXPECT_EQ(d.matched_stop(), "lo wor");
  EXPECT_EQ(out, "hel");
  EXPECT_EQ(d.add('x').value(), "");  // ignored after the stop
}

TEST(Detokenizer, HeldBackTextIsReleasedWhenItStopsMatching) {
  auto t = tiny();
  Detokenizer d(*t, {"abc"});
  EXPECT_EQ(d.add('a').value(), "");
  EXPECT_EQ(d.add('b').value(), "");
  EXPECT_EQ(d.add('x').value(), "abx");
  EXPECT_EQ(d.add('a').value(), "");
  EXPECT_EQ(d.finish(), "a");
  EXPECT_FALSE(d.stopped());
}

}  // namespace
}  // namespace deepinfer
