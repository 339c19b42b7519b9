// JPEG through libjpeg(-turbo) with PIL's settings (ISLOW IDCT, fancy upsampling: the defaults).
// libjpeg reports errors by calling error_exit, whose default calls exit(); ours longjmps back
// into the small functions below, which hold only trivially destructible locals, so the jump
// skips no destructor. The decompressor itself lives in JpegReader, outside the jump.
#include <csetjmp>
#include <cstdio>
#include <jerror.h>
#include <jpeglib.h>

#include "mm/core/error.h"
#include "mm/media/image_codecs.h"

namespace mm::image_codecs {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg hands us a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg only warns on a truncated file (and pads it with grey); PIL refuses it, so do we.
// Other warnings (e.g. extraneous bytes before a marker) are ignored, as PIL does.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error(cinfo);
}

struct JpegReader {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  bool created = false;
  ~JpegReader() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

bool start(JpegReader& r, const uint8_t* data, size_t size) {
  r.cinfo.err = jpeg_std_error(&r.err.pub);
  r.err.pub.error_exit = on_error;
  r.err.pub.emit_message = on_message;
  if (setjmp(r.err.jump)) return false;
  jpeg_create_decompress(&r.cinfo);
  r.created = true;
  jpeg_mem_src(&r.cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&r.cinfo, TRUE);
  switch (r.cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: r.cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: r.cinfo.out_color_space = JCS_CMYK; break;
    default: r.cinfo.out_color_space = JCS_RGB; break;
  }
  jpeg_start_decompress(&r.cinfo);
  return true;
}

bool read_rows(JpegReader& r, uint8_t* out) {
  if (setjmp(r.err.jump)) return false;
  const size_t stride = size_t(r.cinfo.output_width) * r.cinfo.output_components;
  while (r.cinfo.output_scanline < r.cinfo.output_height) {
    JSAMPROW row = out + size_t(r.cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&r.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&r.cinfo);
  return true;
}

// PIL's CMYK -> RGB (Convert.c cmyk2rgb) after its Adobe-polarity inversion ("CMYK;I").
at::Tensor cmyk_to_rgb(const at::Tensor& raw) {
  at::Tensor cmyk = 255 - raw.to(at::kInt);
  at::Tensor nk = 255 - cmyk.select(2, 3).unsqueeze(2);
  at::Tensor t = cmyk.narrow(2, 0, 3) * nk + 128;
  at::Tensor muldiv255 = at::bitwise_right_shift(at::bitwise_right_shift(t, 8) + t, 8);
  return (nk - muldiv255).clamp(0, 255).to(at::kByte);
}

}  // namespace

at::Tensor decode_jpeg(const uint8_t* data, size_t size, const std::string& name) {
  JpegReader r;
  if (!start(r, data, size)) fail(name, ": corrupt or truncated JPEG image: ", r.err.message);
  check_image_size(r.cinfo.output_width, r.cinfo.output_height, name);
  const int64_t h = r.cinfo.output_height, w = r.cinfo.output_width, c = r.cinfo.output_components;
  at::Tensor raw = at::empty({h, w, c}, at::kByte);
  if (!read_rows(r, raw.data_ptr<uint8_t>())) {
    fail(name, ": corrupt or truncated JPEG image: ", r.err.message);
  }
  if (c == 1) return raw.expand({h, w, 3}).contiguous();
  if (c == 4) return cmyk_to_rgb(raw);
  return raw;
}

}  // namespace mm::image_codecs
