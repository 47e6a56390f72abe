// jitckpt::indexing_slice(Tensor(a) self, int dim=0, int? start=None, int? end=None, int step=1)
// -> Tensor(a): aten::slice as Python's indexing on a tuple runs it. Takes what aten::slice takes;
// returns an alias of `self` where the slice would take the whole dimension (from 0, step 1, to
// its end or past it), and aten::slice's view otherwise. Eager indexing skips such a slice
// (x[:, :n] with n the size), so autograd passes the gradient on as it comes; aten::slice's
// backward makes a new contiguous one, and the kernels after it may round differently on it. The
// export front end records such slices where a size is dynamic (capture's aten_graph.py).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace jitckpt {

at::Tensor indexingSlice(const at::Tensor& self, int64_t dim, c10::optional<int64_t> start,
                         c10::optional<int64_t> end, int64_t step);

}  // namespace jitckpt
