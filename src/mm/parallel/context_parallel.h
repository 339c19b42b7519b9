// Context parallelism's split of a sequence over the cp ranks of a mesh (nn/sequence_split.h):
// non-causal attention on a contiguous split, causal on the zig-zag split (per document), the
// attention by USP over cp = ulysses x ring (either of size 1: plain Ulysses or plain ring), and
// the gather back to sequence order over the whole cp group.
#pragma once
#include "mm/nn/sequence_split.h"
#include "mm/parallel/autograd_collectives.h"

namespace mm::parallel {

// cp: all cp ranks, in cp rank order (ring index * ulysses + ulysses index); ulysses and ring:
// this rank's two groups within it (null when of size 1).
struct ContextParallelGroups {
  Group cp, ulysses, ring;
};

SequenceSplitter sequence_splitter(const ContextParallelGroups& groups);

}  // namespace mm::parallel
