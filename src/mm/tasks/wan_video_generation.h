// `mmtrain infer t2v` for a Wan pipeline directory (WanPipeline, WanImageToVideoPipeline).
#pragma once
#include "mm/tasks/video_generation.h"

namespace mm {

// Loads the pipeline in request.dtype and samples one video. Refuses, before loading, a
// directory whose weight folders hold no .safetensors (a template); after loading and before
// sampling, a frame count the VAE cannot make (naming the nearest two), --guidance-2 on a
// one-expert pipeline, and an image given to a text-to-video pipeline or missing for an
// image-to-video one.
SampledVideo generate_wan_video(const VideoRequest& request);

}  // namespace mm
