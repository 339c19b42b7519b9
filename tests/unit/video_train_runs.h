// `mmtrain train` runs of the tiny Wan pipelines on synthetic clips, shared by the text-to-video
// and image-to-video training tests: the clips, run configs, launches over several processes and
// the comparison of two runs (losses and final weights within 1e-5).
#pragma once
#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_comparison.h"
#include "mm/core/safetensors.h"
#include "mm/data/synth_video.h"
#include "testing.h"

namespace mm::testing::video_runs {

namespace fs = std::filesystem;

// The pipeline a run trains and the run config's task for it.
struct VideoModel {
  fs::path pipeline;
  std::string task;
};

// The wan_pipeline oracle's tiny text-to-video pipeline.
inline VideoModel text_to_video() { return {golden_dir("wan_pipeline") / "euler" / "pipeline", "text_to_video"}; }

// The wan_i2v_pipeline oracle's tiny Wan2.1-I2V pipeline (CLIP image encoder, 2 z + 4 input channels).
inline VideoModel image_to_video() { return {golden_dir("wan_i2v_pipeline") / "wan21" / "pipeline", "image_to_video"}; }

// 24 clips of 9 frames at 32x32 (one bucket), shared by the tests of a binary.
inline const fs::path& clips() {
  static const fs::path dir = [] {
    auto d = temp_dir("video_train_clips");
    VideoSynthOptions options;
    options.train = 24;
    options.test = 2;
    options.frames = 9;
    options.width = 32;
    options.height = 32;
    options.seed = 4;
    write_video_dataset(d, options);
    return d;
  }();
  return dir;
}

inline fs::path write_config(const fs::path& dir, const std::string& data, int64_t max_steps,
                             const std::string& extra = "", const VideoModel& model = text_to_video()) {
  fs::create_directories(dir);
  const auto path = dir / "run.yaml";
  std::ofstream(path) << "task: " << model.task << "\n"
                      << "model:\n  path: " << model.pipeline.string() << "\n  max_sequence_length: 16\n"
                      << data << "train:\n  seed: 3\n  micro_batch_size: 4\n  grad_accum: 2\n  max_steps: " << max_steps
                      << "\n  threads: 1\n"
                      << "flow_matching:\n  shift: 3.0\n  timestep_sampling: logit_normal\n"
                      << "optim:\n  lr: 2.0e-3\n  weight_decay: 0.0\n"
                      << "schedule:\n  kind: constant\n"
                      << "output:\n  dir: " << (dir / "run").string() << "\n  keep_last: 2\n  tensorboard: false\n"
                      << extra;
  return path;
}

inline std::string clip_data(const fs::path& jsonl) {
  return "data:\n  jsonl: " + jsonl.string() + "\n  buckets: [[9, 32, 32]]\n  num_workers: 1\n";
}

inline std::map<int64_t, double> losses_of(const fs::path& run_dir) {
  std::map<int64_t, double> losses;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto r = nlohmann::json::parse(line);
    if (r.contains("step") && r.contains("loss")) losses[r["step"].get<int64_t>()] = r["loss"].get<double>();
  }
  return losses;
}

inline double mean_loss(const std::map<int64_t, double>& losses, int64_t first, int64_t last) {
  double sum = 0;
  for (int64_t s = first; s <= last; ++s) sum += losses.at(s);
  return sum / static_cast<double>(last - first + 1);
}

// The largest relative difference between two runs' final transformers, after checking that
// their losses agree within 1e-5.
inline double expect_same_training(const fs::path& a_run, const fs::path& b_run, int64_t steps) {
  const auto expected = losses_of(a_run), got = losses_of(b_run);
  EXPECT_EQ(expected.size(), static_cast<size_t>(steps));
  EXPECT_EQ(got.size(), static_cast<size_t>(steps));
  for (const auto& [step, loss] : expected)
    if (got.count(step)) {
      EXPECT_NEAR(got.at(step), loss, 1e-5 * std::abs(loss)) << "step " << step;
    }
  return expect_checkpoints_within(a_run / "final" / "transformer", b_run / "final" / "transformer", 1e-5);
}

inline std::pair<int, std::string> launch(int processes, const fs::path& config, const std::string& settings) {
  return run_command("OMP_NUM_THREADS=1 " + kMmtrain + " launch --nproc-per-node " + std::to_string(processes) +
                     " --master-port " + std::to_string(free_port()) + " -- train " + config.string() + " " +
                     settings);
}

inline std::pair<int, std::string> train_one_process(const fs::path& config, const std::string& settings) {
  return run_command("OMP_NUM_THREADS=1 " + kMmtrain + " train " + config.string() + " " + settings);
}

// One launched layout of a run compared with one process.
struct Launched {
  std::string name;
  int processes;
  std::string settings;  // added to the run's settings
};

// One process accumulating two micro-batches of 4 per step, then each layout with the same
// settings: the same 8 clips per step and the same per-clip noise, so the same losses and weights
// up to summation order. Returns each layout's output.
inline std::vector<std::string> expect_layouts_equal_one_process(const std::string& name, int64_t steps,
                                                                 const std::string& settings,
                                                                 const std::vector<Launched>& layouts,
                                                                 const VideoModel& model = text_to_video()) {
  const auto dir = temp_dir(name);
  const auto one = write_config(dir / "one", clip_data(clips() / "train.jsonl"), steps, "", model);
  auto [s1, o1] = train_one_process(one, settings);
  EXPECT_EQ(s1, 0) << o1;
  std::vector<std::string> outputs;
  for (const auto& layout : layouts) {
    const auto config = write_config(dir / layout.name, clip_data(clips() / "train.jsonl"), steps, "", model);
    auto [s2, o2] = launch(layout.processes, config, settings + " " + layout.settings);
    EXPECT_EQ(s2, 0) << layout.name << ": " << o2;
    if (s1 == 0 && s2 == 0) {
      std::cout << layout.name << ": ";
      expect_same_training(dir / "one" / "run", dir / layout.name / "run", steps);
    }
    outputs.push_back(o2);
  }
  return outputs;
}

// A checkpoint written after `saved` of `steps` steps by `first` resumes in each of `then`, each
// ending where an uninterrupted one-process run ends.
inline void expect_checkpoint_resumes_in(const std::string& name, int64_t saved, int64_t steps,
                                         const std::string& settings, const Launched& first,
                                         const std::vector<Launched>& then, const VideoModel& model = text_to_video()) {
  const auto dir = temp_dir(name);
  const std::string saving = settings + " --set output.save_every=" + std::to_string(saved);
  const auto straight = write_config(dir / "straight", clip_data(clips() / "train.jsonl"), steps, "", model);
  auto [s1, o1] = train_one_process(straight, saving);
  ASSERT_EQ(s1, 0) << o1;
  const auto written = write_config(dir / first.name, clip_data(clips() / "train.jsonl"), saved, "", model);
  auto [s2, o2] = launch(first.processes, written, saving + " " + first.settings);
  ASSERT_EQ(s2, 0) << o2;
  for (const auto& layout : then) {
    const auto config = write_config(dir / layout.name, clip_data(clips() / "train.jsonl"), steps, "", model);
    fs::copy(dir / first.name / "run", dir / layout.name / "run", fs::copy_options::recursive);
    auto [s3, o3] = layout.processes == 1 ? train_one_process(config, saving + " " + layout.settings)
                                          : launch(layout.processes, config, saving + " " + layout.settings);
    ASSERT_EQ(s3, 0) << layout.name << ": " << o3;
    EXPECT_NE(o3.find("resumed from"), std::string::npos) << o3;
    std::cout << layout.name << ": ";
    expect_same_training(dir / "straight" / "run", dir / layout.name / "run", steps);
  }
}

}  // namespace mm::testing::video_runs
