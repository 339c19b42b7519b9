#include "mm/core/safetensors.h"

#include <ATen/Functions.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mm/core/error.h"

namespace mm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Headers of real checkpoints are a few MB at most; anything larger is corruption.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DtypeName {
  const char* name;
  c10::ScalarType dtype;
};
constexpr DtypeName kDtypes[] = {
    {"F64", c10::kDouble}, {"F32", c10::kFloat}, {"F16", c10::kHalf},
    {"BF16", c10::kBFloat16}, {"I64", c10::kLong}, {"I32", c10::kInt},
    {"I16", c10::kShort}, {"I8", c10::kChar}, {"U8", c10::kByte}, {"BOOL", c10::kBool},
};

c10::ScalarType dtype_from_name(const std::string& name, const fs::path& path,
                                const std::string& tensor) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.dtype;
  fail(path.string(), ": tensor '", tensor, "' has unsupported dtype '", name,
       "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

class FileWriter {
 public:
  explicit FileWriter(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    MM_CHECK(fd_ >= 0, "cannot create ", path.string(), ": ", std::strerror(errno));
  }
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t size) {
    auto p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      MM_CHECK(n > 0, "cannot write ", path_.string(), ": ", std::strerror(errno));
      p += n;
      size -= static_cast<size_t>(n);
    }
  }
  void sync_and_close() {
    MM_CHECK(::fsync(fd_) == 0, "cannot fsync ", path_.string(), ": ", std::strerror(errno));
    MM_CHECK(::close(fd_) == 0, "cannot close ", path_.string(), ": ", std::strerror(errno));
    fd_ = -1;
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

// Runs `write_to(tmp)` and renames tmp over path; on any failure the temp file is removed
// and `path` is untouched.
template <typename WriteFn>
void replace_atomically(const fs::path& path, WriteFn write_to) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  try {
    write_to(tmp);
    fs::rename(tmp, path);
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  fsync_directory(path.parent_path());
}

}  // namespace

std::string dtype_name(c10::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.dtype) return d.name;
  fail("dtype ", c10::toString(dtype), " cannot be stored in safetensors");
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const fs::path& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const std::string where = path.string();

  int fd = ::open(path.c_str(), O_RDONLY);
  MM_CHECK(fd >= 0, "cannot open ", where, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat ", where, ": ", std::strerror(errno));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(where, ": not a safetensors file (", size, " bytes, shorter than the 8-byte header length)");
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  MM_CHECK(base != MAP_FAILED, "cannot mmap ", where, ": ", std::strerror(errno));
  file->mapping_ = std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); });
  file->mapped_size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(base);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  MM_CHECK(header_len <= kMaxHeaderBytes, where, ": header length ", header_len,
           " is larger than the 100 MiB limit (corrupt file?)");
  MM_CHECK(header_len <= size - 8, where, ": truncated: header says ", header_len,
           " bytes but the file has only ", size - 8, " after the length field");
  file->data_ = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const json::exception& e) {
    fail(where, ": malformed JSON header: ", e.what());
  }
  MM_CHECK(header.is_object(), where, ": header is not a JSON object");

  uint64_t covered = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      MM_CHECK(it->is_object(), where, ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) file->metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const json& e = *it;
    const std::string at = where + ": tensor '" + name + "'";
    MM_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") &&
                 e.contains("data_offsets"),
             at, ": header entry needs dtype, shape and data_offsets");
    MM_CHECK(e["dtype"].is_string(), at, ": dtype is not a string");
    TensorInfo info;
    info.dtype = dtype_from_name(e["dtype"].get<std::string>(), path, name);
    MM_CHECK(e["shape"].is_array(), at, ": shape is not an array");
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      MM_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), at,
               ": shape ", e["shape"].dump(), " is not a list of non-negative integers");
      info.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
    }
    const auto& off = e["data_offsets"];
    MM_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                 off[1].is_number_unsigned(),
             at, ": data_offsets ", off.dump(), " is not [begin, end]");
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    MM_CHECK(info.begin <= info.end && info.end <= data_size, at, ": data_offsets [", info.begin,
             ", ", info.end, "] lie outside the data buffer of ", data_size,
             " bytes (truncated file?)");
    const uint64_t expected = numel * c10::elementSize(info.dtype);
    MM_CHECK(info.end - info.begin == expected, at, ": shape ", e["shape"].dump(), " of ",
             e["dtype"].get<std::string>(), " needs ", expected, " bytes but data_offsets span ",
             info.end - info.begin);
    covered = std::max(covered, info.end);
    file->names_.push_back(name);
    file->infos_.emplace(name, std::move(info));
  }
  MM_CHECK(covered <= data_size, where, ": truncated data buffer");
  return file;
}

SafetensorsFile::~SafetensorsFile() = default;

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  MM_CHECK(it != infos_.end(), path_.string(), ": no tensor named '", name, "'");
  return it->second;
}

namespace {

// The context of a tensor viewing a mapping: it keeps the mapping alive, and its deleter is how
// release_mapped_pages recognises such a tensor.
struct MappingRef {
  std::shared_ptr<void> mapping;
};
void drop_mapping_ref(void* ref) { delete static_cast<MappingRef*>(ref); }

}  // namespace

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& i = info(name);
  void* ptr = const_cast<uint8_t*>(data_ + i.begin);
  return at::for_blob(ptr, i.shape)
      .context(new MappingRef{mapping_}, &drop_mapping_ref)
      .options(at::TensorOptions().dtype(i.dtype))
      .make_tensor();
}

void release_mapped_pages(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage() || !tensor.device().is_cpu()) return;
  const auto& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &drop_mapping_ref) return;  // not a view of a checkpoint mapping
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(tensor.storage().data());
  const uintptr_t end = begin + tensor.storage().nbytes();
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  // Only the pages wholly inside this tensor: a neighbour sharing a boundary page keeps it.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

Checkpoint Checkpoint::open(const fs::path& path) {
  Checkpoint ckpt;
  ckpt.path_ = path;
  std::vector<fs::path> files;
  std::map<std::string, std::string> index_map;
  const fs::path index = path / "model.safetensors.index.json";
  if (fs::is_regular_file(path)) {
    files.push_back(path);
  } else if (!fs::is_directory(path)) {
    fail("checkpoint ", path.string(), " does not exist");
  } else if (fs::exists(index)) {
    json j;
    try {
      std::ifstream in(index);
      j = json::parse(in);
    } catch (const json::exception& e) {
      fail(index.string(), ": malformed JSON: ", e.what());
    }
    MM_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), index.string(),
             ": missing object 'weight_map'");
    std::vector<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      MM_CHECK(it->is_string(), index.string(), ": weight_map['", it.key(), "'] is not a file name");
      index_map[it.key()] = it->get<std::string>();
      if (std::find(shards.begin(), shards.end(), it->get<std::string>()) == shards.end())
        shards.push_back(it->get<std::string>());
    }
    std::sort(shards.begin(), shards.end());
    for (const auto& s : shards) {
      MM_CHECK(fs::exists(path / s), index.string(), " lists shard ", s,
               " which does not exist in ", path.string());
      files.push_back(path / s);
    }
  } else if (fs::exists(path / "model.safetensors")) {
    files.push_back(path / "model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(path))
      if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    MM_CHECK(!files.empty(), "no .safetensors files in ", path.string());
  }
  for (const auto& f : files) {
    auto file = SafetensorsFile::open(f);
    for (const auto& name : file->names()) {
      auto [it, inserted] = ckpt.where_.emplace(name, ckpt.files_.size());
      MM_CHECK(inserted, "tensor '", name, "' appears in both ",
               ckpt.files_[it->second]->path().string(), " and ", f.string());
    }
    ckpt.files_.push_back(std::move(file));
  }
  for (const auto& [name, shard] : index_map) {
    auto it = ckpt.where_.find(name);
    MM_CHECK(it != ckpt.where_.end(), index.string(), " maps '", name, "' to ", shard,
             " but that shard does not contain it");
  }
  return ckpt;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, _] : where_) out.push_back(name);
  return out;
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  MM_CHECK(it != where_.end(), "checkpoint ", path_.string(), " has no tensor '", name, "'");
  return files_[it->second]->info(name);
}

at::Tensor Checkpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  MM_CHECK(it != where_.end(), "checkpoint ", path_.string(), " has no tensor '", name, "'");
  return files_[it->second]->tensor(name);
}

void save_safetensors(const fs::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MM_CHECK(!header.contains(name), "save ", path.string(), ": duplicate tensor name '", name, "'");
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const uint64_t nbytes = c.numel() * c.element_size();
    header[name] = {{"dtype", dtype_name(c.scalar_type())},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(std::move(c));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data buffer 8-byte aligned
  replace_atomically(path, [&](const fs::path& tmp) {
    FileWriter out(tmp);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
    out.write(len, 8);
    out.write(text.data(), text.size());
    for (const auto& c : data) out.write(c.data_ptr(), c.numel() * c.element_size());
    out.sync_and_close();
  });
}

void save_checkpoint(const fs::path& dir,
                     const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     uint64_t max_shard_bytes) {
  fs::create_directories(dir);
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& entry : tensors) {
    const uint64_t n = entry.second.numel() * entry.second.element_size();
    if (shard_bytes > 0 && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += n;
    total += n;
  }
  if (shards.size() == 1) {
    save_safetensors(dir / "model.safetensors", shards[0], {{"format", "pt"}});
    return;
  }
  json weight_map = json::object();
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    save_safetensors(dir / name, shards[i], {{"format", "pt"}});
    for (const auto& [tensor, _] : shards[i]) weight_map[tensor] = name;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic(dir / "model.safetensors.index.json", index.dump(2));
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  replace_atomically(path, [&](const fs::path& tmp) {
    FileWriter out(tmp);
    out.write(content.data(), content.size());
    out.sync_and_close();
  });
}

}  // namespace mm
