// Reading Qwen2-VL preprocessor configs the way transformers 5.17's Qwen2VLImageProcessor /
// Qwen2VLVideoProcessor constructors do.
#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/models/qwen2_vl/qwen2_vl_processor.h"

namespace mm {
namespace {

// image_mean / image_std: a list of numbers or one number (broadcast over channels).
std::vector<double> read_channel_values(const JsonView& v, const std::string& key,
                                        std::vector<double> fallback) {
  if (!v.has(key)) return fallback;
  if (v.raw()[key].is_number()) return {v.get<double>(key)};
  auto values = v.get<std::vector<double>>(key);
  MM_CHECK(values.size() == 1 || values.size() == 3, v.where(key),
           ": expected 1 or 3 values (one per RGB channel), got ", values.size());
  return values;
}

}  // namespace

Qwen2VLPreprocessConfig Qwen2VLPreprocessConfig::video_defaults(VideoProcessorKind kind) {
  Qwen2VLPreprocessConfig c;
  c.video_kind = kind;
  if (kind == VideoProcessorKind::qwen2_vl) {
    c.min_pixels = 128 * 28 * 28;
    c.max_pixels = 28 * 28 * 768;
    return c;
  }
  // Qwen3VLVideoProcessor's class attributes.
  c.min_pixels = 128 * 32 * 32;
  c.max_pixels = 32 * 32 * 768;
  c.patch_size = 16;
  c.image_mean = {0.5, 0.5, 0.5};  // IMAGENET_STANDARD_MEAN / _STD
  c.image_std = {0.5, 0.5, 0.5};
  c.do_sample_frames = true;
  c.fps = 2.0;
  c.max_video_tokens = 768;
  return c;
}

Qwen2VLPreprocessConfig Qwen2VLPreprocessConfig::parse(const nlohmann::json& json,
                                                       const std::string& file,
                                                       const Qwen2VLPreprocessConfig& defaults) {
  MM_CHECK(json.is_object(), file, ": expected a JSON object");
  const JsonView v(json, file);
  Qwen2VLPreprocessConfig c = defaults;
  c.do_resize = v.get_or<bool>("do_resize", c.do_resize);

  // A `size` object replaces the default size entirely; top-level min/max_pixels then win.
  std::optional<int64_t> min_pixels = c.min_pixels, max_pixels = c.max_pixels;
  if (v.has("size")) {
    const JsonView size = v.child("size");
    min_pixels = size.get_optional<int64_t>("shortest_edge");
    max_pixels = size.get_optional<int64_t>("longest_edge");
  }
  if (v.has("min_pixels")) min_pixels = v.get<int64_t>("min_pixels");
  if (v.has("max_pixels")) max_pixels = v.get<int64_t>("max_pixels");
  MM_CHECK(min_pixels && max_pixels, v.where("size"),
           ": needs shortest_edge and longest_edge (or top-level min_pixels and max_pixels)");
  c.min_pixels = *min_pixels;
  c.max_pixels = *max_pixels;

  c.patch_size = v.get_or<int64_t>("patch_size", c.patch_size);
  c.temporal_patch_size = v.get_or<int64_t>("temporal_patch_size", c.temporal_patch_size);
  c.merge_size = v.get_or<int64_t>("merge_size", c.merge_size);
  c.do_rescale = v.get_or<bool>("do_rescale", c.do_rescale);
  c.rescale_factor = v.get_or<double>("rescale_factor", c.rescale_factor);
  c.do_normalize = v.get_or<bool>("do_normalize", c.do_normalize);
  c.image_mean = read_channel_values(v, "image_mean", c.image_mean);
  c.image_std = read_channel_values(v, "image_std", c.image_std);
  c.do_convert_rgb = v.get_or<bool>("do_convert_rgb", c.do_convert_rgb);
  const int64_t resample = v.get_or<int64_t>("resample", 3);
  MM_CHECK(resample == 3, v.where("resample"), ": only 3 (bicubic) is supported, got ", resample);

  c.do_sample_frames = v.get_or<bool>("do_sample_frames", c.do_sample_frames);
  if (v.has("fps")) c.fps = v.get<double>("fps");
  if (v.has("num_frames")) c.num_frames = v.get<int64_t>("num_frames");
  c.min_frames = v.get_or<int64_t>("min_frames", c.min_frames);
  c.max_frames = v.get_or<int64_t>("max_frames", c.max_frames);
  c.cap_pixels_per_frame = v.get_or<bool>("cap_pixels_per_frame", c.cap_pixels_per_frame);
  c.max_video_tokens = v.get_or<int64_t>("max_video_tokens", c.max_video_tokens);
  // Qwen3VLVideoProcessor samples at its class fps unless told otherwise; a num_frames beside it
  // is refused by validate() as the reference refuses it.
  c.validate(file);
  return c;
}

void Qwen2VLPreprocessConfig::validate(const std::string& file) const {
  auto positive = [&](const char* key, int64_t value) {
    MM_CHECK(value > 0, file, ": ", key, ": must be positive, got ", value);
  };
  positive("patch_size", patch_size);
  positive("temporal_patch_size", temporal_patch_size);
  positive("merge_size", merge_size);
  positive("size.shortest_edge (min_pixels)", min_pixels);
  positive("size.longest_edge (max_pixels)", max_pixels);
  positive("min_frames", min_frames);
  positive("max_frames", max_frames);
  MM_CHECK(!(do_rescale && do_normalize) || rescale_factor != 0, file,
           ": rescale_factor: must be non-zero");
  for (double s : image_std) MM_CHECK(s != 0, file, ": image_std: must be non-zero");
  MM_CHECK(!(fps && num_frames), file, ": fps and num_frames are mutually exclusive");
  MM_CHECK(!fps || *fps > 0, file, ": fps: must be positive");
}

VideoSampling Qwen2VLPreprocessConfig::video_sampling() const {
  VideoSampling s;
  if (do_sample_frames) {
    s.fps = fps;
    s.num_frames = num_frames;
  }
  s.min_frames = min_frames;
  s.max_frames = max_frames;
  s.temporal_patch_size = temporal_patch_size;
  s.rule = video_kind == VideoProcessorKind::qwen3_vl ? FrameRule::qwen3_vl : FrameRule::qwen2_vl;
  return s;
}

namespace {

// Which reference video processor AutoVideoProcessor picks for this directory: the one its video
// config (or the image config it falls back to) names by video_processor_type; else the one its
// image_processor_type names with "VideoProcessor" for "ImageProcessor", if that class exists
// ("Qwen2VLImageProcessorFast" names none); else the one of config.json's model_type.
// processor_class plays no part.
VideoProcessorKind video_processor_kind(const std::optional<nlohmann::json>& video_json,
                                        const std::filesystem::path& model_dir) {
  auto named = [](const nlohmann::json& j, const char* key) -> std::string {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
  };
  if (video_json) {
    const std::string type = named(*video_json, "video_processor_type");
    if (!type.empty()) return type.rfind("Qwen3VLVideoProcessor", 0) == 0 ? VideoProcessorKind::qwen3_vl
                                                                           : VideoProcessorKind::qwen2_vl;
    const std::string image_type = named(*video_json, "image_processor_type");
    if (image_type == "Qwen2VLImageProcessor") return VideoProcessorKind::qwen2_vl;
    if (image_type == "Qwen3VLImageProcessor") return VideoProcessorKind::qwen3_vl;
  }
  const auto config = model_dir / "config.json";
  if (std::filesystem::exists(config)) {
    const std::string model_type = named(read_json_file(config), "model_type");
    // Qwen3.5 takes Qwen3-VL's processors.
    if (model_type.rfind("qwen3_vl", 0) == 0 || model_type.rfind("qwen3_5", 0) == 0) return VideoProcessorKind::qwen3_vl;
  }
  return VideoProcessorKind::qwen2_vl;
}

}  // namespace

Qwen2VLProcessor Qwen2VLProcessor::from_pretrained(const std::filesystem::path& model_dir) {
  const auto nested = model_dir / "processor_config.json";
  const auto image_file = model_dir / "preprocessor_config.json";
  const auto video_file = model_dir / "video_preprocessor_config.json";
  std::optional<nlohmann::json> processor;
  if (std::filesystem::exists(nested)) processor = read_json_file(nested);

  // The JSON object a processor's config comes from, and the file to name in errors.
  auto find = [&](const char* key, const std::vector<std::filesystem::path>& files)
      -> std::optional<std::pair<nlohmann::json, std::string>> {
    if (processor && processor->is_object() && processor->contains(key))
      return std::pair{(*processor)[key], nested.string() + ": " + key};
    for (const auto& file : files)
      if (std::filesystem::exists(file)) return std::pair{read_json_file(file), file.string()};
    return std::nullopt;
  };
  const auto image = find("image_processor", {image_file});
  MM_CHECK(image, model_dir.string(), ": has no preprocessor_config.json (nor an image_processor in ",
           "processor_config.json)");
  const auto video = find("video_processor", {video_file, image_file});
  const auto kind = video_processor_kind(video ? std::optional(video->first) : std::nullopt, model_dir);
  const auto video_defaults = Qwen2VLPreprocessConfig::video_defaults(kind);
  return Qwen2VLProcessor(
      Qwen2VLPreprocessConfig::parse(image->first, image->second, Qwen2VLPreprocessConfig::image_defaults()),
      video ? Qwen2VLPreprocessConfig::parse(video->first, video->second, video_defaults) : video_defaults);
}

}  // namespace mm
