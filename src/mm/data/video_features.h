// Precomputed training features of a text-to-video dataset (`mmtrain extract`), so training reads
// VAE latents and text embeddings instead of decoding, encoding and embedding every clip again.
//
// Layout of a features directory:
//   shard-00000.safetensors ...   per sample i of the shard: "latents.<i>" float32 [z, T', H', W']
//                                 (normalized: (mean - latents_mean) / latents_std of the VAE's
//                                 posterior), "text.<i>" [tokens, d] (the prompt embedding's
//                                 rows of the real tokens; the rest are zeros by construction)
//   progress.json                 shards done so far and the dataset's fingerprint (resume)
//   features.json                 written last: what was extracted from what, every sample's
//                                 caption, source, bucket and shard, and the skipped counts
// A shard is written atomically before progress.json names it, so an interrupted extraction
// resumes after its last complete shard; a different dataset or model is refused on resume.
#pragma once
#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mm/data/video_buckets.h"

namespace mm {

class SafetensorsFile;

std::string video_feature_shard_file(int64_t shard);  // "shard-00007.safetensors"

struct VideoFeatureSample {
  std::string caption, source;   // source: the media file
  int64_t bucket = 0;            // index into VideoFeatures::buckets()
  int64_t shard = 0;             // shard-<shard>.safetensors
  int64_t text_tokens = 0;       // real tokens of the prompt embedding
};

class VideoFeatures {
 public:
  // Opens a complete features directory (features.json present); errors name the file.
  static VideoFeatures open(const std::filesystem::path& dir);

  int64_t size() const { return static_cast<int64_t>(samples_.size()); }
  const std::vector<VideoBucket>& buckets() const { return buckets_; }
  std::vector<int64_t> bucket_ids() const;  // per sample, for BucketBatchSampler
  const VideoFeatureSample& sample(int64_t i) const;
  int64_t max_sequence_length() const { return max_sequence_length_; }
  const nlohmann::json& info() const { return info_; }  // features.json

  // [z, T', H', W'] float32 latents of sample i.
  at::Tensor latents(int64_t i) const;
  // [max_sequence_length, d]: the embedding padded with zeros, as the pipeline's.
  at::Tensor text(int64_t i) const;

 private:
  std::filesystem::path dir_;
  nlohmann::json info_;
  std::vector<VideoBucket> buckets_;
  std::vector<VideoFeatureSample> samples_;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  int64_t max_sequence_length_ = 0;
};

}  // namespace mm
