// Collectives that autograd differentiates, over any c10d group of the mesh (Gloo for CPU
// tensors, NCCL for CUDA ones): what expert parallelism dispatches tokens with and context
// parallelism splits sequences with. Sizes may differ from rank to rank (dropless routing,
// sequences that do not divide evenly). Each call waits for its work before returning.
//
// Every exchange is one all-to-all of rows along dim 0 (alltoall_base): the gather and the
// reduce-scatter are written with it too, so one primitive carries variable sizes on every
// backend, and a reduce-scatter sums the ranks' parts here, in rank order, so the sum rounds the
// same whatever the layout. A null group is one rank: every function is then the identity.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <vector>

namespace mm::parallel {

using Group = c10::intrusive_ptr<c10d::Backend>;

// Rows of x [sum(send_counts), ...]: the send_counts[j] consecutive rows starting at
// sum(send_counts[:j]) go to rank j. Returns [sum(recv_counts), ...]: recv_counts[i] rows from
// rank i, rank 0's first. recv_counts must be what the ranks send here (exchange_counts).
// Backward: the gradient rows travel back the same way with the counts swapped.
at::Tensor all_to_all_rows(const at::Tensor& x, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts, const Group& group);

// The counts every rank sends to this one, given what this rank sends to each (host integers;
// not differentiable): the first step of a dropless dispatch.
std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send_counts, const Group& group);

// Every rank's x concatenated along `dim` in rank order; sizes[r] is rank r's size along dim (x
// has sizes[rank]). Backward: each rank gets the sum over ranks of its slice of the gradient.
at::Tensor all_gather_along(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes,
                            const Group& group);

// The sum over ranks of x, of which this rank keeps slice `rank` along `dim` (slice r has
// sizes[r]; x has sum(sizes)). Backward: the slices' gradients gathered along dim.
at::Tensor reduce_scatter_along(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes,
                                const Group& group);

// Seconds this process has spent in the exchanges above (every all-to-all, forward and backward,
// from its start until its data arrived) since the last call: what a step reports as the
// dispatch's communication (all_to_all_wait_s).
double take_exchange_seconds();

}  // namespace mm::parallel
