#include "mm/parallel/ulysses_attention.h"

#include <torch/torch.h>

#include "mm/core/error.h"

namespace mm::parallel {

at::Tensor ulysses_scatter_heads(const at::Tensor& x, const std::vector<int64_t>& lengths, const Group& group) {
  if (!group) return x;
  const int64_t world = group->getSize(), rank = group->getRank();
  const int64_t b = x.size(0), share = x.size(1) / world, d = x.size(3);
  std::vector<at::Tensor> chunks;
  std::vector<int64_t> send, recv;
  for (int64_t j = 0; j < world; ++j) {
    chunks.push_back(x.narrow(1, j * share, share).reshape({-1}));
    send.push_back(b * share * lengths[static_cast<size_t>(rank)] * d);
    recv.push_back(b * share * lengths[static_cast<size_t>(j)] * d);
  }
  const auto received = all_to_all_rows(torch::cat(chunks), send, recv, group);
  std::vector<at::Tensor> parts;
  int64_t offset = 0;
  for (int64_t i = 0; i < world; ++i) {
    parts.push_back(received.narrow(0, offset, recv[static_cast<size_t>(i)]).view({b, share, lengths[static_cast<size_t>(i)], d}));
    offset += recv[static_cast<size_t>(i)];
  }
  return torch::cat(parts, 2);
}

at::Tensor ulysses_gather_heads(const at::Tensor& x, const std::vector<int64_t>& lengths, const Group& group) {
  if (!group) return x;
  const int64_t world = group->getSize(), rank = group->getRank();
  const int64_t b = x.size(0), share = x.size(1), d = x.size(3), local = lengths[static_cast<size_t>(rank)];
  std::vector<at::Tensor> chunks;
  std::vector<int64_t> send, recv;
  int64_t offset = 0;
  for (int64_t j = 0; j < world; ++j) {
    const int64_t n = lengths[static_cast<size_t>(j)];
    chunks.push_back(x.narrow(2, offset, n).reshape({-1}));
    offset += n;
    send.push_back(b * share * n * d);
    recv.push_back(b * share * local * d);
  }
  const auto received = all_to_all_rows(torch::cat(chunks), send, recv, group);
  return received.view({world, b, share, local, d}).permute({1, 0, 2, 3, 4}).reshape({b, world * share, local, d});
}

at::Tensor ulysses_kv_heads(const at::Tensor& kv, int64_t degree) {
  return kv.size(1) % degree == 0 ? kv : kv.repeat_interleave(degree / kv.size(1), 1);
}

void check_ulysses_heads(int64_t heads, int64_t kv_heads, int64_t degree) {
  MM_CHECK(heads % degree == 0, "Ulysses attention: the degree ", degree, " does not divide the ", heads,
           " attention heads; choose a degree that divides them, or split the rest over a ring (USP: cp = ulysses x "
           "ring)");
  MM_CHECK(kv_heads % degree == 0 || degree % kv_heads == 0, "Ulysses attention: the degree ", degree,
           " neither divides the ", kv_heads, " key/value heads nor is a multiple of them");
}

at::Tensor ulysses_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::vector<SequenceShard>& shards, bool causal, double scale, const Group& group) {
  const int64_t world = group ? group->getSize() : 1;
  MM_CHECK(static_cast<int64_t>(shards.size()) == world, "Ulysses attention: ", shards.size(),
           " shards for a group of ", world, " ranks");
  MM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "Ulysses attention: q, k, v must be [batch, heads, len, dim]");
  check_ulysses_heads(q.size(1), k.size(1), world);
  const auto all = concatenated(shards);
  const auto mask = sees_everything(all, all, causal) ? at::Tensor() : attention_allowed(all, all, causal);
  auto attend = [&](const at::Tensor& qs, const at::Tensor& ks, const at::Tensor& vs) {
    const int64_t group_size = qs.size(1) / ks.size(1);
    const auto kq = group_size == 1 ? ks : ks.repeat_interleave(group_size, 1);
    const auto vq = group_size == 1 ? vs : vs.repeat_interleave(group_size, 1);
    return at::scaled_dot_product_attention(qs, kq, vq, mask.defined() ? std::optional<at::Tensor>(mask.to(qs.device()))
                                                                        : std::nullopt,
                                            0.0, false, scale);
  };
  if (world == 1) return attend(q, k, v);
  const int64_t local = shards[static_cast<size_t>(group->getRank())].size();
  MM_CHECK(q.size(2) == local && k.size(2) == local && v.size(2) == local, "Ulysses attention: this rank holds ",
           local, " tokens but q, k, v have ", q.size(2), ", ", k.size(2), ", ", v.size(2));
  std::vector<int64_t> lengths;
  for (const auto& s : shards) lengths.push_back(s.size());
  const auto out = attend(ulysses_scatter_heads(q, lengths, group),
                          ulysses_scatter_heads(ulysses_kv_heads(k, world), lengths, group),
                          ulysses_scatter_heads(ulysses_kv_heads(v, world), lengths, group));
  return ulysses_gather_heads(out, lengths, group);
}

}  // namespace mm::parallel
