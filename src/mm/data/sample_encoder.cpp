#include "mm/data/sample_encoder.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/media/image_decode.h"
#include "mm/data/sample_errors.h"
#include "mm/media/video_decode.h"

namespace mm {
namespace {

const std::string kImStart = "<|im_start|>";

Qwen2VLProcessor with_pixel_limits(const Qwen2VLProcessor& processor, const SampleEncoderOptions& options) {
  Qwen2VLPreprocessConfig image = processor.image_config();
  if (options.max_pixels) image.max_pixels = *options.max_pixels;
  if (options.min_pixels) image.min_pixels = *options.min_pixels;
  image.validate("SampleEncoderOptions (min_pixels / max_pixels)");
  return Qwen2VLProcessor(image, processor.video_config());
}

size_t count_occurrences(const std::string& text, const std::string& token) {
  size_t n = 0;
  for (size_t p = text.find(token); p != std::string::npos; p = text.find(token, p + token.size())) ++n;
  return n;
}

std::string token_string(const Tokenizer& tokenizer, int64_t id, const char* what) {
  auto s = tokenizer.id_to_token(id);
  MM_CHECK(s.has_value(), "SampleEncoder: the tokenizer has no token for ", what, " id ", id);
  return *s;
}

// Rows [first, first + n) of a grid, or undefined when n == 0.
torch::Tensor grid_rows(const torch::Tensor& grid, int64_t first, int64_t n) {
  return n == 0 ? torch::Tensor() : grid.narrow(0, first, n);
}

struct DecodedMedia {
  std::vector<at::Tensor> images, videos;
  std::vector<VideoFrameTimes> video_times;
};

DecodedMedia decode_media(const std::vector<ChatMessage>& messages, const VideoSampling& sampling,
                          const std::string& where) {
  DecodedMedia media;
  for (const auto& message : messages)
    for (const auto& part : message.content) {
      if (part.kind == ContentPart::Kind::text) continue;
      const bool image = part.kind == ContentPart::Kind::image;
      std::error_code ec;
      if (part.source.empty() || !std::filesystem::is_regular_file(part.source, ec))
        throw SampleError(SkipReason::missing_media,
                          str_cat(where, ": ", image ? "image" : "video", " file not found: '", part.source, "'"));
      try {
        if (image) {
          media.images.push_back(decode_image(part.source));
        } else {
          DecodedVideo v = decode_video(part.source, sampling);
          media.videos.push_back(v.frames);
          media.video_times.push_back(frame_times_of(v));
        }
      } catch (const Error& e) {
        throw SampleError(SkipReason::corrupt_media, str_cat(where, ": ", e.what()));
      }
    }
  return media;
}

}  // namespace

void SampleEncoderOptions::validate() const {
  MM_CHECK(max_seq_len > 1, "data.max_seq_len must be > 1, got ", max_seq_len);
  MM_CHECK(!max_pixels || *max_pixels > 0, "data.max_pixels must be positive");
  MM_CHECK(!min_pixels || *min_pixels > 0, "data.min_pixels must be positive");
  MM_CHECK(video_max_frames >= 0, "data.video_max_frames must be >= 0");
}

SampleEncoder::SampleEncoder(const Tokenizer& tokenizer, const Qwen2VLProcessor& processor,
                             const QwenVLConfig& config, SampleEncoderOptions options,
                             ModelChatTemplate chat_template)
    : tokenizer_(tokenizer),
      processor_(with_pixel_limits(processor, options)),
      config_(config),
      options_(std::move(options)),
      chat_template_(std::move(chat_template)) {
  options_.validate();
  // Message-by-message tokenization is exact only because <|im_start|> is matched before BPE.
  MM_CHECK(tokenizer_.token_to_id(kImStart).has_value(), "SampleEncoder: the tokenizer lacks the added token ",
           kImStart);
  auto im_end = tokenizer_.token_to_id("<|im_end|>");
  MM_CHECK(im_end.has_value(), "SampleEncoder: the tokenizer lacks the token <|im_end|>");
  im_end_id_ = *im_end;
  const auto newline = tokenizer_.encode("\n", /*add_special_tokens=*/false);
  MM_CHECK(newline.size() == 1, "SampleEncoder: \"\\n\" is not a single token");
  newline_id_ = newline[0];
  assistant_header_ids_ = tokenizer_.encode(kImStart + "assistant\n", false);
}

TrainSample SampleEncoder::encode(const Conversation& conversation, const std::string& where_arg) const {
  const std::string where = where_arg.empty() ? str_cat("sample ", conversation.index) : where_arg;
  const auto& messages = conversation.messages;
  size_t assistant_messages = 0;
  for (const auto& m : messages) assistant_messages += m.role == "assistant";
  if (options_.loss_on_assistant_only && assistant_messages == 0)
    throw SampleError(SkipReason::no_supervised_tokens, str_cat(where, ": no assistant turn"));

  // Render before decoding media, so placeholder problems cost no decode.
  const std::string text = render(conversation, where);
  const std::string image_pad = token_string(tokenizer_, config_.image_token_id, "image_token_id");
  const std::string video_pad = token_string(tokenizer_, config_.video_token_id, "video_token_id");
  size_t n_images = 0, n_videos = 0;
  for (const auto& m : messages)
    for (const auto& p : m.content) {
      n_images += p.kind == ContentPart::Kind::image;
      n_videos += p.kind == ContentPart::Kind::video;
    }
  const size_t image_slots = count_occurrences(text, image_pad), video_slots = count_occurrences(text, video_pad);
  if (image_slots != n_images || video_slots != n_videos)
    throw SampleError(SkipReason::placeholder_mismatch,
                      str_cat(where, ": the text holds ", image_slots, " image and ", video_slots,
                              " video placeholders for ", n_images, " images and ", n_videos, " videos"));

  VideoSampling sampling = processor_.video_config().video_sampling();
  if (options_.video_fps > 0) {
    sampling.fps = options_.video_fps;
    sampling.num_frames.reset();
  }
  if (options_.video_max_frames > 0) sampling.max_frames = options_.video_max_frames;
  DecodedMedia media = decode_media(messages, sampling, where);

  TrainSample sample;
  std::vector<std::vector<double>> video_timestamps;  // Qwen3-VL's, per video
  sample.index = conversation.index;
  sample.type = conversation.type;
  try {
    if (!media.images.empty()) {
      VisionInputs v = processor_.preprocess_images(media.images);
      sample.pixel_values = v.pixel_values;
      sample.image_grid_thw = v.grid_thw;
    }
    if (!media.videos.empty()) {
      VideoInputs v = processor_.preprocess_videos(media.videos, media.video_times);
      sample.pixel_values_videos = v.pixel_values;
      sample.video_grid_thw = v.grid_thw;
      sample.second_per_grid_ts = v.second_per_grid_ts;
      video_timestamps = std::move(v.timestamps);
    }
  } catch (const Error& e) {
    throw SampleError(SkipReason::corrupt_media, str_cat(where, ": ", e.what()));
  }

  // Turn by turn: each rendered turn runs from its "<|im_start|>" to the next one (text before the
  // first is a turn of its own), and the supervised turns are those the template opened as the
  // assistant's. They are found in the render of the whole conversation, not message by message:
  // templates render a message by what follows it (Qwen3's drop the thinking of replies before
  // the last user query; consecutive tool responses share one turn), so the render of a prefix
  // of the messages is not a prefix of the render.
  std::vector<size_t> starts;
  for (size_t p = text.find(kImStart); p != std::string::npos; p = text.find(kImStart, p + 1)) starts.push_back(p);
  if (starts.empty() || starts.front() != 0) starts.insert(starts.begin(), 0);
  std::vector<int64_t> ids;
  std::vector<uint8_t> supervised;
  int64_t image_row = 0, video_row = 0;
  size_t assistant_turns = 0;
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t begin = starts[k], end = k + 1 < starts.size() ? starts[k + 1] : text.size();
    const std::string segment = text.substr(begin, end - begin);
    const bool assistant_turn = segment.rfind(kImStart + "assistant\n", 0) == 0;
    assistant_turns += assistant_turn;
    const int64_t seg_images = static_cast<int64_t>(count_occurrences(segment, image_pad));
    const int64_t seg_videos = static_cast<int64_t>(count_occurrences(segment, video_pad));
    const std::vector<std::vector<double>> seg_timestamps =
        video_timestamps.empty() ? video_timestamps
                                 : std::vector<std::vector<double>>(video_timestamps.begin() + video_row,
                                                                    video_timestamps.begin() + video_row + seg_videos);
    const std::string expanded = processor_.expand_placeholders(
        segment, grid_rows(sample.image_grid_thw, image_row, seg_images),
        grid_rows(sample.video_grid_thw, video_row, seg_videos), seg_timestamps, image_pad, video_pad);
    image_row += seg_images;
    video_row += seg_videos;
    const std::vector<int64_t> seg_ids = tokenizer_.encode(expanded, /*add_special_tokens=*/false);
    std::vector<uint8_t> seg_sup(seg_ids.size(), 0);
    if (assistant_turn && options_.loss_on_assistant_only) {
      // seg_ids = header, content..., <|im_end|>, "\n"
      const size_t h = assistant_header_ids_.size();
      MM_CHECK(seg_ids.size() >= h + 1 && std::equal(assistant_header_ids_.begin(), assistant_header_ids_.end() - 1,
                                                     seg_ids.begin()),
               where, ": assistant turn ", k, " does not start with the assistant header tokens");
      const size_t first = std::equal(assistant_header_ids_.begin(), assistant_header_ids_.end(), seg_ids.begin())
                               ? h
                               : h - 1;  // the header's "\n" merged into the content's first token
      MM_CHECK(seg_ids.size() >= first + 2 && seg_ids[seg_ids.size() - 2] == im_end_id_ &&
                   seg_ids.back() == newline_id_,
               where, ": assistant turn ", k, " does not end with <|im_end|>\\n");
      std::fill(seg_sup.begin() + first, seg_sup.end() - 1, 1);
    }
    ids.insert(ids.end(), seg_ids.begin(), seg_ids.end());
    supervised.insert(supervised.end(), seg_sup.begin(), seg_sup.end());
  }
  // A template that renders some assistant message otherwise (or invents a reply) would move the
  // loss onto the wrong text: refused, for every sample alike.
  MM_CHECK(assistant_turns == assistant_messages, where, ": the chat template (", chat_template_.source(),
           ") rendered ", assistant_turns, " assistant turns for ", assistant_messages,
           " assistant messages; the loss mask needs one \"<|im_start|>assistant\\n\" turn per reply");
  if (!options_.loss_on_assistant_only) std::fill(supervised.begin() + 1, supervised.end(), 1);

  int64_t len = static_cast<int64_t>(ids.size());
  if (len > options_.max_seq_len) {
    if (options_.truncation == Truncation::drop)
      throw SampleError(SkipReason::too_long,
                        str_cat(where, ": ", len, " tokens > max_seq_len ", options_.max_seq_len));
    for (int64_t p = options_.max_seq_len; p < len; ++p)
      if (ids[p] == config_.vision_start_token_id || ids[p] == config_.vision_end_token_id ||
          ids[p] == config_.image_token_id || ids[p] == config_.video_token_id)
        throw SampleError(SkipReason::too_long,
                          str_cat(where, ": ", len, " tokens > max_seq_len ", options_.max_seq_len,
                                  " and cutting the tail would cut an image or video"));
    len = options_.max_seq_len;
    ids.resize(len);
    supervised.resize(len);
  }

  std::vector<int64_t> targets(len, kIgnoreIndex);
  bool any = false;
  for (int64_t p = 0; p + 1 < len; ++p)
    if (supervised[p + 1]) {
      targets[p] = ids[p + 1];
      any = true;
    }
  if (!any) throw SampleError(SkipReason::no_supervised_tokens, str_cat(where, ": no supervised tokens"));

  sample.input_ids = torch::tensor(ids, torch::kInt64);
  sample.targets = torch::tensor(targets, torch::kInt64);
  QwenVLInputs inputs;
  inputs.input_ids = sample.input_ids.unsqueeze(0);
  inputs.image_grid_thw = sample.image_grid_thw;
  inputs.video_grid_thw = sample.video_grid_thw;
  inputs.second_per_grid_ts = sample.second_per_grid_ts;
  sample.position_ids = qwen_vl_rope_index(config_, inputs).position_ids.select(1, 0).contiguous();
  return sample;
}

std::string SampleEncoder::render(const Conversation& conversation, const std::string& where) const {
  // The record's own tools; a template's refusal (raise_exception, tools for the built-in
  // template) is this record's problem, skipped and counted like any malformed record.
  try {
    return chat_template_.render(conversation.messages, /*add_generation_prompt=*/false, conversation.tools);
  } catch (const SampleError&) {
    throw;
  } catch (const Error& e) {
    throw SampleError(SkipReason::malformed_record, str_cat(where, ": ", e.what()));
  }
}

int64_t SampleEncoder::estimate_length(const Conversation& conversation) const {
  const std::string text = render(conversation, str_cat("sample ", conversation.index));
  int64_t length = static_cast<int64_t>(tokenizer_.encode(text, false).size());
  const auto& ic = processor_.image_config();
  const auto& vc = processor_.video_config();
  const int64_t image_unit = ic.patch_size * ic.patch_size * ic.merge_size * ic.merge_size;
  const int64_t video_unit = vc.patch_size * vc.patch_size * vc.merge_size * vc.merge_size;
  for (const auto& m : conversation.messages)
    for (const auto& p : m.content) {
      if (p.kind == ContentPart::Kind::image) length += ic.max_pixels / image_unit - 1;
      if (p.kind == ContentPart::Kind::video) length += vc.max_pixels / video_unit - 1;
    }
  return length;
}

}  // namespace mm
