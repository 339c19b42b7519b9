#include "mm/checkpoint/resharding.h"

#include "mm/core/error.h"
#include "mm/data/global_cursor.h"

namespace mm {

ShardedPieces sharded_checkpoint_pieces(const parallel::FullyShardedModel& parallel, const NamedTensors& buffers,
                                        const NamedTensors& optimizer_state) {
  auto json_of = [](const parallel::FullyShardedModel::Layout& l, const at::Tensor& t) {
    return slice_layout_json(l.shape, t.scalar_type(), l.sharded, l.rows_per_shard);
  };
  const bool first_slice = parallel.shard_index() == 0;  // writes the buffers
  ShardedPieces out;
  out.model_layout = nlohmann::json::object();
  out.optimizer_layout = nlohmann::json::object();
  for (const auto& [name, piece] : parallel.checkpoint_pieces()) {
    const auto& layout = parallel.layouts().at(name);
    out.model_layout[name] = json_of(layout, piece);
    if (layout.sharded || parallel.writes_whole(name)) out.model.emplace_back(name, piece);
  }
  for (const auto& [name, tensor] : buffers) {
    out.model_layout[name] = slice_layout_json(tensor.sizes().vec(), tensor.scalar_type(), false, 0);
    if (first_slice) out.model.emplace_back(name, tensor);
  }
  for (const auto& [key, tensor] : optimizer_state) {
    const std::string param = key.substr(key.find('.') + 1);
    const auto& layout = parallel.layouts().at(param);
    const bool whole = key.rfind("step.", 0) == 0 || !layout.sharded;
    out.optimizer_layout[key] =
        whole ? slice_layout_json(tensor.sizes().vec(), tensor.scalar_type(), false, 0) : json_of(layout, tensor);
    if (!whole)
      out.optimizer.emplace_back(key, parallel.checkpoint_piece(param, tensor));
    else if (parallel.writes_whole(param))
      out.optimizer.emplace_back(key, tensor);
  }
  // sharding.json is rank 0's: under expert parallelism it describes the other ranks' experts as
  // its own (every expert of a layer has the same shapes and optimizer state).
  for (const auto& [theirs, ours] : parallel.experts_held_elsewhere()) {
    out.model_layout[theirs] = out.model_layout.at(ours);
    for (const auto& [key, _] : optimizer_state) {
      const auto dot = key.find('.');
      if (key.substr(dot + 1) == ours) out.optimizer_layout[key.substr(0, dot + 1) + theirs] = out.optimizer_layout.at(key);
    }
  }
  return out;
}

NamedTensors local_optimizer_state(const parallel::FullyShardedModel& parallel, const NamedTensors& whole_state) {
  NamedTensors out;
  for (const auto& [key, tensor] : whole_state) {
    const std::string param = key.substr(key.find('.') + 1);
    if (parallel.held_elsewhere(param)) continue;  // another expert-parallel rank's expert
    out.emplace_back(key, key.rfind("step.", 0) == 0 ? tensor : parallel.local_slice(param, tensor));
  }
  return out;
}

SamplerState saved_data_position(const nlohmann::json& state, const std::string& where) {
  if (state.contains("data_ranks")) {
    MM_CHECK(state.at("data_ranks").is_array(), where, ": data_ranks: expected an array");
    std::vector<SamplerState> per_rank;
    for (const auto& d : state.at("data_ranks"))
      per_rank.push_back(SamplerState::from_json(d, where + ": data_ranks"));
    return global_from_interleaved(per_rank, where);
  }
  MM_CHECK(state.contains("data"), where, ": no data position (data)");
  return SamplerState::from_json(state.at("data"), where + ": data");
}

}  // namespace mm
