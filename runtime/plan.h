// Plan: everything the runtime needs to execute a chain under a schedule — the stage graphs and
// their metadata, the schedule, the costs it was solved with and the predictions. A torch::class_
// (jitckpt.Plan), printable and picklable, stored as an attribute of the rewritten module.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/custom_class.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "passes/partition.h"
#include "passes/solver/chain.h"
#include "passes/solver/persistent_dp.h"
#include "passes/solver/schedule.h"

namespace jitckpt {

struct PlanStage {
  std::shared_ptr<torch::jit::Graph> graph;
  size_t num_activation_inputs = 0;
  std::vector<size_t> lifted;          // indices into Plan::lifted_names
  std::vector<size_t> mutated_lifted;  // indices into Plan::lifted_names
  bool writes_activation_input = false;
  bool has_random_ops = false;
  std::string label;
};

class Plan : public torch::CustomClassHolder {
 public:
  Plan() = default;
  // Stage graphs and lifted metadata from a partition (graphs are copied).
  static c10::intrusive_ptr<Plan> fromPartition(const Partition& partition);

  std::vector<PlanStage> stages;
  std::vector<std::string> lifted_names;
  std::vector<LiftedKind> lifted_kinds;
  // Where each lifted value arrives in the op: position in lifted_tensors (tensor kinds) or in
  // lifted_scalars (Scalar kind).
  std::vector<size_t> lifted_position;

  solver::Chain costs;        // L+1 stages: the model's L stages and the terminal stage
  solver::Schedule schedule;  // over the L+1 stages
  std::string strategy = "none";
  int64_t memory_limit = 0;
  int64_t predicted_peak = 0;
  double predicted_time = 0;
  int slots = 500;
  std::vector<solver::CurvePoint> curve;           // time-memory curve of the optimal solver
  std::vector<std::vector<int64_t>> input_shapes;  // chain input shapes the plan was solved for
  int64_t unconstrained_peak = 0;                  // predicted no-checkpointing peak

  int numStages() const { return static_cast<int>(stages.size()); }
  // Throws (TORCH_CHECK) unless the schedule is valid and complete for these stages.
  void validate() const;
  // Stages and schedule, stable text for humans and FileCheck.
  std::string str() const;

  // Serialization: (metadata JSON, stage graphs as IR text, tensor constants).
  using State = std::tuple<std::string, std::vector<std::string>, std::vector<at::Tensor>>;
  State getState() const;
  static c10::intrusive_ptr<Plan> fromState(State state);

  torch::jit::Code& code(size_t stage) const;  // compiled once per process

  // The plan for other chain input shapes than the planned ones: profiled on those inputs and
  // solved at the same limit and strategy, once per shape (kept for the process, not saved).
  // Errors when the limit cannot hold the new shape.
  c10::intrusive_ptr<Plan> forInputs(const std::vector<at::Tensor>& inputs,
                                     const std::vector<at::Tensor>& lifted_tensors,
                                     const std::vector<c10::IValue>& lifted_scalars) const;

 private:
  mutable std::map<std::vector<std::vector<int64_t>>, c10::intrusive_ptr<Plan>> replans_;
  mutable std::mutex replans_mutex_;
  mutable std::vector<std::unique_ptr<torch::jit::Code>> codes_;
  mutable std::mutex codes_mutex_;
};

// The module attribute that holds the Plan in a rewritten module.
constexpr const char* kPlanAttribute = "_jitckpt_plan";
c10::ClassTypePtr planType();

}  // namespace jitckpt
