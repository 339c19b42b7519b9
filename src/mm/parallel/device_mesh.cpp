#include "mm/parallel/device_mesh.h"

#include <ATen/ATen.h>

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
    case MeshDim::cp: return "cp";
    case MeshDim::tp: return "tp";
    case MeshDim::ep: return "ep";
  }
  return "?";
}

DeviceMesh::DeviceMesh(const dist::Rendezvous& job, Dims dims, c10::Device device, bool groups_of_one)
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
}

DeviceMesh::~DeviceMesh() {
  if (!device_.is_cuda()) return;
  try {
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
