// `mmtrain extract` for a Wan text-to-video run config: its pipeline's frozen VAE and umT5 (or,
// with model.random_frozen, the random ones training uses) encode the data section's clips.
#pragma once
#include <string>

#include "mm/tasks/feature_extraction.h"
#include "mm/tasks/video_train_config.h"

namespace mm {

// `file` names the run config in errors. options.max_sequence_length and fail_on_error come from
// the config (model.max_sequence_length, data.on_error).
ExtractSummary extract_wan_features(const VideoTrainConfig& config, const std::string& file, ExtractOptions options);

}  // namespace mm
