#include "mm/nn/gated_delta_rule.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/nn/compute_dtype.h"

namespace mm {
namespace {

namespace F = torch::nn::functional;
using torch::indexing::Slice;

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
                  const torch::Tensor& beta, const char* form) {
  MM_CHECK(q.dim() == 4 && k.sizes() == q.sizes(), "gated delta rule (", form,
           "): q and k must both be [batch, seq, heads, key_dim], got q ", q.sizes(), " and k ", k.sizes());
  MM_CHECK(v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == q.size(2),
           "gated delta rule (", form, "): v must be [batch, seq, heads, value_dim] matching q ", q.sizes(),
           ", got ", v.sizes());
  MM_CHECK(g.sizes() == q.sizes().slice(0, 3) && beta.sizes() == g.sizes(), "gated delta rule (", form,
           "): g and beta must be [batch, seq, heads] = ", q.sizes().slice(0, 3), ", got ", g.sizes(), " and ",
           beta.sizes());
}

// [batch, seq, heads, ...] -> [batch, heads, seq, ...] in fp32 (fp64 stays), contiguous.
torch::Tensor heads_first(const torch::Tensor& x) {
  return x.transpose(1, 2).to(at_least_fp32(x.scalar_type())).contiguous();
}

torch::Tensor initial_or_zeros(const torch::Tensor& initial_state, int64_t batch, int64_t heads, int64_t key_dim,
                               int64_t value_dim, const torch::Tensor& like) {
  const std::vector<int64_t> shape = {batch, heads, key_dim, value_dim};
  if (!initial_state.defined()) return torch::zeros(shape, like.options());
  MM_CHECK(initial_state.sizes() == torch::IntArrayRef(shape), "gated delta rule: initial_state must be ", shape,
           ", got ", initial_state.sizes());
  return initial_state.to(like.options());
}

// What every chunk contributes, computed for all chunks at once (the part of the chunked algorithm
// that needs no state), from tensors laid out in chunks:
//   q, k: [batch, heads, chunks, C, key_dim]  v: [batch, heads, chunks, C, value_dim]
//   g, beta: [batch, heads, chunks, C]
// Each field is [batch, heads, chunks, ...].
struct ChunkTerms {
  torch::Tensor new_values;       // [.., C, value_dim] (I + L)^-1 beta v: the values the chunk writes
  torch::Tensor state_keys;       // [.., C, key_dim] (I + L)^-1 decayed beta k: what the incoming state predicts
  torch::Tensor intra_attention;  // [.., C, C] q k^T with the decays between positions
  torch::Tensor q_decayed;        // [.., C, key_dim] queries reading the incoming state decayed to them
  torch::Tensor k_decayed;        // [.., C, key_dim] keys writing into the outgoing state decayed from them
  torch::Tensor chunk_decay;      // [.., 1, 1] the decay across the whole chunk
};

ChunkTerms chunk_terms(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
                       const torch::Tensor& beta) {
  const int64_t chunk = q.size(3);
  auto k_beta = k * beta.unsqueeze(-1);
  auto v_beta = v * beta.unsqueeze(-1);

  // Inside a chunk, log-decays add up: cum[..., t] is the log of the decay from the chunk's
  // start through position t, and exp(cum_i - cum_j) the decay between positions j and i.
  auto cum = g.cumsum(-1);
  auto above_diagonal = torch::ones({chunk, chunk}, q.options().dtype(torch::kBool)).triu(1);
  auto pair_decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2))
                        .masked_fill(above_diagonal, -std::numeric_limits<double>::infinity())
                        .exp();
  auto k_t = k.transpose(-1, -2);
  // The UT transform: with L the strictly lower part of (beta k k^T) * decay, the chunk's delta
  // rule updates fold into (I + L)^-1 applied to beta v (the values to write) and to the decayed
  // beta k (what the incoming state predicts); only the diagonal-free lower part is read.
  auto ut_system = torch::matmul(k_beta, k_t) * pair_decay;
  ChunkTerms terms;
  terms.intra_attention = torch::matmul(q, k_t) * pair_decay;
  auto decayed_k_beta = k_beta * cum.exp().unsqueeze(-1);
  terms.new_values = torch::linalg_solve_triangular(ut_system, v_beta, /*upper=*/false, /*left=*/true,
                                                    /*unitriangular=*/true);
  terms.state_keys = torch::linalg_solve_triangular(ut_system, decayed_k_beta, /*upper=*/false, /*left=*/true,
                                                    /*unitriangular=*/true);
  // Decays applied once for every chunk: a query reads the incoming state decayed to its
  // position, a key writes into the outgoing state decayed from its position to the chunk's end.
  terms.q_decayed = q * cum.exp().unsqueeze(-1);
  terms.k_decayed = k * (cum.index({"...", Slice(-1, torch::indexing::None)}) - cum).exp().unsqueeze(-1);
  terms.chunk_decay = cum.select(-1, chunk - 1).exp().unsqueeze(-1).unsqueeze(-1);
  return terms;
}

// One chunk's step, for every row of a batch: the output of the chunk's positions ([.., C,
// value_dim]) from the incoming state ([.., key_dim, value_dim]), and the outgoing state.
// `at(t)` is a ChunkTerms field's slice for this chunk.
template <typename At>
std::pair<torch::Tensor, torch::Tensor> chunk_step(const ChunkTerms& terms, const At& at, const torch::Tensor& state) {
  auto corrected = at(terms.new_values) - torch::matmul(at(terms.state_keys), state);
  auto out = torch::matmul(at(terms.q_decayed), state) + torch::matmul(at(terms.intra_attention), corrected);
  auto next = state * at(terms.chunk_decay) + torch::matmul(at(terms.k_decayed).transpose(-1, -2), corrected);
  return {out, next};
}

}  // namespace

DeltaRuleOutput gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& g, const torch::Tensor& beta, int64_t chunk_size,
                                         const torch::Tensor& initial_state) {
  check_inputs(q, k, v, g, beta, "chunked");
  MM_CHECK(chunk_size > 0, "gated delta rule: chunk_size must be positive, got ", chunk_size);
  const int64_t batch = q.size(0), seq = q.size(1), heads = q.size(2), key_dim = q.size(3), value_dim = v.size(3);
  const int64_t pad = (chunk_size - seq % chunk_size) % chunk_size;
  const int64_t chunks = (seq + pad) / chunk_size;
  auto chunked = [&](const torch::Tensor& x) {  // [b, s, h, d] -> [b, h, chunks, C, d]
    return F::pad(heads_first(x), F::PadFuncOptions({0, 0, 0, pad})).view({batch, heads, chunks, chunk_size, -1});
  };
  auto chunked_gate = [&](const torch::Tensor& x) {  // [b, s, h] -> [b, h, chunks, C]
    return F::pad(heads_first(x), F::PadFuncOptions({0, pad})).view({batch, heads, chunks, chunk_size});
  };
  auto vh = chunked(v);
  auto state = initial_or_zeros(initial_state, batch, heads, key_dim, value_dim, vh);
  if (chunks == 0) return {torch::zeros({batch, 0, heads, value_dim}, vh.options()), state};
  const auto terms = chunk_terms(chunked(q), chunked(k), vh, chunked_gate(g), chunked_gate(beta));
  std::vector<torch::Tensor> outputs;
  outputs.reserve(chunks);
  for (int64_t i = 0; i < chunks; ++i) {
    auto [out, next] = chunk_step(terms, [i](const torch::Tensor& t) { return t.select(2, i); }, state);
    outputs.push_back(out);
    state = next;
  }
  auto out = torch::stack(outputs, 2).view({batch, heads, chunks * chunk_size, value_dim});
  return {out.narrow(2, 0, seq).transpose(1, 2).contiguous(), state};
}

DeltaRuleOutput gated_delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const torch::Tensor& g, const torch::Tensor& beta,
                                           const torch::Tensor& initial_state) {
  check_inputs(q, k, v, g, beta, "recurrent");
  const int64_t batch = q.size(0), seq = q.size(1), heads = q.size(2), key_dim = q.size(3), value_dim = v.size(3);
  auto qh = heads_first(q), kh = heads_first(k), vh = heads_first(v), gh = heads_first(g), bh = heads_first(beta);
  auto state = initial_or_zeros(initial_state, batch, heads, key_dim, value_dim, vh);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(seq);
  for (int64_t t = 0; t < seq; ++t) {
    auto q_t = qh.select(2, t), k_t = kh.select(2, t), v_t = vh.select(2, t);  // [b, h, d]
    state = state * gh.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);
    auto predicted = (state * k_t.unsqueeze(-1)).sum(-2);  // what the state already holds for k_t
    auto delta = (v_t - predicted) * bh.select(2, t).unsqueeze(-1);
    state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2);
    outputs.push_back((state * q_t.unsqueeze(-1)).sum(-2));
  }
  auto out = seq > 0 ? torch::stack(outputs, 2) : vh;
  return {out.transpose(1, 2).contiguous(), state};
}

void check_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t seq, const std::string& who) {
  MM_CHECK(cu_seqlens.size() >= 2 && cu_seqlens.front() == 0 && cu_seqlens.back() == seq,
           who, ": cu_seqlens must run from 0 to the row's ", seq, " tokens");
  for (size_t s = 1; s < cu_seqlens.size(); ++s)
    MM_CHECK(cu_seqlens[s] >= cu_seqlens[s - 1], who, ": cu_seqlens decreases at index ", s);
}

DeltaRuleOutput gated_delta_rule_varlen(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& g, const torch::Tensor& beta,
                                        const std::vector<int64_t>& cu_seqlens, int64_t chunk_size) {
  check_inputs(q, k, v, g, beta, "varlen");
  MM_CHECK(q.size(0) == 1, "gated delta rule (varlen): a packed row has batch 1, got ", q.size(0));
  MM_CHECK(chunk_size > 0, "gated delta rule: chunk_size must be positive, got ", chunk_size);
  const int64_t seq = q.size(1), heads = q.size(2), key_dim = q.size(3), value_dim = v.size(3);
  check_cu_seqlens(cu_seqlens, seq, "gated delta rule (varlen)");

  // Each sample padded on its own to whole chunks: `rows` maps every padded position to its
  // token, or to `seq` (an appended zero row) for padding; `positions` maps tokens back.
  // first_chunk / chunk_count: each sample's chunks in the laid-out row (empty samples have none).
  std::vector<int64_t> rows, positions, first_chunk, chunk_count;
  for (size_t s = 1; s < cu_seqlens.size(); ++s) {
    const int64_t start = cu_seqlens[s - 1], end = cu_seqlens[s];
    const int64_t chunks = (end - start + chunk_size - 1) / chunk_size;
    first_chunk.push_back(static_cast<int64_t>(rows.size()) / chunk_size);
    chunk_count.push_back(chunks);
    for (int64_t t = start; t < start + chunks * chunk_size; ++t) {
      if (t < end) positions.push_back(static_cast<int64_t>(rows.size()));
      rows.push_back(t < end ? t : seq);
    }
  }
  const int64_t samples = static_cast<int64_t>(chunk_count.size());
  const int64_t total_chunks = static_cast<int64_t>(rows.size()) / chunk_size;
  const auto fp = at_least_fp32(v.scalar_type());
  if (total_chunks == 0) {
    auto zeros = torch::zeros({1, 0, heads, value_dim}, v.options().dtype(fp));
    return {zeros, torch::zeros({samples, heads, key_dim, value_dim}, zeros.options())};
  }
  const auto device = q.device();
  auto row_index = host_values_on(rows, device);
  auto laid_out = [&](const torch::Tensor& x) {  // [1, s, h, ...] -> [1, h, chunks, C, ...]
    auto h = heads_first(x);                      // [1, h, s, ...]
    auto padded = torch::cat({h, torch::zeros_like(h.narrow(2, 0, 1))}, 2).index_select(2, row_index);
    std::vector<int64_t> shape = {1, heads, total_chunks, chunk_size};
    if (x.dim() == 4) shape.push_back(x.size(3));
    return padded.view(shape);
  };
  const auto terms = chunk_terms(laid_out(q), laid_out(k), laid_out(v), laid_out(g), laid_out(beta));

  // The scan by chunk position: step j advances the j-th chunk of every sample that has one, all
  // such samples at once (a batch), so there are as many sequential steps as the longest sample
  // has chunks rather than as all samples have together. Samples sorted by chunk count, longest
  // first, so the ones still running are always a leading block of the state.
  std::vector<int64_t> order(static_cast<size_t>(samples));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return chunk_count[a] > chunk_count[b]; });
  const int64_t steps = chunk_count[order.front()];
  auto state = torch::zeros({samples, heads, key_dim, value_dim}, terms.new_values.options());
  std::vector<torch::Tensor> final_state(static_cast<size_t>(samples));
  std::vector<torch::Tensor> outputs;  // per step [running, heads, C, value_dim]
  std::vector<int64_t> output_chunks;  // the laid-out chunk of each of their rows, in that order
  int64_t running = samples;
  for (int64_t j = 0; j < steps; ++j) {
    while (running > 0 && chunk_count[order[running - 1]] <= j) {  // finished before this step
      --running;
      final_state[order[running]] = state[running];
    }
    state = state.narrow(0, 0, running);
    std::vector<int64_t> chunk_of(static_cast<size_t>(running));
    for (int64_t r = 0; r < running; ++r) chunk_of[r] = first_chunk[order[r]] + j;
    output_chunks.insert(output_chunks.end(), chunk_of.begin(), chunk_of.end());
    const auto index = host_values_on(chunk_of, device);
    // [1, heads, chunks, ...] -> this step's chunks as a batch: [running, heads, ...]
    auto at = [&](const torch::Tensor& t) { return t[0].index_select(1, index).transpose(0, 1); };
    auto [out, next] = chunk_step(terms, at, state);
    outputs.push_back(out);
    state = next;
  }
  for (int64_t r = 0; r < running; ++r) final_state[order[r]] = state[r];
  for (auto& st : final_state)  // empty samples keep a zero state
    if (!st.defined()) st = torch::zeros({heads, key_dim, value_dim}, terms.new_values.options());

  // Back to the laid-out chunk order, then to the tokens.
  std::vector<int64_t> inverse(output_chunks.size());
  for (size_t p = 0; p < output_chunks.size(); ++p) inverse[static_cast<size_t>(output_chunks[p])] = static_cast<int64_t>(p);
  auto out = torch::cat(outputs, 0)                    // [total_chunks, heads, C, value_dim] by step
                 .index_select(0, host_values_on(inverse, device))
                 .transpose(0, 1)                      // [heads, total_chunks, C, value_dim]
                 .reshape({1, heads, total_chunks * chunk_size, value_dim})
                 .index_select(2, host_values_on(positions, device))
                 .transpose(1, 2)
                 .contiguous();
  return {out, torch::stack(final_state)};
}

}  // namespace mm
