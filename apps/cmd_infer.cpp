// `mmtrain infer`: answer a prompt (or a whole conversation) about images and videos.
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "commands.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/tasks/vlm_chat.h"
#include "mm/tokenizer/chat_template.h"

namespace mm::cli {
namespace {

struct InferOptions {
  std::string model;
  std::vector<std::string> images;
  std::vector<std::string> videos;
  std::string prompt;
  std::string system;
  std::string messages;
  std::string dtype = "fp32";
  int threads = 0;
  double video_fps = 2.0;
  int64_t video_frames = 0;
  bool greedy = false;
  bool show_prompt = false;
  GenerationConfig generation;
};

torch::Dtype parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return torch::kFloat32;
  if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
  fail("--dtype '", name, "' is not supported (fp32 or bf16)");
}

std::vector<ChatMessage> messages_from(const InferOptions& o) {
  if (!o.messages.empty()) {
    MM_CHECK(o.images.empty() && o.videos.empty() && o.prompt.empty(),
             "--messages takes the whole conversation: do not combine it with --prompt, --image or --video");
    return parse_messages_file(o.messages);
  }
  MM_CHECK(!o.prompt.empty(), "give --prompt (with any --image/--video) or --messages FILE");
  std::vector<ChatMessage> messages;
  if (!o.system.empty())
    messages.push_back({"system", {ContentPart{ContentPart::Kind::text, o.system, ""}}});
  ChatMessage user{"user", {}};
  for (const auto& image : o.images) user.content.push_back({ContentPart::Kind::image, "", image});
  for (const auto& video : o.videos) user.content.push_back({ContentPart::Kind::video, "", video});
  user.content.push_back({ContentPart::Kind::text, o.prompt, ""});
  messages.push_back(std::move(user));
  return messages;
}

void run_infer(InferOptions& o) {
  if (o.threads > 0) torch::set_num_threads(o.threads);
  if (o.greedy) o.generation.greedy = true;
  o.generation.validate();
  VideoOptions video;
  if (o.video_fps > 0) video.fps = o.video_fps;
  if (o.video_frames > 0) video.max_frames = o.video_frames;
  const auto start = std::chrono::steady_clock::now();
  Qwen2_5_VLChat chat(o.model, parse_dtype(o.dtype));
  log::info("loaded ", o.model, " (", o.dtype, ") in ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  const auto messages = messages_from(o);
  if (o.show_prompt) std::cerr << chat.render(messages) << "\n";
  std::cout << chat.reply(messages, o.generation, video) << std::endl;
}

}  // namespace

void add_infer_command(CLI::App& app) {
  auto options = std::make_shared<InferOptions>();
  options->generation.greedy = false;
  options->generation.max_new_tokens = 128;
  CLI::App* cmd = app.add_subcommand(
      "infer", "Answer a prompt about images and videos with a vision-language model (Qwen2.5-VL); "
               "`infer t2v` generates a video from text (Wan)");
  cmd->add_option("--model", options->model, "Hugging Face model directory")->check(CLI::ExistingDirectory);
  cmd->add_option("--image", options->images, "Image file (JPEG, PNG, WebP); repeat for several")->check(CLI::ExistingFile);
  cmd->add_option("--video", options->videos, "Video file (anything FFmpeg reads); repeat for several")->check(CLI::ExistingFile);
  cmd->add_option("--prompt", options->prompt, "The user's question or instruction");
  cmd->add_option("--system", options->system, "System prompt (default: the model's chat template default)");
  cmd->add_option("--messages", options->messages,
                  "JSON file with OpenAI-style messages (content parts: text, image, video)")->check(CLI::ExistingFile);
  cmd->add_option("--max-new-tokens", options->generation.max_new_tokens, "Most tokens to generate")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--greedy", options->greedy, "Greedy decoding (the default is sampling with the options below)");
  cmd->add_option("--temperature", options->generation.temperature, "Sampling temperature")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-p", options->generation.top_p, "Nucleus sampling: keep the smallest set with this mass")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", options->generation.top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", options->generation.seed, "Sampling seed (same seed, same answer)")->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "Weights and compute dtype: fp32 or bf16")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = libtorch's default)")->capture_default_str();
  cmd->add_option("--video-fps", options->video_fps, "Frames per second sampled from videos (0 = as the model's video_preprocessor_config.json says)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--video-frames", options->video_frames, "Most frames taken from a video (0 = the processor's limit)")->capture_default_str();
  cmd->add_flag("--show-prompt", options->show_prompt, "Print the rendered chat prompt to stderr");
  add_video_infer_commands(*cmd);
  cmd->callback([cmd, options] {
    if (!cmd->get_subcommands().empty()) return;  // `infer t2v` ran instead
    // A usage error (exit status 2), as the option's required() would give without `infer t2v`.
    if (options->model.empty()) throw CLI::RequiredError("--model");
    run_infer(*options);
  });
}

}  // namespace mm::cli
