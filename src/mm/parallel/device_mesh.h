// The ranks of a job laid out as a named grid, as torch's DeviceMesh: e.g. (dp_replicate=2,
// dp_shard=2) puts ranks 0,1 in one sharding group and 2,3 in another, and pairs 0-2 and 1-3
// for replication. Rank = row-major index of its coordinates. Dimensions not used yet (cp, tp,
// pp, ep) are size 1; each dimension of size > 1 gets a sub-group over the ranks that share every
// other coordinate. The groups carry tensors of the mesh's device: Gloo for a CPU mesh, NCCL for
// a CUDA one (sub-groups split from the NCCL world); a CUDA mesh also keeps a Gloo world for the
// host scalars (token counts, loss sums) that all_reduce_sum and barrier() carry. A one-process
// mesh has no groups at all. Several dimensions can also be flattened into one group (the ranks
// that share every coordinate outside them), as torch's DeviceMesh._flatten: FSDP cuts the
// non-expert parameters over dp_shard x ep, since expert parallelism borrows its ranks from the
// data-sharding ones (torchtitan's layout).
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mm/dist/process_group.h"

namespace mm::parallel {

// The mesh's dimensions, outermost first in a typical layout (torchtitan's names). Context
// parallelism is two of them: cp = cp_ring x cp_ulysses (USP; Ulysses innermost).
enum class MeshDim { pp, dp_replicate, dp_shard, cp_ring, cp_ulysses, tp, ep };
const char* to_string(MeshDim dim);  // "dp_shard", ...

// The ranks FSDP cuts the non-expert parameters over (and whose norms it sums): the data-sharding
// ranks, those an ep dimension took included, and the context-parallel ones (which hold parts of
// the same samples, so their gradients add up).
inline const std::vector<MeshDim> kDataShardDims{MeshDim::dp_shard, MeshDim::cp_ring, MeshDim::cp_ulysses, MeshDim::ep};
// The ranks that hold the same experts, which each expert is cut over: the data-sharding ranks
// but those of ep (dp_shard, and the context-parallel ranks, whose tokens of one sample reach the
// same experts).
inline const std::vector<MeshDim> kExpertShardDims{MeshDim::dp_shard, MeshDim::cp_ring, MeshDim::cp_ulysses};
// The ranks that split one sample's sequence (context parallelism), in cp rank order.
inline const std::vector<MeshDim> kContextParallelDims{MeshDim::cp_ring, MeshDim::cp_ulysses};
// The ranks that read different data: every dimension but the context-parallel ones.
inline const std::vector<MeshDim> kDataDims{MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::ep};

class DeviceMesh {
 public:
  using Dims = std::vector<std::pair<MeshDim, int64_t>>;

  // One process, every dimension of size 1 (no collectives are ever issued).
  DeviceMesh() = default;
  // Builds the groups for tensors on `device` (the CPU, or this rank's GPU). The product of the
  // sizes must equal the job's world size. With groups_of_one, dimensions of size 1 (and a world
  // of one) get groups too, of one rank: what runs sharded training's collective path on a machine
  // with one GPU (the GPU check) or one process (its CPU twin).
  // `flattened`: the sets of dimensions (two or more of size > 1 each) that also get one group.
  DeviceMesh(const dist::Rendezvous& job, Dims dims, c10::Device device = c10::Device(c10::kCPU),
             bool groups_of_one = false, std::vector<std::vector<MeshDim>> flattened = {});
  ~DeviceMesh();  // shuts NCCL groups down (sub-groups first)
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  bool is_main() const { return rank_ == 0; }  // the rank that logs and writes shared files

  int64_t size(MeshDim dim) const;        // 1 for a dimension not in the mesh
  int64_t coordinate(MeshDim dim) const;  // this rank's index along it (0 if absent)
  // Where the groups' tensors live.
  c10::Device device() const { return device_; }
  // The group along `dim` (its size ranks), or null when the size is 1 (unless groups_of_one).
  const c10::intrusive_ptr<c10d::Backend>& group(MeshDim dim) const;
  // The same over several dimensions at once: the product of their sizes, this rank's row-major
  // index over them (in the mesh's order), and their group: a single dimension's own when only
  // one of them has size > 1, else one the constructor flattened (an error names a missing one).
  int64_t size(const std::vector<MeshDim>& dims) const;
  int64_t coordinate(const std::vector<MeshDim>& dims) const;
  const c10::intrusive_ptr<c10d::Backend>& group(const std::vector<MeshDim>& dims) const;
  // All ranks of the job, for tensors on device(); null for one process.
  const c10::intrusive_ptr<c10d::Backend>& world() const { return world_; }
  const Dims& dims() const { return dims_; }
  std::string describe() const;  // "dp_replicate=2 x dp_shard=2"

  // Sums `values` over the whole job in place (a no-op for one process): host tensors through the
  // Gloo world, device tensors through the device's.
  void all_reduce_sum(at::Tensor& values) const;
  void barrier() const;  // on the host group

 private:
  Dims dims_;
  std::vector<int64_t> coordinates_;
  std::vector<c10::intrusive_ptr<c10d::Backend>> groups_;
  std::vector<std::pair<std::vector<MeshDim>, c10::intrusive_ptr<c10d::Backend>>> flattened_groups_;
  c10::intrusive_ptr<c10d::Backend> world_, host_world_;  // the same Gloo group on a CPU mesh
  c10::Device device_{c10::kCPU};
  int64_t rank_ = 0, world_size_ = 1;
};

}  // namespace mm::parallel
