// The flow-matching Euler sampler against diffusers' FlowMatchEulerDiscreteScheduler: timesteps
// and sigmas for several shifts and step counts, every step of a whole sampling loop within
// 1e-6, training's noising; unsupported scheduler options refused by name.
#include <fstream>

#include "mm/core/safetensors.h"
#include "mm/models/diffusion/flow_match_euler.h"
#include "testing.h"

namespace mm {
namespace {

using testing::golden_dir;
using testing::max_abs_diff;

TEST(FlowMatchEuler, EveryStepMatchesDiffusers) {
  const auto cases = Checkpoint::open(golden_dir("flow_match_euler") / "cases.safetensors");
  int k = 0;
  for (; cases.contains("case" + std::to_string(k) + ".config"); ++k) {
    const std::string p = "case" + std::to_string(k) + ".";
    const auto config = cases.tensor(p + "config");
    FlowMatchEulerConfig c;
    c.num_train_timesteps = static_cast<int64_t>(config[0].item<double>());
    c.shift = config[1].item<double>();
    FlowMatchEulerScheduler scheduler(c);
    const auto expected_timesteps = cases.tensor(p + "timesteps");
    scheduler.set_timesteps(expected_timesteps.size(0));
    SCOPED_TRACE("shift " + std::to_string(c.shift) + ", " + std::to_string(expected_timesteps.size(0)) + " steps");
    // Same float32 values: the schedule is computed in the same precision and order.
    EXPECT_TRUE(torch::equal(scheduler.timesteps(), expected_timesteps)) << scheduler.timesteps() << expected_timesteps;
    EXPECT_TRUE(torch::equal(scheduler.sigmas(), cases.tensor(p + "sigmas")));
    auto sample = cases.tensor(p + "sample0");
    for (int64_t i = 0; i < expected_timesteps.size(0); ++i) {
      sample = scheduler.step(cases.tensor(p + "velocity" + std::to_string(i)), sample);
      EXPECT_LT(max_abs_diff(sample, cases.tensor(p + "after" + std::to_string(i))), 1e-6) << "step " << i;
    }
    EXPECT_THROW_MSG(scheduler.step(sample, sample), "steps were already taken");
    const auto noised = FlowMatchEulerScheduler::scale_noise(cases.tensor(p + "sample0"), cases.tensor(p + "noised_sigma"),
                                                             cases.tensor(p + "noise"));
    EXPECT_LT(max_abs_diff(noised, cases.tensor(p + "noised")), 1e-6);
  }
  EXPECT_EQ(k, 5) << "cases in the golden";
}

TEST(FlowMatchEuler, UnsupportedOptionsAreNamed) {
  const auto dir = testing::temp_dir("flow_match_config");
  auto config_with = [&](const std::string& extra) {
    const auto path = dir / "scheduler_config.json";
    std::ofstream(path) << R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 5.0)"
                        << extra << "}";
    return path;
  };
  const auto ok = FlowMatchEulerConfig::from_file(config_with(""));
  EXPECT_EQ(ok.shift, 5.0);
  EXPECT_THROW_MSG(FlowMatchEulerConfig::from_file(config_with(R"(, "use_dynamic_shifting": true)")),
                   "use_dynamic_shifting: true is not supported");
  EXPECT_THROW_MSG(FlowMatchEulerConfig::from_file(config_with(R"(, "shift_terminal": 0.1)")), "shift_terminal");
  EXPECT_THROW_MSG(FlowMatchEulerConfig::from_file(config_with(R"(, "shift": -1)")), "shift: must be positive");
  FlowMatchEulerScheduler scheduler(ok);
  EXPECT_THROW_MSG(scheduler.step(torch::zeros({2}), torch::zeros({2})), "call set_timesteps before step");
  scheduler.set_timesteps(3);
  EXPECT_THROW_MSG(scheduler.step(torch::zeros({2}), torch::zeros({3})), "differ in shape");
}

}  // namespace
}  // namespace mm
