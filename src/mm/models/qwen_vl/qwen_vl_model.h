// A Qwen-VL model for conditional generation (HF: Qwen2VLForConditionalGeneration,
// Qwen2_5_VLForConditionalGeneration and Qwen3VLForConditionalGeneration, which differ in the
// vision tower, the decoder's options and the video positions): the vision tower of the config's
// family, whose merged patch features replace the image/video placeholder tokens (and, for
// Qwen3-VL, whose DeepStack features are added after the first decoder layers), the Qwen2 decoder
// with M-RoPE positions from get_rope_index, and the lm_head (tied to the token embedding when the
// config says so). The pieces are separate methods so training can use them directly.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <filesystem>
#include <vector>

#include "mm/nn/linear.h"
#include "mm/models/qwen_vl/qwen_vl_config.h"
#include "mm/models/qwen2/multi_token_prediction.h"
#include "mm/models/qwen2/qwen2_decoder.h"
#include "mm/nn/sequence_split.h"
#include "mm/nn/vision_tower.h"

namespace mm {

class KVCache;

// One batch of model inputs, as the Qwen2-VL / Qwen2.5-VL processors produce them.
struct QwenVLInputs {
  torch::Tensor input_ids;            // [batch, seq] int64, placeholders already expanded
  torch::Tensor attention_mask;       // [batch, seq] 1 = token, 0 = (left) padding; undefined = none
  torch::Tensor pixel_values;         // [image patches, C * T * P * P], all images in text order
  torch::Tensor image_grid_thw;       // [images, 3] int64 (t, h, w) in patches
  torch::Tensor pixel_values_videos;  // [video patches, C * T * P * P], all videos in text order
  torch::Tensor video_grid_thw;       // [videos, 3] int64
  std::vector<double> second_per_grid_ts;  // [videos] seconds per temporal grid step; empty = 1 each
};

// M-RoPE positions of a batch.
struct RopeIndex {
  torch::Tensor position_ids;  // [3, batch, seq] int64 (temporal, height, width); 0 at padding
  torch::Tensor deltas;        // [batch, 1] int64: max position + 1 - number of real tokens
};

// Positions as the reference's get_rope_index: text runs count up by one; a vision run of
// t x h x w merged tokens gets (start + t * interval, start + row, start + col), with interval =
// config.video_temporal_step(second_per_grid_ts) for videos and 1 for images, and the text after it
// resumes at start + max(h, w). With config.video_frames_apart() (Qwen3-VL) each frame of a video
// is its own run (t = 1) between timestamp text. Padding (attention_mask 0) is skipped and left at
// 0. Needs only the config, so data pipelines compute positions without a model.
RopeIndex qwen_vl_rope_index(const QwenVLConfig& config, const QwenVLInputs& inputs);

class QwenVLForConditionalGeneration;

class QwenVLForConditionalGenerationImpl : public torch::nn::Module {
 public:
  // with_mtp: also build the multi-token-prediction head (config.text.mtp_num_hidden_layers > 0).
  explicit QwenVLForConditionalGenerationImpl(const QwenVLConfig& config, bool with_mtp = false);

  // Reads dir/config.json (and eos ids from dir/generation_config.json) and the weights from
  // model.safetensors or a sharded index, by HF name, converted to `dtype`, each tensor written
  // once on `device` (parameter_init.h build_for_loading). Both checkpoint
  // layouts load: the published one (visual.*, model.layers.*, model.embed_tokens.*, model.norm.*,
  // lm_head.*; also what transformers 5 save_pretrained writes) and the module-tree one
  // (model.visual.*, model.language_model.*). With tied embeddings lm_head.weight may be absent.
  // A Qwen3.5 checkpoint's multi-token-prediction head (mtp.*) is skipped, as inference does not
  // use it, unless `with_mtp` (training) asks for it: then the model has the head when config.json
  // and the checkpoint both do.
  static QwenVLForConditionalGeneration from_pretrained(const std::filesystem::path& dir,
                                                        torch::Dtype dtype = torch::kFloat32,
                                                        const c10::Device& device = c10::kCPU, bool with_mtp = false);
  // The same model built on the CPU in `dtype` without its weights, and the checkpoint's tensors
  // by module parameter name, checked like from_pretrained's and still views of the mapped files:
  // for sharded training (parallel/fully_shard.h `weights`), where each rank copies only the
  // rows it keeps. The parameters' storage is allocated and never written, so until something
  // writes it, it costs address space, not memory.
  struct Unloaded;
  static Unloaded from_pretrained_unloaded(const std::filesystem::path& dir, torch::Dtype dtype = torch::kFloat32,
                                           bool with_mtp = false);

  // Full forward: logits [batch, seq, vocab].
  torch::Tensor forward(const QwenVLInputs& inputs);

  // Token embeddings with the vision features written over the placeholder tokens:
  // [batch, seq, hidden]. Throws if the placeholder count differs from the feature count. A model
  // whose tower has DeepStack features (Qwen3-VL) fills `deepstack` for decode, and refuses to
  // embed images or videos without it (dropping them would silently change the model).
  torch::Tensor embed_inputs(const QwenVLInputs& inputs, DeepstackInputs* deepstack = nullptr);

  // Vision features of all images (or videos): merged [sum(t * h * w) / merge^2, hidden], and the
  // DeepStack features of towers that have them. With vision_items set, this rank encodes its
  // share of the frames (a video's t temporal patches are t items of one frame: no tower attends
  // across them) and gathers everyone's.
  VisionFeatures image_features(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw);

  // qwen_vl_rope_index with this model's config.
  RopeIndex get_rope_index(const QwenVLInputs& inputs) const;

  // The decoder over prepared embeddings: inputs_embeds [batch, seq, hidden], position_ids
  // [3, batch, seq], padding_mask [batch, cached + seq] or undefined; returns hidden states
  // [batch, seq, hidden] after the final norm. With a cache, appends to it. cu_seqlens: packed
  // samples (batch 1, see Qwen2ModelImpl::forward); position_ids then hold each sample's own
  // positions side by side.
  // deepstack: what embed_inputs filled in, for the prefill or training forward.
  // split: context parallelism (Qwen2ModelImpl::forward): inputs_embeds and position_ids hold this
  // rank's tokens, the deepstack features the whole sequence's.
  torch::Tensor decode(const torch::Tensor& inputs_embeds, const torch::Tensor& position_ids,
                       const torch::Tensor& padding_mask = {}, KVCache* cache = nullptr,
                       const std::vector<int64_t>& cu_seqlens = {}, const DeepstackInputs* deepstack = nullptr,
                       std::shared_ptr<const SequenceSplit> split = nullptr);

  // hidden [..., hidden] -> logits [..., vocab] (lm_head, or the embedding matrix when tied).
  torch::Tensor lm_logits(const torch::Tensor& hidden);

  // config().eos_token_ids holds generation_config.json's eos_token_id when from_pretrained found
  // one (as the reference's generation_config does), else config.json's.
  const QwenVLConfig& config() const { return config_; }

  std::shared_ptr<VisionTowerImpl> visual;  // of the config's family
  Qwen2Model model{nullptr};           // HF "model." prefix (the language model)
  Linear lm_head{nullptr};              // null when tie_word_embeddings
  MultiTokenPrediction mtp{nullptr};   // Qwen3.5's mtp.* head, when built with it

  // Context parallelism (set by training; unset: off). The training loss splits the decoder's
  // sequence with `context_parallel` (each document causal; M-RoPE positions, embeddings and the
  // vision features spliced in computed for the whole sequence first) and image_features deals
  // the vision tower's frames with `vision_items`.
  SequenceSplitter context_parallel;
  ItemSplitter vision_items;

 private:
  // image_features under context parallelism: this rank's frames through the tower, all gathered.
  VisionFeatures dealt_features(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw);

  QwenVLConfig config_;
};
TORCH_MODULE(QwenVLForConditionalGeneration);

struct QwenVLForConditionalGenerationImpl::Unloaded {
  QwenVLForConditionalGeneration model;
  std::vector<std::pair<std::string, torch::Tensor>> weights;
};

}  // namespace mm
