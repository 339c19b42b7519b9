// Context parallelism's split of a sequence over the cp ranks of a mesh (nn/sequence_split.h):
// non-causal attention on a contiguous split, causal on the zig-zag split (per document), the
// attention by USP over cp = ulysses x ring (either of size 1: plain Ulysses or plain ring), and
// the gather back to sequence order over the whole cp group.
#pragma once
#include "mm/nn/sequence_split.h"
#include "mm/parallel/autograd_collectives.h"
#include "mm/parallel/device_mesh.h"

#include <string>

namespace mm::parallel {

// cp: all cp ranks, in cp rank order (ring index * ulysses + ulysses index); ulysses and ring:
// this rank's two groups within it (null when of size 1).
struct ContextParallelGroups {
  Group cp, ulysses, ring;
};

// The mesh's context-parallel groups for a model whose attention has `heads` heads (`whose`, e.g.
// "the decoder's", names them in the error): a Ulysses degree that does not divide them is refused
// before anything trains, naming parallel.cp_ulysses.
ContextParallelGroups context_parallel_groups(const DeviceMesh& mesh, int64_t heads, const std::string& whose);

SequenceSplitter sequence_splitter(const ContextParallelGroups& groups);

// Items dealt over the cp group as contiguous runs of about equal cost (so that the gathered rows
// are in item order as they come); fewer items than ranks: every rank encodes all of them.
ItemSplitter item_splitter(const ContextParallelGroups& groups);

// The contiguous deal behind item_splitter: rank r gets items [starts[r], starts[r + 1]); each
// run's cost is within one item's of total / ranks. Needs costs.size() >= ranks (each gets one).
std::vector<int64_t> contiguous_item_starts(const std::vector<int64_t>& costs, int64_t ranks);

}  // namespace mm::parallel
