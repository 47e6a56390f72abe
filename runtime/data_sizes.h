// Tensors sized by data: takes a chain's stages (their graphs and what their lifted inputs are);
// returns those that hold an op whose output size comes from the values of its inputs, not from
// their shapes (nonzero, masked_select, unique, bincount, one_hot counting its classes, indexing
// with a tensor that the data computes, which may be a boolean mask, a tensor read as a number that
// may become a size, what a Python function returns, a number of the call that the input
// key does not hold, such as an int argument of forward). An index that parameters and buffers
// alone make (a relative position table's) is the same at every call, and so is a number the
// partition carries across cuts from a stage sized by shapes alone; a number read from the chain's
// inputs or from a tensor the model computed from them before the chain is the data's. A call's
// data can then give the stages larger tensors than the profile measured: the executor checks what
// each stage makes against the plan (executor.h, StageGrew).
#pragma once

#include <vector>

#include "runtime/stages.h"

namespace jitckpt {

// `steered` (optional) gets those among them that branch or loop on the data's values: what they
// keep for their backward may grow where their outputs do not (a loop run as often as the data
// says), so that the executor measures it (executor.h, StageGrew).
std::vector<int> findStagesSizedByData(const std::vector<StageSpec>& stages,
                                       const std::vector<LiftedSpec>& lifted,
                                       std::vector<int>* steered = nullptr);

// The tensor whose value `n` reads into a number or flag on the host (item, Int, Bool, tolist,
// ...), or null: none, or one of the partition's scalar carriers made in the stage, whose number
// was judged where it was computed. A graph input is returned: what it holds is the chain's to
// judge (findStagesSizedByData).
const torch::jit::Value* tensorReadIntoNumber(const torch::jit::Node* n);

// Whether `n` reads a tensor's shape and not its values (size, dim, numel and their symbolic
// forms): a number it makes is the same for every call with the same shapes.
bool readsShapeOnly(const torch::jit::Node* n);

}  // namespace jitckpt
