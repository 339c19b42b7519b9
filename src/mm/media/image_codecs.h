// Internal: one decoder per format, each returning uint8 [height, width, 3] RGB (see
// image_decode.h for the conversion rules). Errors name `name`.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mm::image_codecs {

// PIL refuses images above this many pixels (Image.MAX_IMAGE_PIXELS * 2, its hard error).
inline constexpr uint64_t kMaxPixels = 2ull * 89478485;

// Throws unless width x height is a sane image size.
void check_image_size(uint64_t width, uint64_t height, const std::string& name);

at::Tensor decode_jpeg(const uint8_t* data, size_t size, const std::string& name);
at::Tensor decode_png(const uint8_t* data, size_t size, const std::string& name);
at::Tensor decode_webp(const uint8_t* data, size_t size, const std::string& name);

}  // namespace mm::image_codecs
