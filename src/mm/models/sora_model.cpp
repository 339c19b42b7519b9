#include "mm/models/sora_model.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/tokenizer/prompt_clean.h"

namespace fs = std::filesystem;

namespace mm {

WanPipelineConfig WanPipelineConfig::from_file(const fs::path& model_index_json) {
  const auto json = read_json_file(model_index_json);
  const JsonView root(json, model_index_json.string());
  WanPipelineConfig c;
  c.class_name = root.get_or<std::string>("_class_name", "");
  MM_CHECK(c.class_name == "WanPipeline", root.where("_class_name"), ": '", c.class_name,
           "' is not a text-to-video Wan pipeline (supported: WanPipeline)");
  if (root.has("boundary_ratio") && !json.at("boundary_ratio").is_null()) {
    c.boundary_ratio = root.get<double>("boundary_ratio");
    MM_CHECK(*c.boundary_ratio > 0 && *c.boundary_ratio < 1, root.where("boundary_ratio"), ": must be in (0, 1)");
  }
  c.expand_timesteps = root.get_or("expand_timesteps", false);
  return c;
}

namespace {

// A component folder the pipeline names, or nothing when model_index.json lists it as null.
bool lists_component(const nlohmann::json& index, const std::string& name) {
  return index.contains(name) && index.at(name).is_array() && !index.at(name).empty() && !index.at(name).at(0).is_null();
}

fs::path component(const fs::path& dir, const std::string& name) {
  const auto path = dir / name;
  MM_CHECK(fs::is_directory(path), dir.string(), ": missing the ", name, "/ folder of the pipeline");
  return path;
}

}  // namespace

std::unique_ptr<WanModel> WanModel::from_pretrained(const fs::path& dir, const WanLoadOptions& options) {
  const auto index_file = dir / "model_index.json";
  MM_CHECK(fs::is_regular_file(index_file), dir.string(), ": not a diffusers pipeline directory (no model_index.json)");
  auto model = std::make_unique<WanModel>();
  model->dir = dir;
  model->config = WanPipelineConfig::from_file(index_file);
  const auto index = read_json_file(index_file);
  const auto scheduler = component(dir, "scheduler") / "scheduler_config.json";
  const auto scheduler_json = read_json_file(scheduler);
  model->num_train_timesteps = JsonView(scheduler_json, scheduler.string()).get_or<int64_t>("num_train_timesteps", 1000);
  if (options.text_encoder) {
    model->tokenizer = std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::from_dir(component(dir, "tokenizer")));
    model->text_encoder = UMT5EncoderModel(UMT5EncoderModelImpl::from_pretrained(component(dir, "text_encoder"), options.dtype));
    model->text_encoder->eval();
  }
  if (options.vae) {
    model->vae = WanVAE(WanVAEImpl::from_pretrained(component(dir, "vae"), options.dtype));
    model->vae->eval();
  }
  if (options.transformer) {
    model->transformer =
        WanTransformer3DModel(WanTransformer3DModelImpl::from_pretrained(component(dir, "transformer"), options.dtype));
    model->transformer->eval();
    if (model->config.boundary_ratio) {
      MM_CHECK(lists_component(index, "transformer_2"), index_file.string(),
               ": boundary_ratio is set but there is no transformer_2");
      model->transformer_2 = WanTransformer3DModel(
          WanTransformer3DModelImpl::from_pretrained(component(dir, "transformer_2"), options.dtype));
      model->transformer_2->eval();
    }
  }
  return model;
}

torch::Tensor WanModel::encode_prompts(const std::vector<std::string>& prompts, int64_t max_sequence_length,
                                       std::vector<int64_t>* lengths) {
  MM_CHECK(tokenizer && text_encoder, dir.string(), ": the text encoder was not loaded");
  std::vector<std::string> cleaned;
  for (const auto& p : prompts) cleaned.push_back(wan_prompt_clean(p));
  const auto batch = tokenizer->encode_batch(cleaned, max_sequence_length);
  const auto shape = std::vector<int64_t>{batch.batch, batch.length};
  const auto ids = torch::tensor(batch.input_ids, torch::kLong).view(shape);
  const auto mask = torch::tensor(batch.attention_mask, torch::kLong).view(shape);
  torch::NoGradGuard no_grad;
  auto hidden = text_encoder->forward(ids, mask);
  // The pipeline keeps each prompt's own rows and zeros the rest (padding rows carry values).
  const auto keep = mask.to(hidden.scalar_type()).unsqueeze(-1);
  if (lengths) {
    lengths->clear();
    const auto counts = mask.sum(1);
    for (int64_t i = 0; i < batch.batch; ++i) lengths->push_back(counts[i].item<int64_t>());
  }
  return hidden * keep;
}

WanTransformer3DModel& WanModel::transformer_for(double timestep) {
  if (transformer_2 && timestep < boundary_timestep()) return transformer_2;
  return transformer;
}

double WanModel::boundary_timestep() const {
  return config.boundary_ratio.value_or(0) * static_cast<double>(num_train_timesteps);
}

}  // namespace mm
