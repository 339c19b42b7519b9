#include "mm/checkpoint/checkpoint_convert.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/output_dir.h"
#include "mm/core/safetensors.h"
#include "mm/data/sampler.h"
#include "mm/checkpoint/checkpoint_io.h"
#include "mm/checkpoint/resharding.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

// Slice k of whole tensors cut on dim 0 into `slices` row ranges (the last ones short or empty);
// 0-dim tensors are kept whole, in slice 0. Fills `layout` with each tensor's entry.
NamedTensors slice_of(const NamedTensors& whole, int64_t k, int64_t slices, nlohmann::json& layout) {
  NamedTensors out;
  for (const auto& [name, t] : whole) {
    const bool cut = t.dim() >= 1 && slices > 1;
    const int64_t rows = cut ? t.size(0) : 0;
    const int64_t per = cut ? (rows + slices - 1) / slices : 0;
    layout[name] = slice_layout_json(t.sizes().vec(), t.scalar_type(), cut, per);
    if (!cut) {
      if (k == 0) out.emplace_back(name, t);
      continue;
    }
    const int64_t begin = std::min(rows, k * per);
    out.emplace_back(name, t.narrow(0, begin, std::min(rows - begin, per)));
  }
  return out;
}

}  // namespace

void write_sliced_checkpoint(const WholeTrainingCheckpoint& whole, int64_t slices, const fs::path& to) {
  MM_CHECK(slices >= 1, "--slices must be at least 1 for a sharded checkpoint");
  write_directory_atomically(to, "convert", [&](const fs::path& tmp) {
    nlohmann::json model_layout = nlohmann::json::object(), optimizer_layout = nlohmann::json::object();
    for (int64_t k = 0; k < slices; ++k) {
      save_safetensors(tmp / model_slice_file(k, slices), slice_of(whole.model, k, slices, model_layout));
      save_safetensors(tmp / optimizer_slice_file(k, slices), slice_of(whole.optimizer, k, slices, optimizer_layout));
      save_safetensors(tmp / rng_rank_file(k), whole.rng);
    }
    nlohmann::json sharding = {{"shards", slices}, {"world_size", slices}, {"model", model_layout},
                               {"optimizer", optimizer_layout}};
    auto state = whole.state;
    const std::string where = (whole.dir / "trainer_state.json").string();
    // The data position is global: any number of processes continues from it as it is.
    state["data"] = saved_data_position(whole.state, where).to_json();
    state.erase("data_ranks");
    state["world_size"] = slices;
    write_file_atomic(tmp / "sharding.json", sharding.dump(1) + "\n");
    write_file_atomic(tmp / "trainer_state.json", state.dump(2) + "\n");
    for (const auto& file : whole.extra_files) fs::copy_file(file, tmp / file.filename());
  });
}

}  // namespace mm
