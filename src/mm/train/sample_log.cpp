#include "mm/train/sample_log.h"

#include <nlohmann/json.hpp>

#include <string>

namespace mm {
namespace {

std::filesystem::path rank_file(const std::filesystem::path& output_dir, int64_t rank) {
  std::filesystem::create_directories(output_dir / "samples");
  return output_dir / "samples" / ("rank-" + std::to_string(rank) + ".jsonl");
}

}  // namespace

SampleLog::SampleLog(const std::filesystem::path& output_dir, int64_t rank, std::optional<int64_t> resume_from_step)
    : file_(rank_file(output_dir, rank), resume_from_step) {}

void SampleLog::record(int64_t step, const std::vector<MicroBatch>& micro_batches) {
  nlohmann::json batches = nlohmann::json::array();
  for (const auto& m : micro_batches) batches.push_back({{"epoch", m.epoch}, {"indices", m.indices}});
  file_.append({{"step", step}, {"micro_batches", std::move(batches)}});
}

}  // namespace mm
