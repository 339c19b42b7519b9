#include "mm/train/step_jsonl.h"

#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/core/safetensors.h"

namespace mm {
namespace {

// The lines of an earlier run up to `last_step` (complete JSON lines with a step field).
std::string kept_lines(const std::filesystem::path& path, int64_t last_step) {
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= last_step)
        kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
      // A line torn by the crash that made this a resume.
    }
  }
  return kept;
}

}  // namespace

StepJsonl::StepJsonl(std::filesystem::path path, std::optional<int64_t> resume_from_step) : path_(std::move(path)) {
  std::string previous;
  if (resume_from_step && std::filesystem::exists(path_)) previous = kept_lines(path_, *resume_from_step);
  write_file_atomic(path_, previous);
  out_.open(path_, std::ios::app);
  MM_CHECK(out_.good(), "cannot open ", path_.string(), " for appending");
}

void StepJsonl::append(const nlohmann::json& record) {
  out_ << record.dump() << "\n";
  out_.flush();
  MM_CHECK(out_.good(), "cannot write ", path_.string());
}

}  // namespace mm
