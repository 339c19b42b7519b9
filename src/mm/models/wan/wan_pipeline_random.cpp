#include "mm/models/wan/wan_pipeline_random.h"

#include <torch/torch.h>

#include "mm/core/log.h"
#include "mm/models/wan/wan_pipeline.h"

namespace mm {

void init_frozen_parts_randomly(WanModel& model, uint64_t seed) {
  torch::manual_seed(seed);
  model.tokenizer = std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::from_dir(model.dir / "tokenizer"));
  model.text_encoder = UMT5EncoderModel(UMT5Config::from_file(model.dir / "text_encoder" / "config.json"));
  model.vae = WanVAE(WanVAEConfig::from_file(model.dir / "vae" / "config.json"));
  model.text_encoder->eval();
  model.vae->eval();
  log::warn("model.random_frozen: the text encoder and the VAE of ", model.dir.string(),
            " are random (seed ", seed, "), not trained: for demos and tests only");
}

}  // namespace mm
