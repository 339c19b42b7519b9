// What autoregressive decoding carries from one forward to the next. Attention layers: one
// preallocated key/value buffer pair per layer, written in place, so a decode step appends one
// position instead of re-running (or re-copying) the prefix. Gated DeltaNet layers (hybrid
// decoders): the conv window and the recurrent state, a fixed size whatever the length.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace mm {

// A Gated DeltaNet layer's state (nn/gated_delta_net.h).
struct DeltaNetCache {
  torch::Tensor conv;       // [batch, conv_dim, conv_kernel - 1] the last conv inputs (x dtype)
  torch::Tensor recurrent;  // [batch, value_heads, key_head_dim, value_head_dim] fp32 (fp64 for fp64 x)
  bool empty() const { return !conv.defined(); }
};

class KVCache {
 public:
  // Buffers are allocated on the first update with room for `capacity` positions (grown by
  // doubling if a sequence outgrows it).
  KVCache(int64_t num_layers, int64_t capacity);

  // key, value: [batch, kv_heads, new_len, head_dim]. Stores them after the layer's cached
  // positions and returns all of the layer's keys and values, [batch, kv_heads, length + new_len,
  // head_dim] (views into the buffers).
  std::pair<torch::Tensor, torch::Tensor> update(int64_t layer, const torch::Tensor& key,
                                                 const torch::Tensor& value);

  // Layer `layer`'s Gated DeltaNet state (empty until its first forward), updated in place.
  DeltaNetCache& linear_state(int64_t layer);

  // Positions cached so far (before the current forward has touched the first attention layer;
  // a hybrid decoder's first layers may be DeltaNet ones, which keep no positions).
  int64_t length() const;
  int64_t num_layers() const { return static_cast<int64_t>(lengths_.size()); }

 private:
  int64_t capacity_;
  std::vector<torch::Tensor> keys_;    // [batch, kv_heads, capacity, head_dim] per layer
  std::vector<torch::Tensor> values_;
  std::vector<int64_t> lengths_;
  std::vector<DeltaNetCache> linear_;
};

}  // namespace mm
