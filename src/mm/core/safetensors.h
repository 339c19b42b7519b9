// Hugging Face safetensors: zero-copy reading through mmap, sharded checkpoints through
// model.safetensors.index.json, and atomic writing (temp file, fsync, rename).
//
// File layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer the offsets point into.
#pragma once
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mm {

struct TensorInfo {
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer
  uint64_t end = 0;
};

// One .safetensors file, mapped copy-on-write: tensors alias the mapping (no copy), and an
// in-place change to one never reaches the file.
class SafetensorsFile {
 public:
  // Validates the whole header up front; every error names the file (and tensor).
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }  // in header order
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A CPU tensor viewing the mapped bytes; it keeps the mapping alive.
  at::Tensor tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  std::shared_ptr<void> mapping_;
  size_t mapped_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data buffer inside the mapping
  std::vector<std::string> names_;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Drops the memory pages of a tensor that views a mapped safetensors file (SafetensorsFile::tensor,
// Checkpoint::tensor) from this process's resident memory, once its values have been copied
// where they are needed: loading a model then holds the model plus one tensor's pages, not the
// model plus the whole file. Touching the tensor again reads the file again, so an in-place
// change made to it (or to another view of the same bytes) is lost. Any other tensor is left
// alone.
void release_mapped_pages(const at::Tensor& tensor);

// A checkpoint directory (or a single file): model.safetensors, or the shards listed in
// model.safetensors.index.json, or every *.safetensors in the directory.
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;

 private:
  std::filesystem::path path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// Writes tensors (contiguous CPU copies are made as needed) atomically: a temporary file in
// the same directory is written, fsynced and renamed over `path`; the directory is fsynced.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes model-0000i-of-0000n.safetensors shards of at most max_shard_bytes plus
// model.safetensors.index.json (or one model.safetensors when everything fits).
void save_checkpoint(const std::filesystem::path& dir,
                     const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     uint64_t max_shard_bytes = 5ull << 30);

// Atomically replaces `path` with `content` (temp file, fsync, rename, directory fsync).
void write_file_atomic(const std::filesystem::path& path, const std::string& content);

std::string dtype_name(c10::ScalarType dtype);  // "F32", "BF16", ...

}  // namespace mm
