// Simulator: replays any op sequence on a Costs under the rules of the paper's Table 1 and
// returns its validity (first invalid op and why), peak memory and total time. The ground truth
// every solver is tested against. Standard C++ only.
//
// Memory is what is held: wd of the gradient held, wg of the stages whose B has run, wabar - wa
// of each abar^l, and the storages of the activations held (a^l alone or inside abar^l), each
// counted once per copy: a stage's run makes new copies of what it makes and hands on the copies
// its input holds of what it passes through (Costs::Span). Without spans that is wa of each lone
// a^l and abarOwnBytes of each abar^l, a function of what is held.
//
// Memory state: per stage l whether a^l is held alone, whether abar^l is held (abar^l contains
// a^l, so holding abar^l absorbs a lone a^l), and which gradients delta^l are held. An op is
// invalid when its input is missing or when it would produce what is already held (Fck/F∅(l)
// with a^l or abar^l held, Fall(l) with abar^l held: pure waste; F∅ would otherwise become a
// "drop a^{l-1}" that Table 1 does not have), or when it runs a stage of Costs::runs_once forward a
// second time; Fall(l) over a lone a^l is valid (a^l -> abar^l). The
// sequence starts with {a^0, delta^L} (delta^L is the loss gradient; for a model chain the terminal
// stage L makes it zero-size) and is complete when delta^0 is produced. The peak of an op is the
// memory held before it, plus what it produces (Fall: abarOwnBytes; Fck, F∅: wa less what a^{l-1}
// passes on), plus its overhead (of for Fall, of_nograd for Fck and F∅, ob for B). B(l) produces
// delta^{l-1} while delta^l, abar^l and a^{l-1} are still held; the paper's m_all leaves
// delta^{l-1} out, the simulator counts it. B(l) leaves its parameter gradients (Costs::wg) held to
// the end. The caller's copy of a^{L-1} (Costs::held_output) is held apart from the end of B(L), or
// of B(L-1) where abar^{L-1} was held at B(L).
#pragma once

#include <cstdint>
#include <string>

#include "solver/costs.h"
#include "solver/schedule.h"

namespace jitckpt::solver {

struct SimulationResult {
  bool valid = false;
  bool complete = false;      // delta^0 produced
  int first_invalid_op = -1;  // index into the schedule, -1 when valid
  std::string reason;         // why that op is invalid
  int64_t peak = 0;           // max over ops of held + produced + overhead
  double time = 0;            // sum of op durations
  int recomputations = 0;     // forward ops beyond one per stage
  // Complete: what stays held once delta^0 is made (the parameter gradients, delta^0, the caller's
  // output), the same for every complete sequence of a chain.
  int64_t end_bytes = 0;
};

SimulationResult simulate(const Costs& chain, const Schedule& schedule);

}  // namespace jitckpt::solver
