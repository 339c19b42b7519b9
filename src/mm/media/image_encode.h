// Image encoding: RGB pixels to PNG files (libpng), for synthetic datasets and debugging dumps.
// The output is deterministic (fixed compression settings, no time or text chunks): the same
// pixels always give the same bytes.
#pragma once
#include <ATen/core/Tensor.h>

#include <filesystem>

namespace mm {

// Writes `rgb`, uint8 [height, width, 3] (any strides, CPU), as an 8-bit RGB PNG. Atomic: the
// bytes go to a temporary file beside `path`, which is renamed over `path` once complete, so a
// reader never sees a half-written image. Throws mm::Error naming the path for a tensor of the
// wrong dtype/shape or a file that cannot be written.
void write_png(const std::filesystem::path& path, const at::Tensor& rgb);

}  // namespace mm
