#include "mm/nn/sequence_split.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"

namespace mm {

at::Tensor SequenceSplit::take(const at::Tensor& x, int64_t dim) const {
  MM_CHECK(x.size(dim) == total, "context parallelism: a tensor with ", x.size(dim), " tokens along dim ", dim,
           " for a sequence of ", total);
  return x.index_select(dim, host_values_on(positions, x.device()));
}

}  // namespace mm
