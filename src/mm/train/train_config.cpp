#include "mm/train/train_config.h"

#include <set>

#include "mm/core/config_section.h"
#include "mm/core/device.h"
#include "mm/core/error.h"

namespace mm {

void read_train_section(const YAML::Node& root, const std::string& file, TrainConfig::Train& out) {
  ConfigSection train(root, file, "train");
  train.read("seed", out.seed);
  train.read("micro_batch_size", out.micro_batch_size);
  train.read("grad_accum", out.grad_accum);
  train.read("max_steps", out.max_steps);
  train.read("epochs", out.epochs);
  train.read_enum("precision", out.precision, {{"fp32", Precision::fp32}, {"bf16", Precision::bf16}});
  train.read("recompute", out.recompute);
  train.read("max_grad_norm", out.max_grad_norm);
  train.read("threads", out.threads);
  train.read("device", out.device);
  train.check(is_device_name(out.device), "device", "'" + out.device + "' is not a device (auto, cpu, cuda, cuda:N)");
  train.check(out.micro_batch_size >= 1, "micro_batch_size", "must be at least 1");
  train.check(out.grad_accum >= 1, "grad_accum", "must be at least 1");
  train.check(out.max_steps >= 0, "max_steps", "must not be negative");
  train.check(out.max_steps > 0 || out.epochs >= 1, "epochs", "must be at least 1 when max_steps is 0");
  train.check(out.threads >= 0, "threads", "must not be negative");
  train.finish();
}

void read_optim_section(const YAML::Node& root, const std::string& file, TrainConfig::Optim& out) {
  ConfigSection optim(root, file, "optim");
  optim.read("lr", out.lr);
  optim.read("weight_decay", out.weight_decay);
  std::vector<double> betas{out.beta1, out.beta2};
  optim.read("betas", betas);
  optim.check(betas.size() == 2, "betas", "must be a list of two numbers");
  out.beta1 = betas[0];
  out.beta2 = betas[1];
  optim.read("eps", out.eps);
  optim.read("fused", out.fused);
  optim.check(out.lr > 0, "lr", "must be positive");
  optim.check(out.weight_decay >= 0, "weight_decay", "must not be negative");
  optim.check(out.beta1 >= 0 && out.beta1 < 1 && out.beta2 >= 0 && out.beta2 < 1, "betas",
              "must be in [0, 1)");
  optim.finish();
}

void read_schedule_section(const YAML::Node& root, const std::string& file, TrainConfig::Schedule& out) {
  ConfigSection schedule(root, file, "schedule");
  schedule.read_enum("kind", out.kind,
                     {{"cosine", ScheduleKind::cosine}, {"linear", ScheduleKind::linear}, {"constant", ScheduleKind::constant}});
  schedule.read("warmup_steps", out.warmup_steps);
  schedule.read("warmup_ratio", out.warmup_ratio);
  schedule.read("min_lr_ratio", out.min_lr_ratio);
  schedule.check(out.warmup_steps >= 0, "warmup_steps", "must not be negative");
  schedule.check(out.warmup_ratio >= 0 && out.warmup_ratio < 1, "warmup_ratio", "must be in [0, 1)");
  schedule.check(out.min_lr_ratio >= 0 && out.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]");
  schedule.finish();
}

void read_output_section(const YAML::Node& root, const std::string& file, TrainConfig::Output& out) {
  ConfigSection output(root, file, "output");
  output.read("dir", out.dir);
  output.read("save_every", out.save_every);
  output.read("keep_last", out.keep_last);
  output.read("tensorboard", out.tensorboard);
  output.read("resume", out.resume);
  output.read("log_every", out.log_every);
  output.read("sample_log", out.sample_log);
  output.check(out.log_every >= 1, "log_every", "must be at least 1");
  output.check(out.save_every >= 0, "save_every", "must not be negative");
  output.check(out.keep_last >= 1, "keep_last", "must be at least 1");
  output.finish();
}

void read_parallel_section(const YAML::Node& root, const std::string& file, TrainConfig::Parallel& out, bool towers) {
  ConfigSection parallel(root, file, "parallel");
  parallel.read("dp_shard", out.dp_shard);
  parallel.read("ep", out.ep);
  parallel.read("cp", out.cp);
  parallel.read("cp_ulysses", out.cp_ulysses);
  parallel.read("reshard_after_forward", out.reshard_after_forward);
  parallel.read("prefetch", out.prefetch);
  parallel.read_enum("param_dtype", out.param_dtype, {{"fp32", at::kFloat}, {"bf16", at::kBFloat16}});
  parallel.read_enum("reduce_dtype", out.reduce_dtype, {{"fp32", at::kFloat}, {"bf16", at::kBFloat16}});
  parallel.read("cpu_offload", out.cpu_offload);
  if (towers) {
    const auto placements = {std::pair{"shard", ShardPlacement::shard}, std::pair{"replicate", ShardPlacement::replicate}};
    parallel.read_enum("vision", out.vision, placements);
    parallel.read_enum("language", out.language, placements);
  }
  parallel.read("timeout_s", out.timeout_s);
  parallel.check(out.dp_shard >= 0, "dp_shard", "must not be negative (0: all ranks)");
  parallel.check(out.ep >= 1, "ep", "must be at least 1 (1: no expert parallelism)");
  parallel.check(out.cp >= 1, "cp", "must be at least 1 (1: no context parallelism)");
  parallel.check(out.cp_ulysses >= 0 && (out.cp_ulysses == 0 || out.cp % out.cp_ulysses == 0), "cp_ulysses",
                 "must divide cp (0: cp, Ulysses alone; 1: ring alone)");
  parallel.check(out.timeout_s > 0, "timeout_s", "must be positive");
  parallel.finish();
}

std::string train_task_of(const YAML::Node& root, const std::string& file) {
  MM_CHECK(root.IsMap(), file, ": the run config must be a mapping");
  const YAML::Node task = root["task"];
  if (!task.IsDefined() || task.IsNull()) return "vlm";
  MM_CHECK(task.IsScalar(), file, ": task: must be a name (the model registry lists the tasks it trains)");
  return task.as<std::string>();
}

TrainConfig parse_train_config(const YAML::Node& root, const std::string& file) {
  MM_CHECK(root.IsMap(), file, ": the run config must be a mapping");
  const std::set<std::string> sections = {"task",  "model",    "data",   "train", "freeze", "lora",
                                          "optim", "schedule", "output", "eval",  "parallel"};
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    MM_CHECK(sections.count(key), file, ": ", key, ": unknown section (known: task, model, data, train, freeze, lora, "
             "optim, schedule, output, eval, parallel)");
  }
  MM_CHECK(train_task_of(root, file) == "vlm", file, ": task: this is the vision-language trainer's parser");
  TrainConfig c;
  c.source = YAML::Clone(root);

  ConfigSection model(root, file, "model");
  model.read("path", c.model.path);
  model.read("from_scratch", c.model.from_scratch);
  model.read("init_seed", c.model.init_seed);
  model.read("router_aux_loss_coef", c.model.router_aux_loss_coef);
  model.check(c.model.router_aux_loss_coef.value_or(0) >= 0, "router_aux_loss_coef", "must not be negative");
  model.read("mtp_loss_weight", c.model.mtp_loss_weight);
  model.check(c.model.mtp_loss_weight.value_or(0) >= 0, "mtp_loss_weight", "must not be negative");
  model.check(!c.model.path.empty(), "path", "required (a Hugging Face Qwen2.5-VL directory)");
  model.finish();

  ConfigSection data(root, file, "data");
  data.read("train", c.data.train);
  data.read("root", c.data.root);
  data.read("max_seq_len", c.data.max_seq_len);
  data.read_enum("truncation", c.data.truncation, {{"drop", Truncation::drop}, {"right", Truncation::right}});
  data.read_enum("loss_on", c.data.loss_on_assistant_only, {{"assistant", true}, {"all", false}});
  data.read("packing", c.data.packing);
  data.read("group_by_length", c.data.group_by_length);
  data.read("balance_compute", c.data.balance_compute);
  data.read("shuffle", c.data.shuffle);
  data.read("num_workers", c.data.num_workers);
  data.read("prefetch", c.data.prefetch);
  data.read_enum("on_error", c.data.on_error, {{"skip", OnError::skip}, {"fail", OnError::fail}});
  data.read("max_pixels", c.data.max_pixels);
  data.read("min_pixels", c.data.min_pixels);
  data.read("video_fps", c.data.video_fps);
  data.read("video_max_frames", c.data.video_max_frames);
  data.read("chat_template_kwargs", c.data.chat_template_kwargs);
  data.check(!c.data.train.empty(), "train", "required (a .json or .jsonl conversation file)");
  data.check(c.data.max_seq_len > 0, "max_seq_len", "must be positive");
  data.check(c.data.num_workers >= 1, "num_workers", "must be at least 1");
  data.check(c.data.prefetch >= 1, "prefetch", "must be at least 1");
  data.check(c.data.video_fps > 0, "video_fps", "must be positive");
  data.check(!(c.data.balance_compute && c.data.packing), "balance_compute",
             "needs micro-batches of micro_batch_size samples; with data.packing each row is filled to max_seq_len "
             "tokens already");
  if (c.data.root.empty()) c.data.root = c.data.train.parent_path();
  data.finish();

  read_train_section(root, file, c.train);

  ConfigSection freeze(root, file, "freeze");
  freeze.read("vision_tower", c.freeze.vision_tower);
  freeze.read("projector", c.freeze.projector);
  freeze.read("language_model", c.freeze.language_model);
  freeze.finish();

  ConfigSection lora(root, file, "lora");
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

  read_optim_section(root, file, c.optim);
  read_schedule_section(root, file, c.schedule);
  read_output_section(root, file, c.output);
  read_parallel_section(root, file, c.parallel, /*towers=*/true);

  ConfigSection eval(root, file, "eval");
  eval.read("data", c.eval.data);
  eval.read("root", c.eval.root);
  eval.read("max_new_tokens", c.eval.max_new_tokens);
  eval.read("limit", c.eval.limit);
  if (c.eval.root.empty() && !c.eval.data.empty()) c.eval.root = c.eval.data.parent_path();
  eval.finish();
  return c;
}

}  // namespace mm
