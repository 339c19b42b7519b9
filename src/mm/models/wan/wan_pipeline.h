// Generation models: text encoder + VAE + predictor + scheduler, loaded from diffusers' pipeline
// layout. Wan2.1 / Wan2.2 (WanPipeline): model_index.json, tokenizer/ (umT5 SentencePiece),
// text_encoder/ (UMT5EncoderModel), vae/ (AutoencoderKLWan), transformer/ and, for Wan2.2 A14B,
// transformer_2/ (WanTransformer3DModel; the high-noise and low-noise experts switched at
// boundary_ratio * num_train_timesteps), scheduler/scheduler_config.json.
// Image to video (WanImageToVideoPipeline) uses the same parts; Wan2.1-I2V / FLF2V add
// image_encoder/ (CLIPVisionModel) and image_processor/ (CLIPImageProcessor) for the CLIP image
// tokens, and its transformer takes the noise, a 4-channel frame mask and the image latents
// (in_channels = 2 z_dim + 4). Wan2.2 A14B I2V has the same transformer input without CLIP;
// Wan2.2 TI2V (expand_timesteps) writes the image latent over the first latent frame instead
// (in_channels = z_dim).
#pragma once
#include <torch/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mm/models/clip/clip_image_processor.h"
#include "mm/models/wan/wan_vae.h"
#include "mm/models/wan/wan_transformer.h"
#include "mm/models/umt5/umt5.h"
#include "mm/models/clip/clip_vision.h"
#include "mm/tokenizer/sentencepiece_tokenizer.h"

namespace mm {

// model_index.json's pipeline settings.
struct WanPipelineConfig {
  std::string class_name = "WanPipeline";  // or "WanImageToVideoPipeline"
  std::optional<double> boundary_ratio;  // set: transformer_2 takes timesteps below the boundary
  bool expand_timesteps = false;         // Wan2.2 TI2V: per-token timesteps
  static WanPipelineConfig from_file(const std::filesystem::path& model_index_json);
  bool image_to_video() const { return class_name == "WanImageToVideoPipeline"; }
};

// Which parts to load: training from extracted features needs neither the text encoder nor the VAE.
struct WanLoadOptions {
  torch::ScalarType dtype = torch::kFloat32;  // of the transformer(s); VAE and text encoder too
  bool text_encoder = true;
  bool vae = true;
  bool transformer = true;
  // The folder the (first) transformer is read from: "transformer", or e.g. "transformer_ema" that
  // a training run writes beside it (model_index.json need not list it).
  std::string transformer_folder = "transformer";
  bool image_encoder = true;  // image_encoder/ + image_processor/, when the pipeline lists them
  // Where every loaded part computes (each tensor written once there, from the mapped file).
  c10::Device device = c10::kCPU;
};

class WanModel {
 public:
  // A diffusers Wan pipeline directory. Missing parts named by their folder.
  static std::unique_ptr<WanModel> from_pretrained(const std::filesystem::path& dir, const WanLoadOptions& options = {});

  // Moves every part present to `device` (a pipeline loaded on the CPU, or parts made randomly).
  void to(const c10::Device& device);
  // The device of the parts: the transformer's, else the VAE's, else the text encoder's (CPU
  // when none is loaded).
  c10::Device device() const;

  // The pipeline's prompt embedding: cleaned, tokenized to max_sequence_length (eos added,
  // truncated), encoded, and every position after a prompt's own tokens set to zero.
  // -> [prompts, max_sequence_length, d_model] in the text encoder's dtype, on its device.
  // lengths (when given) receives each prompt's token count (eos included).
  torch::Tensor encode_prompts(const std::vector<std::string>& prompts, int64_t max_sequence_length = 512,
                               std::vector<int64_t>* lengths = nullptr);

  // Wan2.1-I2V's image tokens (the pipeline's encode_image): each image uint8 [H, W, 3] RGB, as
  // given (the CLIP processor resizes and crops) -> CLIP hidden_states[-2]
  // [images, 1 + (image_size / patch)^2, hidden] in the image encoder's dtype, on its device.
  torch::Tensor encode_image(const std::vector<torch::Tensor>& images);
  bool has_image_encoder() const { return static_cast<bool>(image_encoder); }

  // The expert for timestep t (transformer_2 below the boundary, when there is one).
  WanTransformer3DModel& transformer_for(double timestep);
  bool guidance_switches() const { return config.boundary_ratio.has_value(); }
  double boundary_timestep() const;

  std::filesystem::path dir;
  WanPipelineConfig config;
  std::unique_ptr<SentencePieceTokenizer> tokenizer;
  UMT5EncoderModel text_encoder{nullptr};
  WanVAE vae{nullptr};
  WanTransformer3DModel transformer{nullptr};
  WanTransformer3DModel transformer_2{nullptr};  // null unless the pipeline has two experts
  CLIPVisionModel image_encoder{nullptr};        // Wan2.1-I2V / FLF2V only
  std::unique_ptr<CLIPImageProcessor> image_processor;  // with image_encoder
  int64_t num_train_timesteps = 1000;            // the scheduler's
};

}  // namespace mm
