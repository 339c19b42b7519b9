// FSDP2-style sharded data parallelism, on c10d collectives.
//
// A model is cut into units: each transformer block is one (it runs through the models'
// BlockRunner hook), and the parameters outside every block form "root" units (embeddings, final
// norm, head; the vision patch embedding and merger). A unit is either
//  - sharded over the mesh's dp_shard dimension: every parameter is cut on dim 0 into equal
//    slices (the last ones zero-padded), this rank keeps its slice as an fp32 leaf tensor (what
//    the optimizer updates), and the module's own tensor only holds the gathered parameter while
//    the unit computes: all-gathered before its forward (the next unit's gather is prefetched
//    meanwhile), freed after it (reshard_after_forward), gathered again before its backward,
//    its gradient reduce-scattered right after its backward and freed; with dp_replicate > 1
//    (HSDP) the reduced slices are also all-reduced over the replicas; or
//  - replicated: the module's tensor is the parameter, and its gradient is all-reduced over all
//    data-parallel ranks once per optimizer step (plain DDP, bucketed by unit).
// The module's parameter tensors stay the same objects the model code uses; sharding frees and
// re-allocates their storage (as FSDP2 does), so the models need no change. On a GPU the copy-in,
// the all-gathers and the reductions run on side streams of their own, ordered by events, with
// their buffers held until the compute stream waited for them (collective_streams.h); parameters
// are cast to param_dtype in the copy-in and gradients to reduce_dtype before they are reduced.
//
// With expert parallelism (expert_parallel.h) the non-expert parameters are cut over the flattened
// dp_shard x ep ranks (kDataShardDims), and each block's local experts form a unit of their own,
// gathered and reduced with the block but cut over dp_shard (x cp: kExpertShardDims, the ranks
// that hold the same experts: torchtitan's efsdp), and never replicated across ep; other ranks'
// experts are not held at all.
//
// Contract: all ranks run the same units in the same order in every micro-batch (as with torch's
// FSDP); e.g. a text-only micro-batch on one rank while another has images would stall the
// sharded vision blocks' all-gathers until the timeout.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mm/parallel/collective_streams.h"
#include "mm/parallel/device_mesh.h"
#include "mm/parallel/expert_parallel.h"
#include "mm/nn/block_runner.h"
#include "mm/nn/sharding_plan.h"

namespace mm::parallel {

using NamedTensorList = std::vector<std::pair<std::string, at::Tensor>>;

// A model's plan (nn/sharding_plan.h) names its units and their placement.
using Placement = ShardPlacement;
using UnitSpec = ShardUnit;

struct ShardingOptions {
  bool reshard_after_forward = true;     // free gathered blocks after forward, gather again in backward
  bool prefetch = true;                  // start the next unit's all-gather before this one computes
  at::ScalarType param_dtype = at::kFloat;   // dtype blocks compute in (bf16: mixed precision)
  at::ScalarType reduce_dtype = at::kFloat;  // dtype gradients are summed in
  bool cpu_offload = false;  // sharded parameters, their gradients (and so the optimizer) on the CPU
};

// Bytes this rank holds between steps.
struct ShardedMemory {
  int64_t parameter_bytes = 0;  // local slices (sharded) + whole tensors (replicated)
  int64_t gradient_bytes = 0;   // local gradients after the last finish_backward
};

class FullyShardedModel {
 public:
  // Shards the units' parameters (their values must already be equal on every rank, e.g. the
  // same init seed or checkpoint) and places them on `compute_device`. `weights` (by parameter
  // name, e.g. from_pretrained_unloaded's views of the mapped checkpoint) give the values of the
  // parameters they name instead: each rank copies only the rows of its own slices from them (and
  // whole tensors for replicated units), so a model too big for one rank loads on several; the
  // module's own tensors of those parameters are never read.
  // `experts` (apply_expert_parallel's, when the mesh has an ep dimension): which parameters are
  // experts, this rank's and others' (those are skipped, also in `weights`). Kept by reference.
  FullyShardedModel(std::vector<UnitSpec> units, const DeviceMesh& mesh, ShardingOptions options,
                    c10::Device compute_device, const NamedTensorList& weights = {},
                    ExpertPlacement* experts = nullptr);
  ~FullyShardedModel();
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;

  // The tensors an optimizer updates, by checkpoint name: local slices of sharded parameters,
  // the parameters themselves when replicated. Only those that require grad.
  NamedTensorList optimizer_parameters() const;

  // A runner that gathers and reshards the block's unit around `inner` (e.g. recomputation),
  // or around the block itself when `inner` is null.
  BlockRunner block_runner(BlockRunner inner);

  // Per micro-batch: begin_forward() before the model's forward (gathers the root units),
  // finish_backward() after backward (reduces what is left, waits for every reduction, frees
  // every gathered parameter). With gradient sync off, replicated units keep their local
  // gradients for a later micro-batch to reduce (the last of a step must sync).
  void set_requires_gradient_sync(bool sync) { sync_ = sync; }
  void begin_forward();
  void finish_backward();

  // Global L2 norm of all gradients (each element counted once over the job), and clipping to
  // max_norm when > 0 (a non-finite norm leaves the grads). Same arithmetic as
  // torch.nn.utils.clip_grad_norm_ up to summation order. A float32 scalar on the compute device,
  // not read on the host here.
  at::Tensor clip_grad_norm_tensor(double max_norm);

  // ---- checkpoints ----
  // How a checkpoint stores each tensor: whole, or cut into `shards` row ranges of
  // `rows_per_shard` (the last ones shorter or empty).
  struct Layout {
    std::vector<int64_t> shape;
    bool sharded = false;
    int64_t rows_per_shard = 0, shards = 1;
  };
  const std::map<std::string, Layout>& layouts() const { return layouts_; }
  // This rank's slice index (the checkpoint file it writes) and the slice count, over the
  // data-sharding ranks.
  int64_t shard_index() const { return data_space_.index; }
  int64_t shard_count() const { return data_space_.count; }
  // Whether this rank writes parameter `name`'s whole tensors into the checkpoint (those not cut
  // into rows, e.g. its optimizer step count): slice 0 for all but experts, whose owner's first
  // slice writes them.
  bool writes_whole(const std::string& name) const;
  // Whether `name` is another rank's expert (not held here, so not in this rank's state).
  bool held_elsewhere(const std::string& name) const { return experts_ && experts_->elsewhere(name); }
  // Those parameters, each with the local expert parameter laid out as it is: (theirs, ours).
  std::vector<std::pair<std::string, std::string>> experts_held_elsewhere() const {
    return experts_ ? experts_->counterparts() : std::vector<std::pair<std::string, std::string>>{};
  }
  // This rank's piece of `tensor` (a parameter's local slice or optimizer state shaped like it):
  // the unpadded rows for sharded parameters, the tensor itself when replicated.
  at::Tensor checkpoint_piece(const std::string& name, const at::Tensor& local) const;
  // The local (padded) slice of a whole tensor shaped like parameter `name`.
  at::Tensor local_slice(const std::string& name, const at::Tensor& whole) const;
  // This rank's parameters as checkpoint pieces.
  NamedTensorList checkpoint_pieces() const;
  // Sets every parameter from whole tensors by name (each must be present, shape checked).
  void load_whole(const NamedTensorList& whole, const std::string& source);
  // Gathers every sharded unit in its masters' dtype (fp32) and keeps it gathered, and every
  // other rank's experts too: the module holds all parameters, as before sharding (for export and
  // evaluation after training). Collective; the model trains no further afterwards.
  void gather_all_for_export();

  ShardedMemory memory() const;
  // Bytes this rank copied from the constructor's `weights` (in their dtype), and their total:
  // about 1/N of it under FSDP over N ranks.
  int64_t weight_bytes_read() const { return weight_bytes_read_; }
  int64_t weight_bytes_total() const { return weight_bytes_total_; }
  // Seconds this rank spent blocked on collectives since the last call (the part of
  // communication that computation did not hide).
  double take_wait_seconds();
  const DeviceMesh& mesh() const { return mesh_; }

 private:
  struct Param;
  struct Unit;
  // Ranks a unit is cut over: its group (null for one), this rank's index and their count.
  struct Space {
    c10::intrusive_ptr<c10d::Backend> group;
    int64_t index = 0, count = 1;
  };

  void shard_unit(Unit& unit, const std::map<std::string, at::Tensor>& weights);
  void start_gather(Unit& unit);
  void unshard(Unit& unit);  // waits for a started gather or gathers now
  void reshard(Unit& unit);
  void pre_backward(size_t unit);
  void post_backward(size_t unit);
  void reduce_gradients(Unit& unit);
  void prefetch_after(size_t unit, bool backward);
  const Param& param(const std::string& name) const;
  bool sharded(const Unit& unit) const;
  void wait(const c10::intrusive_ptr<c10d::Work>& work);

  const DeviceMesh& mesh_;
  ShardingOptions options_;
  c10::Device compute_device_, storage_device_;
  CollectiveStreams streams_;
  c10::intrusive_ptr<c10d::Backend> replicate_group_, dp_group_;
  Space data_space_, expert_space_;  // everything but experts; the experts (kExpertShardDims)
  ExpertPlacement* experts_ = nullptr;
  std::vector<Unit> units_;
  std::map<torch::nn::Module*, std::vector<size_t>> units_of_block_;  // the block's, then its experts'
  std::map<std::string, const Param*> param_by_name_;
  std::map<std::string, Layout> layouts_;
  std::vector<size_t> forward_order_, current_order_;  // block units in the order forward runs them
  bool sync_ = true;
  bool gathered_for_export_ = false;
  double wait_seconds_ = 0;
  int64_t gradient_bytes_ = 0;
  int64_t weight_bytes_read_ = 0, weight_bytes_total_ = 0;
};

}  // namespace mm::parallel
