// Twin outputs, for a profile of sizes alone: what a twin stage's forward would return, made
// without running it. Takes the inputs and outputs of the twin that was measured (recorded as a
// TwinOutputLayout) and the twin's own inputs; returns tensors of the same dtypes, sizes, strides
// and storage sizes: on the twin's input storages where the measured outputs lay on the measured
// inputs', numbers made from sizes alone as the measured stage made them, the rest on fresh
// storages of zeros. The stages after them then see what they would have seen but for the
// values, so this is only for chains whose memory cannot depend on values (sizesIgnoreValues).
// The profile takes a twin's measurements from the measured stage anyway; this skips its forward
// run too, which the stages after it needed only for their inputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "runtime/stage_runner.h"
#include "runtime/stages.h"

namespace jitckpt {

// Where each output of a stage lies: a view of one of its inputs' storages, a view of a fresh
// storage (several outputs may share one), a number made from sizes alone (its value), or
// undefined.
struct TwinOutputLayout {
  struct Output {
    bool defined = false;
    at::Tensor number;  // a copy of the measured stage's, where it is such a number
    int input = -1;     // the input whose storage it lies on, or -1
    int fresh = -1;     // else the fresh storage it lies on
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
  };
  struct Fresh {
    int64_t elements = 0;
    at::TensorOptions options;
  };
  std::vector<Output> outputs;
  std::vector<Fresh> fresh;
};

// The layout of the outputs a stage's `graph` made from `inputs`; nothing where stand-ins could
// differ from a run in more than values: an output on a fresh storage that is neither floating
// point with more than one element nor a number made from sizes alone (the partition's carriers),
// one that lies on a storage the stage did not get as an input (`lifted`: a parameter's, a side
// tensor's), is not strided, or carries a conjugate or negative bit.
std::optional<TwinOutputLayout> twinOutputLayout(const Tensors& inputs, const Tensors& outputs,
                                                 const std::vector<at::Tensor>& lifted,
                                                 const torch::jit::Graph& graph);

// Outputs laid out as `layout` over `inputs` (a twin's, alike the measured stage's).
Tensors twinOutputs(const TwinOutputLayout& layout, const Tensors& inputs);

// Whether no stage of the chain can make a size, a branch or an error of its tensors' values:
// none is sized by data, every block (if, loop) goes by sizes, constants and flags alone, and none
// reads a tensor's values into the host but the numbers carried in 0-dim tensors.
bool sizesIgnoreValues(const ChainStages& stages);

}  // namespace jitckpt
