// Read-only access to safetensors checkpoints, single-file or sharded, without copying.
// Each file is mmapped once; a TensorView points straight into the mapping. Every header is
// validated before use: JSON shape, known dtypes, byte ranges inside the file and consistent with
// shape x dtype size. A malformed or truncated file yields a Status naming the file and tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "io/dtype.h"

namespace deepinfer::io {

// Read-only memory mapping of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the file mapping; valid while the owning file lives
  size_t num_bytes = 0;
  std::string file;               // which file it came from, for error messages

  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string shape_string() const;  // "[512, 64]"
};

// Parses a safetensors header from an in-memory buffer (the whole file). Exposed for tests and the
// fuzzer. `file` is only used in error messages. Views point into `bytes`.
Result<std::vector<TensorView>> parse_safetensors(const uint8_t* bytes, size_t size, const std::string& file);

// A set of tensors from one or more safetensors files.
class SafetensorsSet {
 public:
  // Opens `dir/model.safetensors.index.json` (sharded) if present, else every `*.safetensors` file
  // in `dir` except names listed in `skip_files` (e.g. "reference.safetensors").
  static Result<SafetensorsSet> open_dir(const std::string& dir, const std::vector<std::string>& skip_files = {});
  // Opens exactly these files.
  static Result<SafetensorsSet> open_files(const std::vector<std::string>& paths);

  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  Status add_file(const std::string& path);
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace deepinfer::io
