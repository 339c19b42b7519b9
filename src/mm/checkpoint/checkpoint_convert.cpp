#include "mm/checkpoint/checkpoint_convert.h"

#include <unistd.h>

#include <torch/torch.h>

#include "mm/checkpoint/hf_export.h"
#include "mm/core/error.h"
#include "mm/core/output_dir.h"
#include "mm/core/log.h"
#include "mm/core/rng.h"
#include "mm/core/safetensors.h"
#include "mm/data/sampler.h"
#include "mm/models/common/weights.h"
#include "mm/models/vlm_model.h"
#include "mm/train/checkpoint_export.h"
#include "mm/train/checkpoint_io.h"
#include "mm/checkpoint/resharding.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

bool is_hf_model_dir(const fs::path& dir) {
  return fs::is_regular_file(dir / "config.json") &&
         (fs::is_regular_file(dir / "model.safetensors") || fs::is_regular_file(dir / "model.safetensors.index.json"));
}

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

void write_sharded(const WholeTrainingCheckpoint& whole, const fs::path& assets, int64_t slices, const fs::path& to) {
  // Written beside the target and renamed into place; never a directory someone else made.
  const fs::path tmp = to.string() + str_cat(".tmp-convert-", ::getpid());
  MM_CHECK(!fs::exists(tmp), tmp.string(), " already exists; remove it or choose another --to");
  fs::create_directories(tmp);
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
  fs::copy_file(assets / "config.json", tmp / "config.json");
  for (const auto& file : hf_asset_files(assets)) fs::copy_file(file, tmp / file.filename());
  if (fs::exists(to)) fs::remove(to);  // an empty directory (checked by the caller)
  fs::rename(tmp, to);
}

}  // namespace

fs::path convert_checkpoint(const ConvertOptions& options) {
  MM_CHECK(options.slices >= 0, "--slices must not be negative");
  check_new_output_dir(options.to, "--to");
  if (is_hf_model_dir(options.from) && !fs::is_regular_file(options.from / "trainer_state.json")) {
    MM_CHECK(options.slices >= 1, options.from.string(), " is already a Hugging Face model; give --slices N to "
             "make a sharded training checkpoint of it");
    // Through the model, so the checkpoint uses the trainer's tensor names.
    auto model = Qwen2_5_VLForConditionalGenerationImpl::from_pretrained(options.from, torch::kFloat32);
    WholeTrainingCheckpoint whole;
    whole.dir = options.from;
    whole.model = named_weights(*model);
    whole.rng = capture_rng_state().to_tensors();
    whole.state = {{"step", 0}, {"data", SamplerState{}.to_json()}, {"skipped", nlohmann::json::object()},
                   {"lora", nullptr}};
    write_sharded(whole, options.from, options.slices, options.to);
    return options.from;
  }
  const auto dir = resolve_training_checkpoint(options.from);
  if (options.slices == 0) return export_training_checkpoint(dir, options.to);
  write_sharded(load_whole_training_checkpoint(dir), dir, options.slices, options.to);
  return dir;
}

}  // namespace mm
