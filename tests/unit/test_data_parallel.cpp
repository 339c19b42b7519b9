// Multi-process training equals one process: `mmtrain launch` runs real ranks over Gloo (DP,
// FSDP, HSDP, per-tower placements, torchrun) on the tiny shapes model, and their 10 losses and
// final weights must equal a single process with the same global batch. Also: the training
// state per rank shrinks as 1/N under FSDP, a checkpoint saved by 4 ranks resumes on 2 and on 1
// with the losses of the uninterrupted run, a run stopped on 2 ranks continues on 3 and on 1 with
// the uninterrupted run's sample order, and a killed rank stops the job with its name.
#include <fstream>
#include <functional>
#include <set>

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

TEST(DataParallel, TwoReplicasEqualOneProcess) {
  expect_equal_to_single_process(train("dp2", 2, "--set parallel.dp_shard=1"));
}

TEST(DataParallel, FsdpOverTwoRanksEqualsOneProcess) {
  expect_equal_to_single_process(train("fsdp2", 2, "--set parallel.dp_shard=2"));
}

// Qwen3-VL (DeepStack mergers and the position table outside the vision blocks, q/k norms in the
// decoder layers) shards by the same plan.
TEST(DataParallel, Qwen3VLFsdpOverTwoRanksEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_vl_dir(testing::temp_dir("dp_qwen3_vl_model"));
  const auto single = train("qwen3_vl_single", 1, "", "", model);
  expect_equal_to_single_process(train("qwen3_vl_fsdp2", 2, "--set parallel.dp_shard=2", "", model), single);
}

// Qwen3.5's hybrid decoder sharded: the Gated DeltaNet's parameters (conv, A_log, dt_bias beside
// the projections) cut and gathered with each decoder layer, and its padded rows (the padding
// zeroed before the conv and the state) cut between the ranks; its multi-token-prediction head
// trained beside it, the head's layer a unit of its own, recomputed. AdamW's eps is 1e-6 here: the
// DeltaNet's in_proj_a gets gradients near 1e-8 at this size, where eps 1e-8 turns their
// summation-order rounding into whole steps (1.6e-5 relative on that tensor; every other under 6e-6).
TEST(DataParallel, Qwen3_5WithItsMtpHeadFsdpOverTwoRanksEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_5_with_mtp_dir(testing::temp_dir("dp_qwen3_5_model"));
  const auto single = train("qwen3_5_single", 1, "--set optim.eps=1e-6", "", model);
  EXPECT_NE(single.output.find("multi-token prediction: 1 depth(s)"), std::string::npos) << single.output;
  expect_equal_to_single_process(
      train("qwen3_5_fsdp2", 2, "--set optim.eps=1e-6 --set parallel.dp_shard=2 --set train.recompute=true", "", model),
      single);
}

// Qwen3-VL-MoE with its load-balancing loss, recomputed inside the sharded layers (the aux
// gradient then reaches the routers through the recomputation). The aux loss is a function of
// each micro-batch as a whole, so the layouts cut the same micro-batches: one sample each.
TEST(DataParallel, Qwen3VLMoEFsdpWithTheLoadBalancingLossEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_vl_moe_dir(testing::temp_dir("dp_qwen3_vl_moe_model"));
  const auto single =
      train("qwen3_vl_moe_single", 1, "--set train.micro_batch_size=1 --set train.grad_accum=8", "", model);
  EXPECT_NE(single.output.find("MoE load-balancing loss weight: 0.1 (config.json)"), std::string::npos)
      << single.output;
  expect_equal_to_single_process(train("qwen3_vl_moe_fsdp2", 2,
                                       "--set parallel.dp_shard=2 --set train.recompute=true "
                                       "--set train.micro_batch_size=1 --set train.grad_accum=4",
                                       "", model),
                                 single);
}

TEST(DataParallel, FsdpOverFourRanksEqualsOneProcess) {
  expect_equal_to_single_process(train("fsdp4", 4, "--set parallel.dp_shard=4"));
}

TEST(DataParallel, HsdpTwoByTwoEqualsOneProcess) {
  expect_equal_to_single_process(train("hsdp", 4, "--set parallel.dp_shard=2"));
}

// Gathered blocks kept from forward to backward, no prefetch, recomputation inside the sharded
// blocks: the schedule of collectives changes, the numbers must not.
TEST(DataParallel, FsdpVariantsEqualOneProcess) {
  expect_equal_to_single_process(train("fsdp_variants", 2,
                                       "--set parallel.reshard_after_forward=false --set parallel.prefetch=false "
                                       "--set train.recompute=true --set parallel.cpu_offload=true"));
}

// Per-tower settings: the vision tower replicated (DDP), the language model sharded.
TEST(DataParallel, ReplicatedVisionShardedLanguageEqualsOneProcess) {
  expect_equal_to_single_process(train("mixed", 2, "--set parallel.vision=replicate --set parallel.language=shard"));
}

// torchrun from the oracle venv starts the ranks; mmtrain reads its environment.
TEST(DataParallel, TorchrunNoPythonLaunchWorks) {
  const auto torchrun = fs::path(testing::kPython).parent_path() / "torchrun";
  ASSERT_TRUE(fs::exists(torchrun)) << torchrun << " (torch's launcher in the oracle venv)";
  RunResult run;
  run.dir = testing::temp_dir("dp_torchrun");
  const std::string cmd = "OMP_NUM_THREADS=1 " + torchrun.string() + " --nproc-per-node 2 --master-port " +
                          std::to_string(testing::free_port()) + " --no-python " + kMmtrain + " train " +
                          write_config(run.dir).string() + " --set train.micro_batch_size=" +
                          std::to_string(kGlobalBatch / kGradAccum / 2);
  std::tie(run.status, run.output) = run_command(cmd);
  expect_equal_to_single_process(run);
}

// Parameters + gradients + optimizer state on one rank, from the run summary.
int64_t state_bytes(const RunResult& run) {
  for (const auto& r : records(run.dir / "run"))
    if (r.contains("summary")) {
      const auto& c = r["summary"]["counters"];
      const int64_t total = c["state_bytes.parameters"].get<int64_t>() + c["state_bytes.gradients"].get<int64_t>() +
                            c["state_bytes.optimizer"].get<int64_t>();
      std::cout << run.dir.filename().string() << ": parameters " << c["state_bytes.parameters"] << " B, gradients "
                << c["state_bytes.gradients"] << " B, optimizer " << c["state_bytes.optimizer"] << " B, total "
                << total << " B per rank\n";
      return total;
    }
  ADD_FAILURE() << "no summary in " << run.dir;
  return 0;
}

TEST(DataParallel, FsdpKeepsAboutOneNthOfTheStatePerRank) {
  ASSERT_EQ(reference().status, 0) << reference().output;
  const double single = static_cast<double>(state_bytes(reference()));
  for (int ranks : {2, 4}) {
    const auto run = train("memory" + std::to_string(ranks), ranks, "--set train.max_steps=1");
    ASSERT_EQ(run.status, 0) << run.output;
    const double ratio = static_cast<double>(state_bytes(run)) / single;
    std::cout << "FSDP=" << ranks << ": " << ratio << " of one process's bytes\n";
    // 1/N plus the zero padding of the last slices.
    EXPECT_GT(ratio, 1.0 / ranks);
    EXPECT_LT(ratio, 1.0 / ranks * 1.02);
  }
}

// Sharded loading: training from a pretrained checkpoint over 2 FSDP ranks builds the model
// without its weights and each rank copies only the rows it keeps from the mapped checkpoint
// (about half of its bytes: the counters of rank 0's summary); the losses and weights equal one
// process that loaded the whole model.
TEST(DataParallel, FsdpRanksLoadOnlyTheirRowsOfAPretrainedModel) {
  ASSERT_EQ(reference().status, 0) << reference().output;
  const auto pretrained = reference().dir / "run" / "final";  // the reference run's HF export
  const std::string from = "--set model.path=" + pretrained.string() + " --set model.from_scratch=false" +
                           " --set train.max_steps=3";
  const auto one = train("pretrained_one", 1, from);
  const auto two = train("pretrained_fsdp2", 2, from + " --set parallel.dp_shard=2");
  expect_equal_runs(two, one, 3);
  EXPECT_FALSE(summary_counters(one).contains("load_bytes.checkpoint")) << "one process loads the whole model itself";
  const auto c = summary_counters(two);
  ASSERT_TRUE(c.contains("load_bytes.checkpoint")) << c.dump();
  const double total = c["load_bytes.checkpoint"].get<double>(), read = c["load_bytes.read_by_this_rank"].get<double>();
  std::cout << "rank 0 read " << read << " of " << total << " checkpoint bytes\n";
  EXPECT_GT(read, 0.45 * total);
  EXPECT_LT(read, 0.55 * total);
  EXPECT_NE(two.output.find("sharded loading: this rank read"), std::string::npos) << two.output;

  // LoRA: adapters added to the unloaded model keep their own initial values, the base weights
  // come from the checkpoint rows; the losses still equal one process's.
  const auto lora_one = train("pretrained_lora_one", 1, from + " --set lora.enabled=true");
  const auto lora_two = train("pretrained_lora_fsdp2", 2, from + " --set lora.enabled=true --set parallel.dp_shard=2");
  ASSERT_EQ(lora_one.status, 0) << lora_one.output;
  ASSERT_EQ(lora_two.status, 0) << lora_two.output;
  const auto lora_expected = losses_of(lora_one), lora_got = losses_of(lora_two);
  ASSERT_EQ(lora_got.size(), 3u);
  for (const auto& [step, loss] : lora_expected)
    EXPECT_NEAR(lora_got.at(step), loss, 1e-5 * std::abs(loss)) << "LoRA step " << step;
}

// A 4-rank FSDP run that saves at steps 5 and 10 (shared by the checkpoint tests).
const RunResult& fsdp4_with_checkpoints() {
  static const RunResult run = train("fsdp4_saving", 4, "--set output.save_every=5 --set output.keep_last=3");
  return run;
}

// Steps 6..10 of a run resumed from `checkpoint` on `ranks` ranks equal the uninterrupted run's.
void expect_resume_continues(const fs::path& checkpoint, int ranks, const std::string& name) {
  SCOPED_TRACE(name + " on " + std::to_string(ranks) + " rank(s)");
  const auto& straight = fsdp4_with_checkpoints();
  expect_resumed_like(train(name, ranks, "--set output.resume=" + checkpoint.string() + " --set parallel.dp_shard=" +
                                             std::to_string(ranks)),
                      straight, 5);
}

// Saved at step 5 by 4 FSDP ranks, resumed by 2 ranks and by one process.
TEST(DataParallel, ShardedCheckpointResumesOnOtherLayouts) {
  ASSERT_EQ(fsdp4_with_checkpoints().status, 0) << fsdp4_with_checkpoints().output;
  const auto saved = fsdp4_with_checkpoints().dir / "run" / "checkpoints" / "step-00000005";
  ASSERT_TRUE(fs::exists(saved / "sharding.json"));
  for (int ranks : {2, 1}) expect_resume_continues(saved, ranks, "resume_on" + std::to_string(ranks));
}

// `mmtrain convert` re-cuts the 4-slice checkpoint into 2 slices, which 2 ranks resume from.
TEST(DataParallel, ConvertedCheckpointResumes) {
  ASSERT_EQ(fsdp4_with_checkpoints().status, 0) << fsdp4_with_checkpoints().output;
  const auto saved = fsdp4_with_checkpoints().dir / "run" / "checkpoints" / "step-00000005";
  const auto converted = testing::temp_dir("dp_convert") / "two_slices";
  auto [status, output] = run_command(kMmtrain + " convert --from " + saved.string() + " --to " +
                                      converted.string() + " --slices 2");
  ASSERT_EQ(status, 0) << output;
  EXPECT_TRUE(fs::exists(converted / "model-shard-00001-of-00002.safetensors"));
  expect_resume_continues(converted, 2, "resume_converted");
}

// The sharded step-10 checkpoint becomes a Hugging Face directory with the weights of the run's
// final model (`mmtrain convert` and `mmtrain export` alike); that directory becomes a 3-slice
// training checkpoint and back without a bit changed.
TEST(DataParallel, ConvertsBetweenShardedAndHuggingFace) {
  const auto& run = fsdp4_with_checkpoints();
  ASSERT_EQ(run.status, 0) << run.output;
  const auto dir = testing::temp_dir("dp_convert_hf");
  const auto final_weights = Checkpoint::open(run.dir / "run" / "final");
  auto expect_final_weights = [&](const fs::path& hf) {
    const auto got = Checkpoint::open(hf);
    ASSERT_EQ(final_weights.names(), got.names());
    for (const auto& name : got.names())
      EXPECT_TRUE(torch::equal(final_weights.tensor(name), got.tensor(name))) << hf << ": " << name;
  };
  for (const std::string command : {"convert --from", "export --checkpoint"}) {
    const auto out = dir / (command.substr(0, 6) + "_hf");
    auto [status, output] = run_command(kMmtrain + " " + command + " " + (run.dir / "run").string() +
                                        (command[0] == 'c' ? " --to " : " --to-hf ") + out.string());
    ASSERT_EQ(status, 0) << output;
    expect_final_weights(out);
  }
  auto [s1, o1] = run_command(kMmtrain + " convert --from " + (run.dir / "run" / "final").string() + " --to " +
                              (dir / "three").string() + " --slices 3");
  ASSERT_EQ(s1, 0) << o1;
  auto [s2, o2] =
      run_command(kMmtrain + " convert --from " + (dir / "three").string() + " --to " + (dir / "back").string());
  ASSERT_EQ(s2, 0) << o2;
  expect_final_weights(dir / "back");
  auto [s3, o3] = run_command(kMmtrain + " convert --from " + (run.dir / "run" / "final").string() + " --to " +
                              (dir / "back").string());
  EXPECT_NE(s3, 0);
  EXPECT_NE(o3.find("already exists"), std::string::npos) << o3;
}

// A damaged sharded checkpoint is refused with the file and what is wrong, before any training.
TEST(DataParallel, DamagedShardedCheckpointIsAClearError) {
  ASSERT_EQ(fsdp4_with_checkpoints().status, 0) << fsdp4_with_checkpoints().output;
  const auto saved = fsdp4_with_checkpoints().dir / "run" / "checkpoints" / "step-00000005";
  const auto dir = testing::temp_dir("dp_damaged");
  auto damaged = [&](const std::string& name, const std::function<void(const fs::path&)>& damage,
                     const std::string& message) {
    SCOPED_TRACE(name);
    const auto copy = dir / name;
    fs::copy(saved, copy, fs::copy_options::recursive);
    damage(copy);
    const auto run = train("damaged_" + name, 1, "--set output.resume=" + copy.string());
    EXPECT_NE(run.status, 0);
    EXPECT_NE(run.output.find(message), std::string::npos) << run.output;
    EXPECT_FALSE(fs::exists(run.dir / "run" / "final"));
  };
  damaged("missing_slice", [](const fs::path& d) { fs::remove(d / "model-shard-00002-of-00004.safetensors"); },
          "model-shard-00002-of-00004.safetensors does not exist");
  damaged("bad_json", [](const fs::path& d) { std::ofstream(d / "sharding.json") << "{\"shards\": 4,"; },
          "sharding.json: malformed JSON");
  damaged("wrong_shape", [](const fs::path& d) {
    auto layout = nlohmann::json::parse(std::ifstream(d / "sharding.json"));
    layout["model"]["model.norm.weight"]["shape"] = {7};
    std::ofstream(d / "sharding.json") << layout.dump();
  }, "model.norm.weight: the slices make shape");
  damaged("wrong_dtype", [](const fs::path& d) {
    auto layout = nlohmann::json::parse(std::ifstream(d / "sharding.json"));
    layout["model"]["model.norm.weight"]["dtype"] = "BF16";
    std::ofstream(d / "sharding.json") << layout.dump();
  }, "model.norm.weight: the slices hold F32, the layout says BF16");
}

// bf16 gathered parameters and compute with fp32 sharded masters: training follows the fp32 run
// closely and the final model holds the fp32 masters.
TEST(DataParallel, MixedPrecisionKeepsFp32Masters) {
  ASSERT_EQ(reference().status, 0) << reference().output;
  const auto run = train("bf16", 2, "--set parallel.param_dtype=bf16");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto expected = losses_of(reference()), got = losses_of(run);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [step, loss] : expected) EXPECT_NEAR(got.at(step), loss, 0.05 * loss) << "step " << step;
  const auto weights = Checkpoint::open(run.dir / "run" / "final");
  for (const auto& name : weights.names()) EXPECT_EQ(weights.tensor(name).scalar_type(), torch::kFloat) << name;
}

// The data position is global: a run stopped after 80 samples on 2 processes continues on 3 and
// on 1 exactly where the uninterrupted run goes on. samples/rank-<r>.jsonl (output.sample_log)
// records what every rank consumed; a one-process run consumes the global order in sequence, and
// with W ranks rank r's k-th sample must be the global order's (start + k W + r)-th.
class SampleOrder {
 public:
  // `mmtrain train` on `ranks` processes, 2 samples per micro-batch and 2 micro-batches per step.
  static RunResult run(const std::string& name, int ranks, int64_t steps, const std::string& settings = "") {
    static const fs::path data = testing::synth_shapes_data("dp_order_data", 200, 4, 6);
    RunResult r;
    r.dir = testing::temp_dir("dp_order_" + name);
    const std::string args = "train " + write_config(r.dir).string() + " --set data.train=" +
                             (data / "train.jsonl").string() + " --set train.micro_batch_size=2" +
                             " --set train.max_steps=" + std::to_string(steps) + " --set output.sample_log=true " +
                             settings;
    const std::string launch = ranks == 1 ? kMmtrain + " "
                                          : kMmtrain + " launch --nproc-per-node " + std::to_string(ranks) +
                                                " --master-port " + std::to_string(testing::free_port()) + " -- ";
    std::tie(r.status, r.output) = run_command("OMP_NUM_THREADS=1 " + launch + args);
    return r;
  }

  // Rank `rank`'s consumed dataset indices in order, from the steps after `after_step`.
  static std::vector<int64_t> consumed(const RunResult& r, int rank, int64_t after_step = 0) {
    std::vector<int64_t> out;
    std::ifstream in(r.dir / "run" / "samples" / ("rank-" + std::to_string(rank) + ".jsonl"));
    EXPECT_TRUE(in.good()) << "no sample log of rank " << rank << " in " << r.dir;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["step"].get<int64_t>() <= after_step) continue;
      for (const auto& m : j["micro_batches"]) {
        EXPECT_EQ(m["epoch"].get<int64_t>(), 0);
        for (const auto& i : m["indices"]) out.push_back(i.get<int64_t>());
      }
    }
    return out;
  }

  // The global positions start + r, start + r + W, ... of `global` for `count` samples.
  static std::vector<int64_t> share(const std::vector<int64_t>& global, size_t start, int rank, int world,
                                    size_t count) {
    std::vector<int64_t> out;
    for (size_t p = start + rank; out.size() < count; p += world) out.push_back(global.at(p));
    return out;
  }
};

TEST(DataParallel, StoppedOnTwoRanksContinuesOnThreeAndOneInTheGlobalOrder) {
  const auto single = SampleOrder::run("single", 1, 40);  // 160 samples in sequence
  ASSERT_EQ(single.status, 0) << single.output;
  const auto global = SampleOrder::consumed(single, 0);
  ASSERT_EQ(global.size(), 160u);
  EXPECT_EQ(std::set<int64_t>(global.begin(), global.end()).size(), 160u) << "one epoch repeats nothing";

  const auto two = SampleOrder::run("two", 2, 10, "--set output.save_every=10");  // 80 samples
  ASSERT_EQ(two.status, 0) << two.output;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(SampleOrder::consumed(two, r), SampleOrder::share(global, 0, r, 2, 40));
  const auto checkpoint = two.dir / "run" / "checkpoints" / "step-00000010";
  ASSERT_TRUE(fs::exists(checkpoint)) << two.output;

  // 5 more steps on 3 ranks (60 samples), 10 more on one process (40 samples).
  for (const int ranks : {3, 1}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    const auto resumed = SampleOrder::run("resumed" + std::to_string(ranks), ranks, ranks == 3 ? 15 : 20,
                                          "--set output.resume=" + checkpoint.string());
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    const size_t per_rank = ranks == 3 ? 20 : 40;
    for (int r = 0; r < ranks; ++r)
      EXPECT_EQ(SampleOrder::consumed(resumed, r, 10), SampleOrder::share(global, 80, r, ranks, per_rank))
          << "rank " << r;
  }

  // `convert --slices 3` keeps the one global position; 3 ranks resume from it alike.
  const auto converted = testing::temp_dir("dp_order_convert") / "three";
  auto [status, output] =
      run_command(kMmtrain + " convert --from " + checkpoint.string() + " --to " + converted.string() + " --slices 3");
  ASSERT_EQ(status, 0) << output;
  const auto from_converted = SampleOrder::run("converted3", 3, 11, "--set output.resume=" + converted.string());
  ASSERT_EQ(from_converted.status, 0) << from_converted.output;
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(SampleOrder::consumed(from_converted, r, 10), SampleOrder::share(global, 80, r, 3, 4));
}

TEST(DataParallel, KilledRankStopsTheJobAndIsNamed) {
  const auto run = train("killed", 2, "--set parallel.timeout_s=60", "MM_FAULT_KILL_AT_STEP=3 MM_FAULT_KILL_RANK=1");
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("rank 1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("SIGKILL"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(run.dir / "run" / "final")) << "no final model after a failed run";
}

TEST(DataParallel, ShardCountMustDivideTheRanks) {
  const auto run = train("bad_shard", 2, "--set parallel.dp_shard=3");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("parallel.dp_shard=3 does not divide WORLD_SIZE=2"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace mm
