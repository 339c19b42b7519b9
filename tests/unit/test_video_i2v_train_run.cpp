// `mmtrain train` with `task: image_to_video` on the wan_i2v_pipeline oracle's tiny Wan2.1-I2V
// pipeline (CLIP image encoder; the DiT takes the noisy latents, a 4-channel frame mask and the
// first frame's latents): each clip is conditioned on its own first frame, both conditioning paths
// (the frame latents through the patch embedding, the CLIP tokens through the image cross-attention)
// receive gradients and the loss falls, the result samples with `mmtrain infer t2v --image`,
// context parallelism (Ulysses, ring, USP, cp x FSDP) equals one process and its checkpoint resumes
// on one and on four processes, and what training does not cover is named.
#include "mm/tasks/video_sampling.h"
#include "mm/models/wan/wan_pipeline.h"
#include "video_train_runs.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::kMmtrain;
using testing::run_command;
using namespace testing::video_runs;

fs::path write_i2v_config(const fs::path& dir, int64_t max_steps, const std::string& extra = "") {
  return write_config(dir, clip_data(clips() / "train.jsonl"), max_steps, extra, image_to_video());
}

// The condition training builds from a clip's first frame is the pipeline's for that frame as an
// image (whose resize to its own size changes nothing): the frame mask, then the VAE latents of
// [frame, zeros...]; prepare_image_conditioning's condition is checked against diffusers by
// test_wan_i2v_pipeline.
TEST(ImageToVideoTraining, TheFrameConditionIsThePipelines) {
  auto model = WanModel::from_pretrained(image_to_video().pipeline);
  const auto first = at::rand({2, 3, 32, 48}, at::TensorOptions().dtype(at::kFloat)) * 2 - 1;
  const auto rgb = frames_as_rgb8(first);
  const auto frames8 = rgb.to(at::kFloat).permute({0, 3, 1, 2}) / 127.5 - 1;  // the frames as 8-bit pixels
  const auto condition = wan_frame_condition(*model, frames8, {}, 9);
  ASSERT_EQ(condition.sizes(), at::IntArrayRef({2, 4 + 4, 3, 4, 6}));  // z = 4
  VideoSamplingOptions o;
  o.frames = 9;
  o.height = 32;
  o.width = 48;
  for (int64_t j = 0; j < 2; ++j) {
    const auto expected = prepare_image_conditioning(*model, rgb[j], {}, 1, o);
    EXPECT_TRUE(at::allclose(condition.narrow(0, j, 1), expected.condition, 1e-5, 1e-5)) << "clip " << j;
  }
  // The mask marks latent frame 0 (the given frame) in all 4 channels, nothing after it.
  EXPECT_TRUE(condition.narrow(1, 0, 4).select(2, 0).eq(1).all().item<bool>());
  EXPECT_TRUE(condition.narrow(1, 0, 4).narrow(2, 1, 2).eq(0).all().item<bool>());
}

// Learning can happen: over 40 steps from the pipeline's DiT the loss falls, and the weights that
// only the condition reaches (the patch embedding's condition channels, the CLIP token projection
// and each block's image keys) moved. The trained pipeline then samples from an image.
TEST(ImageToVideoTraining, BothConditionPathsLearnAndTheResultSamples) {
  const auto dir = testing::temp_dir("video_i2v_learn");
  const auto config = write_i2v_config(dir, 40);
  auto [status, out] = run_command(kMmtrain + " train " + config.string() + " --set train.grad_accum=1");
  ASSERT_EQ(status, 0) << out;
  const auto losses = losses_of(dir / "run");
  ASSERT_EQ(losses.size(), 40u);
  const double first = mean_loss(losses, 1, 10), last = mean_loss(losses, 31, 40);
  std::cout << "mean loss of steps 1-10: " << first << ", of steps 31-40: " << last << "\n";
  EXPECT_LT(last, 0.9 * first);

  const auto before = Checkpoint::open(image_to_video().pipeline / "transformer");
  const auto after = Checkpoint::open(dir / "run" / "final" / "transformer");
  const auto patch = "patch_embedding.weight";
  const int64_t z = (before.tensor(patch).size(1) - 4) / 2;
  const auto moved = [&](const std::string& name, const at::Tensor& a, const at::Tensor& b) {
    const double change = testing::relative_error(a, b);
    std::cout << name << " moved by " << change << "\n";
    EXPECT_GT(change, 1e-4) << name << " did not learn: the condition does not reach it";
  };
  moved("the patch embedding's condition channels", before.tensor(patch).narrow(1, z, z + 4),
        after.tensor(patch).narrow(1, z, z + 4));
  for (const std::string name : {"condition_embedder.image_embedder.ff.net.0.proj.weight",
                                 "blocks.0.attn2.add_k_proj.weight", "blocks.1.attn2.add_v_proj.weight"})
    moved(name, before.tensor(name), after.tensor(name));

  const auto final_model = dir / "run" / "final";
  ASSERT_TRUE(fs::is_regular_file(final_model / "image_encoder" / "config.json"));
  const auto mp4 = dir / "sample.mp4";
  auto [s2, o2] = run_command(kMmtrain + " infer t2v --model " + final_model.string() + " --image " +
                              (golden_dir("wan_i2v_pipeline") / "wan21" / "image.png").string() +
                              " --prompt x --frames 9 --size 32x32 --steps 2 --seed 1 -o " + mp4.string());
  ASSERT_EQ(s2, 0) << o2;
  EXPECT_TRUE(fs::is_regular_file(mp4));
}

// Context parallelism splits each clip's video tokens (the condition channels travel with them;
// the CLIP tokens are replicated like the text): Ulysses and ring over two processes, USP (2 x 2)
// and cp=2 x FSDP over four, each equal to one process.
TEST(ImageToVideoTraining, ContextParallelLayoutsEqualOneProcess) {
  const auto outputs = expect_layouts_equal_one_process(
      "video_i2v_cp", 10, "",
      {{"ulysses", 2, "--set parallel.cp=2"},
       {"ring", 2, "--set parallel.cp=2 --set parallel.cp_ulysses=1"},
       {"usp", 4, "--set parallel.cp=4 --set parallel.cp_ulysses=2"},
       {"cp_fsdp", 4, "--set parallel.cp=2 --set train.grad_accum=1"}},
      image_to_video());
  EXPECT_NE(outputs[2].find("(Ulysses 2 x ring 2)"), std::string::npos) << outputs[2];
}

// A checkpoint written by a cp=2 run resumes on one process and on four (cp=2 x 2 data-parallel
// groups), each ending where an uninterrupted one-process run ends.
TEST(ImageToVideoTraining, AContextParallelCheckpointResumesOnOneAndOnFourProcesses) {
  expect_checkpoint_resumes_in("video_i2v_cp_resume", 4, 8, "", {"cp2", 2, "--set parallel.cp=2"},
                               {{"one", 1, ""}, {"four", 4, "--set parallel.cp=2 --set train.grad_accum=1"}},
                               image_to_video());
}

TEST(ImageToVideoTraining, WhatItDoesNotTrainIsNamed) {
  const auto dir = testing::temp_dir("video_i2v_bad");
  const auto config = write_i2v_config(dir, 2).string();
  // The task must match the pipeline, both ways.
  auto [s1, o1] = run_command(kMmtrain + " train " + config + " --set task=text_to_video");
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("(set task: image_to_video)"), std::string::npos) << o1;
  auto [s2, o2] = run_command(kMmtrain + " train " + config + " --set model.path=" + text_to_video().pipeline.string());
  EXPECT_NE(s2, 0);
  EXPECT_NE(o2.find("(set task: text_to_video)"), std::string::npos) << o2;
  // Extracted features hold no image condition.
  auto [s3, o3] = run_command(kMmtrain + " train " + config + " --set features.dir=" + dir.string());
  EXPECT_NE(s3, 0);
  EXPECT_NE(o3.find("features.dir: image-to-video training reads raw clips"), std::string::npos) << o3;
  // Wan2.2 TI2V (the image latent over the first frame) and two-expert pipelines.
  const auto cases = golden_dir("wan_i2v_pipeline");
  auto [s4, o4] = run_command(kMmtrain + " train " + config + " --set model.path=" + (cases / "ti2v" / "pipeline").string());
  EXPECT_NE(s4, 0);
  EXPECT_NE(o4.find("is a Wan2.2 TI2V pipeline (expand_timesteps"), std::string::npos) << o4;
  auto [s5, o5] = run_command(kMmtrain + " train " + config + " --set model.path=" +
                              (cases / "two_experts" / "pipeline").string());
  EXPECT_NE(s5, 0);
  EXPECT_NE(o5.find("two-expert pipeline (transformer_2"), std::string::npos) << o5;
}

}  // namespace
}  // namespace mm
