// Plans for chain inputs other than the planned ones. Any schedule computes the right gradients
// whatever the shapes, dtypes and devices; only its memory and time depend on them, so the runtime
// asks for a new plan, once per new input key (input_key.h) and plan, at the limit as it was given
// (a fraction stays a fraction of the new key's peak). A deferred plan (rewritten without example
// inputs) gets one for every key, the first at the first training call. The runtime never
// profiles or solves itself: the passes library installs the Replanner that does (libjitckpt does
// so when it loads).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/plan.h"
#include "runtime/stage_runner.h"

namespace jitckpt {

struct StageOutputsGrew;  // executor.h

class Replanner {
 public:
  virtual ~Replanner() = default;
  // A plan of `planned`'s stages for `arguments` (whose input key differs from the planned one),
  // at the same requested limit and strategy. Throws (TORCH_CHECK) when none fits. With
  // `at_least`, a plan for the same key whose sizes the arguments' data exceeded: the new costs
  // take each size the larger of the two (solver::largestOf), so that the plan holds for both.
  virtual c10::intrusive_ptr<Plan> replan(const Plan& planned, const ChainArguments& arguments,
                                          const Plan* at_least) const = 0;
};

// Installs the replanner for the process (the last one installed wins).
void installReplanner(std::unique_ptr<Replanner> replanner);

// `plan` when the arguments match its input key; otherwise (and always for a deferred plan) its
// plan for theirs, made once.
c10::intrusive_ptr<Plan> planForArguments(const c10::intrusive_ptr<Plan>& plan,
                                          const ChainArguments& arguments);

// After StageOutputsGrew: a plan for the arguments at the larger sizes their data gave, holding
// those of `active` (the plan the call ran) too, made once and used for their input key from
// then on. Warns, naming the stage; throws (TORCH_CHECK) when no schedule fits the limit.
c10::intrusive_ptr<Plan> planForLargerSizes(const c10::intrusive_ptr<Plan>& plan,
                                            const c10::intrusive_ptr<Plan>& active,
                                            const ChainArguments& arguments,
                                            const StageOutputsGrew& grew);

// The plans made from one plan, by input shapes.
class PlanVariants {
 public:
  c10::intrusive_ptr<Plan> find(const InputKey& key) const;
  void add(const InputKey& key, c10::intrusive_ptr<Plan> plan);
  std::vector<c10::intrusive_ptr<Plan>> all() const;  // in key order
  c10::intrusive_ptr<Plan> latest() const;            // the last one made; null when none
  // Whether a plan replaced the planned one for its own key (planForLargerSizes): read without
  // the mutex, so that the calls of a plan that never grew take no lock.
  bool replacedPlanned() const { return replaced_planned_.load(); }
  void setReplacedPlanned() { replaced_planned_.store(true); }
  std::mutex& mutex() const { return mutex_; }  // held while a variant is being made

 private:
  mutable std::mutex mutex_;
  std::map<InputKey, c10::intrusive_ptr<Plan>> plans_;
  c10::intrusive_ptr<Plan> latest_;
  std::atomic<bool> replaced_planned_{false};
};

}  // namespace jitckpt
