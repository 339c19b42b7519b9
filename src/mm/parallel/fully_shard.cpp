#include "mm/parallel/fully_shard.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "mm/core/error.h"
#include "mm/core/nvtx_range.h"
#include "mm/core/safetensors.h"
#include "mm/nn/clip_coefficient.h"

namespace mm::parallel {

struct FullyShardedModel::Param {
  std::string name;
  at::Tensor full;   // the module's tensor; storage freed while its unit is resharded
  at::Tensor local;  // sharded: this rank's padded rows (fp32 leaf); replicated: == full
  int64_t rows = 0;          // dim 0 of the whole parameter
  int64_t rows_per_shard = 0;
  int64_t local_numel = 0;   // rows_per_shard * (elements per row)
  const Space* space = nullptr;  // its unit's
};

struct FullyShardedModel::Unit {
  std::string name;
  torch::nn::Module* block = nullptr;
  Placement placement = Placement::shard;
  const Space* space = nullptr;  // the ranks it is cut over (when sharded)
  std::vector<Param> params;
  bool gathered = true;  // the module's tensors hold the whole parameters
  // An all-gather in flight (prefetched), with its input and output: both held until the compute
  // stream has waited for it (collective_streams.h).
  c10::intrusive_ptr<c10d::Work> gather_work;
  at::Tensor gather_in, gather_out;
  // A gradient reduction in flight, unpacked by finish_backward; its buffers held likewise.
  c10::intrusive_ptr<c10d::Work> reduce_work;
  at::Tensor reduce_in, reduce_out;
  bool backward_done = false;  // post_backward ran in this micro-batch
  std::function<void()> on_post_backward;  // what the unit's backward hook calls
};

namespace {

int64_t numel_per_row(const at::Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / std::max<int64_t>(t.size(0), 1); }

// Frees / re-allocates a tensor's storage in place: autograd and views keep referring to the same
// storage object, which is how a parameter saved for backward can be freed after forward and
// refilled before backward.
void free_storage(const at::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (storage->nbytes() == bytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

// Runs post_backward of a unit when autograd reaches the unit's input, i.e. after every
// gradient of the unit has been computed and accumulated (AccumulateGrad nodes run before any
// other ready node).
struct PostBackwardHook : torch::autograd::Function<PostBackwardHook> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor input, at::Tensor anchor,
                            std::function<void()>* callback) {
    (void)anchor;
    ctx->saved_data["callback"] = reinterpret_cast<int64_t>(callback);
    ctx->saved_data["input_requires_grad"] = input.requires_grad();
    return input.view_as(input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    (*reinterpret_cast<std::function<void()>*>(ctx->saved_data["callback"].toInt()))();
    const bool input_requires_grad = ctx->saved_data["input_requires_grad"].toBool();
    return {input_requires_grad ? grads[0] : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

FullyShardedModel::FullyShardedModel(std::vector<UnitSpec> specs, const DeviceMesh& mesh, ShardingOptions options,
                                     c10::Device compute_device, const NamedTensorList& weights,
                                     ExpertPlacement* experts)
    : mesh_(mesh),
      options_(options),
      compute_device_(compute_device),
      storage_device_(options.cpu_offload ? c10::Device(c10::kCPU) : compute_device),
      streams_(compute_device) {
  data_space_ = {mesh.group(kDataShardDims), mesh.coordinate(kDataShardDims), mesh.size(kDataShardDims)};
  expert_space_ = {mesh.group(kExpertShardDims), mesh.coordinate(kExpertShardDims), mesh.size(kExpertShardDims)};
  replicate_group_ = mesh.group(MeshDim::dp_replicate);
  dp_group_ = mesh.world();
  experts_ = experts;
  torch::NoGradGuard no_grad;
  for (auto& spec : specs) {
    Unit unit, expert_unit;
    unit.name = spec.name;
    unit.block = spec.block;
    unit.space = &data_space_;
    // No shard group (one shard) is no sharding: such a unit is replicated over all data-parallel
    // ranks. A group of one (DeviceMesh's groups_of_one) still runs the sharded path.
    unit.placement = data_space_.group ? spec.placement : Placement::replicate;
    // A block's local experts: always the sharded path (over a group of one when dp_shard = ep),
    // so that every ep rank writes its own experts' pieces.
    expert_unit.name = spec.name + " experts";
    expert_unit.block = spec.block;
    expert_unit.space = &expert_space_;
    expert_unit.placement = Placement::shard;
    for (auto& [name, tensor] : spec.params) {
      if (held_elsewhere(name)) continue;
      Param p;
      p.name = name;
      p.full = tensor;
      p.rows = tensor.dim() == 0 ? 1 : tensor.size(0);
      Unit& into = experts_ && experts_->holds(name) ? expert_unit : unit;
      p.space = into.space;
      into.params.push_back(std::move(p));
    }
    for (auto* u : {&unit, &expert_unit}) {
      if (u->params.empty()) continue;
      if (u->block) units_of_block_[u->block].push_back(units_.size());
      units_.push_back(std::move(*u));
    }
  }
  for (auto& unit : units_)
    for (auto& p : unit.params)
      MM_CHECK(param_by_name_.emplace(p.name, &p).second, "sharded model: parameter ", p.name, " is in two units");
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, tensor] : weights) {
    if (held_elsewhere(name)) continue;  // another rank's expert: never read here
    MM_CHECK(param_by_name_.count(name), "sharded model: the weights name ", name, ", which no unit holds");
    by_name.emplace(name, tensor);
    weight_bytes_total_ += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  }
  for (size_t i = 0; i < units_.size(); ++i) {
    units_[i].on_post_backward = [this, i] { post_backward(i); };
    shard_unit(units_[i], by_name);
  }
}

FullyShardedModel::~FullyShardedModel() {
  // Collectives still in flight write into buffers owned here.
  for (auto& unit : units_) {
    try {
      if (unit.gather_work) unit.gather_work->wait();
      if (unit.reduce_work) unit.reduce_work->wait();
    } catch (...) {
    }
  }
}

void FullyShardedModel::wait(const c10::intrusive_ptr<c10d::Work>& work) {
  const NvtxRange range("collective_wait");
  const auto start = std::chrono::steady_clock::now();
  work->wait();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double FullyShardedModel::take_wait_seconds() {
  const double seconds = wait_seconds_;
  wait_seconds_ = 0;
  return seconds;
}

bool FullyShardedModel::sharded(const Unit& unit) const { return unit.placement == Placement::shard; }

void FullyShardedModel::shard_unit(Unit& unit, const std::map<std::string, at::Tensor>& weights) {
  for (auto& p : unit.params) {
    const auto found = weights.find(p.name);
    const at::Tensor* from = found == weights.end() ? nullptr : &found->second;
    Layout layout;
    layout.shape = p.full.sizes().vec();
    layout.sharded = sharded(unit);
    const Space& space = *unit.space;
    layout.shards = layout.sharded ? space.count : 1;
    if (!sharded(unit)) {
      // The whole tensor, on the compute device: copied from the weights, or moved there when
      // the model was built elsewhere (adapters added to a model built on the CPU).
      if (from) {
        auto whole = torch::empty(p.full.sizes(), p.full.options().device(compute_device_));
        whole.copy_(*from);
        p.full.set_data(whole);
        weight_bytes_read_ += from->numel() * static_cast<int64_t>(from->element_size());
        release_mapped_pages(*from);
      } else if (p.full.device() != compute_device_) {
        p.full.set_data(p.full.to(compute_device_));
      }
      p.local = p.full;
      p.rows_per_shard = p.rows;
      p.local_numel = p.full.numel();
      layouts_[p.name] = layout;
      continue;
    }
    MM_CHECK(p.full.dim() >= 1, "sharding ", p.name, ": a 0-dim parameter cannot be cut on dim 0");
    p.rows_per_shard = (p.rows + space.count - 1) / space.count;
    p.local_numel = p.rows_per_shard * numel_per_row(p.full);
    layout.rows_per_shard = p.rows_per_shard;
    layouts_[p.name] = layout;
    // The fp32 master slice; the module's tensor becomes a param_dtype buffer of its own. From the
    // weights, only this rank's rows are read.
    p.local = local_slice(p.name, from ? *from : p.full).to(storage_device_, at::kFloat).requires_grad_(p.full.requires_grad());
    if (from) {
      const int64_t begin = std::min(p.rows, space.index * p.rows_per_shard);
      weight_bytes_read_ += std::min(p.rows - begin, p.rows_per_shard) * numel_per_row(*from) *
                            static_cast<int64_t>(from->element_size());
      release_mapped_pages(*from);
    }
    p.full.set_data(torch::empty(p.full.sizes(), p.full.options().dtype(options_.param_dtype).device(compute_device_)));
  }
  if (sharded(unit)) reshard(unit);
}

at::Tensor FullyShardedModel::local_slice(const std::string& name, const at::Tensor& whole) const {
  const Param& p = param(name);
  const auto& layout = layouts_.at(name);
  MM_CHECK(whole.sizes() == at::IntArrayRef(layout.shape), name, ": shape ", whole.sizes(), ", expected ",
           at::IntArrayRef(layout.shape));
  if (!layout.sharded) return whole;
  auto shape = whole.sizes().vec();
  shape[0] = p.rows_per_shard;
  auto out = torch::zeros(shape, whole.options().device(storage_device_));
  const int64_t begin = std::min(p.rows, p.space->index * p.rows_per_shard);
  const int64_t valid = std::min(p.rows - begin, p.rows_per_shard);
  if (valid > 0) out.narrow(0, 0, valid).copy_(whole.narrow(0, begin, valid));
  return out;
}

at::Tensor FullyShardedModel::checkpoint_piece(const std::string& name, const at::Tensor& local) const {
  const auto& layout = layouts_.at(name);
  if (!layout.sharded) return local;
  const Param& p = param(name);
  const int64_t begin = std::min(p.rows, p.space->index * p.rows_per_shard);
  return local.narrow(0, 0, std::min(p.rows - begin, p.rows_per_shard));
}

const FullyShardedModel::Param& FullyShardedModel::param(const std::string& name) const {
  const auto found = param_by_name_.find(name);
  MM_CHECK(found != param_by_name_.end(), "sharded model: no parameter named ", name);
  return *found->second;
}

bool FullyShardedModel::writes_whole(const std::string& name) const { return param(name).space->index == 0; }

NamedTensorList FullyShardedModel::optimizer_parameters() const {
  NamedTensorList out;
  for (const auto& unit : units_)
    for (const auto& p : unit.params)
      if (p.local.requires_grad()) out.emplace_back(p.name, p.local);
  return out;
}

// The FSDP2 order on an accelerator: the buffers are allocated on the compute stream; the copy-in
// stream waits for the compute stream (the optimizer's updates of the slices, and the buffers'
// earlier users), casts every slice into the flat input at once; the all-gather stream waits for
// the copy-in and gathers. The compute stream waits for the gather only when unshard needs it, so
// a prefetched gather overlaps the current unit's compute. On the CPU the same steps run in turn.
void FullyShardedModel::start_gather(Unit& unit) {
  if (unit.gathered || unit.gather_work || unit.gather_out.defined() || !sharded(unit)) return;
  int64_t total = 0;
  for (const auto& p : unit.params) total += p.local_numel;
  // Every parameter of a unit has the compute dtype (or, gathered for export, the masters').
  const auto options = unit.params.front().full.options().device(compute_device_);
  const Space& space = *unit.space;
  unit.gather_in = torch::empty({total}, options);
  std::vector<at::Tensor> slots, slices;
  int64_t offset = 0;
  for (const auto& p : unit.params) {
    slots.push_back(unit.gather_in.narrow(0, offset, p.local_numel).view(p.local.sizes()));
    slices.push_back(p.local.detach());
    offset += p.local_numel;
  }
  if (!space.group) {  // cut over one rank (experts with dp_shard = ep): the slice is the whole
    at::_foreach_copy_(slots, slices);
    unit.gather_out = unit.gather_in;
    return;
  }
  unit.gather_out = torch::empty({space.count * total}, options);
  streams_.wait_for_compute(SideStream::copy_in);
  streams_.run_on(SideStream::copy_in, [&] { at::_foreach_copy_(slots, slices, /*non_blocking=*/true); });
  streams_.order(SideStream::copy_in, SideStream::all_gather);
  streams_.run_on(SideStream::all_gather, [&] {
    const NvtxRange range("all_gather");
    c10d::AllgatherOptions gather;
    gather.asyncOp = streams_.collective_is_async();
    unit.gather_work = space.group->_allgather_base(unit.gather_out, unit.gather_in, gather);
  });
}

void FullyShardedModel::unshard(Unit& unit) {
  if (unit.gathered || !sharded(unit)) return;
  start_gather(unit);
  if (unit.gather_work) wait(unit.gather_work);
  unit.gather_work.reset();
  torch::NoGradGuard no_grad;
  int64_t total = 0;
  for (const auto& p : unit.params) total += p.local_numel;
  const int64_t count = unit.space->count;
  const auto gathered = unit.gather_out.view({count, total});
  int64_t offset = 0;
  for (auto& p : unit.params) {
    auto shape = p.full.sizes().vec();
    shape[0] = count * p.rows_per_shard;
    const auto whole = gathered.narrow(1, offset, p.local_numel).reshape(shape).narrow(0, 0, p.rows);
    allocate_storage(p.full);
    // variable_data(): a view with its own version counter, so the copy does not count as an
    // in-place change of a tensor autograd saved in forward.
    p.full.variable_data().copy_(whole);
    offset += p.local_numel;
  }
  unit.gather_in.reset();
  unit.gather_out.reset();
  unit.gathered = true;
}

void FullyShardedModel::reshard(Unit& unit) {
  if (!sharded(unit) || gathered_for_export_) return;
  if (unit.gather_work || unit.gather_out.defined()) {  // a prefetch nobody used
    if (unit.gather_work) wait(unit.gather_work);
    unit.gather_work.reset();
    unit.gather_in.reset();
    unit.gather_out.reset();
  }
  for (auto& p : unit.params) free_storage(p.full);
  unit.gathered = false;
}

void FullyShardedModel::prefetch_after(size_t unit, bool backward) {
  if (!options_.prefetch) return;
  const auto& order = forward_order_;
  const auto at = std::find(order.begin(), order.end(), unit);
  if (at == order.end()) return;
  if (backward) {
    if (at != order.begin()) start_gather(units_[*(at - 1)]);
  } else if (at + 1 != order.end()) {
    start_gather(units_[*(at + 1)]);
  }
}

BlockRunner FullyShardedModel::block_runner(BlockRunner inner) {
  return [this, inner](torch::nn::Module& block, const BlockFn& run, const at::Tensor& input) -> at::Tensor {
    const auto found = units_of_block_.find(&block);
    if (found == units_of_block_.end()) return inner ? inner(block, run, input) : run(input);
    const std::vector<size_t> indices = found->second;  // the block's unit, then its experts'
    const bool training = torch::GradMode::is_enabled();
    at::Tensor x = input;
    for (const size_t index : indices) {
      Unit& unit = units_[index];
      unshard(unit);
      if (training) {
        current_order_.push_back(index);
        prefetch_after(index, /*backward=*/false);
        // The anchor makes the hook part of the graph even when the input needs no gradient.
        auto anchor = torch::empty({0}, input.options().requires_grad(true));
        x = PostBackwardHook::apply(x, anchor, &unit.on_post_backward);
      }
    }
    auto output = inner ? inner(block, run, x) : run(x);
    if (training && output.requires_grad())
      output.register_hook([this, indices](const at::Tensor&) {
        for (const size_t index : indices) pre_backward(index);
      });
    if (training && options_.reshard_after_forward)
      for (const size_t index : indices) reshard(units_[index]);
    return output;
  };
}

void FullyShardedModel::begin_forward() {
  if (!current_order_.empty()) forward_order_ = current_order_;
  current_order_.clear();
  for (auto& unit : units_) {
    unit.backward_done = false;
    if (!unit.block) unshard(unit);
  }
}

void FullyShardedModel::pre_backward(size_t index) {
  unshard(units_[index]);
  prefetch_after(index, /*backward=*/true);
}

void FullyShardedModel::post_backward(size_t index) {
  Unit& unit = units_[index];
  unit.backward_done = true;
  if (sharded(unit) || sync_) reduce_gradients(unit);
  reshard(unit);
}

// Starts the unit's gradient reduction: the gradients are packed into one buffer per unit (cast
// to reduce_dtype, each padded to whole slices) and reduce-scattered over dp_shard (sharded) or
// all-reduced over every data-parallel rank (replicated). finish_backward unpacks the result.
void FullyShardedModel::reduce_gradients(Unit& unit) {
  MM_CHECK(!unit.reduce_work, "sharded model: unit ", unit.name, " reduced twice in one micro-batch");
  if (!sharded(unit) && !dp_group_) return;  // one process: the gradients are final
  std::vector<at::Tensor> pieces;
  for (auto& p : unit.params) {
    if (!p.full.requires_grad() && !p.local.requires_grad()) continue;
    at::Tensor grad = p.full.grad();
    if (!grad.defined()) grad = torch::zeros(p.full.sizes(), p.full.options());
    grad = grad.to(options_.reduce_dtype);
    if (sharded(unit)) {
      const int64_t count = unit.space->count;
      std::vector<int64_t> pad(2 * static_cast<size_t>(grad.dim()), 0);
      pad.back() = count * p.rows_per_shard - p.rows;  // rows at the end of dim 0
      grad = at::constant_pad_nd(grad, pad).reshape({count, p.local_numel});
    } else {
      grad = grad.reshape({1, -1});
    }
    pieces.push_back(grad);
    if (sharded(unit)) p.full.mutable_grad() = at::Tensor();  // the whole gradient is not kept
  }
  if (pieces.empty()) return;
  // Packed on the compute stream, where the gradients were made; reduced on the reduce stream
  // (waiting for that packing) while the backward goes on; unpacked by finish_backward once the
  // compute stream has waited for the reduction.
  unit.reduce_in = torch::cat(pieces, 1);  // [shards, packed local slices]
  const bool shard = sharded(unit);
  const auto& shard_group = unit.space->group;
  if (shard && !shard_group) {  // cut over one rank: the slice's gradient is final
    unit.reduce_out = unit.reduce_in.view({-1});
    return;
  }
  if (shard)
    unit.reduce_out = torch::empty({unit.reduce_in.size(1)}, unit.reduce_in.options());
  else
    unit.reduce_out = unit.reduce_in.view({-1});  // all-reduced in place
  streams_.wait_for_compute(SideStream::reduce);
  streams_.run_on(SideStream::reduce, [&] {
    if (shard) {
      const NvtxRange range("reduce_scatter");
      c10d::ReduceScatterOptions reduce;
      reduce.asyncOp = streams_.collective_is_async();
      auto flat = unit.reduce_in.view({-1});
      unit.reduce_work = shard_group->_reduce_scatter_base(unit.reduce_out, flat, reduce);
    } else {
      const NvtxRange range("all_reduce");
      c10d::AllreduceOptions reduce;
      reduce.asyncOp = streams_.collective_is_async();
      std::vector<at::Tensor> buffers{unit.reduce_out};
      unit.reduce_work = dp_group_->allreduce(buffers, reduce);
    }
  });
}

void FullyShardedModel::finish_backward() {
  // Units whose hook did not run (root units, blocks that got no gradient), in a fixed order so
  // every rank issues the same collectives.
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& unit = units_[i];
    if (!unit.backward_done && (sharded(unit) || sync_)) reduce_gradients(unit);
  }
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    if (!unit.reduce_out.defined()) continue;
    if (unit.reduce_work) wait(unit.reduce_work);
    unit.reduce_work.reset();
    int64_t offset = 0;
    for (auto& p : unit.params) {
      if (!p.full.requires_grad() && !p.local.requires_grad()) continue;
      const auto piece = unit.reduce_out.narrow(0, offset, p.local_numel).view(p.local.sizes());
      offset += p.local_numel;
      if (sharded(unit)) {
        auto converted = piece.to(storage_device_, p.local.scalar_type());
        if (p.local.grad().defined())
          p.local.mutable_grad().add_(converted);
        else
          p.local.mutable_grad() = converted.clone();
      } else {
        p.full.mutable_grad() = piece.to(p.full.scalar_type()).clone();
      }
    }
    unit.reduce_in.reset();
    unit.reduce_out.reset();
  }
  // HSDP: the replicas' summed slices, once per optimizer step.
  if (replicate_group_ && sync_) {
    for (auto& unit : units_) {
      if (!sharded(unit)) continue;
      std::vector<at::Tensor> grads;
      for (auto& p : unit.params)
        if (p.local.grad().defined()) grads.push_back(p.local.grad().reshape({-1}));
      if (grads.empty()) continue;
      // On the compute device: NCCL takes device tensors only (offloaded slices go there and back).
      std::vector<at::Tensor> buffers{torch::cat(grads).to(compute_device_, options_.reduce_dtype)};
      wait(replicate_group_->allreduce(buffers));
      int64_t offset = 0;
      for (auto& p : unit.params) {
        if (!p.local.grad().defined()) continue;
        p.local.mutable_grad().copy_(buffers[0].narrow(0, offset, p.local.numel()).view(p.local.sizes()));
        offset += p.local.numel();
      }
    }
  }
  gradient_bytes_ = 0;
  for (const auto& unit : units_)
    for (const auto& p : unit.params)
      if (p.local.grad().defined())
        gradient_bytes_ += p.local.grad().numel() * static_cast<int64_t>(p.local.grad().element_size());
  for (auto& unit : units_) reshard(unit);
}

at::Tensor FullyShardedModel::clip_grad_norm_tensor(double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> sharded_grads, replicated_grads;
  for (const auto& unit : units_)
    for (const auto& p : unit.params)
      if (p.local.grad().defined()) (sharded(unit) ? sharded_grads : replicated_grads).push_back(p.local.grad());
  // On the compute device, where the shard group's collectives run (NCCL on a GPU, so nothing is
  // read back to the host; Gloo on the CPU). Offloaded gradients' norms travel there as scalars.
  auto squares = [this](const std::vector<at::Tensor>& grads) {
    if (grads.empty()) return torch::zeros({}, torch::TensorOptions(torch::kFloat).device(compute_device_));
    return at::stack(at::_foreach_norm(grads, 2)).to(compute_device_, torch::kFloat).square().sum();
  };
  // Summed over the data-sharding ranks: each sharded element (experts' included, cut over
  // dp_shard and spread over ep) is on exactly one of them.
  auto sharded_sq = squares(sharded_grads).reshape({1});
  if (data_space_.group) {
    std::vector<at::Tensor> buffers{sharded_sq};
    wait(data_space_.group->allreduce(buffers));
  }
  const auto total = (sharded_sq[0] + squares(replicated_grads)).sqrt();
  if (max_norm > 0) {
    const auto coef = clip_coefficient(total, max_norm);  // 1 for a non-finite norm (found_inf skips the step)
    for (auto* grads : {&sharded_grads, &replicated_grads})
      if (!grads->empty()) at::_foreach_mul_(*grads, coef.to(grads->front().device()));
  }
  return total;
}

NamedTensorList FullyShardedModel::checkpoint_pieces() const {
  NamedTensorList out;
  for (const auto& unit : units_)
    for (const auto& p : unit.params) out.emplace_back(p.name, checkpoint_piece(p.name, p.local.detach()));
  return out;
}

void FullyShardedModel::load_whole(const NamedTensorList& whole, const std::string& source) {
  std::map<std::string, at::Tensor> by_name(whole.begin(), whole.end());
  torch::NoGradGuard no_grad;
  for (auto& unit : units_)
    for (auto& p : unit.params) {
      const auto found = by_name.find(p.name);
      MM_CHECK(found != by_name.end(), source, ": no tensor ", p.name);
      MM_CHECK(found->second.sizes() == at::IntArrayRef(layouts_.at(p.name).shape), source, ": ", p.name,
               " has shape ", found->second.sizes(), ", the model ", at::IntArrayRef(layouts_.at(p.name).shape));
      p.local.variable_data().copy_(local_slice(p.name, found->second));
    }
}

void FullyShardedModel::gather_all_for_export() {
  // The masters' dtype, not the compute dtype: what is exported is what the optimizer trained.
  for (auto& unit : units_) {
    if (!sharded(unit)) continue;
    reshard(unit);
    for (auto& p : unit.params)
      p.full.set_data(torch::empty(p.full.sizes(), p.full.options().dtype(p.local.scalar_type())));
    unshard(unit);
  }
  if (experts_) gather_experts(*experts_);
  gathered_for_export_ = true;
}

ShardedMemory FullyShardedModel::memory() const {
  ShardedMemory m;
  for (const auto& unit : units_)
    for (const auto& p : unit.params) m.parameter_bytes += p.local.numel() * static_cast<int64_t>(p.local.element_size());
  m.gradient_bytes = gradient_bytes_;
  return m;
}

}  // namespace mm::parallel
