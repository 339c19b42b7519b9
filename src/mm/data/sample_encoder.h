// Conversation -> TrainSample for Qwen-VL fine-tuning: the chat template over the whole
// conversation (no generation prompt), media decoded and preprocessed, placeholders expanded,
// text tokenized, assistant turns marked as targets, M-RoPE positions computed.
//
// Which tokens are supervised (loss_on_assistant_only): the content of each assistant turn plus
// its closing <|im_end|>; not the "<|im_start|>assistant\n" header, not the "\n" after <|im_end|>.
// The whole conversation is rendered once, with the record's tools, and cut into turns at each
// <|im_start|>; the turns that open with "<|im_start|>assistant\n" are the replies (one per
// assistant message, or the sample is refused). <|im_start|> is an added token, which the
// tokenizer matches before BPE, so per-turn ids concatenate to exactly the ids of the whole
// text. Inside an assistant turn the header and the content are
// tokenized together; byte-level BPE can merge the header's "\n" with content that starts with
// whitespace ("\n\n"): that one straddling token is then supervised (it carries content bytes).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "mm/data/conversation.h"
#include "mm/models/qwen2_vl/qwen2_vl_processor.h"
#include "mm/data/train_sample.h"
#include "mm/models/qwen_vl/qwen_vl_config.h"
#include "mm/tokenizer/bpe_tokenizer.h"
#include "mm/tokenizer/model_chat_template.h"

namespace mm {

// data.truncation: what happens to a sample longer than max_seq_len.
enum class Truncation { drop, right };

struct SampleEncoderOptions {
  int64_t max_seq_len = 2048;
  // drop: a sample longer than max_seq_len is skipped (too_long). right: the text tail is cut
  // to max_seq_len, unless that would remove any vision token (the media would no longer match
  // the placeholders), in which case the sample is dropped too.
  Truncation truncation = Truncation::drop;
  // false: every token after the first is a target.
  bool loss_on_assistant_only = true;
  // Per-image pixel limits overriding the processor config (images only).
  std::optional<int64_t> max_pixels, min_pixels;
  double video_fps = 2.0;        // frames sampled per second of video; <= 0: the processor config's
  int64_t video_max_frames = 0;  // > 0: at most this many frames per video

  void validate() const;  // errors name the field
};

class SampleEncoder {
 public:
  // `chat_template`: the model directory's own (ModelChatTemplate::from_dir), or the built-in
  // Qwen2-VL one by default.
  SampleEncoder(const Tokenizer& tokenizer, const Qwen2VLProcessor& processor, const QwenVLConfig& config,
                SampleEncoderOptions options = {}, ModelChatTemplate chat_template = {});

  // Throws SampleError with the reason (missing/corrupt media, too long, placeholder mismatch,
  // no supervised tokens), naming the conversation by `where` (default "sample <index>").
  // Thread-safe (const, no shared mutable state).
  TrainSample encode(const Conversation& conversation, const std::string& where = "") const;

  // Cheap length estimate for length grouping, without decoding media: the text tokens plus, per
  // image, the tokens an image at max_pixels would take, and per video the tokens of one frame
  // pair at the video max_pixels (an upper bound for images, a rough guess for videos).
  int64_t estimate_length(const Conversation& conversation) const;

  const SampleEncoderOptions& options() const { return options_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Qwen2VLProcessor& processor() const { return processor_; }
  const QwenVLConfig& config() const { return config_; }

 private:
  // The chat template over the whole conversation and its tools; errors become SampleErrors.
  std::string render(const Conversation& conversation, const std::string& where) const;

  Tokenizer tokenizer_;
  Qwen2VLProcessor processor_;
  QwenVLConfig config_;
  SampleEncoderOptions options_;
  ModelChatTemplate chat_template_;
  int64_t im_end_id_ = -1, newline_id_ = -1;
  std::vector<int64_t> assistant_header_ids_;  // "<|im_start|>assistant\n"
};

}  // namespace mm
