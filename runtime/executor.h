// ScheduleExecutor: runs a Plan's schedule on real tensors for one call of the chain. Forward runs
// the ops up to the first B (the terminal stage's: the hand-off to autograd) and returns the chain
// outputs; backward runs the rest with delta^L from autograd and returns the input and lifted
// gradients. Memory follows the simulator's state: a^l stored alone, abar^l = a recorded run of
// stage l, delta^l; each is dropped as soon as the schedule is done with it. Stages run through
// the StageRunner (see stage_runner.h for what keeps them exact).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/plan.h"
#include "runtime/stage_runner.h"

namespace jitckpt {

// Thrown by a training call where a stage's outputs take more bytes than the plan's costs say
// (solver::Costs::wa), or where a watched stage sized by data keeps more for its backward, or
// needs more while it runs, than they say (wabar, of, of_nograd; see watches): the call's data
// sets the sizes of the chain's tensors (a boolean mask, nonzero, a loop as long as the data
// says), and the plan holds for the smaller ones it was profiled on. chainAutograd plans again for
// the larger sizes and runs the call once more.
struct StageGrew : public std::runtime_error {
  // `what`: what took the bytes ("outputs", ...)
  StageGrew(int stage, const std::string& what, int64_t bytes, int64_t planned);
  int stage;  // planned stage (1-based)
  int64_t bytes, planned;
};

class ScheduleExecutor : public torch::CustomClassHolder {
 public:
  // `how`: the plan's stages as the call runs them (Plan::chainToRun).
  ScheduleExecutor(c10::intrusive_ptr<Plan> plan, ChainArguments arguments, RunAs how);

  const ChainArguments& arguments() const { return runner_.arguments(); }
  const Plan& plan() const { return *plan_; }  // its stages as planned, not as grouped
  const c10::intrusive_ptr<Plan>& sharedPlan() const { return plan_; }

  // Runs the stages straight through without saving anything (inference, or nothing needs grad).
  Tensors runInference();
  // Whether the schedule is the unmodified model's: every stage recorded once, in order, then
  // differentiated once (no limit, or a limit the model fits without recomputation), and the
  // stages run grouped (RunAs::EveryStage keeps the executor's own backward, for comparisons).
  bool recordsOnce() const;
  // That schedule run as the unmodified model runs: each group records its autograd graph on the
  // call's own tensors and returns outputs that carry it, and autograd differentiates it with the
  // rest of the model. Nothing of the call is kept for a backward of the executor's own.
  Tensors runRecordedOnce();
  // The schedule up to the first B; returns detached aliases of the chain outputs.
  Tensors runForward();
  // Puts the random generators back to where they were when the call began (before its first
  // random stage ran), so that the call can run again as it would have: after StageGrew.
  void restoreRandomStateOfCallStart() { runner_.restoreFirstRandomState(); }
  // The rest of the schedule. Returns one gradient per chain input, then one per lifted tensor
  // (undefined where none; the sum over the stages that read it).
  Tensors runBackward(Tensors output_grads);  // moved in: B(L) frees them
  // The same gradients without the schedule, leaving its state as it is, so that a later
  // backward can run (retain_graph=True): every stage runs again recording its graph, the stages
  // connected to each other, and autograd differentiates the whole chain at once (all its
  // activations held, as in the unmodified model).
  Tensors runBackwardWholeGraph(const Tensors& output_grads);

 private:
  void execute(const solver::Op& op);
  // The end of the run of B ops from schedule index `first` that one engine call can run:
  // B(l), B(l-1), ... while StageRunner::joinsBackwardRun; `first` + 1 where none joins.
  size_t backwardRunEnd(size_t first) const;
  void backwardRun(int l, int m);  // B(l) .. B(m)
  // The profiler's name of B(l) .. B(m): "jitckpt::B" for one planned stage, else
  // "jitckpt::B7..5" for planned stages 7 down to 5.
  std::string backwardScope(int l, int m) const;
  const Tensors& stageInput(int l) const;  // a^{l-1}, alone or inside abar^{l-1}
  // After the schedule's op at `index`: drops the a^{l-1} inside abar^{l-1} when that op was the
  // last forward of stage l to read it (its graph keeps what it saved).
  void releaseAfterLastRead(size_t index);
  void checkOutputGrads(const Tensors& grads) const;  // one per output, undefined where none
  // Throws StageGrew where the outputs of the call's stage (group) l take more bytes than
  // the plan's costs give its last planned stage; checked only where the plan has a limit and
  // stages sized by data (ChainStages::stagesSizedByData).
  void checkOutputSizes(int l, const Tensors& outputs) const;
  // Where sizes are checked, the forwards of a stage sized by data are watched: those of a stage
  // steered by data (ChainStages::stagesSteeredByData), which runs forward once and records then,
  // and the others' in the forward part of the call, where it can still run again. What a watched
  // Fall keeps and its peak (on the CPU) are measured against the plan's wabar and wabar + of, a
  // watched F∅'s peak (on the CPU) against what it makes of a^l and of_nograd: StageGrew where
  // one is larger. Later forwards run the data the watched ones ran.
  bool watches(int l) const;
  RecordedStage recordedForward(int l);  // Fall(l)
  Tensors stageForward(int l);           // F∅ or Fck(l)

  c10::intrusive_ptr<Plan> plan_;
  RunAs how_;
  std::shared_ptr<const GroupedChain> chain_;  // the stages and schedule this call runs
  StageRunner runner_;
  int L_;
  std::vector<std::optional<Tensors>> a_;  // a^l held alone
  std::vector<std::optional<RecordedStage>> abar_;
  std::vector<std::optional<Tensors>> delta_;
  Tensors lifted_grads_;
  size_t next_op_ = 0;
  // Per l in 0..L-1: the index of the schedule's last forward op of stage l+1 (which reads a^l).
  std::vector<size_t> last_read_;
  size_t num_outputs_ = 0;         // chain outputs, one gradient each (undefined where none)
  bool checks_sizes_ = false;      // see checkOutputSizes
  c10::Device device_{c10::kCPU};  // the chain's
  bool in_forward_ = false;        // in runForward: see watches
};

}  // namespace jitckpt
