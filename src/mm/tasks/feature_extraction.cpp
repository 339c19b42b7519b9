#include "mm/tasks/feature_extraction.h"

#include <torch/torch.h>

#include <functional>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/log.h"
#include "mm/core/safetensors.h"
#include "mm/data/text_video_dataset.h"
#include "mm/data/video_features.h"
#include "mm/models/wan/wan_pipeline.h"

namespace fs = std::filesystem;

namespace mm {

namespace {

ExtractShardHook& after_shard_hook() {
  static ExtractShardHook hook;
  return hook;
}

// What the features depend on: a resumed extraction must continue the same work.
std::string fingerprint(const WanModel& model, const TextVideoDataset& dataset, const ExtractOptions& options) {
  std::string text = fs::absolute(model.dir).lexically_normal().string() + "\n" +
                     std::to_string(options.max_sequence_length) + "\n" + std::to_string(options.shard_size) + "\n";
  for (const auto& b : dataset.buckets()) text += to_string(b) + ";";
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const auto& r = dataset.record(i);
    text += "\n" + r.path.string() + "\t" + r.caption + "\t" + std::to_string(r.bucket);
  }
  return std::to_string(std::hash<std::string>{}(text));
}

nlohmann::json buckets_json(const TextVideoDataset& dataset) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& b : dataset.buckets()) out.push_back({b.frames, b.height, b.width});
  return out;
}

}  // namespace

void set_after_extract_shard_hook(ExtractShardHook hook) { after_shard_hook() = std::move(hook); }

ExtractSummary extract_video_features(WanModel& model, const TextVideoDataset& dataset, const ExtractOptions& options) {
  MM_CHECK(options.shard_size >= 1, "extract: --shard-size must be at least 1");
  MM_CHECK(!dataset.config().random_crop, "extract: features hold one crop per clip; set data.random_crop: false");
  MM_CHECK(model.vae && model.text_encoder, "extract: needs the VAE and the text encoder of ", model.dir.string());
  fs::create_directories(options.out);
  const auto progress_file = options.out / "progress.json";
  const auto features_file = options.out / "features.json";
  const auto print = fingerprint(model, dataset, options);

  nlohmann::json samples = nlohmann::json::array();
  int64_t next_record = 0, shards = 0, skipped = 0;
  ExtractSummary summary;
  for (const auto& file : {features_file, progress_file}) {
    if (!fs::exists(file)) continue;
    const auto saved = read_json_file(file);
    MM_CHECK(saved.value("fingerprint", std::string()) == print, file.string(),
             ": these features were extracted from another dataset, model or setting; use a new --out directory");
    if (file == features_file) {  // already complete
      summary.samples = static_cast<int64_t>(saved.at("samples").size());
      summary.resumed_from = dataset.size();
      log::info("extract: ", options.out.string(), " is already complete (", summary.samples, " samples)");
      return summary;
    }
    samples = saved.at("samples");
    next_record = saved.at("next_record").get<int64_t>();
    shards = saved.at("shards").get<int64_t>();
    skipped = saved.at("skipped").get<int64_t>();
    summary.resumed_from = next_record;
    log::info("extract: resuming after record ", next_record, " (", shards, " shards done)");
  }

  int64_t written = 0;  // shards this run wrote
  torch::NoGradGuard no_grad;
  model.vae->eval();
  model.text_encoder->eval();
  while (next_record < dataset.size()) {
    const int64_t end = std::min(dataset.size(), next_record + options.shard_size);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (int64_t i = next_record; i < end; ++i) {
      TextVideoSample sample;
      try {
        sample = dataset.load(i);
      } catch (const SampleError& e) {
        if (options.fail_on_error) throw;
        log::warn("extract: skipped: ", e.what());
        ++skipped;
        continue;
      }
      // Encoded where the VAE and the text encoder are, saved from the CPU.
      const auto latents = model.vae->encode_normalized(sample.video.unsqueeze(0)).to(torch::kCPU, torch::kFloat32)[0];
      std::vector<int64_t> lengths;
      const auto text = model.encode_prompts({sample.caption}, options.max_sequence_length, &lengths)[0].to(torch::kCPU);
      const int64_t index = static_cast<int64_t>(samples.size());
      tensors.emplace_back("latents." + std::to_string(index), latents.contiguous());
      tensors.emplace_back("text." + std::to_string(index), text.narrow(0, 0, lengths[0]).contiguous());
      samples.push_back({{"caption", sample.caption},
                         {"source", sample.path},
                         {"bucket", sample.bucket},
                         {"shard", shards},
                         {"text_tokens", lengths[0]}});
    }
    save_safetensors(options.out / video_feature_shard_file(shards), tensors);
    ++shards;
    next_record = end;
    const nlohmann::json progress = {{"fingerprint", print}, {"next_record", next_record}, {"shards", shards},
                                     {"skipped", skipped},   {"samples", samples}};
    write_file_atomic(progress_file, progress.dump() + "\n");
    log::info("extract: ", next_record, " / ", dataset.size(), " records");
    ++written;
    if (after_shard_hook()) after_shard_hook()(written);
  }
  const nlohmann::json features = {{"format", "mmtrain-video-features"},
                                   {"fingerprint", print},
                                   {"model", fs::absolute(model.dir).lexically_normal().string()},
                                   {"max_sequence_length", options.max_sequence_length},
                                   {"buckets", buckets_json(dataset)},
                                   {"shards", shards},
                                   {"samples", samples},
                                   {"skipped_while_loading", skipped},
                                   {"skipped_while_opening", dataset.skips().to_json()}};
  write_file_atomic(features_file, features.dump(1) + "\n");
  fs::remove(progress_file);
  summary.samples = static_cast<int64_t>(samples.size());
  summary.skipped = skipped;
  return summary;
}

}  // namespace mm
