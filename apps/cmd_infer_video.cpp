// `mmtrain infer t2v`: sample a video from a text prompt with a Wan pipeline and write it as an
// mp4 (and, with --frames-dir, as PNG frames). With --image (and --last-image for first-last-frame
// models) and a WanImageToVideoPipeline, the video starts from that image.
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "commands.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/core/progress.h"
#include "mm/data/image_decode.h"
#include "mm/data/video_encode.h"
#include "mm/models/sora_model.h"
#include "mm/tasks/video_sampling.h"

namespace fs = std::filesystem;

namespace mm::cli {
namespace {

struct VideoInferOptions {
  std::string model;
  std::string prompt;
  std::string size = "832x480";
  std::string output = "out.mp4";
  std::string frames_dir;
  std::string image;       // image to video: the first frame
  std::string last_image;  // and the last (FLF2V)
  std::string dtype = "fp32";
  std::string transformer = "transformer";  // the pipeline folder holding the DiT to sample with
  double fps = 16;
  int threads = 0;
  bool tiled = false;
  VideoSamplingOptions sampling;
};

// "WxH" -> (width, height).
std::pair<int64_t, int64_t> parse_size(const std::string& text) {
  const auto x = text.find('x');
  try {
    MM_CHECK(x != std::string::npos, "");
    size_t used = 0;
    const int64_t w = std::stoll(text.substr(0, x), &used);
    MM_CHECK(used == x, "");
    const int64_t h = std::stoll(text.substr(x + 1), &used);
    MM_CHECK(used == text.size() - x - 1, "");
    return {w, h};
  } catch (const std::exception&) {
    fail("--size '", text, "': expected WIDTHxHEIGHT, e.g. 832x480");
  }
}

// A pipeline directory whose weight folders hold no .safetensors (a template such as
// examples/wan/tiny-synth) is refused here with what to do, not by the first loader that finds none.
void check_has_weights(const fs::path& dir, const std::string& transformer) {
  std::vector<std::string> empty;
  for (const std::string part : {std::string("text_encoder"), std::string("vae"), transformer}) {
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

void run_t2v(VideoInferOptions& o) {
  if (o.threads > 0) torch::set_num_threads(o.threads);
  MM_CHECK(!o.prompt.empty(), "--prompt: required");
  MM_CHECK(o.dtype == "fp32" || o.dtype == "bf16", "--dtype '", o.dtype, "' is not supported (fp32 or bf16)");
  std::tie(o.sampling.width, o.sampling.height) = parse_size(o.size);
  o.sampling.tiled_decode = o.tiled;
  o.sampling.validate();
  VideoEncodeOptions encode;
  encode.fps = o.fps;
  encode.validate();
  check_video_output_path(o.output);
  check_has_weights(o.model, o.transformer);
  const auto start = std::chrono::steady_clock::now();
  WanLoadOptions load;
  load.dtype = o.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  load.transformer_folder = o.transformer;
  auto model = WanModel::from_pretrained(o.model, load);
  MM_CHECK(!o.sampling.guidance_2 || model->transformer_2, "--guidance-2: ", o.model,
           " has one transformer; the low-noise expert's guidance applies to two-expert pipelines (Wan2.2 A14B)");
  // The pipeline would round another count down; a user who asked for it is told instead.
  const int64_t t = model->vae->config().temporal_compression();
  const int64_t lower = (std::max<int64_t>(o.sampling.frames, 1) - 1) / t * t + 1;
  MM_CHECK(wan_pixel_frames(*model, o.sampling) == o.sampling.frames, "--frames ", o.sampling.frames,
           ": this pipeline's VAE makes 1 + ", t, "k frames; use ", lower, " or ", lower + t);
  log::info("loaded ", o.model, " (", o.dtype, ") in ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  const bool i2v = model->config.image_to_video();
  MM_CHECK(o.last_image.empty() || !o.image.empty(), "--last-image: needs --image (the first frame)");
  MM_CHECK(!i2v || !o.image.empty(), "--image: required, since ", o.model, " is a ", model->config.class_name,
           " (image to video)");
  MM_CHECK(i2v || o.image.empty(), "--image: ", o.model, " is a ", model->config.class_name,
           " (text to video); image to video needs a WanImageToVideoPipeline");
  ProgressBar bar(o.sampling.steps, "sampling");
  bar.report_every(10);
  const auto on_step = [&](int64_t step, int64_t) { bar.update(step); };
  SampledVideo sample;
  if (i2v) {
    const auto image = decode_image(o.image);
    const auto last = o.last_image.empty() ? at::Tensor() : decode_image(o.last_image);
    sample = sample_image_to_video(*model, {o.prompt}, image, o.sampling, last, {}, on_step);
  } else {
    sample = sample_text_to_video(*model, {o.prompt}, o.sampling, {}, on_step);
  }
  bar.finish();
  const auto frames = video_to_uint8_frames(sample.video[0]);
  const auto written = write_video(o.output, frames, encode);
  if (!o.frames_dir.empty()) write_frames_png(o.frames_dir, frames);
  std::cout << o.output << ": " << written.frames << " frames, " << written.width << "x" << written.height << ", "
            << written.codec << "\n";
}

}  // namespace

void add_video_infer_commands(CLI::App& infer) {
  auto options = std::make_shared<VideoInferOptions>();
  options->sampling.steps = 50;
  CLI::App* cmd = infer.add_subcommand(
      "t2v", "Text (and, with --image, image) to video with a Wan pipeline (diffusers layout); writes an mp4");
  cmd->add_option("--model", options->model, "diffusers Wan pipeline directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt", options->prompt, "What the video shows")->required();
  cmd->add_option("--image", options->image,
                  "First frame (JPEG/PNG/WebP), for an image-to-video pipeline (WanImageToVideoPipeline)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--last-image", options->last_image, "Last frame, for first-last-frame models (Wan2.1 FLF2V)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--negative-prompt", options->sampling.negative_prompt, "What to steer away from (with --guidance > 1)");
  cmd->add_option("--frames", options->sampling.frames, "Frames: 1 + 4k for Wan's VAE (another count is refused, naming the nearest)")->capture_default_str();
  cmd->add_option("--size", options->size, "WIDTHxHEIGHT, multiples of 16")->capture_default_str();
  cmd->add_option("--steps", options->sampling.steps, "Sampling steps")->capture_default_str();
  cmd->add_option("--guidance", options->sampling.guidance, "Classifier-free guidance scale (<= 1: none)")->capture_default_str();
  cmd->add_option("--guidance-2", options->sampling.guidance_2, "Guidance of the low-noise expert (two-expert pipelines)");
  cmd->add_option("--seed", options->sampling.seed, "Noise seed (same seed, same video)")->capture_default_str();
  cmd->add_option("--max-sequence-length", options->sampling.max_sequence_length, "Prompt tokens")->capture_default_str();
  cmd->add_option("-o,--output", options->output, "Output video (.mp4, .mkv, .mov)")->capture_default_str();
  cmd->add_option("--frames-dir", options->frames_dir, "Also write every frame as PNG into this directory");
  cmd->add_option("--fps", options->fps, "Frame rate of the written video")->capture_default_str();
  cmd->add_flag("--tiled", options->tiled, "Tiled VAE decode (bounded memory for large videos)");
  cmd->add_option("--transformer", options->transformer,
                  "The pipeline folder of the DiT to sample with, e.g. transformer_ema of a training run's final/")
      ->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "Weights and compute dtype: fp32 or bf16")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = libtorch's default)")->capture_default_str();
  cmd->callback([options] { run_t2v(*options); });
}

}  // namespace mm::cli
