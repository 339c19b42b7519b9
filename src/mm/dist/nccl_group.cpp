#include "mm/dist/nccl_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/cuda.h>
#ifdef MM_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>

#include "mm/core/error.h"

namespace mm::dist {
namespace {

// The checks every NCCL call shares: a GPU there, and this rank a member of `ranks`. Returns the
// rank's index in the group.
int member_index(const Rendezvous& job, const std::vector<int64_t>& ranks, const std::string& tag,
                 c10::Device device) {
  MM_CHECK(device.is_cuda() && device.has_index(), "NCCL group ", tag, ": needs a CUDA device with an index, got ",
           device.str());
  MM_CHECK(torch::cuda::is_available() && device.index() < static_cast<int>(torch::cuda::device_count()),
           "NCCL group ", tag, ": rank ", job.env.rank, " has no ", device.str(),
           " (libtorch sees no CUDA GPU or fewer): NCCL needs one GPU per rank");
  const auto me = std::find(ranks.begin(), ranks.end(), job.env.rank);
  MM_CHECK(me != ranks.end(), "NCCL group ", tag, ": rank ", job.env.rank, " is not a member");
  return static_cast<int>(me - ranks.begin());
}

c10::intrusive_ptr<c10d::Backend> make_group(const Rendezvous& job, const c10::intrusive_ptr<c10d::Backend>& parent,
                                             const std::vector<int64_t>& ranks, const std::string& tag,
                                             c10::Device device) {
  const int group_rank = member_index(job, ranks, tag, device);
#ifdef MM_HAVE_NCCL
  // High-priority streams: FSDP's all-gathers should not queue behind the compute kernels.
  auto options = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/true);
  options->timeout = job.options.timeout;
  options->group_name = "nccl/" + tag;  // names the group in the watchdog's messages
  for (const int64_t r : ranks) options->global_ranks_in_group.push_back(static_cast<uint64_t>(r));
  if (parent) {
    auto from = c10::dynamic_intrusive_pointer_cast<c10d::ProcessGroupNCCL>(parent);
    MM_CHECK(from, "NCCL group ", tag, ": the group to split from is not an NCCL group");
    options->split_from = from;
    // One color per partition: its first member (ranks of one dimension's partitions are
    // disjoint, so first members differ).
    options->split_color = static_cast<int>(ranks.front());
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>("mm/nccl/" + tag + "/", job.store);
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, group_rank, static_cast<int>(ranks.size()),
                                                             options);
    group->setBoundDeviceId(device);
    group->eagerConnectSingleDevice(device);
    return group;
  } catch (const std::exception& e) {
    fail("creating the NCCL process group ", tag, " on ", device.str(), " (rank ", job.env.rank, " of ",
         job.env.world_size, ", store ", job.env.master_addr, ":", job.env.master_port, ") failed: ", message_of(e));
  }
#else
  (void)group_rank;
  (void)parent;
  fail("NCCL group ", tag, ": this mmtrain was built without NCCL (a CPU torch, or the CUDA and NCCL headers were ",
       "not found at configure time: tests/reference/requirements.txt installs them beside the torch wheel)");
#endif
}

}  // namespace

bool nccl_available() {
#ifdef MM_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

c10::intrusive_ptr<c10d::Backend> new_nccl_world(const Rendezvous& job, c10::Device device) {
  std::vector<int64_t> all(static_cast<size_t>(job.env.world_size));
  for (int64_t r = 0; r < job.env.world_size; ++r) all[static_cast<size_t>(r)] = r;
  return make_group(job, nullptr, all, "world", device);
}

c10::intrusive_ptr<c10d::Backend> split_nccl_group(const Rendezvous& job, const c10::intrusive_ptr<c10d::Backend>& world,
                                                   const std::vector<int64_t>& ranks, const std::string& tag,
                                                   c10::Device device) {
  MM_CHECK(world, "NCCL group ", tag, ": no world group to split from");
  return make_group(job, world, ranks, tag, device);
}

void shutdown_nccl_group(const c10::intrusive_ptr<c10d::Backend>& group) {
  if (group) group->shutdown();
}

}  // namespace mm::dist
