// `./mm gpu-check` builds tests/gpu/gpu_check.cpp on the GPU machine from a fixed list of library
// sources (tests/gpu/CMakeLists.txt: that machine lacks the Debian packages the full library
// links). A file the check reaches but the list lacks is a link error found only where a GPU is
// lent; this test finds it in every build: it follows gpu_check.cpp's includes ("mm/..." and
// "unit/...") and requires the .cpp beside every header it reaches to be in the list.
#include <fstream>
#include <regex>
#include <set>

#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::kSourceDir;

namespace {

// The files `file` includes by a quoted path, resolved under src/ or tests/.
std::vector<fs::path> quoted_includes(const fs::path& file) {
  static const std::regex include(R"(^\s*#\s*include\s*"((mm|unit)/[^"]+)\")");
  std::vector<fs::path> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, include)) continue;
    out.push_back(kSourceDir / (m[2].str() == "mm" ? "src" : "tests") / m[1].str());
  }
  return out;
}

// The sources the closure of `start` needs: the .cpp of every header reached, transitively.
std::set<std::string> needed_sources(const fs::path& start) {
  std::set<std::string> needed;
  std::set<fs::path> seen;
  std::vector<fs::path> todo = {start};
  while (!todo.empty()) {
    const fs::path file = todo.back();
    todo.pop_back();
    if (!seen.insert(file).second || !fs::exists(file)) continue;
    for (auto& next : quoted_includes(file)) todo.push_back(next);
    if (file.extension() == ".h") {
      auto source = file;
      source.replace_extension(".cpp");
      if (fs::exists(source)) {
        todo.push_back(source);
        needed.insert(fs::relative(source, kSourceDir).string());
      }
    }
  }
  return needed;
}

std::set<std::string> listed_sources() {
  std::ifstream in(kSourceDir / "tests/gpu/CMakeLists.txt");
  static const std::regex entry(R"(\$\{MM_ROOT\}/(src/mm/\S+\.cpp))");
  std::set<std::string> out;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) out.insert(m[1].str());
  }
  return out;
}

}  // namespace

TEST(GpuCheck, ItsSourceListHoldsEverySourceItsIncludesReach) {
  const auto needed = needed_sources(kSourceDir / "tests/gpu/gpu_check.cpp");
  const auto listed = listed_sources();
  ASSERT_GT(needed.size(), 20u);
  for (const auto& source : needed)
    EXPECT_TRUE(listed.count(source)) << source << " is reached from tests/gpu/gpu_check.cpp but missing from "
                                      << "MM_GPU_SOURCES in tests/gpu/CMakeLists.txt";
  for (const auto& source : listed)
    EXPECT_TRUE(needed.count(source)) << source << " is listed in tests/gpu/CMakeLists.txt but not reached";
}
