// `mmtrain infer t2v`: sample a video from a text prompt with a video-generation pipeline (Wan)
// and write it as an mp4 (and, with --frames-dir, as PNG
// frames). With --image (and --last-image for first-last-frame models) and an image-to-video
// pipeline, the video starts from that image. `mmtrain infer i2v` is the same command with
// --image required, the name docs/DESIGN.md gives image to video.
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/core/progress.h"
#include "mm/media/image_decode.h"
#include "mm/media/video_encode.h"
#include "mm/tasks/model_registry.h"

namespace fs = std::filesystem;

namespace mm::cli {
namespace {

struct VideoInferOptions {
  std::string command;  // "mmtrain infer t2v" or "mmtrain infer i2v", for errors
  std::string model;
  std::string prompt;
  std::string size = "832x480";
  std::string output = "out.mp4";
  std::string frames_dir;
  std::string image;       // image to video: the first frame
  std::string last_image;  // and the last (FLF2V)
  std::string dtype = "fp32";
  std::string device = "auto";
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

void run_video(VideoInferOptions& o) {
  if (o.threads > 0) torch::set_num_threads(o.threads);
  MM_CHECK(!o.prompt.empty(), "--prompt: required");
  const at::ScalarType dtype = dtype_option(o.dtype);
  std::tie(o.sampling.width, o.sampling.height) = parse_size(o.size);
  o.sampling.tiled_decode = o.tiled;
  o.sampling.validate();
  VideoEncodeOptions encode;
  encode.fps = o.fps;
  encode.validate();
  check_video_output_path(o.output);
  const c10::Device device = resolve_device(o.device, "--device");
  const ModelSpec& spec =
      model_spec_of(o.model, {ModelKind::text_to_video, ModelKind::image_to_video}, o.command);
  VideoRequest request;
  request.model = o.model;
  request.transformer = o.transformer;
  request.dtype = dtype;
  request.device = device;
  request.prompt = o.prompt;
  if (!o.image.empty()) request.image = decode_image(o.image);
  if (!o.last_image.empty()) request.last_image = decode_image(o.last_image);
  request.sampling = o.sampling;
  ProgressBar bar(o.sampling.steps, "sampling");
  bar.report_every(10);
  request.on_step = [&](int64_t step) { bar.update(step); };
  const SampledVideo sample = spec.generate_video(request);
  bar.finish();
  const auto frames = video_to_uint8_frames(sample.video[0]);
  const auto written = write_video(o.output, frames, encode);
  if (!o.frames_dir.empty()) write_frames_png(o.frames_dir, frames);
  std::cout << o.output << ": " << written.frames << " frames, " << written.width << "x" << written.height << ", "
            << written.codec << "\n";
}

// One video command: `name` is t2v or i2v; i2v requires --image (which pipelines take it is the
// pipeline's to say: a WanImageToVideoPipeline, or a TI2V WanPipeline).
void add_video_command(CLI::App& infer, const std::string& name, const std::string& description, bool image_required) {
  auto options = std::make_shared<VideoInferOptions>();
  options->command = "mmtrain infer " + name;
  options->sampling.steps = 50;
  CLI::App* cmd = infer.add_subcommand(name, description);
  cmd->add_option("--model", options->model, "diffusers pipeline directory (e.g. WanPipeline, WanImageToVideoPipeline)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt", options->prompt, "What the video shows")->required();
  CLI::Option* image = cmd->add_option(
      "--image", options->image,
      "First frame (JPEG/PNG/WebP), for an image-to-video pipeline (WanImageToVideoPipeline, or Wan2.2 TI2V)");
  image->check(CLI::ExistingFile);
  if (image_required) image->required();
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
  cmd->add_option("--device", options->device, "auto (a GPU when there is one), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = libtorch's default)")->capture_default_str();
  cmd->callback([options] { run_video(*options); });
}

}  // namespace

void add_video_infer_commands(CLI::App& infer) {
  add_video_command(infer, "t2v",
                    "Text (and, with --image, image) to video with a diffusers pipeline (`mmtrain models` lists "
                    "them); writes an mp4",
                    /*image_required=*/false);
  add_video_command(infer, "i2v",
                    "Image to video: infer t2v with --image required (WanImageToVideoPipeline, Wan2.2 TI2V); "
                    "writes an mp4",
                    /*image_required=*/true);
}

}  // namespace mm::cli
