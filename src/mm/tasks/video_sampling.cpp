#include "mm/tasks/video_sampling.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/models/diffusion/flow_sampler.h"
#include "mm/models/wan/wan_pipeline.h"

namespace mm {

void VideoSamplingOptions::validate() const {
  MM_CHECK(frames >= 1, "--frames: must be at least 1, got ", frames);
  MM_CHECK(height >= 16 && height % 16 == 0, "--size: the height must be a positive multiple of 16, got ", height);
  MM_CHECK(width >= 16 && width % 16 == 0, "--size: the width must be a positive multiple of 16, got ", width);
  MM_CHECK(steps >= 1, "--steps: must be at least 1, got ", steps);
  MM_CHECK(max_sequence_length >= 1, "max_sequence_length: must be at least 1");
}

int64_t wan_pixel_frames(const WanModel& model, const VideoSamplingOptions& o) {
  MM_CHECK(model.vae, "sampling needs the VAE (", model.dir.string(), "/vae)");
  const int64_t t = model.vae->config().temporal_compression();
  return std::max<int64_t>(o.frames / t * t + 1, 1);
}

namespace {

// The pipeline's latent shape: WanPipeline draws transformer in_channels of noise, the image
// pipeline the VAE's z_dim (its transformer also takes the condition channels).
std::vector<int64_t> latent_shape(const WanModel& model, int64_t batch, const VideoSamplingOptions& o, bool image) {
  const auto& vae = model.vae->config();
  const int64_t t = vae.temporal_compression(), s = vae.spatial_compression();
  const auto& patch = model.transformer->config().patch_size;
  MM_CHECK(o.height % (s * patch[1]) == 0 && o.width % (s * patch[2]) == 0, "--size: ", o.width, "x", o.height,
           " must be a multiple of ", s * patch[2], "x", s * patch[1], " (VAE compression times patch size)");
  const int64_t frames = wan_pixel_frames(model, o);
  const int64_t channels = image ? vae.z_dim : model.transformer->config().in_channels;
  return {batch, channels, (frames - 1) / t + 1, o.height / s, o.width / s};
}

// expand_timesteps (Wan2.2 TI2V): 1 everywhere but on latent frame 0, which holds the image
// latent: [1, 1, T', H', W'] float32 (all ones without an image).
at::Tensor first_frame_mask(const std::vector<int64_t>& shape, bool image) {
  auto mask = at::ones({1, 1, shape[2], shape[3], shape[4]}, at::kFloat);
  if (image) mask.select(2, 0).zero_();
  return mask;
}

at::Tensor timestep_input(const WanModel& model, const at::Tensor& t, const at::Tensor& latents,
                          const at::Tensor& mask) {
  const auto batch = latents.size(0);
  if (!model.config.expand_timesteps) return t.reshape({1}).expand({batch});
  // One timestep per patch token ((T' x H'/2 x W'/2) of them): t, but 0 on the image's tokens.
  const auto& patch = model.transformer->config().patch_size;
  using at::indexing::Slice;
  const auto grid = mask[0][0].index({Slice(0, at::indexing::None, patch[0]), Slice(0, at::indexing::None, patch[1]),
                                      Slice(0, at::indexing::None, patch[2])});
  return (grid * t).flatten().unsqueeze(0).expand({batch, -1});
}

// The denoising loop of both pipelines; `image` is null for text to video.
SampledVideo sample(WanModel& model, const at::Tensor& text, const at::Tensor& negative_text,
                    const WanImageConditioning* image, const VideoSamplingOptions& o, const at::Tensor& initial_latents,
                    const SamplingProgress& progress) {
  o.validate();
  MM_CHECK(model.transformer, "sampling needs the transformer (", model.dir.string(), "/transformer)");
  MM_CHECK(model.vae, "sampling needs the VAE (", model.dir.string(), "/vae)");
  const bool guided = o.guidance > 1.0;
  MM_CHECK(!guided || negative_text.defined(), "classifier-free guidance needs negative prompt embeddings");
  torch::NoGradGuard no_grad;
  const auto batch = text.size(0);
  const auto shape = latent_shape(model, batch, o, image != nullptr);
  // Everything runs where the transformer is; the noise is drawn on the CPU from the seed (as the
  // pipeline does with a CPU generator), so a seed gives the same video on every device.
  const auto device = model.transformer->parameters().front().device();
  at::Tensor latents;
  if (initial_latents.defined()) {
    MM_CHECK(initial_latents.sizes() == at::IntArrayRef(shape), "initial latents must be ", at::IntArrayRef(shape),
             ", got ", initial_latents.sizes());
    latents = initial_latents.to(device, at::kFloat);
  } else {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
    latents = at::randn(shape, generator, at::TensorOptions().dtype(at::kFloat)).to(device);
  }
  const bool expand = model.config.expand_timesteps;
  const auto mask = expand ? first_frame_mask(shape, image != nullptr).to(device) : at::Tensor();
  at::Tensor condition, image_embeds;
  const auto dtype = model.transformer->parameters().front().scalar_type();
  if (image) {
    condition = image->condition.to(device, at::kFloat);
    const auto expected = expand ? std::vector<int64_t>{batch, shape[1], 1, shape[3], shape[4]}
                                 : std::vector<int64_t>{batch, 4 + shape[1], shape[2], shape[3], shape[4]};
    MM_CHECK(condition.sizes() == at::IntArrayRef(expected), "the image condition must be ", at::IntArrayRef(expected),
             " for these options, got ", condition.sizes());
    if (image->image_embeds.defined()) image_embeds = image->image_embeds.repeat({batch, 1, 1}).to(device, dtype);
  }
  // The transformer input: the latents with the image latent over frame 0, or the condition
  // channels appended.
  const auto model_input = [&](const at::Tensor& x) {
    if (!image) return x;
    return expand ? (1 - mask) * condition + mask * x : at::cat({x, condition}, 1);
  };
  auto sampler = make_flow_sampler(model.dir / "scheduler" / "scheduler_config.json");
  sampler->set_timesteps(o.steps);
  const auto timesteps = sampler->timesteps();
  const auto cond = text.to(device, dtype), uncond = guided ? negative_text.to(device, dtype) : at::Tensor();
  for (int64_t i = 0; i < timesteps.size(0); ++i) {
    const auto t = timesteps[i];
    const double t_value = t.item<double>();
    auto& predictor = model.transformer_for(t_value);
    const bool low_noise = model.guidance_switches() && t_value < model.boundary_timestep();
    const double guidance = low_noise ? o.guidance_2.value_or(o.guidance) : o.guidance;
    const auto input = model_input(latents).to(dtype);
    const auto timestep = timestep_input(model, t.to(device), latents, mask);
    auto prediction = predictor->forward(input, timestep, cond, image_embeds);
    if (guided) {  // the unconditional pass keeps the image (only the text is negated)
      const auto unconditional = predictor->forward(input, timestep, uncond, image_embeds);
      prediction = unconditional + guidance * (prediction - unconditional);
    }
    latents = sampler->step(prediction, latents);
    if (progress) progress(i + 1, timesteps.size(0));
  }
  if (image && expand) latents = model_input(latents);
  SampledVideo out;
  out.latents = latents.to(at::kCPU);
  const auto vae_weight = model.vae->parameters().front();
  const auto raw = model.vae->denormalize_latents(latents.to(vae_weight.device(), vae_weight.scalar_type()));
  const auto decoded = o.tiled_decode ? model.vae->tiled_decode(raw, o.tiling) : model.vae->decode(raw);
  out.video = (decoded.to(at::kFloat) * 0.5 + 0.5).clamp(0, 1).to(at::kCPU);
  return out;
}

}  // namespace

SampledVideo sample_text_to_video_from_embeddings(WanModel& model, const at::Tensor& text,
                                                  const at::Tensor& negative_text, const VideoSamplingOptions& o,
                                                  const at::Tensor& initial_latents, const SamplingProgress& progress) {
  MM_CHECK(!model.config.image_to_video(), model.dir.string(), " is a ", model.config.class_name,
           ": it samples from an image (sample_image_to_video, `mmtrain infer t2v --image`)");
  return sample(model, text, negative_text, nullptr, o, initial_latents, progress);
}

SampledVideo sample_image_to_video_from_embeddings(WanModel& model, const at::Tensor& text,
                                                   const at::Tensor& negative_text,
                                                   const WanImageConditioning& conditioning,
                                                   const VideoSamplingOptions& o, const at::Tensor& initial_latents,
                                                   const SamplingProgress& progress) {
  MM_CHECK(model.config.image_to_video(), model.dir.string(), " is a ", model.config.class_name,
           " (text to video), not an image-to-video pipeline (WanImageToVideoPipeline)");
  MM_CHECK(conditioning.condition.defined(), "sample_image_to_video: the conditioning has no condition");
  return sample(model, text, negative_text, &conditioning, o, initial_latents, progress);
}

SampledVideo sample_text_to_video(WanModel& model, const std::vector<std::string>& prompts,
                                  const VideoSamplingOptions& o, const at::Tensor& initial_latents,
                                  const SamplingProgress& progress) {
  MM_CHECK(!prompts.empty(), "sampling needs at least one prompt");
  o.validate();
  const auto text = model.encode_prompts(prompts, o.max_sequence_length);
  at::Tensor negative;
  if (o.guidance > 1.0)
    negative = model.encode_prompts(std::vector<std::string>(prompts.size(), o.negative_prompt), o.max_sequence_length);
  return sample_text_to_video_from_embeddings(model, text, negative, o, initial_latents, progress);
}

at::Tensor video_to_uint8_frames(const at::Tensor& video) {
  MM_CHECK(video.dim() == 4 && video.size(0) == 3, "a video must be [3, frames, height, width], got ", video.sizes());
  return (video.permute({1, 2, 3, 0}).to(at::kFloat) * 255).to(at::kByte).contiguous();
}

}  // namespace mm
