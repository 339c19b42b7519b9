#include "mm/models/wan/wan_transformer_weights.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <sstream>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"

namespace mm {

NamedTensors read_diffusers_weights(const std::filesystem::path& dir) {
  MM_CHECK(std::filesystem::is_directory(dir), "Wan transformer: ", dir.string(), " is not a directory");
  NamedTensors out;
  const auto index = dir / "diffusion_pytorch_model.safetensors.index.json";
  const auto single = dir / "diffusion_pytorch_model.safetensors";
  if (std::filesystem::exists(index)) {
    out.source = index.string();
    const auto json = read_json_file(index);
    const JsonView root(json, index.string());
    const auto weight_map = root.get<std::map<std::string, std::string>>("weight_map");
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [name, shard] : weight_map) {
      auto& file = shards[shard];
      if (!file) {
        MM_CHECK(std::filesystem::exists(dir / shard), index.string(), " lists shard ", shard, " which does not exist");
        file = SafetensorsFile::open(dir / shard);
      }
      MM_CHECK(file->contains(name), index.string(), ": tensor ", name, " is not in its shard ", shard);
      out.tensors.emplace_back(name, file->tensor(name));
    }
  } else if (std::filesystem::exists(single)) {
    out.source = single.string();
    const auto file = SafetensorsFile::open(single);
    for (const auto& name : file->names()) out.tensors.emplace_back(name, file->tensor(name));
  } else {
    const auto checkpoint = Checkpoint::open(dir);
    out.source = checkpoint.path().string();
    for (const auto& name : checkpoint.names()) out.tensors.emplace_back(name, checkpoint.tensor(name));
  }
  return out;
}

bool wan_keeps_fp32(const std::string& parameter_name) {
  static const std::array<std::string, 6> kept{"rope", "time_embedder", "scale_shift_table", "norm1", "norm2", "norm3"};
  std::istringstream parts(parameter_name);
  std::string part;
  while (std::getline(parts, part, '.'))
    if (std::find(kept.begin(), kept.end(), part) != kept.end()) return true;
  return false;
}

}  // namespace mm
