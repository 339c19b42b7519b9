// The differentiable collectives (parallel/autograd_collectives.h) on 2, 3 and 4 real Gloo
// processes (this binary re-executed as each rank): all-to-all with variable and zero counts, the
// gather and the reduce-scatter along an inner dimension with a different size on every rank.
// Each rank knows every rank's inputs (a function of the rank), so it computes what its output
// and its input's gradient must be on its own, in fp64, and compares. One process (no group):
// every function is the identity.
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "mm/dist/process_group.h"
#include "mm/parallel/autograd_collectives.h"
#include "rank_processes.h"
#include "testing.h"

namespace mm {
namespace {

using namespace std::chrono_literals;
using parallel::Group;

// Rank r's tensor of `shape`, and a second one for the weights of its loss: values that tell
// every element and rank apart.
at::Tensor input_of(int64_t rank, at::IntArrayRef shape, double salt = 0) {
  const int64_t n = c10::multiply_integers(shape);
  return (torch::arange(n, torch::kFloat64) * 0.37 + static_cast<double>(rank) * 11.0 + salt).sin().view(shape);
}

// Rows rank r sends rank j: variable, sometimes zero.
int64_t send_count(int64_t r, int64_t j) { return (r + 2 * j) % 3 + (r == j ? 1 : 0); }

int64_t offset_of(int64_t r, int64_t j) {  // where r's rows for j start in r's send buffer
  int64_t o = 0;
  for (int64_t k = 0; k < j; ++k) o += send_count(r, k);
  return o;
}

int64_t sum_sends(int64_t r, int64_t world) { return offset_of(r, world); }

int failures = 0;
void check(bool ok, int64_t rank, const std::string& what) {
  if (!ok) {
    std::cerr << "rank " << rank << ": " << what << " is wrong\n";
    ++failures;
  }
}

bool same(const at::Tensor& a, const at::Tensor& b) { return a.sizes() == b.sizes() && torch::allclose(a, b, 0, 1e-12); }

void check_all_to_all(const Group& group, int64_t r, int64_t world) {
  std::vector<int64_t> send, expected_recv;
  for (int64_t j = 0; j < world; ++j) send.push_back(send_count(r, j));
  for (int64_t i = 0; i < world; ++i) expected_recv.push_back(send_count(i, r));
  const auto recv = parallel::exchange_counts(send, group);
  check(recv == expected_recv, r, "exchange_counts");

  const int64_t cols = 3;
  auto x = input_of(r, {sum_sends(r, world), cols}).requires_grad_(true);
  auto out = parallel::all_to_all_rows(x, send, recv, group);
  std::vector<at::Tensor> rows;
  for (int64_t i = 0; i < world; ++i)
    rows.push_back(input_of(i, {sum_sends(i, world), cols}).narrow(0, offset_of(i, r), send_count(i, r)));
  check(same(out.detach(), torch::cat(rows)), r, "all_to_all_rows output");

  // loss_r = sum(out_r * w_r): x_r's rows for j get the rows of w_j where they landed on j.
  auto loss = (out * input_of(r, out.sizes(), 5.0)).sum();
  loss.backward();
  std::vector<at::Tensor> grads;
  for (int64_t j = 0; j < world; ++j) {
    int64_t landed = 0;
    for (int64_t i = 0; i < r; ++i) landed += send_count(i, j);
    int64_t received = 0;
    for (int64_t i = 0; i < world; ++i) received += send_count(i, j);
    grads.push_back(input_of(j, {received, cols}, 5.0).narrow(0, landed, send_count(r, j)));
  }
  check(same(x.grad(), torch::cat(grads)), r, "all_to_all_rows gradient");
}

void check_gather_and_scatter(const Group& group, int64_t r, int64_t world) {
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < world; ++i) sizes.push_back(i + 1);
  int64_t all = 0;
  for (auto s : sizes) all += s;
  auto slice_of = [&](const at::Tensor& t, int64_t i) { return t.narrow(1, i * (i + 1) / 2, sizes[i]); };

  // Gather along dim 1: [2, r + 1, 3] -> [2, all, 3].
  auto x = input_of(r, {2, sizes[r], 3}).requires_grad_(true);
  auto gathered = parallel::all_gather_along(x, 1, sizes, group);
  std::vector<at::Tensor> parts;
  for (int64_t i = 0; i < world; ++i) parts.push_back(input_of(i, {2, sizes[i], 3}));
  check(same(gathered.detach(), torch::cat(parts, 1)), r, "all_gather_along output");
  (gathered * input_of(r, gathered.sizes(), 7.0)).sum().backward();
  auto expected = torch::zeros({2, sizes[r], 3}, torch::kFloat64);
  for (int64_t i = 0; i < world; ++i) expected += slice_of(input_of(i, {2, all, 3}, 7.0), r);
  check(same(x.grad(), expected), r, "all_gather_along gradient");

  // Reduce-scatter along dim -2: [2, all, 3] -> [2, r + 1, 3].
  auto y = input_of(r, {2, all, 3}, 3.0).requires_grad_(true);
  auto scattered = parallel::reduce_scatter_along(y, -2, sizes, group);
  auto sum = torch::zeros({2, sizes[r], 3}, torch::kFloat64);
  for (int64_t i = 0; i < world; ++i) sum += slice_of(input_of(i, {2, all, 3}, 3.0), r);
  check(same(scattered.detach(), sum), r, "reduce_scatter_along output");
  (scattered * input_of(r, scattered.sizes(), 9.0)).sum().backward();
  std::vector<at::Tensor> weights;
  for (int64_t j = 0; j < world; ++j) weights.push_back(input_of(j, {2, sizes[j], 3}, 9.0));
  check(same(y.grad(), torch::cat(weights, 1)), r, "reduce_scatter_along gradient");
}

void check_errors(const Group& group, int64_t r, int64_t world) {
  auto expect_error = [&](const std::function<void()>& f, const std::string& words) {
    try {
      f();
      check(false, r, "no error for " + words);
    } catch (const std::exception& e) {
      check(std::string(e.what()).find(words) != std::string::npos, r, "the error '" + std::string(e.what()) + "'");
    }
  };
  std::vector<int64_t> counts(static_cast<size_t>(world), 1);
  expect_error([&] { parallel::all_to_all_rows(torch::zeros({world + 1, 2}), counts, counts, group); },
               "the tensor has " + std::to_string(world + 1) + " rows but the send counts add up to " +
                   std::to_string(world));
  expect_error([&] { parallel::exchange_counts({1}, group); }, "1 counts for a group of " + std::to_string(world));
}

int run_worker() {
  const auto env = dist::DistEnv::from_env();
  dist::RendezvousOptions options;
  options.timeout = 30s;
  auto group = dist::init_gloo_group(env, options);
  check_all_to_all(group, env.rank, env.world_size);
  check_gather_and_scatter(group, env.rank, env.world_size);
  check_errors(group, env.rank, env.world_size);
  group->barrier()->wait();
  return failures == 0 ? 0 : 3;
}

const int kWorkerStatus = testing::run_as_worker_if("MM_TEST_COLLECTIVES_WORKER", run_worker);

void expect_right_on(int world) {
  ASSERT_TRUE(dist::gloo_available()) << "built without Gloo";
  testing::expect_ranks_succeed(world, "MM_TEST_COLLECTIVES_WORKER");
}

TEST(AutogradCollectives, TwoRanks) { expect_right_on(2); }
TEST(AutogradCollectives, ThreeRanks) { expect_right_on(3); }
TEST(AutogradCollectives, FourRanks) { expect_right_on(4); }

TEST(AutogradCollectives, OneProcessIsTheIdentity) {
  auto x = torch::randn({4, 3}, torch::kFloat64).requires_grad_(true);
  const Group none;
  EXPECT_TRUE(parallel::all_to_all_rows(x, {4}, {4}, none).is_same(x));
  EXPECT_TRUE(parallel::all_gather_along(x, 1, {3}, none).is_same(x));
  EXPECT_TRUE(parallel::reduce_scatter_along(x, 0, {4}, none).is_same(x));
  EXPECT_EQ(parallel::exchange_counts({4}, none), std::vector<int64_t>{4});
}

}  // namespace
}  // namespace mm
