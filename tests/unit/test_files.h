// Reading what a command wrote: whole files, JSON-lines files and directory trees, shared by
// the tests that run the CLI and compare its outputs.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace mm::testing {

// The bytes of `path` ("" when it cannot be opened: the comparison that follows then fails).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// One JSON value per line; a line that does not parse (an empty one included) throws, failing the test.
inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// Every regular file under `dir` with its bytes, by relative path.
inline std::map<std::string, std::string> file_tree(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[std::filesystem::relative(e.path(), dir).string()] = read_file(e.path());
  return files;
}

}  // namespace mm::testing
