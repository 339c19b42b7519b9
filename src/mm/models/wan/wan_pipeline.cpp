#include "mm/models/wan/wan_pipeline.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/core/json_config.h"
#include "mm/tokenizer/prompt_clean.h"

namespace fs = std::filesystem;

namespace mm {

WanPipelineConfig WanPipelineConfig::from_file(const fs::path& model_index_json) {
  const auto json = read_json_file(model_index_json);
  const JsonView root(json, model_index_json.string());
  WanPipelineConfig c;
  c.class_name = root.get_or<std::string>("_class_name", "");
  MM_CHECK(c.class_name == "WanPipeline" || c.class_name == "WanImageToVideoPipeline", root.where("_class_name"),
           ": '", c.class_name, "' is not a Wan pipeline (supported: WanPipeline, WanImageToVideoPipeline)");
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

// The transformer input an image-to-video pipeline builds: 2 z + 4 channels (noise, frame mask,
// image latents) or, with expand_timesteps, z (the image latent is written over frame 0). Checked
// from the config files, so that a text-to-video transformer is refused before sampling.
void check_i2v_channels(const fs::path& dir, const WanPipelineConfig& config, const fs::path& index_file) {
  const auto vae_file = component(dir, "vae") / "config.json";
  const auto vae_json = read_json_file(vae_file);
  const int64_t z = JsonView(vae_json, vae_file.string()).get<int64_t>("z_dim");
  const auto transformer_file = component(dir, "transformer") / "config.json";
  const auto transformer_json = read_json_file(transformer_file);
  const int64_t in = JsonView(transformer_json, transformer_file.string()).get<int64_t>("in_channels");
  const int64_t expected = config.expand_timesteps ? z : 2 * z + 4;
  MM_CHECK(in == expected, index_file.string(), ": _class_name: 'WanImageToVideoPipeline'",
           config.expand_timesteps ? " with expand_timesteps needs transformer in_channels = z_dim = "
                                   : " needs transformer in_channels = 2 * z_dim + 4 = ",
           expected, " (vae z_dim ", z, "), but ", transformer_file.string(), " has in_channels ", in);
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
  if (model->config.image_to_video()) check_i2v_channels(dir, model->config, index_file);
  if (options.text_encoder) {
    model->tokenizer = std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::from_dir(component(dir, "tokenizer")));
    model->text_encoder = UMT5EncoderModel(
        UMT5EncoderModelImpl::from_pretrained(component(dir, "text_encoder"), options.dtype, options.device));
    model->text_encoder->eval();
  }
  if (options.vae) {
    model->vae = WanVAE(WanVAEImpl::from_pretrained(component(dir, "vae"), options.dtype, options.device));
    model->vae->eval();
  }
  if (options.transformer) {
    model->transformer =
        WanTransformer3DModel(WanTransformer3DModelImpl::from_pretrained(component(dir, options.transformer_folder),
                                                                         options.dtype, options.device));
    model->transformer->eval();
    if (model->config.boundary_ratio) {
      MM_CHECK(lists_component(index, "transformer_2"), index_file.string(),
               ": boundary_ratio is set but there is no transformer_2");
      model->transformer_2 = WanTransformer3DModel(
          WanTransformer3DModelImpl::from_pretrained(component(dir, "transformer_2"), options.dtype, options.device));
      model->transformer_2->eval();
    }
  }
  if (model->config.image_to_video() && lists_component(index, "image_encoder") && options.image_encoder) {
    model->image_encoder =
        CLIPVisionModel(CLIPVisionModelImpl::from_pretrained(component(dir, "image_encoder"), options.dtype,
                                                             options.device));
    model->image_encoder->eval();
    MM_CHECK(lists_component(index, "image_processor"), index_file.string(),
             ": image_encoder is listed without image_processor");
    model->image_processor =
        std::make_unique<CLIPImageProcessor>(CLIPImageProcessor::from_pretrained(component(dir, "image_processor")));
  }
  if (model->config.image_to_video() && model->transformer && model->transformer->config().image_dim &&
      options.image_encoder) {
    // The transformer expects CLIP tokens that only the image encoder can make.
    MM_CHECK(model->image_encoder, index_file.string(), ": the transformer has image_dim ",
             *model->transformer->config().image_dim, " but the pipeline lists no image_encoder");
    const int64_t hidden = model->image_encoder->config().hidden_size;
    MM_CHECK(hidden == *model->transformer->config().image_dim, dir.string(),
             "/image_encoder/config.json: hidden_size ", hidden, " is not the transformer's image_dim ",
             *model->transformer->config().image_dim);
  }
  return model;
}

void WanModel::to(const c10::Device& target) {
  if (text_encoder) text_encoder->to(target);
  if (vae) vae->to(target);
  if (transformer) transformer->to(target);
  if (transformer_2) transformer_2->to(target);
  if (image_encoder) image_encoder->to(target);
}

c10::Device WanModel::device() const {
  std::vector<torch::Tensor> params;
  if (transformer) params = transformer->parameters();
  else if (vae) params = vae->parameters();
  else if (text_encoder) params = text_encoder->parameters();
  return params.empty() ? c10::Device(c10::kCPU) : params.front().device();
}

torch::Tensor WanModel::encode_prompts(const std::vector<std::string>& prompts, int64_t max_sequence_length,
                                       std::vector<int64_t>* lengths) {
  MM_CHECK(tokenizer && text_encoder, dir.string(), ": the text encoder was not loaded");
  std::vector<std::string> cleaned;
  for (const auto& p : prompts) cleaned.push_back(wan_prompt_clean(p));
  const auto batch = tokenizer->encode_batch(cleaned, max_sequence_length);
  const auto shape = std::vector<int64_t>{batch.batch, batch.length};
  const auto device = text_encoder->parameters().front().device();
  const auto ids = host_values_on(batch.input_ids, device).view(shape);
  const auto mask = torch::tensor(batch.attention_mask, torch::kLong).view(shape);
  const auto mask_on_device = to_device_async(mask, device);
  torch::NoGradGuard no_grad;
  auto hidden = text_encoder->forward(ids, mask_on_device);
  // The pipeline keeps each prompt's own rows and zeros the rest (padding rows carry values).
  const auto keep = mask_on_device.to(hidden.scalar_type()).unsqueeze(-1);
  if (lengths) {
    lengths->clear();
    const auto counts = mask.sum(1);
    for (int64_t i = 0; i < batch.batch; ++i) lengths->push_back(counts[i].item<int64_t>());
  }
  return hidden * keep;
}

torch::Tensor WanModel::encode_image(const std::vector<torch::Tensor>& images) {
  MM_CHECK(image_encoder && image_processor, dir.string(),
           ": the image encoder was not loaded (image_encoder/ of a Wan2.1 image-to-video pipeline)");
  const auto pixels = image_processor->preprocess(images);
  torch::NoGradGuard no_grad;
  return image_encoder->penultimate_hidden_state(pixels.to(image_encoder->parameters().front().device()));
}

WanTransformer3DModel& WanModel::transformer_for(double timestep) {
  if (transformer_2 && timestep < boundary_timestep()) return transformer_2;
  return transformer;
}

double WanModel::boundary_timestep() const {
  return config.boundary_ratio.value_or(0) * static_cast<double>(num_train_timesteps);
}

}  // namespace mm
