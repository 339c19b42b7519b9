#include "mm/tasks/video_train_config.h"

#include <set>

#include "mm/core/config_section.h"
#include "mm/core/error.h"

namespace mm {

VideoTrainConfig parse_video_train_config(const YAML::Node& root, const std::string& file) {
  const std::string task = train_task_of(root, file);
  MM_CHECK(task == "text_to_video" || task == "image_to_video", file,
           ": task: must be text_to_video or image_to_video for this trainer");
  const std::set<std::string> sections = {"task",          "model", "data",  "features", "train",   "flow_matching",
                                          "ema",           "optim", "schedule", "output", "parallel"};
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    MM_CHECK(sections.count(key), file, ": ", key, ": unknown section (known: task, model, data, features, train, "
             "flow_matching, ema, optim, schedule, output, parallel)");
  }
  VideoTrainConfig c;
  c.task = task;
  c.source = YAML::Clone(root);

  ConfigSection model(root, file, "model");
  model.read("path", c.model.path);
  model.read("from_scratch", c.model.from_scratch);
  model.read("init_seed", c.model.init_seed);
  model.read("random_frozen", c.model.random_frozen);
  model.read("max_sequence_length", c.model.max_sequence_length);
  model.check(!c.model.path.empty(), "path", "required (a diffusers Wan pipeline directory)");
  model.check(c.model.max_sequence_length >= 1, "max_sequence_length", "must be at least 1");
  model.finish();

  ConfigSection features(root, file, "features");
  features.read("dir", c.features.dir);
  features.read("shuffle", c.features.shuffle);
  features.read("drop_last", c.features.drop_last);
  features.finish();
  const YAML::Node data = root["data"];
  if (c.from_features()) {
    // Extracted features hold latents and text only: the image condition is made from the clip's
    // frames while training.
    MM_CHECK(task != "image_to_video", file, ": features.dir: image-to-video training reads raw clips (data), ",
             "whose frames it conditions on; `mmtrain extract` writes no image condition");
    MM_CHECK(!data.IsDefined() || data.IsNull(), file,
             ": data: give either data (raw clips) or features.dir (extracted features), not both");
  } else {
    MM_CHECK(data.IsDefined() && data.IsMap(), file, ": data: required (raw clips), or set features.dir");
    c.data = TextVideoDataConfig::from_yaml(root, file);
  }

  read_train_section(root, file, c.train);

  ConfigSection flow(root, file, "flow_matching");
  flow.read("num_train_timesteps", c.flow_matching.num_train_timesteps);
  flow.read("shift", c.flow_matching.shift);
  flow.read_enum("timestep_sampling", c.flow_matching.timestep_sampling,
                 {{"uniform", TimestepSampling::uniform}, {"logit_normal", TimestepSampling::logit_normal},
                  {"mode", TimestepSampling::mode}});
  flow.read("logit_mean", c.flow_matching.logit_mean);
  flow.read("logit_std", c.flow_matching.logit_std);
  flow.read("mode_scale", c.flow_matching.mode_scale);
  flow.read_enum("loss_weighting", c.flow_matching.loss_weighting,
                 {{"none", LossWeighting::none}, {"sigma_sqrt", LossWeighting::sigma_sqrt}, {"cosmap", LossWeighting::cosmap}});
  flow.finish();
  c.flow_matching.validate(file + ": flow_matching");

  ConfigSection ema(root, file, "ema");
  ema.read("decay", c.ema.decay);
  ema.check(c.ema.decay >= 0 && c.ema.decay < 1, "decay", "must be in [0, 1) (0: no EMA)");
  ema.finish();

  read_optim_section(root, file, c.optim);
  read_schedule_section(root, file, c.schedule);
  read_output_section(root, file, c.output);
  read_parallel_section(root, file, c.parallel, /*towers=*/false);
  return c;
}

}  // namespace mm
