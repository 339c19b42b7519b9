// The side streams of FSDP's collectives on an accelerator (torch FSDP2's scheme): the all-gather
// copy-in (the local fp32 slices cast to the compute dtype into one flat buffer), the all-gathers
// and the gradient reductions each run on a high-priority stream of their own, so that they
// overlap the compute stream's kernels and the backward's reduce-scatters do not queue behind the
// next unit's prefetched all-gather (or the reverse). Order between the streams is kept with
// events only, never by blocking the host.
//
// Memory safety without record_stream: every buffer a side stream touches is allocated by the
// caller on the compute stream before the side stream waits for the compute stream (so the
// memory's earlier users are done), and the caller keeps it alive until the compute stream has
// waited for the collective's work (FullyShardedModel releases its gather and reduce buffers
// only after that wait). The caching allocator then never hands the memory to anyone while a side
// stream may still read or write it.
//
// On the CPU there are no streams: every call runs its function at once and orders nothing.
// Device-generic c10 streams and events: this file needs no CUDA headers.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <functional>
#include <optional>

namespace mm::parallel {

enum class SideStream { copy_in, all_gather, reduce };

class CollectiveStreams {
 public:
  // Streams from the device's high-priority pool on an accelerator; none on the CPU.
  explicit CollectiveStreams(c10::Device device);

  // Whether collectives run on side streams (and so as synchronous ops on them: see
  // collective_is_async).
  bool active() const { return copy_in_.has_value(); }
  // The asyncOp flag for c10d collectives issued inside run_on: an active side stream runs the
  // collective itself (ProcessGroupNCCL enqueues a synchronous op on the current stream), without
  // the process group's own stream and its record_stream calls; a host group runs it as always.
  bool collective_is_async() const { return !active(); }

  // Makes `side` wait for everything queued so far on the current stream (the compute stream).
  void wait_for_compute(SideStream side) const;
  // Makes `to` wait for everything queued so far on `from`.
  void order(SideStream from, SideStream to) const;
  // Runs `fn` with `side` as the current stream (at once, on the CPU).
  void run_on(SideStream side, const std::function<void()>& fn) const;

 private:
  const c10::Stream& stream(SideStream side) const;

  c10::Device device_;
  std::optional<c10::Stream> copy_in_, all_gather_, reduce_;
};

}  // namespace mm::parallel
