#include "mm/media/image_decode.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "mm/core/error.h"
#include "mm/media/image_codecs.h"

namespace mm {
namespace {

bool starts_with(const uint8_t* data, size_t size, const char* magic, size_t offset = 0) {
  const size_t n = std::strlen(magic);
  return size >= offset + n && std::memcmp(data + offset, magic, n) == 0;
}

// A hint for formats PIL would open but we do not, so the message says what the file is.
std::string other_format_hint(const uint8_t* data, size_t size) {
  if (starts_with(data, size, "GIF8")) return " (it is a GIF)";
  if (starts_with(data, size, "BM")) return " (it looks like a BMP)";
  if (starts_with(data, size, "II*") || starts_with(data, size, "MM")) return " (it looks like a TIFF)";
  return "";
}

}  // namespace

ImageFormat detect_image_format(const uint8_t* data, size_t size) {
  if (starts_with(data, size, "\xFF\xD8\xFF")) return ImageFormat::kJpeg;
  if (starts_with(data, size, "\x89PNG\r\n\x1A\n")) return ImageFormat::kPng;
  if (starts_with(data, size, "RIFF") && starts_with(data, size, "WEBP", 8)) return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

at::Tensor decode_image_bytes(const uint8_t* data, size_t size, const std::string& name) {
  MM_CHECK(size > 0, name, ": is empty, not a JPEG, PNG or WebP image");
  switch (detect_image_format(data, size)) {
    case ImageFormat::kJpeg: return image_codecs::decode_jpeg(data, size, name);
    case ImageFormat::kPng: return image_codecs::decode_png(data, size, name);
    case ImageFormat::kWebp: return image_codecs::decode_webp(data, size, name);
    case ImageFormat::kUnknown: break;
  }
  fail(name, ": is not a JPEG, PNG or WebP image", other_format_hint(data, size));
}

at::Tensor decode_image(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MM_CHECK(in.good(), path.string(), ": cannot open the image file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MM_CHECK(!in.bad(), path.string(), ": cannot read the image file");
  return decode_image_bytes(bytes.data(), bytes.size(), path.string());
}

namespace image_codecs {

void check_image_size(uint64_t width, uint64_t height, const std::string& name) {
  MM_CHECK(width > 0 && height > 0, name, ": has an empty image size ", width, "x", height);
  MM_CHECK(width * height <= kMaxPixels, name, ": image of ", width, "x", height,
           " pixels exceeds the decompression-bomb limit of ", kMaxPixels, " pixels");
}

}  // namespace image_codecs
}  // namespace mm
