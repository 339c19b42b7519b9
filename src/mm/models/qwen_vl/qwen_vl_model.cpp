#include "mm/models/qwen_vl/qwen_vl_model.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/core/json_config.h"
#include "mm/core/log.h"
#include "mm/core/safetensors.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision.h"
#include "mm/models/qwen2_vl/qwen2_vl_vision.h"
#include "mm/models/qwen3_vl/qwen3_vl_vision.h"
#include "mm/models/qwen_vl/qwen_vl_state_dict.h"
#include "mm/nn/parameter_init.h"
#include "mm/nn/weights.h"

namespace mm {
namespace {

// Tokens per vision item after the spatial merge: [items, 3] grid -> per-item counts.
std::vector<int64_t> merged_token_counts(const torch::Tensor& grid_thw, int64_t merge) {
  auto grid = grid_thw.to(torch::kCPU).to(torch::kInt64).contiguous();
  std::vector<int64_t> counts;
  for (int64_t i = 0; i < grid.size(0); ++i)
    counts.push_back(grid[i][0].item<int64_t>() * grid[i][1].item<int64_t>() * grid[i][2].item<int64_t>() /
                     (merge * merge));
  return counts;
}

void check_grid(const torch::Tensor& grid, const char* name) {
  MM_CHECK(grid.defined(), name, " is required with the matching pixel values");
  MM_CHECK(grid.dim() == 2 && grid.size(1) == 3, name, " must be [items, 3] (t, h, w), got ", grid.sizes());
}

// The config's decoder layer and ViT block counts against the checkpoint's, before the model is
// built: a count in config.json beyond what the checkpoint holds fails here naming its key, not
// after allocating the layers (fewer: load_weights names the unexpected tensors). with_mtp: the
// multi-token-prediction head's layers too, when the checkpoint has the head.
void check_block_counts(const QwenVLConfig& config, const Checkpoint& checkpoint, const std::filesystem::path& dir,
                        bool with_mtp) {
  int64_t layers = 0, blocks = 0, mtp_layers = 0;
  const auto index_after = [](const std::string& name, const std::string& prefix) -> int64_t {
    if (name.rfind(prefix, 0) != 0) return -1;
    try {
      return std::stoll(name.substr(prefix.size()));
    } catch (const std::exception&) {
      return -1;
    }
  };
  for (const auto& name : checkpoint.names()) {
    const auto module_name = qwen_vl_module_name(name, false);
    layers = std::max(layers, index_after(module_name, "model.layers.") + 1);
    blocks = std::max(blocks, index_after(module_name, "visual.blocks.") + 1);
    mtp_layers = std::max(mtp_layers, index_after(name, "mtp.layers.") + 1);
  }
  const auto file = (dir / "config.json").string();
  MM_CHECK(layers == 0 || config.text.num_hidden_layers <= layers, file, ": text_config.num_hidden_layers is ",
           config.text.num_hidden_layers, ", but the checkpoint in ", dir.string(), " holds ", layers, " decoder layers");
  MM_CHECK(blocks == 0 || config.vision_depth() <= blocks, file, ": vision_config.depth is ", config.vision_depth(),
           ", but the checkpoint in ", dir.string(), " holds ", blocks, " ViT blocks");
  MM_CHECK(!with_mtp || config.text.mtp_num_hidden_layers <= mtp_layers, file,
           ": text_config.mtp_num_hidden_layers is ", config.text.mtp_num_hidden_layers, ", but the checkpoint in ",
           dir.string(), " holds ", mtp_layers, " multi-token-prediction layers (mtp.layers.*)");
}

// Whether a model loaded from `checkpoint` gets its multi-token-prediction head: asked for, and
// both config.json and the checkpoint have one. A config that names a head the checkpoint lacks
// (what transformers' save_pretrained writes: it drops mtp.* but keeps the config key) loads
// without it, said once.
bool loads_mtp(const QwenVLConfig& config, const Checkpoint& checkpoint, const std::filesystem::path& dir,
               bool with_mtp) {
  if (!with_mtp || config.text.mtp_num_hidden_layers == 0) return false;
  for (const auto& name : checkpoint.names())
    if (name.rfind("mtp.", 0) == 0) return true;
  log::info(dir.string(), ": config.json has a multi-token-prediction head (mtp_num_hidden_layers ",
            config.text.mtp_num_hidden_layers, ") but the checkpoint has no mtp.* tensors; loading without it");
  return false;
}

// The vision tower of the config's family.
std::shared_ptr<VisionTowerImpl> make_vision_tower(const QwenVLVisionConfig& config) {
  if (const auto* v = std::get_if<Qwen2VLVisionConfig>(&config)) return Qwen2VisionTransformer(*v).ptr();
  if (const auto* v = std::get_if<Qwen3VLVisionConfig>(&config)) return Qwen3VLVisionModel(*v).ptr();
  return Qwen2_5_VisionTransformer(std::get<Qwen2_5_VLVisionConfig>(config)).ptr();
}

// DeepStack features of one modality in the order of its placeholder tokens.
struct ModalityDeepstack {
  torch::Tensor mask;  // [batch, seq] bool
  std::vector<torch::Tensor> embeds;
};

// Images and videos joined as the reference joins them: one mask over both, and per layer the
// features of both in the order of the positions (HF: Qwen3VLModel.forward).
DeepstackInputs joined_deepstack(const std::vector<ModalityDeepstack>& parts) {
  DeepstackInputs out;
  for (const auto& part : parts) out.visual_mask = out.visual_mask.defined() ? out.visual_mask | part.mask : part.mask;
  if (parts.size() == 1) {
    out.embeds = parts.front().embeds;
    return out;
  }
  const size_t layers = parts.front().embeds.size();
  // The parts' masks are disjoint (one placeholder id each): their rows add up, no device read.
  int64_t visual = 0;
  for (const auto& part : parts) visual += part.embeds.front().size(0);
  for (size_t i = 0; i < layers; ++i) {
    const auto& first = parts.front().embeds[i];
    torch::Tensor joint = torch::zeros({visual, first.size(-1)}, first.options());
    for (const auto& part : parts) joint = joint.index_put({part.mask.index({out.visual_mask})}, part.embeds[i]);
    out.embeds.push_back(joint);
  }
  return out;
}

}  // namespace

QwenVLForConditionalGenerationImpl::QwenVLForConditionalGenerationImpl(const QwenVLConfig& config, bool with_mtp)
    : config_(config) {
  config_.validate();
  visual = register_module("visual", make_vision_tower(config.vision));
  model = register_module("model", Qwen2Model(config.text));
  if (!config.text.tie_word_embeddings)
    lm_head = register_module("lm_head", Linear(config.text.hidden_size, config.text.vocab_size, /*bias=*/false));
  if (with_mtp) {
    MM_CHECK(config.text.mtp_num_hidden_layers > 0, "a ", config.model_type(),
             " model without text_config.mtp_num_hidden_layers has no multi-token-prediction head to build");
    mtp = register_module("mtp", MultiTokenPrediction(config.text));
  }
}

namespace {

// config.json with the eos ids of generation_config.json.
QwenVLConfig pretrained_config(const std::filesystem::path& dir) {
  MM_CHECK(std::filesystem::is_directory(dir), "from_pretrained: ", dir.string(), " is not a directory");
  auto config = QwenVLConfig::from_file(dir / "config.json");
  const auto generation_json = dir / "generation_config.json";
  if (std::filesystem::exists(generation_json)) {
    const auto json = read_json_file(generation_json);
    if (json.contains("eos_token_id") && !json["eos_token_id"].is_null()) {
      const auto& eos = json["eos_token_id"];
      MM_CHECK(eos.is_number_integer() || eos.is_array(), generation_json.string(),
               ": eos_token_id must be an integer or a list of integers");
      try {
        config.eos_token_ids = eos.is_array() ? eos.get<std::vector<int64_t>>() : std::vector<int64_t>{eos.get<int64_t>()};
      } catch (const nlohmann::json::exception&) {
        fail(generation_json.string(), ": eos_token_id must be an integer or a list of integers, got ", eos.dump());
      }
    }
  }
  return config;
}

// The checkpoint's tensors (views of the mapped files) by name, fused MoE experts split per expert.
NamedTensors checkpoint_tensors(const Checkpoint& checkpoint, const QwenVLConfig& config) {
  NamedTensors tensors;
  for (const auto& name : checkpoint.names()) tensors.emplace_back(name, checkpoint.tensor(name));
  return split_fused_experts(std::move(tensors), config.text.hidden_size, config.text.moe.moe_intermediate_size);
}

WeightLoadOptions pretrained_load_options(const QwenVLConfig& config, bool with_mtp) {
  WeightLoadOptions options;
  options.checkpoint_to_module = [tied = config.text.tie_word_embeddings, with_mtp](const std::string& name) {
    return qwen_vl_module_name(name, tied, with_mtp);
  };
  return options;
}

}  // namespace

QwenVLForConditionalGeneration QwenVLForConditionalGenerationImpl::from_pretrained(
    const std::filesystem::path& dir, torch::Dtype dtype, const c10::Device& device, bool with_mtp) {
  const auto config = pretrained_config(dir);
  const auto checkpoint = Checkpoint::open(dir);
  const bool mtp = loads_mtp(config, checkpoint, dir, with_mtp);
  check_block_counts(config, checkpoint, dir, mtp);
  auto result = build_for_loading(dtype, device, [&] { return QwenVLForConditionalGeneration(config, mtp); });
  load_weights(*result, checkpoint_tensors(checkpoint, config), dir.string(), pretrained_load_options(config, mtp));
  result->eval();
  return result;
}

QwenVLForConditionalGenerationImpl::Unloaded QwenVLForConditionalGenerationImpl::from_pretrained_unloaded(
    const std::filesystem::path& dir, torch::Dtype dtype, bool with_mtp) {
  const auto config = pretrained_config(dir);
  const auto checkpoint = Checkpoint::open(dir);
  const bool mtp = loads_mtp(config, checkpoint, dir, with_mtp);
  check_block_counts(config, checkpoint, dir, mtp);
  auto model = build_for_loading(dtype, c10::kCPU, [&] { return QwenVLForConditionalGeneration(config, mtp); });
  auto weights =
      match_weights(*model, checkpoint_tensors(checkpoint, config), dir.string(), pretrained_load_options(config, mtp));
  model->eval();
  return {model, std::move(weights)};
}

VisionFeatures QwenVLForConditionalGenerationImpl::image_features(const torch::Tensor& pixel_values,
                                                                  const torch::Tensor& grid_thw) {
  const auto& weight = model->embed_tokens->weight;
  auto params = visual->parameters();
  const auto dtype = params.empty() ? weight.scalar_type() : params.front().scalar_type();
  MM_CHECK(pixel_values.dim() == 2, "pixel values must be [patches, channels * temporal_patch * patch^2], got ",
           pixel_values.sizes());
  // The grid stays where it is (the host): the towers lay their patches out from it there.
  const auto pixels = to_device_async(pixel_values, weight.device()).to(dtype);
  if (!vision_items) return visual->features(pixels, grid_thw);
  return dealt_features(pixels, grid_thw);
}

VisionFeatures QwenVLForConditionalGenerationImpl::dealt_features(const torch::Tensor& pixel_values,
                                                                  const torch::Tensor& grid_thw) {
  check_grid(grid_thw, "grid_thw");
  // One item per frame (temporal patch), in the processor's order: frame-major within an item.
  const auto grid = grid_thw.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t merge = config_.spatial_merge_size();
  std::vector<int64_t> patches, merged_rows, frame_rows;  // per frame; frame_rows: its (1, h, w)
  for (int64_t i = 0; i < grid.size(0); ++i) {
    const int64_t t = grid[i][0].item<int64_t>(), h = grid[i][1].item<int64_t>(), w = grid[i][2].item<int64_t>();
    for (int64_t f = 0; f < t; ++f) {
      patches.push_back(h * w);
      merged_rows.push_back(h * w / (merge * merge));
      frame_rows.insert(frame_rows.end(), {1, h, w});
    }
  }
  const int64_t total = std::accumulate(patches.begin(), patches.end(), int64_t{0});
  MM_CHECK(pixel_values.size(0) == total, "pixel values have ", pixel_values.size(0), " patches but the grid gives ",
           total);
  const auto deal = vision_items(patches);
  const auto first = static_cast<size_t>(deal.first), end = first + static_cast<size_t>(deal.count);
  const int64_t offset = std::accumulate(patches.begin(), patches.begin() + static_cast<std::ptrdiff_t>(first), int64_t{0});
  const int64_t mine = std::accumulate(patches.begin() + static_cast<std::ptrdiff_t>(first),
                                       patches.begin() + static_cast<std::ptrdiff_t>(end), int64_t{0});
  const auto my_grid = torch::tensor(std::vector<int64_t>(frame_rows.begin() + static_cast<std::ptrdiff_t>(3 * first),
                                                          frame_rows.begin() + static_cast<std::ptrdiff_t>(3 * end)),
                                     torch::kInt64)
                           .view({-1, 3});
  auto features = visual->features(pixel_values.narrow(0, offset, mine), my_grid);
  features.merged = deal.gather(features.merged, merged_rows);
  for (auto& layer : features.deepstack) layer = deal.gather(layer, merged_rows);
  return features;
}

torch::Tensor QwenVLForConditionalGenerationImpl::embed_inputs(const QwenVLInputs& inputs, DeepstackInputs* deepstack) {
  MM_CHECK(inputs.input_ids.defined() && inputs.input_ids.dim() == 2,
           "input_ids must be [batch, seq], got ", inputs.input_ids.defined() ? c10::str(inputs.input_ids.sizes()) : "none");
  auto ids = to_device_async(inputs.input_ids, model->embed_tokens->weight.device());
  auto embeds = model->embed(ids);
  // The placeholders of each modality against its grid, checked before anything is encoded.
  struct Modality {
    const torch::Tensor& pixels;
    const torch::Tensor& grid;
    int64_t token_id;
    const char* what;
    const char* grid_name;
    torch::Tensor mask;  // [batch, seq] bool
    int64_t features = 0;
  };
  std::array<Modality, 2> modalities{
      Modality{inputs.pixel_values, inputs.image_grid_thw, config_.image_token_id, "image", "image_grid_thw", {}},
      Modality{inputs.pixel_values_videos, inputs.video_grid_thw, config_.video_token_id, "video", "video_grid_thw",
               {}}};
  std::vector<Modality*> present;
  for (auto& m : modalities) {
    m.mask = ids == m.token_id;
    // Counted where the ids were given (the host, in training and chat), not read back from the GPU.
    const int64_t n_tokens = (inputs.input_ids == m.token_id).sum().item<int64_t>();
    if (!m.pixels.defined()) {
      MM_CHECK(n_tokens == 0, "input_ids has ", n_tokens, " ", m.what, " placeholder tokens (id ", m.token_id,
               ") but no pixel values were given for them");
      continue;
    }
    check_grid(m.grid, m.grid_name);
    const auto counts = merged_token_counts(m.grid, config_.spatial_merge_size());
    m.features = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    MM_CHECK(m.features == n_tokens, m.what, " features and ", m.what, " tokens do not match: input_ids has ",
             n_tokens, " ", m.what, " placeholder tokens (id ", m.token_id, ") but ", m.grid_name, " gives ",
             m.features, " ", m.what, " embeddings");
    present.push_back(&m);
  }
  if (present.empty()) {
    if (deepstack) *deepstack = DeepstackInputs{};
    return embeds;
  }
  // Images and videos through the tower in one pass (each item is encoded on its own either way,
  // as the reference's two passes do): a sharded tower's blocks then run once per micro-batch.
  std::vector<torch::Tensor> pixels, grids;
  for (const auto* m : present) {
    pixels.push_back(m->pixels.to(present.front()->pixels.scalar_type()));
    grids.push_back(m->grid.to(torch::kCPU).to(torch::kInt64));
  }
  const auto grid_names = present.size() == 1 ? std::string(present.front()->grid_name)
                                              : "image_grid_thw and video_grid_thw";
  auto features = present.size() == 1 ? image_features(pixels.front(), grids.front())
                                       : image_features(torch::cat(pixels), torch::cat(grids));
  const int64_t n_features = present.size() == 1 ? present.front()->features : present[0]->features + present[1]->features;
  MM_CHECK(features.merged.dim() == 2 && features.merged.size(0) == n_features &&
               features.merged.size(1) == embeds.size(-1),
           "the vision encoder returned ", features.merged.sizes(), " for ", grid_names, ", expected [", n_features, ", ",
           embeds.size(-1), "]");
  std::vector<ModalityDeepstack> deepstack_parts;
  int64_t offset = 0;
  for (const auto* m : present) {
    embeds = embeds.masked_scatter(m->mask.unsqueeze(-1),
                                   features.merged.narrow(0, offset, m->features).to(embeds.scalar_type()));
    if (!features.deepstack.empty()) {
      MM_CHECK(deepstack != nullptr, "embed_inputs: this ", config_.model_type(),
               " model adds DeepStack features of its ", m->what,
               "s in its first decoder layers; the caller must take them (a DeepstackInputs) and pass them to decode");
      std::vector<torch::Tensor> layers;
      for (const auto& layer : features.deepstack) layers.push_back(layer.narrow(0, offset, m->features));
      deepstack_parts.push_back({m->mask, std::move(layers)});
    }
    offset += m->features;
  }
  if (deepstack) *deepstack = deepstack_parts.empty() ? DeepstackInputs{} : joined_deepstack(deepstack_parts);
  return embeds;
}

RopeIndex qwen_vl_rope_index(const QwenVLConfig& config, const QwenVLInputs& inputs) {
  MM_CHECK(inputs.input_ids.defined() && inputs.input_ids.dim() == 2, "get_rope_index: input_ids must be [batch, seq]");
  auto ids = inputs.input_ids.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t batch = ids.size(0), seq = ids.size(1);
  torch::Tensor keep;
  if (inputs.attention_mask.defined()) {
    MM_CHECK(inputs.attention_mask.sizes() == ids.sizes(), "attention_mask ", inputs.attention_mask.sizes(),
             " must match input_ids ", ids.sizes());
    keep = inputs.attention_mask.to(torch::kCPU).to(torch::kBool).contiguous();
  }
  const int64_t merge = config.spatial_merge_size();
  auto grid_rows = [](const torch::Tensor& grid, const char* name) {
    std::vector<std::array<int64_t, 3>> rows;
    if (!grid.defined()) return rows;
    check_grid(grid, name);
    auto g = grid.to(torch::kCPU).to(torch::kInt64).contiguous();
    auto a = g.accessor<int64_t, 2>();
    for (int64_t i = 0; i < g.size(0); ++i) rows.push_back({a[i][0], a[i][1], a[i][2]});
    return rows;
  };
  const auto image_grids = grid_rows(inputs.image_grid_thw, "image_grid_thw");
  auto video_grids = grid_rows(inputs.video_grid_thw, "video_grid_thw");
  MM_CHECK(inputs.second_per_grid_ts.empty() || inputs.second_per_grid_ts.size() == video_grids.size(),
           "second_per_grid_ts has ", inputs.second_per_grid_ts.size(), " entries but video_grid_thw has ",
           video_grids.size(), " videos");
  if (config.video_frames_apart()) {
    // One grid (and one placeholder run) per frame; the temporal step then never applies.
    std::vector<std::array<int64_t, 3>> frames;
    for (const auto& [t, h, w] : video_grids)
      for (int64_t f = 0; f < t; ++f) frames.push_back({1, h, w});
    video_grids = std::move(frames);
  }
  size_t next_image = 0, next_video = 0;

  auto position_ids = torch::zeros({3, batch, seq}, torch::kInt64);
  auto pos = position_ids.accessor<int64_t, 3>();
  auto deltas = torch::zeros({batch, 1}, torch::kInt64);
  auto id = ids.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> cols;  // real (unpadded) token columns
    for (int64_t s = 0; s < seq; ++s)
      if (!keep.defined() || keep.data_ptr<bool>()[b * seq + s]) cols.push_back(s);
    auto type_of = [&](size_t i) {
      const int64_t token = id[b][cols[i]];
      return token == config.image_token_id ? 1 : token == config.video_token_id ? 2 : 0;
    };
    int64_t current = 0, max_pos = -1;
    auto put = [&](size_t i, int64_t t, int64_t h, int64_t w) {
      pos[0][b][cols[i]] = t;
      pos[1][b][cols[i]] = h;
      pos[2][b][cols[i]] = w;
      max_pos = std::max({max_pos, t, h, w});
    };
    for (size_t start = 0; start < cols.size();) {
      const int type = type_of(start);
      size_t end = start;
      while (end < cols.size() && type_of(end) == type) ++end;
      if (type == 0) {
        for (size_t i = start; i < end; ++i) put(i, current + int64_t(i - start), current + int64_t(i - start),
                                                 current + int64_t(i - start));
        current += int64_t(end - start);
      } else {
        const bool video = type == 2;
        const auto& grids = video ? video_grids : image_grids;
        size_t& next = video ? next_video : next_image;
        const char* what = video ? "video" : "image";
        MM_CHECK(next < grids.size(), "input_ids (row ", b, ") has more ", what, " placeholder runs than ",
                 what, "_grid_thw has rows (", grids.size(), ")");
        const auto [t, h, w] = grids[next];
        const int64_t lh = h / merge, lw = w / merge;
        MM_CHECK(int64_t(end - start) == t * lh * lw, what, " placeholder run at column ", cols[start], " of row ", b,
                 " has ", end - start, " tokens but ", what, "_grid_thw row ", next, " (", t, ", ", h, ", ", w,
                 ") needs ", t * lh * lw);
        const int64_t interval =
            video && !config.video_frames_apart()
                ? config.video_temporal_step(inputs.second_per_grid_ts.empty() ? 1.0 : inputs.second_per_grid_ts[next])
                : 1;
        size_t i = start;
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t hi = 0; hi < lh; ++hi)
            for (int64_t wi = 0; wi < lw; ++wi) put(i++, current + ti * interval, current + hi, current + wi);
        current += std::max(h, w) / merge;
        ++next;
      }
      start = end;
    }
    deltas[b][0] = max_pos + 1 - static_cast<int64_t>(cols.size());
  }
  MM_CHECK(next_image == image_grids.size(), "image_grid_thw has ", image_grids.size(),
           " rows but input_ids has ", next_image, " image placeholder runs");
  MM_CHECK(next_video == video_grids.size(), "video_grid_thw has ", video_grids.size(),
           config.video_frames_apart() ? " frames (one placeholder run each)" : " rows", " but input_ids has ",
           next_video, " video placeholder runs");
  return {position_ids, deltas};
}

RopeIndex QwenVLForConditionalGenerationImpl::get_rope_index(const QwenVLInputs& inputs) const {
  return qwen_vl_rope_index(config_, inputs);
}

torch::Tensor QwenVLForConditionalGenerationImpl::decode(const torch::Tensor& inputs_embeds,
                                                         const torch::Tensor& position_ids,
                                                         const torch::Tensor& padding_mask, KVCache* cache,
                                                         const std::vector<int64_t>& cu_seqlens,
                                                         const DeepstackInputs* deepstack,
                                                         std::shared_ptr<const SequenceSplit> split) {
  return model->forward(inputs_embeds, position_ids, padding_mask, cache, cu_seqlens, deepstack, std::move(split));
}

torch::Tensor QwenVLForConditionalGenerationImpl::lm_logits(const torch::Tensor& hidden) {
  return lm_head ? lm_head(hidden) : torch::nn::functional::linear(hidden, model->embed_tokens->weight);
}

torch::Tensor QwenVLForConditionalGenerationImpl::forward(const QwenVLInputs& inputs) {
  DeepstackInputs deepstack;
  auto embeds = embed_inputs(inputs, &deepstack);
  auto rope = get_rope_index(inputs);
  return lm_logits(decode(embeds, rope.position_ids, inputs.attention_mask, nullptr, {}, &deepstack));
}

}  // namespace mm
