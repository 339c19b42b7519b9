// Expert parallelism in training (`parallel.ep`): Qwen3-VL-MoE on real Gloo ranks, each holding
// only its share of every MoE layer's experts, equals one process over 10 steps (losses and final
// weights), alone and cut further by FSDP; its checkpoint resumes on other expert layouts (one
// process, ep=1, ep=4) with the uninterrupted run's losses and converts to the Hugging Face
// layout with every expert; HSDP replicas, LoRA on the experts and a pretrained model's sharded
// loading take it too; layouts that cannot work are clear errors before any step.
#include <filesystem>
#include <string>

#include "launched_training.h"
#include "mm/core/safetensors.h"
#include "testing.h"
#include "tiny_model_dirs.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::kMmtrain;
using testing::run_command;
using namespace testing::launched;

// 4 experts, top-2, load-balancing loss 0.1: the aux loss is a function of each micro-batch as a
// whole, so every layout cuts the same micro-batches (one sample each; 8 per optimizer step).
const fs::path& moe_model() {
  static const fs::path dir = testing::tiny_qwen3_vl_moe_dir(testing::temp_dir("ep_qwen3_vl_moe_model"));
  return dir;
}

std::string one_sample_micro_batches(int ranks) {
  return "--set train.micro_batch_size=1 --set train.grad_accum=" + std::to_string(kGlobalBatch / ranks) + " ";
}

const RunResult& single_process() {
  static const RunResult run = train("ep_single", 1, one_sample_micro_batches(1), "", moe_model());
  return run;
}

// Two ranks, two experts each, no further cut; saves at steps 5 and 10 for the resume tests.
const RunResult& ep2_with_checkpoints() {
  static const RunResult run = train("ep2", 2,
                                     one_sample_micro_batches(2) +
                                         "--set parallel.dp_shard=2 --set parallel.ep=2 "
                                         "--set output.save_every=5 --set output.keep_last=3",
                                     "", moe_model());
  return run;
}

TEST(ExpertParallelTraining, TwoRanksWithHalfTheExpertsEachEqualOneProcess) {
  const auto& run = ep2_with_checkpoints();
  expect_equal_to_single_process(run, single_process());
  EXPECT_NE(run.output.find("expert parallelism over ep=2: this rank holds experts [0, 2) of each MoE layer"),
            std::string::npos)
      << run.output;
  // The dispatch's all-to-alls are timed in every step's metrics.
  int timed = 0;
  for (const auto& record : records(run.dir / "run"))
    if (record.contains("step")) {
      ASSERT_TRUE(record.contains("all_to_all_wait_s")) << record.dump();
      EXPECT_GT(record["all_to_all_wait_s"].get<double>(), 0.0) << record.dump();
      ++timed;
    }
  EXPECT_EQ(timed, kSteps);
  // Rank 0 holds half the experts and, cut over the flattened dp_shard x ep, half the rest.
  auto parameter_bytes = [](const RunResult& r) { return summary_counters(r).value("state_bytes.parameters", 0.0); };
  const double whole = parameter_bytes(single_process()), mine = parameter_bytes(run);
  std::cout << "parameter bytes: one process " << whole << ", ep=2 rank 0 " << mine << "\n";
  EXPECT_GT(mine, 0.45 * whole);
  EXPECT_LT(mine, 0.55 * whole);
}

// ep=2 inside dp_shard=4: each expert is cut over the 2 ranks that hold it, every other parameter
// over all 4; with recomputation, so the dispatch's collectives run again inside the backward.
// Saves at step 5 (each expert's rows in two slice files) for a resume test.
const RunResult& ep2_fsdp4_with_checkpoints() {
  static const RunResult run = train("ep2_fsdp4", 4,
                                     one_sample_micro_batches(4) +
                                         "--set parallel.dp_shard=4 --set parallel.ep=2 --set train.recompute=true "
                                         "--set output.save_every=5",
                                     "", moe_model());
  return run;
}

TEST(ExpertParallelTraining, ExpertsCutFurtherByFsdpEqualOneProcess) {
  const auto& run = ep2_fsdp4_with_checkpoints();
  expect_equal_to_single_process(run, single_process());
  EXPECT_NE(run.output.find("holds experts [0, 2) of each MoE layer, cut over dp_shard=2"), std::string::npos)
      << run.output;
}

// HSDP 2 x 2 with ep=2: each replica's 2 ranks hold the experts half each, and the replicas
// all-reduce the experts' gradients as every other slice's.
TEST(ExpertParallelTraining, ExpertParallelInsideHsdpEqualsOneProcess) {
  const auto run = train("ep2_hsdp", 4, one_sample_micro_batches(4) + "--set parallel.dp_shard=2 --set parallel.ep=2",
                         "", moe_model());
  expect_equal_to_single_process(run, single_process());
  EXPECT_NE(run.output.find("dp_replicate=2 x dp_shard=1 x ep=2"), std::string::npos) << run.output;
}

// LoRA on the experts (the default targets include every expert's projections): each rank trains
// the adapters of its own experts, and the merged export equals one process's.
TEST(ExpertParallelTraining, LoraOnTheExpertsEqualsOneProcess) {
  const std::string lora = "--set lora.enabled=true --set train.max_steps=4 ";
  const auto one = train("ep_lora_one", 1, one_sample_micro_batches(1) + lora, "", moe_model());
  const auto two = train("ep_lora_ep2", 2, one_sample_micro_batches(2) + lora + "--set parallel.dp_shard=2 --set parallel.ep=2",
                         "", moe_model());
  expect_equal_runs(two, one, 4);
}

// The step-5 checkpoint of `straight` (default: the ep=2 run), resumed on `ranks` ranks with
// `layout`: steps 6..10 have the uninterrupted run's losses.
void expect_resume_continues(int ranks, const std::string& layout, const std::string& name,
                             const RunResult& straight = ep2_with_checkpoints()) {
  SCOPED_TRACE(name);
  ASSERT_EQ(straight.status, 0) << straight.output;
  const auto saved = straight.dir / "run" / "checkpoints" / "step-00000005";
  ASSERT_TRUE(fs::exists(saved / "sharding.json"));
  const auto resumed = train(name, ranks, one_sample_micro_batches(ranks) + layout + " --set output.resume=" + saved.string(),
                             "", moe_model());
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const auto expected = losses_of(straight), got = losses_of(resumed);
  ASSERT_EQ(got.size(), 5u);
  for (int64_t step = 6; step <= kSteps; ++step)
    EXPECT_NEAR(got.at(step), expected.at(step), 1e-5 * expected.at(step)) << "step " << step;
}

TEST(ExpertParallelTraining, CheckpointResumesOnOneProcess) { expect_resume_continues(1, "", "ep_resume_single"); }

TEST(ExpertParallelTraining, CheckpointResumesWithoutExpertParallelism) {
  expect_resume_continues(2, "--set parallel.dp_shard=2 --set parallel.ep=1", "ep_resume_fsdp2");
}

TEST(ExpertParallelTraining, CheckpointResumesWithOneExpertPerRank) {
  expect_resume_continues(4, "--set parallel.dp_shard=4 --set parallel.ep=4", "ep_resume_ep4");
}

TEST(ExpertParallelTraining, CheckpointOfExpertsCutByFsdpResumesOnOneProcess) {
  expect_resume_continues(1, "", "ep_fsdp_resume_single", ep2_fsdp4_with_checkpoints());
}

// Every rank's experts reach the Hugging Face directory: the final export and `mmtrain convert`
// of the step-10 checkpoint hold the same tensors, every expert included.
TEST(ExpertParallelTraining, CheckpointConvertsToHuggingFaceWithEveryExpert) {
  const auto& run = ep2_with_checkpoints();
  ASSERT_EQ(run.status, 0) << run.output;
  const auto out = testing::temp_dir("ep_convert_hf") / "hf";
  auto [status, output] =
      run_command(kMmtrain + " convert --from " + (run.dir / "run").string() + " --to " + out.string());
  ASSERT_EQ(status, 0) << output;
  const auto final_weights = Checkpoint::open(run.dir / "run" / "final"), got = Checkpoint::open(out);
  ASSERT_EQ(final_weights.names(), got.names());
  int experts = 0;
  for (const auto& name : got.names()) {
    EXPECT_TRUE(torch::equal(final_weights.tensor(name), got.tensor(name))) << name;
    // Hugging Face stacks a layer's experts: [num_experts, ...] per projection.
    if (name.find(".mlp.experts.") != std::string::npos) {
      EXPECT_EQ(got.tensor(name).size(0), 4) << name;
      ++experts;
    }
  }
  EXPECT_EQ(experts, 2 * 2) << "gate_up_proj and down_proj of both MoE layers";
}

// Fine-tuning a pretrained MoE (the one-process run's Hugging Face export, experts stacked per
// layer) with ep=2 inside dp_shard=4: each rank reads only its experts' rows of the stacked
// tensors, and the 3 steps equal one process's.
TEST(ExpertParallelTraining, PretrainedModelLoadsOnlyEachRanksExperts) {
  ASSERT_EQ(single_process().status, 0) << single_process().output;
  const auto pretrained = single_process().dir / "run" / "final";
  const std::string from = "--set model.path=" + pretrained.string() + " --set model.from_scratch=false" +
                           " --set train.max_steps=3 ";
  const auto one = train("ep_pretrained_one", 1, one_sample_micro_batches(1) + from, "", moe_model());
  const auto four = train("ep_pretrained_ep2_fsdp4", 4,
                          one_sample_micro_batches(4) + from + "--set parallel.dp_shard=4 --set parallel.ep=2", "",
                          moe_model());
  expect_equal_runs(four, one, 3);
  EXPECT_NE(four.output.find("sharded loading: this rank read"), std::string::npos) << four.output;
  const auto c = summary_counters(four);
  ASSERT_TRUE(c.contains("load_bytes.checkpoint")) << c.dump();
  const double total = c["load_bytes.checkpoint"].get<double>(), read = c["load_bytes.read_by_this_rank"].get<double>();
  std::cout << "rank 0 read " << read << " of " << total << " checkpoint bytes\n";
  EXPECT_GT(read, 0.2 * total);
  EXPECT_LT(read, 0.3 * total) << "a quarter: half the experts cut in 2, the rest cut in 4";
}

void expect_refused(const RunResult& run, const std::string& message) {
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_NE(run.output.find(message), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(run.dir / "run" / "final")) << "refused before training";
}

// Qwen3.5-MoE: the routed experts spread over ep=2 while each rank keeps the shared expert (cut by
// FSDP with the rest of its layer) and the Gated DeltaNet; the same training as one process.
// AdamW's eps is raised to 1e-6 here: the DeltaNet's in_proj_a gets gradients near 1e-8 at this
// size, where eps 1e-8 turns their summation-order rounding into whole steps (its weights then
// differ by 1.5e-4 relative while the losses agree to 1e-7 and every other tensor to 7e-6).
TEST(ExpertParallelTraining, Qwen3_5MoeWithSharedExpertsEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_5_moe_dir(testing::temp_dir("ep_qwen3_5_moe_model"));
  const std::string eps = "--set optim.eps=1e-6 ";
  const auto one = train("ep_qwen3_5_one", 1, one_sample_micro_batches(1) + eps, "", model);
  const auto two = train("ep_qwen3_5_ep2", 2,
                         one_sample_micro_batches(2) + eps + "--set parallel.dp_shard=2 --set parallel.ep=2", "", model);
  expect_equal_to_single_process(two, one);
  EXPECT_NE(two.output.find("this rank holds experts [0, 2) of each MoE layer"), std::string::npos) << two.output;
}

TEST(ExpertParallelTraining, LayoutsThatCannotWorkAreClearErrors) {
  expect_refused(train("ep_one_process", 1, "--set parallel.ep=2", "", moe_model()),
                 "parallel.ep=2 needs as many processes (mmtrain launch, torchrun); this is one process");
  expect_refused(train("ep_not_dividing", 2, "--set parallel.dp_shard=2 --set parallel.ep=3", "", moe_model()),
                 "parallel.ep=3 does not divide parallel.dp_shard=2");
  expect_refused(train("ep_experts", 3, "--set parallel.dp_shard=3 --set parallel.ep=3", "", moe_model()),
                 "ep=3 does not divide the model's 4 experts (num_experts)");
  expect_refused(train("ep_dense", 2, "--set parallel.dp_shard=2 --set parallel.ep=2"),
                 "expert parallelism (parallel.ep=2): the model has no MoE layer");
  expect_refused(train("ep_zero", 1, "--set parallel.ep=0", "", moe_model()), "parallel.ep");
}

}  // namespace
}  // namespace mm
