#include "mm/tasks/wan_feature_extraction.h"

#include "mm/core/error.h"
#include "mm/data/text_video_dataset.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/models/wan/wan_pipeline_random.h"

namespace mm {

ExtractSummary extract_wan_features(const VideoTrainConfig& config, const std::string& file, ExtractOptions options) {
  MM_CHECK(!config.from_features(), file, ": features.dir is set: extract reads the data section's clips");
  WanLoadOptions load;
  load.transformer = false;
  load.text_encoder = load.vae = !config.model.random_frozen;
  load.device = options.device;
  auto model = WanModel::from_pretrained(config.model.path, load);
  if (config.model.random_frozen) {
    init_frozen_parts_randomly(*model, config.model.init_seed + 1);  // made on the CPU from the seed
    model->to(options.device);
  }
  const auto dataset = TextVideoDataset::open(config.data);
  options.max_sequence_length = config.model.max_sequence_length;
  options.fail_on_error = config.data.on_error == OnError::fail;
  return extract_video_features(*model, dataset, options);
}

}  // namespace mm
