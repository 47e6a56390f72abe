// Rewrite pass: takes a module whose forward graph was partitioned in place (partitionClone) and
// the Plan made for that partition; replaces the chain region by
//   %in = prim::ListConstruct(chain inputs)
//   %lt = prim::ListConstruct(lifted tensors)
//   %ls = prim::ListConstruct(lifted scalars)
//   %plan = prim::GetAttr[name="_jitckpt_plan"](%self)
//   %out = jitckpt::chain(%in, %lt, %ls, %plan)
//   %a, %b, ... = prim::ListUnpack(%out)
// and stores the plan as the module attribute `_jitckpt_plan`. Prologue and epilogue stay as they
// were, after a first op, jitckpt::forward_begins(the forward's arguments but self), that notes
// where the forward begins (runtime/forward_start.h). The rewritten module saves and loads with
// torch.jit.save/load in any process that loads libjitckpt_runtime (the Plan pickles itself).
#pragma once

#include <torch/csrc/jit/api/module.h>

#include "passes/partition/partition.h"
#include "runtime/plan.h"

namespace jitckpt {

// Errors (TORCH_CHECK) when the module was already rewritten, when the partition is not of its
// forward graph, or when the plan does not describe this partition.
void rewriteChain(torch::jit::Module& module, Partition& partition,
                  const c10::intrusive_ptr<Plan>& plan);

}  // namespace jitckpt
