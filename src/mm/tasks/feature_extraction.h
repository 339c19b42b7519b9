// `mmtrain extract`: VAE latents and prompt embeddings of a text-to-video dataset, written as
// a features directory (video_features.h) that `mmtrain train` reads with features.dir instead of
// the clips. Latents are the VAE posterior's mean (its mode), normalized as training uses them,
// so training from features equals training from the clips. Resumable after an interruption.
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <functional>

namespace mm {

class WanModel;
class TextVideoDataset;

struct ExtractOptions {
  std::filesystem::path out;
  int64_t shard_size = 64;           // samples per shard file
  int64_t max_sequence_length = 512; // text tokens, as the pipeline's prompt embedding
  bool fail_on_error = false;        // a clip that cannot be decoded: skip and count, or throw
  c10::Device device = c10::kCPU;    // where the VAE and the text encoder run (features land on disk alike)
};

struct ExtractSummary {
  int64_t samples = 0;         // in the features directory
  int64_t skipped = 0;         // clips that failed to load (besides those the dataset skipped)
  int64_t resumed_from = 0;    // records already done by an earlier, interrupted run
};

// For tests only (fault injection): called after each shard file this run wrote, with their count.
using ExtractShardHook = std::function<void(int64_t shards_written)>;
void set_after_extract_shard_hook(ExtractShardHook hook);

ExtractSummary extract_video_features(WanModel& model, const TextVideoDataset& dataset, const ExtractOptions& options);

}  // namespace mm
