#include "mm/train/train_config.h"

#include <set>

#include "mm/core/error.h"

namespace mm {
namespace {

// One section of the YAML: typed reads that remember which keys were read, so that anything
// left over is reported as unknown.
class Section {
 public:
  // A missing or empty section reads as an empty mapping: every key keeps its default.
  Section(const YAML::Node& root, const std::string& file, const std::string& name)
      : node_(section_of(root, file, name)), file_(file), name_(name) {}

  template <typename T>
  void read(const std::string& key, T& out) {
    keys_.insert(key);
    const YAML::Node value = node_[key];  // const lookup: never adds the key
    if (!value.IsDefined() || value.IsNull()) return;
    try {
      out = value.template as<T>();
    } catch (const YAML::Exception&) {
      fail(file_, ": ", name_, ".", key, ": has the wrong type (", YAML::Dump(value), ")");
    }
  }
  void read(const std::string& key, std::filesystem::path& out) {
    std::string s;
    read(key, s);
    if (!s.empty()) out = s;
  }
  template <typename T>
  void read(const std::string& key, std::optional<T>& out) {
    T value{};
    keys_.insert(key);
    const YAML::Node given = node_[key];
    if (!given.IsDefined() || given.IsNull()) return;
    read(key, value);
    out = value;
  }
  void one_of(const std::string& key, const std::string& value, std::initializer_list<const char*> allowed) {
    std::string list;
    for (const char* a : allowed) {
      if (value == a) return;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    fail(file_, ": ", name_, ".", key, ": '", value, "' is not one of ", list);
  }
  void check(bool ok, const std::string& key, const std::string& what) {
    MM_CHECK(ok, file_, ": ", name_, ".", key, ": ", what);
  }
  // Every key present must have been read.
  void finish() {
    for (const auto& kv : node_) {
      const auto key = kv.first.as<std::string>();
      MM_CHECK(keys_.count(key), file_, ": ", name_, ".", key, ": unknown key (known: ", known(), ")");
    }
  }

 private:
  static YAML::Node section_of(const YAML::Node& root, const std::string& file, const std::string& name) {
    const YAML::Node section = root[name];  // const lookup: an absent key gives an invalid node
    if (!section.IsDefined() || section.IsNull()) return YAML::Node(YAML::NodeType::Map);
    MM_CHECK(section.IsMap(), file, ": ", name, ": must be a mapping");
    return section;
  }
  std::string known() const {
    std::string out;
    for (const auto& k : keys_) out += (out.empty() ? "" : ", ") + k;
    return out;
  }
  const YAML::Node node_;
  std::string file_, name_;
  std::set<std::string> keys_;
};

}  // namespace

TrainConfig parse_train_config(const YAML::Node& root, const std::string& file) {
  MM_CHECK(root.IsMap(), file, ": the run config must be a mapping");
  const std::set<std::string> sections = {"model", "data",     "train",  "freeze", "lora",
                                          "optim", "schedule", "output", "eval",   "parallel"};
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    MM_CHECK(sections.count(key), file, ": ", key, ": unknown section (known: model, data, train, freeze, lora, optim, "
             "schedule, output, eval, parallel)");
  }
  TrainConfig c;
  c.source = YAML::Clone(root);

  Section model(root, file, "model");
  model.read("path", c.model.path);
  model.read("from_scratch", c.model.from_scratch);
  model.read("init_seed", c.model.init_seed);
  model.check(!c.model.path.empty(), "path", "required (a Hugging Face Qwen2.5-VL directory)");
  model.finish();

  Section data(root, file, "data");
  data.read("train", c.data.train);
  data.read("root", c.data.root);
  data.read("max_seq_len", c.data.max_seq_len);
  data.read("truncation", c.data.truncation);
  data.read("loss_on", c.data.loss_on);
  data.read("packing", c.data.packing);
  data.read("group_by_length", c.data.group_by_length);
  data.read("shuffle", c.data.shuffle);
  data.read("num_workers", c.data.num_workers);
  data.read("prefetch", c.data.prefetch);
  data.read("on_error", c.data.on_error);
  data.read("max_pixels", c.data.max_pixels);
  data.read("min_pixels", c.data.min_pixels);
  data.read("video_fps", c.data.video_fps);
  data.read("video_max_frames", c.data.video_max_frames);
  data.check(!c.data.train.empty(), "train", "required (a .json or .jsonl conversation file)");
  data.check(c.data.max_seq_len > 0, "max_seq_len", "must be positive");
  data.one_of("truncation", c.data.truncation, {"drop", "right"});
  data.one_of("loss_on", c.data.loss_on, {"assistant", "all"});
  data.one_of("on_error", c.data.on_error, {"skip", "fail"});
  data.check(c.data.num_workers >= 1, "num_workers", "must be at least 1");
  data.check(c.data.prefetch >= 1, "prefetch", "must be at least 1");
  data.check(c.data.video_fps > 0, "video_fps", "must be positive");
  if (c.data.root.empty()) c.data.root = c.data.train.parent_path();
  data.finish();

  Section train(root, file, "train");
  train.read("seed", c.train.seed);
  train.read("micro_batch_size", c.train.micro_batch_size);
  train.read("grad_accum", c.train.grad_accum);
  train.read("max_steps", c.train.max_steps);
  train.read("epochs", c.train.epochs);
  train.read("precision", c.train.precision);
  train.read("recompute", c.train.recompute);
  train.read("max_grad_norm", c.train.max_grad_norm);
  train.read("threads", c.train.threads);
  train.check(c.train.micro_batch_size >= 1, "micro_batch_size", "must be at least 1");
  train.check(c.train.grad_accum >= 1, "grad_accum", "must be at least 1");
  train.check(c.train.max_steps >= 0, "max_steps", "must not be negative");
  train.check(c.train.max_steps > 0 || c.train.epochs >= 1, "epochs", "must be at least 1 when max_steps is 0");
  train.one_of("precision", c.train.precision, {"fp32", "bf16"});
  train.check(c.train.threads >= 0, "threads", "must not be negative");
  train.finish();

  Section freeze(root, file, "freeze");
  freeze.read("vision_tower", c.freeze.vision_tower);
  freeze.read("projector", c.freeze.projector);
  freeze.read("language_model", c.freeze.language_model);
  freeze.finish();

  Section lora(root, file, "lora");
  lora.read("enabled", c.lora_enabled);
  lora.read("rank", c.lora.rank);
  lora.read("alpha", c.lora.alpha);
  lora.read("dropout", c.lora.dropout);
  lora.read("target_modules", c.lora.target_modules);
  lora.read("exclude_prefixes", c.lora.exclude_prefixes);
  lora.check(c.lora.rank >= 1, "rank", "must be at least 1");
  lora.check(c.lora.dropout >= 0 && c.lora.dropout < 1, "dropout", "must be in [0, 1)");
  lora.check(!c.lora.target_modules.empty(), "target_modules", "must name at least one module");
  lora.finish();

  Section optim(root, file, "optim");
  optim.read("lr", c.optim.lr);
  optim.read("weight_decay", c.optim.weight_decay);
  std::vector<double> betas{c.optim.beta1, c.optim.beta2};
  optim.read("betas", betas);
  optim.check(betas.size() == 2, "betas", "must be a list of two numbers");
  c.optim.beta1 = betas[0];
  c.optim.beta2 = betas[1];
  optim.read("eps", c.optim.eps);
  optim.read("fused", c.optim.fused);
  optim.check(c.optim.lr > 0, "lr", "must be positive");
  optim.check(c.optim.weight_decay >= 0, "weight_decay", "must not be negative");
  optim.check(c.optim.beta1 >= 0 && c.optim.beta1 < 1 && c.optim.beta2 >= 0 && c.optim.beta2 < 1, "betas",
              "must be in [0, 1)");
  optim.finish();

  Section schedule(root, file, "schedule");
  schedule.read("kind", c.schedule.kind);
  schedule.read("warmup_steps", c.schedule.warmup_steps);
  schedule.read("warmup_ratio", c.schedule.warmup_ratio);
  schedule.read("min_lr_ratio", c.schedule.min_lr_ratio);
  schedule.one_of("kind", c.schedule.kind, {"cosine", "linear", "constant"});
  schedule.check(c.schedule.warmup_steps >= 0, "warmup_steps", "must not be negative");
  schedule.check(c.schedule.warmup_ratio >= 0 && c.schedule.warmup_ratio < 1, "warmup_ratio", "must be in [0, 1)");
  schedule.check(c.schedule.min_lr_ratio >= 0 && c.schedule.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]");
  schedule.finish();

  Section output(root, file, "output");
  output.read("dir", c.output.dir);
  output.read("save_every", c.output.save_every);
  output.read("keep_last", c.output.keep_last);
  output.read("tensorboard", c.output.tensorboard);
  output.read("resume", c.output.resume);
  output.check(c.output.save_every >= 0, "save_every", "must not be negative");
  output.check(c.output.keep_last >= 1, "keep_last", "must be at least 1");
  output.finish();

  Section parallel(root, file, "parallel");
  parallel.read("dp_shard", c.parallel.dp_shard);
  parallel.read("reshard_after_forward", c.parallel.reshard_after_forward);
  parallel.read("prefetch", c.parallel.prefetch);
  parallel.read("param_dtype", c.parallel.param_dtype);
  parallel.read("reduce_dtype", c.parallel.reduce_dtype);
  parallel.read("cpu_offload", c.parallel.cpu_offload);
  parallel.read("vision", c.parallel.vision);
  parallel.read("language", c.parallel.language);
  parallel.read("timeout_s", c.parallel.timeout_s);
  parallel.check(c.parallel.dp_shard >= 0, "dp_shard", "must not be negative (0: all ranks)");
  parallel.one_of("param_dtype", c.parallel.param_dtype, {"fp32", "bf16"});
  parallel.one_of("reduce_dtype", c.parallel.reduce_dtype, {"fp32", "bf16"});
  parallel.one_of("vision", c.parallel.vision, {"shard", "replicate"});
  parallel.one_of("language", c.parallel.language, {"shard", "replicate"});
  parallel.check(c.parallel.timeout_s > 0, "timeout_s", "must be positive");
  parallel.finish();

  Section eval(root, file, "eval");
  eval.read("data", c.eval.data);
  eval.read("root", c.eval.root);
  eval.read("max_new_tokens", c.eval.max_new_tokens);
  eval.read("limit", c.eval.limit);
  if (c.eval.root.empty() && !c.eval.data.empty()) c.eval.root = c.eval.data.parent_path();
  eval.finish();
  return c;
}

}  // namespace mm
