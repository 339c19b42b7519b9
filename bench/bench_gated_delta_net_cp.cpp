// The Gated DeltaNet layer under context parallelism (no reference: transformers has none).
// Started as the cp ranks by `mmtrain launch --program` (alone: cp 1):
//   bench_gated_delta_net_cp THREADS STEPS
// One layer at the published Qwen3.5-9B shapes (bench_gated_delta_net.cpp's: hidden 4096; 16 key
// and 32 value heads of 128; conv kernel 4), forward + backward, fp32, chunk 64, over one causal
// sequence of 2048 tokens split over the ranks. Under cp the layer runs head-parallel: its
// projections on the rank's tokens, one all-to-all to the whole sequence for 1/cp of the heads
// (conv and delta rule there), one all-to-all back. Parameter gradients are not reduced between
// the ranks (FSDP would add its collectives). Rank 0 prints one JSON line: the median step (one
// warm-up, then STEPS), the time waiting in the all-to-alls, and every rank's peak RSS minus the
// RSS after the layer was built.
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_memory.h"
#include "bench_ranks.h"
#include "bench_timing.h"
#include "mm/nn/gated_delta_net.h"
#include "mm/parallel/autograd_collectives.h"
#include "mm/parallel/context_parallel.h"
#include "qwen3_5_9b_delta_net.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: bench_gated_delta_net_cp THREADS STEPS\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[1]));
  const int steps = std::stoi(argv[2]);
  const auto ranks = mm::bench::BenchRanks::join();
  mm::parallel::ContextParallelGroups groups;
  groups.cp = groups.ulysses = ranks.everyone;  // the split's attention (unused here): Ulysses over all
  torch::manual_seed(0);  // the same layer and inputs on every rank
  mm::GatedDeltaNet layer(mm::bench::qwen3_5_9b_delta_net());
  const int64_t hidden = layer->options().hidden_size;
  const int64_t seq = 2048;
  const auto whole = torch::randn({1, seq, hidden}) * 0.5;
  const auto upstream_whole = torch::randn({1, seq, hidden});
  std::shared_ptr<const mm::SequenceSplit> split;
  if (ranks.world > 1) split = mm::parallel::sequence_splitter(groups)({0, seq}, /*causal=*/true);
  const auto x = (split ? split->take(whole, 1) : whole).clone().requires_grad_(true);
  const auto upstream = split ? split->take(upstream_whole, 1) : upstream_whole;
  const double rss_before = mm::bench::rss_now_mb();
  std::vector<double> all_to_all;  // per step, the warm-up's first
  auto step = [&] {
    layer->zero_grad();
    layer->forward(x, {}, {}, nullptr, split.get()).backward(upstream);
    all_to_all.push_back(mm::parallel::take_exchange_seconds() * 1e3);
  };
  const double ms = mm::bench::median_ms(step, steps);
  double all_to_all_ms = 0;
  for (size_t i = 1; i < all_to_all.size(); ++i)
    all_to_all_ms += all_to_all[i] / static_cast<double>(all_to_all.size() - 1);
  const auto per_rank = ranks.from_every_rank(mm::bench::peak_rss_mb() - rss_before);
  if (ranks.rank != 0) return 0;
  nlohmann::ordered_json out{{"impl", "mmtrain"}, {"cp", ranks.world}, {"tokens", seq}, {"ms_per_step", ms},
                             {"all_to_all_wait_ms", all_to_all_ms}, {"tokens_per_s", seq * 1e3 / ms},
                             {"layer_rss_mb_per_rank", per_rank},
                             {"max_layer_rss_mb", *std::max_element(per_rank.begin(), per_rank.end())}};
  std::cout << out.dump() << "\n";
}
