#include "mm/parallel/collective_streams.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace mm::parallel {
namespace {

// `waiter` waits for the work queued on `on` so far: an event recorded on one, blocked on by the
// other. The event may go out of scope at once: the wait is enqueued already.
void enqueue_wait(const c10::Stream& waiter, const c10::Stream& on) {
  if (waiter == on) return;
  c10::Event event(on.device_type());
  event.record(on);
  event.block(waiter);
}

}  // namespace

CollectiveStreams::CollectiveStreams(c10::Device device) : device_(device) {
  if (device.is_cpu()) return;
  const c10::impl::VirtualGuardImpl impl(device.type());
  if (!device_.has_index()) device_ = impl.getDevice();  // "cuda": the current one, bound at startup
  copy_in_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/true);
  all_gather_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/true);
  reduce_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/true);
}

const c10::Stream& CollectiveStreams::stream(SideStream side) const {
  switch (side) {
    case SideStream::copy_in: return *copy_in_;
    case SideStream::all_gather: return *all_gather_;
    case SideStream::reduce: break;
  }
  return *reduce_;
}

void CollectiveStreams::wait_for_compute(SideStream side) const {
  if (!active()) return;
  const c10::impl::VirtualGuardImpl impl(device_.type());
  enqueue_wait(stream(side), impl.getStream(device_));
}

void CollectiveStreams::order(SideStream from, SideStream to) const {
  if (active()) enqueue_wait(stream(to), stream(from));
}

void CollectiveStreams::run_on(SideStream side, const std::function<void()>& fn) const {
  if (!active()) return fn();
  const c10::StreamGuard guard(stream(side));
  fn();
}

}  // namespace mm::parallel
