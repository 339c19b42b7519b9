// Key/value cache for autoregressive decoding: one preallocated buffer pair per layer, written in
// place, so a decode step appends one position instead of re-running (or re-copying) the prefix.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace mm {

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

  // Positions cached so far (before the current forward has touched layer 0).
  int64_t length() const { return lengths_.empty() ? 0 : lengths_.front(); }
  int64_t num_layers() const { return static_cast<int64_t>(lengths_.size()); }

 private:
  int64_t capacity_;
  std::vector<torch::Tensor> keys_;    // [batch, kv_heads, capacity, head_dim] per layer
  std::vector<torch::Tensor> values_;
  std::vector<int64_t> lengths_;
};

}  // namespace mm
