#include "mm/models/wan/wan_pipeline_random.h"

#include <torch/torch.h>

#include "mm/core/log.h"
#include "mm/models/wan/wan_pipeline.h"

namespace fs = std::filesystem;

namespace mm {

void init_frozen_parts_randomly(WanModel& model, uint64_t seed) {
  torch::manual_seed(seed);
  model.tokenizer = std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::from_dir(model.dir / "tokenizer"));
  model.text_encoder = UMT5EncoderModel(UMT5Config::from_file(model.dir / "text_encoder" / "config.json"));
  model.vae = WanVAE(WanVAEConfig::from_file(model.dir / "vae" / "config.json"));
  model.text_encoder->eval();
  model.vae->eval();
  // After the VAE, so that a pipeline's VAE is the same with or without an image encoder.
  const bool clip = model.config.image_to_video() && fs::is_regular_file(model.dir / "image_encoder" / "config.json");
  if (clip) {
    model.image_encoder = CLIPVisionModel(CLIPVisionConfig::from_file(model.dir / "image_encoder" / "config.json"));
    model.image_encoder->eval();
    model.image_processor =
        std::make_unique<CLIPImageProcessor>(CLIPImageProcessor::from_pretrained(model.dir / "image_processor"));
  }
  log::warn("model.random_frozen: the text encoder", clip ? ", the VAE and the CLIP image encoder" : " and the VAE",
            " of ", model.dir.string(), " are random (seed ", seed, "), not trained: for demos and tests only");
}

}  // namespace mm
