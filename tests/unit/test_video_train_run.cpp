// `mmtrain train` for text-to-video end to end on synthetic moving-shape clips with a tiny random
// Wan pipeline (the wan_pipeline oracle's): the flow-matching loss falls clearly over a few hundred
// steps, `mmtrain infer t2v` on the result writes an mp4 that ffprobe reads with the right frame
// count and size, training from `mmtrain extract`ed features gives the losses of training from the
// clips, a resumed run continues the uninterrupted one's losses, two FSDP processes equal one,
// and broken clips are skipped and counted.
#include <fstream>

#include "video_train_runs.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::kMmtrain;
using testing::run_command;
using namespace testing::video_runs;

TEST(VideoTrainRun, LossFallsAndTheTrainedModelWritesAnMp4) {
  const auto dir = testing::temp_dir("video_train_learn");
  const auto config = write_config(dir, clip_data(clips() / "train.jsonl"), 300, "ema:\n  decay: 0.9\n");
  auto [status, out] = run_command(kMmtrain + " train " + config.string() + " --set train.grad_accum=1");
  ASSERT_EQ(status, 0) << out;
  const auto losses = losses_of(dir / "run");
  ASSERT_EQ(losses.size(), 300u);
  const double first = mean_loss(losses, 1, 30), last = mean_loss(losses, 271, 300);
  std::cout << "mean loss of steps 1-30: " << first << ", of steps 271-300: " << last << "\n";
  EXPECT_LT(last, 0.8 * first);
  const auto final_model = dir / "run" / "final";
  ASSERT_TRUE(fs::is_regular_file(final_model / "transformer" / "diffusion_pytorch_model.safetensors"));
  ASSERT_TRUE(fs::is_regular_file(final_model / "transformer_ema" / "diffusion_pytorch_model.safetensors"));

  const auto mp4 = dir / "sample.mp4";
  auto [s2, o2] = run_command(kMmtrain + " infer t2v --model " + final_model.string() +
                              " --prompt 'a red circle moving from left to right' --frames 9 --size 32x32 --steps 4 "
                              "--guidance 3 --seed 1 --max-sequence-length 16 -o " + mp4.string() + " --frames-dir " +
                              (dir / "frames").string());
  ASSERT_EQ(s2, 0) << o2;
  auto [s3, probe] = run_command("ffprobe -v error -count_frames -select_streams v:0 -show_entries "
                                 "stream=nb_read_frames,width,height -of json " + mp4.string(), false);
  ASSERT_EQ(s3, 0) << probe;
  const auto stream = nlohmann::json::parse(probe).at("streams").at(0);
  EXPECT_EQ(stream.at("nb_read_frames").get<std::string>(), "9");
  EXPECT_EQ(stream.at("width").get<int>(), 32);
  EXPECT_EQ(stream.at("height").get<int>(), 32);
  EXPECT_TRUE(fs::is_regular_file(dir / "frames" / "frame_000008.png"));
}

TEST(VideoTrainRun, ExtractedFeaturesGiveTheLossesOfRawClips) {
  const auto dir = testing::temp_dir("video_train_features");
  const auto raw = write_config(dir / "raw", clip_data(clips() / "train.jsonl"), 6);
  auto [s1, o1] = run_command(kMmtrain + " train " + raw.string());
  ASSERT_EQ(s1, 0) << o1;
  auto [s2, o2] = run_command(kMmtrain + " extract " + raw.string() + " --out " + (dir / "features").string() +
                              " --shard-size 5");
  ASSERT_EQ(s2, 0) << o2;
  EXPECT_TRUE(fs::is_regular_file(dir / "features" / "shard-00004.safetensors"));  // 24 clips, 5 per shard
  const auto from_features = write_config(dir / "features_run", "features:\n  dir: " + (dir / "features").string() + "\n", 6);
  auto [s3, o3] = run_command(kMmtrain + " train " + from_features.string());
  ASSERT_EQ(s3, 0) << o3;
  const auto expected = losses_of(dir / "raw" / "run"), got = losses_of(dir / "features_run" / "run");
  ASSERT_EQ(expected.size(), 6u);
  ASSERT_EQ(got.size(), 6u);
  for (const auto& [step, loss] : expected) {
    EXPECT_NEAR(got.at(step), loss, 1e-5 * std::abs(loss)) << "step " << step;
    std::cout << "step " << step << ": clips " << loss << ", features " << got.at(step) << "\n";
  }
  // An extraction stopped after two shards resumes after them and ends with the same features.
  const auto resumed = dir / "resumed_features";
  auto [s6, o6] = run_command("MM_FAULT_EXTRACT_STOP_AFTER_SHARDS=2 " + mm::testing::kMmtrainWithFaults + " extract " + raw.string() +
                              " --out " + resumed.string() + " --shard-size 5");
  EXPECT_NE(s6, 0);
  EXPECT_FALSE(fs::exists(resumed / "features.json"));
  auto [s7, o7] = run_command(kMmtrain + " extract " + raw.string() + " --out " + resumed.string() + " --shard-size 5");
  ASSERT_EQ(s7, 0) << o7;
  EXPECT_NE(o7.find("resuming after record 10"), std::string::npos) << o7;
  for (int shard = 0; shard < 5; ++shard) {
    const auto name = "shard-0000" + std::to_string(shard) + ".safetensors";
    const auto a = Checkpoint::open(dir / "features" / name), b = Checkpoint::open(resumed / name);
    ASSERT_EQ(a.names(), b.names()) << name;
    for (const auto& t : a.names()) EXPECT_TRUE(torch::equal(a.tensor(t), b.tensor(t))) << name << " " << t;
  }
  // Extracting again into the same directory finds it complete.
  auto [s4, o4] = run_command(kMmtrain + " extract " + raw.string() + " --out " + (dir / "features").string() +
                              " --shard-size 5");
  EXPECT_EQ(s4, 0) << o4;
  EXPECT_NE(o4.find("already complete"), std::string::npos) << o4;
  auto [s5, o5] = run_command(kMmtrain + " extract " + raw.string() + " --out " + (dir / "features").string() +
                              " --shard-size 7");
  EXPECT_NE(s5, 0);
  EXPECT_NE(o5.find("extracted from another dataset, model or setting"), std::string::npos) << o5;
}

TEST(VideoTrainRun, ResumeContinuesTheUninterruptedLosses) {
  const auto dir = testing::temp_dir("video_train_resume");
  const auto straight = write_config(dir / "straight", clip_data(clips() / "train.jsonl"), 8);
  auto [s1, o1] = run_command(kMmtrain + " train " + straight.string());
  ASSERT_EQ(s1, 0) << o1;
  const auto config = write_config(dir / "resumed", clip_data(clips() / "train.jsonl"), 8,
                                   "ema:\n  decay: 0.5\n").string();
  auto [s2, o2] = run_command(kMmtrain + " train " + config + " --set train.max_steps=4");
  ASSERT_EQ(s2, 0) << o2;
  auto [s3, o3] = run_command(kMmtrain + " train " + config);
  ASSERT_EQ(s3, 0) << o3;
  EXPECT_NE(o3.find("resumed from"), std::string::npos) << o3;
  const auto expected = losses_of(dir / "straight" / "run"), got = losses_of(dir / "resumed" / "run");
  ASSERT_EQ(got.size(), 8u);
  for (const auto& [step, loss] : expected) EXPECT_EQ(got.at(step), loss) << "step " << step;
}

TEST(VideoTrainRun, BrokenClipsAreSkippedAndCounted) {
  const auto dir = testing::temp_dir("video_train_broken");
  fs::create_directories(dir);
  {
    std::ofstream(dir / "garbage.mp4") << "not a video";
    std::ofstream jsonl(dir / "train.jsonl");
    std::ifstream good(clips() / "train.jsonl");
    for (std::string line; std::getline(good, line);) {
      auto r = nlohmann::json::parse(line);
      r["path"] = (clips() / r["path"].get<std::string>()).string();
      jsonl << r.dump() << "\n";
    }
    jsonl << R"({"path": "garbage.mp4", "caption": "unreadable"})" << "\n"
          << R"({"path": "missing.mp4", "caption": "missing"})" << "\n"
          << R"({"path": ")" << (clips() / "videos/train/000000.mp4").string() << R"(", "caption": ")"
          << std::string(400, 'x') << R"("})" << "\n"
          << "not json\n";
  }
  const auto config = write_config(dir / "out", clip_data(dir / "train.jsonl") + "  max_caption_chars: 200\n", 2);
  auto [status, out] = run_command(kMmtrain + " train " + config.string());
  ASSERT_EQ(status, 0) << out;
  std::ifstream in(dir / "out" / "run" / "metrics.jsonl");
  nlohmann::json last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = nlohmann::json::parse(line);
  const auto summary = last.at("summary").at("counters");
  EXPECT_EQ(summary.value("skipped_samples.total", -1), 4) << summary.dump();
  EXPECT_EQ(summary.value("skipped_samples.corrupt_media", -1), 1) << summary.dump();
  EXPECT_EQ(summary.value("skipped_samples.missing_media", -1), 1) << summary.dump();
  EXPECT_EQ(summary.value("skipped_samples.caption_too_long", -1), 1) << summary.dump();
  EXPECT_EQ(summary.value("skipped_samples.malformed_record", -1), 1) << summary.dump();
  auto [s2, o2] = run_command(kMmtrain + " train " + config.string() + " --set data.on_error=fail --set output.resume=none");
  EXPECT_NE(s2, 0);
  EXPECT_NE(o2.find("train.jsonl"), std::string::npos) << o2;
}

// Recomputing every DiT block in backward changes nothing but memory; bf16 autocast trains with
// losses close to fp32's.
TEST(VideoTrainRun, RecomputeEqualsAndBf16Trains) {
  const auto dir = testing::temp_dir("video_train_recompute");
  const auto plain = write_config(dir / "plain", clip_data(clips() / "train.jsonl"), 4);
  auto [s1, o1] = run_command(kMmtrain + " train " + plain.string());
  ASSERT_EQ(s1, 0) << o1;
  const auto recompute = write_config(dir / "recompute", clip_data(clips() / "train.jsonl"), 4);
  auto [s2, o2] = run_command(kMmtrain + " train " + recompute.string() + " --set train.recompute=true");
  ASSERT_EQ(s2, 0) << o2;
  const auto bf16 = write_config(dir / "bf16", clip_data(clips() / "train.jsonl"), 4);
  auto [s3, o3] = run_command(kMmtrain + " train " + bf16.string() + " --set train.precision=bf16");
  ASSERT_EQ(s3, 0) << o3;
  const auto expected = losses_of(dir / "plain" / "run"), again = losses_of(dir / "recompute" / "run"),
             half = losses_of(dir / "bf16" / "run");
  ASSERT_EQ(again.size(), 4u);
  ASSERT_EQ(half.size(), 4u);
  for (const auto& [step, loss] : expected) {
    EXPECT_NEAR(again.at(step), loss, 1e-5 * std::abs(loss)) << "step " << step;
    EXPECT_NEAR(half.at(step), loss, 0.05 * std::abs(loss)) << "step " << step;
    std::cout << "step " << step << ": fp32 " << loss << ", recompute " << again.at(step) << ", bf16 " << half.at(step)
              << "\n";
  }
}

// FSDP over two processes (micro-batch 4, no accumulation).
std::string expect_fsdp_equals_one_process(const std::string& name, int64_t steps, const std::string& settings) {
  return expect_layouts_equal_one_process(name, steps, settings,
                                          {{"fsdp", 2, "--set train.grad_accum=1 --set parallel.dp_shard=2"}})[0];
}

TEST(VideoTrainRun, FsdpOverTwoProcessesEqualsOneProcess) {
  expect_fsdp_equals_one_process("video_train_fsdp", 5, "--set model.from_scratch=true");
}

// From the pipeline's trained transformer, the two FSDP ranks build it without its weights and
// each copies only its own rows of the checkpoint (sharded loading), with the same result.
TEST(VideoTrainRun, FsdpRanksLoadOnlyTheirRowsOfThePretrainedTransformer) {
  const auto output = expect_fsdp_equals_one_process("video_train_fsdp_pretrained", 3, "");
  EXPECT_NE(output.find("sharded loading: this rank read"), std::string::npos) << output;
}

// Context parallelism: two processes split each clip's video tokens (and read the same batches,
// so they accumulate two micro-batches of 4 as one process does), by Ulysses and by ring attention.
TEST(VideoTrainRun, ContextParallelOverTwoProcessesEqualsOneProcess) {
  const auto outputs = expect_layouts_equal_one_process(
      "video_train_cp", 3, "--set model.from_scratch=true",
      {{"ulysses", 2, "--set parallel.cp=2"}, {"ring", 2, "--set parallel.cp=2 --set parallel.cp_ulysses=1"}});
  EXPECT_NE(outputs[0].find("context parallelism: each sample's video tokens split over cp=2 ranks (Ulysses 2 x ring 1)"),
            std::string::npos) << outputs[0];
  EXPECT_NE(outputs[1].find("(Ulysses 1 x ring 2)"), std::string::npos) << outputs[1];
}

// Four processes: USP (cp=4 as 2 x 2, beyond the tiny DiT's 2 heads), and cp=2 x FSDP over the
// two data-parallel groups (each reading its own micro-batch of 4, no accumulation).
TEST(VideoTrainRun, UspAndContextParallelTimesFsdpOverFourProcessesEqualOneProcess) {
  expect_layouts_equal_one_process("video_train_usp", 2, "--set model.from_scratch=true",
                                   {{"usp", 4, "--set parallel.cp=4 --set parallel.cp_ulysses=2"},
                                    {"cp_fsdp", 4, "--set parallel.cp=2 --set train.grad_accum=1"}});
}

// A checkpoint written by a cp=2 run resumes on one process and on four (cp=2 x 2 data-parallel
// groups), each ending where an uninterrupted one-process run ends.
TEST(VideoTrainRun, AContextParallelCheckpointResumesOnOneAndOnFourProcesses) {
  expect_checkpoint_resumes_in("video_train_cp_resume", 2, 4, "--set model.from_scratch=true",
                               {"cp2", 2, "--set parallel.cp=2"},
                               {{"one", 1, ""}, {"four", 4, "--set parallel.cp=2 --set train.grad_accum=1"}});
}

// `mmtrain export` (of a 2-process FSDP run) and `mmtrain convert` (of a one-process run) write a
// diffusers pipeline directory: its transformer holds exactly the trained weights (final/'s), the
// EMA kept in the checkpoint becomes transformer_ema/, equal to final/'s for both runs, and
// diffusers loads the whole pipeline with outputs equal to the trained weights'.
TEST(VideoTrainRun, ExportAndConvertWriteADiffusersPipeline) {
  const auto dir = testing::temp_dir("video_train_export");
  const std::string ema = "ema:\n  decay: 0.9\n";
  const auto one = write_config(dir / "one", clip_data(clips() / "train.jsonl"), 2, ema);
  auto [s1, o1] = run_command("OMP_NUM_THREADS=1 " + kMmtrain + " train " + one.string() + " --set model.from_scratch=true");
  ASSERT_EQ(s1, 0) << o1;
  const auto two = write_config(dir / "two", clip_data(clips() / "train.jsonl"), 2, ema);
  auto [s2, o2] = run_command("OMP_NUM_THREADS=1 " + kMmtrain + " launch --nproc-per-node 2 --master-port " +
                              std::to_string(testing::free_port()) + " -- train " + two.string() +
                              " --set model.from_scratch=true --set train.grad_accum=1 --set parallel.dp_shard=2");
  ASSERT_EQ(s2, 0) << o2;
  auto [s3, o3] = run_command(kMmtrain + " export --checkpoint " + (dir / "two" / "run").string() + " --to-hf " +
                              (dir / "two_export").string());
  ASSERT_EQ(s3, 0) << o3;
  auto [s4, o4] = run_command(kMmtrain + " convert --from " + (dir / "one" / "run").string() + " --to " +
                              (dir / "one_export").string());
  ASSERT_EQ(s4, 0) << o4;
  for (const char* run : {"one", "two"}) {
    const auto exported = dir / (std::string(run) + "_export");
    const auto trained = dir / run / "run" / "final" / "transformer" / "diffusion_pytorch_model.safetensors";
    const auto a = Checkpoint::open(exported / "transformer");
    const auto b = Checkpoint::open(trained.parent_path());
    ASSERT_EQ(a.names(), b.names()) << run;
    for (const auto& name : a.names()) EXPECT_TRUE(a.tensor(name).equal(b.tensor(name))) << run << " " << name;
    ASSERT_TRUE(fs::is_regular_file(exported / "transformer_ema" / "diffusion_pytorch_model.safetensors")) << run;
    ASSERT_TRUE(fs::is_regular_file(exported / "model_index.json")) << run;
    auto [s5, o5] = run_command(testing::kPython + " " +
                                (testing::kSourceDir / "tests/reference/wan_export_check.py").string() + " " +
                                exported.string() + " " + trained.string());
    EXPECT_EQ(s5, 0) << run << ": " << o5;
    std::cout << run << ": " << o5;
  }
  // Each run's final/ EMA is its checkpoint's EMA: the one-process run's from memory, the FSDP
  // run's read back whole from the shards of its last checkpoint. Both are the EMA of the weights
  // the runs trained, which differ from those weights (decay 0.9 over 2 steps).
  for (const char* run : {"one", "two"}) {
    const auto ema_final = Checkpoint::open(dir / run / "run" / "final" / "transformer_ema");
    const auto ema_export = Checkpoint::open(dir / (std::string(run) + "_export") / "transformer_ema");
    const auto weights = Checkpoint::open(dir / run / "run" / "final" / "transformer");
    ASSERT_EQ(ema_final.names(), ema_export.names()) << run;
    bool any_differs = false;
    for (const auto& name : ema_final.names()) {
      EXPECT_TRUE(ema_final.tensor(name).equal(ema_export.tensor(name))) << run << " " << name;
      any_differs |= !ema_final.tensor(name).equal(weights.tensor(name));
    }
    EXPECT_TRUE(any_differs) << run << ": the EMA equals the trained weights";
  }
}

TEST(VideoTrainRun, BadConfigsAreNamed) {
  const auto dir = testing::temp_dir("video_train_bad");
  const auto config = write_config(dir, clip_data(clips() / "train.jsonl"), 2).string();
  auto [s1, o1] = run_command(kMmtrain + " train " + config + " --set flow_matching.timestep_sampling=beta");
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("flow_matching.timestep_sampling: 'beta' is not one of uniform, logit_normal, mode"),
            std::string::npos) << o1;
  auto [s1b, o1b] = run_command(kMmtrain + " train " + config + " --set flow_matching.loss_weighting=snr");
  EXPECT_NE(s1b, 0);
  EXPECT_NE(o1b.find("flow_matching.loss_weighting: 'snr' is not one of none, sigma_sqrt, cosmap"), std::string::npos)
      << o1b;
  auto [s1c, o1c] = run_command(kMmtrain + " train " + config + " --set data.on_error=ignore");
  EXPECT_NE(s1c, 0);
  EXPECT_NE(o1c.find("data.on_error: 'ignore' is not one of skip, fail"), std::string::npos) << o1c;
  auto [s2, o2] = run_command(kMmtrain + " train " + config + " --set ema.decay=1.5");
  EXPECT_NE(s2, 0);
  EXPECT_NE(o2.find("ema.decay"), std::string::npos) << o2;
  auto [s3, o3] = run_command(kMmtrain + " train " + config + " --set task=t2i");
  EXPECT_NE(s3, 0);
  EXPECT_NE(o3.find("task: 't2i' is not one of vlm, text_to_video"), std::string::npos) << o3;
  auto [s4, o4] = run_command(kMmtrain + " train " + config + " --set features.dir=/nowhere");
  EXPECT_NE(s4, 0);
  EXPECT_NE(o4.find("not both"), std::string::npos) << o4;
  auto [s5, o5] = run_command(kMmtrain + " train " + config + " --set parallel.cp=4 --set parallel.cp_ulysses=3");
  EXPECT_NE(s5, 0);
  EXPECT_NE(o5.find("parallel.cp_ulysses: must divide cp"), std::string::npos) << o5;
  auto [s6, o6] = run_command(kMmtrain + " train " + config + " --set parallel.cp=2");
  EXPECT_NE(s6, 0);
  EXPECT_NE(o6.find("parallel.cp=2 needs as many processes"), std::string::npos) << o6;
  // Ulysses over 4 ranks cannot split the tiny DiT's 2 heads: refused up front, naming both (USP runs it).
  auto [s7, o7] = launch(4, dir / "run.yaml", "--set model.from_scratch=true --set parallel.cp=4");
  EXPECT_NE(s7, 0);
  EXPECT_NE(o7.find("parallel.cp_ulysses=4 (the Ulysses degree; cp=4 when unset) does not divide the transformer's 2 "
                    "attention heads"),
            std::string::npos) << o7;
}

}  // namespace
}  // namespace mm
