// Text-to-video sampling with a Wan model, step for step as diffusers' WanPipeline: prompt and
// negative prompt embedded (max_sequence_length tokens, zeros after each prompt), latents drawn
// in fp32 from a CPU generator seeded with `seed` (the same numbers as
// torch.Generator().manual_seed(seed)), the sampler's timesteps, classifier-free guidance when
// guidance > 1 (uncond + g * (cond - uncond), guidance_2 for the low-noise expert of a two-expert
// model), the latents de-normalized and decoded by the VAE (tiled when asked).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mm/models/ae/wan_vae.h"

namespace mm {

class WanModel;

struct VideoSamplingOptions {
  int64_t frames = 81;      // 1 + 4k for Wan's VAE (rounded down to it, as the pipeline does)
  int64_t height = 480;     // multiples of 16
  int64_t width = 832;
  int64_t steps = 50;
  double guidance = 5.0;    // <= 1: no classifier-free guidance (one predictor call per step)
  std::optional<double> guidance_2;  // the low-noise expert's guidance (default: guidance)
  uint64_t seed = 0;
  std::string negative_prompt;
  int64_t max_sequence_length = 512;
  bool tiled_decode = false;
  WanVAETiling tiling;

  // Throws mm::Error naming the option (as "--frames" etc. for the CLI's sake).
  void validate() const;
};

struct SampledVideo {
  at::Tensor latents;  // [B, z, T', H', W'] float32: the final latents (normalized space)
  at::Tensor video;    // [B, 3, F, H, W] float32 in [0, 1] (the pipeline's "np" output, channels first)
};

// Called after every step with (step index, steps), e.g. for a progress bar.
using SamplingProgress = std::function<void(int64_t, int64_t)>;

// One video per prompt. `initial_latents` replaces the seeded noise when given ([B, z, T', H', W']).
SampledVideo sample_text_to_video(WanModel& model, const std::vector<std::string>& prompts,
                                  const VideoSamplingOptions& options, const at::Tensor& initial_latents = {},
                                  const SamplingProgress& progress = {});

// Sampling from given prompt embeddings (as the pipeline's prompt_embeds / negative_prompt_embeds):
// text [B, L, d]; negative_text [B, L, d] or undefined (only allowed without guidance).
SampledVideo sample_text_to_video_from_embeddings(WanModel& model, const at::Tensor& text,
                                                  const at::Tensor& negative_text, const VideoSamplingOptions& options,
                                                  const at::Tensor& initial_latents = {},
                                                  const SamplingProgress& progress = {});

// One video [3, F, H, W] in [0, 1] -> uint8 frames [F, H, W, 3] as diffusers' export_to_video
// converts them (x * 255 truncated).
at::Tensor video_to_uint8_frames(const at::Tensor& video);

}  // namespace mm
