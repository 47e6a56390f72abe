// Plans for chain inputs other than the planned ones. Any schedule computes the right gradients
// whatever the shapes; only its memory depends on them, so the runtime asks for a new plan, once
// per new input shape and plan. It never profiles or solves itself: the passes library installs
// the Replanner that does (libjitckpt does so when it loads).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/plan.h"
#include "runtime/stage_runner.h"

namespace jitckpt {

class Replanner {
 public:
  virtual ~Replanner() = default;
  // A plan of `planned`'s stages for `arguments` (whose input shapes differ from the planned
  // ones), at the same limit and strategy. Throws (TORCH_CHECK) when none fits.
  virtual c10::intrusive_ptr<Plan> replan(const Plan& planned,
                                          const ChainArguments& arguments) const = 0;
};

// Installs the replanner for the process (the last one installed wins).
void installReplanner(std::unique_ptr<Replanner> replanner);

// `plan` when the arguments have its input shapes; otherwise its plan for theirs, made once.
c10::intrusive_ptr<Plan> planForArguments(const c10::intrusive_ptr<Plan>& plan,
                                          const ChainArguments& arguments);

// The plans made from one plan, by input shapes.
class PlanVariants {
 public:
  c10::intrusive_ptr<Plan> find(const std::vector<std::vector<int64_t>>& shapes) const;
  void add(const std::vector<std::vector<int64_t>>& shapes, c10::intrusive_ptr<Plan> plan);
  std::mutex& mutex() const { return mutex_; }  // held while a variant is being made

 private:
  mutable std::mutex mutex_;
  std::map<std::vector<std::vector<int64_t>>, c10::intrusive_ptr<Plan>> plans_;
};

}  // namespace jitckpt
