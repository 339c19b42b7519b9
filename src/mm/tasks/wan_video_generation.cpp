#include "mm/tasks/wan_video_generation.h"

#include <torch/torch.h>

#include <chrono>

#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/models/wan/wan_pipeline.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

// A pipeline directory whose weight folders hold no .safetensors (a template such as
// examples/wan/tiny-synth) is refused here with what to do, not by the first loader that finds none.
void check_has_weights(const fs::path& dir, const std::string& transformer) {
  std::vector<std::string> empty;
  for (const std::string& part : {std::string("text_encoder"), std::string("vae"), transformer}) {
    std::error_code ec;
    if (!fs::is_directory(dir / part, ec)) continue;  // named by the loader
    bool has_weights = false;
    for (const auto& entry : fs::directory_iterator(dir / part, ec))
      has_weights |= entry.path().extension() == ".safetensors";
    if (!has_weights) empty.push_back(part + "/");
  }
  if (empty.empty()) return;
  std::string parts;
  for (const auto& part : empty) parts += (parts.empty() ? "" : ", ") + part;
  fail(dir.string(), " has no weights in ", parts, ": it is a template or an incomplete download. Sample a trained "
       "run's final/ (mmtrain train examples/wan/t2v_synth.yaml, see examples/wan/README.md) or a diffusers Wan "
       "pipeline with its weights (e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers)");
}

}  // namespace

SampledVideo generate_wan_video(const VideoRequest& r) {
  check_has_weights(r.model, r.transformer);
  const auto start = std::chrono::steady_clock::now();
  WanLoadOptions load;
  load.dtype = r.dtype;
  load.transformer_folder = r.transformer;
  load.device = r.device;
  auto model = WanModel::from_pretrained(r.model, load);
  MM_CHECK(!r.sampling.guidance_2 || model->transformer_2, "--guidance-2: ", r.model.string(),
           " has one transformer; the low-noise expert's guidance applies to two-expert pipelines (Wan2.2 A14B)");
  // The pipeline would round another count down; a user who asked for it is told instead.
  const int64_t t = model->vae->config().temporal_compression();
  const int64_t lower = (std::max<int64_t>(r.sampling.frames, 1) - 1) / t * t + 1;
  MM_CHECK(wan_pixel_frames(*model, r.sampling) == r.sampling.frames, "--frames ", r.sampling.frames,
           ": this pipeline's VAE makes 1 + ", t, "k frames; use ", lower, " or ", lower + t);
  log::info("loaded ", r.model.string(), " (", r.dtype, ", ", r.device.str(), ") in ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  const bool i2v = model->config.image_to_video();
  MM_CHECK(!r.last_image.defined() || r.image.defined(), "--last-image: needs --image (the first frame)");
  MM_CHECK(!i2v || r.image.defined(), "--image: required, since ", r.model.string(), " is a ",
           model->config.class_name, " (image to video)");
  MM_CHECK(i2v || !r.image.defined(), "--image: ", r.model.string(), " is a ", model->config.class_name,
           " (text to video); image to video needs a WanImageToVideoPipeline");
  const auto on_step = [&](int64_t step, int64_t) {
    if (r.on_step) r.on_step(step);
  };
  if (i2v) return sample_image_to_video(*model, {r.prompt}, r.image, r.sampling, r.last_image, {}, on_step);
  return sample_text_to_video(*model, {r.prompt}, r.sampling, {}, on_step);
}

}  // namespace mm
