// Which tokens of one sequence each rank of a context-parallel group holds. A rank's tokens need
// not be contiguous: for causal attention each document is cut into 2 x ranks chunks and rank r
// keeps chunks r and 2 x ranks - 1 - r (the zig-zag split of Megatron and torch's context parallel),
// so that every rank's queries see about as many keys. The attention operators (ring, Ulysses)
// decide who sees whom from these positions and documents alone, so any split is computed exactly,
// and a length that does not divide is only unbalanced by a token.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace mm::parallel {

struct SequenceShard {
  std::vector<int64_t> positions;  // each local token's index in the whole (packed) sequence
  std::vector<int64_t> documents;  // each local token's document (packed rows; all 0 otherwise)

  int64_t size() const { return static_cast<int64_t>(positions.size()); }
};

// cu_seqlens: the documents' boundaries [0, end of document 0, ..., length] ({0, length} for one).
// Contiguous: rank r keeps the r-th of `ranks` near-equal runs of the whole sequence (balanced
// for non-causal attention: Wan's DiT).
std::vector<SequenceShard> contiguous_shards(const std::vector<int64_t>& cu_seqlens, int64_t ranks);
// Zig-zag per document (balanced for causal attention, packed or not).
std::vector<SequenceShard> zigzag_shards(const std::vector<int64_t>& cu_seqlens, int64_t ranks);

// The shards one after another, as one (what a Ulysses rank attends over: every rank's tokens).
SequenceShard concatenated(const std::vector<SequenceShard>& shards);

// [queries, keys] bool: a query sees a key of its own document, and (causal) only at or before
// its position.
at::Tensor attention_allowed(const SequenceShard& queries, const SequenceShard& keys, bool causal);

// True when every query sees every key (one document, not causal): attention needs no mask.
bool sees_everything(const SequenceShard& queries, const SequenceShard& keys, bool causal);

}  // namespace mm::parallel
