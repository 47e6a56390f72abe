// Plan: what the runtime needs to execute a chain under a schedule, immutable once built: the
// chain's stages and the Solution for one input key (costs, schedule, predictions). A
// torch::class_ (jitckpt.Plan), printable and picklable, held by a rewritten module as the
// attribute `_jitckpt_plan` and passed to every jitckpt::chain call.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/custom_class.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/chain_arguments.h"
#include "runtime/grouped_stages.h"
#include "runtime/input_key.h"
#include "runtime/stages.h"
#include "solver/costs.h"
#include "solver/memory_limit.h"
#include "solver/persistent_dp.h"
#include "solver/schedule.h"
#include "solver/strategy.h"

namespace jitckpt {

// The result of solving a chain's costs for a limit, for one input key. A deferred solution (a
// module rewritten without example inputs) holds only what was asked (limit, strategy, slots,
// segments); its plans are made for the inputs of each training call (see replan.h).
struct Solution {
  bool deferred = false;
  solver::Costs costs;        // L+1 stages: the model's L stages and the terminal stage
  solver::Schedule schedule;  // over the L+1 stages
  solver::Strategy strategy = solver::Strategy::None;
  int64_t memory_limit = 0;  // bytes
  int64_t predicted_peak = 0;
  double predicted_time = 0;  // ms
  int slots = 500;
  int segments = 0;                       // periodic: as asked (0: the fastest count that fits)
  solver::Schedule given;                 // strategy "given": the schedule asked for
  std::vector<solver::CurvePoint> curve;  // time-memory curve of the optimal solver
  InputKey input_key;                     // the inputs it was solved for
  solver::MemoryLimit requested_limit;    // as given: a fraction stays one for other keys
  int64_t unconstrained_peak = 0;         // predicted no-checkpointing peak
  // Gradient bytes of the parameters only the prologue or epilogue read (an embedding before the
  // first stage): "auto" reserves them beside the chain's own.
  int64_t outside_gradient_bytes = 0;
  // Gradient bytes of the parameters the epilogue reads (a classifier head): made before the
  // chain's backward and held through it, so the costs count them as the terminal stage's wg.
  int64_t epilogue_gradient_bytes = 0;
  // Gradient bytes of the parameters only the prologue reads (a learned position embedding): made
  // after the chain's backward, beside all the gradients it made, so every peak is at least the
  // two together (solver::SelectOptions::after_backward_bytes).
  int64_t prologue_gradient_bytes = 0;
  // The parameters those two counts are of, read again at each call (process-local).
  OutsideParameters outside_parameters;
  int profile_repeats = 5;  // timed runs per stage when profiling for other inputs
  // A re-plan for inputs where no schedule fits the requested limit: memory_limit is their
  // smallest (SolveOptions::smallest_when_infeasible). Process-local, never saved.
  bool over_limit = false;
  // Its costs were predicted from the profiles of other sizes (planner/predicted_costs.h), not
  // measured. Process-local, never saved.
  bool predicted = false;
};

class PlanVariants;
struct RunnableChains;

// What a deferred plan's stages were cut from, as the passes library keeps it: its replanner cuts
// the chain again by the bytes of the first call's tensors (passes/recut.h). Process-local, never
// saved.
struct StageSource {
  virtual ~StageSource() = default;
};

// How a call runs the chain: every stage apart under the schedule, stages the schedule runs
// together as one (grouped_stages.h; under autocast, each keeping its casts to itself), or
// straight through without a schedule (inference).
enum class RunAs { EveryStage, Grouped, GroupedUnderAutocast, Inference };

class Plan : public torch::CustomClassHolder {
 public:
  // Throws (TORCH_CHECK) unless the schedule is valid and complete for these stages and its
  // forward part ends at the hand-off to autograd (a deferred solution has none to check).
  Plan(std::shared_ptr<const ChainStages> stages, Solution solution);

  const ChainStages& stages() const { return *stages_; }
  const std::shared_ptr<const ChainStages>& sharedStages() const { return stages_; }
  const Solution& solution() const { return solution_; }
  int numStages() const { return stages_->size(); }

  // Stages and schedule, stable text for humans and FileCheck.
  std::string str() const;

  // Serialization: (metadata JSON, stage graphs as IR text, tensor constants); see plan_pickle.cpp.
  using State = std::tuple<std::string, std::vector<std::string>, std::vector<at::Tensor>>;
  State getState() const;
  static c10::intrusive_ptr<Plan> fromState(State state);

  // The plans made from this one for other input keys (a cache kept for the process, never
  // saved; see replan.h).
  PlanVariants& variants() const { return *variants_; }
  bool deferred() const { return solution_.deferred; }

  // The stages and schedule a call runs (made once; a deferred plan has only EveryStage's
  // stages and Inference, and no schedule).
  std::shared_ptr<const GroupedChain> chainToRun(RunAs how) const;

  // Deferred plans: print a line on stderr per profiled stage when they plan for new inputs, on a
  // terminal or when asked (verbose); process-local, never saved.
  void setVerbose(bool verbose) { verbose_ = verbose; }
  bool verbose() const { return verbose_; }
  // Deferred plans: what their stages were cut from; null after loading (see StageSource).
  void setStageSource(std::shared_ptr<const StageSource> source) {
    stage_source_ = std::move(source);
  }
  const std::shared_ptr<const StageSource>& stageSource() const { return stage_source_; }

 private:
  std::shared_ptr<const ChainStages> stages_;
  Solution solution_;
  std::shared_ptr<PlanVariants> variants_;
  std::shared_ptr<RunnableChains> runnable_;
  bool verbose_ = false;
  std::shared_ptr<const StageSource> stage_source_;
};

// A deferred solution: `limit`, `strategy`, `slots`, `segments` and the `given` schedule as
// asked, nothing solved.
Solution deferredSolution(const solver::MemoryLimit& limit, solver::Strategy strategy, int slots,
                          int segments, solver::Schedule given = {});

// The module attribute that holds the Plan in a rewritten module.
constexpr const char* kPlanAttribute = "_jitckpt_plan";
c10::ClassTypePtr planType();
// The plan of a rewritten module; null when `module` was not rewritten by jitckpt.
c10::intrusive_ptr<Plan> planOf(const torch::jit::Module& module);

}  // namespace jitckpt
