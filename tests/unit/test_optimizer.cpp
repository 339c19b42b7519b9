// AdamW, LR schedules, gradient clipping and RNG state against torch / transformers goldens
// (tests/reference/optimizer.py).
#include <fstream>

#include "mm/core/rng.h"
#include "mm/train/grad_clip.h"
#include "mm/train/lr_schedule.h"
#include "mm/train/optimizer.h"
#include "testing.h"

namespace {

using mm::testing::golden_dir;
using mm::testing::max_abs_diff;
using nlohmann::json;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST(DecaySplit, MatchesTrainerGetDecayParameterNames) {
  const json decay = read_json(golden_dir("optimizer") / "decay.json");
  ASSERT_GT(decay.size(), 5u);
  for (auto it = decay.begin(); it != decay.end(); ++it)
    EXPECT_EQ(mm::is_no_decay_parameter(it.key()), !it->get<bool>()) << it.key();
}

struct AdamWGolden {
  mm::Checkpoint ckpt = mm::Checkpoint::open(golden_dir("optimizer") / "adamw.safetensors");
  std::vector<std::string> names;
  std::vector<double> lrs;
  std::string skip_param;
  int skip_step = -1;
  mm::AdamWConfig config;

  AdamWGolden() {
    for (const auto& n : ckpt.names())
      if (n.rfind("init.", 0) == 0) names.push_back(n.substr(5));
    auto lr = ckpt.tensor("lrs");
    for (int64_t i = 0; i < lr.numel(); ++i) lrs.push_back(lr[i].item<double>());
    auto file = mm::SafetensorsFile::open(golden_dir("optimizer") / "adamw.safetensors");
    skip_param = file->metadata().at("skip_param");
    skip_step = std::stoi(file->metadata().at("skip_step"));
    config.beta1 = std::stod(file->metadata().at("beta1"));
    config.beta2 = std::stod(file->metadata().at("beta2"));
    config.eps = std::stod(file->metadata().at("eps"));
    config.weight_decay = std::stod(file->metadata().at("weight_decay"));
  }
  mm::NamedParams fresh_params() const {
    mm::NamedParams ps;
    for (const auto& n : names)
      ps.emplace_back(n, ckpt.tensor("init." + n).clone().set_requires_grad(true));
    return ps;
  }
  void set_grads(mm::NamedParams& ps, int step) const {
    for (auto& [n, p] : ps)
      p.mutable_grad() = (n == skip_param && step == skip_step)
                             ? torch::Tensor() : ckpt.tensor(mm::str_cat("grad.", step, ".", n)).clone();
  }
};

void expect_matches_torch(bool fused) {
  AdamWGolden g;
  const std::string label = fused ? "fused" : "single";
  auto params = g.fresh_params();
  auto config = g.config;
  config.fused = fused;
  mm::AdamW opt(params, config);
  for (int s = 0; s < static_cast<int>(g.lrs.size()); ++s) {
    g.set_grads(params, s);
    opt.step(g.lrs[s]);
    for (const auto& [n, p] : params)
      EXPECT_LT(max_abs_diff(p.detach(), g.ckpt.tensor(mm::str_cat(label, ".", s, ".", n))), 1e-6)
          << label << " step " << s << " " << n;
  }
  EXPECT_EQ(opt.steps_taken(), 5);
  const auto state = opt.state_tensors();
  EXPECT_EQ(state.size(), 3 * g.names.size());
  for (const auto& [key, t] : state)
    EXPECT_LT(max_abs_diff(t.cpu(), g.ckpt.tensor(label + "." + key)), 1e-6) << key;
  // The parameter that missed a grad took one step fewer, as in torch.
  for (const auto& [key, t] : state) {
    if (key == "step." + g.skip_param) {
      EXPECT_EQ(t.item<float>(), 4.0f);
    }
  }
}

TEST(AdamW, FusedMatchesTorchFused) { expect_matches_torch(true); }
TEST(AdamW, PerTensorMatchesTorchForeachFalse) { expect_matches_torch(false); }

void expect_state_round_trip(bool fused) {
  AdamWGolden g;
  auto config = g.config;
  config.fused = fused;
  auto a = g.fresh_params();
  mm::AdamW opt_a(a, config);
  for (int s = 0; s < 3; ++s) {
    g.set_grads(a, s);
    opt_a.step(g.lrs[s]);
  }
  const auto file = mm::testing::temp_dir(fused ? "adamw_state_fused" : "adamw_state") / "opt.safetensors";
  mm::save_safetensors(file, opt_a.state_tensors());

  mm::NamedParams b;
  for (const auto& [n, p] : a) b.emplace_back(n, p.detach().clone().set_requires_grad(true));
  mm::AdamW opt_b(b, config);
  opt_b.load_state_tensors(mm::Checkpoint::open(file));
  EXPECT_EQ(opt_b.steps_taken(), 3);
  g.set_grads(a, 3);
  g.set_grads(b, 3);
  opt_a.step(g.lrs[3]);
  opt_b.step(g.lrs[3]);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
}

TEST(AdamW, StateRoundTripGivesTheIdenticalNextStepFused) { expect_state_round_trip(true); }
TEST(AdamW, StateRoundTripGivesTheIdenticalNextStepPerTensor) { expect_state_round_trip(false); }

TEST(AdamW, LoadRejectsMismatchedState) {
  AdamWGolden g;
  auto params = g.fresh_params();
  mm::AdamW opt(params, g.config);
  g.set_grads(params, 0);
  opt.step(1e-3);
  auto state = opt.state_tensors();
  const std::string victim = state[0].first;

  auto wrong_shape = state;
  wrong_shape[0].second = torch::zeros({99});
  EXPECT_THROW_MSG(opt.load_state_tensors(wrong_shape), victim);

  auto unknown = state;
  unknown.emplace_back("exp_avg.no.such.param", torch::zeros({1}));
  EXPECT_THROW_MSG(opt.load_state_tensors(unknown), "no.such.param");

  auto incomplete = state;
  incomplete.erase(incomplete.begin());
  EXPECT_THROW_MSG(opt.load_state_tensors(incomplete), victim);

  auto stray = state;
  stray.emplace_back("momentum.x", torch::zeros({1}));
  EXPECT_THROW_MSG(opt.load_state_tensors(stray), "momentum.x");
}

TEST(AdamW, ParameterWithoutGradIsUntouched) {
  auto w = torch::ones({3}).set_requires_grad(true);
  auto b = torch::ones({3}).set_requires_grad(true);
  mm::AdamW opt({{"w", w}, {"b", b}}, {.lr = 0.1, .weight_decay = 0.5});
  w.mutable_grad() = torch::ones({3});
  opt.step(0.1);
  EXPECT_TRUE(torch::equal(b, torch::ones({3})));
  EXPECT_FALSE(torch::equal(w, torch::ones({3})));
  EXPECT_EQ(opt.state_tensors().size(), 3u);
  opt.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(LrSchedule, MatchesTransformersSchedules) {
  const json cases = read_json(golden_dir("optimizer") / "schedules.json");
  ASSERT_EQ(cases.size(), 8u);
  for (const auto& c : cases) {
    mm::LrScheduleConfig cfg;
    const std::string kind = c["kind"];
    cfg.kind = kind == "linear" ? mm::ScheduleKind::linear
               : kind == "constant" ? mm::ScheduleKind::constant
                                    : mm::ScheduleKind::cosine;
    ASSERT_TRUE(kind == "linear" || kind == "constant" || kind == "cosine") << kind;
    cfg.warmup_steps = c["warmup_steps"];
    cfg.warmup_ratio = c["warmup_ratio"];
    cfg.total_steps = c["total_steps"];
    cfg.min_lr_ratio = c["min_lr_ratio"];
    mm::LrSchedule schedule(cfg);
    EXPECT_EQ(schedule.warmup_steps(), c["resolved_warmup"].get<int64_t>()) << c.dump();
    const auto& expected = c["multipliers"];
    for (size_t step = 0; step < expected.size(); ++step) {
      EXPECT_DOUBLE_EQ(schedule.multiplier(static_cast<int64_t>(step)), expected[step].get<double>())
          << kind << " warmup " << cfg.warmup_steps << " step " << step;
      EXPECT_DOUBLE_EQ(schedule.lr(static_cast<int64_t>(step), 3e-4), 3e-4 * expected[step].get<double>());
    }
  }
}

TEST(LrSchedule, RejectsBadConfigNamingTheField) {
  // A kind outside the enum is refused where the run config is read (TypedConfig in test_config.cpp).
  EXPECT_THROW_MSG(mm::LrSchedule({.kind = mm::ScheduleKind::cosine, .total_steps = 0}), "total_steps");
  EXPECT_THROW_MSG(mm::LrSchedule({.kind = mm::ScheduleKind::linear, .warmup_steps = 2, .warmup_ratio = 0.1, .total_steps = 10}),
                   "warmup_ratio");
  EXPECT_THROW_MSG(mm::LrSchedule({.kind = mm::ScheduleKind::linear, .total_steps = 10, .min_lr_ratio = 0.1}),
                   "min_lr_ratio");
}

TEST(ClipGradNorm, MatchesTorchClipGradNorm) {
  auto ckpt = mm::Checkpoint::open(golden_dir("optimizer") / "clip.safetensors");
  for (int c = 0; c < 3; ++c) {
    std::vector<torch::Tensor> params;
    for (int i = 0; i < 3; ++i) {
      auto before = ckpt.tensor(mm::str_cat(c, ".before.", i)).clone();
      auto p = torch::zeros_like(before).set_requires_grad(true);
      p.mutable_grad() = before;
      params.push_back(p);
    }
    params.push_back(torch::zeros({4}).set_requires_grad(true));  // no grad: ignored
    const double max_norm = ckpt.tensor(mm::str_cat(c, ".max_norm")).item<double>();
    const double norm = mm::clip_grad_norm(params, max_norm);
    EXPECT_NEAR(norm, ckpt.tensor(mm::str_cat(c, ".norm")).item<double>(), 1e-6) << c;
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(max_abs_diff(params[i].grad(), ckpt.tensor(mm::str_cat(c, ".after.", i))), 1e-6)
          << "case " << c << " tensor " << i;
  }
}

TEST(ClipGradNorm, MeasureOnlyAndNonFinite) {
  auto p = torch::zeros({2}).set_requires_grad(true);
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});
  EXPECT_DOUBLE_EQ(mm::clip_grad_norm({p}, 0.0), 5.0);
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({3.0f, 4.0f})));
  EXPECT_NEAR(mm::clip_grad_norm({p}, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(p.grad().norm().item<double>(), 1.0, 1e-5);

  p.mutable_grad() = torch::tensor({INFINITY, 1.0f});
  EXPECT_TRUE(std::isinf(mm::clip_grad_norm({p}, 1.0)));
  EXPECT_EQ(p.grad()[1].item<float>(), 1.0f);
  EXPECT_EQ(mm::clip_grad_norm({torch::zeros({1})}, 1.0), 0.0);
}

// The step without host reads (train_step): the norm stays a tensor, and found_inf = 1 skips the
// whole update in both AdamW paths; a later step equals that of an optimizer that never saw the
// skipped one; found_inf = 0 changes nothing.
TEST(ClipGradNorm, TensorFormAndFoundInfSkipTheUpdate) {
  auto p = torch::zeros({2}).set_requires_grad(true);
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});
  const auto norm = mm::clip_grad_norm_tensor({p}, 1.0);
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-6);
  EXPECT_NEAR(p.grad().norm().item<double>(), 1.0, 1e-5);
  p.mutable_grad() = torch::tensor({NAN, 1.0f});
  EXPECT_TRUE(std::isnan(mm::clip_grad_norm_tensor({p}, 1.0).item<double>()));
  EXPECT_EQ(p.grad()[1].item<float>(), 1.0f);  // left as it was

  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "single");
    mm::AdamWConfig config;
    config.fused = fused;
    config.weight_decay = 0.1;
    auto make = [] {
      torch::manual_seed(3);
      return mm::NamedParams{{"a", torch::randn({4, 3}).set_requires_grad(true)},
                             {"b", torch::randn({5}).set_requires_grad(true)}};
    };
    auto skipping = make(), plain = make();
    mm::AdamW with_skip(skipping, config), without(plain, config);
    auto set_grads = [](mm::NamedParams& ps, int64_t seed) {
      torch::manual_seed(seed);
      for (auto& [name, t] : ps) t.mutable_grad() = torch::randn_like(t);
    };
    set_grads(skipping, 10);
    with_skip.step(1e-2, torch::ones({}));  // skipped before any real step
    with_skip.forget_last_step();
    EXPECT_EQ(with_skip.steps_taken(), 0);
    EXPECT_TRUE(torch::equal(skipping[0].second, plain[0].second));
    for (int64_t step = 0; step < 3; ++step) {
      set_grads(skipping, 20 + step);
      set_grads(plain, 20 + step);
      with_skip.step(1e-2, torch::zeros({}));
      without.step(1e-2);
      set_grads(skipping, 99);
      with_skip.step(1e-2, torch::ones({}));  // skipped: nothing moves
      with_skip.forget_last_step();
    }
    EXPECT_EQ(with_skip.steps_taken(), without.steps_taken());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(skipping[i].second, plain[i].second)) << i;
    const auto a = with_skip.state_tensors(), b = without.state_tensors();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

TEST(Rng, DrawsAfterRestoreEqualDrawsAfterCapture) {
  torch::manual_seed(123);
  (void)torch::rand({7});
  const auto state = mm::capture_rng_state();
  const auto first = torch::randn({1000});
  const auto first_perm = torch::randperm(50);
  (void)torch::rand({333});  // move on

  // Through the checkpoint file format too.
  const auto file = mm::testing::temp_dir("rng") / "rng.safetensors";
  mm::save_safetensors(file, state.to_tensors());
  auto ckpt = mm::Checkpoint::open(file);
  std::vector<std::pair<std::string, torch::Tensor>> loaded;
  for (const auto& n : ckpt.names()) loaded.emplace_back(n, ckpt.tensor(n));
  mm::restore_rng_state(mm::RngState::from_tensors(loaded));
  EXPECT_TRUE(torch::equal(torch::randn({1000}), first));
  EXPECT_TRUE(torch::equal(torch::randperm(50), first_perm));
  EXPECT_EQ(state.cuda.size(), torch::cuda::is_available() ? torch::cuda::device_count() : 0u);
}

TEST(Rng, FromTensorsNamesBadEntries) {
  EXPECT_THROW_MSG(mm::RngState::from_tensors({}), "rng.cpu");
  auto cpu = mm::capture_rng_state().cpu;
  EXPECT_THROW_MSG(mm::RngState::from_tensors({{"rng.cpu", cpu}, {"rng.gpu", cpu}}), "rng.gpu");
  EXPECT_THROW_MSG(mm::RngState::from_tensors({{"rng.cpu", cpu}, {"rng.cuda.1", cpu}}), "rng.cuda.0");
  EXPECT_THROW_MSG(mm::RngState::from_tensors({{"rng.cpu", torch::zeros({3})}}), "uint8");
}

}  // namespace
