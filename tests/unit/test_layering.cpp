// The layers of src/mm, bottom to top: each folder includes only itself and the folders before
// it, so that a lower layer never depends on a higher one (no cycles, and a model never knows the
// trainer that trains it). Reads every #include "mm/..." under src/mm and names the file and line
// of each that points up the order.
#include <fstream>
#include <regex>

#include "testing.h"

namespace fs = std::filesystem;

namespace {

// The order, bottom first. apps/ (outside src/) may include any of them.
const std::vector<std::string> kLayers = {
    "core",        // errors, logging, configs, safetensors, RNG
    "tokenizer",   // text to ids and back, chat templates
    "media",       // image and video decoding and encoding
    "nn",          // layers every model shares: linear (LoRA), norms, rotary, attention, KV cache
    "models",      // one folder per model family, the samplers in diffusion/
    "data",        // datasets, samplers, loaders, sample encoding
    "dist",        // process groups, launcher
    "parallel",    // device mesh, FSDP
    "checkpoint",  // training checkpoints, resharding, Hugging Face export
    "train",       // the trainer: loop, step, optimizer, schedule, metrics
    "tasks",       // what runs on a model: chat, evaluation, sampling, feature extraction
};

int layer_of(const std::string& folder) {
  for (size_t i = 0; i < kLayers.size(); ++i)
    if (kLayers[i] == folder) return static_cast<int>(i);
  return -1;
}

// "path:line: what is wrong" for every include under `root` (a src/mm folder) that points up.
std::vector<std::string> layering_violations(const fs::path& root) {
  std::vector<std::string> out;
  const std::regex include(R"(^\s*#\s*include\s*"mm/([A-Za-z0-9_]+)/)");
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const auto ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp")) continue;
    const auto relative = fs::relative(entry.path(), root);
    if (relative.begin() == relative.end() || std::next(relative.begin()) == relative.end()) continue;  // pch.h
    const std::string folder = relative.begin()->string();
    const int own = layer_of(folder);
    const std::string where = (root.filename() / relative).string();
    if (own < 0) {
      out.push_back(where + ":1: folder '" + folder + "' is not in the layer order (tests/unit/test_layering.cpp)");
      continue;
    }
    std::ifstream in(entry.path());
    int line_number = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_number;
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const int target = layer_of(m[1].str());
      if (target > own || target < 0)
        out.push_back(where + ":" + std::to_string(line_number) + ": " + line + "  (" + folder +
                      (target < 0 ? " includes an unknown folder)" : " must not include " + m[1].str() + ", a higher layer)"));
    }
  }
  return out;
}

TEST(Layering, EveryIncludeUnderSrcPointsDownTheOrder) {
  const auto violations = layering_violations(mm::testing::kSourceDir / "src" / "mm");
  std::string all;
  for (const auto& v : violations) all += v + "\n";
  EXPECT_TRUE(violations.empty()) << all;
}

TEST(Layering, AnUpwardIncludeIsNamedWithItsFileAndLine) {
  const auto dir = mm::testing::temp_dir("layering") / "mm";
  fs::create_directories(dir / "core");
  fs::create_directories(dir / "train");
  fs::create_directories(dir / "gadgets");
  std::ofstream(dir / "core" / "fine.h") << "#pragma once\n#include \"mm/core/error.h\"\n";
  std::ofstream(dir / "train" / "fine.cpp") << "#include \"mm/core/fine.h\"\n#include \"mm/train/x.h\"\n";
  std::ofstream(dir / "core" / "bad.cpp") << "// a comment\n#include <vector>\n#include \"mm/train/trainer.h\"\n";
  std::ofstream(dir / "gadgets" / "thing.h") << "#pragma once\n";
  auto violations = layering_violations(dir);
  std::sort(violations.begin(), violations.end());
  ASSERT_EQ(violations.size(), 2u);
  EXPECT_NE(violations[0].find("mm/core/bad.cpp:3: #include \"mm/train/trainer.h\""), std::string::npos) << violations[0];
  EXPECT_NE(violations[0].find("core must not include train"), std::string::npos) << violations[0];
  EXPECT_NE(violations[1].find("mm/gadgets/thing.h:1: folder 'gadgets' is not in the layer order"), std::string::npos)
      << violations[1];
}

}  // namespace
