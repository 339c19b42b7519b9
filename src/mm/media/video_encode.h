// Video encoding: RGB frames to a video file with FFmpeg (H.264 in MP4 for generated videos and
// synthetic datasets), and frames to numbered PNGs for inspection.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace mm {

struct VideoEncodeOptions {
  double fps = 8;  // frames per second, in (0, 1000]; stored as a rational (29.97 -> 2997/100)
  // Quality as libx264's constant rate factor, 0 (best) to 51 (worst); 18 is visually lossless.
  // The mpeg4 encoder has no CRF: it gets the fixed quantiser of the same step size,
  // round(3 * 2^((crf - 18) / 6)) clamped to [1, 31] (a CRF step of 6 doubles x264's step).
  int crf = 18;
  // "auto": libx264 when this FFmpeg build has it, else FFmpeg's native mpeg4 encoder.
  // "libx264" or "mpeg4": that encoder, or an error when the build lacks it.
  std::string encoder = "auto";

  // Throws mm::Error naming the field.
  void validate() const;
};

// What write_video wrote.
struct WrittenVideo {
  std::string encoder;  // "libx264" or "mpeg4"
  std::string codec;    // "h264" or "mpeg4", as ffprobe names it
  int64_t frames = 0;
  int64_t width = 0, height = 0;  // of the stored video: the input's, rounded up to even
};

// Writes `frames`, uint8 [T, height, width, 3] RGB (T >= 1, any strides and device), as a video
// whose container comes from the extension (.mp4, .mov, .mkv ...). Pixels are stored as yuv420p
// (BT.601 matrix, limited range, tagged so), which every player and decoder reads.
//
// yuv420p needs even sizes. An odd width or height is padded by one column or row repeating the
// edge pixels, so nothing is lost or resampled: the stored video is (height + height % 2) x
// (width + width % 2) and its top-left height x width crop is the input. (Cropping would drop
// content and resizing would blur it; refusing would make every caller pad.)
//
// Encoding is single-threaded, libx264 runs without macroblock-tree rate control (its AVX-512
// code made the bytes depend on earlier encodes in the process) and the muxer is bit-exact (no
// library version or time in the file), so the same frames and options give the same bytes with
// the same FFmpeg/x264 build; other builds may produce other (equally valid) bytes.
//
// Atomic: the file is written under `path` + ".tmp" and renamed over `path` once complete; on
// any error the temporary file is removed and nothing appears at `path`. Throws mm::Error naming
// `path` (and FFmpeg's message where FFmpeg failed) for bad frames or options, an extension with
// no known container, a missing encoder, or a file that cannot be written.
WrittenVideo write_video(const std::filesystem::path& path, const at::Tensor& frames,
                         const VideoEncodeOptions& options = {});

// Checks `path` before any work, for callers that would otherwise learn from write_video only after
// minutes of sampling that it cannot be written: a container that carries H.264 / MPEG-4 video (.mp4, .mov, .mkv;
// .gif, .webm and the rest are refused) and an existing parent directory. Throws mm::Error naming
// `path`.
void check_video_output_path(const std::filesystem::path& path);

// Writes `frames`, uint8 [T, height, width, 3] RGB, as dir/frame_000000.png, frame_000001.png ...
// (creating dir; each file atomic and lossless, see write_png). Throws mm::Error naming dir for
// bad frames or a directory that cannot be created.
void write_frames_png(const std::filesystem::path& dir, const at::Tensor& frames);

}  // namespace mm
