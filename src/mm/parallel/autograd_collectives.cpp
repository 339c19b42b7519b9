#include "mm/parallel/autograd_collectives.h"

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <numeric>

#include "mm/core/error.h"

namespace mm::parallel {
namespace {

// Nanoseconds blocked in exchange_rows; atomic since backward may run on autograd's threads.
std::atomic<int64_t> exchange_nanoseconds{0};

int64_t total(const std::vector<int64_t>& counts) { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); }

void check_counts(const std::vector<int64_t>& counts, const Group& group, const char* what) {
  MM_CHECK(static_cast<int64_t>(counts.size()) == group->getSize(), what, ": ", counts.size(),
           " counts for a group of ", group->getSize(), " ranks");
  for (int64_t c : counts) MM_CHECK(c >= 0, what, ": a negative count (", c, ")");
}

// The exchange itself, without autograd. x: [sum(send), ...] contiguous rows.
at::Tensor exchange_rows(const at::Tensor& x, std::vector<int64_t> send, std::vector<int64_t> recv,
                         const Group& group) {
  auto input = x.contiguous();
  auto sizes = input.sizes().vec();
  sizes[0] = total(recv);
  auto output = torch::empty(sizes, input.options());
  const auto start = std::chrono::steady_clock::now();
  group->alltoall_base(output, input, recv, send)->wait();
  exchange_nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  return output;
}

struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(Group g) : group(std::move(g)) {}
  Group group;
};

Group group_of(torch::autograd::AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule())->group;
}

struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, std::vector<int64_t> send,
                            std::vector<int64_t> recv, const Group& group) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return exchange_rows(x, send, recv, group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto back = exchange_rows(grads[0], ctx->saved_data["recv"].toIntVector(), ctx->saved_data["send"].toIntVector(),
                              group_of(ctx));
    return {back, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Gather along dim 0 with the sizes of every rank (no autograd): each rank sends its rows to all.
at::Tensor gather_rows(const at::Tensor& x, const std::vector<int64_t>& sizes, const Group& group) {
  const int64_t world = group->getSize();
  const int64_t mine = sizes[static_cast<size_t>(group->getRank())];
  MM_CHECK(x.size(0) == mine, "all_gather_along: this rank's size is ", x.size(0), " but sizes says ", mine);
  std::vector<int64_t> send(static_cast<size_t>(world), mine);
  // The same rows once per destination: all-to-all carries variable sizes on every backend.
  return exchange_rows(torch::cat(std::vector<at::Tensor>(static_cast<size_t>(world), x)), send, sizes, group);
}

// Reduce-scatter along dim 0: slice r of x (sizes[r] rows) goes to rank r, which sums what it
// receives in rank order.
at::Tensor scatter_sum_rows(const at::Tensor& x, const std::vector<int64_t>& sizes, const Group& group) {
  MM_CHECK(x.size(0) == total(sizes), "reduce_scatter_along: the tensor has ", x.size(0),
           " rows along the dimension but the slices add up to ", total(sizes));
  const int64_t world = group->getSize();
  const int64_t mine = sizes[static_cast<size_t>(group->getRank())];
  std::vector<int64_t> recv(static_cast<size_t>(world), mine);
  auto parts = exchange_rows(x, sizes, recv, group);  // [world * mine, ...]: rank 0's part first
  auto sizes_split = parts.sizes().vec();
  sizes_split[0] = mine;
  sizes_split.insert(sizes_split.begin(), world);
  auto split = parts.view(sizes_split);
  auto sum = split[0].clone();
  for (int64_t r = 1; r < world; ++r) sum.add_(split[r]);
  return sum;
}

struct AllGatherRows : torch::autograd::Function<AllGatherRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, std::vector<int64_t> sizes,
                            const Group& group) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
    ctx->saved_data["sizes"] = sizes;
    return gather_rows(x, sizes, group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {scatter_sum_rows(grads[0], ctx->saved_data["sizes"].toIntVector(), group_of(ctx)), at::Tensor(),
            at::Tensor()};
  }
};

struct ReduceScatterRows : torch::autograd::Function<ReduceScatterRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, std::vector<int64_t> sizes,
                            const Group& group) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
    ctx->saved_data["sizes"] = sizes;
    return scatter_sum_rows(x, sizes, group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {gather_rows(grads[0], ctx->saved_data["sizes"].toIntVector(), group_of(ctx)), at::Tensor(),
            at::Tensor()};
  }
};

int64_t checked_dim(const at::Tensor& x, int64_t dim, const char* what) {
  MM_CHECK(x.dim() > 0, what, ": needs a tensor with at least one dimension");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  MM_CHECK(d >= 0 && d < x.dim(), what, ": dim ", dim, " is out of range for a ", x.dim(), "-d tensor");
  return d;
}

}  // namespace

at::Tensor all_to_all_rows(const at::Tensor& x, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts, const Group& group) {
  if (!group) return x;
  check_counts(send_counts, group, "all_to_all_rows");
  check_counts(recv_counts, group, "all_to_all_rows");
  MM_CHECK(x.dim() > 0 && x.size(0) == total(send_counts), "all_to_all_rows: the tensor has ",
           x.dim() > 0 ? x.size(0) : 0, " rows but the send counts add up to ", total(send_counts));
  return AllToAllRows::apply(x, send_counts, recv_counts, group);
}

std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send_counts, const Group& group) {
  if (!group) return send_counts;
  check_counts(send_counts, group, "exchange_counts");
  const int64_t world = group->getSize();
  // NCCL carries device tensors only.
  const bool on_gpu = group->getBackendName() == "nccl";
  auto counts = torch::tensor(send_counts, torch::kInt64).to(on_gpu ? at::Device(at::kCUDA) : at::Device(at::kCPU));
  std::vector<int64_t> ones(static_cast<size_t>(world), 1);
  auto received = exchange_rows(counts, ones, ones, group).cpu();
  return {received.data_ptr<int64_t>(), received.data_ptr<int64_t>() + world};
}

at::Tensor all_gather_along(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes, const Group& group) {
  if (!group) return x;
  check_counts(sizes, group, "all_gather_along");
  const int64_t d = checked_dim(x, dim, "all_gather_along");
  return AllGatherRows::apply(x.movedim(d, 0), sizes, group).movedim(0, d);
}

at::Tensor reduce_scatter_along(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes,
                                const Group& group) {
  if (!group) return x;
  check_counts(sizes, group, "reduce_scatter_along");
  const int64_t d = checked_dim(x, dim, "reduce_scatter_along");
  return ReduceScatterRows::apply(x.movedim(d, 0), sizes, group).movedim(0, d);
}

double take_exchange_seconds() { return static_cast<double>(exchange_nanoseconds.exchange(0)) * 1e-9; }

}  // namespace mm::parallel
