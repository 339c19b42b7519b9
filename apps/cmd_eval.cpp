// `mmtrain eval`: exact-match accuracy of a vision-language model on conversations with
// reference answers, overall and per record "type".
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/core/progress.h"
#include "mm/tasks/evaluation.h"
#include "mm/tasks/model_registry.h"

namespace mm::cli {
namespace {

struct EvalCliOptions {
  std::string model;
  std::string data;
  std::string data_root;
  std::string output;
  std::string dtype = "fp32";
  std::string device = "auto";
  int threads = 0;
  std::vector<std::string> chat_kwargs;
  EvalOptions eval;
};

void print_table(const EvalResult& result) {
  auto row = [](const std::string& name, const EvalScore& s) {
    char line[160];
    std::snprintf(line, sizeof line, "%-16s %8lld %8lld %9.2f%%\n", name.c_str(),
                  static_cast<long long>(s.correct), static_cast<long long>(s.total), 100.0 * s.accuracy());
    std::cout << line;
  };
  char header[160];
  std::snprintf(header, sizeof header, "%-16s %8s %8s %10s\n", "type", "correct", "total", "accuracy");
  std::cout << header;
  for (const auto& [type, score] : result.by_type) row(type.empty() ? "(none)" : type, score);
  row("all", result.overall);
}

void write_predictions(const std::filesystem::path& path, const EvalResult& result) {
  auto temp = path;
  temp += ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    MM_CHECK(out, "--output ", path.string(), ": cannot open for writing");
    for (const auto& p : result.predictions) {
      nlohmann::ordered_json line{{"index", p.index}, {"type", p.type}, {"reference", p.reference},
                                  {"prediction", p.prediction}, {"correct", p.correct}};
      out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    out.close();
    MM_CHECK(out, "--output ", path.string(), ": writing failed");
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  MM_CHECK(!ec, "--output ", path.string(), ": cannot rename ", temp.string(), " into place: ", ec.message());
}

void run_eval(EvalCliOptions& o) {
  if (o.threads > 0) torch::set_num_threads(o.threads);
  const at::ScalarType dtype = dtype_option(o.dtype);
  if (!o.output.empty()) {
    const auto parent = std::filesystem::absolute(o.output).parent_path();
    MM_CHECK(std::filesystem::is_directory(parent), "--output ", o.output, ": directory ", parent.string(),
             " does not exist");
  }
  const ModelSpec& spec = model_spec_of(o.model, {ModelKind::vision_language}, "mmtrain eval");
  const c10::Device device = resolve_device(o.device, "--device");
  const ConversationFile data = ConversationFile::open(o.data, o.data_root);
  const auto chat_kwargs = parse_chat_kwargs(o.chat_kwargs, "--chat-kwarg");
  const auto chat = spec.open_chat(o.model, dtype, device);
  chat->chat_template().set_kwargs(chat_kwargs);
  log::info("evaluating ", o.model, " on ", o.data, " (", data.size(), " records",
            o.eval.limit > 0 ? str_cat(", first ", o.eval.limit) : std::string(), ")");

  std::unique_ptr<ProgressBar> bar;
  o.eval.on_prediction = [&bar](const EvalPrediction&, int64_t done, int64_t total) {
    if (!bar) {
      bar = std::make_unique<ProgressBar>(total, "eval");
      bar->report_every(10);  // off a terminal too: eval logs nothing else while it runs
    }
    bar->update(done);
  };
  const EvalResult result = evaluate_exact_match(*chat, data, o.eval);
  if (bar) bar->finish();

  if (!o.output.empty()) write_predictions(o.output, result);
  print_table(result);
  std::cout << result.summary_json().dump() << std::endl;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto options = std::make_shared<EvalCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Score a vision-language model on conversations with reference answers: greedy answer to the "
      "conversation up to its last assistant message, exact match (trimmed, case-insensitive) "
      "against that message; accuracy overall and per record \"type\"");
  cmd->add_option("--model", options->model, "Hugging Face model directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--data", options->data,
                  "Conversations (.jsonl or .json): LLaVA, ShareGPT / LLaMA-Factory or OpenAI messages")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--data-root", options->data_root, "Directory media paths are relative to (default: the data file's)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--max-new-tokens", options->eval.max_new_tokens, "Most tokens per answer")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--limit", options->eval.limit, "Score only the first N records (0 = all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--output", options->output,
                  "Write per-record predictions as JSONL (index, type, reference, prediction, correct)");
  cmd->add_option("--dtype", options->dtype, "Weights and compute dtype: fp32 or bf16")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = libtorch's default)")->capture_default_str();
  cmd->add_option("--device", options->device, "auto (a GPU when there is one), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--chat-kwarg", options->chat_kwargs,
                  "NAME=VALUE passed to the model's chat template, as apply_chat_template's keyword arguments "
                  "(e.g. enable_thinking=false); VALUE is JSON when it parses as JSON, else a string; repeat for several");
  cmd->callback([options] { run_eval(*options); });
}

}  // namespace mm::cli
