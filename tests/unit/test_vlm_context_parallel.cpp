// Context parallelism for the vision-language models, as real `mmtrain launch` runs over Gloo:
// each sample's sequence split over the cp ranks (causal zig-zag per document, Ulysses, ring and
// USP), its images and video frames encoded across them and gathered, M-RoPE positions computed
// on the whole sequence. Ten steps on images and videos, padded and packed, must equal one process
// accumulating the same samples (losses within 1e-5, weights 2e-5 relative), and a checkpoint
// written at cp=2 resumes on one process and on four. Qwen3-VL, Qwen3-VL-MoE, Qwen3.5 (its Gated
// DeltaNet layers head-parallel, its MTP head) and Qwen3.5-MoE by the same plan. And
// compute-balanced data parallelism: the same runs with each micro-batch dealt to the ranks by cost.
#include <fstream>

#include "launched_training.h"
#include "mm/data/synth_video.h"
#include "mm/parallel/context_parallel.h"
#include "testing.h"
#include "tiny_model_dirs.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using namespace testing::launched;

// Shapes images and moving-shape videos interleaved (two images, one video): micro-batches hold
// both, and the videos' 8 temporal patches give the frame deal something to split.
const fs::path& image_and_video_data() {
  static const fs::path file = [] {
    const auto dir = testing::temp_dir("vlm_cp_data");
    VideoSynthOptions options;
    options.train = 16;
    options.test = 0;
    options.frames = 17;
    options.width = 32;
    options.height = 32;
    options.fps = 8;
    options.seed = 3;
    write_video_dataset(dir / "clips", options);
    std::ifstream images(shapes_data() / "train.jsonl"), videos(dir / "clips" / "train.jsonl");
    std::ofstream out(dir / "train.jsonl");
    std::string line;
    for (int i = 0; i < 48; ++i) {
      for (int j = 0; j < 2 && std::getline(images, line); ++j) {
        auto record = nlohmann::json::parse(line);
        for (auto& image : record["images"]) image = (shapes_data() / image.get<std::string>()).string();
        out << record.dump() << "\n";
      }
      if (!std::getline(videos, line)) continue;
      const auto clip = nlohmann::json::parse(line);
      const nlohmann::json record{
          {"messages",
           {{{"role", "user"}, {"content", "<video>What happens?"}},
            {{"role", "assistant"}, {"content", clip["caption"]}}}},
          {"videos", {(dir / "clips" / clip["path"].get<std::string>()).string()}}};
      out << record.dump() << "\n";
    }
    return dir / "train.jsonl";
  }();
  return file;
}

const fs::path kTinyQwen2_5VL = testing::kSourceDir / "examples/qwen2.5vl/tiny-shapes";
// Eight frames a clip (17 at 8 fps): 8 temporal patches of 2 x 2 merged tokens. AdamW's eps is
// 1e-6: the zero-initialised vision qkv biases get gradients near 1e-8 here, where eps 1e-8 turns
// the summation-order rounding of the split attention into whole steps (2.2e-5 relative on that
// tensor under USP; every other tensor under 1e-5).
const std::string kSettings = "--set data.video_fps=8 --set data.video_max_frames=16 --set optim.eps=1e-6";

RunResult train_on_videos(const std::string& name, int ranks, int cp, const std::string& settings,
                          const fs::path& model = kTinyQwen2_5VL) {
  return train(name, ranks, kSettings + " " + settings, "", model, cp, image_and_video_data());
}

const RunResult& padded_single() {
  static const RunResult run = train_on_videos("vlm_cp_single", 1, 1, "");
  return run;
}
const RunResult& packed_single() {
  static const RunResult run = train_on_videos("vlm_cp_packed_single", 1, 1, "--set data.packing=true");
  return run;
}

// The deal of frames over the ranks: contiguous, each rank at least one, costs balanced.
TEST(VlmContextParallel, FramesAreDealtInContiguousRunsOfAboutEqualCost) {
  EXPECT_EQ(parallel::contiguous_item_starts({4, 4, 4, 4}, 2), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(parallel::contiguous_item_starts({16, 4, 4, 4, 4}, 2), (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(parallel::contiguous_item_starts({1, 1, 100}, 3), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(parallel::contiguous_item_starts({100, 1, 1}, 2), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_THROW(parallel::contiguous_item_starts({1}, 2), Error);
}

TEST(VlmContextParallel, UlyssesAndRingOverTwoProcessesEqualOneProcess) {
  const auto& single = padded_single();
  ASSERT_EQ(single.status, 0) << single.output;
  const auto ulysses = train_on_videos("vlm_cp_ulysses", 2, 2, "");
  EXPECT_NE(ulysses.output.find("context parallelism: each sample's tokens split over cp=2 ranks (Ulysses 2 x ring 1)"),
            std::string::npos)
      << ulysses.output;
  expect_equal_to_single_process(ulysses, single);
  expect_equal_to_single_process(train_on_videos("vlm_cp_ring", 2, 2, "--set parallel.cp_ulysses=1"), single);
}

// Packed rows: each sample a document of its own, split zig-zag per document.
TEST(VlmContextParallel, PackedRowsSplitPerDocumentEqualOneProcess) {
  expect_equal_to_single_process(
      train_on_videos("vlm_cp_packed_ring", 2, 2, "--set data.packing=true --set parallel.cp_ulysses=1"),
      packed_single());
  expect_equal_to_single_process(
      train_on_videos("vlm_cp_packed_ulysses", 2, 2, "--set data.packing=true --set train.recompute=true"),
      packed_single());
}

// Four processes: USP (cp=4 as Ulysses 2 x ring 2), and cp=2 x FSDP over two data-parallel groups
// (padded: packing fills rows to a token budget, so other micro-batch sizes would pack other rows).
TEST(VlmContextParallel, UspAndContextParallelTimesFsdpOverFourProcessesEqualOneProcess) {
  expect_equal_to_single_process(train_on_videos("vlm_cp_usp", 4, 4, "--set parallel.cp_ulysses=2"), padded_single());
  expect_equal_to_single_process(train_on_videos("vlm_cp_fsdp", 4, 2, ""), padded_single());
}

// Qwen2-VL: its tower without windows (attention within each frame's patches), frames dealt the same way.
TEST(VlmContextParallel, Qwen2VLOverTwoProcessesEqualsOneProcess) {
  const auto model = testing::tiny_qwen2_vl_dir(testing::temp_dir("vlm_cp_qwen2_vl_model"));
  const auto single = train_on_videos("vlm_cp_qwen2_vl_single", 1, 1, "", model);
  expect_equal_to_single_process(train_on_videos("vlm_cp_qwen2_vl", 2, 2, "", model), single);
}

// Qwen3-VL: its DeepStack features added at this rank's visual positions only; one sample a
// micro-batch, so an image-only one (one item for two ranks) is encoded whole on each rank.
TEST(VlmContextParallel, Qwen3VLWithDeepStackOverTwoProcessesEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_vl_dir(testing::temp_dir("vlm_cp_qwen3_vl_model"));
  const std::string settings = "--set train.micro_batch_size=1 --set train.grad_accum=8";
  const auto single = train_on_videos("vlm_cp_qwen3_vl_single", 1, 1, settings, model);
  expect_equal_to_single_process(train_on_videos("vlm_cp_qwen3_vl", 2, 2, settings, model), single);
}

// Qwen3-VL-MoE with its load-balancing loss: the routers' counts and probability sums added over
// the cp group before the loss is formed, so its value and gradients are the whole sequence's;
// ring attention and recomputation beside it.
TEST(VlmContextParallel, Qwen3VLMoEWithTheLoadBalancingLossOverTwoProcessesEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_vl_moe_dir(testing::temp_dir("vlm_cp_qwen3_vl_moe_model"));
  const auto single = train_on_videos("vlm_cp_moe_single", 1, 1, "", model);
  EXPECT_NE(single.output.find("MoE load-balancing loss weight: 0.1 (config.json)"), std::string::npos)
      << single.output;
  expect_equal_to_single_process(
      train_on_videos("vlm_cp_moe", 2, 2, "--set parallel.cp_ulysses=1 --set train.recompute=true", model), single);
}

// Context and expert parallelism together on four processes: two data-parallel groups of cp=2,
// the experts spread over ep=2 (ranks of different groups), each expert cut over its cp pair. The
// aux loss is a function of each micro-batch, so both layouts cut one-sample micro-batches.
TEST(VlmContextParallel, Qwen3VLMoEWithContextAndExpertParallelismEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_vl_moe_dir(testing::temp_dir("vlm_cp_ep_model"));
  const auto single =
      train_on_videos("vlm_cp_ep_single", 1, 1, "--set train.micro_batch_size=1 --set train.grad_accum=8", model);
  const auto both = train_on_videos(
      "vlm_cp_ep", 4, 2, "--set parallel.ep=2 --set train.micro_batch_size=1 --set train.grad_accum=4", model);
  EXPECT_NE(both.output.find("ep=2"), std::string::npos) << both.output;
  expect_equal_to_single_process(both, single);
}

// Saved at step 5 by a cp=2 run, resumed on one process and on four (cp=2 x 2 FSDP groups):
// steps 6..10 equal the uninterrupted run's.
TEST(VlmContextParallel, AContextParallelCheckpointResumesOnOneAndOnFourProcesses) {
  const auto saving = train_on_videos("vlm_cp_saving", 2, 2, "--set output.save_every=5 --set output.keep_last=2");
  ASSERT_EQ(saving.status, 0) << saving.output;
  const auto saved = saving.dir / "run" / "checkpoints" / "step-00000005";
  ASSERT_TRUE(fs::exists(saved)) << saving.output;
  for (const auto& [name, ranks, cp] : {std::tuple<std::string, int, int>{"vlm_cp_resume_one", 1, 1},
                                       std::tuple<std::string, int, int>{"vlm_cp_resume_four", 4, 2}}) {
    SCOPED_TRACE(name);
    expect_resumed_like(train_on_videos(name, ranks, cp, "--set output.resume=" + saved.string()), saving, 5);
  }
}

// Compute balancing deals each micro-batch's samples (here images and eight-frame videos) to the
// data-parallel ranks by cost; the loss is normalised by the global target count, so the run
// equals the round-robin one and one process. Also beside context parallelism (2 x cp=2), and a
// balanced checkpoint resumes on one process.
TEST(VlmContextParallel, ComputeBalancedDataParallelEqualsTheUnbalancedRun) {
  const auto balanced = train_on_videos("vlm_balanced_fsdp2", 2, 1,
                                        "--set data.balance_compute=true --set output.save_every=5");
  EXPECT_NE(balanced.output.find("compute balancing: each micro-batch's 4 samples dealt to the 2 data-parallel ranks"),
            std::string::npos)
      << balanced.output;
  expect_equal_to_single_process(balanced, padded_single());
  expect_equal_to_single_process(train_on_videos("vlm_balanced_cp", 4, 2, "--set data.balance_compute=true"),
                                 padded_single());
  expect_resumed_like(train_on_videos("vlm_balanced_resume", 1, 1,
                                      "--set output.resume=" +
                                          (balanced.dir / "run" / "checkpoints" / "step-00000005").string()),
                      balanced, 5);
  const auto packed = train_on_videos("vlm_balanced_packed", 2, 1, "--set data.balance_compute=true --set data.packing=true");
  EXPECT_NE(packed.status, 0);
  EXPECT_NE(packed.output.find("balance_compute"), std::string::npos) << packed.output;
}

// Qwen3.5's hybrid decoder: its Gated DeltaNet layers run head-parallel over the cp ranks (the
// whole sequence, per document, for a share of their heads: per key head on 2 ranks, per value
// head on 4, as its 2 key and 4 value heads allow), its attention layers split as above, and its
// multi-token-prediction head trained beside it on each rank's tokens (what a depth reads ahead
// formed on the whole sequence). Padded with Ulysses, packed with ring attention and
// recomputation, and USP over four processes.
TEST(VlmContextParallel, Qwen3_5HybridDecoderWithItsMtpHeadEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_5_with_mtp_dir(testing::temp_dir("vlm_cp_qwen3_5_model"));
  const auto padded = train_on_videos("vlm_cp_qwen3_5_single", 1, 1, "", model);
  EXPECT_NE(padded.output.find("multi-token prediction: 1 depth(s)"), std::string::npos) << padded.output;
  expect_equal_to_single_process(train_on_videos("vlm_cp_qwen3_5_ulysses", 2, 2, "", model), padded);
  expect_equal_to_single_process(train_on_videos("vlm_cp_qwen3_5_usp", 4, 4, "--set parallel.cp_ulysses=2", model),
                                 padded);
  const auto packed = train_on_videos("vlm_cp_qwen3_5_packed_single", 1, 1, "--set data.packing=true", model);
  expect_equal_to_single_process(
      train_on_videos("vlm_cp_qwen3_5_packed_ring", 2, 2,
                      "--set data.packing=true --set parallel.cp_ulysses=1 --set train.recompute=true", model),
      packed);
}

// Qwen3.5-MoE: the hybrid decoder with sparse layers and their load-balancing loss, over cp=2.
TEST(VlmContextParallel, Qwen3_5MoEOverTwoProcessesEqualsOneProcess) {
  const auto model = testing::tiny_qwen3_5_moe_dir(testing::temp_dir("vlm_cp_qwen3_5_moe_model"));
  const std::string settings = "--set train.micro_batch_size=1 --set train.grad_accum=8";
  const auto single = train_on_videos("vlm_cp_qwen3_5_moe_single", 1, 1, settings, model);
  expect_equal_to_single_process(train_on_videos("vlm_cp_qwen3_5_moe", 2, 2, settings, model), single);
}

// What context parallelism cannot split is refused before training, naming the key.
TEST(VlmContextParallel, UnsupportedLayoutsAreRefusedNamingTheKey) {
  const auto hybrid = testing::tiny_qwen3_5_dir(testing::temp_dir("vlm_cp_qwen3_5_heads_model"));
  const auto deltanet = train_on_videos("vlm_cp_qwen3_5_heads", 3, 3, "--set parallel.cp_ulysses=1", hybrid);
  EXPECT_NE(deltanet.status, 0);
  EXPECT_NE(deltanet.output.find("is a Gated DeltaNet, which context parallelism splits by heads over all cp ranks, "
                                 "but neither its linear_num_key_heads (2) nor its linear_num_value_heads (4) is a "
                                 "multiple of 3"),
            std::string::npos)
      << deltanet.output;
  const auto both = train_on_videos("vlm_cp_ep_too_many", 4, 4, "--set parallel.ep=2");
  EXPECT_NE(both.status, 0);
  EXPECT_NE(both.output.find("parallel.ep=2 x parallel.cp=4 does not divide parallel.dp_shard=4"), std::string::npos)
      << both.output;
  const auto heads = train_on_videos("vlm_cp_heads", 3, 3, "");
  EXPECT_NE(heads.status, 0);
  EXPECT_NE(heads.output.find("parallel.cp_ulysses=3 (the Ulysses degree; cp=3 when unset) does not divide the "
                              "decoder's 4 attention heads"),
            std::string::npos)
      << heads.output;
}

}  // namespace
}  // namespace mm
