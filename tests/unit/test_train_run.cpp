// `mmtrain train` end to end on the synthetic shapes data with the tiny from-scratch template:
// resume after a kill is bit-identical, broken samples are skipped and counted (or fatal with
// on_error: fail), metrics and TensorBoard files hold the steps, and exports (plain and LoRA
// merged) load in transformers with logits equal to the trained model's; Qwen2-VL and Qwen3-VL
// directories train through the same command and export models transformers loads.
#include <cmath>
#include <fstream>
#include <regex>

#include "mm/core/json_config.h"
#include "mm/core/run_config.h"
#include "mm/core/safetensors.h"
#include "mm/models/qwen_vl/qwen_vl_init_weights.h"
#include "mm/tasks/qwen_vl_checkpoint.h"
#include "mm/train/train_config.h"
#include "test_files.h"
#include "tiny_model_dirs.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::kMmtrain;
using testing::kPython;
using testing::kSourceDir;
using testing::read_jsonl;
using testing::run_command;

const fs::path kTemplate = kSourceDir / "examples" / "qwen2.5vl" / "tiny-shapes";

// A small shapes dataset shared by the tests of this binary.
const fs::path& shapes_data() {
  static const fs::path dir = testing::synth_shapes_data("train_run_data", 48, 8, 3);
  return dir;
}

// Writes a run config for `out_dir`; `extra` is appended YAML (whole sections).
fs::path write_config(const fs::path& out_dir, const std::string& data_file, const std::string& extra = "",
                      int64_t max_steps = 20, const fs::path& model = kTemplate) {
  fs::create_directories(out_dir);
  const auto path = out_dir / "run.yaml";
  std::ofstream(path) << "model:\n  path: " << model.string() << "\n  from_scratch: true\n  init_seed: 5\n"
                      << "data:\n  train: " << data_file << "\n  max_seq_len: 256\n  num_workers: 2\n"
                      << "train:\n  seed: 9\n  micro_batch_size: 4\n  grad_accum: 2\n  max_steps: " << max_steps
                      << "\n  threads: 1\n"
                      << "optim:\n  lr: 1.0e-3\n  weight_decay: 0.01\n"
                      << "schedule:\n  kind: cosine\n  warmup_steps: 3\n"
                      << "output:\n  dir: " << (out_dir / "run").string() << "\n  save_every: 10\n  keep_last: 2\n"
                      << extra;
  return path;
}

// step -> loss, from metrics.jsonl (step records only).
std::map<int64_t, double> losses_of(const fs::path& run_dir) {
  std::map<int64_t, double> losses;
  for (const auto& r : read_jsonl(run_dir / "metrics.jsonl"))
    if (r.contains("step") && r.contains("loss")) losses[r["step"].get<int64_t>()] = r["loss"].get<double>();
  return losses;
}

TEST(TrainRun, ResumeAfterKillReproducesTheLossesBitForBit) {
  const auto train = (shapes_data() / "train.jsonl").string();
  const auto straight = testing::temp_dir("train_straight");
  auto [s1, o1] = run_command(kMmtrain + " train " + write_config(straight, train).string());
  ASSERT_EQ(s1, 0) << o1;
  const auto expected = losses_of(straight / "run");
  ASSERT_EQ(expected.size(), 20u);

  const auto killed = testing::temp_dir("train_killed");
  const auto config = write_config(killed, train).string();
  auto [s2, o2] = run_command("MM_FAULT_KILL_AT_STEP=13 " + testing::kMmtrainWithFaults + " train " + config);
  EXPECT_NE(s2, 0) << "the run should have been killed at step 13:\n" << o2;
  EXPECT_EQ(losses_of(killed / "run").rbegin()->first, 13);
  std::ifstream latest(killed / "run" / "checkpoints" / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000010");

  auto [s3, o3] = run_command(kMmtrain + " train " + config);
  ASSERT_EQ(s3, 0) << o3;
  EXPECT_NE(o3.find("resumed from"), std::string::npos) << o3;
  const auto resumed = losses_of(killed / "run");
  ASSERT_EQ(resumed.size(), 20u);
  for (const auto& [step, loss] : expected) EXPECT_EQ(resumed.at(step), loss) << "step " << step;
  // The final weights too.
  auto a = Checkpoint::open(straight / "run" / "final");
  auto b = Checkpoint::open(killed / "run" / "final");
  for (const auto& name : a.names()) EXPECT_TRUE(torch::equal(a.tensor(name), b.tensor(name))) << name;
}

TEST(TrainRun, MetricsAndTensorBoardHoldEveryStep) {
  const auto dir = testing::temp_dir("train_metrics");
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (shapes_data() / "train.jsonl").string(), "", 6).string());
  ASSERT_EQ(status, 0) << out;
  const auto records = read_jsonl(dir / "run" / "metrics.jsonl");
  int steps = 0;
  for (const auto& r : records) {
    if (!r.contains("step")) continue;
    ++steps;
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "peak_memory_bytes",
                            "model_tflops", "model_tflops_per_s_per_device"})
      EXPECT_TRUE(r.contains(key)) << key << " missing in " << r.dump();
    EXPECT_GT(r.value("model_tflops", 0.0), 0.0) << r.dump();
    EXPECT_FALSE(r.contains("mfu")) << "no bf16 peak is known for a CPU: " << r.dump();
  }
  EXPECT_EQ(steps, 6);
  auto [py, scalars] = run_command(kPython + " " + (kSourceDir / "tests/reference/tensorboard_read.py").string() +
                                   " " + (dir / "run" / "tensorboard").string(), false);
  ASSERT_EQ(py, 0) << scalars;
  const auto tb = nlohmann::json::parse(scalars);
  ASSERT_TRUE(tb.contains("train/loss")) << scalars;
  const auto losses = losses_of(dir / "run");
  ASSERT_EQ(tb["train/loss"].size(), 6u);
  for (const auto& point : tb["train/loss"])
    EXPECT_NEAR(point[1].get<double>(), losses.at(point[0].get<int64_t>()), 1e-6 * std::abs(losses.at(point[0].get<int64_t>())));
}

// A dataset with every kind of broken sample beside good ones.
fs::path broken_dataset() {
  const auto dir = testing::temp_dir("train_broken");
  fs::copy(shapes_data() / "images", dir / "images", fs::copy_options::recursive);
  std::ifstream good_in(shapes_data() / "train.jsonl");
  std::vector<std::string> good;
  for (std::string line; std::getline(good_in, line);) good.push_back(line);
  std::ofstream(dir / "images" / "corrupt.png") << "not a png at all";
  std::ofstream out(dir / "train.jsonl");
  const std::string user = R"({"role": "user", "content": "<image>What color is the shape?"})";
  const std::vector<std::string> broken = {
      R"({"messages": [)",  // malformed_record
      R"({"messages": [)" + user + R"(, {"role": "assistant", "content": "red"}], "images": ["images/nope.png"]})",
      R"({"messages": [)" + user + R"(, {"role": "assistant", "content": "red"}], "images": ["images/corrupt.png"]})",
      R"({"messages": [{"role": "user", "content": "<image><image>Two?"}, {"role": "assistant", "content": "no"}], "images": ["images/train/000000.png"]})",
      R"({"messages": [)" + user + R"(], "images": ["images/train/000001.png"]})",  // no assistant turn
      R"({"messages": [{"role": "user", "content": ")" + std::string(2000, 'x') + R"("}, {"role": "assistant", "content": "long"}]})",
  };
  // Each broken record comes before a group of 4 good ones, so all of them are met by the time the
  // 24 good ones are used; the first is on line 1.
  for (size_t i = 0; i < 24; ++i) {
    if (i % 4 == 0) out << broken[i / 4] << "\n";
    out << good[i] << "\n";
  }
  return dir;
}

TEST(TrainRun, BrokenSamplesAreSkippedAndCounted) {
  const auto data = broken_dataset();
  const auto dir = testing::temp_dir("train_skips");
  // 24 good samples, 4 per micro-batch, no shuffle: 3 steps of 2 micro-batches use them all once.
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (data / "train.jsonl").string(), "", 3).string() +
                                   " --set data.shuffle=false");
  ASSERT_EQ(status, 0) << out;
  const auto records = read_jsonl(dir / "run" / "metrics.jsonl");
  ASSERT_FALSE(records.empty());
  const auto& summary = records.back();
  ASSERT_TRUE(summary.contains("summary")) << summary.dump();
  const auto& counters = summary["summary"]["counters"];
  for (const char* reason : {"malformed_record", "missing_media", "corrupt_media", "placeholder_mismatch",
                             "no_supervised_tokens", "too_long"})
    EXPECT_EQ(counters.value(std::string("skipped_samples.") + reason, -1), 1) << reason << " in " << counters.dump();
  EXPECT_EQ(counters.value("skipped_samples.total", -1), 6);
  // The end-of-run summary on stderr lists them too.
  EXPECT_NE(out.find("skipped_samples.missing_media"), std::string::npos) << out;
}

// Every epoch, every rank and a resumed run meet the same 6 bad records again: each counts once
// (issue 12: 4 bad records used to give a total of 7).
TEST(TrainRun, SkipCountsCountBadRecordsOverEpochsRanksAndResumes) {
  const auto data = broken_dataset();
  auto skipped_total = [](const fs::path& run) {
    const auto records = read_jsonl(run / "metrics.jsonl");
    EXPECT_FALSE(records.empty());
    return records.empty() ? nlohmann::json() : records.back()["summary"]["counters"];
  };
  // 2 ranks x 2 micro-batches x 2 samples per step: 24 good records are 3 steps, 9 steps 3 epochs.
  const auto dir = testing::temp_dir("train_skips_epochs");
  auto [status, out] = run_command(kMmtrain + " launch --nproc-per-node 2 --master-port " +
                                   std::to_string(testing::free_port()) + " -- train " +
                                   write_config(dir, (data / "train.jsonl").string(), "", 9).string() +
                                   " --set train.micro_batch_size=2 --set output.save_every=4 --set output.keep_last=3");
  ASSERT_EQ(status, 0) << out;
  const auto counters = skipped_total(dir / "run");
  EXPECT_EQ(counters.value("skipped_samples.total", -1), 6) << counters.dump();
  EXPECT_EQ(counters.value("skipped_samples.missing_media", -1), 1) << counters.dump();

  // Resumed on one process after step 4 (in the second epoch): still the same 6 records.
  const auto resumed = testing::temp_dir("train_skips_resumed");
  std::tie(status, out) =
      run_command(kMmtrain + " train " + write_config(resumed, (data / "train.jsonl").string(), "", 9).string() +
                  " --set output.resume=" + (dir / "run" / "checkpoints" / "step-00000004").string());
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(skipped_total(resumed / "run").value("skipped_samples.total", -1), 6);
}

TEST(TrainRun, OnErrorFailStopsAtTheFirstBrokenSampleNamingIt) {
  const auto data = broken_dataset();
  const auto dir = testing::temp_dir("train_fail");
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (data / "train.jsonl").string(), "", 3).string() +
                                   " --set data.shuffle=false --set data.on_error=fail");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("train.jsonl:1"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "run" / "final"));
}

// transformers loads the export; its logits equal those of the checkpoint's model in mmtrain.
void expect_export_matches(const fs::path& run_dir, const fs::path& work) {
  const auto hf = work / "hf";
  auto [status, out] = run_command(kMmtrain + " export --checkpoint " + run_dir.string() + " --to-hf " + hf.string());
  ASSERT_EQ(status, 0) << out;
  const auto golden = work / "export_logits.safetensors";
  auto [py, py_out] = run_command(kPython + " " + (kSourceDir / "tests/reference/export_logits.py").string() + " " +
                                  hf.string() + " " + (shapes_data() / "images/test/000000.png").string() + " " +
                                  golden.string());
  ASSERT_EQ(py, 0) << py_out;
  auto ref = Checkpoint::open(golden);
  auto model = load_checkpoint_model(resolve_training_checkpoint(run_dir));
  QwenVLInputs inputs;
  inputs.input_ids = ref.tensor("input_ids").clone();
  inputs.attention_mask = ref.tensor("attention_mask").clone();
  inputs.pixel_values = ref.tensor("pixel_values").clone();
  inputs.image_grid_thw = ref.tensor("image_grid_thw").clone();
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(inputs);
  EXPECT_LT(testing::max_abs_diff(logits, ref.tensor("logits")), 1e-4);
}

TEST(TrainRun, ExportLoadsInTransformersWithEqualLogits) {
  const auto dir = testing::temp_dir("train_export");
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (shapes_data() / "train.jsonl").string(), "", 4).string());
  ASSERT_EQ(status, 0) << out;
  expect_export_matches(dir / "run", dir);
}

TEST(TrainRun, LoraRunExportsMerged) {
  const auto dir = testing::temp_dir("train_lora");
  const std::string lora = "lora:\n  enabled: true\n  rank: 4\n  alpha: 8\n  dropout: 0.1\n";
  // A higher lr so the adapters move far from their zero-initialized B and the merge matters.
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (shapes_data() / "train.jsonl").string(), lora, 4).string() +
                                   " --set optim.lr=0.01");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("LoRA"), std::string::npos) << out;
  auto checkpoint = Checkpoint::open(resolve_training_checkpoint(dir / "run") / "model.safetensors");
  auto b = checkpoint.tensor("model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_GT(b.abs().max().item<double>(), 0.0) << "LoRA B stayed zero: the adapters did not train";
  expect_export_matches(dir / "run", dir);
}

TEST(TrainRun, Qwen2VLTrainsThroughTheSameCommandAndExports) {
  const auto dir = testing::temp_dir("train_qwen2_vl");
  const auto model = testing::tiny_qwen2_vl_dir(dir / "model");
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (shapes_data() / "train.jsonl").string(), "", 4, model).string());
  ASSERT_EQ(status, 0) << out;
  const auto checkpoint = resolve_training_checkpoint(dir / "run");
  EXPECT_EQ(read_json_file(checkpoint / "config.json")["model_type"], "qwen2_vl");
  EXPECT_TRUE(Checkpoint::open(checkpoint / "model.safetensors").contains("visual.blocks.1.mlp.fc2.weight"));
  const auto losses = losses_of(dir / "run");
  ASSERT_EQ(losses.size(), 4u);
  for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  expect_export_matches(dir / "run", dir);
}

TEST(TrainRun, Qwen3VLTrainsThroughTheSameCommandAndExports) {
  const auto dir = testing::temp_dir("train_qwen3_vl");
  const auto model = testing::tiny_qwen3_vl_dir(dir / "model");
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (shapes_data() / "train.jsonl").string(), "", 4, model).string());
  ASSERT_EQ(status, 0) << out;
  const auto checkpoint = resolve_training_checkpoint(dir / "run");
  EXPECT_EQ(read_json_file(checkpoint / "config.json")["model_type"], "qwen3_vl");
  const auto weights = Checkpoint::open(checkpoint / "model.safetensors");
  EXPECT_TRUE(weights.contains("visual.deepstack_merger_list.1.linear_fc2.weight"));
  EXPECT_TRUE(weights.contains("model.layers.1.self_attn.k_norm.weight"));
  const auto losses = losses_of(dir / "run");
  ASSERT_EQ(losses.size(), 4u);
  for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  expect_export_matches(dir / "run", dir);
}

// Qwen3-VL-MoE: trained with its load-balancing loss, exported with each layer's experts fused
// as transformers reads them.
TEST(TrainRun, Qwen3VLMoETrainsWithTheLoadBalancingLossAndExports) {
  const auto dir = testing::temp_dir("train_qwen3_vl_moe");
  const auto model = testing::tiny_qwen3_vl_moe_dir(dir / "model");
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (shapes_data() / "train.jsonl").string(), "", 4, model).string());
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("MoE load-balancing loss weight: 0.1 (config.json)"), std::string::npos) << out;
  const auto checkpoint = resolve_training_checkpoint(dir / "run");
  EXPECT_EQ(read_json_file(checkpoint / "config.json")["model_type"], "qwen3_vl_moe");
  EXPECT_TRUE(Checkpoint::open(checkpoint / "model.safetensors").contains("model.layers.1.mlp.experts.3.up_proj.weight"));
  expect_export_matches(dir / "run", dir);
  // model.router_aux_loss_coef overrides config.json's weight, and 0 turns the term off.
  const auto off = testing::temp_dir("train_qwen3_vl_moe_no_aux");
  auto [s2, o2] = run_command(kMmtrain + " train " +
                              write_config(off, (shapes_data() / "train.jsonl").string(), "", 1, model).string() +
                              " --set model.router_aux_loss_coef=0");
  ASSERT_EQ(s2, 0) << o2;
  EXPECT_NE(o2.find("MoE load-balancing loss weight: 0 (model.router_aux_loss_coef)"), std::string::npos) << o2;
}

// LoRA on a MoE model adapts every expert's projections (not the router), and the merged export
// loads in transformers with the adapted logits.
TEST(TrainRun, Qwen3VLMoELoraTrainsTheExpertsAndExportsMerged) {
  const auto dir = testing::temp_dir("train_qwen3_vl_moe_lora");
  const auto model = testing::tiny_qwen3_vl_moe_dir(dir / "model");
  const std::string lora = "lora:\n  enabled: true\n  rank: 4\n  alpha: 8\n";
  auto [status, out] =
      run_command(kMmtrain + " train " +
                  write_config(dir, (shapes_data() / "train.jsonl").string(), lora, 4, model).string() +
                  " --set optim.lr=0.01");
  ASSERT_EQ(status, 0) << out;
  // 2 layers x (4 attention projections + 4 experts x 3 projections)
  EXPECT_NE(out.find("LoRA: 32 adapters"), std::string::npos) << out;
  auto checkpoint = Checkpoint::open(resolve_training_checkpoint(dir / "run") / "model.safetensors");
  for (const char* name : {"model.layers.0.mlp.experts.2.down_proj.lora_B.weight",
                           "model.layers.1.mlp.experts.0.gate_proj.lora_B.weight"})
    EXPECT_GT(checkpoint.tensor(name).abs().max().item<double>(), 0.0) << name << " stayed zero";
  EXPECT_FALSE(checkpoint.contains("model.layers.0.mlp.gate.lora_A.weight"));
  expect_export_matches(dir / "run", dir);
}

// Qwen3.5 through the same command: packed rows (the Gated DeltaNet layer's state and conv window
// restarting per sample) with LoRA's default targets, which reach the DeltaNet's in_proj_qkv,
// in_proj_z and out_proj; the merged export loads in transformers with the adapted logits.
TEST(TrainRun, Qwen3_5TrainsPackedWithLoraOnTheDeltaNetAndExportsMerged) {
  const auto dir = testing::temp_dir("train_qwen3_5_lora");
  const auto model = testing::tiny_qwen3_5_dir(dir / "model");
  const std::string lora = "lora:\n  enabled: true\n  rank: 4\n  alpha: 8\n";
  auto [status, out] =
      run_command(kMmtrain + " train " +
                  write_config(dir, (shapes_data() / "train.jsonl").string(), lora, 4, model).string() +
                  " --set optim.lr=0.01 --set data.packing=true");
  ASSERT_EQ(status, 0) << out;
  // layer 0: in_proj_qkv, in_proj_z, out_proj + 3 MLP; layer 1: q, k, v, o + 3 MLP
  EXPECT_NE(out.find("LoRA: 13 adapters"), std::string::npos) << out;
  const auto checkpoint_dir = resolve_training_checkpoint(dir / "run");
  EXPECT_EQ(read_json_file(checkpoint_dir / "config.json")["model_type"], "qwen3_5");
  auto checkpoint = Checkpoint::open(checkpoint_dir / "model.safetensors");
  for (const char* name : {"model.layers.0.linear_attn.in_proj_qkv.lora_B.weight",
                           "model.layers.0.linear_attn.out_proj.lora_B.weight",
                           "model.layers.1.self_attn.q_proj.lora_B.weight"})
    EXPECT_GT(checkpoint.tensor(name).abs().max().item<double>(), 0.0) << name << " stayed zero";
  EXPECT_FALSE(checkpoint.contains("model.layers.0.linear_attn.in_proj_a.lora_A.weight"));
  const auto losses = losses_of(dir / "run");
  ASSERT_EQ(losses.size(), 4u);
  for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  expect_export_matches(dir / "run", dir);
}

// Qwen3.5 with its multi-token-prediction head: trained at the default weight (packed rows), kept in
// the checkpoint and written by the export beside what transformers loads (with equal logits); at
// weight 0 the head stays as initialised, frozen.
TEST(TrainRun, Qwen3_5TrainsItsMtpHeadAndExportsIt) {
  const auto dir = testing::temp_dir("train_qwen3_5_mtp");
  const auto model = testing::tiny_qwen3_5_with_mtp_dir(dir / "model");
  auto [status, out] = run_command(kMmtrain + " train " +
                                   write_config(dir, (shapes_data() / "train.jsonl").string(), "", 4, model).string() +
                                   " --set data.packing=true");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("multi-token prediction: 1 depth(s), loss weight 0.1 (default)"), std::string::npos) << out;
  auto trained = Checkpoint::open(resolve_training_checkpoint(dir / "run") / "model.safetensors");
  ASSERT_TRUE(trained.contains("mtp.layers.0.self_attn.q_proj.weight"));
  expect_export_matches(dir / "run", dir);
  auto exported = Checkpoint::open(dir / "hf" / "model.safetensors");
  for (const auto& name : trained.names())
    if (name.rfind("mtp.", 0) == 0) {
      ASSERT_TRUE(exported.contains(name)) << name;
      EXPECT_TRUE(torch::equal(exported.tensor(name), trained.tensor(name))) << name;
    }

  const auto frozen_dir = testing::temp_dir("train_qwen3_5_mtp_frozen");
  auto [s2, o2] = run_command(kMmtrain + " train " +
                              write_config(frozen_dir, (shapes_data() / "train.jsonl").string(), "", 4, model).string() +
                              " --set data.packing=true --set model.mtp_loss_weight=0");
  ASSERT_EQ(s2, 0) << o2;
  EXPECT_NE(o2.find("loss weight 0 (model.mtp_loss_weight); the head is frozen"), std::string::npos) << o2;
  auto frozen = Checkpoint::open(resolve_training_checkpoint(frozen_dir / "run") / "model.safetensors");
  QwenVLForConditionalGeneration initial(QwenVLConfig::from_file(model / "config.json"), /*with_mtp=*/true);
  init_weights(initial, 5);  // write_config's init_seed
  const auto fc = initial->mtp->fc->weight;
  EXPECT_TRUE(torch::equal(frozen.tensor("mtp.fc.weight"), fc));
  EXPECT_GT(testing::max_abs_diff(trained.tensor("mtp.fc.weight"), fc), 1e-4) << "the head did not train";
}

// Qwen3.5 in bf16 autocast with packing and recomputation (the DeltaNet's norms and rule keep
// fp32 inside): the same model as fp32 to bf16's precision, step after step.
TEST(TrainRun, Qwen3_5TrainsInBf16PackedAndRecomputedAsInFp32) {
  const auto train = (shapes_data() / "train.jsonl").string();
  const std::string options = " --set data.packing=true --set train.recompute=true";
  const auto fp32 = testing::temp_dir("train_qwen3_5_fp32");
  const auto model = testing::tiny_qwen3_5_with_mtp_dir(fp32 / "model");
  auto [s1, o1] = run_command(kMmtrain + " train " + write_config(fp32, train, "", 4, model).string() + options);
  ASSERT_EQ(s1, 0) << o1;
  const auto bf16 = testing::temp_dir("train_qwen3_5_bf16");
  auto [s2, o2] = run_command(kMmtrain + " train " + write_config(bf16, train, "", 4, model).string() + options +
                              " --set train.precision=bf16");
  ASSERT_EQ(s2, 0) << o2;
  const auto expected = losses_of(fp32 / "run"), got = losses_of(bf16 / "run");
  ASSERT_EQ(got.size(), 4u);
  for (const auto& [step, loss] : expected) EXPECT_NEAR(got.at(step), loss, 0.005 * loss) << "step " << step;  // measured: 5e-5
}

// A Qwen3.5 run with the head, packed, killed after a checkpoint and resumed, ends where the
// straight run ends, bit for bit (losses and every weight, the head's included).
TEST(TrainRun, Qwen3_5WithMtpResumesBitForBit) {
  const auto train = (shapes_data() / "train.jsonl").string();
  const std::string options = " --set data.packing=true --set output.save_every=3";
  const auto straight = testing::temp_dir("train_qwen3_5_straight");
  const auto model = testing::tiny_qwen3_5_with_mtp_dir(straight / "model");
  auto [s1, o1] = run_command(kMmtrain + " train " + write_config(straight, train, "", 6, model).string() + options);
  ASSERT_EQ(s1, 0) << o1;
  const auto expected = losses_of(straight / "run");
  ASSERT_EQ(expected.size(), 6u);
  const auto killed = testing::temp_dir("train_qwen3_5_killed");
  const auto config = write_config(killed, train, "", 6, model).string();
  auto [s2, o2] = run_command("MM_FAULT_KILL_AT_STEP=5 " + testing::kMmtrainWithFaults + " train " + config + options);
  EXPECT_NE(s2, 0) << "the run should have been killed at step 5:\n" << o2;
  auto [s3, o3] = run_command(kMmtrain + " train " + config + options);
  ASSERT_EQ(s3, 0) << o3;
  EXPECT_NE(o3.find("resumed from"), std::string::npos) << o3;
  const auto resumed = losses_of(killed / "run");
  for (const auto& [step, loss] : expected) EXPECT_EQ(resumed.at(step), loss) << "step " << step;
  auto a = Checkpoint::open(straight / "run" / "final");
  auto b = Checkpoint::open(killed / "run" / "final");
  EXPECT_TRUE(a.contains("mtp.fc.weight"));
  for (const auto& name : a.names()) EXPECT_TRUE(torch::equal(a.tensor(name), b.tensor(name))) << name;
}

TEST(TrainRun, ConfigErrorsNameTheKey) {
  const auto dir = testing::temp_dir("train_badcfg");
  const auto config = write_config(dir, (shapes_data() / "train.jsonl").string(), "", 2).string();
  auto [s1, o1] = run_command(kMmtrain + " train " + config + " --set train.grad_acum=2");
  EXPECT_EQ(s1, 1);
  EXPECT_NE(o1.find("train.grad_acum: unknown key"), std::string::npos) << o1;
  auto [s2, o2] = run_command(kMmtrain + " train " + config + " --set schedule.kind=step");
  EXPECT_EQ(s2, 1);
  EXPECT_NE(o2.find("schedule.kind: 'step' is not one of"), std::string::npos) << o2;
  auto [s3, o3] = run_command(kMmtrain + " train " + config + " --set data.train=/nonexistent.jsonl");
  EXPECT_EQ(s3, 1);
  EXPECT_NE(o3.find("/nonexistent.jsonl"), std::string::npos) << o3;
}

TEST(TrainRun, ExportOfSomethingElseNamesIt) {
  const auto dir = testing::temp_dir("train_export_bad");
  auto [s1, o1] = run_command(kMmtrain + " export --checkpoint " + (dir / "missing").string() + " --to-hf " +
                              (dir / "out").string());
  EXPECT_EQ(s1, 1);
  EXPECT_NE(o1.find((dir / "missing").string() + " does not exist"), std::string::npos) << o1;
  auto [s2, o2] = run_command(kMmtrain + " export --checkpoint " + dir.string() + " --to-hf " + (dir / "out").string());
  EXPECT_EQ(s2, 1);
  EXPECT_NE(o2.find("is not a training checkpoint"), std::string::npos) << o2;
  EXPECT_FALSE(fs::exists(dir / "out" / "model.safetensors"));
}

// data.chat_template_kwargs: the model template's variables, a mapping of scalars; anything else
// names the key.
TEST(TrainRun, ChatTemplateKwargsAreAMappingOfValues) {
  const std::string head = "model:\n  path: /m\ndata:\n  train: /d/train.jsonl\n";
  const auto config = parse_train_config(
      YAML::Load(head + "  chat_template_kwargs:\n    enable_thinking: false\n    effort: medium\n"), "run.yaml");
  EXPECT_EQ(config.data.chat_template_kwargs,
            (std::map<std::string, std::string>{{"effort", "medium"}, {"enable_thinking", "false"}}));
  EXPECT_THROW_MSG(parse_train_config(YAML::Load(head + "  chat_template_kwargs: [1, 2]\n"), "run.yaml"),
                   "run.yaml: data.chat_template_kwargs: has the wrong type");
}

// The ready configs under examples/ use only known keys and valid values.
TEST(TrainRun, ExampleConfigsParse) {
  int parsed = 0;
  for (const std::string family : {"qwen2.5vl", "qwen3vl", "qwen3_5"})
    for (const auto& entry : fs::directory_iterator(kSourceDir / "examples" / family)) {
      if (entry.path().extension() != ".yaml") continue;
      SCOPED_TRACE(entry.path().string());
      const auto config = parse_train_config(load_run_config(entry.path(), {}), entry.path().string());
      EXPECT_FALSE(config.data.train.empty());
      ++parsed;
    }
  EXPECT_GE(parsed, 7);
}

}  // namespace
}  // namespace mm
