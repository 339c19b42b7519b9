// The flow-matching training objective against diffusers' training utilities: the training
// sigma table, the timestep density draws from the same seeded generator, the noised inputs,
// velocity targets, loss weights and loss, for every sampling scheme and weighting.
#include <ATen/CPUGeneratorImpl.h>

#include "mm/core/safetensors.h"
#include "mm/models/diffusion/flow_matching_objective.h"
#include "testing.h"

namespace mm {
namespace {

using testing::golden_dir;
using testing::max_abs_diff;

FlowMatchingObjective objective_of(const at::Tensor& config) {
  static const TimestepSampling schemes[] = {TimestepSampling::uniform, TimestepSampling::logit_normal,
                                             TimestepSampling::mode};
  static const LossWeighting weightings[] = {LossWeighting::none, LossWeighting::sigma_sqrt, LossWeighting::cosmap};
  const auto c = config.accessor<double, 1>();
  FlowMatchingObjective o;
  o.num_train_timesteps = static_cast<int64_t>(c[0]);
  o.shift = c[1];
  o.timestep_sampling = schemes[static_cast<int>(c[2])];
  o.logit_mean = c[3];
  o.logit_std = c[4];
  o.mode_scale = c[5];
  o.loss_weighting = weightings[static_cast<int>(c[6])];
  o.validate();
  return o;
}

TEST(FlowMatchingObjective, EqualsDiffusersTrainingUtilities) {
  const auto cases = Checkpoint::open(golden_dir("flow_matching_objective") / "cases.safetensors");
  int k = 0;
  for (; cases.contains("case" + std::to_string(k) + ".u"); ++k) {
    const std::string p = "case" + std::to_string(k) + ".";
    const auto config = cases.tensor(p + "config");
    const auto objective = objective_of(config);
    EXPECT_TRUE(torch::equal(flow_matching_training_sigmas(objective), cases.tensor("table" + std::to_string(k))))
        << "training sigma table of case " << k;

    auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(config[7].item<double>()));
    const auto expected_u = cases.tensor(p + "u");
    const auto u = sample_timestep_density(objective, expected_u.size(0), generator);
    EXPECT_TRUE(torch::equal(u, expected_u)) << "density draws of case " << k << ": " << u << " vs " << expected_u;

    const auto batch = make_flow_matching_batch(objective, cases.tensor(p + "latents"), cases.tensor(p + "noise"), u);
    EXPECT_TRUE(torch::equal(batch.sigmas, cases.tensor(p + "sigmas"))) << k;
    EXPECT_TRUE(torch::equal(batch.timesteps, cases.tensor(p + "timesteps"))) << k;
    EXPECT_LT(max_abs_diff(batch.noisy, cases.tensor(p + "noisy")), 1e-6) << k;
    EXPECT_TRUE(torch::equal(batch.target, cases.tensor(p + "target"))) << k;
    EXPECT_LT(max_abs_diff(batch.weights, cases.tensor(p + "weights")), 1e-6 * cases.tensor(p + "weights").abs().max().item<double>()) << k;
    const auto loss = flow_matching_loss(cases.tensor(p + "prediction"), batch);
    const double expected = cases.tensor(p + "loss").item<double>();
    EXPECT_NEAR(loss.item<double>(), expected, 1e-6 * std::abs(expected)) << k;
    std::cout << "case " << k << " (sampling " << static_cast<int>(objective.timestep_sampling) << ", weighting "
              << static_cast<int>(objective.loss_weighting) << "): loss " << loss.item<double>() << " vs diffusers " << expected << "\n";
  }
  EXPECT_EQ(k, 4) << "cases in the golden";
}

TEST(FlowMatchingObjective, BadSettingsAndShapesAreNamed) {
  // Names outside the enums are refused where the run config is read (VideoTrainRun.BadConfigsAreNamed).
  FlowMatchingObjective o;
  o.shift = 0;
  EXPECT_THROW_MSG(o.validate(), "shift: must be positive");
  o = {};
  const auto x = torch::zeros({2, 3, 4});
  EXPECT_THROW_MSG(make_flow_matching_batch(o, x, torch::zeros({2, 3, 5}), torch::zeros({2})), "noise");
  EXPECT_THROW_MSG(make_flow_matching_batch(o, x, x, torch::zeros({3})), "u must be [batch=2]");
  const auto batch = make_flow_matching_batch(o, x, x, torch::zeros({2}));
  EXPECT_THROW_MSG(flow_matching_loss(torch::zeros({2, 3}), batch), "prediction");
}

TEST(FlowMatchingObjective, ZeroLossAtTheTargetAndEndpoints) {
  FlowMatchingObjective o;
  const auto x = torch::randn({3, 2, 5});
  const auto noise = torch::randn({3, 2, 5});
  // u = 0 picks the noisiest sigma (shift(1) = 1): x_t is pure noise; u near 1 the cleanest one.
  const auto batch = make_flow_matching_batch(o, x, noise, torch::tensor({0.0f, 0.0f, 0.9999f}));
  EXPECT_FLOAT_EQ(batch.sigmas[0].item<float>(), 1.0f);
  EXPECT_TRUE(torch::allclose(batch.noisy[0], noise[0]));
  EXPECT_LT(batch.sigmas[2].item<float>(), 0.01f);
  EXPECT_EQ(flow_matching_loss(batch.target, batch).item<float>(), 0.0f);
}

}  // namespace
}  // namespace mm
