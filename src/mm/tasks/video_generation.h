// What `mmtrain infer t2v` asks of a video-generation family: one video from a prompt (and, for
// image-to-video models, a first and optionally a last frame). The registry maps a pipeline
// directory to its family's implementation (generate_wan_video for Wan).
#pragma once
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <string>

#include "mm/tasks/video_sampling.h"

namespace mm {

struct VideoRequest {
  std::filesystem::path model;              // the pipeline directory
  std::string transformer = "transformer";  // its folder holding the DiT to sample with
  at::ScalarType dtype = at::kFloat;        // weights and compute
  c10::Device device = c10::kCPU;           // where every part of the pipeline runs
  std::string prompt;
  at::Tensor image;       // [H, W, 3] uint8 first frame (image to video), or undefined
  at::Tensor last_image;  // the last frame (first-last-frame models), or undefined
  VideoSamplingOptions sampling;
  std::function<void(int64_t step)> on_step;  // after every sampling step
};

}  // namespace mm
