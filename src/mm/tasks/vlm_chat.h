// The Qwen-VL (Qwen2-VL, Qwen2.5-VL) chat pipeline, as transformers' processor + generate run it: render the
// conversation with the chat template, decode and preprocess its images and videos, expand the
// placeholders, tokenize, generate, decode the answer.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "mm/models/qwen2_vl/qwen2_vl_processor.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "mm/tasks/generation.h"
#include "mm/tasks/vision_language_chat.h"
#include "mm/tokenizer/bpe_tokenizer.h"
#include "mm/tokenizer/chat_template.h"
#include "mm/tokenizer/model_chat_template.h"

namespace mm {

class QwenVLChat : public VisionLanguageChat {
 public:
  // model_dir: a Hugging Face Qwen2-VL or Qwen2.5-VL directory (config, safetensors, tokenizer and
  // preprocessor configs).
  QwenVLChat(const std::filesystem::path& model_dir, torch::Dtype dtype = torch::kFloat32,
             c10::Device device = c10::Device(c10::kCPU));

  // The prompt text (the model directory's own chat template, or the built-in Qwen2-VL one when
  // it ships none, with the assistant turn opened), before placeholder expansion.
  std::string render(const std::vector<ChatMessage>& messages) const override;

  // Model inputs for a conversation: media decoded from each part's `source`, preprocessed,
  // placeholders expanded to one token per merged patch, text tokenized. Batch of one.
  QwenVLInputs prepare(const std::vector<ChatMessage>& messages, const VideoOptions& video = {}) const;

  // New token ids (the stop token included when one ends the answer). Stops at the model's eos
  // ids, the tokenizer's eos token and config.stop_token_ids.
  std::vector<int64_t> generate_ids(const QwenVLInputs& inputs, GenerationConfig config);

  // The answer text, special tokens removed.
  std::string reply(const std::vector<ChatMessage>& messages, const GenerationConfig& config,
                    const VideoOptions& video = {}) override;

  ModelChatTemplate& chat_template() override { return chat_template_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Qwen2VLProcessor& processor() const { return processor_; }
  QwenVLForConditionalGeneration& model() { return model_; }

 private:
  Tokenizer tokenizer_;
  Qwen2VLProcessor processor_;
  ModelChatTemplate chat_template_;
  QwenVLForConditionalGeneration model_{nullptr};
};

}  // namespace mm
