#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace deepinfer::io {

using nlohmann::json;

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::io_error("cannot open " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::io_error("cannot stat " + path);
  }
  auto f = std::unique_ptr<MappedFile>(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Status::io_error("cannot mmap " + path);
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::string TensorView::shape_string() const {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Result<std::vector<TensorView>> parse_safetensors(const uint8_t* bytes, size_t size, const std::string& file) {
  if (size < 8) return Status::corrupt(file + ": file too short for a safetensors header (" + std::to_string(size) + " bytes)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8)
    return Status::corrupt(file + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                           std::to_string(size) + " bytes)");
  const char* hbegin = reinterpret_cast<const char*>(bytes + 8);
  json header = json::parse(hbegin, hbegin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::corrupt(file + ": header is not valid JSON");
  if (!header.is_object()) return Status::corrupt(file + ": header is not a JSON object");
  const size_t data_start = 8 + header_len;
  const size_t data_size = size - data_start;
  std::vector<TensorView> out;
  out.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const json& e = it.value();
    const std::string where = file + ": tensor '" + name + "'";
    if (!e.is_object()) return Status::corrupt(where + ": entry is not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) return Status::corrupt(where + ": missing or non-string 'dtype'");
    if (sh == e.end() || !sh->is_array()) return Status::corrupt(where + ": missing or non-array 'shape'");
    if (off == e.end() || !off->is_array() || off->size() != 2)
      return Status::corrupt(where + ": 'data_offsets' must be an array of two integers");
    auto dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype) return Status::unsupported(where + ": unknown dtype '" + dt->get<std::string>() + "'");
    TensorView v;
    v.name = name;
    v.dtype = *dtype;
    v.file = file;
    uint64_t count = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) return Status::corrupt(where + ": shape entries must be non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 40) || (dim != 0 && count > (uint64_t{1} << 48) / dim))
        return Status::corrupt(where + ": shape is implausibly large");
      count *= dim;
      v.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      return Status::corrupt(where + ": 'data_offsets' must be non-negative integers");
    const uint64_t b = (*off)[0].get<uint64_t>();
    const uint64_t en = (*off)[1].get<uint64_t>();
    if (b > en) return Status::corrupt(where + ": data_offsets begin > end");
    if (en > data_size)
      return Status::corrupt(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                             ") run past the end of the file (data section is " + std::to_string(data_size) + " bytes)");
    const uint64_t expect = count * dtype_size(*dtype);
    if (en - b != expect)
      return Status::corrupt(where + ": byte range of " + std::to_string(en - b) + " bytes does not match shape " +
                             v.shape_string() + " x " + dtype_name(*dtype) + " (" + std::to_string(expect) + " bytes)");
    v.data = bytes + data_start + b;
    v.num_bytes = static_cast<size_t>(en - b);
    out.push_back(std::move(v));
  }
  // Byte ranges must not overlap (the format lays tensors out back to back).
  std::vector<const TensorView*> by_offset;
  for (const auto& v : out) by_offset.push_back(&v);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView* prev = by_offset[i - 1];
    if (by_offset[i]->num_bytes > 0 && prev->data + prev->num_bytes > by_offset[i]->data)
      return Status::corrupt(file + ": tensor '" + by_offset[i]->name + "': data_offsets overlap those of tensor '" +
                             prev->name + "'");
  }
  return out;
}

Status SafetensorsSet::add_file(const std::string& path) {
  auto mf = MappedFile::open(path);
  if (!mf.is_ok()) return mf.status();
  std::shared_ptr<MappedFile> file = std::move(mf).value();
  auto views = parse_safetensors(file->data(), file->size(), path);
  if (!views.is_ok()) return views.status();
  for (auto& v : views.value()) {
    if (tensors_.count(v.name)) return Status::corrupt("tensor '" + v.name + "' appears in more than one file (" + path + ")");
    tensors_.emplace(v.name, std::move(v));
  }
  files_.push_back(std::move(file));
  return Status::ok();
}

Result<SafetensorsSet> SafetensorsSet::open_files(const std::vector<std::string>& paths) {
  SafetensorsSet set;
  for (const auto& p : paths) DI_RETURN_IF_ERROR(set.add_file(p));
  return set;
}

Result<SafetensorsSet> SafetensorsSet::open_dir(const std::string& dir, const std::vector<std::string>& skip_files) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::not_found("model directory '" + dir + "' does not exist");
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index, ec)) {
    std::ifstream in(index);
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Status::corrupt(index.string() + ": not valid JSON");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) return Status::corrupt(index.string() + ": missing 'weight_map' object");
    std::map<std::string, std::string> want;  // tensor -> shard
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) return Status::corrupt(index.string() + ": weight_map['" + it.key() + "'] is not a string");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        return Status::corrupt(index.string() + ": shard name '" + shard + "' must be a plain file name");
      want[it.key()] = shard;
      if (std::find(files.begin(), files.end(), shard) == files.end()) files.push_back(shard);
    }
    SafetensorsSet set;
    for (const auto& f : files) DI_RETURN_IF_ERROR(set.add_file((fs::path(dir) / f).string()));
    for (const auto& [name, shard] : want) {
      auto it = set.tensors_.find(name);
      if (it == set.tensors_.end())
        return Status::corrupt(index.string() + ": tensor '" + name + "' is listed in shard " + shard + " but not found there");
      if (fs::path(it->second.file).filename() != shard)
        return Status::corrupt(index.string() + ": tensor '" + name + "' is listed in " + shard + " but found in " + it->second.file);
    }
    return set;
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string fname = entry.path().filename().string();
    if (entry.path().extension() != ".safetensors") continue;
    if (std::find(skip_files.begin(), skip_files.end(), fname) != skip_files.end()) continue;
    files.push_back(entry.path().string());
  }
  if (files.empty()) return Status::not_found("no *.safetensors files in '" + dir + "'");
  std::sort(files.begin(), files.end());
  return open_files(files);
}

const TensorView* SafetensorsSet::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace deepinfer::io
