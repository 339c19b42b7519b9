// Text-to-video sampling with a Wan model, step for step as diffusers' WanPipeline: prompt and
// negative prompt embedded (max_sequence_length tokens, zeros after each prompt), latents drawn
// in fp32 from a CPU generator seeded with `seed` (the same numbers as
// torch.Generator().manual_seed(seed)), the sampler's timesteps, classifier-free guidance when
// guidance > 1 (uncond + g * (cond - uncond), guidance_2 for the low-noise expert of a two-expert
// model), the latents de-normalized and decoded by the VAE (tiled when asked).
//
// Image to video, step for step as diffusers' WanImageToVideoPipeline (implemented in
// image_to_video.cpp): the image resized to height x width as the pipeline's VideoProcessor does
// for a PIL image (PIL's Lanczos, aspect ratio not kept) and scaled to [-1, 1]; for Wan2.1-I2V the
// CLIP tokens of the original image (hidden_states[-2]), given to both guidance passes; the
// condition: Wan2.1 layout - the normalized VAE latents of [image, zeros..., (last image)] after a
// 4-channel frame mask, concatenated to the noise as transformer input; Wan2.2 TI2V
// (expand_timesteps) - the normalized latent of the image written over the first latent frame
// before every step and at the end, whose tokens get timestep 0. Noise has the VAE's z_dim channels.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mm/models/wan/wan_vae.h"

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
  at::Tensor latents;  // [B, z, T', H', W'] float32 on the CPU: the final latents (normalized space)
  at::Tensor video;    // [B, 3, F, H, W] float32 in [0, 1] on the CPU (the pipeline's "np" output, channels first)
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

// What an image-to-video sample is conditioned on (the pipeline's encode_image + prepare_latents).
struct WanImageConditioning {
  at::Tensor image;         // [1, 3, H, W] float32 in [-1, 1]: the first frame as the VAE sees it
  at::Tensor last_image;    // the same for the last frame (first-last-frame models), or undefined
  // [1, tokens, image_dim] CLIP tokens of the image, [2, tokens, image_dim] (first, last) with a
  // last image; undefined when the transformer has no image_dim (Wan2.2). Repeated per video.
  at::Tensor image_embeds;
  // float32. Wan2.1 layout: [B, 4 + z, T', H', W'], the frame mask (1 for the given frames; the
  // first pixel frame counted 4 times so that it fills latent frame 0's 4 channels) then the
  // normalized latents of [image, zeros..., (last image)]. expand_timesteps: [B, z, 1, H', W'],
  // the normalized latent of the image alone.
  at::Tensor condition;
};

// PIL's Image.resize(..., LANCZOS) on uint8 [H, W, 3] -> uint8 [height, width, 3], the same bytes
// as Pillow 13 (separable passes in Pillow's order, 22-bit fixed-point coefficients, rounded and
// clipped per pass).
at::Tensor resize_lanczos_like_pil(const at::Tensor& image, int64_t height, int64_t width);

// The pipeline's video_processor.preprocess(PIL image, height, width): uint8 [H, W, 3] RGB ->
// float32 [1, 3, height, width] in [-1, 1].
at::Tensor preprocess_video_image(const at::Tensor& image, int64_t height, int64_t width);

// image / last_image: uint8 [H, W, 3] RGB (last_image undefined unless the model interpolates
// between a first and a last frame); batch: the number of videos. Throws mm::Error naming the
// pipeline when it is not an image-to-video one.
WanImageConditioning prepare_image_conditioning(WanModel& model, const at::Tensor& image, const at::Tensor& last_image,
                                                int64_t batch, const VideoSamplingOptions& options);

// The Wan2.1 layout's condition (the part of prepare_latents after the image preprocessing):
// first [B, 3, H, W] in [-1, 1] (each video's own first frame) and, for first-last-frame models,
// last of the same shape (else undefined), for videos of `frames` pixel frames (1 + k * the VAE's
// temporal compression) -> float32 [B, 4 + z, T', H', W'], the frame mask then the normalized VAE
// latents (posterior mean) of [first, zeros..., (last)]. Training conditions on a clip's own
// frames through it; sampling on the given image.
at::Tensor wan_frame_condition(WanModel& model, const at::Tensor& first, const at::Tensor& last, int64_t frames);

// Frames [B, 3, H, W] in [-1, 1] -> uint8 [B, H, W, 3] RGB (rounded), as a PIL image of each would
// hold them: what the CLIP image processor takes.
at::Tensor frames_as_rgb8(const at::Tensor& frames);

// One video per prompt, all starting from `image` (uint8 [H, W, 3] RGB) and, for first-last-frame
// models, ending at `last_image`. Needs a WanImageToVideoPipeline.
SampledVideo sample_image_to_video(WanModel& model, const std::vector<std::string>& prompts, const at::Tensor& image,
                                   const VideoSamplingOptions& options, const at::Tensor& last_image = {},
                                   const at::Tensor& initial_latents = {}, const SamplingProgress& progress = {});

// Sampling from given prompt embeddings (as sample_text_to_video_from_embeddings) and a prepared
// conditioning whose condition has the batch of `text`.
SampledVideo sample_image_to_video_from_embeddings(WanModel& model, const at::Tensor& text,
                                                   const at::Tensor& negative_text,
                                                   const WanImageConditioning& conditioning,
                                                   const VideoSamplingOptions& options,
                                                   const at::Tensor& initial_latents = {},
                                                   const SamplingProgress& progress = {});

// The pixel frame count sampled for options.frames: rounded down to 1 + k * the VAE's temporal
// compression, as the pipelines do.
int64_t wan_pixel_frames(const WanModel& model, const VideoSamplingOptions& options);

// One video [3, F, H, W] in [0, 1] -> uint8 frames [F, H, W, 3] as diffusers' export_to_video
// converts them (x * 255 truncated).
at::Tensor video_to_uint8_frames(const at::Tensor& video);

}  // namespace mm
