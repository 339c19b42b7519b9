// PNG through libpng. libpng reports errors by longjmp to png_jmpbuf; the functions that set it
// hold only trivially destructible locals, and everything owned lives in PngReader outside them.
// Transformations reproduce what PIL's PNG plugin + convert("RGB") do (see image_decode.h).
#include <png.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "mm/core/error.h"
#include "mm/media/image_codecs.h"

namespace mm::image_codecs {
namespace {

struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char message[256] = "";
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, channels = 0;
  size_t row_bytes = 0;
  ~PngReader() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

void on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // e.g. a bad ancillary chunk: PIL reads on too

void read_from_memory(png_structp png, png_bytep out, png_size_t length) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (length > r->size - r->pos) png_error(png, "file is truncated");
  std::memcpy(out, r->data + r->pos, length);
  r->pos += length;
}

bool read_header(PngReader& r) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_set_read_fn(r.png, &r, read_from_memory);
  png_read_info(r.png, r.info);
  png_get_IHDR(r.png, r.info, &r.width, &r.height, &r.bit_depth, &r.color_type, nullptr, nullptr,
               nullptr);
  // Palette -> RGB (RGBA with tRNS; the alpha is dropped below, as PIL's convert("RGB") does).
  if (r.color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
  // 1/2/4-bit grey scale up to 0..255 (PIL's "1", "L;2", "L;4" modes do the same).
  if (r.color_type == PNG_COLOR_TYPE_GRAY && r.bit_depth < 8) png_set_expand_gray_1_2_4_to_8(r.png);
  // 16-bit keeps its high byte (PIL's ";16B" raw modes), except plain 16-bit grey: PIL opens it
  // as "I;16", whose conversion to RGB clips the full value, so we need all 16 bits there.
  if (r.bit_depth == 16 && r.color_type != PNG_COLOR_TYPE_GRAY) png_set_strip_16(r.png);
  png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  r.channels = png_get_channels(r.png, r.info);
  r.row_bytes = png_get_rowbytes(r.png, r.info);
  return true;
}

bool read_rows(PngReader& r, png_bytepp rows) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_read_image(r.png, rows);  // PIL stops after the image data too: no png_read_end
  return true;
}

}  // namespace

at::Tensor decode_png(const uint8_t* data, size_t size, const std::string& name) {
  PngReader r;
  r.data = data;
  r.size = size;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
  MM_CHECK(r.png, name, ": cannot create a PNG reader");
  r.info = png_create_info_struct(r.png);
  MM_CHECK(r.info, name, ": cannot create a PNG reader");
  if (!read_header(r)) fail(name, ": corrupt or truncated PNG image: ", r.message);
  check_image_size(r.width, r.height, name);

  const int64_t h = r.height, w = r.width;
  const bool grey16 = r.bit_depth == 16 && r.color_type == PNG_COLOR_TYPE_GRAY;
  const int64_t bytes_per_sample = grey16 ? 2 : 1;
  MM_CHECK(r.row_bytes == size_t(w * r.channels * bytes_per_sample), name,
           ": unexpected PNG row layout");
  at::Tensor raw = at::empty({h, w, r.channels * bytes_per_sample}, at::kByte);
  std::vector<png_bytep> rows(h);
  for (int64_t y = 0; y < h; ++y) rows[y] = raw.data_ptr<uint8_t>() + y * r.row_bytes;
  if (!read_rows(r, rows.data())) fail(name, ": corrupt or truncated PNG image: ", r.message);

  if (grey16) {  // big-endian samples, clipped like PIL's I;16 -> RGB
    at::Tensor value = raw.select(2, 0).to(at::kInt) * 256 + raw.select(2, 1).to(at::kInt);
    return value.clamp_max(255).to(at::kByte).unsqueeze(2).expand({h, w, 3}).contiguous();
  }
  if (r.channels <= 2) return raw.narrow(2, 0, 1).expand({h, w, 3}).contiguous();  // grey(+alpha)
  return raw.narrow(2, 0, 3).contiguous();                                         // RGB(A)
}

}  // namespace mm::image_codecs
