// Per-step training metrics to three places: one human line on stderr (through mm::log, so
// rank-prefixed), one JSON line in <output>/metrics.jsonl, and TensorBoard scalars under
// <output>/tensorboard/; plus an end-of-run summary. On a terminal a progress bar sits below.
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace mm {

class ProgressBar;
class StepJsonl;
class TensorBoardWriter;

struct StepMetrics {
  int64_t step = 0;  // optimizer steps done, this one included (1-based)
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, samples_per_s = 0;
  int64_t peak_memory_bytes = -1;  // -1: the logger measures it (peak_memory_bytes(device))
  std::map<std::string, double> extra;  // more scalars, logged under their own names
};

struct MetricsOptions {
  std::filesystem::path output_dir;  // metrics.jsonl and tensorboard/ go here
  int64_t total_steps = 0;           // for the progress bar (0: unknown)
  // Resuming after step N: metrics.jsonl keeps its lines up to step N (a crashed run may have
  // logged steps past its last checkpoint) and is appended to. Fresh runs start it empty.
  std::optional<int64_t> resume_from_step = std::nullopt;
  bool write_files = true;  // false on ranks other than 0: stderr lines only
  bool tensorboard = true;
  std::optional<bool> progress_bar = std::nullopt;  // nullopt: when stderr is a terminal
  std::string device = "cpu";        // whose peak memory is measured ("cuda:0" ...)
  int64_t log_every = 1;             // the stderr line every N steps, the first and the last
};

struct RunSummary {
  int64_t steps = 0;  // steps logged by this process
  int64_t last_step = 0;
  double seconds = 0;
  double mean_tokens_per_s = 0;
  double final_loss = 0;
  int64_t peak_memory_bytes = 0;
  std::map<std::string, int64_t> counters;  // e.g. "skipped_samples.missing_image"
  nlohmann::json to_json() const;
};

// Peak memory so far: CUDA devices report the caching allocator's peak allocated bytes; the CPU
// reports the process's peak resident set (getrusage ru_maxrss).
int64_t peak_memory_bytes(const std::string& device);
// The CUDA caching allocator's peak reserved bytes (what it took from the driver: the allocated
// peak plus its cached, fragmented rest); -1 for the CPU.
int64_t peak_reserved_bytes(const std::string& device);

class MetricsLogger {
 public:
  explicit MetricsLogger(MetricsOptions options);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // Returns the record as written to metrics.jsonl.
  nlohmann::json log_step(const StepMetrics& metrics);
  void add_count(const std::string& counter, int64_t n = 1);
  RunSummary summary() const;
  // Ends the progress bar, logs the summary, appends {"summary": ...} to metrics.jsonl.
  RunSummary finish();

  std::filesystem::path jsonl_path() const { return options_.output_dir / "metrics.jsonl"; }

 private:
  MetricsOptions options_;
  std::unique_ptr<StepJsonl> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<ProgressBar> progress_;
  std::chrono::steady_clock::time_point start_;
  int64_t steps_ = 0, last_step_ = 0, peak_memory_ = 0;
  double tokens_per_s_sum_ = 0, final_loss_ = 0;
  std::map<std::string, int64_t> counters_;
  bool finished_ = false;
};

}  // namespace mm
