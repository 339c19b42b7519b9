// TensorBoard scalar logs without TensorFlow: an events.out.tfevents.* file of Event protos in
// TFRecord framing (u64 length, masked CRC32C of the length, the bytes, masked CRC32C of them).
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace mm {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new events.out.tfevents.<unix time>.<host>.<pid>.mmtrain file in it,
  // opened with the file_version event TensorBoard expects first. A resumed run gets a new file
  // in the same directory; TensorBoard merges them.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// CRC-32C (Castagnoli) and TFRecord's masking of it; exposed for tests.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace mm
