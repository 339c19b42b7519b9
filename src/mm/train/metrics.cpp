#include "mm/train/metrics.h"

#include <sys/resource.h>

#include <ATen/DeviceAccelerator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/core/progress.h"
#include "mm/core/safetensors.h"
#include "mm/train/step_jsonl.h"
#include "mm/train/tensorboard_writer.h"

namespace mm {
namespace fs = std::filesystem;
namespace {

std::string human_bytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

int64_t peak_memory_bytes(const std::string& device) {
  const c10::Device d(device);
  if (d.is_cuda()) {
    const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(d.has_index() ? d.index() : 0);
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

int64_t peak_reserved_bytes(const std::string& device) {
  const c10::Device d(device);
  if (!d.is_cuda()) return -1;
  const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(d.has_index() ? d.index() : 0);
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

nlohmann::json RunSummary::to_json() const {
  return {{"steps", steps},
          {"last_step", last_step},
          {"seconds", seconds},
          {"mean_tokens_per_s", mean_tokens_per_s},
          {"final_loss", final_loss},
          {"peak_memory_bytes", peak_memory_bytes},
          {"counters", counters}};
}

MetricsLogger::MetricsLogger(MetricsOptions options)
    : options_(std::move(options)), start_(std::chrono::steady_clock::now()) {
  try {  // a bad device string fails here, not at step 1
    (void)c10::Device(options_.device);
  } catch (const std::exception&) {
    fail("metrics: device '", options_.device, "' is not a device name (cpu, cuda, cuda:0 ...)");
  }
  MM_CHECK(options_.log_every >= 1, "metrics: log_every must be at least 1, got ", options_.log_every);
  if (options_.write_files) {
    fs::create_directories(options_.output_dir);
    jsonl_ = std::make_unique<StepJsonl>(jsonl_path(), options_.resume_from_step);
    if (options_.tensorboard)
      tensorboard_ = std::make_unique<TensorBoardWriter>(options_.output_dir / "tensorboard");
  }
  progress_ = std::make_unique<ProgressBar>(options_.total_steps, "train",
                                            options_.resume_from_step.value_or(0), stderr,
                                            options_.progress_bar);
}

MetricsLogger::~MetricsLogger() {
  if (progress_) progress_->finish();
}

nlohmann::json MetricsLogger::log_step(const StepMetrics& m) {
  const int64_t memory = m.peak_memory_bytes >= 0 ? m.peak_memory_bytes : peak_memory_bytes(options_.device);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  ++steps_;
  last_step_ = m.step;
  tokens_per_s_sum_ += m.tokens_per_s;
  final_loss_ = m.loss;
  peak_memory_ = std::max(peak_memory_, memory);

  nlohmann::json record = {{"step", m.step},
                           {"loss", m.loss},
                           {"lr", m.lr},
                           {"grad_norm", m.grad_norm},
                           {"tokens_per_s", m.tokens_per_s},
                           {"samples_per_s", m.samples_per_s},
                           {"peak_memory_bytes", memory},
                           {"elapsed_s", elapsed}};
  if (const int64_t reserved = peak_reserved_bytes(options_.device); reserved >= 0)
    record["peak_reserved_bytes"] = reserved;
  for (const auto& [k, v] : m.extra) {
    MM_CHECK(!record.contains(k), "metrics: extra scalar '", k, "' clashes with a standard field");
    record[k] = v;
  }

  std::ostringstream line;
  line << "step " << m.step;
  if (options_.total_steps > 0) line << "/" << options_.total_steps;
  line << " | loss " << fmt("%.4f", m.loss) << " | lr " << fmt("%.3e", m.lr) << " | grad_norm "
       << fmt("%.4f", m.grad_norm) << " | " << fmt("%.0f", m.tokens_per_s) << " tok/s | "
       << fmt("%.2f", m.samples_per_s) << " samples/s | mem " << human_bytes(memory);
  for (const auto& [k, v] : m.extra) line << " | " << k << " " << fmt("%.6g", v);
  progress_->update(m.step);
  // The first step of this process, every log_every-th and the last: printed above the bar,
  // which the logger redraws.
  if (steps_ == 1 || m.step % options_.log_every == 0 || m.step == options_.total_steps) log::info(line.str());

  if (options_.write_files) {
    jsonl_->append(record);
    if (tensorboard_) {
      tensorboard_->add_scalar("train/loss", m.loss, m.step);
      tensorboard_->add_scalar("train/lr", m.lr, m.step);
      tensorboard_->add_scalar("train/grad_norm", m.grad_norm, m.step);
      tensorboard_->add_scalar("train/tokens_per_s", m.tokens_per_s, m.step);
      tensorboard_->add_scalar("train/samples_per_s", m.samples_per_s, m.step);
      tensorboard_->add_scalar("train/peak_memory_gib",
                               static_cast<double>(memory) / (1024.0 * 1024 * 1024), m.step);
      for (const auto& [k, v] : m.extra) tensorboard_->add_scalar("train/" + k, v, m.step);
      tensorboard_->flush();
    }
  }
  return record;
}

void MetricsLogger::add_count(const std::string& counter, int64_t n) { counters_[counter] += n; }

RunSummary MetricsLogger::summary() const {
  RunSummary s;
  s.steps = steps_;
  s.last_step = last_step_;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.mean_tokens_per_s = steps_ > 0 ? tokens_per_s_sum_ / static_cast<double>(steps_) : 0.0;
  s.final_loss = final_loss_;
  s.peak_memory_bytes = std::max(peak_memory_, peak_memory_bytes(options_.device));
  s.counters = counters_;
  return s;
}

RunSummary MetricsLogger::finish() {
  RunSummary s = summary();
  if (finished_) return s;
  finished_ = true;
  progress_->finish();
  std::ostringstream line;
  line << "done: " << s.steps << " steps (last " << s.last_step << ") in " << fmt("%.1f", s.seconds)
       << " s | mean " << fmt("%.0f", s.mean_tokens_per_s) << " tok/s | final loss "
       << fmt("%.4f", s.final_loss) << " | peak mem " << human_bytes(s.peak_memory_bytes);
  for (const auto& [k, v] : s.counters) line << " | " << k << " " << v;
  log::info(line.str());
  if (options_.write_files) {
    jsonl_->append(nlohmann::json{{"summary", s.to_json()}});
    if (tensorboard_) tensorboard_->flush();
  }
  return s;
}

}  // namespace mm
