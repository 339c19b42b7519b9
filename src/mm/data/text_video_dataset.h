// The text-to-video training set: JSONL records {"path": ..., "caption": ...} (path relative to
// the JSONL's folder, or absolute; .png/.jpg/.jpeg/.webp are one-frame image samples), every clip
// probed once when the dataset opens (size, frame count, frame rate; see video_probe.h, with an
// optional cache file) and assigned a bucket (video_buckets.h), and batches that never mix buckets
// (bucket_sampler.h), each sample decoded to float [3, F, H, W] in [-1, 1], the Wan VAE's input.
//
// Unusable records are skipped and counted by reason when the dataset opens (bad JSON, missing
// field, caption over the limit, missing/unreadable/zero-frame media, too few frames for any
// bucket, a size or aspect ratio no bucket takes), and at load time (a clip that fails to decode
// after probing). With on_error: fail the first one throws its SampleError instead.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mm/core/error.h"
#include "mm/data/ordered_prefetch.h"
#include "mm/data/sample_errors.h"
#include "mm/data/bucket_sampler.h"
#include "mm/data/skip_tally.h"
#include "mm/data/video_buckets.h"

namespace YAML {
class Node;
}

namespace mm {

// The `data:` section of a text-to-video run config. Buckets are either listed or generated from
// a pixel budget (make_buckets); exactly one of the two.
struct TextVideoDataConfig {
  std::vector<std::filesystem::path> jsonl;  // `jsonl`: one path or a list
  std::vector<VideoBucket> buckets;          // `buckets`: [[frames, height, width], ...]
  int64_t bucket_pixels = 0;                 // `bucket_pixels`: e.g. 399360 (480 x 832)
  std::vector<double> bucket_aspect_ratios;  // width / height, e.g. [0.5625, 1.0, 1.7778]
  std::vector<int64_t> bucket_frames;        // e.g. [1, 49, 81]
  std::optional<double> fps;                 // target frame rate (default: the source's frames)
  int64_t frame_interval = 1;                // source frames per output frame when fps is unset
  int64_t max_caption_chars = 0;             // Unicode code points; 0: no limit
  int64_t max_caption_words = 0;             // whitespace-separated words; 0: no limit
  bool random_crop = false;                  // false: centre crop
  bool allow_upscale = true;                 // false: a bucket larger than the clip (either side) is not taken
  double max_aspect_mismatch = 2.0;          // see BucketRules; 0: no limit
  bool shuffle = true;
  bool drop_last = false;                    // see BucketSamplerOptions
  int num_workers = 2;                       // threads probing clips and loading batches ahead; 0: none
  OnError on_error = OnError::skip;
  std::filesystem::path probe_cache;         // optional JSON cache of probe results (reused when size and mtime match)

  // Reads root[section] of the run config `file`; unknown keys, wrong types and invalid values are
  // errors naming "file: section.key". Relative jsonl paths stay relative to the working directory.
  static TextVideoDataConfig from_yaml(const YAML::Node& root, const std::string& file,
                                       const std::string& section = "data");
  void validate(const std::string& where = "data") const;  // errors name "where.key"
  // The listed buckets, or the generated ones.
  std::vector<VideoBucket> resolved_buckets() const;
  FrameSampling frame_sampling() const { return {fps, frame_interval}; }
  BucketRules bucket_rules() const { return {allow_upscale, max_aspect_mismatch}; }
  // The batch sampler's options: shuffle and drop_last from here, the rest from the trainer.
  BucketSamplerOptions sampler_options(int64_t batch_size, uint64_t seed, int64_t rank = 0, int64_t world = 1) const {
    return {batch_size, drop_last, shuffle, seed, rank, world};
  }
};

// The reasons a text-video dataset skips a record (sample_errors.h), in the order its counts list
// them: malformed_record (not JSON, not an object, path/caption missing or not strings),
// caption_too_long, missing_media, corrupt_media (cannot be probed or decoded, or no frames),
// too_few_frames (fewer than the smallest bucket), no_bucket (size or aspect ratio fits none).
SkipCounts text_video_skip_counts();

// One usable record, with its probe and bucket.
struct TextVideoRecord {
  std::filesystem::path path;  // resolved media path
  std::string caption;
  std::string where;           // "train.jsonl:17"
  bool image = false;
  int64_t width = 0, height = 0, total_frames = 0;  // 1 frame for an image
  double fps = 0;
  int64_t bucket = -1;         // index into TextVideoDataset::buckets()
};

struct TextVideoSample {
  int64_t index = -1;   // dataset index
  at::Tensor video;  // float [3, F, H, W] in [-1, 1], F/H/W of the sample's bucket
  std::string caption;
  std::string path;     // the media file
  int64_t bucket = -1;
};

struct TextVideoBatch {
  at::Tensor video;  // float [B, 3, F, H, W] in [-1, 1]; all samples of one bucket
  std::vector<std::string> captions, paths;  // [B]
  std::vector<int64_t> indices;              // [B] dataset indices
  int64_t bucket = -1;
};

class TextVideoDataset {
 public:
  // Reads every JSONL, probes every clip (num_workers threads; the probe cache when configured)
  // and assigns buckets. Throws mm::Error for an invalid config or an unreadable JSONL, and with
  // on_error: fail the first unusable record's SampleError.
  static TextVideoDataset open(const TextVideoDataConfig& config);

  int64_t size() const { return static_cast<int64_t>(records_.size()); }
  const std::vector<VideoBucket>& buckets() const { return buckets_; }
  int64_t bucket_of(int64_t i) const { return record(i).bucket; }
  std::vector<int64_t> bucket_ids() const;  // [size()] bucket_of each sample, for the sampler
  const TextVideoRecord& record(int64_t i) const;
  // The source frame indices sample i uses (clip_frame_indices for its bucket's frame count).
  std::vector<int64_t> frame_indices(int64_t i) const;

  // Decodes, resizes and crops sample i to its bucket. crop_seed: the random crop's seed (used only
  // with random_crop; the loader derives it from seed, epoch and index). Throws SampleError
  // (corrupt_media / missing_media) naming the file. Thread-safe.
  TextVideoSample load(int64_t i, uint64_t crop_seed = 0) const;

  const SkipCounts& skips() const { return skips_; }  // records skipped while opening
  const TextVideoDataConfig& config() const { return config_; }

 private:
  TextVideoDataConfig config_;
  std::vector<VideoBucket> buckets_;
  std::vector<TextVideoRecord> records_;
  SkipCounts skips_ = text_video_skip_counts();
};

// Stacks samples of one bucket into a batch; throws mm::Error if their buckets differ.
TextVideoBatch collate_text_video(std::vector<TextVideoSample> samples);

// Walks a BucketBatchSampler's batches and loads them through the one loading engine
// (ordered_prefetch.h): num_workers threads each load a whole batch, up to num_workers batches
// ahead of the trainer (with 0, the trainer's thread loads each batch when it takes it). A sample
// that fails to load is skipped and counted in batch order (or thrown with on_error: fail); the
// batch keeps the others, and a batch that loses all is passed over.
class TextVideoBatches {
 public:
  // The dataset must outlive this. `start`: a global data position (as sampler().after_taking
  // gives for a checkpoint), or {}.
  TextVideoBatches(const TextVideoDataset& dataset, BucketBatchSampler sampler, SamplerState start = {});

  ~TextVideoBatches();
  std::optional<TextVideoBatch> next();  // nullopt at the end of the epoch
  void start_epoch() { start_epoch(sampler_.epoch() + 1); }
  void start_epoch(int64_t epoch);
  const SkipCounts& skips() const { return skips_; }  // load-time skips
  SkipCounts& skips() { return skips_; }
  // Read-only: the batches' order is the loader's (start_epoch, or a new TextVideoBatches to resume).
  const BucketBatchSampler& sampler() const { return sampler_; }

 private:
  struct BatchKey {
    std::vector<int64_t> indices;
    int64_t epoch = 0;
  };
  struct Loaded;  // a batch's samples, or why each failed
  void restart_loading();  // the sampler's current batches, from their start

  const TextVideoDataset& dataset_;
  BucketBatchSampler sampler_;
  SkipCounts skips_ = text_video_skip_counts();
  std::unique_ptr<OrderedPrefetch<BatchKey, Loaded>> prefetch_;  // last: stops before the rest goes
};

}  // namespace mm
