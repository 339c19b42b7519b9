// Context-parallel attention in fp64 against scaled_dot_product_attention over the whole sequence:
// the blockwise pieces on one process (blocks merged by their log-sum-exp, each block's backward),
// then ring and Ulysses attention on 2, 3 and 4 real Gloo processes (this binary re-executed as
// each rank), and USP on 4 (2 x 2, also with heads that 4 does not divide, which Ulysses alone
// refuses): outputs and dq/dk/dv within 1e-10, causal (zig-zag split) and non-causal (contiguous
// split), packed documents, grouped-query attention, sequence lengths that 2 x ranks does not
// divide. Every rank builds the whole inputs (a function of the position), runs the operator on
// its tokens and compares its rows of the reference's output and gradients.
#include <torch/torch.h>

#include <functional>
#include <iostream>

#include "mm/dist/process_group.h"
#include "mm/nn/blockwise_attention.h"
#include "mm/parallel/ring_attention.h"
#include "mm/parallel/ulysses_attention.h"
#include "mm/parallel/usp_attention.h"
#include "rank_job.h"
#include "rank_processes.h"
#include "testing.h"

namespace mm {
namespace {

using parallel::Group;
using parallel::SequenceShard;

at::Tensor values(at::IntArrayRef shape, double salt) {
  const int64_t n = c10::multiply_integers(shape);
  return (torch::arange(n, torch::kFloat64) * 0.731 + salt).sin().view(shape);
}

struct Case {
  const char* name;
  std::vector<int64_t> cu_seqlens;
  bool causal;
  int64_t heads, kv_heads;
};

// The whole sequence's inputs and what attention over it gives, with the gradients of
// loss = sum(out * weight).
struct Reference {
  at::Tensor q, k, v, weight, out, dq, dk, dv;
};

Reference reference(const Case& c) {
  const int64_t b = 2, d = 5, length = c.cu_seqlens.back();
  Reference r;
  r.q = values({b, c.heads, length, d}, 0.1);
  r.k = values({b, c.kv_heads, length, d}, 1.3);
  r.v = values({b, c.kv_heads, length, d}, 2.7);
  r.weight = values({b, c.heads, length, d}, 4.2);
  auto q = r.q.clone().requires_grad_(true), k = r.k.clone().requires_grad_(true), v = r.v.clone().requires_grad_(true);
  const auto whole = parallel::contiguous_shards(c.cu_seqlens, 1).front();
  const auto mask = parallel::attention_allowed(whole, whole, c.causal);
  const int64_t group = c.heads / c.kv_heads;
  auto out = at::scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), mask,
                                              0.0, false, 0.5);
  (out * r.weight).sum().backward();
  r.out = out.detach(), r.dq = q.grad(), r.dk = k.grad(), r.dv = v.grad();
  return r;
}

at::Tensor rows_of(const at::Tensor& t, const SequenceShard& shard) {
  return t.index_select(2, torch::tensor(shard.positions, torch::kInt64));
}

double worst(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

using Operator = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                const std::vector<SequenceShard>&, bool, double, const Group&);
using Attend = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

// This rank's part (`mine`) of case c through `attend`; the largest difference to the reference.
double run_case(const Case& c, const SequenceShard& mine, const Attend& attend) {
  const auto r = reference(c);
  auto q = rows_of(r.q, mine).requires_grad_(true), k = rows_of(r.k, mine).requires_grad_(true),
       v = rows_of(r.v, mine).requires_grad_(true);
  auto out = attend(q, k, v);
  (out * rows_of(r.weight, mine)).sum().backward();
  return std::max({worst(out.detach(), rows_of(r.out, mine)), worst(q.grad(), rows_of(r.dq, mine)),
                   worst(k.grad(), rows_of(r.dk, mine)), worst(v.grad(), rows_of(r.dv, mine))});
}

std::vector<Case> cases(int64_t world) {
  const int64_t kv = world == 3 ? 3 : 2;  // Ulysses: a divisor or a multiple of the degree
  return {{"non-causal, contiguous", {0, 13}, false, 12, kv},
          {"causal, zig-zag", {0, 13}, true, 12, kv},
          {"causal, packed documents zig-zag", {0, 5, 14, 17}, true, 12, kv},
          {"non-causal, packed documents", {0, 6, 13}, false, 12, 12}};
}

int failures = 0;

void report(double err, int64_t rank, const std::string& what) {
  if (!(err < 1e-10)) {
    std::cerr << "rank " << rank << ": " << what << ": off by " << err << "\n";
    ++failures;
  }
}

// USP over 4 ranks as 2 (Ulysses, inner) x 2 (ring): rank i * 2 + j is in Ulysses group i and ring
// group j. Heads 6: the 4 ranks cannot split them by Ulysses alone.
void check_usp(const dist::Rendezvous& job, int64_t rank) {
  const int64_t ring_index = rank / 2, ulysses_index = rank % 2;
  const auto ulysses = dist::new_gloo_group(job, {2 * ring_index, 2 * ring_index + 1}, "usp_u" + std::to_string(ring_index));
  const auto ring = dist::new_gloo_group(job, {ulysses_index, ulysses_index + 2}, "usp_r" + std::to_string(ulysses_index));
  for (const auto& c : {Case{"USP causal, packed documents", {0, 7, 19}, true, 6, 2},
                        Case{"USP non-causal", {0, 15}, false, 6, 6}}) {
    const auto shards = c.causal ? parallel::zigzag_shards(c.cu_seqlens, 4) : parallel::contiguous_shards(c.cu_seqlens, 4);
    report(run_case(c, shards[static_cast<size_t>(rank)],
                    [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                      return parallel::usp_attention(q, k, v, shards, c.causal, 0.5, ulysses, ring);
                    }),
           rank, c.name);
  }
}

int run_worker() {
  const auto [env, job, group] = testing::join_rank_job();
  const int64_t world = env.world_size, rank = env.rank;
  if (world == 4) check_usp(job, rank);
  for (const auto& c : cases(world)) {
    const auto shards = c.causal ? parallel::zigzag_shards(c.cu_seqlens, world)
                                 : parallel::contiguous_shards(c.cu_seqlens, world);
    for (const auto& [name, op] : {std::pair<const char*, Operator>{"ring", parallel::ring_attention},
                                   std::pair<const char*, Operator>{"ulysses", parallel::ulysses_attention}}) {
      report(run_case(c, shards[static_cast<size_t>(rank)],
                      [&, op = op](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                        return op(q, k, v, shards, c.causal, 0.5, group);
                      }),
             rank, std::string(name) + " attention, " + c.name);
    }
  }
  // A degree that does not divide the heads is refused, naming both.
  try {
    const auto shards = parallel::contiguous_shards({0, 8}, world);
    const auto x = torch::zeros({1, world + 1, shards[static_cast<size_t>(rank)].size(), 4}, torch::kFloat64);
    parallel::ulysses_attention(x, x, x, shards, false, 0.5, group);
    std::cerr << "rank " << rank << ": no refusal of " << world + 1 << " heads\n";
    ++failures;
  } catch (const std::exception& e) {
    const std::string expected = "the degree " + std::to_string(world) + " does not divide the " +
                                 std::to_string(world + 1) + " attention heads";
    if (std::string(e.what()).find(expected) == std::string::npos) {
      std::cerr << "rank " << rank << ": the refusal says: " << e.what() << "\n";
      ++failures;
    }
  }
  group->barrier()->wait();
  return failures == 0 ? 0 : 3;
}

const int kWorkerStatus = testing::run_as_worker_if("MM_TEST_CP_ATTENTION_WORKER", run_worker);

void expect_right_on(int world) {
  ASSERT_TRUE(dist::gloo_available()) << "built without Gloo";
  testing::expect_ranks_succeed(world, "MM_TEST_CP_ATTENTION_WORKER");
}

TEST(ContextParallelAttention, TwoRanks) { expect_right_on(2); }
TEST(ContextParallelAttention, ThreeRanks) { expect_right_on(3); }
TEST(ContextParallelAttention, FourRanks) { expect_right_on(4); }

// One process: the key blocks' parts merged by their log-sum-exp, and each block's backward summed,
// equal attention over all keys (SDPA and autograd through it).
TEST(BlockwiseAttention, BlocksMergedByTheirLogSumExpEqualAttentionOverAllKeys) {
  for (const bool causal : {false, true}) {
    const Case c{"blocks", {0, 4, 11}, causal, 6, 3};
    const auto r = reference(c);
    const auto whole = parallel::contiguous_shards(c.cu_seqlens, 1).front();
    const auto blocks = parallel::contiguous_shards(c.cu_seqlens, 3);
    AttentionPart total;
    for (const auto& block : blocks) {
      auto part = attention_with_lse(r.q, rows_of(r.k, block), rows_of(r.v, block),
                                     parallel::attention_allowed(whole, block, causal), 0.5);
      total = total.out.defined() ? merge_attention_parts(total, part) : part;
    }
    EXPECT_LT(worst(total.out, r.out), 1e-12) << "causal " << causal;
    auto dq = torch::zeros_like(r.q);
    std::vector<at::Tensor> dk, dv;
    for (const auto& block : blocks) {
      const auto g = attention_block_backward(r.q, rows_of(r.k, block), rows_of(r.v, block),
                                              parallel::attention_allowed(whole, block, causal), 0.5, total.lse,
                                              total.out, r.weight);
      dq += g.dq;
      dk.push_back(g.dk), dv.push_back(g.dv);
    }
    EXPECT_LT(worst(dq, r.dq), 1e-12);
    EXPECT_LT(worst(torch::cat(dk, 2), r.dk), 1e-12);
    EXPECT_LT(worst(torch::cat(dv, 2), r.dv), 1e-12);
  }
}

// A block no query may see leaves its rows at 0 with lse -inf, and merging it changes nothing.
TEST(BlockwiseAttention, ABlockSeenByNoQueryMergesAsNothing) {
  const auto q = values({1, 2, 3, 4}, 0.2), k = values({1, 2, 5, 4}, 0.9), v = values({1, 2, 5, 4}, 1.7);
  const auto none = torch::zeros({3, 5}, torch::kBool);
  const auto empty = attention_with_lse(q, k, v, none, 0.5);
  EXPECT_TRUE(torch::equal(empty.out, torch::zeros_like(empty.out)));
  EXPECT_TRUE(torch::isneginf(empty.lse).all().item<bool>());
  const auto full = attention_with_lse(q, k, v, {}, 0.5);
  const auto merged = merge_attention_parts(full, empty);
  EXPECT_LT(worst(merged.out, full.out), 1e-15);
  EXPECT_LT(worst(merged.lse, full.lse), 1e-15);
}

TEST(SequenceShards, ZigZagKeepsChunksRAndTwoPMinusOneMinusROfEachDocument) {
  const auto shards = parallel::zigzag_shards({0, 8, 13}, 2);
  // Document 0 (8 tokens) in 4 chunks of 2; document 1 (5 tokens) in chunks of 2, 1, 1, 1.
  EXPECT_EQ(shards[0].positions, (std::vector<int64_t>{0, 1, 6, 7, 8, 9, 12}));
  EXPECT_EQ(shards[1].positions, (std::vector<int64_t>{2, 3, 4, 5, 10, 11}));
  EXPECT_EQ(shards[0].documents, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(parallel::contiguous_shards({0, 5}, 2)[1].positions, (std::vector<int64_t>{3, 4}));
  EXPECT_THROW_MSG(parallel::zigzag_shards({0, 4, 4}, 2), "cu_seqlens must increase strictly");
}

TEST(ContextParallelAttention, OneProcessIsPlainAttention) {
  const Case c{"one", {0, 4, 9}, true, 4, 2};
  const auto shards = parallel::zigzag_shards(c.cu_seqlens, 1);
  for (const Operator op : {Operator(parallel::ring_attention), Operator(parallel::ulysses_attention)})
    EXPECT_LT(run_case(c, shards[0], [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                return op(q, k, v, shards, c.causal, 0.5, Group());
              }),
              1e-12);
  EXPECT_LT(run_case(c, shards[0], [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
              return parallel::usp_attention(q, k, v, shards, c.causal, 0.5, Group(), Group());
            }),
            1e-12);
}

}  // namespace
}  // namespace mm
