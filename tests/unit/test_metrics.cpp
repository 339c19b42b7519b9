// Metrics: TensorBoard event files read back by TensorBoard's own reader, metrics.jsonl lines
// (fresh and resumed), the run summary, the progress bar.
#include <fstream>

#include "mm/core/progress.h"
#include "mm/train/metrics.h"
#include "mm/train/tensorboard_writer.h"
#include "test_files.h"
#include "testing.h"

namespace fs = std::filesystem;
using nlohmann::json;
using mm::testing::read_jsonl;

namespace {

// {tag: [[step, value], ...]} as TensorBoard's EventAccumulator reads `dir`.
json read_with_tensorboard(const fs::path& dir) {
  const auto [rc, out] = mm::testing::run_command(
      mm::testing::kPython + " " +
          (mm::testing::kSourceDir / "tests/reference/tensorboard_read.py").string() + " " + dir.string(),
      /*with_stderr=*/false);
  EXPECT_EQ(rc, 0) << out;
  try {
    return json::parse(out);
  } catch (const json::exception&) {
    ADD_FAILURE() << "tensorboard_read.py printed: " << out;
    return json::object();
  }
}

TEST(TensorBoard, Crc32cIsCastagnoli) {
  EXPECT_EQ(mm::crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(mm::crc32c("", 0), 0u);
}

TEST(TensorBoard, EventAccumulatorReadsOurScalars) {
  const auto dir = mm::testing::temp_dir("tb_scalars");
  {
    mm::TensorBoardWriter writer(dir);
    EXPECT_NE(writer.path().filename().string().find("events.out.tfevents."), std::string::npos);
    for (int64_t step = 1; step <= 20; ++step) {
      writer.add_scalar("train/loss", 3.0 / static_cast<double>(step), step);
      if (step % 5 == 0) writer.add_scalar("eval/accuracy", 0.1 * static_cast<double>(step / 5), step);
    }
    writer.add_scalar("odd tag/with-chars_1", -1e-7, 1000000000000ll);
    writer.flush();
  }
  const json scalars = read_with_tensorboard(dir);
  ASSERT_EQ(scalars.size(), 3u) << scalars.dump();
  ASSERT_EQ(scalars["train/loss"].size(), 20u);
  for (int64_t step = 1; step <= 20; ++step) {
    EXPECT_EQ(scalars["train/loss"][step - 1][0].get<int64_t>(), step);
    EXPECT_EQ(scalars["train/loss"][step - 1][1].get<double>(),
              static_cast<double>(static_cast<float>(3.0 / static_cast<double>(step))));
  }
  ASSERT_EQ(scalars["eval/accuracy"].size(), 4u);
  EXPECT_EQ(scalars["eval/accuracy"][3][0].get<int64_t>(), 20);
  EXPECT_EQ(scalars["eval/accuracy"][3][1].get<double>(), static_cast<double>(0.4f));
  EXPECT_EQ(scalars["odd tag/with-chars_1"][0][0].get<int64_t>(), 1000000000000ll);
  EXPECT_EQ(scalars["odd tag/with-chars_1"][0][1].get<double>(), static_cast<double>(-1e-7f));
}

mm::StepMetrics step_metrics(int64_t step) {
  mm::StepMetrics m;
  m.step = step;
  m.loss = 2.0 / static_cast<double>(step);
  m.lr = 1e-4 * static_cast<double>(step);
  m.grad_norm = 0.5;
  m.tokens_per_s = 1000.0 * static_cast<double>(step);
  m.samples_per_s = 4;
  m.extra = {{"loss_scale", 1.0}};
  return m;
}

TEST(MetricsLogger, WritesJsonlTensorBoardAndASummary) {
  const auto out = mm::testing::temp_dir("metrics_run");
  {
    mm::MetricsLogger logger({.output_dir = out, .total_steps = 3, .progress_bar = false});
    for (int64_t step = 1; step <= 3; ++step) {
      const json record = logger.log_step(step_metrics(step));
      EXPECT_GT(record["peak_memory_bytes"].get<int64_t>(), 0);  // measured: the process RSS
    }
    logger.add_count("skipped_samples.missing_image", 2);
    logger.add_count("skipped_samples.too_long");
    const auto summary = logger.finish();
    EXPECT_EQ(summary.steps, 3);
    EXPECT_EQ(summary.last_step, 3);
    EXPECT_DOUBLE_EQ(summary.mean_tokens_per_s, 2000.0);
    EXPECT_DOUBLE_EQ(summary.final_loss, 2.0 / 3.0);
    EXPECT_GT(summary.peak_memory_bytes, 0);
    EXPECT_EQ(summary.counters.at("skipped_samples.missing_image"), 2);
    EXPECT_EQ(summary.counters.at("skipped_samples.too_long"), 1);
  }
  const auto lines = read_jsonl(out / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto& l = lines[step - 1];
    EXPECT_EQ(l["step"].get<int64_t>(), step);
    EXPECT_DOUBLE_EQ(l["loss"].get<double>(), 2.0 / static_cast<double>(step));
    EXPECT_DOUBLE_EQ(l["lr"].get<double>(), 1e-4 * static_cast<double>(step));
    EXPECT_DOUBLE_EQ(l["tokens_per_s"].get<double>(), 1000.0 * static_cast<double>(step));
    EXPECT_DOUBLE_EQ(l["loss_scale"].get<double>(), 1.0);
    for (const char* key : {"grad_norm", "samples_per_s", "peak_memory_bytes", "elapsed_s"})
      EXPECT_TRUE(l.contains(key)) << key;
  }
  EXPECT_EQ(lines[3]["summary"]["steps"].get<int64_t>(), 3);
  EXPECT_EQ(lines[3]["summary"]["counters"]["skipped_samples.too_long"].get<int64_t>(), 1);

  const json scalars = read_with_tensorboard(out / "tensorboard");
  for (const char* tag : {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s",
                          "train/samples_per_s", "train/peak_memory_gib", "train/loss_scale"})
    ASSERT_EQ(scalars[tag].size(), 3u) << tag << " in " << scalars.dump();
  EXPECT_EQ(scalars["train/loss"][1][1].get<double>(), static_cast<double>(1.0f));

  // A resume after step 2 drops the crashed run's step 3 (and its summary) and appends.
  {
    mm::MetricsLogger logger({.output_dir = out, .total_steps = 4, .resume_from_step = 2,
                              .progress_bar = false});
    logger.log_step(step_metrics(3));
    logger.log_step(step_metrics(4));
  }
  const auto resumed = read_jsonl(out / "metrics.jsonl");
  ASSERT_EQ(resumed.size(), 4u);
  for (int64_t step = 1; step <= 4; ++step) EXPECT_EQ(resumed[step - 1]["step"].get<int64_t>(), step);
}

TEST(MetricsLogger, OtherRanksWriteNoFiles) {
  const auto out = mm::testing::temp_dir("metrics_rank1");
  mm::MetricsLogger logger({.output_dir = out / "run", .write_files = false, .progress_bar = false});
  logger.log_step(step_metrics(1));
  logger.finish();
  EXPECT_FALSE(fs::exists(out / "run"));
}

TEST(MetricsLogger, BadDeviceNamesIt) {
  EXPECT_THROW_MSG(mm::MetricsLogger({.output_dir = mm::testing::temp_dir("metrics_dev"),
                                      .progress_bar = false, .device = "gpu:x"}),
                   "gpu:x");
}

TEST(Progress, FormatsCountRateAndEta) {
  const std::string line = mm::format_progress("train", 30, 100, 2.0, 80);
  EXPECT_LE(line.size(), 80u);
  EXPECT_NE(line.find("train ["), std::string::npos) << line;
  EXPECT_NE(line.find(" 30/100 "), std::string::npos) << line;
  EXPECT_NE(line.find("2.00 it/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 00:00:35"), std::string::npos) << line;
  EXPECT_NE(mm::format_progress("", 5, 0, 0, 80).find("5  0.00 it/s"), std::string::npos);
  EXPECT_NE(mm::format_progress("x", 1, 10, 0, 80).find("ETA --:--:--"), std::string::npos);
}

std::string bar_output(bool enabled) {
  std::FILE* f = std::tmpfile();
  {
    mm::ProgressBar bar(10, "train", 0, f, enabled);
    for (int i = 1; i <= 10; ++i) bar.update(i);
    bar.clear();
    bar.redraw();
  }
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST(Progress, RedrawsInPlaceOnATerminalAndStaysSilentOtherwise) {
  const std::string drawn = bar_output(true);
  EXPECT_NE(drawn.find("\r\033[K"), std::string::npos);
  EXPECT_NE(drawn.find("10/10"), std::string::npos) << drawn;
  EXPECT_EQ(drawn.back(), '\n');
  EXPECT_EQ(std::count(drawn.begin(), drawn.end(), '\n'), 1);  // one line, redrawn in place
  EXPECT_EQ(bar_output(false), "");
  std::FILE* f = std::tmpfile();
  EXPECT_FALSE(mm::ProgressBar(5, "", 0, f).enabled());  // a file is not a terminal
  std::fclose(f);
}

}  // namespace
