#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "mm/core/error.h"
#include "mm/media/video_decode.h"

namespace mm {
namespace {

std::vector<int64_t> qwen3_vl_frame_indices(int64_t total_frames, double video_fps, const VideoSampling& s,
                                            const std::string& name) {
  int64_t count = total_frames;
  if (s.num_frames) {
    count = *s.num_frames;
  } else if (s.fps) {
    MM_CHECK(video_fps > 0, name, ": sampling at ", *s.fps, " fps needs the video's frame rate, which is unknown");
    // Python's int() of the float product truncates toward zero.
    const auto n = static_cast<int64_t>(static_cast<double>(total_frames) / video_fps * *s.fps);
    count = std::min({std::max(n, s.min_frames), s.max_frames, total_frames});
  } else {
    std::vector<int64_t> all(static_cast<size_t>(total_frames));
    for (int64_t i = 0; i < total_frames; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  MM_CHECK(count > 0, name, ": frame sampling selects no frames (num_frames ", count, ")");
  // More frames than the video has repeat some of them, as in the reference (decode_video fills
  // repeated indices with the same frame).
  // numpy.linspace: i * step from 0, the last point exactly the end; then round half to even.
  std::vector<int64_t> indices(static_cast<size_t>(count));
  const double last = static_cast<double>(total_frames - 1);
  const double step = count > 1 ? last / static_cast<double>(count - 1) : 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double x = i + 1 == count && count > 1 ? last : static_cast<double>(i) * step;
    indices[static_cast<size_t>(i)] = static_cast<int64_t>(std::nearbyint(x));
  }
  return indices;
}

}  // namespace

std::vector<int64_t> sample_frame_indices(int64_t total_frames, double video_fps,
                                          const VideoSampling& s, const std::string& name) {
  MM_CHECK(total_frames > 0, name, ": has no frames to sample");
  MM_CHECK(!(s.fps && s.num_frames), name,
           ": frame sampling by fps and by num_frames are mutually exclusive");
  MM_CHECK(s.temporal_patch_size > 0, name, ": temporal_patch_size must be positive");
  const double tps = static_cast<double>(s.temporal_patch_size);
  if (s.rule == FrameRule::qwen3_vl) return qwen3_vl_frame_indices(total_frames, video_fps, s, name);
  std::optional<double> count;
  if (s.num_frames) {
    count = std::nearbyint(static_cast<double>(*s.num_frames) / tps) * tps;  // half to even
  } else if (s.fps) {
    MM_CHECK(video_fps > 0, name, ": sampling at ", *s.fps,
             " fps needs the video's frame rate, which is unknown");
    const double max_frames =
        std::floor(static_cast<double>(std::min(s.max_frames, total_frames)) / tps) * tps;
    double n = static_cast<double>(total_frames) / video_fps * *s.fps;
    n = std::min({std::max(n, static_cast<double>(s.min_frames)), max_frames,
                  static_cast<double>(total_frames)});
    count = std::floor(n / tps) * tps;
  }
  std::vector<int64_t> indices;
  if (!count) {
    indices.resize(total_frames);
    for (int64_t i = 0; i < total_frames; ++i) indices[i] = i;
    return indices;
  }
  MM_CHECK(*count <= static_cast<double>(total_frames), name, ": cannot sample ", *count,
           " frames from a video of ", total_frames, " frames");
  MM_CHECK(*count > 0, name, ": frame sampling selects no frames (", total_frames,
           " frames, temporal_patch_size ", s.temporal_patch_size, ")");
  // The reference builds the indices with a float32 arange; the same op gives the same indices.
  at::Tensor idx = torch::arange(0, total_frames, static_cast<double>(total_frames) / *count,
                                 torch::kFloat)
                       .to(torch::kInt);
  const int* values = idx.data_ptr<int>();
  indices.assign(values, values + idx.numel());
  return indices;
}

double DecodedVideo::sampled_fps() const {
  if (total_frames <= 0 || fps <= 0) return fps > 0 ? fps : 24.0;
  return static_cast<double>(frame_indices.size()) / static_cast<double>(total_frames) * fps;
}

}  // namespace mm
