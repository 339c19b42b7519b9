// Training equals the reference: 5 optimizer steps of mmtrain (padded, packed, with
// recomputation) against a plain PyTorch loop over transformers' Qwen2.5-VL, Qwen2-VL, Qwen3-VL,
// Qwen3-VL-MoE (with its load-balancing loss), Qwen3.5 (packed rows through its Gated DeltaNet
// layer restart the state and conv window per sample), Qwen3.5-MoE (both) and both with a
// multi-token-prediction head (trained with its loss; the reference assembles the head from
// transformers' layers, as vLLM wires it), with the same
// initial weights, data, AdamW
// settings and schedule (tests/reference/train_parity.py).
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include "mm/core/json_config.h"
#include "mm/nn/weights.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "mm/train/lr_schedule.h"
#include "mm/train/optimizer.h"
#include "mm/train/recompute.h"
#include "mm/tasks/vlm_step.h"
#include "testing.h"

namespace mm {
namespace {

using testing::golden_dir;
using testing::max_abs_diff;

struct Reference {
  QwenVLConfig config;
  std::vector<TrainSample> samples;
  std::vector<std::vector<std::vector<int64_t>>> steps;  // step -> micro-batch -> sample ids
  nlohmann::json settings;
  torch::Tensor losses, grad_norms, lrs;
};

// The oracle's output for a family: Qwen2.5-VL at its top level, the others under <family>/.
std::filesystem::path reference_dir(const std::string& family) {
  return family == "qwen2_5_vl" ? golden_dir("train_parity") : golden_dir("train_parity") / family;
}

Reference load_reference(const std::string& family) {
    Reference r;
    const auto dir = reference_dir(family);
    r.config = QwenVLConfig::from_file(dir / "model" / "config.json");
    auto samples = Checkpoint::open(dir / "samples.safetensors");
    for (int64_t k = 0;; ++k) {
      const auto key = std::to_string(k) + ".";
      if (!samples.contains(key + "input_ids")) break;
      TrainSample s;
      s.index = k;
      s.input_ids = samples.tensor(key + "input_ids").clone();
      s.targets = samples.tensor(key + "targets").clone();
      s.pixel_values = samples.tensor(key + "pixel_values").clone();
      s.image_grid_thw = samples.tensor(key + "image_grid_thw").clone();
      QwenVLInputs inputs;
      inputs.input_ids = s.input_ids.unsqueeze(0);
      inputs.image_grid_thw = s.image_grid_thw;
      s.position_ids = qwen_vl_rope_index(r.config, inputs).position_ids.squeeze(1);
      r.samples.push_back(std::move(s));
    }
    std::ifstream in(dir / "steps.json");
    r.settings = nlohmann::json::parse(in);
    r.steps = r.settings["micro_batches"].get<std::vector<std::vector<std::vector<int64_t>>>>();
    auto result = Checkpoint::open(dir / "result.safetensors");
    r.losses = result.tensor("losses").clone();
    r.grad_norms = result.tensor("grad_norms").clone();
    r.lrs = result.tensor("lrs").clone();
    return r;
}

const Reference& reference(const std::string& family) {
  static std::map<std::string, Reference> refs;
  auto it = refs.find(family);
  if (it == refs.end()) it = refs.emplace(family, load_reference(family)).first;
  return it->second;
}

enum class Layout { padded, packed };

struct RunResult {
  std::vector<double> losses, grad_norms;
  QwenVLForConditionalGeneration model{nullptr};
};

// aux_coef: the MoE load-balancing weight; unset = config.json's (what the oracle trained with).
RunResult run_steps(const std::string& family, Layout layout, bool recompute, bool fused,
                    std::optional<double> aux_coef = std::nullopt) {
  const auto& ref = reference(family);
  RunResult out;
  out.model = QwenVLForConditionalGenerationImpl::from_pretrained(reference_dir(family) / "model", torch::kFloat32,
                                                                  c10::kCPU, /*with_mtp=*/true);
  out.model->train();
  if (recompute) {
    out.model->model->block_runner = recompute_runner();
    out.model->visual->block_runner = recompute_runner();
    if (out.model->mtp) out.model->mtp->block_runner = recompute_runner();
  }
  NamedParams named;
  std::vector<torch::Tensor> params;
  for (auto& p : out.model->named_parameters()) {
    named.emplace_back(p.key(), p.value());
    params.push_back(p.value());
  }
  const auto& s = ref.settings;
  AdamWConfig optim;
  optim.lr = s["lr"].get<double>();
  optim.weight_decay = s["weight_decay"].get<double>();
  optim.beta1 = s["betas"][0].get<double>();
  optim.beta2 = s["betas"][1].get<double>();
  optim.eps = s["eps"].get<double>();
  optim.fused = fused;
  AdamW optimizer(named, optim, layer_norm_parameter_names(*out.model));
  LrScheduleConfig schedule_config;
  schedule_config.kind = mm::ScheduleKind::cosine;
  schedule_config.warmup_steps = s["warmup"].get<int64_t>();
  schedule_config.total_steps = s["total"].get<int64_t>();
  const LrSchedule schedule(schedule_config);
  StepOptions options;
  options.max_grad_norm = s["max_grad_norm"].get<double>();
  for (size_t step = 0; step < ref.steps.size(); ++step) {
    std::vector<TrainBatch> micro;
    for (const auto& ids : ref.steps[step]) {
      std::vector<TrainSample> group;
      for (int64_t id : ids) group.push_back(ref.samples[static_cast<size_t>(id)]);
      micro.push_back(layout == Layout::packed ? collate_packed(group) : collate_padded(group, 0));
    }
    const double lr = schedule.lr(static_cast<int64_t>(step), optim.lr);
    EXPECT_NEAR(lr, ref.lrs[step].item<double>(), 1e-12) << "step " << step;
    std::vector<MicroBatchCounts> counts;
    for (const auto& b : micro) counts.push_back({b.num_target_tokens, b.num_tokens, 1});
    const VlmLossWeights weights{vlm_router_aux_loss_coef(out.model->config(), aux_coef),
                                 vlm_mtp_loss_weight(*out.model, s["mtp_loss_weight"].get<double>())};
    const auto result = train_step(
        counts, [&](size_t i, const StepTotals& totals) { return vlm_loss_sum(out.model, micro[i], weights, totals); },
        optimizer, lr, params, options);
    out.losses.push_back(result.loss);
    out.grad_norms.push_back(result.grad_norm);
  }
  return out;
}

// The largest difference between the run's weights and the reference's after 5 steps (every
// tensor of its save_pretrained output, read as from_pretrained reads it: fused MoE experts
// split, Qwen3-VL's module-tree names mapped).
std::pair<double, std::string> final_weight_difference(const std::string& family, const RunResult& run) {
  auto final_model = QwenVLForConditionalGenerationImpl::from_pretrained(reference_dir(family) / "final",
                                                                        torch::kFloat32, c10::kCPU, /*with_mtp=*/true);
  std::map<std::string, torch::Tensor> theirs;
  for (auto& [name, t] : named_weights(*final_model)) theirs[name] = t;
  double worst = 0;
  std::string worst_name;
  for (auto& [name, t] : named_weights(*run.model)) {
    EXPECT_TRUE(theirs.count(name)) << name;
    if (!theirs.count(name)) continue;
    const double d = max_abs_diff(t.detach(), theirs[name]);
    if (d > worst) worst = d, worst_name = name;
  }
  EXPECT_EQ(theirs.size(), named_weights(*run.model).size());
  return {worst, worst_name};
}

void expect_matches_reference(const std::string& family, const RunResult& run, double tolerance) {
  const auto& ref = reference(family);
  ASSERT_EQ(run.losses.size(), static_cast<size_t>(ref.losses.size(0)));
  for (size_t i = 0; i < run.losses.size(); ++i) {
    EXPECT_NEAR(run.losses[i], ref.losses[i].item<double>(), tolerance) << "loss of step " << i + 1;
    EXPECT_NEAR(run.grad_norms[i], ref.grad_norms[i].item<double>(), 1e-4 * ref.grad_norms[i].item<double>())
        << "grad norm of step " << i + 1;
  }
  const auto [worst, worst_name] = final_weight_difference(family, run);
  EXPECT_LT(worst, tolerance) << "largest final-weight difference in " << worst_name;
  std::cout << "final weights: max |diff| " << worst << " (" << worst_name << ")\n";
}

// The family: its config.json model_type.
class TrainParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainParity, PaddedBatchesMatchTransformersLoop) {
  expect_matches_reference(GetParam(), run_steps(GetParam(), Layout::padded, /*recompute=*/false, /*fused=*/true), 1e-5);
}

TEST_P(TrainParity, PerTensorAdamWMatchesToo) {
  expect_matches_reference(GetParam(), run_steps(GetParam(), Layout::padded, false, /*fused=*/false), 1e-5);
}

TEST_P(TrainParity, PackedBatchesMatchTransformersLoop) {
  expect_matches_reference(GetParam(), run_steps(GetParam(), Layout::packed, false, true), 1e-5);
}

// Bit for bit, except with a multi-token-prediction head: its input embeddings are a third use of
// the decoder's input beside the first layer's two, and recomputation (which hands that layer's
// gradient back as one sum) changes the order in which autograd adds the three, i.e. the rounding.
// There the run must agree within float rounding carried through 5 steps.
TEST_P(TrainParity, RecomputationGivesTheSameTraining) {
  const auto plain = run_steps(GetParam(), Layout::padded, false, true);
  const auto recomputed = run_steps(GetParam(), Layout::padded, /*recompute=*/true, true);
  const bool exact = !plain.model->mtp;
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    if (exact) EXPECT_EQ(plain.losses[i], recomputed.losses[i]) << i;
    else EXPECT_NEAR(plain.losses[i], recomputed.losses[i], 1e-6) << i;
  }
  auto a = named_weights(*plain.model);
  auto b = named_weights(*recomputed.model);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (exact) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
    worst = std::max(worst, max_abs_diff(a[i].second, b[i].second));
  }
  EXPECT_LT(worst, 1e-6);
  if (!exact) std::cout << "recomputed vs plain, final weights: max |diff| " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(Families, TrainParity,
                         ::testing::Values("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5",
                                           "qwen3_5_moe", "qwen3_5_mtp", "qwen3_5_moe_mtp"));

// The MoE parity above is sensitive to the load-balancing term: trained without it, the routers
// end far from the reference's, and the step losses differ by the aux term itself.
TEST(TrainParityMoE, WithoutTheLoadBalancingLossTheRoutersMissTheReference) {
  const auto run = run_steps("qwen3_vl_moe", Layout::padded, false, true, /*aux_coef=*/0.0);
  const auto [worst, worst_name] = final_weight_difference("qwen3_vl_moe", run);
  EXPECT_GT(worst, 1e-3) << worst_name;
  EXPECT_NE(worst_name.find("mlp.gate.weight"), std::string::npos) << worst_name;
  const auto& ref = reference("qwen3_vl_moe");
  EXPECT_GT(std::abs(run.losses[0] - ref.losses[0].item<double>()), 0.05);
}

}  // namespace
}  // namespace mm
