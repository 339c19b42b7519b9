#include "mm/parallel/ring_attention.h"

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <memory>

#include "mm/core/error.h"
#include "mm/nn/blockwise_attention.h"
#include "mm/nn/compute_dtype.h"

namespace mm::parallel {
namespace {

std::atomic<int64_t> ring_wait_nanoseconds{0};  // backward may run on autograd's threads

// One step's transfer on the ring: this rank's buffer to the next rank, the previous rank's into
// `incoming`, posted at once and waited for after the step's compute.
class Rotation {
 public:
  Rotation(const Group& group, const at::Tensor& outgoing, int64_t incoming_numel, int tag)
      : outgoing_(outgoing.contiguous()), incoming_(torch::empty({incoming_numel}, outgoing.options())) {
    const int world = group->getSize(), rank = group->getRank();
    std::vector<at::Tensor> send{outgoing_}, recv{incoming_};
    send_ = group->send(send, (rank + 1) % world, tag);
    recv_ = group->recv(recv, (rank + world - 1) % world, tag);
  }
  at::Tensor finish() {
    const auto start = std::chrono::steady_clock::now();
    send_->wait();
    recv_->wait();
    ring_wait_nanoseconds +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    return incoming_;
  }

 private:
  at::Tensor outgoing_, incoming_;  // alive until the transfer completed
  c10::intrusive_ptr<c10d::Work> send_, recv_;
};

at::Tensor packed(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  for (const auto& p : parts) flat.push_back(p.reshape({-1}));
  return torch::cat(flat);
}

// `flat` cut into tensors of `shapes`, in order.
std::vector<at::Tensor> unpacked(const at::Tensor& flat, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<at::Tensor> out;
  int64_t offset = 0;
  for (const auto& shape : shapes) {
    const int64_t n = c10::multiply_integers(shape);
    out.push_back(flat.narrow(0, offset, n).view(shape));
    offset += n;
  }
  return out;
}

// What forward and backward share: the group, every rank's tokens, the mask rule.
struct RingSetup : torch::CustomClassHolder {
  Group group;
  std::vector<SequenceShard> shards;
  bool causal = false;
  double scale = 1;

  int64_t world() const { return group ? group->getSize() : 1; }
  int64_t rank() const { return group ? group->getRank() : 0; }
  // The block of keys rank `rank` holds at step `step`: the one that started on rank - step.
  int64_t source(int64_t step) const { return (rank() - step + world()) % world(); }
  // Shape of `like` ([b, heads, len, dim]) with rank `owner`'s token count.
  std::vector<int64_t> block_shape(const at::Tensor& like, int64_t owner) const {
    auto shape = like.sizes().vec();
    shape[2] = shards[static_cast<size_t>(owner)].size();
    return shape;
  }
};

struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, c10::intrusive_ptr<RingSetup> setup) {
    const auto& s = *setup;
    const auto& mine = s.shards[static_cast<size_t>(s.rank())];
    AttentionPart total;
    at::Tensor k_block = k, v_block = v;
    for (int64_t step = 0; step < s.world(); ++step) {
      const int64_t source = s.source(step);
      std::unique_ptr<Rotation> rotation;
      if (step + 1 < s.world()) {
        const int64_t next = s.source(step + 1);
        const int64_t incoming = c10::multiply_integers(s.block_shape(k, next)) + c10::multiply_integers(s.block_shape(v, next));
        rotation = std::make_unique<Rotation>(s.group, packed({k_block, v_block}), incoming, static_cast<int>(step));
      }
      const auto allowed = attention_allowed(mine, s.shards[static_cast<size_t>(source)], s.causal);
      if (allowed.any().item<bool>()) {
        auto part = attention_with_lse(q, k_block, v_block, allowed, s.scale);
        total = total.out.defined() ? merge_attention_parts(total, part) : std::move(part);
      }
      if (rotation) {
        const int64_t next = s.source(step + 1);
        auto blocks = unpacked(rotation->finish(), {s.block_shape(k, next), s.block_shape(v, next)});
        k_block = blocks[0], v_block = blocks[1];
      }
    }
    if (!total.out.defined()) {  // no query of this rank sees any key: 0 with an empty softmax
      const auto dtype = at_least_fp32(q.scalar_type());
      auto shape = q.sizes().vec();
      shape[3] = v.size(3);
      total = {torch::zeros(shape, q.options().dtype(dtype)),
               torch::full(q.sizes().slice(0, 3), -std::numeric_limits<double>::infinity(), q.options().dtype(dtype))};
    }
    ctx->save_for_backward({q, k, v, total.out, total.lse});
    ctx->saved_data["setup"] = c10::IValue::make_capsule(setup);
    return total.out.to(q.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto setup = c10::static_intrusive_pointer_cast<RingSetup>(ctx->saved_data["setup"].toCapsule());
    const auto& s = *setup;
    const auto& mine = s.shards[static_cast<size_t>(s.rank())];
    const auto dtype = out.scalar_type();
    const auto dout = grads[0].to(dtype);
    auto dq = torch::zeros(q.sizes(), q.options().dtype(dtype));
    at::Tensor k_block = k, v_block = v;
    auto dk_block = torch::zeros(k.sizes(), k.options().dtype(dtype));
    auto dv_block = torch::zeros(v.sizes(), v.options().dtype(dtype));
    const int tag_base = static_cast<int>(s.world());  // after the forward's tags
    for (int64_t step = 0; step < s.world(); ++step) {
      const int64_t source = s.source(step);
      const auto allowed = attention_allowed(mine, s.shards[static_cast<size_t>(source)], s.causal);
      if (allowed.any().item<bool>()) {
        const auto g = attention_block_backward(q, k_block, v_block, allowed, s.scale, lse, out, dout);
        dq += g.dq;
        dk_block += g.dk;
        dv_block += g.dv;
      }
      if (s.world() == 1) break;
      // The block moves on with its gradients; after the last step only the gradients travel, and
      // what arrives then is this rank's own block (it started here `world` steps ago).
      const int64_t next = s.source(step + 1);
      const auto k_shape = s.block_shape(k, next), v_shape = s.block_shape(v, next);
      const bool last = step + 1 == s.world();
      const int64_t kn = c10::multiply_integers(k_shape), vn = c10::multiply_integers(v_shape);
      Rotation rotation(s.group, last ? packed({dk_block, dv_block}) : packed({k_block.to(dtype), v_block.to(dtype), dk_block, dv_block}),
                        last ? kn + vn : 2 * (kn + vn), tag_base + static_cast<int>(step));
      const auto incoming = rotation.finish();
      if (last) {
        auto blocks = unpacked(incoming, {k_shape, v_shape});
        dk_block = blocks[0], dv_block = blocks[1];
      } else {
        auto blocks = unpacked(incoming, {k_shape, v_shape, k_shape, v_shape});
        k_block = blocks[0].to(k.scalar_type()), v_block = blocks[1].to(v.scalar_type());
        dk_block = blocks[2].clone(), dv_block = blocks[3].clone();
      }
    }
    return {dq.to(q.scalar_type()), dk_block.to(k.scalar_type()), dv_block.to(v.scalar_type()), at::Tensor()};
  }
};

}  // namespace

double take_ring_wait_seconds() { return static_cast<double>(ring_wait_nanoseconds.exchange(0)) * 1e-9; }

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::vector<SequenceShard>& shards, bool causal, double scale, const Group& group) {
  auto setup = c10::make_intrusive<RingSetup>();
  setup->group = group;
  setup->shards = shards;
  setup->causal = causal;
  setup->scale = scale;
  MM_CHECK(static_cast<int64_t>(shards.size()) == setup->world(), "ring attention: ", shards.size(),
           " shards for a group of ", setup->world(), " ranks");
  MM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "ring attention: q, k, v must be [batch, heads, len, dim]");
  const int64_t local = shards[static_cast<size_t>(setup->rank())].size();
  MM_CHECK(q.size(2) == local && k.size(2) == local && v.size(2) == local, "ring attention: this rank holds ", local,
           " tokens but q, k, v have ", q.size(2), ", ", k.size(2), ", ", v.size(2));
  return RingAttention::apply(q, k, v, setup);
}

}  // namespace mm::parallel
