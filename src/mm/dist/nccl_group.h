// NCCL process groups: the collectives on CUDA tensors (FSDP's all-gathers and reduce-scatters,
// DDP's all-reduces) through c10d's ProcessGroupNCCL, on the job's one TCPStore under their own
// prefixes, beside the Gloo groups that keep carrying host tensors (loss sums, token counts).
//
// As torch.distributed does with init_process_group(device_id=...): each group is bound to this
// rank's GPU and connected eagerly (a rank that cannot reach its peers fails here, not in the
// first step), sub-groups are cut from the world's communicator by ncclCommSplit, collectives run
// on NCCL's own high-priority streams ordered against the compute stream by events, and torch's
// NCCL watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING, on by default) ends a rank whose collective
// outlives the timeout, naming the group, the rank and the collective, so a dead peer ends every
// rank instead of hanging them. shutdown_nccl_group() destroys the communicators on a normal exit.
//
// Compiled in every build; where the build has no CUDA/NCCL headers (a CPU torch), or the machine
// no GPU, every call fails with a message that says so.
#pragma once
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>
#include <vector>

#include "mm/dist/process_group.h"

namespace mm::dist {

// Whether this build can make NCCL groups (a CUDA torch, and the CUDA and NCCL headers found at
// configure time).
bool nccl_available();

// The group over all ranks of `job`, bound to `device` (this rank's GPU, cuda:LOCAL_RANK as
// resolve_device binds it) and connected now. Every rank calls it.
c10::intrusive_ptr<c10d::Backend> new_nccl_world(const Rendezvous& job, c10::Device device);

// The sub-group over `ranks` (ascending global ranks; this rank among them), split from `world`
// (made by new_nccl_world) with ncclCommSplit. Collective over the whole world: every rank calls
// it in the same order, each with the partition it belongs to (e.g. one call per mesh
// dimension). `tag` names the group in errors; unique per partition.
c10::intrusive_ptr<c10d::Backend> split_nccl_group(const Rendezvous& job, const c10::intrusive_ptr<c10d::Backend>& world,
                                                   const std::vector<int64_t>& ranks, const std::string& tag,
                                                   c10::Device device);

// Waits for the group's pending collectives and destroys its communicators (sub-groups before
// the world they were split from). A no-op for a null group.
void shutdown_nccl_group(const c10::intrusive_ptr<c10d::Backend>& group);

}  // namespace mm::dist
