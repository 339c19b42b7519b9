// Image decoding: JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp) into RGB pixels, with the
// same RGB conversion PIL's `Image.open(f).convert("RGB")` applies, which is what transformers'
// image processors see for PIL inputs (`convert_to_rgb` is a plain `convert("RGB")`):
//   - alpha is dropped, never composited (RGBA, LA, palette with tRNS, WebP with alpha);
//   - greyscale is replicated into R, G and B; palette entries are looked up;
//   - 16-bit PNG samples keep their high byte, except 16-bit greyscale without alpha, which PIL
//     opens as mode "I;16" and clips to 255 (so values above 255 become white);
//   - CMYK JPEGs are read with Adobe (inverted) polarity and converted with PIL's formula.
// EXIF orientation is not applied (transformers' `load_image` applies it, the processors do not).
// The format comes from the magic bytes, never from the file name.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace mm {

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };

// The format the first bytes announce (kUnknown for anything else, including an empty buffer).
ImageFormat detect_image_format(const uint8_t* data, size_t size);

// Returns uint8 [height, width, 3] RGB, contiguous. Throws mm::Error naming the file for a file
// that is missing, empty, not a JPEG/PNG/WebP, truncated or corrupt, or larger than PIL's
// decompression-bomb limit.
at::Tensor decode_image(const std::filesystem::path& path);

// Same for an in-memory file; `name_for_errors` is what error messages call it.
at::Tensor decode_image_bytes(const uint8_t* data, size_t size, const std::string& name_for_errors);

}  // namespace mm
