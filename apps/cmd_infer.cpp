// `mmtrain infer`: answer a prompt (or a whole conversation) about images and videos.
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "mm/core/base64.h"
#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/tasks/model_registry.h"
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
  std::string tools;
  std::vector<std::string> chat_kwargs;
  std::string dtype = "fp32";
  std::string device = "auto";
  int threads = 0;
  double video_fps = 2.0;
  int64_t video_frames = 0;
  bool greedy = false;
  bool show_prompt = false;
  GenerationConfig generation;
};

namespace fs = std::filesystem;

// A folder this command makes for decoded data: URLs and removes when it ends.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / str_cat("mmtrain-infer-", ::getpid());
  bool made = false;
  const fs::path& get() {
    if (!made) made = fs::create_directories(path);
    return path;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (made) fs::remove_all(path, ignored);
  }
};

// A source as error messages show it: a data: URL's payload can be megabytes.
std::string shown(const std::string& source) {
  return source.size() <= 80 ? source : source.substr(0, 60) + "... (" + std::to_string(source.size()) + " characters)";
}

// Media sources of a --messages file as OpenAI-style clients write them: paths relative to the
// file's own folder (as data files' are), file:// URLs, and base64 data: URLs (written to files in
// `scratch`, the decoders read files). Other URLs are refused: nothing is fetched.
void resolve_message_media(std::vector<ChatMessage>& messages, const fs::path& file, ScratchDir& scratch) {
  int decoded = 0;
  for (size_t m = 0; m < messages.size(); ++m)
    for (auto& part : messages[m].content) {
      if (part.kind == ContentPart::Kind::text) continue;
      const std::string where = str_cat(file.string(), ": messages[", m, "]");
      std::string& source = part.source;
      if (source.rfind("data:", 0) == 0) {
        const auto comma = source.find(',');
        MM_CHECK(comma != std::string::npos && source.substr(0, comma).find(";base64") != std::string::npos, where,
                 ": only base64 data: URLs are read, got ", shown(source));
        const auto path = scratch.get() / str_cat("media-", decoded++);
        std::ofstream(path, std::ios::binary) << base64_decode(std::string_view(source).substr(comma + 1), where + ": the data: URL");
        source = path.string();
      } else if (source.rfind("file://", 0) == 0) {
        source = source.substr(std::string("file://").size());
      } else if (source.find("://") != std::string::npos) {
        fail(where, ": ", shown(source), " is a URL; mmtrain reads local files, file:// and data: URLs only");
      }
      if (fs::path(source).is_relative()) source = (file.parent_path() / source).string();
      MM_CHECK(fs::is_regular_file(source), where, ": media file not found: ", shown(source));
    }
}

std::vector<ChatMessage> messages_from_prompt(const InferOptions& o) {
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

// The conversation and its tools: from --messages (which may list "tools" beside the messages) or
// from --prompt/--image/--video/--system; --tools FILE gives tools to either.
ChatFile conversation_from(const InferOptions& o, ScratchDir& scratch) {
  ChatFile chat;
  if (!o.messages.empty()) {
    MM_CHECK(o.images.empty() && o.videos.empty() && o.prompt.empty(),
             "--messages takes the whole conversation: do not combine it with --prompt, --image or --video");
    chat = read_chat_file(o.messages);
    resolve_message_media(chat.messages, o.messages, scratch);
  } else {
    chat.messages = messages_from_prompt(o);
  }
  if (!o.tools.empty()) {
    MM_CHECK(chat.tools.is_null(), o.messages, " lists tools already: give them there or with --tools, not both");
    chat.tools = read_tools_file(o.tools);
  }
  return chat;
}

void run_infer(InferOptions& o) {
  if (o.threads > 0) torch::set_num_threads(o.threads);
  if (o.greedy) o.generation.greedy = true;
  o.generation.validate();
  VideoOptions video;
  if (o.video_fps > 0) video.fps = o.video_fps;
  if (o.video_frames > 0) video.max_frames = o.video_frames;
  const auto start = std::chrono::steady_clock::now();
  const ModelSpec& spec = model_spec_of(o.model, {ModelKind::vision_language}, "mmtrain infer");
  const c10::Device device = resolve_device(o.device, "--device");
  // The conversation and the template's inputs are checked before the model loads.
  ScratchDir scratch;
  const ChatFile conversation = conversation_from(o, scratch);
  const auto chat_kwargs = parse_chat_kwargs(o.chat_kwargs, "--chat-kwarg");
  const auto chat = spec.open_chat(o.model, dtype_option(o.dtype), device);
  log::info("loaded ", o.model, " (", spec.family, ", ", o.dtype, ", ", device.str(), ") in ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  chat->chat_template().set_kwargs(chat_kwargs);
  chat->chat_template().set_tools(conversation.tools);
  if (o.show_prompt) std::cerr << chat->render(conversation.messages) << "\n";
  std::cout << chat->reply(conversation.messages, o.generation, video) << std::endl;
}

}  // namespace

void add_infer_command(CLI::App& app) {
  auto options = std::make_shared<InferOptions>();
  options->generation.greedy = false;
  options->generation.max_new_tokens = 128;
  CLI::App* cmd = app.add_subcommand(
      "infer", "Answer a prompt about images and videos with a vision-language model (`mmtrain models` lists "
               "them); `infer t2v` generates a video from text, `infer i2v` from an image");
  cmd->add_option("--model", options->model, "Hugging Face model directory")->check(CLI::ExistingDirectory);
  cmd->add_option("--image", options->images, "Image file (JPEG, PNG, WebP); repeat for several")->check(CLI::ExistingFile);
  cmd->add_option("--video", options->videos, "Video file (anything FFmpeg reads); repeat for several")->check(CLI::ExistingFile);
  cmd->add_option("--prompt", options->prompt, "The user's question or instruction");
  cmd->add_option("--system", options->system, "System prompt (default: the model's chat template default)");
  cmd->add_option("--messages", options->messages,
                  "JSON file with OpenAI-style messages: [{\"role\": \"user\", \"content\": [{\"type\": \"image\", "
                  "\"image\": \"a.png\"}, {\"type\": \"text\", \"text\": \"...\"}]}] (or {\"messages\": [...]}); "
                  "image/video as a path relative to the file, a file:// or a base64 data: URL; "
                  "{\"type\": \"image_url\", \"image_url\": {\"url\": ...}} too; {\"messages\": [...], \"tools\": [...]} "
                  "gives the tool schemas too; other fields of a message (tool_calls, reasoning_content, ...) "
                  "reach the model's chat template as given")->check(CLI::ExistingFile);
  cmd->add_option("--tools", options->tools,
                  "JSON file listing the tool schemas the chat template shows the model "
                  "([{\"type\": \"function\", \"function\": {...}}], as transformers' tools=)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--chat-kwarg", options->chat_kwargs,
                  "NAME=VALUE passed to the model's chat template, as apply_chat_template's keyword arguments "
                  "(e.g. enable_thinking=false); VALUE is JSON when it parses as JSON, else a string; repeat for several");
  cmd->add_option("--max-new-tokens", options->generation.max_new_tokens, "Most tokens to generate")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--greedy", options->greedy, "Greedy decoding (the default is sampling with the options below)");
  cmd->add_option("--temperature", options->generation.temperature, "Sampling temperature")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-p", options->generation.top_p, "Nucleus sampling: keep the smallest set with this mass")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", options->generation.top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", options->generation.seed, "Sampling seed (same seed, same answer)")->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "Weights and compute dtype: fp32 or bf16")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = libtorch's default)")->capture_default_str();
  cmd->add_option("--device", options->device, "auto (a GPU when there is one), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--video-fps", options->video_fps, "Frames per second sampled from videos (0 = as the model's video_preprocessor_config.json says)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--video-frames", options->video_frames, "Most frames taken from a video (0 = the processor's limit)")->capture_default_str();
  cmd->add_flag("--show-prompt", options->show_prompt, "Print the rendered chat prompt to stderr");
  add_video_infer_commands(*cmd);
  cmd->callback([cmd, options] {
    if (!cmd->get_subcommands().empty()) return;  // `infer t2v` or `infer i2v` ran instead
    // A usage error (exit status 2), as the option's required() would give without the video commands.
    if (options->model.empty()) throw CLI::RequiredError("--model");
    run_infer(*options);
  });
}

}  // namespace mm::cli
