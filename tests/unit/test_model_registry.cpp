// The model registry (tasks/model_registry.h): every family is found by the key its own directory
// holds, an unknown one is an error listing the supported keys, a command given a model of another
// kind names the command that runs it, and a run config's task must train the family its
// model.path holds. End to end through the CLI for the commands that dispatch by it.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <set>

#include "mm/core/error.h"
#include "mm/tasks/model_registry.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::kMmtrain;
using mm::testing::kSourceDir;
using mm::testing::run_command;

namespace {

const fs::path kQwenTemplate = kSourceDir / "examples" / "qwen2.5vl" / "tiny-shapes";
const fs::path kWanTemplate = kSourceDir / "examples" / "wan" / "tiny-synth";

fs::path dir_with(const std::string& name, const std::string& file, const std::string& json) {
  const auto dir = mm::testing::temp_dir(name);
  std::ofstream(dir / file) << json;
  return dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelRegistry, EveryFamilyIsFoundByTheKeyItsDirectoryHolds) {
  std::set<std::string> names, keys, checkpoint_keys;
  std::map<std::string, mm::ModelKind> task_kinds;
  for (const auto& spec : mm::model_registry()) {
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name;
    EXPECT_TRUE(keys.insert(spec.key.describe()).second) << spec.key.describe();
    const auto dir = dir_with("registry_" + spec.name, spec.key.file,
                              nlohmann::json{{spec.key.field, spec.key.value}}.dump());
    EXPECT_EQ(&mm::model_spec_of(dir), &spec) << spec.name;
    // What a family trains it must also export; families sharing a task (the run config's model
    // directory then picks one) are of one kind, and each checkpoint key names one family.
    if (spec.train) {
      EXPECT_FALSE(spec.train_task.empty()) << spec.name;
      EXPECT_EQ(task_kinds.emplace(spec.train_task, spec.kind).first->second, spec.kind) << spec.train_task;
      EXPECT_TRUE(checkpoint_keys.insert(spec.checkpoint_key.describe()).second) << spec.checkpoint_key.describe();
      EXPECT_TRUE(spec.export_checkpoint) << spec.name;
      EXPECT_FALSE(spec.checkpoint_key.value.empty()) << spec.name;
    }
    EXPECT_TRUE(spec.open_chat || spec.generate_video) << spec.name << " can be neither chatted with nor sampled";
  }
  EXPECT_EQ(mm::model_spec_of(kQwenTemplate).name, "qwen2_5_vl");
  EXPECT_EQ(mm::model_spec_of(kWanTemplate).name, "wan_t2v");
}

TEST(ModelRegistry, AnUnknownTypeIsAnErrorListingTheSupportedOnes) {
  const auto llava = dir_with("registry_llava", "config.json", R"({"model_type": "llava"})");
  const auto message = error_of([&] { mm::model_spec_of(llava); });
  EXPECT_NE(message.find(llava.string()), std::string::npos) << message;
  EXPECT_NE(message.find("model_type 'llava'"), std::string::npos) << message;
  for (const auto& spec : mm::model_registry()) EXPECT_NE(message.find(spec.key.value), std::string::npos) << message;

  const auto empty = mm::testing::temp_dir("registry_empty");
  const auto none = error_of([&] { mm::model_spec_of(empty); });
  EXPECT_NE(none.find("neither config.json nor model_index.json"), std::string::npos) << none;

  // A checkpoint is keyed by its own files: a Qwen-VL one by its config.json, a Wan DiT's (whose
  // config.json is the same for text and image to video) by the task in its trainer_state.json.
  const auto checkpoint = dir_with("registry_ckpt", "config.json", R"({"_class_name": "HunyuanVideoTransformer3DModel"})");
  const auto unknown = error_of([&] { mm::model_spec_of_checkpoint(checkpoint); });
  EXPECT_NE(unknown.find("HunyuanVideoTransformer3DModel"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("task text_to_video"), std::string::npos) << unknown;
  for (const auto& [task, name] : std::map<std::string, std::string>{{"text_to_video", "wan_t2v"},
                                                                      {"image_to_video", "wan_i2v"}}) {
    const auto wan = dir_with("registry_wan_ckpt_" + task, "config.json", R"({"_class_name": "WanTransformer3DModel"})");
    std::ofstream(wan / "trainer_state.json") << nlohmann::json{{"task", task}}.dump();
    EXPECT_EQ(mm::model_spec_of_checkpoint(wan).name, name);
  }
  EXPECT_EQ(mm::model_spec_of_checkpoint(kQwenTemplate).name, "qwen2_5_vl");
}

TEST(ModelRegistry, ACommandGivenAModelOfAnotherKindNamesTheCommandThatRunsIt) {
  auto [status, out] = run_command(kMmtrain + " infer --model " + kWanTemplate.string() + " --prompt hi");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("is a text-to-video model"), std::string::npos) << out;
  EXPECT_NE(out.find("use mmtrain infer t2v"), std::string::npos) << out;

  const auto dir = mm::testing::temp_dir("registry_kinds");
  auto [vstatus, vout] = run_command(kMmtrain + " infer t2v --model " + kQwenTemplate.string() + " --prompt hi -o " +
                                     (dir / "x.mp4").string());
  EXPECT_EQ(vstatus, 1) << vout;
  EXPECT_NE(vout.find("is a vision-language model"), std::string::npos) << vout;
  EXPECT_FALSE(fs::exists(dir / "x.mp4"));

  const auto llava = dir_with("registry_llava_cli", "config.json", R"({"model_type": "llava"})");
  auto [ustatus, uout] = run_command(kMmtrain + " eval --model " + llava.string() + " --data " +
                                     (kSourceDir / "examples" / "qwen2.5vl" / "sft_full.yaml").string());
  EXPECT_EQ(ustatus, 1) << uout;
  EXPECT_NE(uout.find("is no model family this build supports"), std::string::npos) << uout;

  auto [mstatus, mout] = run_command(kMmtrain + " models");
  EXPECT_EQ(mstatus, 0) << mout;
  for (const auto& spec : mm::model_registry()) {
    EXPECT_NE(mout.find(spec.family), std::string::npos) << mout;
    EXPECT_NE(mout.find(spec.key.describe()), std::string::npos) << mout;
  }
}

TEST(ModelRegistry, ARunConfigsTaskMustTrainTheFamilyItsModelPathHolds) {
  const auto parse = [](const std::string& yaml) { return YAML::Load(yaml); };
  EXPECT_EQ(mm::model_spec_of_run_config(parse("model: {path: " + kQwenTemplate.string() + "}"), "a.yaml").name,
            "qwen2_5_vl");
  EXPECT_EQ(mm::model_spec_of_run_config(parse("task: text_to_video\nmodel: {path: " + kWanTemplate.string() + "}"),
                                         "a.yaml").name,
            "wan_t2v");
  const auto i2v_template = kSourceDir / "examples" / "wan" / "tiny-synth-i2v";
  EXPECT_EQ(mm::model_spec_of_run_config(parse("task: image_to_video\nmodel: {path: " + i2v_template.string() + "}"),
                                         "a.yaml").name,
            "wan_i2v");
  const auto i2v_mismatch = error_of([&] {
    mm::model_spec_of_run_config(parse("task: text_to_video\nmodel: {path: " + i2v_template.string() + "}"), "a.yaml");
  });
  EXPECT_NE(i2v_mismatch.find("set task: image_to_video"), std::string::npos) << i2v_mismatch;
  const auto unknown = error_of([&] { mm::model_spec_of_run_config(parse("task: t2i"), "a.yaml"); });
  EXPECT_NE(unknown.find("a.yaml: task: 't2i' is not one of vlm, text_to_video, image_to_video"), std::string::npos)
      << unknown;
  const auto mismatch = error_of(
      [&] { mm::model_spec_of_run_config(parse("task: vlm\nmodel: {path: " + kWanTemplate.string() + "}"), "a.yaml"); });
  EXPECT_NE(mismatch.find("model.path " + kWanTemplate.string()), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("set task: text_to_video"), std::string::npos) << mismatch;
}
