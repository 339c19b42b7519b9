// A JSON-lines file with one record per training step (metrics.jsonl, samples/rank-<r>.jsonl)
// that a resumed run continues: it keeps the lines up to the step it resumed from (a crashed run
// may have written steps past its last checkpoint) and appends after them.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>

namespace mm {

class StepJsonl {
 public:
  // Fresh runs (resume_from_step nullopt) start the file empty.
  StepJsonl(std::filesystem::path path, std::optional<int64_t> resume_from_step);
  void append(const nlohmann::json& record);  // one line, flushed; throws mm::Error naming the file
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace mm
