#include "mm/data/video_features.h"

#include <ATen/ATen.h>

#include <cstdio>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"

namespace mm {

std::string video_feature_shard_file(int64_t shard) {
  char name[40];
  std::snprintf(name, sizeof(name), "shard-%05lld.safetensors", static_cast<long long>(shard));
  return name;
}

VideoFeatures VideoFeatures::open(const std::filesystem::path& dir) {
  const auto file = dir / "features.json";
  MM_CHECK(std::filesystem::is_regular_file(file), dir.string(),
           ": not a complete features directory (no features.json; run or finish `mmtrain extract`)");
  VideoFeatures f;
  f.dir_ = dir;
  f.info_ = read_json_file(file);
  const JsonView root(f.info_, file.string());
  MM_CHECK(root.get<std::string>("format") == "mmtrain-video-features", root.where("format"),
           ": not an mmtrain video features file");
  f.max_sequence_length_ = root.get<int64_t>("max_sequence_length");
  for (const auto& b : f.info_.at("buckets")) f.buckets_.push_back({b.at(0).get<int64_t>(), b.at(1).get<int64_t>(), b.at(2).get<int64_t>()});
  const int64_t shards = root.get<int64_t>("shards");
  for (int64_t s = 0; s < shards; ++s)
    f.shards_.push_back(SafetensorsFile::open(dir / video_feature_shard_file(s)));
  for (const auto& s : f.info_.at("samples")) {
    VideoFeatureSample sample;
    sample.caption = s.at("caption").get<std::string>();
    sample.source = s.at("source").get<std::string>();
    sample.bucket = s.at("bucket").get<int64_t>();
    sample.shard = s.at("shard").get<int64_t>();
    sample.text_tokens = s.at("text_tokens").get<int64_t>();
    MM_CHECK(sample.bucket >= 0 && sample.bucket < static_cast<int64_t>(f.buckets_.size()) && sample.shard >= 0 &&
                 sample.shard < shards,
             file.string(), ": sample ", f.samples_.size(), " names a bucket or shard that does not exist");
    f.samples_.push_back(std::move(sample));
  }
  for (int64_t i = 0; i < f.size(); ++i) {
    const auto& shard = *f.shards_[static_cast<size_t>(f.samples_[static_cast<size_t>(i)].shard)];
    for (const char* kind : {"latents.", "text."})
      MM_CHECK(shard.contains(kind + std::to_string(i)), shard.path().string(), ": missing tensor ", kind, i);
  }
  return f;
}

std::vector<int64_t> VideoFeatures::bucket_ids() const {
  std::vector<int64_t> out;
  for (const auto& s : samples_) out.push_back(s.bucket);
  return out;
}

const VideoFeatureSample& VideoFeatures::sample(int64_t i) const {
  MM_CHECK(i >= 0 && i < size(), dir_.string(), ": sample ", i, " out of range (", size(), " samples)");
  return samples_[static_cast<size_t>(i)];
}

at::Tensor VideoFeatures::latents(int64_t i) const {
  return shards_[static_cast<size_t>(sample(i).shard)]->tensor("latents." + std::to_string(i)).clone();
}

at::Tensor VideoFeatures::text(int64_t i) const {
  const auto rows = shards_[static_cast<size_t>(sample(i).shard)]->tensor("text." + std::to_string(i));
  auto out = at::zeros({max_sequence_length_, rows.size(1)}, rows.options());
  out.narrow(0, 0, rows.size(0)).copy_(rows);
  return out;
}

}  // namespace mm
