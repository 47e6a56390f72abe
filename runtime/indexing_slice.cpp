// jitckpt::indexing_slice (see indexing_slice.h).
#include "runtime/indexing_slice.h"

#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>

namespace jitckpt {

at::Tensor indexingSlice(const at::Tensor& self, int64_t dim, c10::optional<int64_t> start,
                         c10::optional<int64_t> end, int64_t step) {
  const int64_t size = self.size(at::maybe_wrap_dim(dim, self.dim()));
  if (step == 1 && start.value_or(0) == 0 && end.value_or(size) >= size) return at::alias(self);
  return at::slice(self, dim, start, end, step);
}

}  // namespace jitckpt
