// Rewrite pass: takes a module whose forward graph was partitioned in place (Partition::graph is
// that graph) and the Plan solved for it; replaces the chain region by
//   %in = prim::ListConstruct(chain inputs)         %lt = prim::ListConstruct(lifted tensors)
//   %ls = prim::ListConstruct(lifted scalars)        %plan =
//   prim::GetAttr[name="_jitckpt_plan"](%self) %out = jitckpt::chain(%in, %lt, %ls, %plan)      %a,
//   %b, ... = prim::ListUnpack(%out)
// and stores the plan as the module attribute `_jitckpt_plan`. Prologue and epilogue stay as they
// were. The rewritten module saves and loads with torch.jit.save/load in any process that loads
// libjitckpt (the Plan pickles itself).
#pragma once

#include <torch/csrc/jit/api/module.h>

#include "passes/partition.h"
#include "runtime/plan.h"

namespace jitckpt {

// A clone of a module whose forward graph is inlined and partitioned in place: rewriteChain on
// `partition` edits `module`'s forward. The clone has its own class type and methods, so the
// original module keeps its forward; with share_tensors it shares parameters and buffers with the
// original (module.clone(/*inplace=*/true)), otherwise they are deep copies.
struct PartitionedClone {
  torch::jit::Module module;
  Partition partition;
};
PartitionedClone partitionClone(const torch::jit::Module& module,
                                const PartitionOptions& options = {}, bool share_tensors = true);

// Errors (TORCH_CHECK) when the module was already rewritten, when the plan does not describe
// this partition (stage or lifted counts), or when its schedule is invalid (Plan::validate).
void rewriteChain(torch::jit::Module& module, Partition& partition,
                  const c10::intrusive_ptr<Plan>& plan);

// True when `module` carries a jitckpt plan (was rewritten); the plan, or null.
bool isRewritten(const torch::jit::Module& module);
c10::intrusive_ptr<Plan> planOf(const torch::jit::Module& module);

}  // namespace jitckpt
