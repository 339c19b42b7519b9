#include "mm/checkpoint/checkpoint_io.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "mm/core/error.h"
#include "mm/core/log.h"

namespace mm {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kState = "trainer_state.json";
constexpr const char* kOptimizer = "optimizer.safetensors";
constexpr const char* kRng = "rng.safetensors";
constexpr const char* kSharding = "sharding.json";

std::string numbered(const std::string& stem, int64_t index, int64_t count) {
  char buf[96];
  if (count > 0)
    std::snprintf(buf, sizeof buf, "%s-%05lld-of-%05lld.safetensors", stem.c_str(), static_cast<long long>(index),
                  static_cast<long long>(count));
  else
    std::snprintf(buf, sizeof buf, "%s-%05lld.safetensors", stem.c_str(), static_cast<long long>(index));
  return buf;
}

void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY);
  MM_CHECK(fd >= 0, "cannot open ", path.string(), " to fsync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  MM_CHECK(rc == 0, "fsync of ", path.string(), " failed");
}

// Parses "step-%08d" exactly; -1 for anything else (tmp dirs, other files).
int64_t step_of(const std::string& name) {
  if (name.size() < 6 || name.rfind("step-", 0) != 0) return -1;
  const std::string digits = name.substr(5);
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MM_CHECK(in.good(), "cannot read ", path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::optional<std::string> latest_name(const fs::path& checkpoints_dir) {
  const fs::path latest = checkpoints_dir / kLatest;
  if (!fs::exists(latest)) return std::nullopt;
  std::string name = read_text(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  MM_CHECK(step_of(name) >= 0, latest.string(), ": '", name,
           "' is not a checkpoint directory name (step-NNNNNNNN)");
  return name;
}

nlohmann::json read_json(const fs::path& path) {
  try {
    return nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": malformed JSON: ", e.what());
  }
}

// (slices, ranks) of a sharded checkpoint's sharding.json; errors name the file.
std::pair<int64_t, int64_t> sharding_counts(const nlohmann::json& sharding, const fs::path& file) {
  MM_CHECK(sharding.is_object() && sharding.contains("shards") && sharding["shards"].is_number_integer() &&
               sharding.contains("world_size") && sharding["world_size"].is_number_integer(),
           file.string(), ": needs integer fields shards and world_size");
  const auto shards = sharding["shards"].get<int64_t>(), world = sharding["world_size"].get<int64_t>();
  MM_CHECK(shards >= 1 && world >= shards, file.string(), ": shards=", shards, ", world_size=", world, " are invalid");
  return {shards, world};
}

// Empty when complete, else what is missing.
std::string missing_part(const fs::path& dir) {
  if (!fs::is_directory(dir)) return "the directory";
  if (fs::is_regular_file(dir / kSharding)) {
    if (!fs::is_regular_file(dir / kState)) return kState;
    const auto [shards, world] = sharding_counts(read_json(dir / kSharding), dir / kSharding);
    for (int64_t k = 0; k < shards; ++k)
      for (const auto& f : {model_slice_file(k, shards), optimizer_slice_file(k, shards)})
        if (!fs::is_regular_file(dir / f)) return f;
    for (int64_t r = 0; r < world; ++r)
      if (!fs::is_regular_file(dir / rng_rank_file(r))) return rng_rank_file(r);
    return "";
  }
  for (const char* f : {kState, kOptimizer, kRng})
    if (!fs::is_regular_file(dir / f)) return f;
  if (!fs::is_regular_file(dir / "model.safetensors") &&
      !fs::is_regular_file(dir / "model.safetensors.index.json"))
    return "model.safetensors";
  return "";
}

void remove_stale_tmp_dirs(const fs::path& checkpoints_dir) {
  for (const auto& entry : fs::directory_iterator(checkpoints_dir)) {
    const std::string name = entry.path().filename().string();
    // Our step-*.tmp-<pid> directories, and write_file_atomic's latest.tmp.<pid>.
    if (name.find(".tmp-") == std::string::npos && name.rfind("latest.tmp.", 0) != 0) continue;
    log::warn("removing ", entry.path().string(), " left by an interrupted checkpoint write");
    fs::remove_all(entry.path());
  }
}

void copy_file_synced(const fs::path& from, const fs::path& to) {
  MM_CHECK(fs::is_regular_file(from), "checkpoint extra file ", from.string(), " does not exist");
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fsync_path(to, false);
}

void write_text_synced(const fs::path& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  MM_CHECK(f, "cannot create ", path.string());
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                  ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  MM_CHECK(ok, "cannot write ", path.string());
}

void keep_newest(const fs::path& checkpoints_dir, int keep_last, const std::string& latest) {
  if (keep_last <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> complete;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = step_of(name);
    if (step >= 0 && entry.is_directory()) complete.emplace_back(step, entry.path());
  }
  std::sort(complete.begin(), complete.end());
  const size_t excess = complete.size() > static_cast<size_t>(keep_last)
                            ? complete.size() - static_cast<size_t>(keep_last) : 0;
  for (size_t i = 0; i < excess; ++i) {
    if (complete[i].second.filename() == latest) continue;
    fs::remove_all(complete[i].second);
  }
}

}  // namespace

std::string model_slice_file(int64_t slice, int64_t slices) { return numbered("model-shard", slice, slices); }
std::string optimizer_slice_file(int64_t slice, int64_t slices) { return numbered("optimizer-shard", slice, slices); }
std::string rng_rank_file(int64_t rank) { return numbered("rng-rank", rank, 0); }

nlohmann::json slice_layout_json(const std::vector<int64_t>& shape, c10::ScalarType dtype, bool sharded,
                                 int64_t rows_per_shard) {
  return {{"shape", shape}, {"dtype", dtype_name(dtype)}, {"sharded", sharded}, {"rows_per_shard", rows_per_shard}};
}

std::string checkpoint_dir_name(int64_t step) {
  MM_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

namespace {

void check_extra_file_names(const TrainingCheckpoint& checkpoint) {
  std::map<std::string, int> names{{kState, 1}, {kOptimizer, 1}, {kRng, 1}, {kLatest, 1}, {kSharding, 1}};
  for (const auto& [file, source] : checkpoint.extra_files) {
    MM_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
             "checkpoint extra file name '", file, "' must be a plain file name");
    const bool weights = file == "model.safetensors.index.json" ||
                         (file.size() > 12 && file.substr(file.size() - 12) == ".safetensors");
    MM_CHECK(!weights, "checkpoint extra file name '", file, "' clashes with the weight files");
    MM_CHECK(names[file]++ == 0, "checkpoint extra file name '", file,
             "' clashes with another checkpoint file");
  }
}

void write_state_and_extras(const fs::path& tmp, const TrainingCheckpoint& checkpoint) {
  for (const auto& [file, source] : checkpoint.extra_files) copy_file_synced(source, tmp / file);
  write_text_synced(tmp / kState, checkpoint.state.dump(2) + "\n");
}

// Moves a complete `tmp` into place as `name`, then `latest`, then prunes.
fs::path commit_checkpoint(const fs::path& checkpoints_dir, const std::string& name, const fs::path& tmp,
                           int keep_last) {
  fsync_path(tmp, true);
  const fs::path final_dir = checkpoints_dir / name;
  if (fs::exists(final_dir)) {
    // Saving a step again (a rerun into the same output): the old copy steps aside under a
    // tmp name, so a crash here leaves it for the next save's cleanup, never half-replaced.
    const fs::path old = checkpoints_dir / (name + ".tmp-old-" + std::to_string(::getpid()));
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fsync_path(checkpoints_dir, true);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_dir);
    fsync_path(checkpoints_dir, true);
  }
  write_file_atomic(checkpoints_dir / kLatest, name + "\n");
  keep_newest(checkpoints_dir, keep_last, name);
  return final_dir;
}

}  // namespace

fs::path save_training_checkpoint(const fs::path& checkpoints_dir, int64_t step,
                                  const TrainingCheckpoint& checkpoint, int keep_last) {
  const std::string name = checkpoint_dir_name(step);
  fs::create_directories(checkpoints_dir);
  remove_stale_tmp_dirs(checkpoints_dir);
  check_extra_file_names(checkpoint);

  const fs::path tmp = checkpoints_dir / (name + ".tmp-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  save_checkpoint(tmp, checkpoint.model);
  save_safetensors(tmp / kOptimizer, checkpoint.optimizer);
  save_safetensors(tmp / kRng, checkpoint.rng);
  write_state_and_extras(tmp, checkpoint);
  return commit_checkpoint(checkpoints_dir, name, tmp, keep_last);
}

fs::path save_sharded_training_checkpoint(const fs::path& checkpoints_dir, int64_t step,
                                          const TrainingCheckpoint& piece, int keep_last, const ShardedWrite& ranks) {
  const std::string name = checkpoint_dir_name(step);
  // One name all ranks know without talking; a crashed run's leftover is removed by rank 0 first.
  const fs::path tmp = checkpoints_dir / (name + ".tmp-ranks");
  if (ranks.rank == 0) {
    fs::create_directories(checkpoints_dir);
    remove_stale_tmp_dirs(checkpoints_dir);
    check_extra_file_names(piece);
    fs::create_directories(tmp);
  }
  ranks.barrier();
  if (ranks.writes_pieces) {
    save_safetensors(tmp / model_slice_file(ranks.shard, ranks.shards), piece.model);
    save_safetensors(tmp / optimizer_slice_file(ranks.shard, ranks.shards), piece.optimizer);
  }
  save_safetensors(tmp / rng_rank_file(ranks.rank), piece.rng);
  if (ranks.rank == 0) {
    write_text_synced(tmp / kSharding, ranks.layout.dump(1) + "\n");
    write_state_and_extras(tmp, piece);
  }
  ranks.barrier();  // every piece is on disk
  fs::path final_dir = checkpoints_dir / name;
  if (ranks.rank == 0) final_dir = commit_checkpoint(checkpoints_dir, name, tmp, keep_last);
  ranks.barrier();  // nobody reads or writes the next checkpoint before this one is committed
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& checkpoints_dir) {
  const auto name = latest_name(checkpoints_dir);
  if (!name) return std::nullopt;
  const fs::path dir = checkpoints_dir / *name;
  const std::string missing = missing_part(dir);
  MM_CHECK(missing.empty(), (checkpoints_dir / kLatest).string(), " names ", *name, " but ",
           (dir / missing).string(), " does not exist");
  return dir;
}

LoadedTrainingCheckpoint load_training_checkpoint(const fs::path& dir) {
  const std::string missing = missing_part(dir);
  MM_CHECK(missing.empty(), "checkpoint ", dir.string(), " is incomplete: ",
           (dir / missing).string(), " does not exist");
  const fs::path model_path = fs::exists(dir / "model.safetensors.index.json")
                                  ? dir : dir / "model.safetensors";
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_text(dir / kState));
  } catch (const nlohmann::json::exception& e) {
    fail((dir / kState).string(), ": malformed JSON: ", e.what());
  }
  return LoadedTrainingCheckpoint{Checkpoint::open(model_path), Checkpoint::open(dir / kOptimizer),
                                  Checkpoint::open(dir / kRng), std::move(state), dir};
}

namespace {

// Whole tensors of one kind ("model" / "optimizer") from a sharded checkpoint's slice files.
NamedTensors whole_tensors(const nlohmann::json& layouts, const std::vector<Checkpoint>& slices,
                           const fs::path& sharding_file, const std::string& kind) {
  MM_CHECK(layouts.is_object(), sharding_file.string(), ": ", kind, " must map tensor names to layouts");
  NamedTensors out;
  for (const auto& [name, layout] : layouts.items()) {
    const std::string where = sharding_file.string() + ": " + kind + "." + name;
    MM_CHECK(layout.contains("shape") && layout.contains("sharded"), where, ": needs shape and sharded");
    const auto shape = layout["shape"].get<std::vector<int64_t>>();
    at::Tensor whole;
    if (!layout["sharded"].get<bool>()) {
      // In slice 0's file, or (the optimizer's step count of an expert under expert parallelism)
      // in the file of the rank that held it.
      for (const auto& slice : slices)
        if (!whole.defined() && slice.contains(name)) whole = slice.tensor(name);
      MM_CHECK(whole.defined(), "no slice file holds ", name, " (", where, ")");
    } else {
      std::vector<at::Tensor> rows;
      for (const auto& slice : slices)
        if (slice.contains(name)) rows.push_back(slice.tensor(name));
      MM_CHECK(!rows.empty(), "no slice file holds ", name, " (", where, ")");
      whole = at::cat(rows, 0);
    }
    MM_CHECK(whole.sizes() == at::IntArrayRef(shape), where, ": the slices make shape ", whole.sizes(),
             ", the layout says ", at::IntArrayRef(shape));
    if (layout.contains("dtype"))
      MM_CHECK(dtype_name(whole.scalar_type()) == layout["dtype"].get<std::string>(), where, ": the slices hold ",
               dtype_name(whole.scalar_type()), ", the layout says ", layout["dtype"].get<std::string>());
    out.emplace_back(name, whole);
  }
  return out;
}

}  // namespace

WholeTrainingCheckpoint load_whole_training_checkpoint(const fs::path& dir, int64_t rank) {
  WholeTrainingCheckpoint out;
  out.dir = dir;
  if (!fs::is_regular_file(dir / kSharding)) {
    auto loaded = load_training_checkpoint(dir);
    out.model = checkpoint_tensors(loaded.model);
    out.optimizer = checkpoint_tensors(loaded.optimizer);
    out.rng = checkpoint_tensors(loaded.rng);
    out.state = std::move(loaded.state);
    out.files = {std::move(loaded.model), std::move(loaded.optimizer), std::move(loaded.rng)};
    out.extra_files = checkpoint_extra_files(dir);
    return out;
  }
  const std::string missing = missing_part(dir);
  MM_CHECK(missing.empty(), "checkpoint ", dir.string(), " is incomplete: ", (dir / missing).string(),
           " does not exist");
  const auto sharding = read_json(dir / kSharding);
  const auto [shards, world] = sharding_counts(sharding, dir / kSharding);
  out.saved_world_size = world;
  std::vector<Checkpoint> model_slices, optimizer_slices;
  for (int64_t k = 0; k < shards; ++k) {
    model_slices.push_back(Checkpoint::open(dir / model_slice_file(k, shards)));
    optimizer_slices.push_back(Checkpoint::open(dir / optimizer_slice_file(k, shards)));
  }
  out.model = whole_tensors(sharding.value("model", nlohmann::json()), model_slices, dir / kSharding, "model");
  out.optimizer =
      whole_tensors(sharding.value("optimizer", nlohmann::json()), optimizer_slices, dir / kSharding, "optimizer");
  auto rng = Checkpoint::open(dir / rng_rank_file(rank < world ? rank : 0));
  out.rng = checkpoint_tensors(rng);
  out.state = read_json(dir / kState);
  out.files = std::move(model_slices);
  for (auto& f : optimizer_slices) out.files.push_back(std::move(f));
  out.files.push_back(std::move(rng));
  out.extra_files = checkpoint_extra_files(dir);
  return out;
}

NamedTensors load_whole_optimizer_tensors(const fs::path& dir, const std::string& prefix) {
  const auto starts = [&](const std::string& name) { return name.rfind(prefix, 0) == 0; };
  NamedTensors out;
  if (!fs::is_regular_file(dir / kSharding)) {
    for (auto& [name, t] : checkpoint_tensors(load_training_checkpoint(dir).optimizer))
      if (starts(name)) out.emplace_back(name, t.clone());  // the mapping ends with this function
    return out;
  }
  const auto sharding = read_json(dir / kSharding);
  const auto [shards, world] = sharding_counts(sharding, dir / kSharding);
  nlohmann::json layouts = nlohmann::json::object();
  const auto all = sharding.value("optimizer", nlohmann::json::object());
  MM_CHECK(all.is_object(), (dir / kSharding).string(), ": optimizer must map tensor names to layouts");
  for (const auto& [name, layout] : all.items())
    if (starts(name)) layouts[name] = layout;
  std::vector<Checkpoint> slices;
  for (int64_t k = 0; k < shards; ++k) slices.push_back(Checkpoint::open(dir / optimizer_slice_file(k, shards)));
  for (auto& [name, t] : whole_tensors(layouts, slices, dir / kSharding, "optimizer")) out.emplace_back(name, t.clone());
  return out;
}

std::vector<fs::path> checkpoint_extra_files(const fs::path& dir) {
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const auto name = entry.path().filename().string();
    if (name == kState || name == kSharding || ends_with(name, ".safetensors") ||
        ends_with(name, ".safetensors.index.json"))
      continue;
    out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path resolve_training_checkpoint(const fs::path& path) {
  MM_CHECK(fs::exists(path), "checkpoint ", path.string(), " does not exist");
  if (fs::is_regular_file(path / kState)) return path;
  for (const auto& dir : {path, path / "checkpoints"})
    if (auto latest = latest_checkpoint(dir)) return *latest;
  fail(path.string(), " is not a training checkpoint (no trainer_state.json) and holds no checkpoints/latest");
}

NamedTensors checkpoint_tensors(const Checkpoint& checkpoint) {
  NamedTensors out;
  for (const auto& name : checkpoint.names()) out.emplace_back(name, checkpoint.tensor(name));
  return out;
}

}  // namespace mm
