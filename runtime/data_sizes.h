// Tensors sized by data: takes a stage (its graph and what its lifted inputs are); says whether it
// holds an op whose output size comes from the values of its inputs, not from their shapes
// (nonzero, masked_select, unique, indexing with a tensor that the data computes, which may be a
// boolean mask, a tensor read as a number that may become a size). An index that parameters and
// buffers alone make (a relative position table's) is the same at every call. A call's data can
// then give the stage larger tensors than the profile measured: the executor checks what each stage
// makes against the plan (executor.h, StageOutputsGrew).
#pragma once

#include <vector>

#include "runtime/stages.h"

namespace jitckpt {

bool makesTensorsSizedByData(const StageSpec& stage, const std::vector<LiftedSpec>& lifted);

// Whether `n` reads a tensor's values into a number on the host (item, Int, tolist, ...), other
// than a number the partition carries across a cut in a 0-dim tensor, which sizes alone made.
bool readsTensorIntoNumber(const torch::jit::Node* n);

}  // namespace jitckpt
