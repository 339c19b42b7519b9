#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/log.h"
#include "mm/core/run_config.h"
#include "mm/train/train_config.h"
#include "testing.h"

TEST(JsonView, TypedAccessNamesFileAndKeyPath) {
  nlohmann::json j = nlohmann::json::parse(R"({"a": 1, "nested": {"b": "x", "c": [1, 2]}})");
  mm::JsonView v(j, "config.json");
  EXPECT_EQ(v.get<int>("a"), 1);
  EXPECT_EQ(v.child("nested").get<std::string>("b"), "x");
  EXPECT_EQ(v.child("nested").get<std::vector<int>>("c"), (std::vector<int>{1, 2}));
  EXPECT_EQ(v.get_or<int>("missing", 7), 7);
  EXPECT_EQ(v.child("absent").get_or<int>("k", 3), 3);
  EXPECT_THROW_MSG(v.child("nested").get<int>("d"), "config.json: nested.d: missing required key");
  EXPECT_THROW_MSG(v.child("nested").get<int>("b"), "config.json: nested.b: has the wrong type");
}

TEST(RunConfig, LoadsYamlAndAppliesOverrides) {
  auto dir = mm::testing::temp_dir("runcfg");
  std::ofstream(dir / "cfg.yaml") << "model:\n  path: a\noptim:\n  lr: 0.1\n";
  auto cfg = mm::load_run_config(dir / "cfg.yaml", {"optim.lr=2e-4", "data.batch=[1, 2]", "new.deep.key=true"});
  EXPECT_EQ(cfg["model"]["path"].as<std::string>(), "a");
  EXPECT_DOUBLE_EQ(cfg["optim"]["lr"].as<double>(), 2e-4);
  EXPECT_EQ(cfg["data"]["batch"].as<std::vector<int>>(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(cfg["new"]["deep"]["key"].as<bool>());
  EXPECT_THROW_MSG(mm::load_run_config(dir / "cfg.yaml", {"novalue"}), "override 'novalue' is not of the form");
  EXPECT_THROW_MSG(mm::load_run_config(dir / "cfg.yaml", {"model.path.x=1"}), "'path' is not a mapping");
  std::ofstream(dir / "bad.yaml") << "a: [1, 2\n";
  EXPECT_THROW_MSG(mm::load_run_config(dir / "bad.yaml"), "bad.yaml:");
  EXPECT_THROW_MSG(mm::load_run_config(dir / "none.yaml"), "cannot open run config");
}

TEST(Log, PrefixesTheRankAndQuietsOtherRanksBelowWarnings) {
  ::testing::internal::CaptureStderr();
  mm::log::set_rank(1, 4);
  mm::log::info("hidden on rank 1");
  mm::log::warn("shown ", 42);
  mm::log::set_rank(0, 4);
  mm::log::set_level(mm::log::Level::warn);
  mm::log::info("below the level");
  mm::log::set_level(mm::log::Level::info);
  mm::log::info("rank zero");
  mm::log::set_rank(0, 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("hidden on rank 1"), std::string::npos) << err;
  EXPECT_EQ(err.find("below the level"), std::string::npos) << err;
  EXPECT_NE(err.find("rank1] shown 42"), std::string::npos) << err;
  EXPECT_NE(err.find("rank0] rank zero"), std::string::npos) << err;
  EXPECT_THROW_MSG(mm::log::level_from_string("loud"), "unknown log level 'loud'");
}

// Every enumerated value of a run config is parsed once into its enum; a name outside it is an
// error naming the file, the key and the choices.
TEST(TypedConfig, EnumeratedValuesAreParsedOnceAndBadNamesListTheChoices) {
  mm::TrainConfig::Train train;
  mm::read_train_section(YAML::Load("train: {precision: bf16}"), "run.yaml", train);
  EXPECT_EQ(train.precision, mm::Precision::bf16);
  EXPECT_THROW_MSG(mm::read_train_section(YAML::Load("train: {precision: fp16}"), "run.yaml", train),
                   "run.yaml: train.precision: 'fp16' is not one of fp32, bf16");
  mm::TrainConfig::Schedule schedule;
  mm::read_schedule_section(YAML::Load("schedule: {kind: linear}"), "run.yaml", schedule);
  EXPECT_EQ(schedule.kind, mm::ScheduleKind::linear);
  EXPECT_THROW_MSG(mm::read_schedule_section(YAML::Load("schedule: {kind: step}"), "run.yaml", schedule),
                   "run.yaml: schedule.kind: 'step' is not one of cosine, linear, constant");
  mm::TrainConfig::Parallel parallel;
  mm::read_parallel_section(YAML::Load("parallel: {param_dtype: bf16, vision: replicate}"), "run.yaml", parallel, true);
  EXPECT_EQ(parallel.param_dtype, at::kBFloat16);
  EXPECT_EQ(parallel.reduce_dtype, at::kFloat);
  EXPECT_EQ(parallel.vision, mm::ShardPlacement::replicate);
  EXPECT_EQ(parallel.language, mm::ShardPlacement::shard);
  EXPECT_THROW_MSG(
      mm::read_parallel_section(YAML::Load("parallel: {language: split}"), "run.yaml", parallel, true),
      "run.yaml: parallel.language: 'split' is not one of shard, replicate");
  EXPECT_THROW_MSG(
      mm::read_parallel_section(YAML::Load("parallel: {reduce_dtype: fp16}"), "run.yaml", parallel, true),
      "run.yaml: parallel.reduce_dtype: 'fp16' is not one of fp32, bf16");
}
