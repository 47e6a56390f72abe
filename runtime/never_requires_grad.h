// Which activations never require grad: takes a chain's stages, what its lifted values are, and
// which chain inputs need no grad at a call; returns, per stage, which of its activation inputs
// never require grad, and which chain outputs never do. Such values are made from constants and
// other such values alone (a causal mask made in forward from shapes), by ops whose results
// autograd never differentiates (comparisons, the *_like factories, detach), or from chain inputs
// that need no grad, before any parameter joins; an in-place op that writes one from a value that
// may require grad makes it, and what may alias it, one that may. A dataflow over each stage graph
// in order, to a fixed point; anything it cannot follow may require grad.
#pragma once

#include <vector>

#include "runtime/stages.h"

namespace jitckpt {

struct NeverRequiresGrad {
  std::vector<std::vector<bool>> inputs;  // [l - 1][i]: activation input i of stage l
  std::vector<bool> outputs;              // [i]: chain output i
};

// `chain_inputs_never[i]`: chain input i needs no grad (empty: every chain input may);
// `lifted_never[k]`: lifted value k needs none, at any stage (empty: every lifted tensor may).
// Without `with_outputs`, `outputs` stays empty and the last stage's graph is not followed.
NeverRequiresGrad findNeverRequiresGrad(const std::vector<StageSpec>& stages,
                                        const std::vector<LiftedSpec>& lifted,
                                        const std::vector<bool>& chain_inputs_never,
                                        bool with_outputs,
                                        const std::vector<bool>& lifted_never = {});

}  // namespace jitckpt
