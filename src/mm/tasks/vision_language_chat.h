// What `mmtrain infer` and `mmtrain eval` ask of a vision-language model: render a conversation
// with the model's chat template and answer it. Each family implements it over its own processor
// and model (QwenVLChat); the registry opens one for a model directory.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "mm/tasks/generation.h"
#include "mm/tokenizer/chat_template.h"
#include "mm/tokenizer/model_chat_template.h"

namespace mm {

// How frames are taken from video files. Unset fields fall back to the model's
// video_preprocessor_config.json (which, by default, keeps every frame).
struct VideoOptions {
  std::optional<double> fps;          // frames per second to sample
  std::optional<int64_t> max_frames;  // upper bound on sampled frames
};

class VisionLanguageChat {
 public:
  virtual ~VisionLanguageChat() = default;
  // The prompt text (chat template with the assistant turn opened), before placeholder expansion.
  virtual std::string render(const std::vector<ChatMessage>& messages) const = 0;
  // The answer text, special tokens removed.
  virtual std::string reply(const std::vector<ChatMessage>& messages, const GenerationConfig& config,
                            const VideoOptions& video = {}) = 0;
  // The template render and reply use: the model directory's own (its variables and tools are
  // set here: --chat-kwarg, --tools).
  virtual ModelChatTemplate& chat_template() = 0;
};

}  // namespace mm
