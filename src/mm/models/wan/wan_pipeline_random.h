// Randomly initialized frozen parts of a Wan pipeline, from their config.json alone: the umT5
// text encoder and the VAE (and an image-to-video pipeline's CLIP image encoder). For tiny demos and tests without downloaded weights (the template
// examples/wan/tiny-synth holds configs only); a real model loads its trained ones.
#pragma once
#include <cstdint>

namespace mm {

class WanModel;

// Loads the tokenizer and builds text_encoder and vae from model.dir's text_encoder/config.json and
// vae/config.json with libtorch's default initialization drawn after torch::manual_seed(seed), then,
// for a WanImageToVideoPipeline with image_encoder/config.json, image_encoder (and loads
// image_processor/).
void init_frozen_parts_randomly(WanModel& model, uint64_t seed);

}  // namespace mm
