// Safetensors parsing (io/safetensors.h): byte buffers built here, valid and malformed, and sharded
// checkpoints written to a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

Bytes le64(uint64_t v) {
  Bytes b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

// 8-byte little-endian header length + header + data.
Bytes make_file(const std::string& header, const Bytes& data, uint64_t header_len_override = UINT64_MAX) {
  Bytes out = le64(header_len_override == UINT64_MAX ? header.size() : header_len_override);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <typename T>
Bytes raw(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Result<std::vector<TensorView>> parse(const Bytes& f, const std::string& name = "test.safetensors") {
  return parse_safetensors(f.data(), f.size(), name);
}

const TensorView* by_name(const std::vector<TensorView>& v, const std::string& n) {
  for (const auto& t : v)
    if (t.name == n) return &t;
  return nullptr;
}

// Expects a failed parse whose message contains every one of `needles`.
void expect_error(const Bytes& f, std::initializer_list<std::string> needles, Status::Code code = Status::Code::kCorrupt) {
  auto r = parse(f, "bad.safetensors");
  ASSERT_FALSE(r.is_ok()) << "expected a parse error containing '" << *needles.begin() << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const auto& n : needles) EXPECT_NE(r.status().message().find(n), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("bad.safetensors"), std::string::npos) << "message names the file";
}

TEST(ParseSafetensors, ValidFileGivesNamesDtypesShapesAndPointers) {
  // a: F32 [2,3] at [0,24); b: BF16 [4] at [24,32); c: I64 scalar [] at [32,40);
  // d: F8_E4M3 [2,2] at [40,44); e: empty U8 [0] at [44,44).
  Bytes data;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> bv = {0x3f80, 0x4000, 0xbf80, 0x0000};
  const std::vector<int64_t> cv = {-7};
  const Bytes dv = {0x38, 0xb8, 0x7e, 0x01};
  for (const Bytes& part : {raw(a), raw(bv), raw(cv), dv}) data.insert(data.end(), part.begin(), part.end());
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
      R"("c":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)"
      R"("d":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[40,44]},)"
      R"("e":{"dtype":"U8","shape":[0],"data_offsets":[44,44]}})";
  const Bytes f = make_file(header, data);
  auto r = parse(f);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const auto& v = r.value();
  ASSERT_EQ(v.size(), 5u);  // __metadata__ is not a tensor
  EXPECT_EQ(by_name(v, "__metadata__"), nullptr);
  const uint8_t* data_start = f.data() + 8 + header.size();

  const TensorView* ta = by_name(v, "a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->num_elements(), 6);
  EXPECT_EQ(ta->num_bytes, 24u);
  EXPECT_EQ(ta->data, data_start);
  EXPECT_EQ(ta->shape_string(), "[2, 3]");
  EXPECT_EQ(ta->file, "test.safetensors");
  float a5;
  std::memcpy(&a5, ta->data + 5 * 4, 4);
  EXPECT_EQ(a5, 6.0f);

  const TensorView* tb = by_name(v, "b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_EQ(tb->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(tb->data, data_start + 24);
  EXPECT_EQ(tb->num_bytes, 8u);
  uint16_t b2;
  std::memcpy(&b2, tb->data + 4, 2);
  EXPECT_EQ(b2, 0xbf80);

  const TensorView* tc = by_name(v, "c");
  ASSERT_NE(tc, nullptr);
  EXPECT_EQ(tc->dtype, DType::kI64);
  EXPECT_TRUE(tc->shape.empty());
  EXPECT_EQ(tc->num_elements(), 1);
  EXPECT_EQ(tc->data, data_start + 32);
  int64_t c0;
  std::memcpy(&c0, tc->data, 8);
  EXPECT_EQ(c0, -7);

  const TensorView* td = by_name(v, "d");
  ASSERT_NE(td, nullptr);
  EXPECT_EQ(td->dtype, DType::kF8E4M3);
  EXPECT_EQ(td->data, data_start + 40);
  EXPECT_EQ(td->data[2], 0x7e);

  const TensorView* te = by_name(v, "e");
  ASSERT_NE(te, nullptr);
  EXPECT_EQ(te->dtype, DType::kU8);
  EXPECT_EQ(te->num_elements(), 0);
  EXPECT_EQ(te->num_bytes, 0u);
}

TEST(ParseSafetensors, HeaderPaddingAndTrailingSpaceAccepted) {
  // Writers pad the header with spaces to an 8-byte boundary.
  std::string header = R"({"x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  while ((header.size() + 8) % 8 != 0) header += ' ';
  header += "        ";
  const Bytes f = make_file(header, raw(std::vector<int32_t>{42}));
  auto r = parse(f);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r.value().size(), 1u);
  EXPECT_EQ(r.value()[0].data, f.data() + 8 + header.size());
  int32_t x;
  std::memcpy(&x, r.value()[0].data, 4);
  EXPECT_EQ(x, 42);
}

TEST(ParseSafetensors, EmptyHeaderObjectHasNoTensors) {
  auto r = parse(make_file("{}", {}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r.value().empty());
}

TEST(ParseSafetensors, ShorterThanEightBytes) {
  for (size_t n = 0; n < 8; ++n) {
    Bytes f(n, 0);
    expect_error(f, {"too short", std::to_string(n) + " bytes"});
  }
  // A null pointer with size 0 is also handled (empty mmap).
  auto r = parse_safetensors(nullptr, 0, "empty.safetensors");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("too short"), std::string::npos);
}

TEST(ParseSafetensors, HeaderLengthPastEnd) {
  const std::string header = R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  expect_error(make_file(header, {7}, header.size() + 2), {"header length", "past the end"});
  expect_error(make_file("", {}, 1), {"header length 1", "past the end"});
  // A header length near 2^64 must not wrap around.
  expect_error(make_file(header, {7}, UINT64_MAX - 3), {"header length", "past the end"});
  expect_error(make_file(header, {7}, uint64_t{1} << 63), {"header length", "past the end"});
}

TEST(ParseSafetensors, GarbledJson) {
  expect_error(make_file(R"({"x":{"dtype":"U8",)", {}), {"not valid JSON"});
  expect_error(make_file("\xff\xfe{}", {}), {"not valid JSON"});
  expect_error(make_file("", {}), {"not valid JSON"});
  // A NUL byte inside the header.
  expect_error(make_file(std::string("{\"a\"\0:1}", 8), {}), {"not valid JSON"});
}

TEST(ParseSafetensors, HeaderNotAnObject) {
  expect_error(make_file("[1,2,3]", {}), {"not a JSON object"});
  expect_error(make_file("42", {}), {"not a JSON object"});
  expect_error(make_file("\"str\"", {}), {"not a JSON object"});
}

TEST(ParseSafetensors, EntryNotAnObjectOrMissingFields) {
  expect_error(make_file(R"({"t":[1,2]})", {}), {"'t'", "not an object"});
  expect_error(make_file(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", {0}), {"'t'", "dtype"});
  expect_error(make_file(R"({"t":{"dtype":5,"shape":[1],"data_offsets":[0,1]}})", {0}), {"'t'", "dtype"});
  expect_error(make_file(R"({"t":{"dtype":"U8","data_offsets":[0,1]}})", {0}), {"'t'", "shape"});
  expect_error(make_file(R"({"t":{"dtype":"U8","shape":[1]}})", {0}), {"'t'", "data_offsets"});
  expect_error(make_file(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", {0}), {"'t'", "data_offsets"});
  expect_error(make_file(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", {0}), {"'t'", "data_offsets"});
  expect_error(make_file(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[-1,1]}})", {0}), {"'t'", "data_offsets"});
  expect_error(make_file(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,"1"]}})", {0}), {"'t'", "data_offsets"});
}

TEST(ParseSafetensors, UnknownDtype) {
  expect_error(make_file(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", {0}),
               {"tensor 'w'", "unknown dtype 'F7'"}, Status::Code::kUnsupported);
}

TEST(ParseSafetensors, OffsetsPastEnd) {
  // 4 data bytes, tensor claims [0, 8).
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", {1, 2, 3, 4}),
               {"tensor 'w'", "past the end", "4 bytes"});
  // Beyond any plausible value.
  expect_error(make_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})", {1}),
               {"tensor 'w'", "past the end"});
}

TEST(ParseSafetensors, BeginAfterEnd) {
  expect_error(make_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[4,2]}})", {1, 2, 3, 4}),
               {"tensor 'w'", "begin > end"});
}

TEST(ParseSafetensors, ByteSizeDoesNotMatchShape) {
  // [2,3] F32 = 24 bytes, range holds 20.
  const Bytes data(24, 0);
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", data),
               {"tensor 'w'", "does not match shape [2, 3]", "F32", "24 bytes"});
  // Element count right for U8 but dtype says BF16.
  expect_error(make_file(R"({"w":{"dtype":"BF16","shape":[6],"data_offsets":[0,6]}})", data),
               {"tensor 'w'", "does not match shape [6]", "BF16"});
  // Too many bytes is as wrong as too few.
  expect_error(make_file(R"({"w":{"dtype":"U8","shape":[3],"data_offsets":[0,4]}})", data), {"does not match shape"});
}

TEST(ParseSafetensors, NegativeOrNonIntegerShape) {
  const Bytes data(8, 0);
  for (const char* shape : {"[-1]", "[2,-4]", "[2.5]", "[\"3\"]", "[null]", "[[1]]", "[1.0]", "[true]"}) {
    const std::string h = std::string(R"({"w":{"dtype":"U8","shape":)") + shape + R"(,"data_offsets":[0,1]}})";
    SCOPED_TRACE(shape);
    expect_error(make_file(h, data), {"tensor 'w'", "shape"});
  }
  auto r = parse(make_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", data));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("non-negative integers"), std::string::npos) << r.status().message();
}

TEST(ParseSafetensors, ImplausiblyLargeShapeDoesNotOverflow) {
  // 2^32 x 2^32 elements would overflow a 64-bit byte count once multiplied by the dtype size.
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", {}),
               {"tensor 'w'", "implausibly large"});
  // Product wraps to exactly 0 mod 2^64 if unchecked: 2^33 * 2^31 = 2^64.
  expect_error(make_file(R"({"w":{"dtype":"U8","shape":[8589934592,2147483648],"data_offsets":[0,0]}})", {}),
               {"tensor 'w'"});
  // A zero dimension next to a huge one is an empty tensor, and fine.
  auto r = parse(make_file(R"({"w":{"dtype":"U8","shape":[0,1099511627776],"data_offsets":[0,0]}})", {}));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value()[0].num_elements(), 0);
}

// ---------------------------------------------------------------------------------------------
// Files on disk.

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "deepinfer_st_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& p, const Bytes& b) {
  std::ofstream o(p, std::ios::binary);
  o.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_text(const fs::path& p, const std::string& s) { write_file(p, Bytes(s.begin(), s.end())); }

Bytes shard1() {
  return make_file(R"({"embed.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                   R"("norm.weight":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]}})",
                   [] {
                     Bytes d = raw(std::vector<float>{1.5f, -2.0f, 3.0f, 0.25f});
                     Bytes n = raw(std::vector<uint16_t>{0x3f80, 0x4040});
                     d.insert(d.end(), n.begin(), n.end());
                     return d;
                   }());
}
Bytes shard2() {
  return make_file(R"({"layers.0.attn.wq_a.weight":{"dtype":"F8_E4M3","shape":[1,3],"data_offsets":[0,3]},)"
                   R"("layers.0.attn.wq_a.scale":{"dtype":"F8_E8M0","shape":[1,1],"data_offsets":[3,4]}})",
                   Bytes{0x38, 0x40, 0xb8, 130});
}
const char* kIndex = R"({"metadata":{"total_size":24},"weight_map":{
  "embed.weight":"model-00001-of-00002.safetensors",
  "norm.weight":"model-00001-of-00002.safetensors",
  "layers.0.attn.wq_a.weight":"model-00002-of-00002.safetensors",
  "layers.0.attn.wq_a.scale":"model-00002-of-00002.safetensors"}})";

TEST(SafetensorsSet, OpensShardedCheckpointThroughIndex) {
  TempDir dir;
  write_file(dir.path() / "model-00001-of-00002.safetensors", shard1());
  write_file(dir.path() / "model-00002-of-00002.safetensors", shard2());
  write_text(dir.path() / "model.safetensors.index.json", kIndex);
  auto r = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const auto& set = r.value();
  EXPECT_EQ(set.tensors().size(), 4u);

  const TensorView* e = set.find("embed.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::kF32);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(fs::path(e->file).filename(), "model-00001-of-00002.safetensors");
  float vals[4];
  std::memcpy(vals, e->data, 16);
  EXPECT_EQ(vals[0], 1.5f);
  EXPECT_EQ(vals[1], -2.0f);
  EXPECT_EQ(vals[3], 0.25f);

  const TensorView* n = set.find("norm.weight");
  ASSERT_NE(n, nullptr);
  uint16_t n1;
  std::memcpy(&n1, n->data + 2, 2);
  EXPECT_EQ(n1, 0x4040);

  const TensorView* w = set.find("layers.0.attn.wq_a.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  EXPECT_EQ(fs::path(w->file).filename(), "model-00002-of-00002.safetensors");
  EXPECT_EQ(w->data[1], 0x40);
  const TensorView* s = set.find("layers.0.attn.wq_a.scale");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->dtype, DType::kF8E8M0);
  EXPECT_EQ(s->data[0], 130);
  EXPECT_EQ(set.find("head.weight"), nullptr);
}

TEST(SafetensorsSet, IndexNamesTensorMissingFromShard) {
  TempDir dir;
  write_file(dir.path() / "model-00001-of-00002.safetensors", shard1());
  write_file(dir.path() / "model-00002-of-00002.safetensors", shard2());
  std::string idx = kIndex;
  idx.insert(idx.find("\"embed.weight\""), "\"head.weight\":\"model-00002-of-00002.safetensors\",");
  write_text(dir.path() / "model.safetensors.index.json", idx);
  auto r = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'head.weight'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("model-00002-of-00002.safetensors"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("not found"), std::string::npos) << r.status().message();
}

TEST(SafetensorsSet, IndexNamesWrongShard) {
  TempDir dir;
  write_file(dir.path() / "model-00001-of-00002.safetensors", shard1());
  write_file(dir.path() / "model-00002-of-00002.safetensors", shard2());
  std::string idx = kIndex;
  // norm.weight lives in shard 1, the index says shard 2.
  const std::string from = "\"norm.weight\":\"model-00001-of-00002.safetensors\"";
  idx.replace(idx.find(from), from.size(), "\"norm.weight\":\"model-00002-of-00002.safetensors\"");
  write_text(dir.path() / "model.safetensors.index.json", idx);
  auto r = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'norm.weight'"), std::string::npos) << r.status().message();
}

TEST(SafetensorsSet, IndexShardFileMissingOrEscaping) {
  TempDir dir;
  write_file(dir.path() / "model-00001-of-00002.safetensors", shard1());
  write_text(dir.path() / "model.safetensors.index.json", kIndex);  // shard 2 absent
  auto r = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("model-00002-of-00002.safetensors"), std::string::npos) << r.status().message();

  write_text(dir.path() / "model.safetensors.index.json",
             R"({"weight_map":{"embed.weight":"../model-00001-of-00002.safetensors"}})");
  auto r2 = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(r2.is_ok());
  EXPECT_NE(r2.status().message().find("plain file name"), std::string::npos) << r2.status().message();

  write_text(dir.path() / "model.safetensors.index.json", R"({"weight_map":[1]})");
  auto r3 = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(r3.is_ok());
  EXPECT_NE(r3.status().message().find("weight_map"), std::string::npos) << r3.status().message();

  write_text(dir.path() / "model.safetensors.index.json", "{not json");
  auto r4 = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(r4.is_ok());
  EXPECT_NE(r4.status().message().find("not valid JSON"), std::string::npos) << r4.status().message();
}

TEST(SafetensorsSet, MissingDirectory) {
  TempDir dir;
  const std::string missing = (dir.path() / "no_such_model").string();
  auto r = SafetensorsSet::open_dir(missing);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("does not exist"), std::string::npos) << r.status().message();
}

TEST(SafetensorsSet, DirectoryWithoutSafetensors) {
  TempDir dir;
  write_text(dir.path() / "config.json", "{}");
  auto r = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find("no *.safetensors"), std::string::npos) << r.status().message();
}

TEST(SafetensorsSet, UnindexedDirectoryHonoursSkipList) {
  TempDir dir;
  write_file(dir.path() / "a.safetensors", shard1());
  write_file(dir.path() / "b.safetensors", shard2());
  // reference.safetensors would clash (same tensor name as a.safetensors) unless skipped.
  write_file(dir.path() / "reference.safetensors", shard1());
  auto clash = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_FALSE(clash.is_ok());
  EXPECT_NE(clash.status().message().find("more than one file"), std::string::npos) << clash.status().message();
  auto r = SafetensorsSet::open_dir(dir.path().string(), {"reference.safetensors"});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value().tensors().size(), 4u);
  ASSERT_NE(r.value().find("embed.weight"), nullptr);
  EXPECT_EQ(fs::path(r.value().find("embed.weight")->file).filename(), "a.safetensors");
}

TEST(SafetensorsSet, TruncatedFileIsAnErrorNotACrash) {
  TempDir dir;
  const Bytes full = shard1();
  // Every truncation point: inside the length prefix, inside the header, inside the data.
  for (size_t n = 0; n < full.size(); ++n) {
    const fs::path p = dir.path() / "model.safetensors";
    write_file(p, Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
    auto r = SafetensorsSet::open_files({p.string()});
    ASSERT_FALSE(r.is_ok()) << "truncated to " << n << " bytes";
    EXPECT_EQ(r.status().code(), Status::Code::kCorrupt) << r.status().to_string();
    EXPECT_NE(r.status().message().find(p.string()), std::string::npos) << r.status().message();
  }
  // The intact copy opens.
  write_file(dir.path() / "model.safetensors", full);
  auto ok = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
}

TEST(SafetensorsSet, OpenFilesMissingFile) {
  TempDir dir;
  auto r = SafetensorsSet::open_files({(dir.path() / "nope.safetensors").string()});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Status::Code::kIoError);
  EXPECT_NE(r.status().message().find("nope.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::io
