#include "mm/data/text_video_dataset.h"

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

#include "mm/core/config_section.h"
#include "mm/core/log.h"
#include "mm/core/seed_mix.h"
#include "mm/data/loader.h"
#include "mm/media/image_decode.h"
#include "mm/media/video_probe.h"

namespace mm {
namespace fs = std::filesystem;
namespace {

bool is_image_path(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".webp";
}

int64_t utf8_code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

int64_t word_count(const std::string& s) {
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    const bool space = std::isspace(c);
    n += !space && !in_word;
    in_word = !space;
  }
  return n;
}

// Runs body(i) for i in [0, n) on up to `threads` threads (0: the calling thread). An exception
// escaping body stops the remaining work and is rethrown here, after every thread has joined.
template <typename Body>
void parallel_indices(int64_t n, int threads, const Body& body) {
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  std::exception_ptr failure;
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min<int64_t>(threads, n); ++t) {
    pool.emplace_back([&] {
      serial_intra_op_on_this_thread();
      try {
        for (int64_t i = next++; i < n; i = next++) body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
        next = n;
      }
    });
  }
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// What the probe of one media file found (or why it failed).
struct Probe {
  int64_t width = 0, height = 0, frames = 0;
  double fps = 0;
  std::optional<SampleError> error;
};

Probe probe_media(const fs::path& path, bool image) {
  Probe p;
  if (!fs::is_regular_file(path)) {
    p.error = SampleError(SkipReason::missing_media, str_cat(path.string(), ": no such file"));
    return p;
  }
  try {
    if (image) {
      const at::Tensor rgb = decode_image(path);
      p.height = rgb.size(0);
      p.width = rgb.size(1);
      p.frames = 1;
    } else {
      const VideoProbe v = probe_video(path);
      p.width = v.width;
      p.height = v.height;
      p.frames = v.frames;
      p.fps = v.fps;
    }
  } catch (const Error& e) {
    p.error = SampleError(SkipReason::corrupt_media, e.what());
    return p;
  }
  if (p.frames <= 0)
    p.error = SampleError(SkipReason::corrupt_media, str_cat(path.string(), ": the video has no frames"));
  return p;
}

// Cached probes keyed by absolute path, valid while the file's size and mtime are unchanged.
class ProbeCache {
 public:
  explicit ProbeCache(fs::path file) : file_(std::move(file)) {
    if (file_.empty() || !fs::exists(file_)) return;
    std::ifstream in(file_);
    try {
      nlohmann::json j = nlohmann::json::parse(in);
      if (j.is_object() && j.value("version", 0) == kVersion && j.contains("entries")) entries_ = j["entries"];
    } catch (const nlohmann::json::exception&) {
      log::warn(file_.string(), ": unreadable probe cache, probing again");
    }
    if (!entries_.is_object()) entries_ = nlohmann::json::object();
  }

  std::optional<Probe> find(const fs::path& path) const {
    if (file_.empty()) return std::nullopt;
    const auto it = entries_.find(key(path));
    if (it == entries_.end() || !it->is_object() || (*it).value("stamp", nlohmann::json()) != stamp(path))
      return std::nullopt;
    try {
      Probe p;
      p.width = it->at("width").get<int64_t>();
      p.height = it->at("height").get<int64_t>();
      p.frames = it->at("frames").get<int64_t>();
      p.fps = it->at("fps").get<double>();
      return p;
    } catch (const nlohmann::json::exception&) {
      return std::nullopt;
    }
  }
  void put(const fs::path& path, const Probe& p) {
    if (file_.empty() || p.error) return;
    entries_[key(path)] = {{"stamp", stamp(path)}, {"width", p.width}, {"height", p.height},
                           {"frames", p.frames}, {"fps", p.fps}};
    dirty_ = true;
  }
  // Written to a temporary name and renamed: ranks that write at once leave one whole file.
  void save() const {
    if (file_.empty() || !dirty_) return;
    if (file_.has_parent_path()) fs::create_directories(file_.parent_path());
    const fs::path tmp = file_.string() + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp);
      out << nlohmann::json{{"version", kVersion}, {"entries", entries_}}.dump();
      MM_CHECK(out.good(), tmp.string(), ": cannot write the probe cache");
    }
    fs::rename(tmp, file_);
  }

 private:
  static constexpr int kVersion = 1;
  static std::string key(const fs::path& path) { return fs::absolute(path).lexically_normal().string(); }
  static nlohmann::json stamp(const fs::path& path) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    const auto mtime = fs::last_write_time(path, ec);
    return {static_cast<int64_t>(size), static_cast<int64_t>(mtime.time_since_epoch().count())};
  }
  fs::path file_;
  nlohmann::json entries_ = nlohmann::json::object();
  bool dirty_ = false;
};

// A JSONL line parsed into a record (without its probe), or the reason it is unusable.
struct Parsed {
  TextVideoRecord record;
  std::optional<SampleError> error;
};

Parsed parse_line(const std::string& line, const fs::path& root, const std::string& where,
                  const TextVideoDataConfig& c) {
  Parsed p;
  p.record.where = where;
  auto reject = [&](SkipReason reason, const auto&... message) {
    p.error = SampleError(reason, str_cat(where, ": ", message...));
    return p;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    return reject(SkipReason::malformed_record, "not JSON (", e.what(), ")");
  }
  if (!j.is_object()) return reject(SkipReason::malformed_record, "not a JSON object");
  for (const char* key : {"path", "caption"}) {
    if (!j.contains(key) || !j[key].is_string())
      return reject(SkipReason::malformed_record, "\"", key, "\" is missing or not a string");
  }
  const fs::path media = j["path"].get<std::string>();
  p.record.path = media.is_absolute() ? media : root / media;
  p.record.caption = j["caption"].get<std::string>();
  p.record.image = is_image_path(p.record.path);
  const int64_t chars = utf8_code_points(p.record.caption), words = word_count(p.record.caption);
  if (c.max_caption_chars > 0 && chars > c.max_caption_chars)
    return reject(SkipReason::caption_too_long, "caption of ", chars, " characters > max_caption_chars ",
                  c.max_caption_chars);
  if (c.max_caption_words > 0 && words > c.max_caption_words)
    return reject(SkipReason::caption_too_long, "caption of ", words, " words > max_caption_words ",
                  c.max_caption_words);
  return p;
}

// Fills the record's probe fields and bucket, or says why it has none.
std::optional<SampleError> assign_bucket(TextVideoRecord& r, const Probe& probe,
                                            const std::vector<VideoBucket>& buckets, const TextVideoDataConfig& c) {
  if (probe.error) return SampleError(probe.error->reason(), str_cat(r.where, ": ", probe.error->what()));
  r.width = probe.width;
  r.height = probe.height;
  r.total_frames = probe.frames;
  r.fps = probe.fps;
  int64_t fillable = 1;
  if (!r.image) {
    try {
      fillable = fillable_frames(r.total_frames, r.fps, c.frame_sampling(), r.path.string());
    } catch (const Error& e) {
      return SampleError(SkipReason::corrupt_media, str_cat(r.where, ": ", e.what()));
    }
  }
  int64_t min_frames = INT64_MAX;
  for (const VideoBucket& b : buckets) min_frames = std::min(min_frames, b.frames);
  if (fillable < min_frames) {
    return SampleError(SkipReason::too_few_frames, str_cat(r.where, ": ", r.path.string(), " fills ", fillable,
                                                                 " frames, fewer than the smallest bucket's ",
                                                                 min_frames));
  }
  const auto bucket = choose_bucket(buckets, r.width, r.height, fillable, c.bucket_rules());
  if (!bucket) {
    return SampleError(SkipReason::no_bucket,
                          str_cat(r.where, ": ", r.path.string(), " (", r.width, "x", r.height, ", ", fillable,
                                  " frames) fits no bucket (allow_upscale ", c.allow_upscale ? "true" : "false",
                                  ", max_aspect_mismatch ", c.max_aspect_mismatch, ")"));
  }
  r.bucket = static_cast<int64_t>(*bucket);
  return std::nullopt;
}

}  // namespace

TextVideoDataConfig TextVideoDataConfig::from_yaml(const YAML::Node& root, const std::string& file,
                                                   const std::string& section) {
  TextVideoDataConfig c;
  ConfigSection data(root, file, section);
  const std::string where = str_cat(file, ": ", section);
  YAML::Node jsonl;
  data.read("jsonl", jsonl);
  if (jsonl.IsScalar()) {
    c.jsonl.emplace_back(jsonl.as<std::string>());
  } else if (jsonl.IsDefined() && !jsonl.IsNull()) {
    std::vector<std::string> paths;
    data.read("jsonl", paths);
    c.jsonl.assign(paths.begin(), paths.end());
  }
  std::vector<std::vector<int64_t>> buckets;
  data.read("buckets", buckets);
  for (size_t i = 0; i < buckets.size(); ++i) {
    MM_CHECK(buckets[i].size() == 3, where, ".buckets[", i, "]: expected [frames, height, width], got ",
             buckets[i].size(), " numbers");
    c.buckets.push_back({buckets[i][0], buckets[i][1], buckets[i][2]});
  }
  data.read("bucket_pixels", c.bucket_pixels);
  data.read("bucket_aspect_ratios", c.bucket_aspect_ratios);
  data.read("bucket_frames", c.bucket_frames);
  data.read("fps", c.fps);
  data.read("frame_interval", c.frame_interval);
  data.read("max_caption_chars", c.max_caption_chars);
  data.read("max_caption_words", c.max_caption_words);
  data.read("random_crop", c.random_crop);
  data.read("allow_upscale", c.allow_upscale);
  data.read("max_aspect_mismatch", c.max_aspect_mismatch);
  data.read("shuffle", c.shuffle);
  data.read("drop_last", c.drop_last);
  data.read("num_workers", c.num_workers);
  data.read_enum("on_error", c.on_error, {{"skip", OnError::skip}, {"fail", OnError::fail}});
  data.read("probe_cache", c.probe_cache);
  data.finish();
  c.validate(where);
  return c;
}

void TextVideoDataConfig::validate(const std::string& where) const {
  MM_CHECK(!jsonl.empty(), where, ".jsonl: required (one or more .jsonl files of {\"path\", \"caption\"})");
  const bool generated = bucket_pixels != 0 || !bucket_aspect_ratios.empty() || !bucket_frames.empty();
  MM_CHECK(buckets.empty() != !generated, where,
           ".buckets: give either buckets or bucket_pixels + bucket_aspect_ratios + bucket_frames (exactly one)");
  for (size_t i = 0; i < buckets.size(); ++i) validate_bucket(buckets[i], str_cat(where, ".buckets[", i, "]"));
  if (generated) {
    MM_CHECK(bucket_pixels >= 256, where, ".bucket_pixels: must be at least 256 (16 x 16), got ", bucket_pixels);
    MM_CHECK(!bucket_aspect_ratios.empty(), where, ".bucket_aspect_ratios: required with bucket_pixels");
    for (double r : bucket_aspect_ratios)
      MM_CHECK(r > 0, where, ".bucket_aspect_ratios: ratios must be positive, got ", r);
    MM_CHECK(!bucket_frames.empty(), where, ".bucket_frames: required with bucket_pixels");
    for (int64_t f : bucket_frames)
      MM_CHECK(f >= 1 && f % 4 == 1, where, ".bucket_frames: frame counts must be 1 + 4k, got ", f);
  }
  MM_CHECK(!fps || *fps > 0, where, ".fps: must be positive, got ", fps.value_or(0));
  MM_CHECK(frame_interval >= 1, where, ".frame_interval: must be >= 1, got ", frame_interval);
  MM_CHECK(!fps || frame_interval == 1, where, ".frame_interval: cannot be combined with fps");
  MM_CHECK(max_caption_chars >= 0, where, ".max_caption_chars: must be >= 0 (0: no limit), got ", max_caption_chars);
  MM_CHECK(max_caption_words >= 0, where, ".max_caption_words: must be >= 0 (0: no limit), got ", max_caption_words);
  MM_CHECK(max_aspect_mismatch == 0 || max_aspect_mismatch >= 1, where,
           ".max_aspect_mismatch: must be >= 1 (0: no limit), got ", max_aspect_mismatch);
  MM_CHECK(num_workers >= 0, where, ".num_workers: must be >= 0, got ", num_workers);
}

std::vector<VideoBucket> TextVideoDataConfig::resolved_buckets() const {
  return buckets.empty() ? make_buckets(bucket_pixels, bucket_aspect_ratios, bucket_frames) : buckets;
}

SkipCounts text_video_skip_counts() {
  return SkipCounts({SkipReason::malformed_record, SkipReason::caption_too_long, SkipReason::missing_media,
                     SkipReason::corrupt_media, SkipReason::too_few_frames, SkipReason::no_bucket});
}

TextVideoDataset TextVideoDataset::open(const TextVideoDataConfig& config) {
  config.validate();
  TextVideoDataset ds;
  ds.config_ = config;
  ds.buckets_ = config.resolved_buckets();
  const bool fail_fast = config.on_error == OnError::fail;

  std::vector<Parsed> parsed;
  for (const fs::path& file : config.jsonl) {
    std::ifstream in(file);
    MM_CHECK(in, file.string(), ": cannot open the text-to-video JSONL");
    const fs::path root = file.parent_path();
    std::string line;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      parsed.push_back(parse_line(line, root, str_cat(file.string(), ":", number), config));
    }
  }

  ProbeCache cache(config.probe_cache);
  std::vector<Probe> probes(parsed.size());
  std::vector<char> cached(parsed.size(), 0);
  for (size_t i = 0; i < parsed.size(); ++i) {
    if (parsed[i].error) continue;
    if (auto hit = cache.find(parsed[i].record.path)) {
      probes[i] = *hit;
      cached[i] = 1;
    }
  }
  parallel_indices(static_cast<int64_t>(parsed.size()), config.num_workers, [&](int64_t i) {
    if (!parsed[i].error && !cached[i]) probes[i] = probe_media(parsed[i].record.path, parsed[i].record.image);
  });

  for (size_t i = 0; i < parsed.size(); ++i) {
    Parsed& p = parsed[i];
    if (!p.error) {
      if (!cached[i]) cache.put(p.record.path, probes[i]);
      p.error = assign_bucket(p.record, probes[i], ds.buckets_, config);
    }
    if (p.error) {
      if (fail_fast) throw *p.error;
      ds.skips_.add(p.error->reason(), static_cast<int64_t>(i), p.error->what());  // the record's line
      continue;
    }
    ds.records_.push_back(std::move(p.record));
  }
  cache.save();
  return ds;
}

std::vector<int64_t> TextVideoDataset::bucket_ids() const {
  std::vector<int64_t> ids;
  ids.reserve(records_.size());
  for (const auto& r : records_) ids.push_back(r.bucket);
  return ids;
}

const TextVideoRecord& TextVideoDataset::record(int64_t i) const {
  MM_CHECK(i >= 0 && i < size(), "text-to-video dataset: index ", i, " outside [0, ", size(), ")");
  return records_[i];
}

std::vector<int64_t> TextVideoDataset::frame_indices(int64_t i) const {
  const TextVideoRecord& r = record(i);
  const int64_t frames = buckets_[r.bucket].frames;
  if (r.image) return std::vector<int64_t>(frames, 0);
  return clip_frame_indices(r.total_frames, r.fps, config_.frame_sampling(), frames, r.path.string());
}

TextVideoSample TextVideoDataset::load(int64_t i, uint64_t crop_seed) const {
  const TextVideoRecord& r = record(i);
  const VideoBucket& bucket = buckets_[r.bucket];
  const std::optional<uint64_t> seed = config_.random_crop ? std::optional<uint64_t>(crop_seed) : std::nullopt;
  const CropWindow window = crop_window(r.height, r.width, bucket, seed);
  torch::NoGradGuard no_grad;
  TextVideoSample s;
  s.index = i;
  s.caption = r.caption;
  s.path = r.path.string();
  s.bucket = r.bucket;
  s.video = torch::empty({3, bucket.frames, bucket.height, bucket.width}, torch::kFloat);
  const std::string name = str_cat(r.where, ": ", r.path.string());
  if (!fs::is_regular_file(r.path))
    throw SampleError(SkipReason::missing_media, str_cat(name, ": no such file (it was there when probed)"));
  auto check_size = [&](const at::Tensor& rgb) {
    if (rgb.size(0) != r.height || rgb.size(1) != r.width)
      throw SampleError(SkipReason::corrupt_media, str_cat(name, ": frame of ", rgb.size(1), "x", rgb.size(0),
                                                                 ", the probe said ", r.width, "x", r.height));
  };
  try {
    if (r.image) {
      const at::Tensor rgb = decode_image(r.path);
      check_size(rgb);
      s.video.copy_(resize_and_crop(rgb, window, bucket).unsqueeze(1).expand_as(s.video));
    } else {
      decode_video_frames(r.path, frame_indices(i), [&](size_t k, const at::Tensor& rgb) {
        check_size(rgb);
        s.video.select(1, static_cast<int64_t>(k)).copy_(resize_and_crop(rgb, window, bucket));
      });
    }
  } catch (const SampleError&) {
    throw;
  } catch (const Error& e) {
    throw SampleError(SkipReason::corrupt_media, str_cat(r.where, ": ", e.what()));
  }
  return s;
}

TextVideoBatch collate_text_video(std::vector<TextVideoSample> samples) {
  MM_CHECK(!samples.empty(), "collate_text_video: no samples");
  TextVideoBatch batch;
  batch.bucket = samples[0].bucket;
  std::vector<at::Tensor> videos;
  for (auto& s : samples) {
    MM_CHECK(s.bucket == batch.bucket, "collate_text_video: ", s.path, " is in bucket ", s.bucket, ", ",
             samples[0].path, " in bucket ", batch.bucket, " (a batch never mixes buckets)");
    videos.push_back(std::move(s.video));
    batch.captions.push_back(std::move(s.caption));
    batch.paths.push_back(std::move(s.path));
    batch.indices.push_back(s.index);
  }
  batch.video = torch::stack(videos);
  return batch;
}

struct TextVideoBatches::Loaded {
  std::vector<std::optional<TextVideoSample>> samples;
  std::vector<std::optional<SampleError>> errors;
  std::vector<std::exception_ptr> failures;  // anything but a SampleError: a bug, rethrown as is
};

TextVideoBatches::TextVideoBatches(const TextVideoDataset& dataset, BucketBatchSampler sampler, SamplerState start)
    : dataset_(dataset), sampler_(std::move(sampler)) {
  MM_CHECK(sampler_.dataset_size() == dataset_.size(), "text-to-video batches: the sampler covers ",
           sampler_.dataset_size(), " samples, the dataset holds ", dataset_.size());
  sampler_.restore(start);
  const int workers = dataset_.config().num_workers;
  prefetch_ = std::make_unique<OrderedPrefetch<BatchKey, Loaded>>(
      workers, std::max(1, workers), [this](const BatchKey& key) {
        const auto n = key.indices.size();
        Loaded out{std::vector<std::optional<TextVideoSample>>(n), std::vector<std::optional<SampleError>>(n),
                   std::vector<std::exception_ptr>(n)};
        for (size_t k = 0; k < n; ++k) {
          // One crop per (seed, epoch, sample): resumed runs crop exactly as uninterrupted ones.
          const uint64_t index = static_cast<uint64_t>(key.indices[k]);
          const uint64_t crop_seed = sample_key(sampler_.options().seed, static_cast<uint64_t>(key.epoch), index);
          try {
            out.samples[k] = dataset_.load(key.indices[k], crop_seed);
          } catch (const SampleError& e) {
            out.errors[k] = e;
          } catch (...) {
            out.failures[k] = std::current_exception();
          }
        }
        return out;
      });
  restart_loading();
}

TextVideoBatches::~TextVideoBatches() = default;

void TextVideoBatches::start_epoch(int64_t epoch) {
  sampler_.start_epoch(epoch);
  restart_loading();
}

void TextVideoBatches::restart_loading() {
  std::vector<BatchKey> keys;
  for (const auto& batch : sampler_.batches()) keys.push_back({batch, sampler_.epoch()});
  prefetch_->restart(std::move(keys));
}

std::optional<TextVideoBatch> TextVideoBatches::next() {
  const bool fail_fast = dataset_.config().on_error == OnError::fail;
  while (auto taken = prefetch_->take()) {
    auto& [key, loaded] = *taken;
    // The sampler counts the batches taken (a checkpoint's position); it walks the same order.
    const auto batch = sampler_.next();
    MM_CHECK(batch && *batch == key.indices, "text-to-video batches: the loader and the sampler disagree on the order");
    std::vector<TextVideoSample> samples;
    for (size_t k = 0; k < key.indices.size(); ++k) {  // in batch order: counts and the fail-fast error are deterministic
      if (loaded.failures[k]) std::rethrow_exception(loaded.failures[k]);
      if (loaded.errors[k]) {
        if (fail_fast) throw *loaded.errors[k];
        skips_.add(loaded.errors[k]->reason(), key.indices[k], loaded.errors[k]->what());
        continue;
      }
      samples.push_back(std::move(*loaded.samples[k]));
    }
    if (!samples.empty()) return collate_text_video(std::move(samples));
  }
  return std::nullopt;
}

}  // namespace mm
