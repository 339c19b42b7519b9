// WebP through libwebp's animation decoder, the API PIL uses (first frame of an animation, RGBA
// with straight alpha, which convert("RGB") then drops).
#include <webp/demux.h>

#include <cstring>
#include <memory>

#include "mm/core/error.h"
#include "mm/media/image_codecs.h"

namespace mm::image_codecs {

at::Tensor decode_webp(const uint8_t* data, size_t size, const std::string& name) {
  WebPAnimDecoderOptions options;
  MM_CHECK(WebPAnimDecoderOptionsInit(&options), name, ": libwebp version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData input{data, size};
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> decoder(
      WebPAnimDecoderNew(&input, &options), WebPAnimDecoderDelete);
  MM_CHECK(decoder, name, ": corrupt or truncated WebP image");
  WebPAnimInfo info;
  MM_CHECK(WebPAnimDecoderGetInfo(decoder.get(), &info), name, ": corrupt WebP image");
  check_image_size(info.canvas_width, info.canvas_height, name);
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  MM_CHECK(WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp), name,
           ": corrupt or truncated WebP image (cannot decode its first frame)");
  const int64_t h = info.canvas_height, w = info.canvas_width;
  at::Tensor out = at::empty({h, w, 3}, at::kByte);
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < h * w; ++i) std::memcpy(dst + 3 * i, rgba + 4 * i, 3);
  return out;
}

}  // namespace mm::image_codecs
