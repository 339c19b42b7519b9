#include "mm/tasks/vlm_chat.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/media/image_decode.h"
#include "mm/media/video_decode.h"

namespace mm {
namespace {

VideoSampling sampling_for(const Qwen2VLPreprocessConfig& config, const VideoOptions& options) {
  VideoSampling sampling = config.video_sampling();
  if (options.fps) {
    sampling.fps = options.fps;
    sampling.num_frames.reset();
  }
  if (options.max_frames && *options.max_frames > 0) sampling.max_frames = *options.max_frames;
  return sampling;
}

}  // namespace

QwenVLChat::QwenVLChat(const std::filesystem::path& model_dir, torch::Dtype dtype, c10::Device device)
    : tokenizer_(Tokenizer::from_dir(model_dir)),
      processor_(Qwen2VLProcessor::from_pretrained(model_dir)),
      chat_template_(ModelChatTemplate::from_dir(model_dir)),
      model_(QwenVLForConditionalGenerationImpl::from_pretrained(model_dir, dtype, device)) {
  // Inputs are prepared on the CPU; the model moves them to its device (generation.cpp).
  model_->eval();
  if (chat_template_.is_builtin())
    log::warn(model_dir.string(), " ships no chat template (chat_template.jinja, chat_template.json or ",
              "tokenizer_config.json's chat_template): prompts are rendered with the built-in Qwen2-VL template");
}

std::string QwenVLChat::render(const std::vector<ChatMessage>& messages) const {
  return chat_template_.render(messages, /*add_generation_prompt=*/true);
}

QwenVLInputs QwenVLChat::prepare(const std::vector<ChatMessage>& messages,
                                         const VideoOptions& video) const {
  std::vector<at::Tensor> images, videos;
  std::vector<VideoFrameTimes> video_times;
  const VideoSampling sampling = sampling_for(processor_.video_config(), video);
  for (const auto& message : messages)
    for (const auto& part : message.content) {
      if (part.kind == ContentPart::Kind::image) {
        images.push_back(decode_image(part.source));
      } else if (part.kind == ContentPart::Kind::video) {
        DecodedVideo decoded = decode_video(part.source, sampling);
        videos.push_back(decoded.frames);
        video_times.push_back(frame_times_of(decoded));
      }
    }

  QwenVLInputs inputs;
  if (!images.empty()) {
    VisionInputs v = processor_.preprocess_images(images);
    inputs.pixel_values = v.pixel_values;
    inputs.image_grid_thw = v.grid_thw;
  }
  std::vector<std::vector<double>> video_timestamps;
  if (!videos.empty()) {
    VideoInputs v = processor_.preprocess_videos(videos, video_times);
    inputs.pixel_values_videos = v.pixel_values;
    inputs.video_grid_thw = v.grid_thw;
    inputs.second_per_grid_ts = v.second_per_grid_ts;
    video_timestamps = v.timestamps;
  }
  const std::string text =
      processor_.expand_placeholders(render(messages), inputs.image_grid_thw, inputs.video_grid_thw, video_timestamps);
  const std::vector<int64_t> ids = tokenizer_.encode(text);
  inputs.input_ids = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  return inputs;
}

std::vector<int64_t> QwenVLChat::generate_ids(const QwenVLInputs& inputs,
                                              GenerationConfig config) {
  if (auto eos = tokenizer_.eos_token_id()) config.stop_token_ids.push_back(*eos);
  torch::NoGradGuard no_grad;
  return generate(model_, inputs, config);
}

std::string QwenVLChat::reply(const std::vector<ChatMessage>& messages,
                              const GenerationConfig& config, const VideoOptions& video) {
  return tokenizer_.decode(generate_ids(prepare(messages, video), config),
                           /*skip_special_tokens=*/true);
}

}  // namespace mm
