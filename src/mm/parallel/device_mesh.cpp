#include "mm/parallel/device_mesh.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "mm/core/error.h"
#include "mm/dist/nccl_group.h"

namespace mm::parallel {
namespace {

const c10::intrusive_ptr<c10d::Backend> kNoGroup;

}  // namespace

const char* to_string(MeshDim dim) {
  switch (dim) {
    case MeshDim::pp: return "pp";
    case MeshDim::dp_replicate: return "dp_replicate";
    case MeshDim::dp_shard: return "dp_shard";
    case MeshDim::cp_ring: return "cp_ring";
    case MeshDim::cp_ulysses: return "cp_ulysses";
    case MeshDim::tp: return "tp";
    case MeshDim::ep: return "ep";
  }
  return "?";
}

DeviceMesh::DeviceMesh(const dist::Rendezvous& job, Dims dims, c10::Device device, bool groups_of_one,
                       std::vector<std::vector<MeshDim>> flattened)
    : dims_(std::move(dims)), device_(device), rank_(job.env.rank), world_size_(job.env.world_size) {
  MM_CHECK(device.is_cpu() || device.is_cuda(), "device mesh: no collectives for ", device.str());
  int64_t product = 1;
  for (const auto& [dim, size] : dims_) {
    MM_CHECK(size >= 1, "device mesh: dimension ", to_string(dim), " has size ", size);
    product *= size;
  }
  MM_CHECK(product == world_size_, "device mesh ", describe(), " holds ", product, " ranks but WORLD_SIZE is ",
           world_size_);
  // Row-major coordinates: the last dimension varies fastest.
  coordinates_.assign(dims_.size(), 0);
  int64_t rest = rank_;
  for (size_t d = dims_.size(); d-- > 0;) {
    coordinates_[d] = rest % dims_[d].second;
    rest /= dims_[d].second;
  }
  groups_.resize(dims_.size());
  if (world_size_ == 1 && !groups_of_one) return;
  std::vector<int64_t> all(static_cast<size_t>(world_size_));
  for (int64_t r = 0; r < world_size_; ++r) all[static_cast<size_t>(r)] = r;
  host_world_ = dist::new_gloo_group(job, all, "world");
  world_ = device.is_cuda() ? dist::new_nccl_world(job, device) : host_world_;
  // The group along d: every rank whose other coordinates equal ours, in order along d.
  std::vector<int64_t> strides(dims_.size(), 1);
  for (size_t d = dims_.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * dims_[d + 1].second;
  for (size_t d = 0; d < dims_.size(); ++d) {
    const int64_t size = dims_[d].second;
    if (size == 1 && !groups_of_one) continue;
    const int64_t first = rank_ - coordinates_[d] * strides[d];
    std::vector<int64_t> members;
    for (int64_t i = 0; i < size; ++i) members.push_back(first + i * strides[d]);
    std::string tag = to_string(dims_[d].first);
    for (auto m : members) tag += "-" + std::to_string(m);
    groups_[d] = device.is_cuda() ? dist::split_nccl_group(job, world_, members, tag, device)
                                  : dist::new_gloo_group(job, members, tag);
  }
  // A flattened group: every rank whose coordinates outside `set` equal ours, in rank order (which
  // is row-major over the set's dimensions in the mesh's order).
  for (auto& set : flattened) {
    int64_t wide = 0;
    for (auto dim : set) wide += size(dim) > 1 ? 1 : 0;
    MM_CHECK(wide >= 2, "device mesh: flattening ", set.size(), " dimensions of which ", wide, " have size > 1");
    auto outside = [&](int64_t rank) {
      std::vector<int64_t> coords;
      for (size_t d = dims_.size(); d-- > 0;) {
        const bool in_set = std::find(set.begin(), set.end(), dims_[d].first) != set.end();
        if (!in_set) coords.push_back(rank / strides[d] % dims_[d].second);
      }
      return coords;
    };
    std::vector<int64_t> members;
    std::string tag;
    for (auto dim : set) tag += std::string(tag.empty() ? "" : "_") + to_string(dim);
    for (int64_t r = 0; r < world_size_; ++r)
      if (outside(r) == outside(rank_)) {
        members.push_back(r);
        tag += "-" + std::to_string(r);
      }
    auto group = device.is_cuda() ? dist::split_nccl_group(job, world_, members, tag, device)
                                  : dist::new_gloo_group(job, members, tag);
    flattened_groups_.emplace_back(std::move(set), std::move(group));
  }
}

DeviceMesh::~DeviceMesh() {
  if (!device_.is_cuda()) return;
  try {
    for (const auto& [_, group] : flattened_groups_) dist::shutdown_nccl_group(group);
    for (const auto& group : groups_) dist::shutdown_nccl_group(group);
    dist::shutdown_nccl_group(world_);
  } catch (const std::exception&) {  // a failing peer already ended in an error of its own
  }
}

int64_t DeviceMesh::size(MeshDim dim) const {
  for (const auto& [d, size] : dims_)
    if (d == dim) return size;
  return 1;
}

int64_t DeviceMesh::coordinate(MeshDim dim) const {
  for (size_t d = 0; d < dims_.size(); ++d)
    if (dims_[d].first == dim) return coordinates_[d];
  return 0;
}

const c10::intrusive_ptr<c10d::Backend>& DeviceMesh::group(MeshDim dim) const {
  for (size_t d = 0; d < dims_.size(); ++d)
    if (dims_[d].first == dim) return groups_[d];
  return kNoGroup;
}

int64_t DeviceMesh::size(const std::vector<MeshDim>& dims) const {
  int64_t product = 1;
  for (auto dim : dims) product *= size(dim);
  return product;
}

int64_t DeviceMesh::coordinate(const std::vector<MeshDim>& dims) const {
  int64_t index = 0;
  for (const auto& [dim, size] : dims_)
    if (std::find(dims.begin(), dims.end(), dim) != dims.end()) index = index * size + coordinate(dim);
  return index;
}

const c10::intrusive_ptr<c10d::Backend>& DeviceMesh::group(const std::vector<MeshDim>& dims) const {
  std::vector<MeshDim> wide;
  for (auto dim : dims)
    if (size(dim) > 1) wide.push_back(dim);
  if (wide.empty()) {  // groups of one (or none): the first dimension present in the mesh
    for (auto dim : dims)
      if (group(dim)) return group(dim);
    return kNoGroup;
  }
  if (wide.size() == 1) return group(wide.front());
  for (const auto& [set, group] : flattened_groups_) {
    bool same = set.size() == dims.size();
    for (auto dim : dims) same = same && std::find(set.begin(), set.end(), dim) != set.end();
    if (same) return group;
  }
  std::string names;
  for (auto dim : dims) names += std::string(names.empty() ? "" : " x ") + to_string(dim);
  fail("device mesh ", describe(), ": no flattened group over ", names);
}

std::string DeviceMesh::describe() const {
  std::string out;
  for (const auto& [dim, size] : dims_)
    out += (out.empty() ? "" : " x ") + std::string(to_string(dim)) + "=" + std::to_string(size);
  return out.empty() ? "one process" : out;
}

void DeviceMesh::all_reduce_sum(at::Tensor& values) const {
  if (!world_) return;
  std::vector<at::Tensor> buffers{values};
  (values.is_cpu() ? host_world_ : world_)->allreduce(buffers)->wait();
}

void DeviceMesh::barrier() const {
  if (host_world_) host_world_->barrier()->wait();
}

}  // namespace mm::parallel
