// PNG through libpng into memory, then one write + rename. libpng reports errors by longjmp;
// the function that sets the jump buffer holds only trivially destructible locals.
#include "mm/media/image_encode.h"

#include <png.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "mm/core/error.h"

namespace mm {
namespace {

struct PngWriter {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::vector<uint8_t> bytes;
  char message[256] = "";
  ~PngWriter() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
  }
};

void on_error(png_structp png, png_const_charp message) {
  auto* w = static_cast<PngWriter*>(png_get_error_ptr(png));
  std::snprintf(w->message, sizeof w->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void append_bytes(png_structp png, png_bytep data, png_size_t length) {
  auto* w = static_cast<PngWriter*>(png_get_io_ptr(png));
  w->bytes.insert(w->bytes.end(), data, data + length);
}

void flush_nothing(png_structp) {}

bool encode(PngWriter& w, png_uint_32 width, png_uint_32 height, png_bytepp rows) {
  if (setjmp(png_jmpbuf(w.png))) return false;
  png_set_write_fn(w.png, &w, append_bytes, flush_nothing);
  png_set_IHDR(w.png, w.info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(w.png, 6);
  png_write_info(w.png, w.info);
  png_write_image(w.png, rows);
  png_write_end(w.png, nullptr);
  return true;
}

}  // namespace

void write_png(const std::filesystem::path& path, const at::Tensor& rgb) {
  MM_CHECK(rgb.defined() && rgb.dim() == 3 && rgb.size(2) == 3 && rgb.scalar_type() == at::kByte,
           path.string(), ": write_png expects uint8 [height, width, 3] RGB, got ",
           rgb.defined() ? rgb.sizes() : at::IntArrayRef{}, " ",
           rgb.defined() ? std::string(c10::toString(rgb.scalar_type())) : "undefined");
  MM_CHECK(rgb.size(0) > 0 && rgb.size(1) > 0 && rgb.size(0) <= 0x7fffffff && rgb.size(1) <= 0x7fffffff,
           path.string(), ": cannot write an image of size ", rgb.sizes());
  const at::Tensor pixels = rgb.to(at::kCPU).contiguous();
  const auto height = static_cast<png_uint_32>(pixels.size(0));
  const auto width = static_cast<png_uint_32>(pixels.size(1));
  std::vector<png_bytep> rows(height);
  auto* base = pixels.data_ptr<uint8_t>();
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = base + static_cast<size_t>(y) * width * 3;

  PngWriter w;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, on_error, on_warning);
  MM_CHECK(w.png, path.string(), ": cannot create a PNG writer");
  w.info = png_create_info_struct(w.png);
  MM_CHECK(w.info, path.string(), ": cannot create a PNG writer");
  MM_CHECK(encode(w, width, height, rows.data()), path.string(), ": PNG encoding failed: ", w.message);

  auto temp = path;
  temp += ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    MM_CHECK(out, path.string(), ": cannot open ", temp.string(), " for writing");
    out.write(reinterpret_cast<const char*>(w.bytes.data()), static_cast<std::streamsize>(w.bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      fail(path.string(), ": writing ", w.bytes.size(), " bytes failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    fail(path.string(), ": cannot rename ", temp.string(), " into place: ", ec.message());
  }
}

}  // namespace mm
