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

struct StageGrew;  // executor.h

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

// The bytes the limit has meant for `plan`'s module so far (0 before any plan): its own limit where
// it was planned with example inputs, and the largest of its plans for other inputs.
int64_t limitSoFar(const Plan& plan);

// After StageGrew: a plan for the arguments at the larger sizes their data gave, holding
// those of `active` (the plan the call ran) too, made once and used for their input key from
// then on. Warns, naming the stage; throws (TORCH_CHECK) when no schedule fits the limit.
c10::intrusive_ptr<Plan> planForLargerSizes(const c10::intrusive_ptr<Plan>& plan,
                                            const c10::intrusive_ptr<Plan>& active,
                                            const ChainArguments& arguments, const StageGrew& grew);

// The plans made from one plan, by input shapes: at most kMaxPlans, the least recently used
// dropped first, so that a run over many shapes keeps bounded memory (a dropped shape met again is
// planned again).
class PlanVariants {
 public:
  static constexpr size_t kMaxPlans = 16;

  // With mutex() held: the plan for `key` (null when none), which becomes the last used.
  c10::intrusive_ptr<Plan> find(const InputKey& key);
  // With mutex() held: adds `plan` as the last used, dropping the least recently used beyond
  // kMaxPlans.
  void add(const InputKey& key, c10::intrusive_ptr<Plan> plan);
  std::vector<c10::intrusive_ptr<Plan>> all() const;        // in key order
  std::vector<c10::intrusive_ptr<Plan>> heldPlans() const;  // all(), with mutex() held
  // The plan the last call ran, when it was one of these; null when it was the planned one or
  // none ran yet.
  c10::intrusive_ptr<Plan> lastUsed() const;
  // A call ran the planned plan: cheap when it did last time too (no lock).
  void usedPlanned() {
    if (!planned_used_last_.load(std::memory_order_relaxed))
      planned_used_last_.store(true, std::memory_order_relaxed);
  }
  // The largest memory limit of these plans made within their requested limit, in bytes (0 when
  // none): what a fraction of the unconstrained peak has meant so far (planner/solve.h).
  int64_t largestLimit() const { return largest_limit_.load(); }
  // Raises largestLimit() to `bytes`: what the limit meant for another rewrite of the same model
  // (an eager module's other captures), which this one's plans then keep to as well.
  void holdLimit(int64_t bytes);
  // Whether a plan replaced the planned one for its own key (planForLargerSizes): read without
  // the mutex, so that the calls of a plan that never grew take no lock.
  bool replacedPlanned() const { return replaced_planned_.load(); }
  void setReplacedPlanned() { replaced_planned_.store(true); }
  std::mutex& mutex() const { return mutex_; }  // held while a variant is being made

 private:
  struct Entry {
    c10::intrusive_ptr<Plan> plan;
    uint64_t used = 0;  // the use counter when a call last took it
  };
  void markUsed(Entry& entry);

  mutable std::mutex mutex_;
  std::map<InputKey, Entry> plans_;
  uint64_t uses_ = 0;
  c10::intrusive_ptr<Plan> last_used_;
  std::atomic<bool> planned_used_last_{false};
  std::atomic<int64_t> largest_limit_{0};
  std::atomic<bool> replaced_planned_{false};
};

}  // namespace jitckpt
