// Plans for chain inputs other than the planned ones. Any schedule computes the right gradients
// whatever the shapes, dtypes and devices; only its memory and time depend on them, so the runtime
// asks for a new plan, once per new input key (input_key.h) and plan, at the limit as it was given
// (a fraction stays a fraction of the new key's peak). A deferred plan (rewritten without example
// inputs) gets one for every key, the first at the first training call. The runtime never
// profiles or solves itself: the passes library installs the Replanner that does (libjitckpt does
// so when it loads).
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
  // A plan of `planned`'s stages for `arguments` (whose input key differs from the planned one),
  // at the same requested limit and strategy. Throws (TORCH_CHECK) when none fits.
  virtual c10::intrusive_ptr<Plan> replan(const Plan& planned,
                                          const ChainArguments& arguments) const = 0;
};

// Installs the replanner for the process (the last one installed wins).
void installReplanner(std::unique_ptr<Replanner> replanner);

// `plan` when the arguments match its input key; otherwise (and always for a deferred plan) its
// plan for theirs, made once.
c10::intrusive_ptr<Plan> planForArguments(const c10::intrusive_ptr<Plan>& plan,
                                          const ChainArguments& arguments);

// The plans made from one plan, by input shapes.
class PlanVariants {
 public:
  c10::intrusive_ptr<Plan> find(const InputKey& key) const;
  void add(const InputKey& key, c10::intrusive_ptr<Plan> plan);
  std::vector<c10::intrusive_ptr<Plan>> all() const;  // in key order
  c10::intrusive_ptr<Plan> latest() const;            // the last one made; null when none
  std::mutex& mutex() const { return mutex_; }        // held while a variant is being made

 private:
  mutable std::mutex mutex_;
  std::map<InputKey, c10::intrusive_ptr<Plan>> plans_;
  c10::intrusive_ptr<Plan> latest_;
};

}  // namespace jitckpt
