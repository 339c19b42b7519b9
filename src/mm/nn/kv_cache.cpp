#include "mm/nn/kv_cache.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm {

KVCache::KVCache(int64_t num_layers, int64_t capacity)
    : capacity_(std::max<int64_t>(capacity, 1)), keys_(num_layers), values_(num_layers), lengths_(num_layers, 0),
      linear_(static_cast<size_t>(num_layers)) {}

DeltaNetCache& KVCache::linear_state(int64_t layer) {
  MM_CHECK(layer >= 0 && layer < num_layers(), "KVCache: layer ", layer, " outside [0, ", num_layers(), ")");
  return linear_[static_cast<size_t>(layer)];
}

int64_t KVCache::length() const {
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i].defined()) return lengths_[i];
  return 0;
}

std::pair<torch::Tensor, torch::Tensor> KVCache::update(int64_t layer, const torch::Tensor& key,
                                                        const torch::Tensor& value) {
  MM_CHECK(layer >= 0 && layer < num_layers(), "KVCache: layer ", layer, " outside [0, ", num_layers(), ")");
  MM_CHECK(key.dim() == 4 && key.sizes() == value.sizes(), "KVCache: key ", key.sizes(), " and value ",
           value.sizes(), " must both be [batch, kv_heads, new_len, head_dim]");
  const int64_t len = lengths_[layer];
  const int64_t new_len = key.size(2);
  auto& k_buf = keys_[layer];
  auto& v_buf = values_[layer];
  if (!k_buf.defined() || len + new_len > k_buf.size(2)) {
    int64_t capacity = k_buf.defined() ? k_buf.size(2) : capacity_;
    while (capacity < len + new_len) capacity *= 2;
    auto grown_k = torch::empty({key.size(0), key.size(1), capacity, key.size(3)}, key.options());
    auto grown_v = torch::empty({key.size(0), key.size(1), capacity, key.size(3)}, value.options());
    if (len > 0) {
      grown_k.narrow(2, 0, len).copy_(k_buf.narrow(2, 0, len));
      grown_v.narrow(2, 0, len).copy_(v_buf.narrow(2, 0, len));
    }
    k_buf = grown_k;
    v_buf = grown_v;
  }
  MM_CHECK(k_buf.size(0) == key.size(0) && k_buf.size(1) == key.size(1) && k_buf.size(3) == key.size(3),
           "KVCache: layer ", layer, " holds [batch, kv_heads, *, head_dim] = ", k_buf.sizes(),
           ", got a key of ", key.sizes());
  k_buf.narrow(2, len, new_len).copy_(key);
  v_buf.narrow(2, len, new_len).copy_(value);
  lengths_[layer] = len + new_len;
  return {k_buf.narrow(2, 0, len + new_len), v_buf.narrow(2, 0, len + new_len)};
}

}  // namespace mm
