// The UniPC sampler against diffusers' UniPCMultistepScheduler in flow-matching mode: each case
// reads diffusers' own scheduler config (orders 1-3, bh1 / bh2, skipped correctors, sigma_min
// final, lower_order_final off, shifts 1 / 3 / 5), and the schedule and every step of a whole
// sampling loop must match within 1e-6. Unsupported configs are refused by name.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/models/diffusion/flow_match_euler.h"
#include "mm/models/diffusion/flow_sampler.h"
#include "mm/models/diffusion/unipc.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::max_abs_diff;

TEST(UniPC, EveryStepMatchesDiffusers) {
  const auto dir = golden_dir("unipc_multistep");
  const auto cases = Checkpoint::open(dir / "cases.safetensors");
  int k = 0;
  for (; fs::exists(dir / ("case" + std::to_string(k) + ".json")); ++k) {
    const std::string p = "case" + std::to_string(k) + ".";
    SCOPED_TRACE("case " + std::to_string(k));
    UniPCScheduler scheduler(UniPCConfig::from_file(dir / ("case" + std::to_string(k) + ".json")));
    const auto expected_timesteps = cases.tensor(p + "timesteps");
    scheduler.set_timesteps(expected_timesteps.size(0));
    EXPECT_TRUE(torch::equal(scheduler.timesteps(), expected_timesteps)) << scheduler.timesteps() << expected_timesteps;
    EXPECT_TRUE(torch::equal(scheduler.sigmas(), cases.tensor(p + "sigmas"))) << scheduler.sigmas();
    auto sample = cases.tensor(p + "sample0");
    for (int64_t i = 0; i < expected_timesteps.size(0); ++i) {
      sample = scheduler.step(cases.tensor(p + "velocity" + std::to_string(i)), sample);
      EXPECT_LT(max_abs_diff(sample, cases.tensor(p + "after" + std::to_string(i))), 1e-6) << "step " << i;
    }
    EXPECT_THROW_MSG(scheduler.step(sample, sample), "steps were already taken");
  }
  EXPECT_EQ(k, 8) << "cases in the golden";
}

TEST(UniPC, UnsupportedConfigsAreNamed) {
  const auto dir = testing::temp_dir("unipc_config");
  const auto base = read_json_file(golden_dir("unipc_multistep") / "case0.json");
  auto refused = [&](const std::string& key, const nlohmann::json& value, const std::string& message) {
    auto json = base;
    json[key] = value;
    const auto path = dir / (key + ".json");
    std::ofstream(path) << json.dump();
    EXPECT_THROW_MSG(UniPCConfig::from_file(path), message);
  };
  refused("use_flow_sigmas", false, "use_flow_sigmas: must be true");
  refused("prediction_type", "epsilon", "prediction_type: must be flow_prediction");
  refused("thresholding", true, "thresholding: true is not supported");
  refused("solver_type", "bh3", "solver_type 'bh3' is not bh1 or bh2");
  refused("shift_terminal", 0.1, "shift_terminal: not supported");
  UniPCScheduler scheduler(UniPCConfig::from_file(golden_dir("unipc_multistep") / "case0.json"));
  EXPECT_THROW_MSG(scheduler.step(torch::zeros({2}), torch::zeros({2})), "call set_timesteps before step");
}

TEST(FlowSampler, SchedulerConfigNamesTheSampler) {
  const auto dir = testing::temp_dir("flow_sampler");
  auto write = [&](const std::string& name, const nlohmann::json& json) {
    std::ofstream(dir / name) << json.dump();
    return dir / name;
  };
  auto unipc = make_flow_sampler(write("unipc.json", {{"_class_name", "UniPCMultistepScheduler"},
                                                      {"use_flow_sigmas", true},
                                                      {"prediction_type", "flow_prediction"},
                                                      {"flow_shift", 3.0}}));
  EXPECT_NE(dynamic_cast<UniPCScheduler*>(unipc.get()), nullptr);
  auto euler = make_flow_sampler(write("euler.json", {{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"shift", 5.0}}));
  EXPECT_NE(dynamic_cast<FlowMatchEulerScheduler*>(euler.get()), nullptr);
  euler->set_timesteps(4);
  EXPECT_EQ(euler->timesteps().size(0), 4);
  EXPECT_THROW_MSG(make_flow_sampler(write("ddim.json", {{"_class_name", "DDIMScheduler"}})),
                   "ddim.json: _class_name: 'DDIMScheduler' is not a supported sampler");
}

}  // namespace
}  // namespace mm
