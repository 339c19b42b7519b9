// What text-to-video data needs from FFmpeg beyond decode_video (video_decode.h): a clip's size,
// frame count and frame rate without decoding pixels (to assign buckets for a whole dataset up
// front), and the decoding of an explicit list of frame indices, handed over one frame at a time
// so a long high-resolution clip is resized frame by frame instead of held whole in memory.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

namespace mm {

struct VideoProbe {
  int64_t width = 0, height = 0;  // the video stream's coded frame size
  int64_t frames = 0;  // the container's frame count, or (where it has none) the counted packets
  double fps = 0;      // average frame rate; 0 when the stream does not say
};

// Reads the stream headers (and, only for containers without a frame count such as Matroska,
// demuxes the packets to count them; nothing is decoded). Throws mm::Error naming the file for a
// missing or unreadable file or a file without a video stream. A video with no frames is returned
// with frames == 0: callers decide what that means.
VideoProbe probe_video(const std::filesystem::path& path);

// Decodes the first video stream sequentially and calls visit(k, rgb) for each k with
// indices[k] the frame just decoded; rgb is uint8 [height, width, 3], valid only during the call.
// indices must be non-decreasing (a repeated index visits the same frame again). Colour
// conversion is decode_video's (the stream's matrix and range, bicubic chroma). Throws mm::Error
// naming the file when it cannot be decoded or holds fewer frames than indices.back() + 1.
void decode_video_frames(const std::filesystem::path& path, const std::vector<int64_t>& indices,
                         const std::function<void(size_t k, const at::Tensor& rgb)>& visit);

}  // namespace mm
