#include "mm/train/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>

#include "mm/core/error.h"
#include "src/mm/train/tensorboard_event.pb.h"

namespace mm {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto& table = crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir / str_cat("events.out.tfevents.", static_cast<int64_t>(now_seconds()), ".", host,
                        ".", ::getpid(), ".mmtrain");
  file_ = std::fopen(path_.c_str(), "ab");
  MM_CHECK(file_, "cannot create TensorBoard event file ", path_.string());
  mm::tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(0);
  event.set_file_version("brain.Event:2");
  write_record(event.SerializeAsString());
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  mm::tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::write_record(const std::string& data) {
  uint8_t header[12];
  const uint64_t length = data.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<uint8_t>(length >> (8 * i));  // little-endian
  const uint32_t length_crc = masked_crc32c(header, 8);
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<uint8_t>(length_crc >> (8 * i));
  const uint32_t data_crc = masked_crc32c(data.data(), data.size());
  uint8_t footer[4];
  for (int i = 0; i < 4; ++i) footer[i] = static_cast<uint8_t>(data_crc >> (8 * i));
  const bool ok = std::fwrite(header, 1, 12, file_) == 12 &&
                  std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
                  std::fwrite(footer, 1, 4, file_) == 4;
  MM_CHECK(ok, "cannot write TensorBoard event file ", path_.string());
}

void TensorBoardWriter::flush() {
  MM_CHECK(std::fflush(file_) == 0, "cannot flush TensorBoard event file ", path_.string());
}

}  // namespace mm
